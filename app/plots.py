"""Plots of workload results: ``wafersim plot validate CASE`` and ``wafersim plot sweep``.

Running a validation case (simulation and model at every point of its sweep) belongs to the
workloads; drawing the resulting numbers belongs to :mod:`traces.plots`, which takes plain values
and imports nothing above simcore. This module joins the two: it runs the case and hands the
labels, simulated, model and reference values and a title (naming the rows' unit) to
:func:`traces.plots.plot_comparison`. :func:`plot_sweep` reads a sweep table (``wafersim
sweep``) and hands its columns to :func:`traces.plots.plot_series`. :func:`plot_jitq_breakdown`
runs the ``jitq`` scenario at every placement and direction and hands each run's time, split
into shift-related and other, to :func:`traces.plots.plot_stacked`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os

from runner import registry, scenario
from runner.scenario import run_points
from simcore.errors import WafersimError
from sweeps import tables
from sweeps.grid import META_KEY
from traces.plots import check_output, plot_comparison, plot_series, plot_stacked


def plot_validate(
    case_name: str, out: str, runner: registry.Runner = run_points
) -> list[registry.ValidationRow]:
    """Run validation case ``case_name`` with ``runner`` and draw simulated vs model (vs
    reference) to ``out`` (``.png`` or ``.svg``, checked before anything runs); returns the
    case's rows."""
    (case,) = registry.find_cases([case_name])
    check_output(out)
    rows = case.run(runner)
    worst = max((abs(r.error_pct) for r in rows), default=0.0)
    units = sorted({r.unit for r in rows})
    plot_comparison(
        out,
        labels=[f"{r.point} ({r.unit})" if len(units) > 1 else r.point for r in rows],
        simulated=[r.simulated for r in rows],
        model=[r.model for r in rows],
        reference=[r.reference for r in rows],
        title=f"{case.name} ({', '.join(units)}): {case.summary} (max error {worst:.2f} %)",
        unit=units[0] if len(units) == 1 else "",
    )
    return rows


def plot_jitq_breakdown(
    out: str, overrides: list[str], runner: registry.Runner = run_points
) -> list[dict]:
    """The built-in ``jitq`` scenario with ``overrides`` (``--set``), run at every placement
    and direction: each run's ``time_s`` as a bar of ``shift_time_s`` (the cycles of the
    shift-related instructions: bitSHIFT, laneSHIFT, and the compares and adds of a variable
    shift) under ``other_time_s``; returns the runs' metrics."""
    check_output(out)
    base = scenario.resolve_params(scenario.find("jitq"), overrides)
    choices = {f.name: f.metadata.get("choices") for f in dataclasses.fields(base)}
    combos = [(pl, d) for pl in choices["placement"] for d in choices["direction"]]
    points = [dataclasses.replace(base, placement=pl, direction=d) for pl, d in combos]
    runs = runner("jitq", points)
    plot_stacked(
        out,
        labels=[f"{pl} {d}" for pl, d in combos],
        parts={
            "shift-related": [m["shift_time_s"] * 1e6 for m in runs],
            "other": [m["other_time_s"] * 1e6 for m in runs],
        },
        title=f"jitq {base.rows} x {base.cols} {base.format} ({base.master} master): time per "
        "placement and direction, shift-related and other instructions",
        unit="us",
    )
    return runs


def plot_sweep(
    path: str,
    out: str,
    *,
    x: str,
    y: str,
    hue: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> None:
    """Column ``y`` of sweep table ``path`` against column ``x``, one line per value of
    ``hue``; only completed points are drawn (the title counts the others)."""
    check_output(out)
    table = tables.read_table(path)
    names = table.column_names
    for option, column in (("--x", x), ("--y", y), ("--hue", hue)):
        if column is not None and column not in names:
            close = difflib.get_close_matches(column, names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise WafersimError(
                f"{option} {column}: no such column in '{path}'; {hint}columns: {', '.join(names)}"
            )
    rows = table.to_pylist()
    done = [r for r in rows if r["status"] == "completed" and r[x] is not None and r[y] is not None]
    for column in (x, y):
        bad = [r[column] for r in done if isinstance(r[column], bool | str | list | dict)]
        if bad:
            raise WafersimError(
                f"column '{column}' of '{path}' is not numeric ({bad[0]!r}): plot a number"
            )
    # One line per value of the swept keys not plotted (--hue first): points of different p
    # are never joined into one line.
    swept = [k for keys in _axes(table) for k in keys]
    group = ([hue] if hue else []) + [
        k for k in swept
        if k not in (x, y, hue) and k in names and len({json.dumps(r[k]) for r in done}) > 1
    ]  # fmt: skip
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in done:
        label = ", ".join(f"{k}={r[k]}" for k in group)
        xs, ys = series.setdefault(label, ([], []))
        xs.append(r[x])
        ys.append(r[y])
    if group:
        series = dict(sorted(series.items(), key=lambda kv: _label_order(kv[0])))
    others = len(rows) - len(done)
    note = f"; {others} point(s) not completed, not drawn" if others else ""
    by = f" by {', '.join(group)}" if group else ""
    plot_series(
        out, series, xlabel=axis_label(x), ylabel=axis_label(y), logx=logx, logy=logy,
        title=f"{os.path.basename(path)}: {y} vs {x}{by}{note}",
    )  # fmt: skip


def _axes(table) -> list[list[str]]:
    """The swept keys of a sweep table, by axis (its metadata), or none for another table."""
    try:
        return json.loads((table.schema.metadata or {})[META_KEY])["axes"]
    except (KeyError, ValueError, TypeError):
        return []


#: Name endings (the metrics vocabulary, docs/cli.md) and the unit an axis shows for them.
_AXIS_UNITS = (
    ("_per_s", "per s"), ("_s", "s"), ("_bytes", "bytes"), ("_pct", "%"), ("_cycles", "cycles"),
    ("cycles", "cycles"), ("_flops", "flops"), ("_gflops", "GFLOP/s"), ("_tflops", "TFLOP/s"),
    ("_fraction", "fraction"), ("_utilisation", "fraction of time"), ("_ratio", "ratio"),
)  # fmt: skip


def axis_label(column: str) -> str:
    """A column's name with its unit spelled out where its name ends in one (``time_s`` ->
    ``time_s (s)``); a swept parameter without a unit keeps its bare name."""
    for ending, unit in _AXIS_UNITS:
        if column.endswith(ending):
            return f"{column} ({unit})"
    return column


def _label_order(label: str) -> tuple:
    """Series labels ``k=v, ...`` in the numeric order of their values."""
    return tuple(_order(part.partition("=")[2]) for part in label.split(", "))


def _order(text: str) -> tuple[int, float, str]:
    """Numbers in numeric order, then words."""
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)
