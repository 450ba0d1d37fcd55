"""The ws-matmul lowerings' analytical models: row pipelines from the calibration's fits and
the mechanisms' constants (never fitted to end-to-end runs; they do not feed the simulation).

:func:`fwd_model` models :mod:`wafer.programs.wsfwd` (fwd, and bwd: the same program on W^T),
:func:`wgrad_model` models :mod:`wafer.programs.wsgrad`. The calibration they read (T_fmac,
T_bcast, the ramp's stream rate) is the SDK study's (:mod:`workloads.wafer.calibration`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wafer.programs.wscommon import WsMatmulParams, owner
from wafer.programs.wsfwd import lowered, row_nnz
from wafer.programs.wsgrad import mask_of
from workloads.wafer.calibration import (
    STREAM_CYCLES_PER_WORD,
    t_bcast_reference,
    t_fmac_reference,
)


def fwd_model(p: WsMatmulParams) -> dict[str, Any]:
    """Row-pipelined time from per-mechanism constants (never fitted to end-to-end runs).

    Per row r and PE column c with n non-zeros: the column's PEs spend F = n·(2 task switches +
    T_fmac(BS/py)) on index and FMAC tasks (T_fmac: the calibration fit). The end-of-row
    command's task (switch, launches) starts the ring reduction R: BS/py words at
    ``STREAM_CYCLES_PER_WORD`` (the ramp's rate) plus, per link of the ring, a hop and the
    relay's way down and up its ramps, and the wrap's way back along the row; then the
    completion task (switch, zeroing the accumulator, control ops). Each column runs its FMACs
    row after row; its command for row r waits until row r-1's reduction has ended (one
    accumulator in the ring at a time), and row r's ring starts when the last column's command
    has run, so row r+1's FMACs overlap row r's reduction and columns may run a row apart;
    the ring's microthreads take one issue cycle per word from those FMACs (pe/ce.py).
    """
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
    # The previous row's ring issues one element per wavelet on every PE; above the main thread
    # (ring_priority medium/high) each issue is a cycle the FMAC tasks lose, as far as they last.
    steal = bt if px > 1 and p.ring_priority != "low" else 0
    for r in range(p.rows):
        lost = np.minimum(steal, fmacs[r]) if r else 0
        issued = np.maximum(ready + fmacs[r] + lost, reduced) + command
        reduced = float(issued.max()) + ring + done
        ready = issued
    total = reduced
    return {"cycles": float(total), "nnz": int(np.count_nonzero(w))}


def wgrad_model(p: WsMatmulParams) -> dict[str, Any]:
    """Row pipeline of the wgrad lowering from calibration and mechanism constants (never
    fitted to end-to-end runs; it does not feed the simulation).

    Per row r: the gradient-row broadcast costs the calibration fit T_bcast(BS/py) when its
    root column changes, and T_bcast minus the router writes ``keep_routes`` skips (clearing 6
    filters, resetting the switches, writing rx and tx: 9 writes) when it does not. A column
    with n masked features in the row works n · (task switch + T_fmac(BS/py)) on dot products
    plus the row's fixed CE work (five short tasks, a teardown exit, two launches, zeroing). Its
    chain: n partials at the ramp's stream rate plus py hops and the completion task. Row r's
    dot products on a column start when its gradient row is in, the column's row r-1 is done and
    chain r-2 has ended (both partials buffers busy); broadcast r starts when broadcast r-1 has
    ended and every column has finished row r-2 (its buffer is free); chain r starts when the
    column has finished row r and chain r-1 has ended.
    """
    pe, ce, fab = p.wafer.pe, p.wafer.ce, p.wafer.fabric
    sw, ctl, bt = pe.task_switch_cycles, ce.control_op_cycles, p.bt
    mask = mask_of(p)
    n = np.count_nonzero(mask.reshape(p.rows, p.px, p.f0), axis=2)  # per (row, column)
    # Per row, besides the dot products, a PE's CE runs five short tasks (the broadcast's
    # teardown handler, lock and callback; ROW_END; the chain's completion), leaves teardown
    # (one router write), launches two async operations and zeroes the partials it reduced.
    zero = pe.dsd_setup_cycles + pe.pipeline_stages + n.max(axis=1) / pe.fmovs_simd_width
    tasks = 5 * sw + ce.route_write_cycles + 2 * pe.dsd_setup_cycles + zero + 6 * ctl
    work = n * (sw + t_fmac_reference(bt)) + tasks[:, None]  # per (row, column)
    reconfigure = (fab.filters_per_pe + 1 + 2) * ce.route_write_cycles
    hop = fab.hop_latency_cycles + fab.ramp_latency_cycles
    chain = np.where(n > 0, STREAM_CYCLES_PER_WORD * n + p.py * hop + sw + 2 * ctl, 0.0)
    done = np.zeros(p.px)  # when each column finished its last row's dot products
    before = np.zeros(p.px)  # ... and the row before that
    chain_start = np.zeros(p.px)
    chain_done = np.zeros(p.px)
    b_done = 0.0
    for r in range(p.rows):
        same_root = r > 0 and owner(p, r) == owner(p, r - 1)
        cost = t_bcast_reference(bt) - (reconfigure if same_root else 0)
        b_done = max(b_done, float(before.max()) if r > 1 else 0.0) + cost
        start = np.maximum(np.maximum(b_done, done), chain_start)
        before, done = done, start + work[r]
        chain_start = np.maximum(done, chain_done)
        chain_done = chain_start + chain[r]
    return {"cycles": float(chain_done.max()), "nnz": int(np.count_nonzero(mask))}
