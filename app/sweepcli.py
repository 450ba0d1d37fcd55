"""The command line of ``wafersim sweep`` and of ``validate --workers``: their arguments, their
checks, and the ``sweep`` command (which starts a Dask cluster: :mod:`sweeps.engine`)."""

from __future__ import annotations

import argparse
import json
import math
import os

from app import argtypes
from runner import outputs, scenario
from simcore.errors import ConfigError, WafersimError
from simcore.tracing import LEVEL_NAMES
from sweeps import grid


# -- command line ----------------------------------------------------------------------------------
def add_cluster_arguments(p: argparse.ArgumentParser, *, workers_default: str) -> None:
    """``--workers`` and ``--scheduler``, shared by ``sweep`` and ``validate``."""
    p.add_argument(
        "--workers",
        type=argtypes.positive,
        metavar="N",
        help=f"worker processes of the local Dask cluster (default: {workers_default})",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on a running Dask cluster instead (e.g. tcp://10.0.0.5:8786)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``wafersim sweep``."""
    p.add_argument(
        "scenario", metavar="SCENARIO", help="built-in scenario, scenario .toml, or sweep .toml"
    )
    p.add_argument(
        "--grid", action="append", default=[], metavar="KEY=V1,V2,...",
        help="a crossed axis (repeatable): every value with every value of the other axes",
    )  # fmt: skip
    p.add_argument(
        "--zip", dest="zip_", action="append", default=[], metavar="KEY=V1,V2,...",
        help="a zipped axis (repeatable): all --zip lists move together, as one axis",
    )  # fmt: skip
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a parameter at every point (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "-o", "--output", metavar="OUT.parquet",
        help="result table (default: the sweep file's output, else out/SCENARIO-sweep.parquet)",
    )  # fmt: skip
    add_cluster_arguments(p, workers_default="one per core")
    p.add_argument(
        "--retries", type=argtypes.count, default=0, metavar="N",
        help="run a point that failed, timed out or crashed its worker up to N more times",
    )  # fmt: skip
    p.add_argument(
        "--time-limit", type=argtypes.seconds, metavar="SECONDS",
        help="end a point still running after SECONDS (status timeout)",
    )  # fmt: skip
    p.add_argument("--traces", metavar="DIR", help="write each point's Arrow trace into DIR")
    p.add_argument(
        "--trace-level", default="ops", choices=LEVEL_NAMES,
        help="how much each point's trace records (default: ops)",
    )  # fmt: skip
    p.add_argument(
        "--livelock-cycles", type=argtypes.count, default=1_000_000, metavar="N",
        help="as for run (default 1,000,000; 0: never)",
    )  # fmt: skip
    p.add_argument(
        "--resume", action="store_true",
        help="continue the sweep that wrote OUT (same grid): keep its results, run the rest",
    )  # fmt: skip
    p.add_argument(
        "--overwrite", "--no-resume", dest="overwrite", action="store_true",
        help="replace OUT (and its journal): run every point again",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def check_arguments(args: argparse.Namespace) -> None:
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers", args.workers, "out of range", allowed="1 .. inf")
    if args.workers is not None and args.scheduler:
        raise WafersimError(
            "--workers and --scheduler exclude each other: --workers sizes a local cluster, "
            "a running cluster at --scheduler has the workers it has"
        )
    if getattr(args, "retries", 0) < 0:
        raise ConfigError("--retries", args.retries, "out of range", allowed="0 .. inf")
    limit = getattr(args, "time_limit", None)
    if limit is not None and not (limit > 0 and math.isfinite(limit)):
        raise ConfigError("--time-limit", limit, "out of range", allowed="> 0 seconds")


def check_outputs(
    args: argparse.Namespace, sw: grid.Sweep, points: list[grid.Point], output: str
) -> None:
    """Every output of the sweep checked before its first point runs: the table and the traces
    folder are not an input (the scenario or sweep file, a file-valued parameter's file), not
    each other, and can be written; a table (or journal) already there is refused unless
    ``--resume`` (the same grid) or ``--overwrite``."""
    if args.resume and args.overwrite:
        raise WafersimError(
            "--resume and --overwrite exclude each other: --resume continues the sweep that "
            f"wrote '{output}', --overwrite replaces it"
        )
    inputs: dict[str, str | None] = {
        "the sweep file": args.scenario if os.path.isfile(args.scenario) else None,
    }
    if sw.scen.path != args.scenario:
        inputs["the scenario file"] = sw.scen.path if os.path.isfile(sw.scen.path) else None
    for p in points:
        if p.params is not None:
            inputs.update(
                (f"{what} (point {p.index})", path)
                for what, path in scenario.input_files(sw.scen, p.params).items()
                if what != "the scenario file"
            )
    outputs.check_paths(inputs, {"the table (-o)": output})
    if args.traces:
        outputs.check_folder("--traces", args.traces, {"the table (-o)": output, **inputs})
        for p in points:
            trace = os.path.join(args.traces, grid.trace_name(p))
            outputs.check_paths(inputs, {f"the trace of point {p.index}": trace})
    from sweeps.engine import check_previous  # distributed, pyarrow

    check_previous(output, points, resume=args.resume, overwrite=args.overwrite)


def sweep_command(args: argparse.Namespace) -> int:
    """``wafersim sweep``: see :func:`add_arguments`."""
    from sweeps.engine import check_workers, connect, run_sweep  # distributed: half a second

    check_arguments(args)
    sw = grid.load(
        args.scenario, grid=args.grid, zip_=args.zip_, overrides=args.overrides,
        livelock_cycles=args.livelock_cycles,
    )  # fmt: skip
    output = args.output or sw.output or os.path.join("out", f"{sw.scen.name}-sweep.parquet")
    if not output.endswith(".parquet"):
        raise WafersimError(f"sweep output '{output}' must end in .parquet")
    # a key the scenario does not have is reported before a cluster starts
    points = sw.points()
    check_outputs(args, sw, points, output)
    point_bytes = max(
        (sw.scen.kind.footprint(p.params).bytes for p in points if p.params is not None),
        default=0,
    ) if sw.scen.kind.footprint is not None else 0  # fmt: skip
    workers = None
    if not args.scheduler:
        workers = check_workers(args.workers, point_bytes)
    with connect(workers, args.scheduler, point_bytes=point_bytes) as client:
        outcome = run_sweep(
            client, sw, output, retries=args.retries, time_limit_s=args.time_limit,
            traces=args.traces, trace_level=args.trace_level, resume=not args.overwrite,
            quiet=args.quiet,
        )  # fmt: skip
    print(json.dumps(outcome.as_json()) if args.json else outcome.describe())
    return 0
