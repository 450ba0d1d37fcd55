"""Weight-streamed sparse matmul on the wafer (fwd and bwd flavours): kind ``ws-matmul``.

X1 [BS][H1] = X0 [BS][H0] · W^T with W [H1][H0] sparse (density D, seeded), lowered as the spec's
weight streaming ("one sparse input, dense output"):

- Activations X0 live on a px x py PE array: H0 split in blocks over the x columns, the tokens
  BS in blocks over the y rows. PE (x, y) keeps its block feature-major (``xloc[f][token]``) so
  the tokens of one input feature are contiguous for ``fmacs``.
- W streams in from the north edge, one edge input per column (colour ``WEIGHT``; every router
  of the column has rx N, tx RAMP + S: router multicast down the column). Row r of W is sent as
  its NON-ZEROS ONLY, each to the column holding its input feature, so zeros never travel.
- Encoding: a non-zero is two 32-bit wavelets: an index word, then the FP32 weight. The index
  word carries the local feature index in bits 0-15 and an end-of-row flag (PSUM) in bit 16; a
  column with no weight in a row gets one index word with index 0xFFFF and the flag. (The index
  word travels as an FP32 word holding an integer, exact below 2^24.) We keep FP32 weights, so
  the real WSE's 16-bit index packed beside an FP16 weight in one wavelet is not used.
- Each wavelet triggers the data task bound to ``WEIGHT``: an index word is latched (a PE
  register); a weight runs ``fmacs(acc, acc, xloc[f], w)`` over the PE's local tokens.
- The PSUM command is in-band: on the flagged word the data task blocks itself and activates the
  local task ``PSUM``. A control wavelet on the colour cannot do this job in today's model: the
  CE activates a control task the cycle its wavelet comes down the ramp, ahead of data wavelets
  still waiting in the input queue, and two such wavelets arriving before the task runs collapse
  into one activation (see docs/ws-matmul.md).
- ``PSUM`` swaps to the other of two accumulators and unblocks the data task (the next row's
  FMACs overlap this row's reduction), blocks itself until the reduction is done, and starts a
  chain reduction along the PE row towards the owner column k = r // (H1/px) of output feature
  r: PEs west of k stream east (colours ``EAST``, alternating by x parity), PEs east of k stream
  west (``WEST``); a relay PE adds its partial sums into the passing stream with an async
  ``fadds`` (fabric + memory -> fabric); the chain ends start it with ``mov32``. The owner adds
  the incoming streams into its accumulator (west one, then east one) and copies the result
  into ``x1loc[r % (H1/px)]``: outputs end in the inputs' layout. The completion tasks run at
  high priority so they are not starved by the next row's weights. All routes are static; no
  teardown is needed because each row's streams have exact lengths.

Timing is the PEs' timestamp marks, ``cycles = max(end) - min(start)``. Every cost comes from the
PE and fabric mechanisms (fmacs cost model, task switches, DSD set-up, ramp and hop rates).
The analytical model (:func:`model`) lives beside the simulation and never feeds it.

``bwd`` (activation gradient) runs the same lowering with W^T streamed; see :func:`lowered`.
Left out: the wgrad flavour; FSUM as a distinct command (the owner
is known from r, so one command serves); a ring reduction (a chain towards the owner is used).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pe.dsd import MemDsd
from pe.program import Layout
from pe.wafer import MAX_WIDTH, Wafer, WaferConfig
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from workloads import registry
from workloads.wse import t_fmac_reference

#: Colours: the weight stream, and two per reduction direction (alternating by x parity).
WEIGHT = 5
EAST = (6, 7)
WEST = (8, 9)
#: Input queues: weights; the east-flowing and west-flowing chains' inputs. Output queue of sends.
Q_WEIGHT, Q_EAST_IN, Q_WEST_IN, Q_OUT = 0, 3, 4, 2
#: Local tasks: start, the owner's second add, end of a row's reduction, PSUM.
START, ROOT_EAST, RED_DONE, PSUM = 10, 11, 12, 13
WORD_BYTES = 4
#: Index word: bits 0-15 the local feature index (EMPTY = the column has no weight in this row),
#: bit 16 set on the row's last word (the data task then blocks itself until PSUM).
LAST, EMPTY = 1 << 16, 0xFFFF
FLAVOURS = ("fwd", "bwd")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WsMatmulParams(registry.ScenarioParams):
    flavour: str = param(
        "fwd", "which product: fwd (X1 = X0·W^T) or bwd (dX0 = dX1·W); wgrad is not built"
    )
    rows: int = param(16, "output features H1 (rows of W)", min=1)
    cols: int = param(16, "input features H0 (columns of W)", min=1)
    tokens: int = param(16, "tokens BS (batch x sequence)", min=1)
    density: float = param(0.25, "fraction of non-zero weights (seeded Bernoulli mask)")
    px: int = param(4, "PE columns; H0 and H1 are split over them", min=1, max=MAX_WIDTH)
    py: int = param(2, "PE rows; the tokens are split over them", min=1, max=MAX_WIDTH)
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    def check(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ConfigError("flavour", self.flavour, "is not built", allowed=", ".join(FLAVOURS))
        if not 0.0 < self.density <= 1.0:
            raise ConfigError("density", self.density, "must be in (0, 1]", allowed="(0, 1]")
        for name, n, parts, axis in (
            ("cols", self.cols, self.px, "px"),
            ("rows", self.rows, self.px, "px"),
            ("tokens", self.tokens, self.py, "py"),
        ):
            if n % parts:
                raise ConfigError(name, n, f"must be a multiple of {axis} = {parts}")
        words = (self.cols // self.px + self.rows // self.px + 2) * (self.tokens // self.py)
        free = self.wafer.pe.sram_bytes - self.wafer.pe.code_bytes
        if words * WORD_BYTES > free:
            raise ConfigError(
                "tokens",
                self.tokens,
                f"a PE needs {words * WORD_BYTES:,} B for X0, X1 and two accumulators but has "
                f"{free:,} B beside the code",
            )

    @property
    def f0(self) -> int:
        return self.cols // self.px

    @property
    def f1(self) -> int:
        return self.rows // self.px

    @property
    def bt(self) -> int:
        return self.tokens // self.py


def inputs(p: WsMatmulParams) -> tuple[np.ndarray, np.ndarray]:
    """The seeded activations X0 [BS][H0] and sparse weights W [H1][H0] (FP32)."""
    rng = np.random.default_rng([p.seed, 7])
    x0 = rng.standard_normal((p.tokens, p.cols)).astype(np.float32)
    w = rng.standard_normal((p.rows, p.cols)).astype(np.float32)
    mask = rng.random((p.rows, p.cols)) < p.density
    return x0, np.where(mask, w, np.float32(0)).astype(np.float32)


def lowered(p: WsMatmulParams) -> tuple[WsMatmulParams, np.ndarray, np.ndarray]:
    """The forward-shaped problem a flavour runs as: (params, X_in, M) with X_out = X_in · M^T.

    ``bwd`` computes the activation gradient dX0 [BS][H0] = dX1 [BS][H1] · W = dX1 · (W^T)^T:
    the same lowering with the transposed weights streamed (MemoryX sends W in transpose order),
    H1 features in and H0 out. The same seeded W as ``fwd``; dX1 is seeded like X0.
    """
    x0, w = inputs(p)
    if p.flavour == "fwd":
        return p, x0, w
    dx1 = np.random.default_rng([p.seed, 8]).standard_normal((p.tokens, p.rows))
    q = dataclasses.replace(p, flavour="fwd", rows=p.cols, cols=p.rows)
    return q, dx1.astype(np.float32), np.ascontiguousarray(w.T)


def column_stream(p: WsMatmulParams, w: np.ndarray, x: int) -> list[Any]:
    """What column x's edge input carries: per row, (index word, weight) per non-zero, the last
    index word flagged PSUM; a row without non-zeros in the column is one flagged empty word."""
    out: list[Any] = []
    block = w[:, x * p.f0 : (x + 1) * p.f0]
    for r in range(p.rows):
        nz = np.flatnonzero(block[r])
        for k, j in enumerate(nz):
            out += [float(int(j) | (LAST if k == len(nz) - 1 else 0)), float(block[r, j])]
        if not len(nz):
            out.append(float(EMPTY | LAST))
    return out


@dataclasses.dataclass
class PeState:
    """A PE's registers between tasks."""

    index: int = -1  # latched feature index; -1 = the next wavelet is an index
    cur: int = 0  # accumulator the FMACs write
    row: int = 0  # output feature whose reduction runs next


@dataclasses.dataclass
class WsRun:
    wafer: Wafer
    x0: np.ndarray
    w: np.ndarray
    x1: dict[tuple[int, int], MemDsd]


def build(sim: Simulation, p: WsMatmulParams) -> WsRun:
    p, x0, w = lowered(p)
    run = WsRun(None, x0, w, {})  # type: ignore[arg-type]
    f0, f1, bt, px, py = p.f0, p.f1, p.bt, p.px, p.py

    def code(pe: Any) -> None:
        x, y = pe.x, pe.y
        st = PeState()
        block = x0[y * bt : (y + 1) * bt, x * f0 : (x + 1) * f0]
        xloc = pe.array("x0", np.ascontiguousarray(block.T).reshape(-1))
        x1loc = pe.zeros("x1", f1 * bt)
        run.x1[(x, y)] = x1loc
        accs = (pe.zeros("acc0", bt), pe.zeros("acc1", bt))
        pe.route(WEIGHT, rx=["N"], tx=["RAMP"] + (["S"] if y < py - 1 else []))
        if x < px - 1:
            pe.route(EAST[x % 2], rx=["RAMP"], tx=["E"])
            pe.route(WEST[(x + 1) % 2], rx=["E"], tx=["RAMP"])
        if x > 0:
            pe.route(EAST[(x + 1) % 2], rx=["W"], tx=["RAMP"])
            pe.route(WEST[x % 2], rx=["RAMP"], tx=["W"])
        from_west = pe.fabin(EAST[(x + 1) % 2], bt, Q_EAST_IN) if x > 0 else None
        from_east = pe.fabin(WEST[(x + 1) % 2], bt, Q_WEST_IN) if x < px - 1 else None
        to_east = pe.fabout(EAST[x % 2], bt, Q_OUT) if x < px - 1 else None
        to_west = pe.fabout(WEST[x % 2], bt, Q_OUT) if x > 0 else None

        @pe.local_task(id=START)
        def start(t: Any) -> None:
            t.mark("start")

        @pe.data_task(colour=WEIGHT, queue=Q_WEIGHT)
        def weight(t: Any, value: float) -> None:
            if st.index < 0:
                st.index = int(value)
                if st.index & 0xFFFF != EMPTY:
                    return
            else:
                acc, f = accs[st.cur], st.index & 0xFFFF
                t.fmacs(acc, acc, xloc.with_offset(f * bt).with_length(bt), value)
            if st.index & LAST:  # the row is in: PSUM, and wait for it to swap accumulators
                t.block(WEIGHT)
                t.activate(PSUM)
            st.index = -1

        @pe.local_task(id=PSUM)
        def psum(t: Any) -> None:
            acc = accs[st.cur]
            st.cur ^= 1
            t.unblock(WEIGHT)
            t.block(PSUM)  # the next PSUM waits for this row's reduction
            owner = st.row // f1
            if x < owner:
                if from_west is None:
                    t.mov32(to_east, acc, async_=True, activate=RED_DONE)
                else:
                    t.fadds(to_east, from_west, acc, async_=True, activate=RED_DONE)
            elif x > owner:
                if from_east is None:
                    t.mov32(to_west, acc, async_=True, activate=RED_DONE)
                else:
                    t.fadds(to_west, from_east, acc, async_=True, activate=RED_DONE)
            elif from_west is not None:
                t.fadds(acc, acc, from_west, async_=True, activate=ROOT_EAST)
            else:
                t.activate(ROOT_EAST)

        @pe.local_task(id=ROOT_EAST, priority="high")
        def root_east(t: Any) -> None:
            acc = accs[st.cur ^ 1]
            if from_east is not None:
                t.fadds(acc, acc, from_east, async_=True, activate=RED_DONE)
            else:
                t.activate(RED_DONE)

        @pe.local_task(id=RED_DONE, priority="high")
        def reduced(t: Any) -> None:
            acc = accs[st.cur ^ 1]
            if st.row // f1 == x:
                t.fmovs(x1loc.with_offset((st.row % f1) * bt).with_length(bt), acc)
            t.fmovs(acc, 0.0)
            st.row += 1
            if st.row == p.rows:
                t.mark("end")
            t.unblock(PSUM)

        pe.start(start)

    layout = Layout(px, py)
    layout.set_rectangle_code(code)
    for x in range(px):
        layout.add_edge_input(x, 0, "N", WEIGHT, column_stream(p, w, x))
    run.wafer = Wafer(sim, p.wafer, layout)
    return run


def result_matrix(p: WsMatmulParams, run: WsRun) -> np.ndarray:
    """X1 [BS][H1] gathered from the PEs."""
    x1 = np.zeros((p.tokens, p.rows), np.float32)
    for (x, y), dsd in run.x1.items():
        loc = dsd.read(run.wafer.ce(x, y).sram).reshape(p.f1, p.bt)
        x1[y * p.bt : (y + 1) * p.bt, x * p.f1 : (x + 1) * p.f1] = loc.T
    return x1


def metrics(sim: Simulation, p: WsMatmulParams, run: WsRun, result: RunResult) -> dict:
    flavour = p.flavour
    p = lowered(p)[0]
    got = result_matrix(p, run)
    want = run.x0.astype(np.float64) @ run.w.astype(np.float64).T
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    cycles = run.wafer.span_cycles()
    nnz = int(np.count_nonzero(run.w))
    ports = [run.wafer.edge(x, 0, "N") for x in range(p.px)]
    words = sum(port.words for port in ports)
    return {
        "flavour": flavour,
        "cycles": cycles,
        "nnz": nnz,
        "correct": bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1.0))),
        "max_abs_error": err,
        # FMAC elements done per PE-cycle against the PE's FP32 peak of one fmacs element/cycle
        "fmac_utilisation": nnz * p.tokens / (cycles * p.px * p.py) if cycles else 0.0,
        "edge_words": words,
        "edge_bytes_per_cycle": WORD_BYTES * words / cycles if cycles else 0.0,
        "edge_port_bytes_per_cycle_max": max(port.bytes_per_cycle() for port in ports),
        "model_cycles": float(model(p)["cycles"]),
    }


# -- analytical model --------------------------------------------------------------------------
#: Stream rate of a fabric -> memory move through a PE's ramp, cycles per FP32 word: the slope of
#: the wse-bcast calibration fit T_bcast(I) = 1.6 I + 250 (each chain hop is such a stream).
STREAM_CYCLES_PER_WORD = 1.6


def row_nnz(p: WsMatmulParams, w: np.ndarray) -> np.ndarray:
    """Non-zeros per (row of W, PE column): what each column's stream carries per row."""
    return np.count_nonzero(w.reshape(p.rows, p.px, p.f0), axis=2)


def model(p: WsMatmulParams) -> dict[str, Any]:
    """Row-pipelined time from per-mechanism constants (never fitted to end-to-end runs).

    Per row r and PE column c with n non-zeros: the column's PEs spend F = n·(2 task switches +
    T_fmac(BS/py)) on index and FMAC tasks (T_fmac: the calibration fit), plus the end-of-row
    block and activate (an empty row costs one task). The PSUM task (switch, block/unblock,
    launch) starts the reduction R: the owner's one or two incoming streams at
    ``STREAM_CYCLES_PER_WORD`` per token, plus a hop and a ramp per chain link, then the
    completion task (switch, one or two fmovs, unblock). Row r+1's FMACs overlap R, so the gap
    from PSUM r to PSUM r+1 is max(FMACs of row r+1 on the slowest column, R + completion).
    """
    p, _, w = lowered(p)
    pe, ce, fab = p.wafer.pe, p.wafer.ce, p.wafer.fabric
    sw, ctl, bt = pe.task_switch_cycles, ce.control_op_cycles, p.bt
    fmovs = pe.dsd_setup_cycles + pe.pipeline_stages + bt / pe.fmovs_simd_width
    n = row_nnz(p, w)
    fmac = np.where(n > 0, n * (2 * sw + t_fmac_reference(bt)), sw) + 2 * ctl
    f_row = fmac.max(axis=1)
    psum = sw + 2 * ctl + pe.dsd_setup_cycles
    hop = fab.hop_latency_cycles + fab.ramp_latency_cycles
    total = float(p.py * fab.hop_latency_cycles + f_row[0])
    for r in range(p.rows):
        owner = r // p.f1
        streams = int(owner > 0) + int(owner < p.px - 1)
        reduce = streams * STREAM_CYCLES_PER_WORD * bt + max(owner, p.px - 1 - owner) * hop
        done = sw + 2 * fmovs + ctl
        nxt = f_row[r + 1] if r + 1 < p.rows else 0.0
        total += psum + max(nxt, reduce + done)
    return {"cycles": float(total), "nnz": int(np.count_nonzero(w))}


# -- validation ----------------------------------------------------------------------------------
#: (rows, cols, tokens, px, py, density) points: a density sweep, then other shapes.
SWEEP = (
    *((32, 32, 32, 4, 2, d) for d in (0.1, 0.25, 0.5, 1.0)),
    (16, 16, 16, 2, 2, 0.5),
    (24, 48, 16, 4, 1, 0.25),
    (32, 32, 64, 4, 4, 0.5),
)


def _run(params: WsMatmulParams) -> dict:
    from workloads.scenario import run_kind

    return run_kind("ws-matmul", params)


def validate() -> list[registry.ValidationRow]:
    rows = []
    for h1, h0, bs, px, py, d in SWEEP:
        p = WsMatmulParams(rows=h1, cols=h0, tokens=bs, px=px, py=py, density=d)
        m = _run(p)
        point = f"H1={h1} H0={h0} BS={bs} {px}x{py} D={d} nnz={m['nnz']}"
        rows.append(registry.ValidationRow("ws-matmul", point, m["cycles"], model(p)["cycles"]))
    return rows


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="ws-matmul",
            summary="weight-streamed sparse matmul X1 = X0·W^T, non-zeros streamed from the edge",
            params=WsMatmulParams,
            build=build,
            metrics=metrics,
            model=model,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="ws-matmul",
            summary="ws-matmul cycles vs the row-pipelined nnz model (density and shape sweep)",
            run=validate,
            tolerance=15.0,
            criterion="mape",
        )
    )
