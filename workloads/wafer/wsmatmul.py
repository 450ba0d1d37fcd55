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

from fabric.wavelet import Wavelet
from pe.dsd import MemDsd
from pe.program import Layout
from pe.wafer import MAX_WIDTH, Wafer, WaferConfig
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from workloads import registry
from workloads.wafer.calibration import STREAM_CYCLES_PER_WORD, t_fmac_reference

#: Colours: the weight stream; the ring's eastward links (alternating by x parity) and the wrap
#: link that brings the ring back from the east end to the west end of the PE row.
WEIGHT = 5
RING = (6, 7)
WRAP = 8
#: Input queues: weights, the ring. Output queue of the ring sends.
Q_WEIGHT, Q_RING_IN, Q_OUT = 0, 3, 2
#: Local tasks: start, end of a row's reduction. Control tasks: the end-of-row commands.
START, RED_DONE = 10, 12
PSUM, FSUM = 40, 41
WORD_BYTES = 4
FLAVOURS = ("fwd", "bwd", "wgrad")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WsMatmulParams(registry.ScenarioParams):
    flavour: str = param(
        "fwd",
        "which product: fwd (X1 = X0·W^T), bwd (dX0 = dX1·W) or wgrad (dW = dX1^T·X0 on W's mask)",
        choices=FLAVOURS,
    )
    rows: int = param(16, "output features H1 (rows of W)", min=1)
    cols: int = param(16, "input features H0 (columns of W)", min=1)
    tokens: int = param(16, "tokens BS (batch x sequence)", min=1)
    density: float = param(0.25, "fraction of non-zero weights (seeded Bernoulli mask)")
    px: int = param(4, "PE columns; H0 and H1 are split over them", min=1, max=MAX_WIDTH)
    py: int = param(2, "PE rows; the tokens are split over them", min=1, max=MAX_WIDTH)
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    def check(self) -> None:
        if not 0.0 < self.density <= 1.0:
            raise ConfigError("density", self.density, "must be in (0, 1]", allowed="(0, 1]")
        for name, n, parts, axis in (
            ("cols", self.cols, self.px, "px"),
            ("rows", self.rows, self.px, "px"),
            ("tokens", self.tokens, self.py, "py"),
        ):
            if n % parts:
                raise ConfigError(name, n, f"must be a multiple of {axis} = {parts}")
        words, what = self.pe_words()
        free = self.wafer.pe.sram_bytes - self.wafer.pe.code_bytes
        if words * WORD_BYTES > free:
            raise ConfigError(
                "tokens",
                self.tokens,
                f"a PE needs {words * WORD_BYTES:,} B for {what} but has {free:,} B beside the "
                "code; lower tokens or rows/cols, or raise py/px",
            )

    def pe_words(self) -> tuple[int, str]:
        """FP32 words of data a PE holds, and what they are."""
        f_in, f_out = (self.f0, self.f1) if self.flavour != "bwd" else (self.f1, self.f0)
        if self.flavour == "wgrad":
            return (self.f0 + self.f1 + 2) * self.bt + self.f0, (
                "X0, dX1, two gradient-row buffers and the partials"
            )
        return (f_in + f_out + 2) * self.bt, "the input and output activations and two accumulators"

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


def activation_gradient(p: WsMatmulParams) -> np.ndarray:
    """The seeded dX1 [BS][H1] of the bwd and wgrad flavours (FP32)."""
    dx1 = np.random.default_rng([p.seed, 8]).standard_normal((p.tokens, p.rows))
    return dx1.astype(np.float32)


def lowered(p: WsMatmulParams) -> tuple[WsMatmulParams, np.ndarray, np.ndarray]:
    """The forward-shaped problem fwd or bwd runs as: (params, X_in, M) with X_out = X_in · M^T.

    ``bwd`` computes the activation gradient dX0 [BS][H0] = dX1 [BS][H1] · W = dX1 · (W^T)^T:
    the same lowering with the transposed weights streamed (MemoryX sends W in transpose order),
    H1 features in and H0 out. The same seeded W as ``fwd``; dX1 is seeded like X0.
    """
    x0, w = inputs(p)
    if p.flavour == "fwd":
        return p, x0, w
    q = dataclasses.replace(p, flavour="fwd", rows=p.cols, cols=p.rows)
    return q, activation_gradient(p), np.ascontiguousarray(w.T)


def owner(p: WsMatmulParams, r: int) -> int:
    """The PE column that stores output feature r (the outputs keep the inputs' layout)."""
    return r // p.f1


def column_stream(p: WsMatmulParams, w: np.ndarray, x: int) -> list[Any]:
    """What column x's edge input carries: per row of W, (index word, weight) per non-zero in
    the column's features, then the end-of-row command: FSUM to the row's owner, PSUM to the
    others. A row without non-zeros in the column costs only the command."""
    out: list[Any] = []
    block = w[:, x * p.f0 : (x + 1) * p.f0]
    for r in range(p.rows):
        for j in np.flatnonzero(block[r]):
            out += [float(j), float(block[r, j])]
        out.append(Wavelet(ctrl=True, task_id=FSUM if owner(p, r) == x else PSUM))
    return out


@dataclasses.dataclass
class PeState:
    """A PE's registers between tasks."""

    index: int = -1  # latched feature index; -1 = the next wavelet is an index
    cur: int = 0  # accumulator the FMACs write
    busy: bool = False  # a row's reduction is running (on the other accumulator)
    waiting: bool | None = None  # an end-of-row command that waits for it: FSUM (True) or PSUM
    stored: int = 0  # output features this PE has stored (FSUMs done)
    reduced: int = 0  # rows whose reduction has ended


@dataclasses.dataclass
class WsRun:
    wafer: Wafer
    x0: np.ndarray
    w: np.ndarray
    x1: dict[tuple[int, int], MemDsd]


def ring_links(pe: Any, px: int) -> tuple[int, int]:
    """Route this PE's ring links; returns (colour it receives from, colour it sends on).

    The ring runs east along the PE row (colours ``RING`` alternating by x parity: a router
    takes from RAMP and sends east on one, takes from the west and delivers down on the other)
    and back from the east end to the west end on ``WRAP``, through the routers between.
    """
    x = pe.x
    if x < px - 1:
        pe.route(RING[x % 2], rx=["RAMP"], tx=["E"])
    if x > 0:
        pe.route(RING[(x - 1) % 2], rx=["W"], tx=["RAMP"])
    if x == px - 1:
        pe.route(WRAP, rx=["RAMP"], tx=["W"])
    elif x == 0:
        pe.route(WRAP, rx=["E"], tx=["RAMP"])
    else:
        pe.route(WRAP, rx=["E"], tx=["W"])
    receive = WRAP if x == 0 else RING[(x - 1) % 2]
    send = WRAP if x == px - 1 else RING[x % 2]
    return receive, send


def build(sim: Simulation, p: WsMatmulParams) -> WsRun:
    if p.flavour == "wgrad":
        from workloads.wafer import wsgrad

        return wsgrad.build(sim, p)  # type: ignore[return-value]
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
        if px > 1:
            receive, send = ring_links(pe, px)
            ring_in = pe.fabin(receive, bt, Q_RING_IN)
            ring_out = pe.fabout(send, bt, Q_OUT)

        @pe.local_task(id=START)
        def start(t: Any) -> None:
            t.mark("start")

        @pe.data_task(colour=WEIGHT, queue=Q_WEIGHT)
        def weight(t: Any, value: float) -> None:
            if st.index < 0:
                st.index = int(value)
                return
            acc = accs[st.cur]
            t.fmacs(acc, acc, xloc.with_offset(st.index * bt).with_length(bt), value)
            st.index = -1

        def reduce_row(t: Any, final: bool) -> None:
            """Hand the row's accumulator to the ring and let the next row's FMACs go on in
            the other one. FSUM: send this PE's partial round the ring and take the total back
            into the output slot; PSUM: add this PE's partial into the passing stream."""
            acc = accs[st.cur]
            st.cur ^= 1
            st.busy = True
            if final:
                slot = x1loc.with_offset(st.stored * bt).with_length(bt)
                st.stored += 1
                if px == 1:
                    t.fmovs(slot, acc)
                    t.activate(RED_DONE)
                else:
                    t.mov32(ring_out, acc, async_=True)
                    t.mov32(slot, ring_in, async_=True, activate=RED_DONE)
            else:
                t.fadds(ring_out, ring_in, acc, async_=True, activate=RED_DONE)

        def end_of_row(t: Any, final: bool) -> None:
            if st.busy:  # the other accumulator is still in the ring: hold the next row
                t.block(WEIGHT)
                st.waiting = final
            else:
                reduce_row(t, final)

        @pe.control_task(id=PSUM, priority="high")
        def psum(t: Any) -> None:
            end_of_row(t, False)

        @pe.control_task(id=FSUM, priority="high")
        def fsum(t: Any) -> None:
            end_of_row(t, True)

        @pe.local_task(id=RED_DONE, priority="high")
        def reduced(t: Any) -> None:
            t.fmovs(accs[st.cur ^ 1], 0.0)
            st.busy = False
            st.reduced += 1
            if st.reduced == p.rows:
                t.mark("end")
            if st.waiting is not None:
                final, st.waiting = st.waiting, None
                reduce_row(t, final)
                t.unblock(WEIGHT)

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
    if p.flavour == "wgrad":
        from workloads.wafer import wsgrad

        return wsgrad.metrics(run)  # type: ignore[arg-type]
    flavour = p.flavour
    p = lowered(p)[0]
    got = result_matrix(p, run)
    want = run.x0.astype(np.float64) @ run.w.astype(np.float64).T
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    ports = [run.wafer.edge(x, 0, "N") for x in range(p.px)]
    return {
        "flavour": flavour,
        **run_metrics(p, run.wafer, ports, int(np.count_nonzero(run.w))),
        "correct": bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1.0))),
        "max_abs_error": err,
    }


def run_metrics(p: WsMatmulParams, wafer: Wafer, ports: list, nnz: int) -> dict[str, Any]:
    """What every flavour reports besides its result check: cycles, nnz, utilisation (FMAC or
    dot-product elements per PE-cycle against one FP32 ``fmacs`` element per cycle), the edge
    I/O through ``ports`` and the model's cycles."""
    cycles = wafer.span_cycles()
    words = sum(port.words for port in ports)
    return {
        "cycles": cycles,
        "nnz": nnz,
        "fmac_utilisation": nnz * p.tokens / (cycles * p.px * p.py) if cycles else 0.0,
        "edge_words": words,
        "edge_bytes_per_cycle": WORD_BYTES * words / cycles if cycles else 0.0,
        "edge_port_bytes_per_cycle_max": max(port.bytes_per_cycle() for port in ports),
        "model_cycles": float(model(p)["cycles"]),
    }


# -- analytical model --------------------------------------------------------------------------
def row_nnz(p: WsMatmulParams, w: np.ndarray) -> np.ndarray:
    """Non-zeros per (row of W, PE column): what each column's stream carries per row."""
    return np.count_nonzero(w.reshape(p.rows, p.px, p.f0), axis=2)


def model(p: WsMatmulParams) -> dict[str, Any]:
    """Row-pipelined time from per-mechanism constants (never fitted to end-to-end runs).

    Per row r and PE column c with n non-zeros: the column's PEs spend F = n·(2 task switches +
    T_fmac(BS/py)) on index and FMAC tasks (T_fmac: the calibration fit). The end-of-row
    command's task (switch, launches) starts the ring reduction R: BS/py words at
    ``STREAM_CYCLES_PER_WORD`` (the ramp's rate) plus, per link of the ring, a hop and the
    relay's way down and up its ramps, and the wrap's way back along the row; then the
    completion task (switch, zeroing the accumulator, control ops). Each column runs its FMACs
    row after row; its command for row r waits until row r-1's reduction has ended (one
    accumulator in the ring at a time), and row r's ring starts when the last column's command
    has run, so row r+1's FMACs overlap row r's reduction and columns may run a row apart.

    ``wgrad`` has its own model: :func:`workloads.wafer.wsgrad.model`.
    """
    if p.flavour == "wgrad":
        from workloads.wafer import wsgrad

        return wsgrad.model(p)
    p, _, w = lowered(p)
    pe, ce, fab = p.wafer.pe, p.wafer.ce, p.wafer.fabric
    sw, ctl, bt, px = pe.task_switch_cycles, ce.control_op_cycles, p.bt, p.px
    fmovs = pe.dsd_setup_cycles + pe.pipeline_stages + bt / pe.fmovs_simd_width
    n = row_nnz(p, w)
    fmacs = n * (2 * sw + t_fmac_reference(bt))  # per (row, column)
    command = sw + 2 * pe.dsd_setup_cycles
    link = fab.hop_latency_cycles + 2 * fab.ramp_latency_cycles
    ring = (
        STREAM_CYCLES_PER_WORD * bt + px * link + (px - 1) * fab.hop_latency_cycles
        if px > 1
        else fmovs
    )
    done = sw + fmovs + 2 * ctl
    # Each column runs its rows' FMACs back to back; its command for row r waits for the
    # reduction of row r-1 (one accumulator in the ring at a time); the ring of row r starts
    # when the last column has issued its command.
    ready = np.full(px, float(p.py * fab.hop_latency_cycles))  # when a column's FMACs may go
    reduced = 0.0
    for r in range(p.rows):
        issued = np.maximum(ready + fmacs[r], reduced) + command
        reduced = float(issued.max()) + ring + done
        ready = issued
    total = reduced
    return {"cycles": float(total), "nnz": int(np.count_nonzero(w))}


# -- validation ----------------------------------------------------------------------------------
#: (rows, cols, tokens, px, py, density) points: a density sweep, then other shapes; each runs
#: in every flavour.
SWEEP = (
    *((32, 32, 32, 4, 2, d) for d in (0.1, 0.25, 0.5, 1.0)),
    (16, 16, 16, 2, 2, 0.5),
    (24, 48, 16, 4, 1, 0.25),
    (32, 32, 64, 4, 4, 0.5),
    (64, 64, 64, 8, 4, 0.1),
)


def validate(
    runner: registry.Runner, flavours: tuple[str, ...] = FLAVOURS
) -> list[registry.ValidationRow]:
    points = [(flavour, *shape) for flavour in flavours for shape in SWEEP]
    runs = runner(
        "ws-matmul",
        [
            WsMatmulParams(flavour=f, rows=h1, cols=h0, tokens=bs, px=px, py=py, density=d)
            for f, h1, h0, bs, px, py, d in points
        ],
    )
    rows = []
    for (flavour, h1, h0, bs, px, py, d), m in zip(points, runs, strict=True):
        point = f"{flavour} H1={h1} H0={h0} BS={bs} {px}x{py} D={d} nnz={m['nnz']}"
        rows.append(registry.ValidationRow("ws-matmul", point, m["cycles"], m["model_cycles"]))
    return rows


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="ws-matmul",
            summary="weight-streamed sparse matmul: fwd, bwd (non-zeros of W streamed from the "
            "edge) and wgrad (W's mask streamed, gradients out)",
            params=WsMatmulParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="ws-matmul",
            summary="ws-matmul cycles vs the row-pipelined models, fwd, bwd and wgrad "
            "(density and shape sweep)",
            run=validate,
            tolerance=10.0,
            criterion="mape",
            origin=__name__,
        )
    )
