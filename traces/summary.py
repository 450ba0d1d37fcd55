"""Summaries of a trace: what ran, for how long, where the time went, and what held it up.

The trace is read batch by batch; per event only a few integers are kept (numpy arrays), so a
summary of millions of events fits in tens of megabytes. Reported:

* header, final status, event counts per category;
* **busy fraction** per component and per ancestor in the path tree (``wafer/pe[3,4]`` covers
  its router, ce and task children): the union of its slice events, so overlapping slices are
  not counted twice, divided by the run's length. ``stall``, ``async`` (operation lifetimes)
  and ``wavelet`` (fabric traffic) slices are not busy time;
* **top stalls** (category ``stall``) by total stalled time, grouped by component, name and
  cause (the string arguments of the stall event, e.g. ``cause=backpressure``);
* **link and queue utilisation** from counter events of category ``link``/``queue``: the
  time-weighted mean occupancy (each sample holds until the next or the end of the run), its
  maximum, the fraction of time non-zero and, when the events carry an integer ``capacity``
  argument, mean occupancy / capacity;
* the **critical path**, where flows make it derivable: from the slice that ends last, step back
  to the send of its ``flow_in`` if it has one that ended before it or began before it,
  otherwise to the latest slice on the same component that ended by its start; the chain of
  events and the share per component (each step charged only the time it adds; the rest of
  the path's length, ``waiting_ticks``, lies between its slices: in flight, or waiting).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traces.layout import natural_key
from traces.reader import BatchStream, coded, iter_batches, start_end

# Slices that are not work: stalls; run markers; ``async`` (an asynchronous operation's lifetime,
# mostly waiting for its data); ``wavelet`` (fabric traffic through a router, reported as link
# utilisation instead).
NOT_BUSY = frozenset({"stall", "run", "async", "wavelet"})
UTIL_CATEGORIES = ("link", "queue")
#: Above this many PEs (components ``.../pe[x,y]``), the text summary gives busy per region of
#: the array (at most REGION_GRID x REGION_GRID blocks) instead of a line per component.
REGION_PES = 64
REGION_GRID = 8
_PE = re.compile(r"^(.*)/pe\[(\d+),(\d+)\]$")
CRITICAL_PATH_MAX_SLICES = 5_000_000


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length covered by the intervals ``[starts[i], ends[i])``."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return int((reach[last] - s[first]).sum())


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


@dataclasses.dataclass
class _Acc:
    """Per-trace accumulators filled batch by batch."""

    intervals: dict[str, list[tuple[np.ndarray, np.ndarray]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    slice_counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    stalls: dict[tuple[str, str, str], list[int]] = dataclasses.field(default_factory=dict)
    series: dict[tuple[str, str, str], list] = dataclasses.field(default_factory=dict)
    capacity: dict[tuple[str, str, str], int] = dataclasses.field(default_factory=dict)
    cp: list[tuple[np.ndarray, ...]] = dataclasses.field(default_factory=list)
    cp_names: list[str] = dataclasses.field(default_factory=list)
    cp_index: dict[str, int] = dataclasses.field(default_factory=dict)


def _cause(args_str: list[tuple[str, str]] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(args_str or [])) or "-"


def _add_batch(acc: _Acc, batch: pa.RecordBatch, paths_seen: dict[str, list[str]]) -> None:
    phase = batch.column("phase").cast(pa.string())
    cat = batch.column("category").cast(pa.string())
    ts, end = start_end(batch)
    comp_names, comp_idx = coded(batch, "component")
    is_slice = pc.not_equal(phase, "counter").to_numpy(zero_copy_only=False)
    busy = is_slice & ~pc.is_in(cat, pa.array(sorted(NOT_BUSY))).to_numpy(zero_copy_only=False)
    for ci in np.unique(comp_idx[busy]):
        comp = comp_names[ci]
        mask = busy & (comp_idx == ci)
        pair = (ts[mask], end[mask])
        acc.slice_counts[comp] += int(mask.sum())
        anc = paths_seen.get(comp)
        if anc is None:
            anc = paths_seen[comp] = _ancestors(comp)
        for a in anc:
            acc.intervals[a].append(pair)
    # stalls and utilisation counters are rare enough for per-row Python
    stall_rows = np.flatnonzero(
        is_slice & pc.equal(cat, "stall").to_numpy(zero_copy_only=False)
    ).tolist()
    if stall_rows:
        sub = batch.take(pa.array(stall_rows))
        for comp, name, t0, d, a in zip(
            sub.column("component").to_pylist(),
            sub.column("name").to_pylist(),
            sub.column("ts_ticks").to_pylist(),
            sub.column("dur_ticks").to_pylist(),
            sub.column("args_str").to_pylist(),
            strict=True,
        ):
            del t0
            rec = acc.stalls.setdefault((comp, name, _cause(a)), [0, 0])
            rec[0] += 1
            rec[1] += d
    util_mask = (~is_slice) & pc.is_in(cat, pa.array(UTIL_CATEGORIES)).to_numpy(
        zero_copy_only=False
    )
    util_rows = np.flatnonzero(util_mask).tolist()
    if util_rows:
        sub = batch.take(pa.array(util_rows))
        for comp, c, name, t0, v, a in zip(
            sub.column("component").to_pylist(),
            sub.column("category").to_pylist(),
            sub.column("name").to_pylist(),
            sub.column("ts_ticks").to_pylist(),
            sub.column("value").to_pylist(),
            sub.column("args_int").to_pylist(),
            strict=True,
        ):
            key = (comp, c, name)
            acc.series.setdefault(key, []).append((t0, 0.0 if v is None else v))
            for k, cap in a or []:
                if k == "capacity":
                    acc.capacity[key] = cap
    _add_cp(acc, batch, is_slice, cat)


def _add_cp(acc: _Acc, batch: pa.RecordBatch, is_slice: np.ndarray, cat: pa.Array) -> None:
    """Critical-path material: every slice's span, component id, flow ids and label."""
    ts, end = start_end(batch)
    comp_names, comp_idx = coded(batch, "component")
    names = batch.column("name")
    sl = np.flatnonzero(is_slice & ~pc.equal(cat, "run").to_numpy(zero_copy_only=False))
    if len(sl):
        gid = np.array(
            [acc.cp_index.setdefault(c, len(acc.cp_index)) for c in comp_names], np.int64
        )
        acc.cp_names[:] = list(acc.cp_index)
        fo = batch.column("flow_out").fill_null(-1).to_numpy(zero_copy_only=False)
        fi = batch.column("flow_in").fill_null(-1).to_numpy(zero_copy_only=False)
        name_idx = names.indices.to_numpy(zero_copy_only=False)
        name_list = names.dictionary.to_pylist()
        cat_list = cat.to_pylist()
        labels = np.array(
            [f"{cat_list[i]}:{name_list[name_idx[i]]}" for i in sl.tolist()], dtype=object
        )
        acc.cp.append((ts[sl], end[sl], gid[comp_idx[sl]], fo[sl], fi[sl], labels))


def _utilisation(acc: _Acc, end_ticks: int) -> list[dict[str, Any]]:
    rows = []
    for key, samples in acc.series.items():
        samples.sort()
        t = np.array([s[0] for s in samples], np.int64)
        v = np.array([s[1] for s in samples], float)
        span_end = max(end_ticks, int(t[-1]))
        hold = np.diff(np.append(t, span_end)).astype(float)
        span = float(span_end - t[0])
        mean = float((v * hold).sum() / span) if span > 0 else float(v[-1])
        nonzero = float(hold[v > 0].sum() / span) if span > 0 else float(v[-1] > 0)
        cap = acc.capacity.get(key)
        rows.append({
            "component": key[0], "category": key[1], "name": key[2],
            "samples": len(samples), "mean": mean, "max": float(v.max()),
            "nonzero_fraction": nonzero, "capacity": cap,
            "utilisation": mean / cap if cap else None,
        })  # fmt: skip
    rows.sort(
        key=lambda r: (-(r["utilisation"] or r["nonzero_fraction"]), natural_key(r["component"]))
    )
    return rows


def regions(busy: list[tuple[str, int, int]], end_ticks: int) -> dict[str, Any] | None:
    """Busy by region of the PE array: the PEs (``.../pe[x,y]`` components: their router, CE
    and tasks together) grouped in at most REGION_GRID x REGION_GRID blocks, each with its mean
    and largest busy fraction and busiest PE (a PE with no busy slice counts as 0). None at or
    below REGION_PES PEs."""
    pes = {}
    for comp, ticks, _ in busy:
        m = _PE.match(comp)
        if m:
            pes[(int(m.group(2)), int(m.group(3)))] = (comp, ticks)
    if len(pes) <= REGION_PES:
        return None
    width = 1 + max(x for x, _ in pes)
    height = 1 + max(y for _, y in pes)
    bw, bh = -(-width // REGION_GRID), -(-height // REGION_GRID)
    rows = []
    for y0 in range(0, height, bh):
        for x0 in range(0, width, bw):
            x1, y1 = min(x0 + bw, width), min(y0 + bh, height)
            inside = [pes[(x, y)] for y in range(y0, y1) for x in range(x0, x1) if (x, y) in pes]
            total = sum(t for _, t in inside)
            top = max(inside, key=lambda r: r[1], default=("", 0))  # (first of a tie)
            mean = total / ((x1 - x0) * (y1 - y0))
            rows.append({
                "region": f"{x0}:{x1},{y0}:{y1}", "pes": (x1 - x0) * (y1 - y0),
                "mean_busy_fraction": mean / end_ticks if end_ticks else 0.0,
                "max_busy_fraction": top[1] / end_ticks if end_ticks else 0.0,
                "busiest": top[0],
            })  # fmt: skip
    return {"width": width, "height": height, "block": [bw, bh], "rows": rows}


def critical_path_of(path: str, events: int = 10_000) -> dict[str, Any] | None:
    """:func:`critical_path` of the trace at ``path`` alone (one pass reading what it needs),
    listing up to ``events`` steps (the Perfetto export's critical-path track)."""
    acc = _Acc()
    for batch in iter_batches(path):
        phase = batch.column("phase").cast(pa.string())
        is_slice = pc.not_equal(phase, "counter").to_numpy(zero_copy_only=False)
        _add_cp(acc, batch, is_slice, batch.column("category").cast(pa.string()))
    return critical_path(acc, events=events)


def critical_path(acc: _Acc, limit: int = 10_000, events: int = 200) -> dict[str, Any] | None:
    """Walk back from the last-ending slice along flows and same-component precedence; list
    the first ``events`` steps."""
    if not acc.cp:
        return None
    ts, end, comp, fo, fi, labels = (np.concatenate(x) for x in zip(*acc.cp, strict=True))
    if len(ts) > CRITICAL_PATH_MAX_SLICES:
        return {"note": f"skipped: more than {CRITICAL_PATH_MAX_SLICES:,} slices"}
    sender = {}
    for i in np.flatnonzero(fo >= 0).tolist():
        sender.setdefault(int(fo[i]), i)
    by_comp: dict[int, np.ndarray] = {}
    order = np.lexsort((ts, end, comp))
    comp_sorted = comp[order]
    bounds = np.flatnonzero(np.diff(comp_sorted)) + 1
    for chunk in np.split(order, bounds):
        by_comp[int(comp[chunk[0]])] = chunk  # indices sorted by end within the component
    cur = int(np.argmax(end))
    steps, via_flow = [], 0
    visited = set()
    while cur not in visited and len(steps) < limit:
        visited.add(cur)
        steps.append(cur)
        f = int(fi[cur])
        # Follow a flow back to its sender if it could have caused this slice: it ended first
        # (a stream feeding a receive), or began first (a task starting an operation mid-way).
        s_ = sender.get(f, -1) if f >= 0 else -1
        if s_ >= 0 and s_ != cur and (end[s_] <= end[cur] or ts[s_] <= ts[cur]):
            cur = s_
            via_flow += 1
            continue
        chunk = by_comp[int(comp[cur])]
        k = int(np.searchsorted(end[chunk], ts[cur], side="right")) - 1
        while k >= 0 and int(chunk[k]) in visited:
            k -= 1
        if k < 0:
            break
        cur = int(chunk[k])
    steps.reverse()
    names = acc.cp_names
    # Each step is charged the time it adds to the path: from the later of its start and the
    # previous step's end, so overlapping steps (a stream's send and receive) are not counted
    # twice and the shares add up to the path's length less its gaps (``waiting_ticks``).
    share: collections.Counter = collections.Counter()
    reached = int(ts[steps[0]])
    for i in steps:
        added = int(end[i]) - max(int(ts[i]), reached)
        if added > 0:
            share[names[comp[i]]] += added
        reached = max(reached, int(end[i]))
    length = int(end[steps[-1]] - ts[steps[0]])
    return {
        "length_ticks": length,
        "steps": len(steps),
        "via_flows": via_flow,
        "start_ticks": int(ts[steps[0]]),
        "end_ticks": int(end[steps[-1]]),
        "share": [{"component": c, "ticks": t} for c, t in share.most_common()],
        "waiting_ticks": length - sum(share.values()),
        "events": [
            {
                "component": names[comp[i]],
                "event": labels[i],
                "ts_ticks": int(ts[i]),
                "dur_ticks": int(end[i] - ts[i]),
            }
            for i in steps[:events]
        ],
    }


def summarize(path: str) -> dict[str, Any]:
    """A JSON-ready summary of the trace at ``path``."""
    stream = BatchStream(path)
    header = stream.header
    acc = _Acc()
    categories: collections.Counter = collections.Counter()
    paths_seen: dict[str, list[str]] = {}
    end_ticks = 0
    status = "cut off"
    n = 0
    for batch in stream:
        n += batch.num_rows
        ends = pc.add(batch.column("ts_ticks"), batch.column("dur_ticks"))
        end_ticks = max(end_ticks, int(pc.max(ends).as_py() or 0))
        vc = pc.value_counts(batch.column("category").cast(pa.string()))
        for item in vc.to_pylist():
            categories[item["values"]] += item["counts"]
        run_end = pc.and_(
            pc.equal(batch.column("category").cast(pa.string()), "run"),
            pc.equal(batch.column("name").cast(pa.string()), "end"),
        )
        hits = np.flatnonzero(run_end.to_numpy(zero_copy_only=False))
        if len(hits):
            args = dict(batch.column("args_str")[int(hits[-1])].as_py() or [])
            status = args.get("status", "unknown")
        _add_batch(acc, batch, paths_seen)
    busy = []
    for comp, pairs in acc.intervals.items():
        s = np.concatenate([p[0] for p in pairs])
        e = np.concatenate([p[1] for p in pairs])
        busy.append((comp, union_length(s, e), len(s)))
    busy.sort(key=lambda r: (-r[1], natural_key(r[0])))  # pe[2] before pe[10] on a tie
    stalls = sorted(
        acc.stalls.items(), key=lambda kv: (-kv[1][1], tuple(natural_key(k) for k in kv[0]))
    )
    stall_total = sum(v[1] for v in acc.stalls.values())
    by_cause: collections.Counter = collections.Counter()
    for (_, _, cause), (_, ticks) in acc.stalls.items():
        by_cause[cause] += ticks
    tick_hz = int(header.get("tick_hz") or 0)
    return {
        "path": path,
        "scenario": header.get("scenario"),
        "kind": header.get("kind"),
        "seed": header.get("seed"),
        "level": header.get("level"),
        "wafersim_version": header.get("wafersim_version"),
        "status": status,
        "truncated": stream.truncated,
        "note": stream.note,
        "records": n,
        "end_ticks": end_ticks,
        "end_ns": end_ticks * 1e9 / tick_hz if tick_hz else None,
        "domains": header.get("domains"),
        "categories": dict(sorted(categories.items())),
        "busy": [
            {
                "component": c,
                "busy_fraction": b / end_ticks if end_ticks else 0.0,
                "busy_ticks": b,
                "slices": k,
                "leaf": c in acc.slice_counts,
            }
            for c, b, k in busy
        ],
        "stalls": {
            "total_ticks": stall_total,
            "by_cause": [{"cause": c, "ticks": t} for c, t in by_cause.most_common()],
            "top": [
                {
                    "component": c,
                    "name": nm,
                    "cause": cause,
                    "count": cnt,
                    "ticks": t,
                    "fraction_of_run": t / end_ticks if end_ticks else 0.0,
                }
                for (c, nm, cause), (cnt, t) in stalls[:50]
            ],
        },
        "utilisation": _utilisation(acc, end_ticks),
        "critical_path": critical_path(acc),
        "regions": regions(busy, end_ticks),
        "trace_region": header.get("trace_region"),
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
            f"  {s['records']:,} trace records over {s['end_ns']:,.1f} ns "
            f"({s['end_ticks']:,} ticks)"
        )
    lines.append(
        "  records by category: " + ", ".join(f"{k} {v:,}" for k, v in s["categories"].items())
    )
    if s.get("trace_region"):
        x0, x1, y0, y1 = s["trace_region"]
        lines.append(f"  detail-level events recorded for the PEs {x0}:{x1},{y0}:{y1} only")
    leaves = [r for r in s["busy"] if r["leaf"]]
    reg = s.get("regions")
    if reg:
        bw, bh = reg["block"]
        lines.append(
            f"  busy by region ({reg['width']} x {reg['height']} PEs in blocks of {bw} x {bh}; "
            "detail for one region: run --trace-region X0:X1,Y0:Y1):"
        )
        lines += _table(
            ("region (x0:x1,y0:y1)", "PEs", "mean busy (% of run)", "max busy (% of run)",
             "busiest PE"),
            [(r["region"], f"{r['pes']:,}", f"{100 * r['mean_busy_fraction']:.1f}",
              f"{100 * r['max_busy_fraction']:.1f}", r["busiest"]) for r in reg["rows"]],
        )  # fmt: skip
    elif leaves:
        lines.append(f"  busiest components (top {min(top, len(leaves))} of {len(leaves)}):")
        lines += _table(
            ("component", "busy (% of run)", "busy (ticks)", "slices"),
            [(r["component"], f"{100 * r['busy_fraction']:.1f}", f"{r['busy_ticks']:,}",
              f"{r['slices']:,}") for r in leaves[:top]],
        )  # fmt: skip
    st = s["stalls"]
    if st["top"]:
        total = st["total_ticks"]
        lines.append(f"  stalls: {total:,} ticks in total; by cause (top 5):")
        lines += _table(
            ("stalled (ticks)", "stalled (% of all stalls)", "cause"),
            [(f"{c['ticks']:,}", f"{100 * c['ticks'] / total if total else 0.0:.1f}",
              c["cause"]) for c in st["by_cause"][:5]],
        )  # fmt: skip
        lines.append(f"  top stalls (top {min(top, 10, len(st['top']))}):")
        lines += _table(
            ("component", "stall", "stalls", "stalled (ticks)", "stalled (% of run)", "cause"),
            [(r["component"], r["name"], f"{r['count']:,}", f"{r['ticks']:,}",
              f"{100 * r['fraction_of_run']:.2f}", r["cause"])
             for r in st["top"][: min(top, 10)]],
        )  # fmt: skip
    if s["utilisation"]:
        lines.append(f"  link/queue utilisation (top {min(top, len(s['utilisation']))}):")
        lines += _table(
            ("component", "counter", "category", "mean (entries)", "max (entries)",
             "capacity (entries)", "mean (% of capacity)", "non-zero (% of time)"),
            [(r["component"], r["name"], r["category"], f"{r['mean']:.2f}", f"{r['max']:g}",
              f"{r['capacity']:,}" if r["capacity"] else "-",
              f"{100 * r['utilisation']:.1f}" if r["capacity"] else "-",
              f"{100 * r['nonzero_fraction']:.1f}") for r in s["utilisation"][:top]],
        )  # fmt: skip
    cp = s["critical_path"]
    if cp and "length_ticks" in cp:
        lines.append(
            f"  critical path: {cp['length_ticks']:,} ticks, {cp['steps']:,} events "
            f"({cp['via_flows']:,} hops along flows); share by component"
            f"{' (the rest in flight or waiting)' if cp['waiting_ticks'] else ''}:"
        )
        length = cp["length_ticks"]
        lines += _table(
            ("component", "on the path (% of it)", "on the path (ticks)"),
            [(r["component"], f"{100 * r['ticks'] / length if length else 0.0:.1f}",
              f"{r['ticks']:,}") for r in cp["share"][:5]],
        )  # fmt: skip
    elif cp:
        lines.append(f"  critical path: {cp['note']}")
    return "\n".join(lines)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """``rows`` under ``header`` (each column's name and unit), indented for the summary:
    columns of numbers right-aligned, the others (names, causes) left-aligned."""
    if not rows:
        return []
    cols = list(zip(header, *rows, strict=True))
    widths = [max(len(c) for c in col) for col in cols]
    right = [all(_NUMBER.fullmatch(c) for c in col[1:]) for col in cols]
    return [
        "    " + "  ".join(
            f"{c:>{w}}" if r else f"{c:<{w}}"
            for c, w, r in zip(row, widths, right, strict=True)
        ).rstrip()
        for row in (header, *rows)
    ]  # fmt: skip


_NUMBER = re.compile(r"-|[-+]?[\d,]*\.?\d+(e[-+]?\d+)?")
