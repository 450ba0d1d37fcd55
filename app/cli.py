"""The ``wafersim`` command line.

Exit status: 0 success; 2 a user error (bad scenario, key, value, file; a stalled run), printed
as one clear message without a traceback; 3 a validation case outside its tolerance; 1 an
internal error (a bug: the traceback is shown); 130 interrupted with Ctrl-C or SIGTERM (the trace
so far is kept).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app import argtypes, sweepcli
from runner import outputs, registry, scenario
from simcore import config as cfg
from simcore.errors import WafersimError
from simcore.tracing import LEVEL_NAMES, TraceLevel
from simcore.version import __version__

if TYPE_CHECKING:
    from app.progress import PointProgress

# What a command needs beyond finding and describing scenarios is imported by the command
# itself: the kind it runs (through the registry), the trace modules (pyarrow, perfetto), the
# progress bars (tqdm), the plots (matplotlib) and the Dask engine (distributed). So
# `wafersim --version`, `list` and `params` start in a fraction of a second (docs/cli.md,
# "Start time"; tests/test_layers.py lists which modules may be imported late, and why).

#: Exit status of ``validate`` when a case is outside its tolerance (not an error of the user's
#: nor of wafersim's: the simulation and the model disagree more than the case allows).
EXIT_VALIDATION = 3


#: What validate's columns are (printed above its table and in ``validate --help``).
VALIDATE_COLUMNS = (
    "Columns: simulated = the simulator's result, in the unit the header names (cycles, s, "
    "bits/s...; a case whose rows differ names each row's in a last column); model = the "
    "analytical model's prediction (for wse-fmac and wse-bcast the published fit itself, for "
    "summa the published time model, for the others wafersim's own models, which never feed "
    "the simulation); reference = the published figure at that point where one exists ('-' "
    "where none); error % = (simulated - model) / model x 100, relative to the model. Each "
    "case's 'source' line cites where its published figures come from."
)


def _cases_epilog() -> str:
    registry.load_all()
    lines = ["validation cases:"]
    for name, case in sorted(registry.CASES.items()):
        lines.append(f"  {name:<14} {case.summary} (needs {case.describe_tolerance()})")
    return "\n".join(lines)


_count = argtypes.count  # every numeric option takes a checked type (app/argtypes.py)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose epilog may be written only when its help is shown
    (``epilog_from``): the list of validation cases loads every family, which parsing a
    command line never needs."""

    def __init__(self, *args: Any, epilog_from: Callable[[], str] | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.epilog_from = epilog_from

    def format_help(self) -> str:
        if self.epilog_from is not None:
            self.epilog, self.epilog_from = self.epilog_from(), None
        return super().format_help()


_Subparsers = argparse._SubParsersAction  # what add_subparsers returns: one add_parser each


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="wafersim",
        description="Cycle-level discrete-event simulator of machine-learning hardware.",
        epilog="exit status: 0 success; 2 a user error (one line saying what to change); 3 a "
        "validation case outside its tolerance; 1 an internal error (a bug); 130 interrupted",
    )
    ap.add_argument("--version", action="version", version=f"wafersim {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_list, _add_params, _add_run, _add_model, _add_validate, _add_sweep,
                _add_trace, _add_plot):  # fmt: skip
        add(sub)
    return ap


def _scenario_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO", help="built-in scenario name or .toml path")


def _set_argument(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help=help_text,
    )  # fmt: skip


def _seed_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=_count, metavar="N", help="the seed (same as --set seed=N)")


def _add_list(sub: _Subparsers) -> None:
    sub.add_parser("list", help="list built-in scenarios with one-line descriptions")


def _add_params(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "params",
        help="list a scenario's parameters: the values a run uses, who set them, ranges",
        description="List every parameter of SCENARIO with the value a run would use, where it "
        "comes from (scenario: the scenario file sets it; --set: an override given here; "
        "default: the kind's default), the allowed values and a description.",
    )
    _scenario_argument(p)
    _set_argument(p, "show the values with this override applied (repeatable)")
    p.add_argument("--json", action="store_true", help="print a JSON list of parameters")


def _add_run(sub: _Subparsers) -> None:
    p = sub.add_parser("run", help="run a scenario and print its metrics")
    _scenario_argument(p)
    _set_argument(p, "override a parameter (repeatable), e.g. --set elements=64")
    _seed_argument(p)
    p.add_argument("--trace", metavar="PATH", help="write an Arrow event trace to PATH")
    p.add_argument(
        "--trace-level", default="ops", choices=LEVEL_NAMES,
        help="how much the trace records (default: ops)",
    )  # fmt: skip
    p.add_argument(
        "--trace-region", type=argtypes.region, metavar="X0:X1,Y0:Y1",
        help="record detail-level events (wavelets, stalls, queues) only for the PEs with "
        "X0 <= x < X1 and Y0 <= y < Y1 (wafer kinds; the rest keep their ops-level events)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object of metrics")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--livelock-cycles", type=_count, default=1_000_000, metavar="N",
        help="end the run as a livelock when nothing is computed or moved for N cycles while "
        "events go on (default 1,000,000; 0: never)",
    )  # fmt: skip
    p.add_argument(
        "--perfetto", metavar="OUT",
        help="after the run, export the trace to OUT (.pftrace) for ui.perfetto.dev "
        "(the Arrow trace goes to --trace, or next to OUT)",
    )  # fmt: skip
    _detail_region_argument(p)


def _add_model(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "model", help="evaluate a scenario's analytical model (no simulation)",
        description="Evaluate the analytical model of SCENARIO's workload kind at the scenario's "
        "parameters (with any --set), without simulating: instant at any size. The model is "
        "built from published calibration fits and never feeds the simulator's timing; "
        "'wafersim validate' compares the two.",
    )  # fmt: skip
    _scenario_argument(p)
    _set_argument(p, "override a parameter (repeatable), e.g. --set p=750")
    _seed_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_validate(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "validate", help="compare simulation with analytical models",
        description="Run validation cases: each simulates a sweep of points and compares the "
        "simulated value with the analytical model's prediction (and a published reference "
        "where there is one). " + VALIDATE_COLUMNS + " Progress goes to stderr point by "
        "point; each case's table is printed when the case ends. Exit status 3 if a case is "
        "outside its tolerance.",
        epilog_from=_cases_epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("cases", nargs="*", metavar="CASE", help="cases to run (default: all)")
    _set_argument(
        p, "with one kind that reads a file (wafer-program): the file and parameters, e.g. "
        "--set program=kernel.py; runs the validation the file declares",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON list of cases at the end")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sweepcli.add_cluster_arguments(p, workers_default="none: one point after another, here")


def _add_sweep(sub: _Subparsers) -> None:
    p = sub.add_parser("sweep", help="run a scenario over a grid of parameters, in parallel")
    sweepcli.add_arguments(p)


def _add_trace(sub: _Subparsers) -> None:
    p = sub.add_parser("trace", help="work with trace files")
    tsub = p.add_subparsers(dest="trace_command", required=True, metavar="TRACE_COMMAND")
    q = tsub.add_parser(
        "summary", help="summarise a trace file",
        description="Summarise an Arrow trace: its header and final status, trace records by "
        "category, the busiest components (busy = the union of a component's slices and its "
        "children's, as a share of the run), stalls, link and queue utilisation from counter "
        "records, and the critical path (walked back from the last slice along send/receive "
        "flows and each component's preceding slice). A trace cut off is read up to the cut.",
    )  # fmt: skip
    q.add_argument("path", metavar="PATH", help="an Arrow trace written by run --trace")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q = tsub.add_parser("export", help="convert a trace for a timeline viewer")
    q.add_argument("path", metavar="PATH", help="an Arrow trace written by run --trace")
    q.add_argument(
        "--to", required=True, choices=("perfetto", "json"),
        help="perfetto: .pftrace for ui.perfetto.dev; json: Chrome trace-event JSON",
    )  # fmt: skip
    q.add_argument(
        "-o", "--output", metavar="OUT", help="output file (default: PATH with .pftrace or .json)"
    )
    _detail_region_argument(q)


def _detail_region_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--detail-region", metavar="X0:X1,Y0:Y1", type=argtypes.detail_region,
        help="Perfetto export of a wafer of more than 1,024 PEs: keep every track of the PEs "
        "x0 <= x < x1, y0 <= y < y1 (e.g. 0:8,0:8), or of all PEs with 'all'; the other PEs "
        "show as one active %% track per 8x8 block (default: every PE in blocks)",
    )  # fmt: skip


#: ``plot heatmap``'s choices, spelled here so that building the parser imports no matplotlib
#: (tests/test_heatmap.py checks they are traces.heatmap's).
HEATMAP_UNITS = ("auto", "pe", "link", "chip", "bank", "component")
HEATMAP_METRICS = ("active", "busy", "async", "fabric")


def _image_argument(q: argparse.ArgumentParser) -> None:
    q.add_argument("-o", "--output", metavar="OUT", required=True, help="OUT.png or OUT.svg")


def _add_plot(sub: _Subparsers) -> None:
    p = sub.add_parser("plot", help="draw a trace or validation case to PNG/SVG")
    psub = p.add_subparsers(dest="plot_command", required=True, metavar="PLOT")
    q = psub.add_parser("mesh", help="heatmap over pe[x,y] or chip[x,y] of activity or links")
    q.add_argument("path", metavar="PATH", help="an Arrow trace of a wafer or TPU run")
    q.add_argument(
        "--metric", choices=("busy", "async", "fabric", "link"), default="busy",
        help="busy: %% of the run each PE or chip (with what is under it) computes; async: "
        "%% with an asynchronous operation or collective in flight; fabric: %% with wavelets "
        "or link transfers under way; link: mean depth of each PE's router buffers and queues "
        "(entries: occupancy, not utilisation, which is `plot links`) (default: busy; link "
        "needs a detail-level trace)",
    )  # fmt: skip
    _image_argument(q)
    q = psub.add_parser(
        "links", help="link utilisation per direction, %% of bandwidth (wafer mesh, TPU torus)"
    )
    q.add_argument(
        "path", metavar="PATH",
        help="an Arrow trace: a wafer run at --trace-level detail (wavelets) or a TPU run",
    )  # fmt: skip
    _image_argument(q)
    q = psub.add_parser(
        "heatmap", help="activity of PEs, links, chips, banks or components over time bins",
        description="Rows of units (PEs, links, chips, banks or components), columns of time "
        "bins: the %% of each bin a unit is active (the union of its slices of the chosen "
        "class, never counted twice). Works on every family's trace at any size.",
    )  # fmt: skip
    q.add_argument("path", metavar="PATH", help="an Arrow trace of any family")
    q.add_argument(
        "--by", choices=HEATMAP_UNITS, default="auto",
        help="rows: pe (pe[x,y], with what is under it), link (a wafer router's output port "
        "at --trace-level detail, a TPU link), chip, bank (HBM pch/bank), component (whole "
        "paths: the cluster); auto: the first of pe, bank, chip the trace has, else component",
    )  # fmt: skip
    q.add_argument(
        "--metric", choices=HEATMAP_METRICS, default="active",
        help="active: any activity (default); busy: compute; async: asynchronous operations "
        "and collectives in flight; fabric: wavelets and link transfers",
    )  # fmt: skip
    q.add_argument(
        "--bins", type=argtypes.positive, default=200, metavar="N",
        help="time bins (default 200, at most 5000)",
    )  # fmt: skip
    _image_argument(q)
    q = psub.add_parser(
        "roofline", help="achieved FLOP/s vs arithmetic intensity per PE or chip, under roofs",
        description="A roofline of a wafer kernel (per PE: FLOP from its instructions, bytes "
        "from the fabric wavelets into its CE) or a TPU step (per chip: FLOP from its MXU "
        "products, bytes from its HBM transfers), against the configured hardware's peak "
        "compute and bandwidth. Needs a --trace-level detail trace; other families are "
        "refused.",
    )  # fmt: skip
    q.add_argument("path", metavar="PATH", help="an Arrow trace of a wafer or TPU run (detail)")
    _image_argument(q)
    q = psub.add_parser(
        "banks", help="HBM bank states over time: idle, active (row open), precharging, "
        "refreshing",
        description="Each HBM bank's state over time, from the DRAM commands it was issued "
        "(ACT opens a row until PRE/PREA; precharging nRP and refreshing nRFC cycles of the "
        "run's timing table after PRE/PREA and REF; idle otherwise), one cell per bank and "
        "time bin coloured by its main state. Needs a --trace-level detail HBM or PIM trace.",
    )  # fmt: skip
    q.add_argument("path", metavar="PATH", help="an Arrow trace of hbm-read, hbm-trace or jitq")
    q.add_argument(
        "--bins", type=argtypes.positive, default=1000, metavar="N",
        help="time bins (default 1000, at most 5000)",
    )  # fmt: skip
    _image_argument(q)
    q = psub.add_parser("timeline", help="per-component timeline of a trace, whole run")
    q.add_argument(
        "path", metavar="PATH",
        help="an Arrow trace (above 64 components, rows are their ancestors: PEs, PE rows)",
    )  # fmt: skip
    _image_argument(q)
    q = psub.add_parser("validate", help="simulated vs model (vs reference) for a case")
    q.add_argument("case", metavar="CASE", help="a validation case (wafersim validate --help)")
    _image_argument(q)
    q = psub.add_parser(
        "jitq-breakdown",
        help="jitq time per placement and direction, shift-related and other instructions",
    )
    _set_argument(q, "override a jitq parameter (repeatable), e.g. --set rows=1024")
    _image_argument(q)
    q = psub.add_parser("sweep", help="a metric of a sweep table against a parameter")
    q.add_argument("path", metavar="TABLE.parquet", help="a table written by wafersim sweep")
    q.add_argument("--x", required=True, metavar="COLUMN", help="the column on the x axis")
    q.add_argument("--y", required=True, metavar="COLUMN", help="the column on the y axis")
    q.add_argument("--hue", metavar="COLUMN", help="one line per value of COLUMN")
    q.add_argument("--logx", action="store_true", help="logarithmic x axis")
    q.add_argument("--logy", action="store_true", help="logarithmic y axis")
    _image_argument(q)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _print_records(records: list[dict[str, Any]]) -> None:
    """A ``..._table`` metric's records, one line each, in aligned columns."""
    keys = list(records[0])
    cells = [[_fmt(r.get(k, "")) for k in keys] for r in records]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    for row in [keys, *cells]:
        print(("    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))).rstrip())


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for name in scenario.builtin_names():
        sc = scenario.read(name)  # the file alone: no kind is imported
        rows.append((name, sc.kind, sc.description))
    width = max(len(r[0]) for r in rows)
    for name, kind, desc in rows:
        print(f"{name:<{width}}  {desc}  [{kind}]")
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    sc = scenario.find(args.scenario)
    params = scenario.resolve_params(sc, args.overrides)
    values = cfg.flatten(cfg.to_dict(params))
    overridden: dict[str, Any] = {}
    for text in args.overrides:
        cfg.apply_override(overridden, text)
    source = {key: "scenario" for key in cfg.flatten(sc.data)}
    source.update({key: "--set" for key in cfg.flatten(overridden)})
    rows = [
        {"key": key, "value": values[key], "source": source.get(key, "default"),
         "default": default, "allowed": allowed, "description": doc}
        for key, default, allowed, doc in cfg.describe(type(params))  # a file's kind: its own
    ]  # fmt: skip
    if args.json:
        print(json.dumps(rows, default=_json_default))
        return 0
    print(
        f"parameters of scenario '{sc.name}' (kind {sc.kind.name}): the values a run uses; "
        "set with --set KEY=VALUE"
    )
    width = max(len(r["key"]) for r in rows)
    vw = min(max(len(repr(r["value"])) for r in rows), 16)
    aw = min(max(len(r["allowed"]) for r in rows), 28)
    print(f"  {'key':<{width}} {'value':<{vw}} {'set by':<8} {'allowed':<{aw}} description")
    for r in rows:
        print(
            f"  {r['key']:<{width}} {r['value']!r:<{vw}} {r['source']:<8} "
            f"{r['allowed']:<{aw}} {r['description']}"
        )
    return 0


def _seed(args: argparse.Namespace) -> None:
    """``--seed N`` is ``--set seed=N`` (given both, the key is set twice: an error)."""
    if args.seed is not None:
        args.overrides.append(f"seed={args.seed}")


def cmd_run(args: argparse.Namespace) -> int:
    from app.progress import RunProgress  # tqdm, and the kernel (SimPy, numpy)

    _seed(args)
    sc = scenario.find(args.scenario)
    params = scenario.resolve_params(sc, args.overrides)
    level = TraceLevel[args.trace_level.upper()]
    trace_label = "--trace"
    if args.perfetto and not args.trace:
        args.trace = os.path.splitext(args.perfetto)[0] + ".arrows"
        trace_label = "the Arrow trace (--trace, by default next to --perfetto)"
    if args.perfetto and level == TraceLevel.OFF:
        raise WafersimError("--perfetto needs a trace: use --trace-level summary, ops or detail")
    outputs.check_paths(
        scenario.input_files(sc, params), {trace_label: args.trace, "--perfetto": args.perfetto}
    )
    progress = None if args.quiet else RunProgress(sys.stderr)
    try:
        out = scenario.run_scenario(
            sc, params, trace_path=args.trace, trace_level=level, progress=progress,
            livelock_cycles=args.livelock_cycles, trace_region=args.trace_region,
        )  # fmt: skip
    except KeyboardInterrupt:
        kept = f"; trace so far kept in {args.trace}" if args.trace else ""
        print(f"wafersim: interrupted{kept}", file=sys.stderr)
        return 130
    data = out.as_json()
    exported = None
    if args.perfetto and out.trace_path:
        from traces.perfetto import export_perfetto  # pyarrow, perfetto

        with outputs.atomic(args.perfetto, "--perfetto") as tmp:
            exported = export_perfetto(out.trace_path, tmp, detail_region=args.detail_region)
        data["perfetto"] = args.perfetto
    if args.json:
        print(json.dumps(data, default=_json_default))
        return 0
    print(f"scenario {sc.name} (kind {sc.kind.name}): {out.result.status}")
    for key, value in out.metrics.items():
        if key.endswith("_table") and isinstance(value, list) and value:
            print(f"  {key:<28} {len(value)} records:")
            _print_records(value)
            continue
        print(f"  {key:<28} {_fmt(value)}")
    r = out.result
    print(f"  wall {r.wall_s:.3f} s, {r.events:,} kernel events ({_fmt(r.events_per_s)} per s)")
    if out.trace_path:
        print(f"  trace {out.trace_path} (level {args.trace_level})")
    if args.perfetto:
        print(f"  perfetto {args.perfetto} (open in https://ui.perfetto.dev)")
        if exported is not None:
            print(f"    {exported.describe()}")
            if exported.detail:
                print(f"    {exported.detail}")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    _seed(args)
    sc = scenario.find(args.scenario)
    if sc.kind.model is None:
        raise WafersimError(f"workload kind '{sc.kind.name}' has no analytical model")
    params = scenario.resolve_params(sc, args.overrides)
    data = {"scenario": sc.name, "kind": sc.kind.name, **sc.kind.model(params)}
    if args.json:
        print(json.dumps(data, default=_json_default))
    else:
        for key, value in data.items():
            print(f"  {key:<28} {_fmt(value)}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from app.progress import PointProgress  # tqdm, and the kernel (SimPy, numpy)

    sweepcli.check_arguments(args)
    points = PointProgress(sys.stderr, quiet=args.quiet)
    if args.workers or args.scheduler:
        from sweeps import engine  # distributed adds half a second to a command's start

        with engine.connect(args.workers, args.scheduler) as client:
            return _validate(args, engine.DaskRunner(client, on_point=points), points)
    return _validate(args, scenario.SequentialRunner(on_point=points), points)


def _validate(args: argparse.Namespace, runner: registry.Runner, points: PointProgress) -> int:
    """Run the cases with ``runner``, which reports each point to ``points`` as it finishes."""
    results = []
    ok = True
    for case in _cases(args):
        points.start_case(case.name)
        rows = case.run(runner)
        points.close()
        mape, worst, worst_abs, passed = case.judge(rows)
        ok &= passed
        results.append((case, rows, mape, worst, worst_abs, passed))
        if not args.json:  # each case's table as soon as it is done
            _print_case(case, rows, mape, worst, worst_abs, passed, header=len(results) == 1)
    if args.json:
        print(json.dumps([
            {"case": c.name, "summary": c.summary, "criterion": c.criterion,
             "tolerance": c.tolerance, "source": c.source, "mape_pct": mape, "max_error_pct": worst,
             "max_abs_error": worst_abs, "passed": passed,
             "rows": [{"point": r.point, "simulated": r.simulated, "model": r.model,
                       "reference": r.reference, "unit": r.unit, "error_pct": r.error_pct}
                      for r in rows]}
            for c, rows, mape, worst, worst_abs, passed in results
        ], default=_json_default))  # fmt: skip
        return 0 if ok else EXIT_VALIDATION
    return 0 if ok else EXIT_VALIDATION


def _cases(args: argparse.Namespace) -> list[registry.ValidationCase]:
    """The cases named, or with ``--set``, the one a kind's input file declares."""
    if not args.overrides:
        return registry.find_cases(args.cases)
    registry.declare_all()
    kinds = [name for name in args.cases if name in registry.KINDS]
    kind = registry.KINDS[kinds[0]] if len(args.cases) == 1 and kinds else None
    if kind is None or kind.validation is None:
        file_kinds = [k.name for k in registry.KINDS.values() if k.validation is not None]
        raise registry.RegistryError(
            f"validate --set takes one kind that reads its inputs from a file "
            f"({', '.join(file_kinds)}), not {' '.join(args.cases) or 'none'}; e.g. "
            "wafersim validate wafer-program --set program=kernel.py"
        )
    data: dict[str, Any] = {}
    for text in args.overrides:
        cfg.apply_override(data, text)
    return [kind.validation(data)]


def _print_case(
    case: registry.ValidationCase, rows: list[registry.ValidationRow], mape: float,
    worst: float, worst_abs: float, passed: bool, *, header: bool,
) -> None:  # fmt: skip
    width = max([len(r.point) for r in rows] + [24])
    if header:
        print(VALIDATE_COLUMNS)
    units = {r.unit for r in rows}
    one = units.pop() if len(units) == 1 else None  # else: a unit column
    heads = [f"{c} ({one})" if one else c for c in ("simulated", "model", "reference")]
    w = max(12, *(len(h) for h in heads))
    line = (
        f"{'case':<14} {'point':<{width}} {heads[0]:>{w}} {heads[1]:>{w}} {heads[2]:>{w}} "
        f"{'error %':>8}{'' if one else '  unit'}"
    )
    print(line)
    print("-" * len(line))
    for r in rows:
        ref = _fmt(r.reference) if r.reference is not None else "-"
        print(
            f"{r.case:<14} {r.point:<{width}} {_fmt(r.simulated):>{w}} {_fmt(r.model):>{w}} "
            f"{ref:>{w}} {r.error_pct:>8.2f}{'' if one else '  ' + r.unit}"
        )
    verdict = "ok" if passed else "OUT OF TOLERANCE"
    print(
        f"{case.name}: MAPE {mape:.2f} %, max {worst:.2f} %, max |error| {_fmt(worst_abs)} "
        f"(needs {case.describe_tolerance()}): {verdict}"
    )
    if case.source:
        print(f"{case.name}: source: {case.source}")
    print(flush=True)


def cmd_trace(args: argparse.Namespace) -> int:
    from traces.export import export, export_path  # pyarrow, perfetto
    from traces.summary import format_summary, summarize  # pyarrow, numpy

    if args.trace_command == "export":
        out = export_path(args.path, args.to, args.output)
        outputs.check_paths({"the trace": args.path}, {"the export": out})
        with outputs.atomic(out, "the export") as tmp:
            _, stats = export(args.path, args.to, tmp, detail_region=args.detail_region)
        if stats.note:
            print(f"wafersim: warning: {stats.note}", file=sys.stderr)
        print(f"wrote {out}: {stats.describe()}")
        if stats.detail:
            print(f"  {stats.detail}")
        return 0
    s = summarize(args.path)
    if args.json:
        print(json.dumps(s, default=_json_default))
    else:
        print(format_summary(s))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    # Imported here, not at the top: matplotlib adds about a second to every command's start,
    # and only `plot` draws.
    from app.plots import (
        plot_banks,
        plot_jitq_breakdown,
        plot_roofline,
        plot_sweep,
        plot_validate,
    )
    from traces import heatmap, plots

    plots.check_format(args.output)
    trace = getattr(args, "path", None)
    outputs.check_paths({"the trace": trace}, {"the plot (-o)": args.output})
    with outputs.atomic(args.output, "the plot (-o)") as tmp:
        if args.plot_command == "mesh":
            plots.plot_mesh(args.path, tmp, metric=args.metric)
        elif args.plot_command == "timeline":
            plots.plot_timeline(args.path, tmp)
        elif args.plot_command == "heatmap":
            heatmap.plot_heatmap(args.path, tmp, unit=args.by, metric=args.metric,
                                 bins=args.bins)  # fmt: skip
        elif args.plot_command == "banks":
            plot_banks(args.path, tmp, bins=args.bins)
        elif args.plot_command == "roofline":
            plot_roofline(args.path, tmp)
        elif args.plot_command == "links":
            plots.plot_links(args.path, tmp)
        elif args.plot_command == "sweep":
            plot_sweep(args.path, tmp, x=args.x, y=args.y, hue=args.hue,
                       logx=args.logx, logy=args.logy)  # fmt: skip
        elif args.plot_command == "jitq-breakdown":
            plot_jitq_breakdown(tmp, args.overrides)
        else:
            plot_validate(args.case, tmp)
    print(f"wrote {args.output}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    return sweepcli.sweep_command(args)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return str(obj)


COMMANDS = {
    "list": cmd_list,
    "params": cmd_params,
    "run": cmd_run,
    "model": cmd_model,
    "validate": cmd_validate,
    "sweep": cmd_sweep,
    "trace": cmd_trace,
    "plot": cmd_plot,
}


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is buffered cannot
    fail again (and print its own traceback) on the way out."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # `kill`: end the run as Ctrl-C does, keeping what was written


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _dispatch(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a full disk behind stdout shows here, inside the handlers below
        return code
    except WafersimError as exc:
        print(f"wafersim: error: {_printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wafersim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, as Unix tools do.
        _silence_stdout()
        return 0
    except MemoryError:
        print(
            "wafersim: error: out of memory; lower the scenario's sizes (wafersim params "
            "SCENARIO lists them) or free memory",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        if exc.filename is not None or exc.errno not in _STREAM_ERRNOS:
            return _internal_error()
        # Every file output converts its own OSError (runner/outputs.py): a write error
        # without a file name is standard output's (`> /dev/full`, a full disk).
        _silence_stdout()
        print(f"wafersim: error: cannot write standard output: {exc.strerror}", file=sys.stderr)
        return 2
    except Exception:
        return _internal_error()


def _printable(text: str) -> str:
    """``text`` with control characters other than newlines escaped (``\\x1e``), so a value
    the user typed cannot break or garble the message's line."""
    return "".join(
        c if c.isprintable() or c == "\n" else c.encode("unicode_escape").decode() for c in text
    )


_STREAM_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG)


def _internal_error() -> int:
    traceback.print_exc()
    print("wafersim: internal error (a bug in wafersim; please report it)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
