"""A CS-2 system in the weight-streaming cluster, at wafer or PE fidelity.

The CS-2 is a component in the wafer's clock domain with two ports, ``weights`` (in, from its
SwarmX leaf) and ``grads`` (out). It does what each arriving chunk's command says
(:class:`cs2.plan.Work`), chunk after chunk: the weight stream drives the wafer.
Gradient chunks leave through its I/O port (:class:`swarmx.node.Interface`, ``io_bits_per_s`` =
1.2 Tb/s), a child component with an on-wafer buffer of ``grad_buffer_chunks`` chunks, so
sending overlaps the next chunk's compute.

How long a chunk takes:

- ``fidelity = "wafer"``: the calibrated row model of :mod:`cs2.calibration` for
  the streamed products (fwd, dgrad, wgrad) over this system's tokens, and for attention, its
  backward, the loss and the epilogues (residual adds, GELU, GELU') the models of their PE
  programs fitted to PE-level runs (:mod:`cs2.sidecal`), on the whole array;
- ``fidelity = "pe"``: the chunk's streamed product (forward; activation gradient, the same
  program on W^T; or weight gradient on the request mask) runs as the cycle-level ``ws-matmul``
  program (:mod:`wafer.programs.wsfwd`, :mod:`wafer.programs.wsgrad`) on a ``pe_px`` x
  ``pe_py`` sub-array with the chunk's real data, in a simulation of its own, and so do its
  attention, loss and epilogue (:mod:`cs2.pekernels`); the chunk takes the cycles
  those runs measured, and the results are what the PEs computed. Only the embedding's gather
  and scatter keep a documented cost.

With data (functional runs), the wafer keeps its shard's activations for the step (one set per
layer) and computes with the weights as streamed (FP16 values); its results come from the
cycle-level PEs (``pe``) or numpy (``wafer``). ``exposed`` records, per step, the time the wafer
had nothing to do because the next chunk had not arrived.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from cs2 import calibration as cal
from cs2 import gpt, sidecal
from cs2.pekernels import PeSideWork
from cs2.plan import Work
from memoryx.plan import Chunk, Entry
from simcore.component import Component
from simcore.config import param, section
from simcore.sim import Simulation, SubRuns
from simcore.tracing import TraceLevel
from swarmx.node import Interface
from wafer.programs import wsfwd, wsgrad
from wafer.programs.wscommon import WsMatmulParams
from wafer.system import WaferConfig

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cs2Config:
    """One CS-2 system (defaults: docs/cluster/hardware.md)."""

    clock_hz: int = param(850_000_000, "wafer clock (the SDK measurements' 850 MHz)", min=1)
    io_bits_per_s: float = param(1.2e12, "the system's I/O, bits/s each way (1.2 Tb/s)", min=1)
    sram_bytes: int = param(
        40 * 10**9, "on-wafer SRAM for stored activations, bytes (WSE-2: 40 GB)", min=1
    )
    grad_buffer_chunks: int = param(
        2, "gradient chunks the wafer buffers while its I/O port sends", min=1
    )
    compute: cal.Cs2ComputeConfig = section(cal.Cs2ComputeConfig, "wafer-level compute model")
    pe_px: int = param(8, "PE fidelity: sub-array columns", min=1, max=750)
    pe_py: int = param(8, "PE fidelity: sub-array rows", min=1, max=994)
    wafer: WaferConfig = section(WaferConfig, "PE fidelity: the cycle-level wafer")


# -- timing of work without streamed weights (wafer fidelity; the embedding at both) -------------
#: The element-wise program after a matrix's last chunk: forward, backward.
EPILOGUES = (
    {"proj": "add", "fc1": "gelu", "fc2": "add"},
    {"fc1": "add", "qkv": "add", "fc2": "gelu-grad"},
)


def side_cycles(w: Work, shape: gpt.Shape, seqs: int, c: cal.Cs2ComputeConfig) -> float:
    """Wafer-level cost of the chunk's work that streams no weights: attention, loss and
    epilogues from the models of their PE programs (:mod:`cs2.sidecal`) on the
    whole array; the embedding's gather and scatter at a documented cost."""
    t, h, s = seqs * shape.sequence, shape.hidden, shape.sequence
    px, py = c.pe_columns, c.pe_rows
    if w.op in ("attn", "attn-grad"):
        kind = "attention" if w.op == "attn" else "attention-grad"
        return sidecal.cycles(c.side, kind, (seqs * shape.heads, s, h // shape.heads, px, py))
    if w.op == "loss":
        return sidecal.cycles(c.side, "loss", (t, shape.vocab, px, py))
    if w.op in ("embed", "embed-grad"):
        rows = w.rows if w.op == "embed" else w.grad_rows
        return cal.elementwise_cycles(c, t * h * rows / shape.vocab, 1)
    if not w.last or w.op == "wgrad":
        return 0.0
    name = w.tensor.rpartition(".")[2]
    fwd = w.op != "dgrad"
    kind = EPILOGUES[0 if fwd else 1].get(name)
    if kind is None:
        return 0.0
    width = 4 * h if name == "fc1" or (name == "fc2" and not fwd) else h
    return sidecal.cycles(c.side, kind, (t * width, px, py))


def matmul_cycles(w: Work, tokens: int, c: cal.Cs2ComputeConfig) -> float:
    """Wafer-level cycles of a chunk's streamed product: forward and activation gradient (the
    same program, on W or W^T) or weight gradient."""
    if w.op in ("matmul", "dgrad"):
        return cal.matmul_cycles(cal.FWD, c, w.rows, w.width, tokens, w.density)
    if w.op == "wgrad":
        return cal.matmul_cycles(cal.WGRAD, c, w.grad_rows, w.grad_width, tokens, w.density)
    return 0.0


@functools.lru_cache(maxsize=65536)
def wafer_cycles(w: Work, shape: gpt.Shape, seqs: int, c: cal.Cs2ComputeConfig) -> float:
    """A chunk's wafer-level cycles: its streamed product and its other work (the same for
    every system, so computed once per distinct chunk)."""
    return matmul_cycles(w, seqs * shape.sequence, c) + side_cycles(w, shape, seqs, c)


# -- the function (real data) --------------------------------------------------------------------
class Function:
    """A CS-2's shard of a GPT step on real data; ``matmul`` and ``wgrad`` compute the streamed
    products (numpy, or the cycle-level PEs) and return (result, cycles)."""

    def __init__(
        self,
        shape: gpt.Shape,
        ids: np.ndarray,
        targets: np.ndarray,
        global_tokens: int,
        pe: PeProducts | None,
        side: PeSideWork | None = None,
    ) -> None:
        self.shape = shape
        self.seqs = ids.shape[0]
        self.ids = ids.reshape(-1)
        self.targets = targets.reshape(-1)
        self.global_tokens = global_tokens
        self.pe = pe
        self.side = side
        self.parts: list[tuple[str, int]] = []  # (PE program, cycles) of the last run()
        self.act: dict[str, np.ndarray] = {}
        self.out: np.ndarray | None = None
        self.loss = 0.0

    # the streamed products
    def _fwd(self, x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, int]:
        if self.pe is not None:
            out, cycles = self.pe.fwd(x, rows)
            self.parts.append(("ws-matmul", cycles))
            return out, cycles
        return (x @ rows.T).astype(np.float32), 0

    def _wgrad(self, x: np.ndarray, dy: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, int]:
        if self.pe is not None:
            out, cycles = self.pe.wgrad(x, dy, mask)
            self.parts.append(("ws-matmul wgrad", cycles))
            return out, cycles
        return np.where(mask, dy.T @ x, np.float32(0)).astype(np.float32), 0

    def _input(self, tensor: str) -> str:
        """The activation a matrix multiplies (forward), by the matrix's name."""
        return _activation(tensor, 0)

    def _dout(self, tensor: str) -> str:
        """The gradient of a matrix's output (backward), by the matrix's name."""
        return _activation(tensor, 1)

    def run(self, e: Entry, payload: Any) -> tuple[Any, int]:
        """Do entry ``e``'s work; returns (gradient rows or None, cycles measured on PEs)."""
        w: Work = e.work
        a, shape = self.act, self.shape
        if w.op == "embed":
            if w.first:
                self.out = np.zeros((len(self.ids), shape.hidden), np.float32)
            sel = (self.ids >= e.lo) & (self.ids < e.hi)
            self.out[sel] = payload["rows"][self.ids[sel] - e.lo]  # type: ignore[index]
            if w.last:
                a["l0.x"] = self.out
            return None, 0
        side = self.side
        if w.op == "attn":
            lay = f"l{w.layer}"
            if side is not None:
                a[f"{lay}.a"], a[f"{lay}.p"], cycles = side.attention(
                    a[f"{lay}.qkv"], self.seqs, shape.heads
                )
                self.parts.append(("attention", cycles))
                return None, cycles
            a[f"{lay}.a"], a[f"{lay}.p"] = gpt.attention(a[f"{lay}.qkv"], self.seqs, shape.heads)
            return None, 0
        if w.op == "attn-grad":
            lay = f"l{w.layer}"
            args = (a[f"{lay}.da"], a[f"{lay}.qkv"], a[f"{lay}.p"], self.seqs, shape.heads)
            if side is not None:
                a[f"{lay}.dqkv"], cycles = side.attention_grad(*args)
                self.parts.append(("attention-grad", cycles))
                return None, cycles
            a[f"{lay}.dqkv"] = gpt.attention_grad(*args)
            return None, 0
        if w.op == "loss":
            if side is not None:
                self.loss, a["dlogits"], cycles = side.loss(
                    a["logits"], self.targets, self.global_tokens
                )
                self.parts.append(("loss", cycles))
                return None, cycles
            self.loss, a["dlogits"] = gpt.loss_grad(a["logits"], self.targets, self.global_tokens)
            return None, 0
        if w.op == "embed-grad":
            dx = a["l0.dx"]
            sel = (self.ids >= e.glo) & (self.ids < e.ghi)
            g = np.zeros((e.ghi - e.glo, shape.hidden), np.float32)
            np.add.at(g, self.ids[sel] - e.glo, dx[sel])
            return g, 0
        if w.op == "matmul":
            return None, self._matmul_fwd(e, payload["rows"])
        if w.op == "dgrad":
            return None, self._dgrad(e, payload["rows"])
        return self._wgrad_rows(e, payload["request"])

    def _matmul_fwd(self, e: Entry, rows: np.ndarray) -> int:
        w: Work = e.work
        x = self.act[self._input(w.tensor)]
        if w.first:
            self.out = np.zeros((x.shape[0], _rows_of(self.shape, w.tensor)), np.float32)
        part, cycles = self._fwd(x, rows)
        self.out[:, e.lo : e.hi] = part  # type: ignore[index]
        if w.last:
            cycles += self._fwd_epilogue(w, self.out)  # type: ignore[arg-type]
        return cycles

    def _ew(self, kind: str, *inputs: np.ndarray) -> tuple[np.ndarray, int]:
        """An element-wise epilogue: on the PEs, or numpy."""
        if self.side is not None:
            out, cycles = self.side.elementwise(kind, *inputs)
            self.parts.append((kind, cycles))
            return out, cycles
        if kind == "add":
            return inputs[0] + inputs[1], 0
        if kind == "gelu":
            return gpt.gelu(inputs[0]), 0
        return inputs[0] * gpt.gelu_grad(inputs[1]), 0

    def _fwd_epilogue(self, w: Work, out: np.ndarray) -> int:
        a = self.act
        name = w.tensor.rpartition(".")[2]
        lay = f"l{w.layer}"
        cycles = 0
        if name == "qkv":
            a[f"{lay}.qkv"] = out
        elif name == "proj":
            a[f"{lay}.h"], cycles = self._ew("add", a[f"{lay}.x"], out)
        elif name == "fc1":
            a[f"{lay}.u"] = out
            a[f"{lay}.g"], cycles = self._ew("gelu", out)
        elif name == "fc2":
            y, cycles = self._ew("add", a[f"{lay}.h"], out)
            a["y" if w.layer == self.shape.layers - 1 else f"l{w.layer + 1}.x"] = y
        else:
            a["logits"] = out
        return cycles

    def _dgrad(self, e: Entry, rows: np.ndarray) -> int:
        """dX[:, lo:hi] = dY · W[:, lo:hi]: the forward program on rows lo..hi of W^T."""
        w: Work = e.work
        dy = self.act[self._dout(w.tensor)]
        if w.first:
            self.out = np.zeros((dy.shape[0], self.act[self._input(w.tensor)].shape[1]), np.float32)
        part, cycles = self._fwd(dy, rows)
        self.out[:, e.lo : e.hi] = part  # type: ignore[index]
        if w.last:
            cycles += self._bwd_epilogue(w, self.out)  # type: ignore[arg-type]
        return cycles

    def _wgrad_rows(self, e: Entry, request: np.ndarray) -> tuple[np.ndarray, int]:
        """dW[glo:ghi] = dY[:, glo:ghi]^T · X on the request mask."""
        w: Work = e.work
        dy = self.act[self._dout(w.tensor)]
        x = self.act[self._input(w.tensor)]
        return self._wgrad(x, dy[:, e.glo : e.ghi], request)

    def _bwd_epilogue(self, w: Work, dx: np.ndarray) -> int:
        a = self.act
        name = w.tensor.rpartition(".")[2]
        lay = f"l{w.layer}"
        cycles = 0
        if name == "head":
            a[f"l{self.shape.layers - 1}.dy"] = dx
        elif name == "fc2":
            a[f"{lay}.du"], cycles = self._ew("gelu-grad", dx, a[f"{lay}.u"])
        elif name == "fc1":
            a[f"{lay}.dh"], cycles = self._ew("add", a[f"{lay}.dy"], dx)
        elif name == "proj":
            a[f"{lay}.da"] = dx
        else:
            d, cycles = self._ew("add", a[f"{lay}.dh"], dx)
            a[f"l{w.layer - 1}.dy" if w.layer > 0 else "l0.dx"] = d
        return cycles


#: Per matrix: the activation it multiplies forward and its output's gradient (backward).
_ACTIVATIONS = {
    "qkv": ("x", "dqkv"),
    "proj": ("a", "dh"),
    "fc1": ("h", "du"),
    "fc2": ("g", "dy"),
}


def _activation(tensor: str, which: int) -> str:
    """Entry ``which`` of :data:`_ACTIVATIONS` for ``tensor`` (``l3.fc1`` -> ``l3.h``); the
    head's are the stack's output ``y`` and ``dlogits``."""
    layer, _, name = tensor.rpartition(".")
    if name == "head":
        return ("y", "dlogits")[which]
    return f"{layer}.{_ACTIVATIONS[name][which]}"


def _rows_of(shape: gpt.Shape, tensor: str) -> int:
    return {name: r for name, r, _ in shape.tensors()}[tensor]


class PeProducts:
    """The streamed products on the cycle-level wafer: a ``px`` x ``py`` sub-array runs the
    ``ws-matmul`` programs with the chunk's data, each in a simulation of its own: a sub-run of
    ``runs`` (the simulation of the cluster's, see :class:`simcore.sim.SubRuns`)."""

    def __init__(self, px: int, py: int, wafer: WaferConfig, runs: SubRuns) -> None:
        self.px, self.py, self.wafer, self.sub_runs = px, py, wafer, runs
        self.runs = 0
        self.events = 0

    def _params(self, flavour: str, rows: int, cols: int, tokens: int) -> WsMatmulParams:
        return WsMatmulParams(
            flavour=flavour,
            rows=rows,
            cols=cols,
            tokens=tokens,
            density=1.0,
            px=self.px,
            py=self.py,
            wafer=self.wafer,
        )

    def fwd(self, x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, int]:
        """X · M^T with M's rows streamed in (fwd; bwd is the same program on W^T)."""
        p = self._params("fwd", m.shape[0], m.shape[1], x.shape[0])
        run = self._run(
            f"fwd {p.rows}x{p.cols}x{p.tokens}", lambda sim: wsfwd.build(sim, p, (x, m))
        )
        return wsfwd.result_matrix(p, run), run.wafer.span_cycles()

    def wgrad(self, x: np.ndarray, dy: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, int]:
        """dY^T · X on ``mask``, the mask streamed in and the gradients out of the south edge."""
        p = self._params("wgrad", mask.shape[0], mask.shape[1], x.shape[0])
        run = self._run(
            f"wgrad {p.rows}x{p.cols}x{p.tokens}", lambda sim: wsgrad.build(sim, p, (x, dy, mask))
        )
        out = np.zeros(mask.shape, np.float32)
        for col, got in enumerate(wsgrad.result(run)):
            block = out[:, col * p.f0 : (col + 1) * p.f0]
            block[mask[:, col * p.f0 : (col + 1) * p.f0]] = got
        return out, run.wafer.span_cycles()

    def _run(self, what: str, build: Callable[[Simulation], T]) -> T:
        run, result = self.sub_runs.run(f"PE-level {what} on {self.px}x{self.py} PEs", build)
        self.runs += 1
        self.events += result.events
        return run


# -- the component -------------------------------------------------------------------------------
class Cs2(Component):
    """One CS-2: ``weights`` in, ``grads`` out; see the module docstring."""

    def __init__(
        self,
        parent: Any,
        name: str,
        cfg: Cs2Config,
        *,
        shape: gpt.Shape,
        seqs: int,
        entries: int,
        gradients: int,
        fidelity: str,
        function: Function | None,
        pe: PeProducts | None,
    ) -> None:
        super().__init__(parent, name)
        self.cfg = cfg
        self.shape = shape
        self.seqs = seqs
        self.tokens = seqs * shape.sequence
        self.entries = entries
        self.fidelity = fidelity
        self.function = function
        self.pe = pe
        self.in_port("weights")
        self.out_port("to_io")
        self.flow_code = len(self.sim.components)  # its ordinal: unique, deterministic
        self.io = _GradPort(self, cfg.io_bits_per_s, gradients)
        parent.sim.connect(
            self.ports["to_io"],
            self.io.ports["in"],
            latency_cycles=0,
            capacity=cfg.grad_buffer_chunks,
            name=f"{self.path}/grad-buffer",
        )
        self.grads = self.io.ports["out"]
        self.exposed: dict[int, int] = {}  # step -> ticks waiting for the next chunk
        self.flops: dict[tuple[int, str], int] = {}  # (step, pass) -> FLOPs of the work done
        self.busy_ticks = 0
        self.done = 0
        self.step_end: dict[int, int] = {}
        self.first_arrival = -1  # tick the first chunk arrived

    def start(self) -> None:
        self.process(self._run(), "compute")

    def progress_count(self) -> int:
        return self.done

    def pending(self) -> str | None:
        left = self.entries - self.done
        return f"{left} chunk(s) of the plan not yet computed" if left else None

    def cycles_of(self, e: Entry, payload: Any) -> tuple[float, Any]:
        """(cycles, gradient payload) of one chunk."""
        w: Work = e.work
        grad, pe_cycles = (None, 0)
        if self.function is not None:
            self.function.parts.clear()
            grad, pe_cycles = self.function.run(e, payload)
        if self.fidelity == "pe":
            # everything but the embedding's gather and scatter ran on the PEs
            rest = 0.0
            if w.op in ("embed", "embed-grad"):
                rest = side_cycles(w, self.shape, self.seqs, self.cfg.compute)
            return pe_cycles + rest, grad
        return wafer_cycles(w, self.shape, self.seqs, self.cfg.compute), grad

    def _run(self) -> Any:
        inp, out = self.ports["weights"], self.ports["to_io"]
        ops = self.sim.trace_level >= TraceLevel.OPS
        for _ in range(self.entries):
            t0 = self.env.now
            chunk = yield inp.get()
            e: Entry = chunk.entry
            now = self.env.now
            if self.first_arrival < 0:
                self.first_arrival = now
            self.exposed[e.step] = self.exposed.get(e.step, 0) + now - t0
            cycles, grad = self.cycles_of(e, chunk.payload)
            dur = self.domain.ticks(round(cycles))
            if dur:
                yield self.env.timeout(dur)
            self.busy_ticks += dur
            key = (e.step, e.pass_)
            self.flops[key] = self.flops.get(key, 0) + e.work.flops(
                self.shape.sequence, self.shape.hidden, self.seqs
            )
            grad_chunk = (Chunk(e, e.grad_bytes, grad).sent_by(self.flow_code)
                          if e.returns_gradient else None)  # fmt: skip
            if ops:
                if now > t0:
                    self.trace("wait", "wait for weights", t0, now - t0, entry=e.index)
                self.trace("queue", "weights_buffer_chunks", now, phase="counter",
                           value=float(inp.channel.occupancy))  # fmt: skip
                self.trace(
                    "compute",
                    f"{e.pass_} {e.work}",
                    now,
                    dur,
                    flow_in=chunk.flow,
                    flow_out=grad_chunk.flow if grad_chunk else None,
                    step=e.step,
                    layer=e.work.layer,
                    lo=e.lo,
                    hi=e.hi,
                    entry=e.index,
                )
                if self.fidelity == "pe" and self.function is not None:
                    self._trace_programs(now, e)
            if grad_chunk is not None:
                yield out.put(grad_chunk)
            self.done += 1
            self.step_end[e.step] = self.env.now

    def _trace_programs(self, start: int, e: Entry) -> None:
        """One ``pe-program`` slice per cycle-level program the chunk ran, in the order they
        ran, inside its ``compute`` slice."""
        t = start
        for name, cycles in self.function.parts:  # type: ignore[union-attr]
            dur = self.domain.ticks(cycles)
            self.trace("pe-program", name, t, dur, entry=e.index, cycles=cycles)
            t += dur


class _GradPort(Component):
    """The CS-2's I/O port for gradients: serialises each chunk at the system's I/O rate."""

    def __init__(self, cs2: Cs2, bits_per_s: float, gradients: int) -> None:
        super().__init__(cs2, "io")
        self.flow_code = len(self.sim.components)  # its ordinal: unique, deterministic
        self.iface = Interface(f"{self.path}", self.domain, bits_per_s)
        self.gradients = gradients
        self.in_port("in")
        self.out_port("out")

    def start(self) -> None:
        self.process(self._run(), "send")

    def _run(self) -> Any:
        inp, out = self.ports["in"], self.ports["out"]
        ops = self.sim.trace_level >= TraceLevel.OPS
        for _ in range(self.gradients):
            chunk = yield inp.get()
            start, end = self.iface.reserve(self.env.now, chunk.nbytes)
            yield self.env.timeout(end - self.env.now)
            sent = chunk.sent_by(self.flow_code)
            if ops:
                self.trace(
                    "stream",
                    "gradient",
                    start,
                    end - start,
                    flow_in=chunk.flow,
                    flow_out=sent.flow,
                    bytes=chunk.nbytes,
                    entry=chunk.entry.index,
                )
            yield out.put(sent)
