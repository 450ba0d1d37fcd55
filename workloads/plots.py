"""Plots that need simulations: ``wafersim plot validate CASE``.

Running a validation case (simulation and model at every point of its sweep) belongs to the
workloads; drawing the resulting numbers belongs to :mod:`traces.plots`, which takes plain values
and imports nothing above simcore. This module joins the two: it runs the case and hands the
labels, simulated, model and reference values and a title to
:func:`traces.plots.plot_comparison`.
"""

from __future__ import annotations

from traces.plots import check_output, plot_comparison
from workloads import registry
from workloads.scenario import run_points


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
    plot_comparison(
        out,
        labels=[r.point for r in rows],
        simulated=[r.simulated for r in rows],
        model=[r.model for r in rows],
        reference=[r.reference for r in rows],
        title=f"{case.name}: {case.summary} (max error {worst:.2f} %)",
    )
    return rows
