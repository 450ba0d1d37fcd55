"""The GPT step's work without streamed weights, as programs on the cycle-level wafer.

At PE fidelity a CS-2 runs, besides the streamed products (``ws-matmul``), these programs on a
``px`` x ``py`` sub-array with the chunk's real data, each in a simulation of its own; their
time is the run's ``span_cycles`` (the SDK's max(end) - min(start)) and their results are what
the PEs computed:

- **element-wise epilogues** (:meth:`PeSideWork.elementwise`): residual add, GELU, and the
  backward's product with GELU'. The T x W elements are cut into contiguous pieces, one per PE
  (raster order), and every PE runs the kernel's DSD instructions over its piece;
- **attention** (:meth:`PeSideWork.attention`): causal multi-head attention. The (sequence,
  head) pairs go to PE rows (pair r on row r mod py, several per row one after another), query i
  of a pair to column i mod px; a PE holds the pair's K^T and V^T. Per query row of n = i + 1 keys
  (the causal mask is the vectors' length: masked scores are never computed): scores s = q·K^T
  (dh ``fmacs`` over n keys, q's elements as register operands), scale, row max (an ``fmaxs``
  into a stride-0 accumulator), subtract, software exp, row sum (stride-0 ``fadds``); then the
  PE's row sums are inverted together (one Newton vector), each row scaled, and a = P·V as dh
  dot products (stride-0 ``fmacs``);
- **attention backward** (:meth:`PeSideWork.attention_grad`): per query row dP = dO·V^T, c =
  dP·P, dS = P ⊙ (dP - c) / sqrt(dh), dQ = dS·K (dot products), and this PE's partial dK^T +=
  q ⊗ dS, dV^T += dO ⊗ P; the partials of a row's PEs are summed by the collectives library's
  chain reduction (``reduce_fadds``) into column 0 over the fabric;
- **loss** (:meth:`PeSideWork.loss`): the token rows of logits go round-robin to the PEs; per
  row max, subtract, exp, sum; the PE's sums inverted together; dlogits = (softmax - onehot) /
  global tokens. The probability of the target is kept, and the loss value (a diagnostic: no
  gradient depends on it) is -sum(log p_target) / global tokens on the host: the PE has no log.

The ISA has no exp, division or reciprocal: :func:`exp_nonpos` and :func:`reciprocal` are
software routines of DSD instructions (docs/cluster/design.md, "Weight streaming at PE fidelity"):

- exp(x) for x <= 0: clamp x at :data:`EXP_CLAMP` (exp(-32) = 1.3e-14: far below anything
  softmax keeps), r = x / 2^K (K = :data:`EXP_HALVINGS`, so r in [-0.5, 0]), expm1(r) = r·q(r)
  with q the degree-7 Taylor polynomial of expm1(r)/r (Horner, ``fmuls`` + ``fadds``), one
  squaring in expm1 form, e <- e·(e + 2) (which keeps expm1's relative error instead of doubling
  it), then y = 1 + e and K - 1 squarings y <- y·y. 24 instructions; relative error below
  :data:`EXP_REL_ERROR` over [-32, 0] (measured against numpy in tests/test_cluster_pe.py: each
  direct squaring doubles the relative error, so it is about 2^5 times FP32's);
- 1/d for d in a known [lo, hi]: y0 = 2 / (lo + hi), then Newton steps y <- y·(2 - d·y)
  (``fmuls``, ``fsubs``, ``fmuls``), as many as :func:`newton_steps` says for the relative error
  |1 - d·y| to fall below 2^-24 from its start (hi - lo) / (hi + lo) (it squares at each step).
  Softmax sums lie in [1, n] (the row's largest term is exp(0) = 1); GELU's in (1, 2].

GELU is computed branch-free as u·sigma(2z), z = sqrt(2/pi)·(u + 0.044715·u^3) (= 0.5·u·(1 +
tanh z)); sigma(2z) = b / (a + b) with m = max(2z, 0), a = exp(-m), b = exp(2z - m), both
exponents <= 0 and a + b in (1, 2]. GELU'(u) = sigma + 2u·sigma·(1 - sigma)·c·(1 + 3·0.044715·u^2),
with 1 - sigma = a / (a + b) (no cancellation where sigma is near 1).

Scalar operands (a query's element, a row's max or reciprocal) are read from SRAM into the
instruction as register values, as the SUMMA and SpMV programs read theirs; the PE model has no
scalar instructions and these loads cost nothing here. Moving activations between the
products' layout (tokens on PE rows) and these programs' (pairs on rows, queries on columns) is
not modelled, as moving them between two products is not: each program starts with its data in
place.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pe.dsd import MemDsd
from pe.program import Layout
from simcore.sim import Simulation, SubRuns
from wafer.collectives import Collectives
from wafer.system import Wafer, WaferConfig

#: exp's argument floor: exp(-32) = 1.3e-14 is returned for anything lower.
EXP_CLAMP = -32.0
#: Halvings of the argument before the polynomial (r = x / 2^K in [-0.5, 0]); as many squarings.
EXP_HALVINGS = 6
#: Of those squarings, how many run in expm1 form before 1 is added (the rest square exp):
#: measured over [-32, 0], 1 gives the smallest worst relative error (6.5e-6; 0: 7.1e-6, 2:
#: 1.0e-5, 6: the absolute error is smallest, 8.5e-8, but tiny results lose all relative
#: accuracy, which the loss's log of the target probability needs).
EXPM1_SQUARINGS = 1
#: Coefficients of q(r) = expm1(r) / r = sum r^i / (i + 1)!, i = 0..7 (truncation < 1e-8 on
#: [-0.5, 0]).
EXP_POLY = tuple(1.0 / math.factorial(i + 1) for i in range(8))
#: The software exp's worst relative error over [-32, 0] is below this (measured 6.5e-6 on 2,001
#: points, tests/test_cluster_pe.py).
EXP_REL_ERROR = 1e-5
#: GELU's constants (the tanh form of gpt.gelu).
GELU_C = math.sqrt(2 / math.pi)
GELU_K = 0.044715
#: Local task ids.
MAIN, DONE = 10, 11


def sub(d: MemDsd, offset: int, n: int, stride: int = 1) -> MemDsd:
    """A 1-D descriptor of ``n`` elements of ``d``'s buffer from element ``offset``."""
    return dataclasses.replace(d, shape=(n,), strides=(stride,), offset=d.offset + offset)


def acc(d: MemDsd, offset: int, n: int) -> MemDsd:
    """A stride-0 accumulator: element ``offset`` of ``d``, walked ``n`` times."""
    return sub(d, offset, n, 0)


# -- software routines -------------------------------------------------------------------------
def exp_nonpos(t: Any, x: MemDsd, tmp: MemDsd) -> None:
    """x <- exp(x) for x <= 0, in place; ``tmp`` is scratch of x's length (24 instructions)."""
    t.fmaxs(x, x, EXP_CLAMP)
    t.fmuls(x, x, 2.0**-EXP_HALVINGS)
    c = EXP_POLY
    t.fmuls(tmp, x, c[7])
    t.fadds(tmp, tmp, c[6])
    for coef in c[5::-1]:
        t.fmuls(tmp, tmp, x)
        t.fadds(tmp, tmp, coef)
    t.fmuls(x, tmp, x)  # expm1(r)
    for _ in range(EXPM1_SQUARINGS):
        t.fadds(tmp, x, 2.0)
        t.fmuls(x, x, tmp)  # expm1(2r) = expm1(r)·(expm1(r) + 2)
    t.fadds(x, x, 1.0)
    for _ in range(EXP_HALVINGS - EXPM1_SQUARINGS):
        t.fmuls(x, x, x)


def newton_steps(lo: float, hi: float) -> int:
    """Newton steps taking 1/d from y0 = 2/(lo + hi) to a relative error below 2^-24 for every
    d in [lo, hi] (the error e = 1 - d·y squares at each step)."""
    e = (hi - lo) / (hi + lo)
    steps = 0
    while e > 2.0**-24:
        e *= e
        steps += 1
    return steps + 1  # one more against FP32 rounding of the last steps


def reciprocal(t: Any, y: MemDsd, d: MemDsd, tmp: MemDsd, lo: float, hi: float) -> None:
    """y <- 1/d elementwise for d in [lo, hi] (Newton's iteration on fmuls and fsubs)."""
    t.fmovs(y, 2.0 / (lo + hi))
    for _ in range(newton_steps(lo, hi)):
        t.fmuls(tmp, d, y)
        t.fsubs(tmp, 2.0, tmp)
        t.fmuls(y, y, tmp)


def sigma2z(t: Any, s: MemDsd, u: MemDsd, z: MemDsd, m: MemDsd, a: MemDsd, b: MemDsd) -> None:
    """s <- sigma(2z(u)) = 0.5·(1 + tanh z), z = c·(u + k·u^3); z, m, a, b scratch."""
    t.fmuls(z, u, u)
    t.fmuls(z, z, u)
    t.fmuls(z, z, GELU_K)
    t.fadds(z, z, u)
    t.fmuls(z, z, 2 * GELU_C)  # 2z
    t.fmaxs(m, z, 0.0)
    t.fnegs(a, m)
    exp_nonpos(t, a, s)  # exp(-m)
    t.fsubs(b, z, m)
    exp_nonpos(t, b, s)  # exp(2z - m)
    t.fadds(z, a, b)  # in (1, 2]
    reciprocal(t, m, z, s, 1.0, 2.0)
    t.fmuls(s, b, m)


# -- element-wise kernels (dst, inputs, scratch) -----------------------------------------------
def _add(t: Any, out: MemDsd, ins: list[MemDsd], tmp: list[MemDsd]) -> None:
    t.fadds(out, ins[0], ins[1])


def _gelu(t: Any, out: MemDsd, ins: list[MemDsd], tmp: list[MemDsd]) -> None:
    (u,) = ins
    sigma2z(t, out, u, *tmp[:4])
    t.fmuls(out, out, u)


def _gelu_grad_mul(t: Any, out: MemDsd, ins: list[MemDsd], tmp: list[MemDsd]) -> None:
    """out = dx · GELU'(u)."""
    dx, u = ins
    s, t1, t2 = tmp[4], tmp[0], tmp[1]
    sigma2z(t, s, u, *tmp[:4])
    t.fmuls(t1, tmp[2], tmp[1])  # 1 - sigma = a / (a + b), without cancelling
    t.fmuls(t1, t1, s)  # sigma (1 - sigma)
    t.fmuls(t2, u, u)
    t.fmuls(t2, t2, 6 * GELU_C * GELU_K)
    t.fadds(t2, t2, 2 * GELU_C)
    t.fmuls(t2, t2, u)  # 2c·u·(1 + 3k·u^2)
    t.fmuls(t1, t1, t2)
    t.fadds(t1, t1, s)
    t.fmuls(out, dx, t1)


#: Element-wise kernels: name -> (inputs, scratch vectors, function).
KERNELS: dict[str, tuple[int, int, Callable[..., None]]] = {
    "add": (2, 0, _add),
    "gelu": (1, 4, _gelu),
    "gelu-grad": (2, 5, _gelu_grad_mul),
}


def _vals(pe: Any, d: MemDsd) -> list[float]:
    """Values loaded from SRAM into registers (scalar operands)."""
    return [float(v) for v in pe.read(d)]


# -- the programs -------------------------------------------------------------------------------
@dataclasses.dataclass
class Stats:
    """Runs and events of one CS-2's side-work programs, by kind."""

    runs: int = 0
    events: int = 0
    cycles: dict[str, int] = dataclasses.field(default_factory=dict)
    data_bytes: dict[str, int] = dataclasses.field(default_factory=dict)  # busiest PE's SRAM


def data_words(
    tokens: int, hidden: int, heads: int, sequence: int, vocab: int, px: int, py: int
) -> dict[str, int]:
    """FP32 words of data the busiest PE allocates in each program (what :class:`PeSideWork`
    allocates: the element-wise programs on the widest activation, T x 4H)."""
    pes = px * py
    per = -(-tokens * 4 * hidden // pes)
    pairs = tokens // sequence * heads
    dh, s = hidden // heads, sequence
    r = -(-pairs // py)
    m = r * -(-s // px)
    rows = -(-tokens // pes)
    return {
        "add": 3 * per,
        "gelu": 6 * per,
        "gelu-grad": 8 * per,
        "attention": 2 * r * dh * s + 2 * m * dh + m * s + 2 * m + max(s, m) + 1,
        "attention-grad": 4 * r * dh * s + 3 * m * dh + m * s + s + 1,
        "loss": rows * vocab + 3 * rows + max(vocab, rows) + 1,
    }


class PeSideWork:
    """A CS-2's work without streamed weights on a ``px`` x ``py`` sub-array of the cycle-level
    wafer; every method returns its results and the run's cycles."""

    def __init__(self, px: int, py: int, wafer: WaferConfig, runs: SubRuns) -> None:
        self.px, self.py, self.wafer, self.sub_runs = px, py, wafer, runs
        self.stats = Stats()

    def _run(self, kind: str, code: Callable[[Any], None]) -> Wafer:
        def build(sim: Simulation) -> Wafer:
            layout = Layout(self.px, self.py)
            layout.set_rectangle_code(code)
            return Wafer(sim, self.wafer, layout)

        wafer, result = self.sub_runs.run(f"PE-level {kind} on {self.px}x{self.py} PEs", build)
        self.stats.runs += 1
        self.stats.events += result.events
        data = max(pe.ce.sram.used_bytes - pe.ce.sram.code_bytes for pe in wafer.pes.values())
        self.stats.data_bytes[kind] = max(self.stats.data_bytes.get(kind, 0), data)
        return wafer

    def _count(self, kind: str, cycles: int) -> int:
        self.stats.cycles[kind] = self.stats.cycles.get(kind, 0) + cycles
        return cycles

    # element-wise --------------------------------------------------------------------------
    def elementwise(self, kind: str, *inputs: np.ndarray) -> tuple[np.ndarray, int]:
        """``kind`` of :data:`KERNELS` over same-shaped FP32 arrays: (result, cycles)."""
        n_in, n_tmp, fn = KERNELS[kind]
        assert len(inputs) == n_in, kind
        shape = inputs[0].shape
        flat = [np.ascontiguousarray(x, np.float32).reshape(-1) for x in inputs]
        total = flat[0].size
        pes = self.px * self.py
        per = -(-total // pes)
        outs: dict[int, tuple[MemDsd, Any, int, int]] = {}

        def code(pe: Any) -> None:
            k = pe.y * self.px + pe.x
            lo, hi = k * per, min(total, (k + 1) * per)
            if lo >= hi:
                return
            ins = [pe.array(f"in{i}", x[lo:hi]) for i, x in enumerate(flat)]
            out = pe.zeros("out", hi - lo)
            tmp = [pe.zeros(f"t{i}", hi - lo) for i in range(n_tmp)]
            outs[k] = (out, pe, lo, hi)

            @pe.local_task(id=MAIN)
            def main(t: Any) -> None:
                t.mark("start")
                fn(t, out, ins, tmp)
                t.mark("end")

            pe.start(main)

        wafer = self._run(kind, code)
        result = np.zeros(total, np.float32)
        for out, pe, lo, hi in outs.values():
            result[lo:hi] = pe.read(out)
        return result.reshape(shape), self._count(kind, wafer.span_cycles())

    # attention -------------------------------------------------------------------------------
    def _pairs(self, x: np.ndarray, seqs: int, heads: int) -> np.ndarray:
        """[T][H] -> [pairs][S][dh], pair = sequence·heads + head."""
        t, h = x.shape
        s = t // seqs
        dh = h // heads
        return x.reshape(seqs, s, heads, dh).transpose(0, 2, 1, 3).reshape(-1, s, dh)

    def _merge(self, x: np.ndarray, seqs: int) -> np.ndarray:
        pairs, s, dh = x.shape
        heads = pairs // seqs
        return x.reshape(seqs, heads, s, dh).transpose(0, 2, 1, 3).reshape(seqs * s, heads * dh)

    def _rows_of(self, y: int, npairs: int) -> list[int]:
        return list(range(y, npairs, self.py))

    def attention(
        self, qkv: np.ndarray, seqs: int, heads: int
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Causal multi-head attention: (a [T][H], P [seqs][heads][S][S], cycles)."""
        h = qkv.shape[1] // 3
        q, k, v = (self._pairs(qkv[:, i * h : (i + 1) * h], seqs, heads) for i in range(3))
        npairs, s, dh = q.shape
        scale = float(np.float32(1.0 / math.sqrt(dh)))
        got: list[tuple[Any, int, int, MemDsd, MemDsd]] = []

        def code(pe: Any) -> None:
            pairs = self._rows_of(pe.y, npairs)
            queries = list(range(pe.x, s, self.px))
            if not pairs or not queries:
                return
            kt = {r: pe.array(f"kt{r}", k[r].T.reshape(-1)) for r in pairs}
            vt = {r: pe.array(f"vt{r}", v[r].T.reshape(-1)) for r in pairs}
            rows = [(r, i) for r in pairs for i in queries]
            qb = pe.array("q", np.concatenate([q[r, i] for r, i in rows]))
            ob = pe.zeros("o", len(rows) * dh)
            pb = pe.zeros("p", len(rows) * s)
            sums = pe.zeros("sums", len(rows))
            rinv = pe.zeros("rinv", len(rows))
            tmp = pe.zeros("tmp", max(s, len(rows)))
            mx = pe.zeros("mx", 1)
            for j, (r, i) in enumerate(rows):
                got.append((pe, r, i, sub(ob, j * dh, dh), sub(pb, j * s, i + 1)))

            @pe.local_task(id=MAIN)
            def main(t: Any) -> None:
                t.mark("start")
                for j, (r, i) in enumerate(rows):
                    n = i + 1
                    sc = sub(pb, j * s, n)
                    qv = _vals(pe, sub(qb, j * dh, dh))
                    t.fmuls(sc, sub(kt[r], 0, n), qv[0])
                    for d in range(1, dh):
                        t.fmacs(sc, sc, sub(kt[r], d * s, n), qv[d])
                    t.fmuls(sc, sc, scale)
                    t.fmovs(mx, -3.0e38)
                    t.fmaxs(acc(mx, 0, n), acc(mx, 0, n), sc)
                    t.fsubs(sc, sc, _vals(pe, mx)[0])
                    exp_nonpos(t, sc, sub(tmp, 0, n))
                    t.fadds(acc(sums, j, n), acc(sums, j, n), sc)
                m = len(rows)
                reciprocal(t, rinv, sums, sub(tmp, 0, m), 1.0, float(s))
                r_vals = _vals(pe, rinv)
                for j, (r, i) in enumerate(rows):
                    n = i + 1
                    pr = sub(pb, j * s, n)
                    t.fmuls(pr, pr, r_vals[j])
                    for d in range(dh):
                        o = acc(ob, j * dh + d, n)
                        t.fmacs(o, o, pr, sub(vt[r], d * s, n))
                t.mark("end")

            pe.start(main)

        wafer = self._run("attention", code)
        a = np.zeros((npairs, s, dh), np.float32)
        p = np.zeros((npairs, s, s), np.float32)
        for pe, r, i, o, pr in got:
            a[r, i] = pe.read(o)
            p[r, i, : i + 1] = pe.read(pr)
        probs = p.reshape(seqs, heads, s, s)
        return self._merge(a, seqs), probs, self._count("attention", wafer.span_cycles())

    def attention_grad(
        self, da: np.ndarray, qkv: np.ndarray, p: np.ndarray, seqs: int, heads: int
    ) -> tuple[np.ndarray, int]:
        """d qkv [T][3H] from d a [T][H] and the forward's probabilities: (dqkv, cycles)."""
        h = qkv.shape[1] // 3
        q, k, v = (self._pairs(qkv[:, i * h : (i + 1) * h], seqs, heads) for i in range(3))
        do = self._pairs(da, seqs, heads)
        npairs, s, dh = q.shape
        probs = p.reshape(npairs, s, s)
        scale = float(np.float32(1.0 / math.sqrt(dh)))
        dq_got: list[tuple[Any, int, int, MemDsd]] = []
        dkv_got: dict[int, tuple[Any, list[int], MemDsd]] = {}
        px = self.px

        def code(pe: Any) -> None:
            pairs = self._rows_of(pe.y, npairs)
            if not pairs:
                return
            queries = list(range(pe.x, s, px))
            coll = Collectives(pe, y_colours=None) if px > 1 else None
            kt = {r: pe.array(f"kt{r}", k[r].T.reshape(-1)) for r in pairs}
            vt = {r: pe.array(f"vt{r}", v[r].T.reshape(-1)) for r in pairs}
            # this PE's partial dK^T and dV^T of every pair of its row, summed along the row
            grads = pe.zeros("dkv", len(pairs) * 2 * dh * s)
            base = {r: 2 * dh * s * n for n, r in enumerate(pairs)}
            if pe.x == 0:
                dkv_got[pe.y] = (pe, pairs, grads)
            rows = [(r, i) for r in pairs for i in queries]
            if rows:
                qb = pe.array("q", np.concatenate([q[r, i] for r, i in rows]))
                dob = pe.array("do", np.concatenate([do[r, i] for r, i in rows]))
                pb = pe.array("p", np.concatenate([probs[r, i] for r, i in rows]))
                dqb = pe.zeros("dq", len(rows) * dh)
                dp = pe.zeros("dp", s)
                cw = pe.zeros("c", 1)
                for j, (r, i) in enumerate(rows):
                    dq_got.append((pe, r, i, sub(dqb, j * dh, dh)))

            @pe.local_task(id=MAIN)
            def main(t: Any) -> None:
                t.mark("start")
                for j, (r, i) in enumerate(rows):
                    n = i + 1
                    pr, ds = sub(pb, j * s, n), sub(dp, 0, n)
                    dov = _vals(pe, sub(dob, j * dh, dh))
                    qv = _vals(pe, sub(qb, j * dh, dh))
                    t.fmuls(ds, sub(vt[r], 0, n), dov[0])  # dP = dO · V^T
                    for d in range(1, dh):
                        t.fmacs(ds, ds, sub(vt[r], d * s, n), dov[d])
                    t.fmovs(cw, 0.0)
                    t.fmacs(acc(cw, 0, n), acc(cw, 0, n), ds, pr)  # c = dP · P
                    t.fsubs(ds, ds, _vals(pe, cw)[0])
                    t.fmuls(ds, ds, pr)
                    t.fmuls(ds, ds, scale)  # dS
                    g = base[r]
                    for d in range(dh):
                        o = acc(dqb, j * dh + d, n)
                        t.fmacs(o, o, ds, sub(kt[r], d * s, n))  # dQ = dS · K
                        dk = sub(grads, g + d * s, n)
                        t.fmacs(dk, dk, ds, qv[d])  # dK^T += q ⊗ dS
                        dv = sub(grads, g + (dh + d) * s, n)
                        t.fmacs(dv, dv, pr, dov[d])  # dV^T += dO ⊗ P
                if coll is not None:
                    coll.x.reduce_fadds(t, 0, grads, DONE)
                else:
                    t.activate(DONE)

            @pe.local_task(id=DONE)
            def done(t: Any) -> None:
                t.mark("end")

            pe.start(main)

        wafer = self._run("attention-grad", code)
        dq = np.zeros((npairs, s, dh), np.float32)
        dk = np.zeros_like(dq)
        dv = np.zeros_like(dq)
        for pe, r, i, d in dq_got:
            dq[r, i] = pe.read(d)
        for pe, pairs, grads in dkv_got.values():
            g = pe.read(grads).reshape(len(pairs), 2, dh, s)
            for n, r in enumerate(pairs):
                dk[r] = g[n, 0].T
                dv[r] = g[n, 1].T
        out = np.concatenate([self._merge(x, seqs) for x in (dq, dk, dv)], axis=1)
        return out, self._count("attention-grad", wafer.span_cycles())

    # loss ------------------------------------------------------------------------------------
    def loss(
        self, logits: np.ndarray, targets: np.ndarray, global_tokens: int
    ) -> tuple[float, np.ndarray, int]:
        """(summed loss / global tokens, d logits, cycles) of the next-token cross-entropy."""
        tokens, vocab = logits.shape
        pes = self.px * self.py
        got: list[tuple[Any, list[int], MemDsd, MemDsd]] = []
        inv = float(np.float32(1.0 / global_tokens))

        def code(pe: Any) -> None:
            k = pe.y * self.px + pe.x
            rows = list(range(k, tokens, pes))
            if not rows:
                return
            lb = pe.array("logits", logits[rows].reshape(-1))
            sums = pe.zeros("sums", len(rows))
            rinv = pe.zeros("rinv", len(rows))
            pt = pe.zeros("ptarget", len(rows))
            tmp = pe.zeros("tmp", max(vocab, len(rows)))
            mx = pe.zeros("mx", 1)
            got.append((pe, rows, lb, pt))
            tg = [int(targets[r]) for r in rows]

            @pe.local_task(id=MAIN)
            def main(t: Any) -> None:
                t.mark("start")
                for j in range(len(rows)):
                    row = sub(lb, j * vocab, vocab)
                    t.fmovs(mx, -3.0e38)
                    t.fmaxs(acc(mx, 0, vocab), acc(mx, 0, vocab), row)
                    t.fsubs(row, row, _vals(pe, mx)[0])
                    exp_nonpos(t, row, tmp)
                    t.fadds(acc(sums, j, vocab), acc(sums, j, vocab), row)
                reciprocal(t, rinv, sums, sub(tmp, 0, len(rows)), 1.0, float(vocab))
                r_vals = _vals(pe, rinv)
                for j in range(len(rows)):
                    row = sub(lb, j * vocab, vocab)
                    t.fmuls(row, row, r_vals[j])
                    cell = sub(lb, j * vocab + tg[j], 1)
                    t.fmovs(sub(pt, j, 1), cell)
                    t.fsubs(cell, cell, 1.0)
                    t.fmuls(row, row, inv)
                t.mark("end")

            pe.start(main)

        wafer = self._run("loss", code)
        d = np.zeros((tokens, vocab), np.float32)
        p_target = np.zeros(tokens, np.float32)
        for pe, rows, lb, pt in got:
            d[rows] = pe.read(lb).reshape(len(rows), vocab)
            p_target[rows] = pe.read(pt)
        loss = float(-np.log(p_target).sum()) / global_tokens
        return loss, d, self._count("loss", wafer.span_cycles())
