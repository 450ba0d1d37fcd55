"""Plots of traces and validation cases (matplotlib, Agg backend: no display needed).

* :func:`plot_mesh` — heatmap over the ``pe[x,y]`` grid of a wafer trace: busy fraction of each
  PE (union of the slices of the PE and its children, from :mod:`traces.summary`) or link
  utilisation (mean of the PE's link/queue counter series, as a fraction of capacity when known).
* :func:`plot_timeline` — one row per component, slices as bars (small runs: at most
  ``max_slices`` slices are drawn, the first ones in time).
* :func:`plot_validate` — simulated vs analytical model (and the published reference, when there
  is one) for each point of a validation case.

A roofline for TPU chips is a planned addition once a TPU scenario exists. The output format
follows the file extension (``.png`` or ``.svg``).
"""

from __future__ import annotations

import os
import re

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


def _check_out(out: str) -> None:
    if os.path.splitext(out)[1].lower() not in FORMATS:
        raise WafersimError(f"plot output '{out}' must end in .png or .svg")
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
    _check_out(out)
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
    _check_out(out)
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


def plot_validate(case_name: str, out: str) -> None:
    """Simulated vs model (vs reference) over the points of validation case ``case_name``."""
    from workloads import registry

    _check_out(out)
    if case_name not in registry.CASES:
        raise WafersimError(
            f"unknown validation case '{case_name}'; known cases: "
            f"{', '.join(sorted(registry.CASES))}"
        )
    case = registry.CASES[case_name]
    rows = case.run()
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows) + 3), 4.5))
    ax.plot(x, [r.simulated for r in rows], "o-", label="simulated")
    ax.plot(x, [r.model for r in rows], "s--", label="analytical model")
    refs = [(i, r.reference) for i, r in enumerate(rows) if r.reference is not None]
    if refs:
        ax.plot(*zip(*refs, strict=True), "^", label="reference", markersize=9)
    ax.set_xticks(x, [r.point for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("value")
    worst = max((abs(r.error_pct) for r in rows), default=0.0)
    ax.set_title(f"{case.name}: {case.summary} (max error {worst:.2f} %)", fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
