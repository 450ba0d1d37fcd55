"""Activity heatmaps: units (PEs, links, chips, banks, components) x time bins, any size.

A *unit* is what one row of the map is: a PE ``pe[x,y]`` (everything under it), a link (a wafer
router's output port, a TPU ``link[a>b]``), a TPU ``chip[x,y]``, an HBM ``pch[i]/bank[j]``, or a
whole component path (the cluster's CS-2s, MemoryX, SwarmX). A cell is the share of its time bin
in which the unit is active: the union of its slices of the chosen activity class (the classes of
``plot mesh``: compute ``busy``, ``async`` operations in flight, ``fabric`` activity, or
``active`` = any of them), so overlapping slices never count twice.

Cost: the trace is read batch by batch with Arrow arrays; slices become ``(unit, start, end)``
numpy arrays with no Python loop per event. The union per unit is one sort and a running maximum
(units are laid end to end on one axis, so one pass merges all of them), and a bin's covered time
is a difference of the cumulative covered length at the bin's edges (a ``searchsorted``), so a
64 x 64 wafer or a 16 x 16 torus costs a few array passes over its events.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simcore.errors import TraceError, WafersimError
from traces.layout import natural_key
from traces.plots import activity_class, check_output, fit_title, header_tick_hz, plt, time_unit
from traces.reader import coded, iter_batches, start_end

#: Units a heatmap's rows can be; ``auto`` takes the first the trace has of pe, bank, chip,
#: then whole components.
UNITS = ("auto", "pe", "link", "chip", "bank", "component")
#: Activity classes a cell can count (see :func:`traces.plots.activity_class`).
METRICS = ("active", "busy", "async", "fabric")
#: Bins of the time axis unless told; at most :data:`MAX_BINS`.
DEFAULT_BINS = 200
MAX_BINS = 5000

_PE = re.compile(r"^pe\[(\d+),\s*(\d+)\]$")
_CHIP = re.compile(r"^chip\[(\d+(?:,\s*\d+)*)\]$")
_BANK = re.compile(r"^(bank)\[(\d+)\]$")
_LINK = re.compile(r"^link\[.*>.*\]$")

AXIS_LABELS = {
    "pe": "PE (pe[x,y], row y by row)",
    "link": "link (its source and direction)",
    "chip": "chip (chip[x,y])",
    "bank": "bank (pseudo-channel / bank)",
    "component": "component",
}
UNIT_NAMES = {
    "pe": "PEs (pe[x,y])",
    "link": "links (wafer router wavelets at --trace-level detail, TPU ici links)",
    "chip": "chips (chip[x,y])",
    "bank": "HBM banks (pch[i]/bank[j])",
    "component": "components",
}
METRIC_LABELS = {
    "active": "active: compute, async or fabric",
    "busy": "compute busy (async and fabric apart)",
    "async": "async operations in flight",
    "fabric": "fabric / link activity",
}


def unit_of(component: str, unit: str) -> tuple | None:
    """The row key of ``component`` for rows of kind ``unit`` (None: not such a unit). Keys
    sort in display order: PEs by row then column, others naturally."""
    parts = component.split("/")
    if unit == "component":
        return (natural_key(component), component)
    for i, part in enumerate(parts):
        if unit == "pe":
            m = _PE.match(part)
            if m:
                return ((int(m[2]), int(m[1])), f"pe[{m[1]},{m[2]}]")
        elif unit == "chip":
            m = _CHIP.match(part)
            if m:
                idx = tuple(int(v) for v in m[1].split(","))
                return (idx[::-1], part)
        elif unit == "bank":
            if _BANK.match(part):
                name = "/".join(p for p in parts[: i + 1] if "[" in p)  # stack/pch/bank
                return (natural_key(name), name)
        elif unit == "link" and _LINK.match(part):
            return (natural_key(part), part)
    return None


def _classes(categories: list[str], metric: str) -> np.ndarray:
    def wanted(cat: str) -> bool:
        cls = activity_class(cat)
        return cls is not None if metric == "active" else cls == metric

    return np.asarray([wanted(c) for c in categories], dtype=bool)


class _Intervals:
    """Slices gathered per row key: parallel arrays of key ids, starts and ends."""

    def __init__(self) -> None:
        self.keys: dict[tuple, int] = {}
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def key_id(self, key: tuple) -> int:
        return self.keys.setdefault(key, len(self.keys))

    def add(self, ids: np.ndarray, ts: np.ndarray, te: np.ndarray) -> None:
        if len(ids):
            self.parts.append((ids, ts, te))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self.parts:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        return tuple(np.concatenate([p[i] for p in self.parts]) for i in range(3))  # type: ignore[return-value]


def _gather(path: str, unit: str, metric: str) -> tuple[dict[str, _Intervals], int, set[str]]:
    """Slices of class ``metric`` per row kind: for ``link`` rows, wafer wavelets (keyed by
    PE and port) and TPU ``ici`` / ``ici_msg`` slices apart; else one set. Also the run's end
    (ticks) and the row kinds the trace has at all."""
    wanted_units = ("pe", "bank", "chip", "component") if unit == "auto" else (unit,)
    sets: dict[str, _Intervals] = {}
    kinds: set[str] = set()
    end = 0
    lut_cache: dict[tuple[str, str], int] = {}
    for batch in iter_batches(path):
        ts, te = start_end(batch)
        end = max(end, int(te.max(initial=0)))
        names, ci = coded(batch, "component")
        cats, ki = coded(batch, "category")
        slices = te > ts
        for u in wanted_units:
            if u == "link":
                _gather_links(batch, names, cats, ci, ki, ts, te, slices, sets, kinds)
                continue
            acc = sets.setdefault(u, _Intervals())
            lut = np.full(len(names), -1, np.int64)
            for j, name in enumerate(names):
                hit = lut_cache.get((u, name))
                if hit is None:
                    key = unit_of(name, u) if name != "run" else None
                    hit = acc.key_id(key) if key is not None else -1
                    lut_cache[(u, name)] = hit
                lut[j] = hit
            if (lut >= 0).any():
                kinds.add(u)
            ids = lut[ci]
            take = slices & (ids >= 0) & _classes(cats, metric)[ki]
            acc.add(ids[take], ts[take], te[take])
    return sets, end, kinds


def _gather_links(batch, names, cats, ci, ki, ts, te, slices, sets, kinds) -> None:
    """Link rows: a wafer router's wavelets by (PE, port), TPU ``ici`` and ``ici_msg`` slices
    by link (kept apart: the packets' slices are used when the trace has them)."""
    for cat_name, label in (("wavelet", "wavelet"), ("ici", "ici"), ("ici_msg", "ici_msg")):
        if cat_name not in cats:
            continue
        take = slices & (ki == cats.index(cat_name))
        if not take.any():
            continue
        acc = sets.setdefault(f"link:{label}", _Intervals())
        rows = np.flatnonzero(take)
        if label == "wavelet":
            # a single wavelet names its ``port``; an express stream its ``ports`` (a list)
            args = batch.column("args_str").take(pa.array(rows))
            named = pc.coalesce(pc.map_lookup(args, "port", "first"),
                                pc.map_lookup(args, "ports", "first"))  # fmt: skip
            split = pc.split_pattern(named, ",")
            rows = rows[pc.list_parent_indices(split).to_numpy()]
            port = pc.list_flatten(split).dictionary_encode()
            pnames = port.dictionary.to_pylist()
            code = ci[rows] * (len(pnames) + 1) + port.indices.to_numpy()
            uniq, inv = np.unique(code, return_inverse=True)
            lut = np.full(len(uniq), -1, np.int64)
            for j, c in enumerate(uniq.tolist()):
                key = unit_of(names[c // (len(pnames) + 1)], "pe")
                if key is not None:
                    d = pnames[c % (len(pnames) + 1)]
                    lut[j] = acc.key_id((key[0], d, f"{key[1]} {d}"))
            ids = lut[inv]
        else:
            lut = np.full(len(names), -1, np.int64)
            for j, name in enumerate(names):
                key = unit_of(name, "link")
                if key is not None:
                    lut[j] = acc.key_id(key)
            ids = lut[ci[rows]]
        keep = ids >= 0
        if keep.any():
            kinds.add("link")
        acc.add(ids[keep], ts[rows][keep], te[rows][keep])


def binned_coverage(
    ids: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_units: int, edges: np.ndarray
) -> np.ndarray:
    """``[unit, bin]``: ticks of each bin (between consecutive ``edges``) covered by the union
    of the unit's intervals ``[start, end)``. Vectorised: units are laid end to end on one axis
    (offset ``unit * span``), merged by a sort and a running maximum, and a bin's coverage is
    the cumulative covered length at its right edge less that at its left."""
    span = int(max(int(edges[-1]), int(ends.max(initial=0)))) + 1
    if n_units * span >= 2**62:
        raise TraceError("trace too long to bin exactly (ticks x units overflow 64 bits)")
    off = ids.astype(np.int64) * span
    s = starts.astype(np.int64) + off
    e = ends.astype(np.int64) + off
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    out = np.zeros((n_units, len(edges) - 1), dtype=np.float64)
    if len(s) == 0:
        return out
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]  # starts a merged run: after everything before it ended
    first = np.flatnonzero(new)
    ms = s[first]
    me = np.maximum.reduceat(e, first)  # each merged run's end
    cum = np.concatenate([[0], np.cumsum(me - ms)])  # covered length before each run

    def covered(q: np.ndarray) -> np.ndarray:  # covered length on [0, q) of the global axis
        i = np.searchsorted(ms, q, side="right") - 1
        safe = np.maximum(i, 0)
        inside = np.minimum(q - ms[safe], me[safe] - ms[safe])
        return np.where(i >= 0, cum[safe] + inside, 0)

    q = edges.astype(np.int64)[None, :] + (np.arange(n_units, dtype=np.int64) * span)[:, None]
    c = covered(q.ravel()).reshape(q.shape)
    out[:] = np.diff(c, axis=1)
    return out


def heatmap_values(
    path: str, *, unit: str = "auto", metric: str = "active", bins: int = DEFAULT_BINS
) -> tuple[np.ndarray, list[str], str, int, int]:
    """``(grid, row names, row kind, end ticks, tick_hz)``: ``grid[row, bin]`` is the % of the
    bin the row's unit is active in slices of class ``metric``."""
    if unit not in UNITS:
        raise WafersimError(f"unknown heatmap unit '{unit}'; choose one of: {', '.join(UNITS)}")
    if metric not in METRICS:
        raise WafersimError(
            f"unknown heatmap metric '{metric}'; choose one of: {', '.join(METRICS)}"
        )
    if not 1 <= bins <= MAX_BINS:
        raise WafersimError(f"--bins {bins} is out of range; give 1 to {MAX_BINS}")
    tick_hz = header_tick_hz(path)
    sets, end, kinds = _gather(path, unit, metric)
    if unit == "auto":
        kind = next((k for k in ("pe", "bank", "chip") if k in kinds), "component")
        acc = sets.get(kind, _Intervals())
    elif unit == "link":
        kind = "link"
        acc = next((sets[k] for k in ("link:wavelet", "link:ici", "link:ici_msg")
                    if k in sets and sets[k].parts), _Intervals())  # fmt: skip
    else:
        kind = unit
        acc = sets.get(unit, _Intervals())
    if kind not in kinds:
        raise TraceError(f"'{path}' has no {UNIT_NAMES[kind]} to map; choose another --by "
                         "(auto picks what the trace has)")  # fmt: skip
    ids, starts, ends = acc.arrays()
    if not len(ids):
        raise TraceError(
            f"'{path}' has no {metric} slices on its {kind} units; try --metric active"
        )
    if end <= 0:
        raise TraceError(f"'{path}' spans no time: nothing to bin")
    bins = min(bins, end)  # never a bin shorter than a tick
    edges = np.round(np.linspace(0, end, bins + 1)).astype(np.int64)
    cover = binned_coverage(ids, starts, ends, len(acc.keys), edges)
    widths = np.diff(edges).astype(np.float64)
    order = sorted(acc.keys, key=lambda k: k[:-1])
    rows = [acc.keys[k] for k in order]
    grid = 100.0 * cover[rows] / widths[None, :]
    return grid, [k[-1] for k in order], kind, end, tick_hz


def heatmap_figure(
    path: str, *, unit: str = "auto", metric: str = "active", bins: int = DEFAULT_BINS
):
    """Rows of units over time bins, % of each bin active, on one 0-100 % scale; time axis in
    seconds or a sub-unit; at most as many row labels as fit (every k-th row named)."""
    grid, names, kind, end, tick_hz = heatmap_values(path, unit=unit, metric=metric, bins=bins)
    n = len(names)
    t_unit, size = time_unit(end / tick_hz)
    scale = 1.0 / (tick_hz * size)
    fig_h = min(10.0, max(3.2, 1.8 + 0.16 * n))
    longest = max(len(s) for s in names)
    fig, ax = plt.subplots(figsize=(10.0 + 0.05 * max(0, longest - 12), fig_h))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0.0, vmax=100.0,
                   interpolation="antialiased" if n > 200 else "nearest",
                   extent=(0.0, end * scale, n - 0.5, -0.5))  # fmt: skip
    # as many labelled rows as fit at 7 points with room between them
    room = max(1, int(fig_h * 72 * 0.7 / 11))
    step = 1
    while step * room < n:  # 1, 2, 4, 8...: a 64-wide mesh names whole PE rows
        step *= 2
    ticks = list(range(0, n, step))
    ax.set_yticks(ticks, [names[i] for i in ticks], fontsize=7)
    ax.set_ylabel(AXIS_LABELS[kind] + (f", one named every {step}" if step > 1 else ""))
    ax.set_xlabel(f"simulated time ({t_unit})")
    ax.xaxis.get_major_formatter().set_useOffset(False)
    fig.colorbar(im, ax=ax, label=f"{metric} (% of bin)")
    width = end / len(grid[0]) / tick_hz / size
    what = f"{METRIC_LABELS[metric]}, per {kind.replace('pe', 'PE')}"
    fit_title(fig, ax, f"{what}, {len(grid[0])} bins of {width:.3g} {t_unit}: "
                       f"{os.path.basename(path)}")  # fmt: skip
    fig.tight_layout()
    return fig


def plot_heatmap(
    path: str, out: str, *, unit: str = "auto", metric: str = "active", bins: int = DEFAULT_BINS
) -> None:
    """Write :func:`heatmap_figure` of the trace ``path`` to ``out``."""
    check_output(out)
    fig = heatmap_figure(path, unit=unit, metric=metric, bins=bins)
    fig.savefig(out)
    plt.close(fig)
