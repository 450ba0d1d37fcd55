"""Plots of traces and of model comparisons (matplotlib, Agg backend: no display needed).

* :func:`plot_mesh` — heatmap over the ``pe[x,y]`` grid of a wafer trace: busy fraction of each
  PE (union of the slices of the PE and its children, from :mod:`traces.summary`) or the mean
  depth of its buffers and queues (their counters; occupancy in entries, not utilisation).
* :func:`plot_timeline` — one row per component (or per ancestor, above :data:`MAX_ROWS`
  components), slices as bars over the whole run, time in seconds or a sub-unit, one colour
  per category (:data:`CATEGORY_COLOURS`, shared by every plot).
* :func:`plot_comparison` — simulated vs analytical model (and a published reference, where
  there is one) at labelled points. It takes plain values: running a validation case to get them
  is the workloads' business (``app/plots.py``), since traces is a lower layer and imports
  nothing but simcore.

The output format follows the file extension (``.png`` or ``.svg``).
"""

from __future__ import annotations

import os
import re
import textwrap
import zlib
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: render to files only

import matplotlib.pyplot as plt
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.ticker import FuncFormatter, MaxNLocator

from simcore.errors import TraceError, WafersimError
from traces.layout import display_segments, natural_key
from traces.reader import coded, iter_batches, read_header, start_end
from traces.summary import summarize, union_length

_PE = re.compile(r"^(?P<prefix>.*?(pe|chip))\[(?P<x>\d+),\s*(?P<y>\d+)(,\s*(?P<z>\d+))?\]$")

#: How ``plot mesh`` classes slices by category: compute (every category not named here),
#: asynchronous operations in flight (an ``async`` operation's lifetime, a TPU ``collective``
#: phase or ``p2p`` transfer part), fabric activity (wavelets through a router, ICI transfers,
#: streams, the HBM bus).
#: ``stall`` and ``run`` slices are no activity.
ASYNC_CATEGORIES = frozenset({"async", "collective", "p2p"})
FABRIC_CATEGORIES = frozenset({"wavelet", "ici", "ici_msg", "link", "stream", "bus"})
IDLE_CATEGORIES = frozenset({"stall", "run"})
ACTIVITY_LABELS = {
    "busy": "compute busy (% of run; async and fabric apart)",
    "async": "async operations in flight (% of run)",
    "fabric": "fabric / link activity (% of run)",
}


def activity_class(category: str) -> str | None:
    """``busy`` (compute), ``async``, ``fabric``, or None for stalls and run markers."""
    if category in IDLE_CATEGORIES:
        return None
    if category in ASYNC_CATEGORIES:
        return "async"
    if category in FABRIC_CATEGORIES:
        return "fabric"
    return "busy"


FORMATS = (".png", ".svg")


def header_tick_hz(path: str) -> int:
    """The trace's tick rate from its header (1 GHz if it gives none); a damaged value is a
    :class:`TraceError`, not a crash."""
    raw = read_header(path).get("tick_hz") or 1_000_000_000
    try:
        tick_hz = int(raw)
    except (TypeError, ValueError):
        raise TraceError(f"'{path}' has a damaged header (tick_hz {raw!r})") from None
    if tick_hz <= 0:
        raise TraceError(f"'{path}' has a damaged header (tick_hz {tick_hz})")
    return tick_hz


def check_format(out: str) -> None:
    """Refuse an output path that is not ``.png`` or ``.svg``."""
    if os.path.splitext(out)[1].lower() not in FORMATS:
        raise WafersimError(f"plot output '{out}' must end in .png or .svg")


def check_output(out: str) -> None:
    """Refuse an output path that is not ``.png`` or ``.svg``; create its folder."""
    check_format(out)
    parent = os.path.dirname(out)
    if parent:
        os.makedirs(parent, exist_ok=True)


_LINK = re.compile(r"^link\[(?P<x>\d+),\s*(?P<y>\d+)(,\s*\d+)?>")


def _pe_of(component: str) -> tuple[int, int] | None:
    """``(x, y)`` of the PE or chip a component path is (or is under), or of the chip a TPU
    link ``link[x,y>...]`` leaves from; None for anything else."""
    parts = component.split("/")
    for part in parts:
        m = _PE.match(part) or _LINK.match(part)
        if m:
            return int(m["x"]), int(m["y"])
    return None


def _activity_values(path: str, metric: str) -> dict[tuple[int, int], list[float]]:
    """Per ``(x, y)``: the share of the run (0..1) that the PE or chip, with everything under
    it, spends in slices of class ``metric`` (the union of those slices)."""
    spans: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
    placed = False  # any component on the grid at all
    end = 0
    xy_of: dict[str, tuple[int, int] | None] = {}
    for batch in iter_batches(path):
        ts, te = start_end(batch)
        end = max(end, int(te.max(initial=0)))
        names, ci = coded(batch, "component")
        cats, ki = coded(batch, "category")
        placed = placed or any(_pe_of(n) is not None for n in names)
        cls = [activity_class(c) == metric for c in cats]
        take = np.asarray(cls, bool)[ki] & (te > ts)
        if not take.any():
            continue
        for i in np.unique(ci[take]).tolist():
            name = names[i]
            if name not in xy_of:
                xy_of[name] = _pe_of(name)
            xy = xy_of[name]
            if xy is not None:
                mask = take & (ci == i)
                spans.setdefault(xy, []).append((ts[mask], te[mask]))
    if placed and not spans:
        detail = " (wavelets are traced at --trace-level detail)" if metric == "fabric" else ""
        raise TraceError(f"'{path}' has no {metric} slices on its PEs or chips{detail}")
    out: dict[tuple[int, int], list[float]] = {}
    for xy, parts in spans.items():
        covered = union_length(np.concatenate([a for a, _ in parts]),
                               np.concatenate([b for _, b in parts]))  # fmt: skip
        out[xy] = [covered / end if end else 0.0]
    return out


def mesh_values(path: str, metric: str = "busy") -> np.ndarray:
    """Grid ``[y, x]`` of per-PE (wafer) or per-chip (TPU, z layers together) values, NaN where
    one has no data: ``busy``, ``async``, ``fabric`` as a share of the run (0..1, see
    :func:`activity_class`), or ``link``: the time-weighted mean depth of its link, buffer and
    queue counters (entries: wavelets or items), averaged over them. That is occupancy, not
    utilisation; link utilisation per direction is :func:`link_values`."""
    values: dict[tuple[int, int], list[float]] = {}
    if metric in ACTIVITY_LABELS:
        values = _activity_values(path, metric)
    elif metric == "link":
        for row in summarize(path)["utilisation"]:
            xy = _pe_of(row["component"])
            if xy is not None:
                values.setdefault(xy, []).append(row["mean"])
    else:
        raise WafersimError(
            f"unknown mesh metric '{metric}'; choose {', '.join(ACTIVITY_LABELS)} or link"
        )
    if not values:
        what = "link/queue counter events on components" if metric == "link" else "components"
        raise TraceError(
            f"'{path}' has no {what} named like 'pe[x,y]' or 'chip[x,y]'; mesh plots need a "
            "wafer or TPU trace (a gpt-ws or link-chain trace is no mesh: try `wafersim plot "
            "timeline`)"
        )
    w = 1 + max(x for x, _ in values)
    h = 1 + max(y for _, y in values)
    grid = np.full((h, w), np.nan)
    for (x, y), vs in values.items():
        grid[y, x] = float(np.mean(vs))
    return grid


def plot_mesh(path: str, out: str, *, metric: str = "busy") -> None:
    """Heatmap per PE or chip of compute busy, async or fabric activity (% of the run), or
    mean buffer and queue depth (``link``, in entries)."""
    check_output(out)
    grid = mesh_values(path, metric)
    if metric in ACTIVITY_LABELS:
        grid = grid * 100.0
        label = ACTIVITY_LABELS[metric]
    else:
        label = "mean buffer / queue depth (entries; not utilisation: plot links)"
    title = f"{label.split(' (')[0]} per PE/chip: {os.path.basename(path)}"
    fig = mesh_figure(grid, label, title, vmax=100.0 if metric in ACTIVITY_LABELS else None)
    fig.savefig(out)
    plt.close(fig)


#: Smallest font (points) a cell's value is written in; smaller cells are left unlabelled.
MIN_CELL_FONT = 5.0


def mesh_figure(grid: np.ndarray, label: str, title: str, vmax: float | None = None) -> plt.Figure:
    """The heatmap of ``grid[y, x]``: values written in the cells only where they fit (no
    overlapping labels, whatever the mesh's shape), a colour bar beside the mesh (below a
    single row), the title wrapped to the figure's width."""
    h, w = grid.shape
    fig_w = max(6.0, min(12.0, 2.5 + 0.5 * w))
    title_lines = len(wrap_title(title, fig_w, 10).splitlines())
    fig_h = (min(10.0, 2.2 + 0.5 * h) if h > 1 else 2.6) + 0.2 * title_lines
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    # Square cells, unless the mesh is so long and thin that its rows or columns would be
    # slivers too small for their tick labels.
    aspect = "auto" if max(w, h) > 6 * min(w, h) and h > 1 else "equal"
    im = ax.imshow(grid, origin="upper", cmap="viridis", vmin=0.0, vmax=vmax,
                   interpolation="nearest", aspect=aspect)  # fmt: skip
    if h == 1:
        fig.colorbar(im, ax=ax, label=label, orientation="horizontal", fraction=0.12,
                     aspect=60, pad=0.45)  # fmt: skip
        ax.set_yticks([0])
    else:
        fig.colorbar(im, ax=ax, label=label)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("x (column)")
    ax.set_ylabel("y (row)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fit_title(fig, ax, title)
    fig.tight_layout()
    fig.canvas.draw()
    # A cell's size in points, once laid out: "0.00" is about 2.6 font sizes wide, 1.2 high.
    box = im.get_window_extent()
    scale = 72 / fig.dpi
    size = min(7.0, box.width / w * scale / 3.0, box.height / h * scale / 1.4)
    if size >= MIN_CELL_FONT and w * h <= 400:
        top = float(np.nanmax(grid)) or 1.0
        digits = 0 if top > 1.5 else 2  # percent as whole numbers, fractions as 0.00
        for y in range(h):
            for x in range(w):
                if not np.isnan(grid[y, x]):
                    ink = "black" if grid[y, x] / top > 0.6 else "white"  # viridis: light top
                    ax.text(x, y, f"{grid[y, x]:.{digits}f}", ha="center", va="center",
                            color=ink, fontsize=size)  # fmt: skip
    return fig


def fit_title(fig: plt.Figure, ax: plt.Axes, title: str, fontsize: float = 10) -> None:
    """``title`` wrapped to the figure's width less the axis labels' margin (about 0.62 font
    sizes per character), so it is never cut at the figure's edges."""
    ax.set_title(wrap_title(title, fig.get_figwidth(), fontsize), fontsize=fontsize)


def wrap_title(title: str, fig_width_in: float, fontsize: float) -> str:
    chars = max(20, int((fig_width_in - 1.8) * 72 / (0.62 * fontsize)))
    return textwrap.fill(title, chars, break_on_hyphens=True)


#: Colours of the common event categories, the same in every plot; others take a colour from
#: a stable hash of their name.
CATEGORY_COLOURS = {
    "task": "#1f77b4", "instr": "#aec7e8", "async": "#ff7f0e", "wavelet": "#2ca02c",
    "stall": "#d62728", "link": "#98df8a", "queue": "#9467bd", "compute": "#1f77b4",
    "mxu": "#1f77b4", "hbm": "#8c564b", "ici": "#98df8a", "ici_msg": "#2ca02c",
    "collective": "#17becf", "p2p": "#17becf", "stream": "#2ca02c", "memoryx": "#8c564b",
    "swarmx": "#e377c2",
    "update": "#bcbd22", "wait": "#7f7f7f", "row": "#c5b0d5", "cmd": "#c49c94",
    "pim": "#ff9896", "bus": "#9edae5",
}  # fmt: skip


def category_colour(category: str) -> str | tuple[float, ...]:
    """The colour of ``category`` in every plot (see :data:`CATEGORY_COLOURS`)."""
    colour = CATEGORY_COLOURS.get(category)
    if colour is not None:
        return colour
    return plt.get_cmap("tab20b")(zlib.crc32(category.encode()) % 20)


def time_unit(span_s: float) -> tuple[str, float]:
    """``(unit, seconds per unit)`` that shows a span of ``span_s`` seconds as 1 to 1000 units."""
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if span_s >= size:
            return unit, size
    return "ns", 1e-9


#: A timeline draws at most this many rows; more components are merged into their ancestors.
MAX_ROWS = 64


def _row_of(components: list[str], max_rows: int) -> dict[str, str]:
    """Each component's row: itself, or its ancestor at the deepest level (in the trace's
    track tree) that keeps the rows to ``max_rows`` (a 64x64 wafer: its PE rows)."""
    segs = {c: display_segments(c) for c in components}
    depth = max(len(v) for v in segs.values())

    def label(v: tuple[str, ...]) -> str:  # the path, without grouping nodes but the last
        return "/".join([x for x in v[:-1] if "*" not in x] + [v[-1]])

    for d in range(depth, 0, -1):
        rows = {c: label(v[:d]) for c, v in segs.items()}
        if len(set(rows.values())) <= max_rows:
            return rows
    return {c: v[0] for c, v in segs.items()}


def plot_timeline(path: str, out: str, *, max_rows: int = MAX_ROWS) -> None:
    """Write :func:`timeline_figure` of the trace ``path`` to ``out``."""
    check_output(out)
    fig = timeline_figure(path, max_rows=max_rows)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def timeline_figure(path: str, *, max_rows: int = MAX_ROWS) -> plt.Figure:
    """Per-component bars of slices over the whole run, coloured by category (each category
    of a row in its own band, so compute, async operations and fabric activity show apart),
    time in seconds or a sub-unit. Above ``max_rows`` components, rows are their ancestors (a
    PE row of the wafer); slices closer than a pixel on one row and category merge into one
    bar, so any run draws whole, in bounded time and size."""
    tick_hz = header_tick_hz(path)
    end = 0
    comps: set[str] = set()
    for batch in iter_batches(path):
        phase = batch.column("phase").cast(pa.string())
        keep = pc.and_(pc.not_equal(phase, "counter"), pc.not_equal(
            batch.column("category").cast(pa.string()), "run"))  # fmt: skip
        if pc.any(keep).as_py():
            kept = batch.filter(keep)
            comps.update(kept.column("component").cast(pa.string()).unique().to_pylist())
            end = max(end, pc.max(pc.add(kept.column("ts_ticks"), kept.column("dur_ticks")))
                      .as_py())  # fmt: skip
    if not comps:
        raise TraceError(f"'{path}' has no slices to draw")
    row_of = _row_of(sorted(comps), max_rows)
    gap = max(1, end // 3000)  # about a pixel of a 12-inch figure at 250 dpi
    bars: dict[tuple[str, str], list[list[int]]] = {}
    for batch in iter_batches(path):
        cols = [batch.column(c).to_pylist() for c in
                ("component", "category", "phase", "ts_ticks", "dur_ticks")]  # fmt: skip
        for comp, cat, phase, ts, dur in zip(*cols, strict=True):
            if phase == "counter" or cat == "run":
                continue
            spans = bars.setdefault((row_of[comp], cat), [])
            e = ts + max(dur, 1)
            if spans and spans[-1][0] - gap <= ts <= spans[-1][1] + gap:
                spans[-1][1] = max(spans[-1][1], e)
            else:
                spans.append([ts, e])
    rows = sorted({r for r, _ in bars}, key=natural_key)
    cats = sorted({c for _, c in bars})
    unit, size = time_unit(end / tick_hz)
    scale = 1.0 / (tick_hz * size)
    fig, ax = plt.subplots(figsize=(12, min(14.0, 1.6 + 0.22 * len(rows))))
    index = {r: i for i, r in enumerate(rows)}
    present: dict[str, list[str]] = {}
    for row, cat in sorted(bars):
        present.setdefault(row, []).append(cat)
    for (row, cat), spans in bars.items():  # a row's categories side by side, never hidden
        k = len(present[row])
        band = 0.84 / k
        top = index[row] - 0.42 + band * present[row].index(cat)
        ax.broken_barh([(a * scale, (b - a) * scale) for a, b in spans],
                       (top, band), facecolors=category_colour(cat))  # fmt: skip
    handles = [plt.Rectangle((0, 0), 1, 1, color=category_colour(c)) for c in cats]
    ax.legend(handles, cats, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              title="category", title_fontsize=8)  # fmt: skip
    ax.set_yticks(range(len(rows)), rows, fontsize=7 if len(rows) <= 40 else 5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, end * scale)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.xaxis.get_major_formatter().set_useOffset(False)
    merged = f", {len(comps):,} components in {len(rows)} rows" if len(rows) < len(comps) else ""
    fit_title(fig, ax, f"timeline: {os.path.basename(path)}{merged}")
    fig.tight_layout()
    return fig


def plot_comparison(
    out: str,
    *,
    labels: Sequence[str],
    simulated: Sequence[float],
    model: Sequence[float],
    reference: Sequence[float | None] = (),
    title: str = "",
    unit: str = "",
) -> None:
    """Simulated, model and reference (where not None) markers at each labelled point, on an
    axis of ``unit``. ``reference`` is empty or one value per label."""
    check_output(out)
    lengths = [len(labels), len(simulated), len(model)] + ([len(reference)] if reference else [])
    if len(set(lengths)) != 1:
        raise WafersimError(
            "plot_comparison needs one simulated, model (and reference) value per label; got "
            f"{len(labels)} labels, {len(simulated)} simulated, {len(model)} model"
            + (f", {len(reference)} reference" if reference else "")
            + " values"
        )
    fig = comparison_figure(labels, simulated, model, reference, title, unit)
    fig.savefig(out)
    plt.close(fig)


#: Point labels longer than this go on the vertical axis of a comparison.
SHORT_LABEL = 24


def comparison_figure(
    labels: Sequence[str],
    simulated: Sequence[float],
    model: Sequence[float],
    reference: Sequence[float | None],
    title: str,
    unit: str = "",
) -> plt.Figure:
    """The comparison at categorical points: markers only (the points are separate cases, so
    no line joins them), the title wrapped to the figure's width. Long point labels (more
    than :data:`SHORT_LABEL` characters) go on the vertical axis, one per line, so they never
    squeeze the plot area; short ones along the horizontal axis."""
    n = len(labels)
    pos = np.arange(n)
    across = max((len(lab) for lab in labels), default=0) > SHORT_LABEL
    if across:
        longest = max(len(lab) for lab in labels)
        fig, ax = plt.subplots(figsize=(min(16.0, 6.5 + 0.06 * longest), max(3.8, 1.8 + 0.28 * n)))
    else:
        fig, ax = plt.subplots(figsize=(min(16.0, max(6.0, 0.6 * n + 3)), 4.8))

    def put(values, *fmt, **kw):
        xy = (values, pos) if across else (pos, values)
        ax.plot(*xy, *fmt, linestyle="none", **kw)

    put(simulated, "o", label="simulated")
    put(model, "s", mfc="none", markersize=8, label="analytical model")
    refs = [(i, r) for i, r in enumerate(reference) if r is not None]
    if refs:
        i_ref, v_ref = zip(*refs, strict=True)
        xy = (v_ref, i_ref) if across else (i_ref, v_ref)
        ax.plot(*xy, "^", linestyle="none", label="reference", markersize=9)
    value_label = f"value ({unit})" if unit else "value"
    if across:
        ax.set_yticks(pos, labels, fontsize=8)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlabel(value_label)
    else:
        ax.set_xticks(pos, labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(value_label)
    fit_title(fig, ax, title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        if hasattr(formatter, "set_useOffset"):
            formatter.set_useOffset(False)
    fig.tight_layout()
    return fig


def plot_series(
    out: str,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    title: str = "",
) -> None:
    """Write :func:`series_figure` to ``out``."""
    check_output(out)
    fig = series_figure(series, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy, title=title)
    fig.savefig(out)
    plt.close(fig)


def series_figure(
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    title: str = "",
) -> plt.Figure:
    """One line with markers per labelled series of (x, y) values, sorted by x; a single
    series (label "") gets no legend. A log axis needs positive values; whole-number x values
    get whole-number ticks; no axis uses an offset."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (xs, ys) in series.items():
        pairs = sorted(zip(xs, ys, strict=True))
        for axis, on, values in (("x", logx, xs), ("y", logy, ys)):
            if on and any(v <= 0 for v in values):
                plt.close(fig)
                raise WafersimError(
                    f"a log {axis} axis needs positive values; {xlabel if axis == 'x' else ylabel}"
                    f" has {min(values):g}: drop --log{axis}"
                )
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], "o-", label=label or None)
    if logx:
        if _powers_of_two(series):  # sizes: 2, 4, 8 on the axis, not 2^1, 2^2, 2^3
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        else:
            ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    xs_all = [v for values, _ in series.values() for v in values]
    if not logx and xs_all and all(float(v).is_integer() for v in xs_all):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # p = 2, 3, 4: never 2.25
    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        if hasattr(formatter, "set_useOffset"):
            formatter.set_useOffset(False)  # a 0.2 ms change of a 48 s step reads as such
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fit_title(fig, ax, title, fontsize=9)
    if any(series):
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def _powers_of_two(series: dict[str, tuple[Sequence[float], Sequence[float]]]) -> bool:
    xs = [x for values, _ in series.values() for x in values]
    return bool(xs) and all(x > 0 and float(x).is_integer() and int(x) & (int(x) - 1) == 0
                            for x in xs)  # fmt: skip


#: Directions of a wafer router's output links (``args_str.port`` of its wavelet slices).
MESH_DIRECTIONS = ("N", "E", "S", "W")
TORUS_DIRECTIONS = ("+x", "-x", "+y", "-y")
_LINK_ENDS = re.compile(
    r"link\[(?P<x>\d+),\s*(?P<y>\d+)(,\s*\d+)?>(?P<x2>\d+),\s*(?P<y2>\d+)(,\s*\d+)?\]"
)


def _torus_direction(x: int, y: int, x2: int, y2: int) -> str | None:
    """``+x``/``-x``/``+y``/``-y`` of a link between neighbours (a wrap link is the step that
    leaves the grid's edge: 3 -> 0 on a ring of 4 is ``+x``)."""
    if y == y2 and x != x2:
        return "+x" if x2 == x + 1 or (x2 == 0 and x > 1) else "-x"
    if x == x2 and y != y2:
        return "+y" if y2 == y + 1 or (y2 == 0 and y > 1) else "-y"
    return None


def link_values(path: str) -> tuple[dict[str, np.ndarray], str]:
    """Per direction, grid ``[y, x]`` of link utilisation in % of the link's bandwidth: the
    share of the run its link carries data. A wafer link carries one wavelet per cycle: its
    wavelet slices (their union), and an express stream's ``wavelets``, a cycle each, on
    each of its ``ports``; a TPU link sends at its bandwidth while a chunk's ``ici`` slice
    lasts, or its ``ici_msg`` slice in an ops-level trace, an upper bound. Returns the grids
    and the family, ``mesh`` or ``torus``."""
    spans: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    streamed: dict[tuple[str, int, int], float] = {}  # ticks of express-stream wavelets
    end = 0
    family = ""
    msg_spans: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for batch in iter_batches(path):
        cols = [batch.column(c).to_pylist() for c in
                ("component", "category", "ts_ticks", "dur_ticks", "args_str", "args_int",
                 "dur_cycles")]  # fmt: skip
        for comp, cat, ts, dur, args, ints, cycles in zip(*cols, strict=True):
            end = max(end, ts + dur)
            if dur <= 0:
                continue
            if cat == "wavelet":
                named = dict(args or ())
                xy = _pe_of(comp)
                if xy is None:
                    continue
                if "port" in named and named["port"] in MESH_DIRECTIONS:
                    spans.setdefault((named["port"], *xy), []).append((ts, ts + dur))
                    family = "mesh"
                elif "ports" in named:  # an express stream: its wavelets, a cycle each
                    count = dict(ints or ()).get("wavelets", 0)
                    for port in named["ports"].split(","):
                        if port in MESH_DIRECTIONS and count and cycles:
                            key = (port, *xy)
                            streamed[key] = streamed.get(key, 0.0) + count * dur / cycles
                            spans.setdefault(key, [])
                            family = "mesh"
            elif cat in ("ici", "ici_msg"):
                m = _LINK_ENDS.search(comp)
                if m is None:
                    continue
                d = _torus_direction(int(m["x"]), int(m["y"]), int(m["x2"]), int(m["y2"]))
                if d is not None:
                    key = (d, int(m["x"]), int(m["y"]))
                    (spans if cat == "ici" else msg_spans).setdefault(key, []).append(
                        (ts, ts + dur)
                    )
                    family = "torus"
    if family == "torus" and not spans:
        spans = msg_spans
    if not spans:
        raise TraceError(
            f"'{path}' has no link transfers to plot: `plot links` needs wafer wavelets "
            "(--trace-level detail) or TPU link slices (ici, ici_msg); for other traces try "
            "`wafersim plot timeline`"
        )
    directions = MESH_DIRECTIONS if family == "mesh" else TORUS_DIRECTIONS
    w = 1 + max(x for _, x, _ in spans)
    h = 1 + max(y for _, _, y in spans)
    # NaN (blank): no transfer traced on that link (an edge of the mesh, an unused link)
    grids = {d: np.full((h, w), np.nan) for d in directions}
    for (d, x, y), parts in spans.items():
        arr = np.asarray(parts, dtype=np.int64).reshape(-1, 2)
        busy = union_length(arr[:, 0], arr[:, 1]) + streamed.get((d, x, y), 0.0)
        grids[d][y, x] = min(100.0, 100.0 * busy / end) if end else 0.0
    return grids, family


def plot_links(path: str, out: str) -> None:
    """Write :func:`links_figure` of the trace ``path`` to ``out``."""
    check_output(out)
    fig = links_figure(path)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def links_figure(path: str) -> plt.Figure:
    """One map per link direction (wafer N/E/S/W out of each PE; TPU +x/-x/+y/-y out of each
    chip) of utilisation in % of the link's bandwidth, on one 0-100 % colour scale."""
    grids, family = link_values(path)
    h, w = next(iter(grids.values())).shape
    cell = min(0.45, 5.0 / max(w, h))
    fig, axes = plt.subplots(
        2, 2, figsize=(2 * (1.4 + cell * w) + 1.5, 2 * (1.3 + cell * h) + 1), layout="constrained"
    )
    im = None
    for ax, (d, grid) in zip(axes.flat, grids.items(), strict=True):
        im = ax.imshow(grid, origin="upper", cmap="viridis", vmin=0.0, vmax=100.0,
                       interpolation="nearest")  # fmt: skip
        ax.set_title(f"{d} links", fontsize=9)
        ax.set_xticks(range(0, w, -(-w // 8)))  # at most 8 whole-number ticks, all in view
        ax.set_yticks(range(0, h, -(-h // 8)))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("x (column)", fontsize=8)
        ax.set_ylabel("y (row)", fontsize=8)
    what = "PE" if family == "mesh" else "chip"
    fig.colorbar(im, ax=axes, label=f"link utilisation (% of bandwidth, out of each {what})")
    fig.suptitle(wrap_title(f"link utilisation per direction: {os.path.basename(path)}",
                       fig.get_figwidth(), 10), fontsize=10)  # fmt: skip
    return fig


def plot_stacked(
    out: str,
    *,
    labels: Sequence[str],
    parts: dict[str, Sequence[float]],
    title: str = "",
    unit: str = "",
) -> None:
    """One bar per label, stacked from ``parts`` (name -> one value per label, bottom first),
    on an axis of ``unit``."""
    check_output(out)
    if any(len(v) != len(labels) for v in parts.values()):
        raise WafersimError(
            f"plot_stacked needs one value per label in every part; got {len(labels)} labels, "
            + ", ".join(f"{len(v)} {k}" for k, v in parts.items())
        )
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(labels) + 2), 4.5))
    pos = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for name, values in parts.items():
        v = np.asarray(values, float)
        ax.bar(pos, v, 0.7, bottom=bottom, label=name)
        bottom += v
    ax.set_xticks(pos, labels, rotation=30, ha="right")
    ax.set_ylabel(unit)
    ax.legend()
    fit_title(fig, ax, title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
