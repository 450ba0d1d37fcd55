"""Export a wafersim trace as Chrome trace-event JSON (the fallback for ``chrome://tracing``).

Same picture as :mod:`traces.perfetto` (same lanes and flow pairs from :mod:`traces.layout`), in
the older format: each top-level path segment is a process, each component lane a thread named
by its path, slices are complete events (``ph: X``), instants ``i``, counters ``C`` (one series
per component and counter name), flows ``s``/``f`` pairs bound to the enclosing slices.
Timestamps are microseconds (floats; exact to the nanosecond for 1 GHz ticks). The file is
written event by event, so memory stays flat. Prefer ``.pftrace``: JSON is larger, slower to
load, and cannot express the track tree.
"""

from __future__ import annotations

import json
import os
import time

from traces.layout import Lanes, map_rows, natural_key, open_output, prepass, start_order
from traces.perfetto import ExportStats
from traces.reader import iter_batches, read_header


def export_chrome_json(
    trace_path: str | os.PathLike[str], out_path: str | os.PathLike[str]
) -> ExportStats:
    """Write ``trace_path`` as Chrome trace-event JSON at ``out_path``."""
    t0 = time.perf_counter()
    trace_path, out_path = os.fspath(trace_path), os.fspath(out_path)
    header = read_header(trace_path)
    pre = prepass(trace_path)
    tick_hz = int(header.get("tick_hz") or 1_000_000_000)
    us_per_tick = 1e6 / tick_hz
    stats = ExportStats(orphan_receives=pre.flows.orphan_receives, note=pre.note)
    tops = sorted({c.split("/")[0] for c in pre.components}, key=natural_key)
    pid_of = {top: i + 1 for i, top in enumerate(tops)}
    fh = open_output(out_path, "w")  # closed below
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    lanes: dict[str, Lanes] = {}
    tid_of: dict[tuple[str, int], int] = {}
    seen: dict[int, int] = {}
    first = True

    def put(event: dict) -> None:
        nonlocal first
        fh.write(("[\n" if first else ",\n") + dumps(event))
        first = False

    try:
        for top, pid in pid_of.items():
            put({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": top}})
        for batch in iter_batches(trace_path):
            cols = [batch.column(c).to_pylist() for c in
                    ("ts_ticks", "dur_ticks", "component", "category", "name", "phase",
                     "value", "flow_out", "flow_in")]  # fmt: skip
            args_cols = [map_rows(batch.column(c)) for c in ("args_int", "args_float", "args_str")]
            args_cols = [a for a in args_cols if a is not None]
            rows = list(zip(*cols, strict=True))
            for r in start_order(
                batch.column("ts_ticks"),
                batch.column("dur_ticks"),
                batch.column("flow_out"),
                batch.column("flow_in"),
            ):
                ts, dur, comp, cat, name, phase, value, f_out, f_in = rows[r]
                groups = [a[r] for a in args_cols]
                stats.events += 1
                pid = pid_of[comp.split("/")[0]]
                t_us = ts * us_per_tick
                if phase == "counter":
                    stats.counters += 1
                    put({"ph": "C", "pid": pid, "tid": 0, "ts": t_us, "cat": cat,
                         "name": f"{comp} {name}", "args": {name: value}})  # fmt: skip
                    continue
                comp_lanes = lanes.setdefault(comp, Lanes())
                lane = comp_lanes.place(ts, ts + dur, cat) if dur > 0 else 0
                tid = tid_of.get((comp, lane))
                if tid is None:
                    tid = tid_of[(comp, lane)] = len(tid_of) + 1
                    label = comp if lane == 0 else f"{comp} {comp_lanes.name(lane)}"
                    put({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                         "args": {"name": label}})  # fmt: skip
                    put({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                         "args": {"sort_index": tid}})  # fmt: skip
                    stats.event_tracks += 1
                ev: dict = {"pid": pid, "tid": tid, "ts": t_us, "cat": cat, "name": name}
                args = {k: v for g in groups if g for k, v in g}
                if args:
                    ev["args"] = args
                stats.slices += 1
                if dur > 0:
                    ev["ph"] = "X"
                    ev["dur"] = dur * us_per_tick
                else:
                    ev["ph"] = "i"
                    ev["s"] = "t"
                    stats.instants += 1
                put(ev)
                if f_out is not None:
                    for fid in pre.flows.send_ids(f_out):
                        put({"ph": "s", "id": fid, "pid": pid, "tid": tid, "ts": t_us,
                             "cat": "flow", "name": "flow"})  # fmt: skip
                        stats.flows += 1
                if f_in is not None:
                    rid = pre.flows.receive_id(f_in, seen)
                    if rid is not None:
                        put({"ph": "f", "bp": "e", "id": rid, "pid": pid, "tid": tid,
                             "ts": t_us, "cat": "flow", "name": "flow"})  # fmt: skip
        fh.write("[\n]\n" if first else "\n]\n")
        stats.bytes = fh.tell()
    finally:
        fh.close()
    stats.tracks = len(tid_of)
    stats.wall_s = time.perf_counter() - t0
    return stats
