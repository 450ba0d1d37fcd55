"""Synthetic traces shaped like a small wafer run, written with the real TraceWriter.

``write_wafer_trace`` makes a ``w x h`` mesh of PEs (``wafer/pe[x,y]`` with ``router``, ``ce`` and
``task`` children): compute tasks with overlapping slices on the same component, instructions,
wavelet sends (``flow_out``) each received by several neighbours (``flow_in``), stalls with
causes in their arguments, link and queue occupancy counters, and the final ``run/end`` event.
Deterministic: the same arguments give the same file.
"""

from __future__ import annotations

import random

from traces import TraceLevel, TraceWriter


def write_wafer_trace(
    path, *, w: int = 3, h: int = 2, steps: int = 6, batch_rows: int = 64, fanout: int = 3
) -> dict[str, int]:
    """Write the trace; return the counts a viewer should show (slices, counters, flows...)."""
    rng = random.Random(7)
    counts = {"slices": 0, "instants": 0, "counters": 0, "flows": 0, "events": 0}
    header = {"scenario": "synthetic-wafer", "kind": "test", "seed": 7, "tick_hz": 1_000_000_000,
              "domains": {"wafer": 1_000_000_000}, "config": {"w": w, "h": h}}  # fmt: skip
    flow = 0
    with TraceWriter(path, level=TraceLevel.DETAIL, header=header, batch_rows=batch_rows) as tw:

        def emit(ts, dur, comp, cat, name, phase="slice", **kw):
            tw.emit(ts, dur, ts, dur, "wafer", comp, cat, name, phase, **kw)
            counts["events"] += 1
            if phase == "counter":
                counts["counters"] += 1
            else:
                counts["slices"] += 1
                counts["instants"] += phase == "instant" or dur == 0

        for step in range(steps):
            t = step * 100
            for y in range(h):
                for x in range(w):
                    pe = f"wafer/pe[{x},{y}]"
                    # two overlapping tasks on one component -> two lanes
                    emit(t, 60, f"{pe}/task", "task", "fmac", args={"step": step})
                    emit(t + 20, 60, f"{pe}/task", "task", "reduce", args={"step": step})
                    emit(t + 5, 10, f"{pe}/ce", "instr", "FMACH", args={"len": 16, "op": "fmac"})
                    flow += 1
                    emit(t + 10, 4, f"{pe}/router", "wavelet", "send", flow_out=flow,
                         args={"color": 3})  # fmt: skip
                    for k in range(fanout):
                        dst = f"wafer/pe[{(x + k + 1) % w},{y}]/router"
                        emit(t + 15 + k, 2, dst, "wavelet", "receive", flow_in=flow)
                        counts["flows"] += 1
                    if rng.random() < 0.5:
                        cause = rng.choice(["backpressure", "operand_wait"])
                        emit(t + 70, 5 + rng.randrange(10), f"{pe}/ce", "stall", "stall",
                             args={"cause": cause, "link": "east"})  # fmt: skip
                    emit(t, 0, f"{pe}/router", "link", "east", "counter",
                         value=float(rng.randrange(5)), args={"capacity": 4})  # fmt: skip
                    emit(t + 50, 0, f"{pe}/router", "link", "east", "counter", value=0.0,
                         args={"capacity": 4})  # fmt: skip
                    emit(t, 0, f"{pe}/ce", "queue", "input", "counter", value=float(step % 3),
                         args={"capacity": 8})  # fmt: skip
        end = steps * 100
        emit(end, 0, "run", "run", "end", "instant", args={"status": "completed"})
    return counts
