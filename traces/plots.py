"""Plots of traces and of model comparisons (matplotlib, Agg backend: no display needed).

* :func:`plot_mesh` — heatmap over the ``pe[x,y]`` grid of a wafer trace: busy fraction of each
  PE (union of the slices of the PE and its children, from :mod:`traces.summary`) or link
  utilisation (mean of the PE's link/queue counter series, as a fraction of capacity when known).
* :func:`plot_timeline` — one row per component, slices as bars (small runs: at most
  ``max_slices`` slices are drawn, the first ones in time).
* :func:`plot_comparison` — simulated vs analytical model (and a published reference, where
  there is one) at labelled points. It takes plain values: running a validation case to get them
  is the workloads' business (``app/plots.py``), since traces is a lower layer and imports
  nothing but simcore.

A roofline for TPU chips is a planned addition once a TPU scenario exists. The output format
follows the file extension (``.png`` or ``.svg``).
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: render to files only

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, MaxNLocator

from simcore.errors import TraceError, WafersimError
from traces.layout import natural_key
from traces.reader import iter_batches
from traces.summary import summarize

_PE = re.compile(r"^(?P<prefix>.*?pe)\[(?P<x>\d+),\s*(?P<y>\d+)\]$")
FORMATS = (".png", ".svg")


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


def _pe_of(component: str) -> tuple[int, int] | None:
    """``(x, y)`` of the PE a component path is (or is under), or None."""
    parts = component.split("/")
    for i in range(len(parts)):
        m = _PE.match(parts[i])
        if m:
            return int(m["x"]), int(m["y"])
    return None


def mesh_values(path: str, metric: str = "busy") -> np.ndarray:
    """Grid ``[y, x]`` of per-PE values (NaN where a PE has no data)."""
    s = summarize(path)
    values: dict[tuple[int, int], list[float]] = {}
    if metric == "busy":
        for row in s["busy"]:
            parts = row["component"].split("/")
            if _PE.match(parts[-1]):  # the PE node itself: union over its children
                xy = _pe_of(row["component"])
                if xy is not None:
                    values.setdefault(xy, []).append(row["busy_fraction"])
    elif metric == "link":
        for row in s["utilisation"]:
            xy = _pe_of(row["component"])
            if xy is not None:
                u = row["utilisation"] if row["utilisation"] is not None else row["mean"]
                values.setdefault(xy, []).append(u)
    else:
        raise WafersimError(f"unknown mesh metric '{metric}'; choose busy or link")
    if not values:
        what = "slices" if metric == "busy" else "link/queue counter events"
        raise TraceError(
            f"'{path}' has no {what} on components named like 'pe[x,y]'; "
            "mesh plots need a wafer trace (try `wafersim plot timeline`)"
        )
    w = 1 + max(x for x, _ in values)
    h = 1 + max(y for _, y in values)
    grid = np.full((h, w), np.nan)
    for (x, y), vs in values.items():
        grid[y, x] = float(np.mean(vs))
    return grid


def plot_mesh(path: str, out: str, *, metric: str = "busy") -> None:
    """Heatmap of PE busy fraction (``busy``) or link utilisation (``link``)."""
    check_output(out)
    grid = mesh_values(path, metric)
    label = "busy fraction" if metric == "busy" else "link utilisation"
    fig = mesh_figure(grid, label, f"{label} per PE: {os.path.basename(path)}")
    fig.savefig(out)
    plt.close(fig)


#: Smallest font (points) a cell's value is written in; smaller cells are left unlabelled.
MIN_CELL_FONT = 5.0


def mesh_figure(grid: np.ndarray, label: str, title: str) -> plt.Figure:
    """The heatmap of ``grid[y, x]``: values written in the cells only where they fit (no
    overlapping labels, whatever the mesh's shape), a colour bar beside the mesh (below a
    single row), the title wrapped to the figure's width."""
    h, w = grid.shape
    fig_w = max(6.0, min(12.0, 2.5 + 0.5 * w))
    title_lines = len(_wrap(title, fig_w, 10).splitlines())
    fig_h = (min(10.0, 2.2 + 0.5 * h) if h > 1 else 2.6) + 0.2 * title_lines
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    # Square cells, unless the mesh is so long and thin that its rows or columns would be
    # slivers too small for their tick labels.
    aspect = "auto" if max(w, h) > 6 * min(w, h) and h > 1 else "equal"
    im = ax.imshow(grid, origin="upper", cmap="viridis", vmin=0.0, interpolation="nearest",
                   aspect=aspect)  # fmt: skip
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
    _title(fig, ax, title)
    fig.tight_layout()
    fig.canvas.draw()
    # A cell's size in points, once laid out: "0.00" is about 2.6 font sizes wide, 1.2 high.
    box = im.get_window_extent()
    scale = 72 / fig.dpi
    size = min(7.0, box.width / w * scale / 3.0, box.height / h * scale / 1.4)
    if size >= MIN_CELL_FONT and w * h <= 400:
        top = float(np.nanmax(grid)) or 1.0
        for y in range(h):
            for x in range(w):
                if not np.isnan(grid[y, x]):
                    ink = "black" if grid[y, x] / top > 0.6 else "white"  # viridis: light top
                    ax.text(x, y, f"{grid[y, x]:.2f}", ha="center", va="center",
                            color=ink, fontsize=size)  # fmt: skip
    return fig


def _title(fig: plt.Figure, ax: plt.Axes, title: str, fontsize: float = 10) -> None:
    """``title`` wrapped to the figure's width less the axis labels' margin (about 0.62 font
    sizes per character), so it is never cut at the figure's edges."""
    ax.set_title(_wrap(title, fig.get_figwidth(), fontsize), fontsize=fontsize)


def _wrap(title: str, fig_width_in: float, fontsize: float) -> str:
    chars = max(20, int((fig_width_in - 1.8) * 72 / (0.62 * fontsize)))
    return textwrap.fill(title, chars, break_on_hyphens=True)


def plot_timeline(path: str, out: str, *, max_slices: int = 20_000) -> None:
    """Per-component bars of slices (first ``max_slices`` in time), coloured by category."""
    check_output(out)
    rows: dict[str, list[tuple[int, int, str]]] = {}
    taken = 0
    for batch in iter_batches(path):
        cols = [batch.column(c).to_pylist() for c in
                ("component", "category", "phase", "ts_ticks", "dur_ticks")]  # fmt: skip
        for comp, cat, phase, ts, dur in zip(*cols, strict=True):
            if phase == "counter" or cat == "run":
                continue
            rows.setdefault(comp, []).append((ts, max(dur, 1), cat))
            taken += 1
            if taken >= max_slices:
                break
        if taken >= max_slices:
            break
    if not rows:
        raise TraceError(f"'{path}' has no slices to draw")
    comps = sorted(rows, key=natural_key)
    cats = sorted({c for r in rows.values() for _, _, c in r})
    colours = {c: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(cats)}
    fig, ax = plt.subplots(figsize=(12, 1.5 + 0.3 * len(comps)))
    for i, comp in enumerate(comps):
        for cat in cats:
            bars = [(ts, d) for ts, d, c in rows[comp] if c == cat]
            if bars:
                ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=colours[cat],
                               label=cat if i == comps.index(comp) else None)  # fmt: skip
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[c]) for c in cats]
    ax.legend(handles, cats, loc="upper right", fontsize=8)
    ax.set_yticks(range(len(comps)), comps, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ticks)")
    note = f" (first {max_slices:,} slices)" if taken >= max_slices else ""
    _title(fig, ax, f"timeline: {os.path.basename(path)}{note}")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_comparison(
    out: str,
    *,
    labels: Sequence[str],
    simulated: Sequence[float],
    model: Sequence[float],
    reference: Sequence[float | None] = (),
    title: str = "",
) -> None:
    """Simulated (line), model (dashed) and reference (markers, where not None) at each labelled
    point. ``reference`` is empty or one value per label."""
    check_output(out)
    lengths = [len(labels), len(simulated), len(model)] + ([len(reference)] if reference else [])
    if len(set(lengths)) != 1:
        raise WafersimError(
            "plot_comparison needs one simulated, model (and reference) value per label; got "
            f"{len(labels)} labels, {len(simulated)} simulated, {len(model)} model"
            + (f", {len(reference)} reference" if reference else "")
            + " values"
        )
    fig = comparison_figure(labels, simulated, model, reference, title)
    fig.savefig(out)
    plt.close(fig)


def comparison_figure(
    labels: Sequence[str],
    simulated: Sequence[float],
    model: Sequence[float],
    reference: Sequence[float | None],
    title: str,
) -> plt.Figure:
    """The comparison at categorical points: markers only (the points are separate cases, so
    no line joins them), the title wrapped to the figure's width."""
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(min(16.0, max(6.0, 0.6 * len(labels) + 3)), 4.8))
    ax.plot(x, simulated, "o", linestyle="none", label="simulated")
    ax.plot(x, model, "s", linestyle="none", mfc="none", markersize=8, label="analytical model")
    refs = [(i, r) for i, r in enumerate(reference) if r is not None]
    if refs:
        ax.plot(*zip(*refs, strict=True), "^", linestyle="none", label="reference",
                markersize=9)  # fmt: skip
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("value")
    _title(fig, ax, title, fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
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
    """One line with markers per labelled series of (x, y) values, sorted by x; a single
    series (label "") gets no legend. A log axis needs positive values."""
    check_output(out)
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
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _title(fig, ax, title, fontsize=9)
    if any(series):
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def _powers_of_two(series: dict[str, tuple[Sequence[float], Sequence[float]]]) -> bool:
    xs = [x for values, _ in series.values() for x in values]
    return bool(xs) and all(x > 0 and float(x).is_integer() and int(x) & (int(x) - 1) == 0
                            for x in xs)  # fmt: skip
