"""Summaries of a trace: what ran, for how long, and where the time went.

Reads the trace batch by batch (memory stays flat) and reports the header, the run's final status,
event counts per category, and per component the busy time (the union of its slice events, so
overlapping slices are not counted twice) as a fraction of the run.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import pyarrow.compute as pc

from traces.reader import read_trace


@dataclasses.dataclass
class ComponentBusy:
    component: str
    busy_ticks: int
    slices: int


def _union_length(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    start = 0
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        elif e > end:
            end = e
    if end is not None:
        total += end - start
    return total


def summarize(path: str) -> dict[str, Any]:
    """A JSON-ready summary of the trace at ``path``."""
    trace = read_trace(path)
    table = trace.table
    header = trace.header
    n = table.num_rows
    end_ticks = int(pc.max(pc.add(table["ts_ticks"], table["dur_ticks"])).as_py() or 0) if n else 0
    categories = collections.Counter(table.column("category").to_pylist())
    busy: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    slices = table.filter(pc.equal(table["phase"].cast("string"), "slice"))
    for comp, ts, dur in zip(
        slices.column("component").to_pylist(),
        slices.column("ts_ticks").to_pylist(),
        slices.column("dur_ticks").to_pylist(),
        strict=True,
    ):
        busy[comp].append((ts, ts + dur))
    rows = sorted(
        (ComponentBusy(c, _union_length(iv), len(iv)) for c, iv in busy.items()),
        key=lambda r: (-r.busy_ticks, r.component),
    )
    tick_hz = int(header.get("tick_hz") or 0)
    return {
        "path": path,
        "scenario": header.get("scenario"),
        "kind": header.get("kind"),
        "seed": header.get("seed"),
        "level": header.get("level"),
        "wafersim_version": header.get("wafersim_version"),
        "status": trace.status,
        "truncated": trace.truncated,
        "note": trace.note,
        "events": n,
        "end_ticks": end_ticks,
        "end_ns": end_ticks * 1e9 / tick_hz if tick_hz else None,
        "domains": header.get("domains"),
        "categories": dict(sorted(categories.items())),
        "busy": [
            {
                "component": r.component,
                "busy_fraction": r.busy_ticks / end_ticks if end_ticks else 0.0,
                "slices": r.slices,
            }
            for r in rows
        ],
    }


def format_summary(s: dict[str, Any], top: int = 15) -> str:
    lines = [
        f"trace {s['path']}",
        f"  scenario {s['scenario']} (kind {s['kind']}), seed {s['seed']}, level {s['level']}, "
        f"wafersim {s['wafersim_version']}",
        f"  status: {s['status']}" + (" (file truncated)" if s["truncated"] else ""),
    ]
    if s["note"]:
        lines.append(f"  note: {s['note']}")
    if s["end_ns"] is not None:
        lines.append(
            f"  {s['events']:,} events over {s['end_ns']:,.1f} ns ({s['end_ticks']:,} ticks)"
        )
    lines.append(
        "  events by category: " + ", ".join(f"{k} {v:,}" for k, v in s["categories"].items())
    )
    if s["busy"]:
        lines.append(f"  busiest components (top {min(top, len(s['busy']))} of {len(s['busy'])}):")
        for row in s["busy"][:top]:
            lines.append(
                f"    {row['component']:<40} {100 * row['busy_fraction']:6.1f}% busy"
                f"  {row['slices']:>9,} slices"
            )
    return "\n".join(lines)
