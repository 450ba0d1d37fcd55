"""Plots of workload results: ``wafersim plot validate CASE`` and ``wafersim plot sweep``.

Running a validation case (simulation and model at every point of its sweep) belongs to the
workloads; drawing the resulting numbers belongs to :mod:`traces.plots`, which takes plain values
and imports nothing above simcore. This module joins the two: it runs the case and hands the
labels, simulated, model and reference values and a title (naming the rows' unit) to
:func:`traces.plots.plot_comparison`. :func:`plot_sweep` reads a sweep table (``wafersim
sweep``) and hands its columns to :func:`traces.plots.plot_series`. :func:`plot_jitq_breakdown`
runs the ``jitq`` scenario at every placement and direction and hands each run's time, split
into shift-related and other, to :func:`traces.plots.plot_stacked`. :func:`plot_roofline`
gives :mod:`traces.roofline` the FLOP per element of the wafer's instructions (the PE's ISA
table) and the roofs of the configured hardware (the run's header: the wafer's PE config and
clock, the TPU chip's table row).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os

from pe import isa
from pim.standard import PRESETS as HBM_PRESETS
from runner import registry, scenario
from runner.scenario import run_points
from simcore.errors import TraceError, WafersimError
from sweeps import tables
from sweeps.grid import META_KEY
from tpu.chips import CHIPS
from traces import banks, roofline
from traces.plots import check_output, plot_comparison, plot_series, plot_stacked
from traces.reader import read_header


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


#: FLOP per element of each wafer tensor instruction: a multiply-add 2, an add, subtract or
#: multiply 1; moves, maxima, negation and integer adds no floating-point arithmetic (0).
#: tests/test_roofline.py checks that every instruction of ``pe.isa.OPS`` is here.
WAFER_FLOP_PER_ELEMENT = {
    "fmacs": 2.0, "fmach": 2.0, "fmachs": 2.0, "fadds": 1.0, "faddh": 1.0, "fsubs": 1.0,
    "fmuls": 1.0, "fmulh": 1.0, "fmaxs": 0.0, "fnegs": 0.0, "fmovs": 0.0, "fmovh": 0.0,
    "mov32": 0.0, "mov16": 0.0, "add16": 0.0, "add32": 0.0,
}  # fmt: skip


def wafer_roofs(config: dict) -> roofline.Roofs:
    """One PE's roofs from a wafer run's config: FP16 (``fmach``) and FP32 (``fmacs``)
    multiply-add peaks (2 FLOP x SIMD width / cycles per beat x clock), and the fabric's
    delivery into the CE: one 4-byte wavelet per cycle off the router's ramp."""
    wafer = config["wafer"]
    pe, clock = wafer["pe"], float(wafer["clock_hz"])
    compute = {}
    for op, label in (("fmach", "FP16 fmach"), ("fmacs", "FP32 fmacs")):
        spec = isa.OPS[op]
        interval = pe[spec.interval_param] if spec.interval_param else 1
        compute[label] = WAFER_FLOP_PER_ELEMENT[op] * pe[spec.simd_width_param] / interval * clock
    return roofline.Roofs(compute, roofline.WAVELET_BYTES * clock, "fabric input", "PE")


def tpu_roofs(config: dict) -> roofline.Roofs:
    """One chip's roofs from its table row: peak bf16 FLOP/s and HBM bandwidth."""
    spec = CHIPS[config["chip"]]
    return roofline.Roofs({"bf16 peak": spec.bf16_flops}, spec.hbm_bytes_per_s, "HBM", "chip")


def _config(path: str) -> tuple[dict, dict]:
    """The trace's header and its run's configuration (empty if the header has none)."""
    header = read_header(path)
    config = header.get("config")
    return header, config if isinstance(config, dict) else {}


def _damaged(path: str, what: str) -> TraceError:
    return TraceError(f"'{path}' has a damaged header: its config does not give {what}")


def roofs_of(path: str) -> roofline.Roofs:
    """The roofs of the hardware a trace's run configured; a trace of another family (the
    cluster, HBM-PIM, a link chain) is refused: it carries no FLOP and byte counts to place."""
    header, config = _config(path)
    try:
        if isinstance(config.get("wafer"), dict) and "pe" in config["wafer"]:
            return wafer_roofs(config)
        chip = config.get("chip")
        if isinstance(chip, str) and chip in CHIPS:
            return tpu_roofs(config)
    except (KeyError, TypeError, ValueError):
        raise _damaged(path, "the hardware's roofs") from None
    raise TraceError(
        f"'{path}' ({header.get('kind', 'unknown kind')}) carries no FLOP/byte counts: "
        "plot roofline reads wafer kernels and TPU steps traced at --trace-level detail"
    )


def plot_roofline(path: str, out: str) -> None:
    """Each PE's or chip's achieved FLOP/s against its arithmetic intensity, under the
    configured hardware's roofs (:mod:`traces.roofline`)."""
    check_output(out)
    roofs = roofs_of(path)
    counts = roofline.count(path, WAFER_FLOP_PER_ELEMENT)
    roofline.plot_roofline(path, out, counts, roofs)


def bank_timing_of(path: str) -> banks.BankTiming:
    """The timing a trace's HBM run used (its ``hbm.preset``'s table), for the bank states;
    a trace of another family is refused."""
    header, config = _config(path)
    hbm = config.get("hbm")
    preset = hbm.get("preset") if isinstance(hbm, dict) else None
    if not isinstance(preset, str) or preset not in HBM_PRESETS:
        raise TraceError(
            f"'{path}' ({header.get('kind', 'unknown kind')}) is no HBM or PIM run: plot banks "
            "reads the DRAM commands of hbm-read, hbm-trace, jitq traces (--trace-level detail)"
        )
    t = HBM_PRESETS[preset]().timing
    return banks.BankTiming(clock_hz=t.clock_hz, nRP=t.nRP, nRFC=t.nRFC)


def plot_banks(path: str, out: str, *, bins: int = 1000) -> None:
    """Each bank's state over time (:mod:`traces.banks`) with its run's timing table."""
    check_output(out)
    banks.plot_banks(path, out, bank_timing_of(path), bins=bins)
