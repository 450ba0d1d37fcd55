"""Plots of traces and of model comparisons (matplotlib, Agg backend: no display needed).

* :func:`plot_mesh` — heatmap over the ``pe[x,y]`` grid of a wafer trace: busy fraction of each
  PE (union of the slices of the PE and its children, from :mod:`traces.summary`) or link
  utilisation (mean of the PE's link/queue counter series, as a fraction of capacity when known).
* :func:`plot_timeline` — one row per component, slices as bars (small runs: at most
  ``max_slices`` slices are drawn, the first ones in time).
* :func:`plot_comparison` — simulated vs analytical model (and a published reference, where
  there is one) at labelled points. It takes plain values: running a validation case to get them
  is the workloads' business (``workloads/plots.py``), since traces is a lower layer and imports
  nothing but simcore.

A roofline for TPU chips is a planned addition once a TPU scenario exists. The output format
follows the file extension (``.png`` or ``.svg``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: render to files only

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

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
    h, w = grid.shape
    fig, ax = plt.subplots(figsize=(min(12, 2 + 0.5 * w), min(10, 1.5 + 0.5 * h)))
    im = ax.imshow(grid, origin="upper", cmap="viridis", vmin=0.0, interpolation="nearest")
    label = "busy fraction" if metric == "busy" else "link utilisation"
    fig.colorbar(im, ax=ax, label=label)
    ax.set_xlabel("x (column)")
    ax.set_ylabel("y (row)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{label} per PE: {os.path.basename(path)}")
    if w * h <= 400:
        for y in range(h):
            for x in range(w):
                if not np.isnan(grid[y, x]):
                    ax.text(x, y, f"{grid[y, x]:.2f}", ha="center", va="center",
                            color="white", fontsize=7)  # fmt: skip
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


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
    ax.set_title(f"timeline: {os.path.basename(path)}{note}")
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
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(labels) + 3), 4.5))
    ax.plot(x, simulated, "o-", label="simulated")
    ax.plot(x, model, "s--", label="analytical model")
    refs = [(i, r) for i, r in enumerate(reference) if r is not None]
    if refs:
        ax.plot(*zip(*refs, strict=True), "^", label="reference", markersize=9)
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("value")
    ax.set_title(title, fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
