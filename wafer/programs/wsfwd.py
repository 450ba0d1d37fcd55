"""The fwd and bwd flavours of ``ws-matmul``: one sparse input streamed in, dense output kept.

X1 [BS][H1] = X0 [BS][H0] · W^T with W [H1][H0] sparse (density D, seeded), lowered as the
weight streaming of docs/wafer/hardware.md describes ("one sparse input, dense output"):

- Activations X0 live on a px x py PE array: H0 split in blocks over the x columns, the tokens
  BS in blocks over the y rows. PE (x, y) keeps its block feature-major (``xloc[f][token]``) so
  the tokens of one input feature are contiguous for ``fmacs``.
- W streams in from the north edge, one edge input per column (colour ``WEIGHT``; every router
  of the column has rx N, tx RAMP + S: router multicast down the column). Row r of W is sent as
  its NON-ZEROS ONLY, each to the column holding its input feature, as two 32-bit wavelets: the
  local feature index (an FP32 word holding an integer, exact below 2^24), then the FP32
  weight. After the row, every column gets one control wavelet: ``FSUM`` to the column that
  owns output feature r (column r // (H1/px)), ``PSUM`` to the others, so a column without a
  non-zero in the row receives only the command.
- Each data wavelet triggers the data task bound to ``WEIGHT``: an index is latched (a PE
  register); a weight runs ``fmacs(acc, acc, xloc[f], w)`` over the PE's local tokens.
- The commands are control tasks of high priority. Control wavelets keep their place in the
  stream (docs/wafer/design.md), so row r's command runs after row r's weights and before row
  r+1's. It hands the row's accumulator to the ring reduction and switches the FMACs to the
  other of two accumulators, so row r+1's FMACs overlap row r's reduction; if row r-1's
  reduction is still running, it blocks the weight task until that one ends (one accumulator in
  the ring at a time).
- The ring runs east along the PE row (colours ``RING``, alternating by x parity) and back from
  the east end to the west end on ``WRAP`` through the routers between; all routes are static.
  On PSUM a PE adds its partial sums into the passing stream (async ``fadds``, fabric + memory
  -> fabric); on FSUM the owner sends its own partial sums round the ring (async ``mov32``) and
  takes the total back into its output slot ``x1loc[r % (H1/px)]`` (async ``mov32``, fabric ->
  memory), so outputs end in the inputs' layout and no PE needs to know which row it is on.
  With px = 1 the owner copies its accumulator (``fmovs``). Each row's streams have exactly
  BS/py words, so no teardown is needed. The completion task ``RED_DONE`` (high priority, so
  the next row's weights do not starve it) zeroes the accumulator that came back.

Timing is the PEs' timestamp marks, ``cycles = max(end) - min(start)``. Every cost comes from the
PE and fabric mechanisms (fmacs cost model, task switches, DSD set-up, ramp and hop rates).
The analytical model (:func:`model`) lives beside the simulation and never feeds it.

``bwd`` (activation gradient) runs the same lowering with W^T streamed; see :func:`lowered`.
Left out: FP16 weights with a 16-bit index packed beside them in one wavelet (the WSE's format;
FP32 keeps the check exact and the stream is never the bottleneck). The ring's microthreads
share the datapath with the FMAC tasks (``ring_priority``, medium by default: they take issue
cycles from the tasks; low: they wait for them; see :mod:`pe.ce` and docs/wafer/ws-matmul.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fabric.wavelet import Wavelet
from pe.dsd import MemDsd
from pe.program import Layout
from simcore.sim import Simulation
from wafer.programs.wscommon import (
    WsMatmulParams,
    activation_gradient,
    inputs,
    owner,
    run_metrics,
)
from wafer.system import Wafer

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


def build(
    sim: Simulation, p: WsMatmulParams, data: tuple[np.ndarray, np.ndarray] | None = None
) -> WsRun:
    """Build the run; ``data`` = (X_in [BS][cols], M [rows][cols]) replaces the seeded inputs of
    a forward-shaped ``p`` (the weight-streaming cluster runs its layers' products this way)."""
    p, x0, w = lowered(p) if data is None else (p, *data)
    run = WsRun(None, x0, w, {})  # type: ignore[arg-type]
    f0, f1, bt, px, py = p.f0, p.f1, p.bt, p.px, p.py
    mtp = p.ring_priority

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
                    t.mov32(ring_out, acc, async_=True, priority=mtp)
                    t.mov32(slot, ring_in, async_=True, activate=RED_DONE, priority=mtp)
            else:
                t.fadds(ring_out, ring_in, acc, async_=True, activate=RED_DONE, priority=mtp)

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


def metrics(p: WsMatmulParams, run: WsRun, modelled: float) -> dict:
    """The metrics of a fwd or bwd run: :func:`run_metrics` and the check of X_out against numpy.

    ``modelled`` is the model's cycles for the run's own parameters (for bwd: the transposed
    weights that were streamed), reported as ``model_cycles``.
    """
    flavour = p.flavour
    p = lowered(p)[0]
    got = result_matrix(p, run)
    want = run.x0.astype(np.float64) @ run.w.astype(np.float64).T
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    ports = [run.wafer.edge(x, 0, "N") for x in range(p.px)]
    nnz = int(np.count_nonzero(run.w))
    return {
        "flavour": flavour,
        **run_metrics(p, run.wafer, ports, nnz, modelled),
        "correct": bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1.0))),
        "max_abs_error": err,
    }


def row_nnz(p: WsMatmulParams, w: np.ndarray) -> np.ndarray:
    """Non-zeros per (row of W, PE column): what each column's stream carries per row."""
    return np.count_nonzero(w.reshape(p.rows, p.px, p.f0), axis=2)
