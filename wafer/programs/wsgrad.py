"""The weight-gradient flavour of ``ws-matmul`` (two dense inputs, sparse output): ``wgrad``.

dW [H1][H0] = dX1^T · X0 on W's sparsity mask only: dW[r, j] = sum over tokens t of
dX1[t, r] · X0[t, j] for each masked (r, j). Lowered as the weight streaming of
docs/wafer/hardware.md describes:

- Both dense inputs live on the wafer in the activations' layout: PE (x, y) holds the tokens of
  block y of X0 for the input features of block x (``x0[f][token]``, as in fwd) and of dX1 for
  the output features of block x (``dx1[f][token]``, where the bwd pass of the layer above
  leaves it).
- The mask streams in row by row from the north edge, one edge input per PE column (colour
  ``MASK``, multicast down the column): for row r, the local index of each masked feature of
  the column, then a ROW_END control wavelet (its control task). Unmasked weights never travel.
- The activation-gradient row r (dX1[:, r], held by the PEs of column k = r // (H1/px)) is
  broadcast along each PE row with the collectives library (``Collectives.x.broadcast`` with
  root k), into one of two row buffers, so row r+1's broadcast overlaps row r's dot products.
  The routes are kept while the root column stays the same (``keep_routes``): a PE row pays the
  reconfiguration px times, not H1 times; every row still pays the library's teardown handshake.
- Each mask index j triggers the data task of ``MASK``: a dot product over the PE's tokens,
  ``fmacs(p, p, x0[j], g)`` with ``p`` a stride-0 descriptor on one word of a partials buffer
  (element-by-element accumulation, see :mod:`pe.isa`), so a row's n masked features give n
  partial sums in mask order.
- ROW_END (high priority) starts the column's chain reduction of the row's partials (async, so
  the next row's dot products overlap it; two partials buffers): PE (x, 0) sends its n partials
  south with ``mov32``, each PE below adds its own into the passing stream with ``fadds``
  (fabric + memory -> fabric), and PE (x, py-1) sends the sums off the wafer's south edge:
  FP32 gradients leave in mask order, column by column. A row with no masked feature in the
  column sends nothing.

Timing is the PEs' timestamp marks, ``cycles = max(end) - min(start)`` (end: a PE's last chain
operation has finished). Every cost comes from the PE, fabric and collectives mechanisms.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fabric.wavelet import Wavelet
from pe.dsd import MemDsd
from pe.program import Layout
from simcore.sim import Simulation
from wafer.collectives import Collectives
from wafer.programs.wscommon import (
    WsMatmulParams,
    activation_gradient,
    inputs,
    owner,
    run_metrics,
)
from wafer.system import Wafer

#: Colours: the mask stream and the column chain (alternating by y parity). The collectives
#: library's row broadcast takes colours 0 and 1.
MASK = 5
CHAIN = (6, 7)
#: Input queues: the mask, the chain. Output queue of the chain sends. The library takes input
#: queues 0 and 2 and output queue 2.
Q_MASK, Q_CHAIN_IN, Q_CHAIN_OUT = 1, 3, 3
#: Local tasks (the library takes 24, 25 and 28); the end-of-row control task.
START, GOT_ROW, CHAIN_DONE = 10, 11, 12
ROW_END = 40


def mask_of(p: WsMatmulParams) -> np.ndarray:
    """W's sparsity mask (the same seeded mask as fwd and bwd)."""
    return inputs(p)[1] != 0


def column_stream(p: WsMatmulParams, mask: np.ndarray, x: int) -> list[Any]:
    """Column x's mask stream: per row, the local index of each masked feature, then ROW_END."""
    out: list[Any] = []
    block = mask[:, x * p.f0 : (x + 1) * p.f0]
    for r in range(p.rows):
        out += [float(j) for j in np.flatnonzero(block[r])]
        out.append(Wavelet(ctrl=True, task_id=ROW_END))
    return out


def expected(p: WsMatmulParams) -> list[np.ndarray]:
    """Per PE column, dW's masked elements in mask order (row by row, features ascending)."""
    x0, w = inputs(p)
    dw = activation_gradient(p).astype(np.float64).T @ x0.astype(np.float64)
    mask = w != 0
    return [
        dw[:, x * p.f0 : (x + 1) * p.f0][mask[:, x * p.f0 : (x + 1) * p.f0]] for x in range(p.px)
    ]


def partials_in_cache(p: WsMatmulParams) -> bool:
    """The two partials buffers go in the software cache when they fit: a dot product then
    reads two SRAM operands, as the calibrated fmacs does, instead of three."""
    return 2 * p.f0 * 4 <= p.wafer.pe.cache_bytes


@dataclasses.dataclass
class GradState:
    """A PE's registers between tasks."""

    row: int = 0  # rows whose masked dot products are done (ROW_END seen)
    n: int = 0  # partials of the current row so far
    cur: int = 0  # partials buffer the dot products write
    have: int = 0  # gradient rows received (row r is ready when r < have)
    next_bcast: int = 0  # next gradient row to broadcast
    bcast_busy: bool = False
    chain_busy: bool = False
    chain_n: int = 0  # partials in the chain operation running
    waiting_chain: int | None = None  # partials count of a finished row whose chain must wait
    chains: int = 0  # rows whose chain operation has ended
    mask_blocked: bool = False


@dataclasses.dataclass
class GradRun:
    wafer: Wafer
    p: WsMatmulParams


def build(
    sim: Simulation,
    p: WsMatmulParams,
    data: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> GradRun:
    """Build the run; ``data`` = (X0 [BS][cols], dX1 [BS][rows], mask [rows][cols]) replaces
    the seeded inputs (the weight-streaming cluster runs its layers' products this way)."""
    if data is None:
        x0_all, w = inputs(p)
        dx1_all = activation_gradient(p)
        mask = w != 0
    else:
        x0_all, dx1_all, mask = data
    f0, f1, bt, px, py, rows = p.f0, p.f1, p.bt, p.px, p.py, p.rows
    run = GradRun(None, p)  # type: ignore[arg-type]
    in_cache = partials_in_cache(p)

    def code(pe: Any) -> None:
        x, y = pe.x, pe.y
        st = GradState()
        tokens = slice(y * bt, (y + 1) * bt)
        x0 = pe.array("x0", x0_all[tokens, x * f0 : (x + 1) * f0].T.reshape(-1))
        dx1 = pe.array("dx1", dx1_all[tokens, x * f1 : (x + 1) * f1].T.reshape(-1))
        grows = (pe.zeros("g0", bt), pe.zeros("g1", bt))
        alloc = pe.cache_zeros if in_cache else pe.zeros
        partials = (alloc("p0", f0), alloc("p1", f0))
        coll = Collectives(pe, y_colours=None, priority="high", microthreads=p.ring_priority)
        pe.route(MASK, rx=["N"], tx=["RAMP"] + (["S"] if y < py - 1 else []))
        pe.route(CHAIN[y % 2], rx=["RAMP"], tx=["S"])
        chain_out = pe.fabout(CHAIN[y % 2], f0, Q_CHAIN_OUT)
        if y > 0:
            pe.route(CHAIN[(y - 1) % 2], rx=["N"], tx=["RAMP"])
            chain_in = pe.fabin(CHAIN[(y - 1) % 2], f0, Q_CHAIN_IN)

        def grad_row(r: int) -> MemDsd:
            """Where row r of dX1 (this PE's tokens) is: local on the owner column."""
            if owner(p, r) == x:
                return dx1.with_offset((r % f1) * bt).with_length(bt)
            return grows[r % 2]

        def gate(t: Any) -> None:
            """Block the mask task while its row's gradient is missing or no partials buffer is
            free; unblock it otherwise."""
            hold = (st.row < rows and st.have <= st.row) or st.waiting_chain is not None
            if hold != st.mask_blocked:
                (t.block if hold else t.unblock)(MASK)
                st.mask_blocked = hold

        def next_broadcast(t: Any) -> None:
            """Broadcast the next gradient row once the last is in and its buffer is free (the
            row two back is done)."""
            b = st.next_bcast
            if st.bcast_busy or b >= rows or b > st.row + 1 or px == 1:
                return
            st.bcast_busy = True
            st.next_bcast += 1
            coll.x.broadcast(t, owner(p, b), grad_row(b), GOT_ROW, keep_routes=True)

        def chain(t: Any, n: int) -> None:
            """Reduce this row's n partials down the column (async); the dot products of the
            next row go on in the other buffer."""
            buf = partials[st.cur].with_length(n) if n else None
            st.cur ^= 1
            if buf is None:
                finished(t)
                return
            st.chain_busy = True
            st.chain_n = n
            out = dataclasses.replace(chain_out, length=n)
            if y == 0:
                t.mov32(out, buf, async_=True, activate=CHAIN_DONE, priority=p.ring_priority)
            else:
                fin = dataclasses.replace(chain_in, length=n)
                t.fadds(out, fin, buf, async_=True, activate=CHAIN_DONE, priority=p.ring_priority)

        def finished(t: Any) -> None:
            st.chains += 1
            if st.chains == rows:
                t.mark("end")

        @pe.local_task(id=START)
        def start(t: Any) -> None:
            t.mark("start")
            if px == 1:  # every gradient row is local: nothing to broadcast
                st.have = rows
            gate(t)
            next_broadcast(t)

        @pe.local_task(id=GOT_ROW, priority="high")
        def got_row(t: Any) -> None:
            st.bcast_busy = False
            st.have += 1
            gate(t)
            next_broadcast(t)

        @pe.data_task(colour=MASK, queue=Q_MASK)
        def masked(t: Any, value: float) -> None:
            buf = partials[st.cur]
            word = MemDsd(buf.base, "f32", (bt,), (0,), offset=st.n, name="psum", space=buf.space)
            t.fmacs(word, word, x0.with_offset(int(value) * bt).with_length(bt), grad_row(st.row))
            st.n += 1

        @pe.control_task(id=ROW_END, priority="high")
        def row_end(t: Any) -> None:
            n, st.n = st.n, 0
            st.row += 1
            if st.chain_busy:
                st.waiting_chain = n
            else:
                chain(t, n)
            gate(t)
            next_broadcast(t)

        @pe.local_task(id=CHAIN_DONE, priority="high")
        def chain_done(t: Any) -> None:
            st.chain_busy = False
            t.fmovs(partials[st.cur ^ 1].with_length(st.chain_n), 0.0)  # reduced: reuse it
            finished(t)
            if st.waiting_chain is not None:
                n, st.waiting_chain = st.waiting_chain, None
                chain(t, n)
                gate(t)

        pe.start(start)

    layout = Layout(px, py)
    layout.set_rectangle_code(code)
    for x in range(px):
        layout.add_edge_input(x, 0, "N", MASK, column_stream(p, mask, x))
        layout.add_edge_output(x, py - 1, "S", CHAIN[(py - 1) % 2])
    run.wafer = Wafer(sim, p.wafer, layout)
    return run


def result(run: GradRun) -> list[np.ndarray]:
    """Per PE column, what left the south edge (in arrival order)."""
    p = run.p
    return [run.wafer.edge(x, p.py - 1, "S").data for x in range(p.px)]


def metrics(run: GradRun, modelled: float) -> dict:
    """The metrics of a wgrad run: :func:`run_metrics` (``modelled``: the model's cycles) and
    the check of dW against numpy."""
    p = run.p
    got, want = result(run), expected(p)
    same_shape = all(g.shape == w.shape for g, w in zip(got, want, strict=True))
    errs = [float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True) if g.size]
    scale = max((float(np.max(np.abs(w))) for w in want if w.size), default=0.0)
    err = max(errs, default=0.0) if same_shape else float("inf")
    ports = [run.wafer.edge(x, 0, "N") for x in range(p.px)]
    ports += [run.wafer.edge(x, p.py - 1, "S") for x in range(p.px)]
    nnz = sum(w.size for w in want)  # one gradient per masked element
    return {
        "flavour": "wgrad",
        **run_metrics(p, run.wafer, ports, nnz, modelled),
        "correct": same_shape and err <= 1e-4 * max(scale, 1.0),
        "max_abs_error": err,
    }
