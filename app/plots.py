"""Plots of workload results: ``wafersim plot validate CASE`` and ``wafersim plot sweep``.

Running a validation case (simulation and model at every point of its sweep) belongs to the
workloads; drawing the resulting numbers belongs to :mod:`traces.plots`, which takes plain values
and imports nothing above simcore. This module joins the two: it runs the case and hands the
labels, simulated, model and reference values and a title (naming the rows' unit) to
:func:`traces.plots.plot_comparison`. :func:`plot_sweep` reads a sweep table (``wafersim
sweep``) and hands its columns to :func:`traces.plots.plot_series`.
"""

from __future__ import annotations

import difflib
import os

from runner import registry
from runner.scenario import run_points
from simcore.errors import WafersimError
from sweeps import tables
from traces.plots import check_output, plot_comparison, plot_series


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
    )
    return rows


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
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in done:
        label = f"{hue}={r[hue]}" if hue else ""
        xs, ys = series.setdefault(label, ([], []))
        xs.append(r[x])
        ys.append(r[y])
    if hue:
        series = dict(sorted(series.items(), key=lambda kv: _order(kv[0].partition("=")[2])))
    others = len(rows) - len(done)
    note = f"; {others} point(s) not completed, not drawn" if others else ""
    plot_series(
        out, series, xlabel=x, ylabel=y, logx=logx, logy=logy,
        title=f"{os.path.basename(path)}: {y} vs {x}{f' by {hue}' if hue else ''}{note}",
    )  # fmt: skip


def _order(text: str) -> tuple[int, float, str]:
    """Numbers in numeric order, then words."""
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)
