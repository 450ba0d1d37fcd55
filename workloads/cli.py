"""The ``wafersim`` command line.

Exit status: 0 success; 2 a user error (bad scenario, key, value, file; a stalled run), printed
as one clear message without a traceback; 1 an internal error (a bug: the traceback is shown) or a
validation case outside its tolerance; 130 interrupted with Ctrl-C (the trace so far is kept).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from typing import Any

from simcore import config as cfg
from simcore.errors import WafersimError
from simcore.sim import Progress
from simcore.tracing import LEVEL_NAMES, TraceLevel
from traces.export import export
from traces.perfetto import export_perfetto
from traces.summary import format_summary, summarize
from workloads import registry, scenario, sweep


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="wafersim",
        description="Cycle-level discrete-event simulator of machine-learning hardware.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("list", help="list built-in scenarios with one-line descriptions")

    p = sub.add_parser("params", help="list a scenario's parameters, defaults and ranges")
    p.add_argument("scenario", metavar="SCENARIO", help="built-in scenario name or .toml path")

    p = sub.add_parser("run", help="run a scenario and print its metrics")
    p.add_argument("scenario", metavar="SCENARIO", help="built-in scenario name or .toml path")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a parameter (repeatable), e.g. --set elements=64",
    )
    p.add_argument("--trace", metavar="PATH", help="write an Arrow event trace to PATH")
    p.add_argument(
        "--trace-level",
        default="ops",
        choices=LEVEL_NAMES,
        help="how much the trace records (default: ops)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object of metrics")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--livelock-cycles",
        type=int,
        default=1_000_000,
        metavar="N",
        help="end the run as a livelock when nothing is computed or moved for N cycles while "
        "events go on (default 1,000,000; 0: never)",
    )
    p.add_argument(
        "--perfetto",
        metavar="OUT",
        help="after the run, export the trace to OUT (.pftrace) for ui.perfetto.dev "
        "(the Arrow trace goes to --trace, or next to OUT)",
    )

    p = sub.add_parser("model", help="evaluate a scenario's analytical model (no simulation)")
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("validate", help="compare simulation with analytical models")
    p.add_argument("cases", nargs="*", metavar="CASE", help="cases to run (default: all)")
    p.add_argument("--json", action="store_true")
    sweep.add_cluster_arguments(p, workers_default="none: one point after another, here")

    p = sub.add_parser("sweep", help="run a scenario over a grid of parameters, in parallel")
    sweep.add_arguments(p)

    p = sub.add_parser("trace", help="work with trace files")
    tsub = p.add_subparsers(dest="trace_command", required=True, metavar="TRACE_COMMAND")
    q = tsub.add_parser("summary", help="summarise a trace file")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--json", action="store_true")
    q = tsub.add_parser("export", help="convert a trace for a timeline viewer")
    q.add_argument("path", metavar="PATH")
    q.add_argument(
        "--to",
        required=True,
        choices=("perfetto", "json"),
        help="perfetto: .pftrace for ui.perfetto.dev; json: Chrome trace-event JSON",
    )
    q.add_argument(
        "-o", "--output", metavar="OUT", help="output file (default: PATH with .pftrace or .json)"
    )

    p = sub.add_parser("plot", help="draw a trace or validation case to PNG/SVG")
    psub = p.add_subparsers(dest="plot_command", required=True, metavar="PLOT")
    q = psub.add_parser("mesh", help="heatmap over pe[x,y] of busy fraction or link utilisation")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--metric", choices=("busy", "link"), default="busy")
    q.add_argument("-o", "--output", metavar="OUT", required=True, help="OUT.png or OUT.svg")
    q = psub.add_parser("timeline", help="per-component timeline of a small trace")
    q.add_argument("path", metavar="PATH")
    q.add_argument("-o", "--output", metavar="OUT", required=True)
    q = psub.add_parser("validate", help="simulated vs model (vs reference) for a case")
    q.add_argument("case", metavar="CASE")
    q.add_argument("-o", "--output", metavar="OUT", required=True)
    q = psub.add_parser("sweep", help="a metric of a sweep table against a parameter")
    q.add_argument("path", metavar="TABLE.parquet")
    q.add_argument("--x", required=True, metavar="COLUMN")
    q.add_argument("--y", required=True, metavar="COLUMN")
    q.add_argument("--hue", metavar="COLUMN", help="one line per value of COLUMN")
    q.add_argument("--logx", action="store_true", help="logarithmic x axis")
    q.add_argument("--logy", action="store_true", help="logarithmic y axis")
    q.add_argument("-o", "--output", metavar="OUT", required=True)
    return ap  # fmt: skip


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def cmd_list(args: argparse.Namespace) -> int:
    registry.load_all()
    rows = []
    for name in scenario.builtin_names():
        sc = scenario.find(name)
        rows.append((name, sc.kind.name, sc.description))
    width = max(len(r[0]) for r in rows)
    for name, kind, desc in rows:
        print(f"{name:<{width}}  {desc}  [{kind}]")
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    sc = scenario.find(args.scenario)
    print(f"parameters of scenario '{sc.name}' (kind {sc.kind.name}); set with --set KEY=VALUE")
    for key, default, allowed, doc in cfg.describe(sc.kind.params):
        print(f"  {key:<32} {default:<14} [{allowed}]  {doc}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    sc = scenario.find(args.scenario)
    params = scenario.resolve_params(sc, args.overrides)
    level = TraceLevel[args.trace_level.upper()]
    if args.perfetto and not args.trace:
        args.trace = os.path.splitext(args.perfetto)[0] + ".arrows"
    if args.perfetto and level == TraceLevel.OFF:
        raise WafersimError("--perfetto needs a trace: use --trace-level summary, ops or detail")
    progress = None if args.quiet else Progress(sys.stderr)
    try:
        out = scenario.run_scenario(
            sc, params, trace_path=args.trace, trace_level=level, progress=progress,
            livelock_cycles=args.livelock_cycles,
        )  # fmt: skip
    except KeyboardInterrupt:
        kept = f"; trace so far kept in {args.trace}" if args.trace else ""
        print(f"wafersim: interrupted{kept}", file=sys.stderr)
        return 130
    data = out.as_json()
    if args.perfetto and out.trace_path:
        export_perfetto(out.trace_path, args.perfetto)
        data["perfetto"] = args.perfetto
    if args.json:
        print(json.dumps(data, default=_json_default))
        return 0
    print(f"scenario {sc.name} (kind {sc.kind.name}): {out.result.status}")
    for key, value in out.metrics.items():
        print(f"  {key:<28} {_fmt(value)}")
    r = out.result
    print(f"  wall {r.wall_s:.3f} s, {r.events:,} kernel events ({_fmt(r.events_per_s)} events/s)")
    if out.trace_path:
        print(f"  trace {out.trace_path} (level {args.trace_level})")
    if args.perfetto:
        print(f"  perfetto {args.perfetto} (open in https://ui.perfetto.dev)")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
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
    sweep.check_arguments(args)
    if args.workers or args.scheduler:
        from workloads import engine  # distributed adds half a second to a command's start

        with engine.connect(args.workers, args.scheduler) as client:
            return _validate(args, engine.DaskRunner(client))
    return _validate(args, scenario.run_points)


def _validate(args: argparse.Namespace, runner: registry.Runner) -> int:
    results = []
    ok = True
    for case in registry.find_cases(args.cases):
        rows = case.run(runner)
        mape, worst, worst_abs, passed = case.judge(rows)
        ok &= passed
        results.append((case, rows, mape, worst, worst_abs, passed))
    if args.json:
        print(json.dumps([
            {"case": c.name, "summary": c.summary, "criterion": c.criterion,
             "tolerance": c.tolerance, "mape_pct": mape, "max_error_pct": worst,
             "max_abs_error": worst_abs, "passed": passed,
             "rows": [{"point": r.point, "simulated": r.simulated, "model": r.model,
                       "reference": r.reference, "error_pct": r.error_pct} for r in rows]}
            for c, rows, mape, worst, worst_abs, passed in results
        ], default=_json_default))  # fmt: skip
        return 0 if ok else 1
    width = max((len(r.point) for _, rows, *_ in results for r in rows), default=10)
    cw = max(len(c.name) for c, *_ in results)
    header = (
        f"{'case':<{cw}} {'point':<{width}} {'simulated':>12} {'model':>12} "
        f"{'reference':>12} {'error %':>8}"
    )
    print(header)
    print("-" * len(header))
    for case, rows, mape, worst, worst_abs, passed in results:
        for r in rows:
            ref = _fmt(r.reference) if r.reference is not None else "-"
            print(
                f"{r.case:<{cw}} {r.point:<{width}} {_fmt(r.simulated):>12} {_fmt(r.model):>12} "
                f"{ref:>12} {r.error_pct:>8.2f}"
            )
        verdict = "ok" if passed else "OUT OF TOLERANCE"
        print(
            f"{case.name}: MAPE {mape:.2f} %, max {worst:.2f} %, max |error| {_fmt(worst_abs)} "
            f"(needs {case.describe_tolerance()}): {verdict}"
        )
    return 0 if ok else 1


def cmd_trace(args: argparse.Namespace) -> int:
    if args.trace_command == "export":
        out, stats = export(args.path, args.to, args.output)
        print(f"wrote {out}: {stats.describe()}")
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
    from traces import plots
    from workloads.plots import plot_sweep, plot_validate

    if args.plot_command == "mesh":
        plots.plot_mesh(args.path, args.output, metric=args.metric)
    elif args.plot_command == "timeline":
        plots.plot_timeline(args.path, args.output)
    elif args.plot_command == "sweep":
        plot_sweep(args.path, args.output, x=args.x, y=args.y, hue=args.hue,
                   logx=args.logx, logy=args.logy)  # fmt: skip
    else:
        plot_validate(args.case, args.output)
    print(f"wrote {args.output}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from workloads import engine  # distributed adds half a second to a command's start

    return engine.sweep_command(args)


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except WafersimError as exc:
        print(f"wafersim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wafersim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception:
        traceback.print_exc()
        print("wafersim: internal error (a bug in wafersim; please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
