"""Sweeps: a scenario run at many parameter points, and the table of their results.

A *sweep* is a scenario, fixed overrides applied to every point (``--set``), and *axes*. An axis
is either one key with a list of values (``--grid p=4,8,16``) or several keys whose lists move
together (``--zip``, or a ``[[zip]]`` table of a sweep file); the points are the cross product of
the axes, the last axis varying fastest. Every point is an independent simulation, so the engine
(:mod:`workloads.engine`, on Dask) may run them in any order and on any number of workers.

This module holds everything about a sweep that does not need the engine: reading the sweep
(command line or TOML file), resolving each point to its parameters and a hash of its full
configuration, the journal that makes a sweep resumable, and the result table. The table is a
pure function of the sweep and of the results keyed by hash, whatever ran them and in which
order: a row per point in sweep order; that is what makes it the same with one worker or ten, and
the same after a resume.

A sweep file::

    scenario = "summa"            # a built-in scenario, or a path relative to this file
    output = "out/summa.parquet"  # optional; -o overrides it
    [set]                         # fixed for every point
    seed = 1
    [grid]                        # crossed axes, in this order
    p = [4, 8, 16]
    [[zip]]                       # one zipped axis: these lists move together
    mt = [16, 8, 4]
    "fabric.hop_latency_cycles" = [1, 1, 2]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from simcore import config as cfg
from simcore.errors import MISSING, ConfigError, ScenarioError, WafersimError
from simcore.tracing import LEVEL_NAMES
from workloads import __version__, argtypes, outputs, scenario

#: How a point can end (the ``status`` column).
#:
#: - ``completed``: ran to the end; its metrics are in the row;
#: - ``invalid``: its configuration was rejected when loaded or built (a value out of range, a
#:   wafer too small, a program that does not fit: any wafersim user error but a stall);
#: - ``stalled`` / ``livelock``: the run stopped making progress (see ``wafersim run``);
#: - ``failed``: any other exception: a bug in wafersim, or in the workload;
#: - ``timeout``: still running at the per-point time limit;
#: - ``crashed``: the worker process running it died (out of memory, a signal).
STATUSES = ("completed", "invalid", "stalled", "livelock", "failed", "timeout", "crashed")
#: Statuses a run of the same configuration would give again: such points are *done*, skipped
#: on resume and never retried. The others may pass on another attempt.
FINAL = frozenset({"completed", "invalid", "stalled", "livelock"})

#: Columns after the axes and metrics, in this order (``trace`` only when traces are written).
MEASURED = ("wall_s", "peak_rss_bytes")
TAIL = ("status", "error", *MEASURED, "attempts", "config_hash", "config")

#: Parquet schema metadata key: which columns hold metrics (and which of those are JSON text).
META_KEY = b"wafersim.sweep"

_STRUCTURAL = ("unknown key", "is a section, not a value", "is a value, not a section")


# -- axes ------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Axis:
    """One axis: ``keys`` (one, or several zipped) and the tuple of their values at each step."""

    keys: tuple[str, ...]
    steps: tuple[tuple[Any, ...], ...]


def parse_values(text: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,...`` -> (key, values). The values are TOML literals when the whole list
    parses as a TOML array (``4,8``, ``"a","b"``, ``[1,2],[3,4]``), else comma-separated words,
    each a TOML literal or a bare string (``flavour=fwd,bwd``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise ConfigError(
            text, MISSING, "an axis must look like KEY=V1,V2,...", hint="e.g. --grid p=4,8,16"
        )
    try:
        values = tomllib.loads(f"v = [{raw}]")["v"]
    except tomllib.TOMLDecodeError:
        values = [cfg.parse_override(f"v={word}")[1] for word in raw.split(",")]
    return key, values


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables -> dotted keys (``{"fabric": {"hop": 1}}`` -> ``{"fabric.hop": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def crossed(key: str, values: Sequence[Any], where: str) -> Axis:
    if not isinstance(values, list | tuple) or not values:
        raise ConfigError(key, values, f"{where}: an axis needs a non-empty list of values")
    return Axis((key,), tuple((v,) for v in values))


def zipped(table: dict[str, Sequence[Any]], where: str) -> Axis:
    """One axis of several keys whose value lists have the same length."""
    if not table:
        raise ScenarioError(f"{where}: a zipped axis needs at least one key")
    lengths = {}
    for key, values in table.items():
        if not isinstance(values, list | tuple) or not values:
            raise ConfigError(key, values, f"{where}: an axis needs a non-empty list of values")
        lengths[key] = len(values)
    if len(set(lengths.values())) > 1:
        sizes = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise ScenarioError(f"{where}: zipped lists must have the same length ({sizes})")
    keys = tuple(table)
    return Axis(keys, tuple(zip(*(table[k] for k in keys), strict=True)))


# -- the sweep -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Point:
    """One point of a sweep: its index, the axis values, and either its parameters and config
    hash or (``params`` None) the error that made its configuration invalid."""

    index: int
    values: dict[str, Any]
    params: Any
    config_hash: str
    config: str
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Sweep:
    scen: scenario.Scenario
    fixed: tuple[tuple[str, Any], ...]  # (dotted key, value) set at every point, in order
    axes: tuple[Axis, ...]
    livelock_cycles: int = 1_000_000
    output: str | None = None

    @property
    def keys(self) -> list[str]:
        """The swept keys, one column each, in axis order."""
        return [k for axis in self.axes for k in axis.keys]

    def combinations(self) -> Iterator[dict[str, Any]]:
        """The points' axis values, in sweep order (the last axis varies fastest)."""
        for steps in itertools.product(*(axis.steps for axis in self.axes)):
            point: dict[str, Any] = {}
            for axis, step in zip(self.axes, steps, strict=True):
                point.update(zip(axis.keys, step, strict=True))
            yield point

    def points(self) -> list[Point]:
        """Every point resolved to its parameters. A value a parameter does not accept makes
        that point ``invalid``; a key the scenario does not have is an error of the sweep."""
        base = scenario._deepcopy(self.scen.data)
        for key, value in self.fixed:
            cfg.set_key(base, key, value)
        return [self._point(i, values, base) for i, values in enumerate(self.combinations())]

    def _point(self, index: int, values: dict[str, Any], base: dict[str, Any]) -> Point:
        data = scenario._deepcopy(base)
        for key, value in values.items():
            cfg.set_key(data, key, value)
        try:
            params = cfg.load(self.scen.kind.params, data)
        except ConfigError as err:
            if err.problem in _STRUCTURAL:
                raise
            text = json.dumps(data, sort_keys=True, default=str)
            return Point(index, values, None, config_hash(self.scen.kind.name, text), "", str(err))
        text = json.dumps(cfg.to_dict(params), sort_keys=True, default=str)
        key = config_hash(self.scen.kind.name, text, self.livelock_cycles)
        return Point(index, values, params, key, text)


def config_hash(kind: str, config: str, livelock_cycles: int | None = None) -> str:
    """The key of a point's result: its kind, full effective configuration (seed included),
    livelock limit and the wafersim version (another version may simulate differently)."""
    blob = json.dumps([__version__, kind, config, livelock_cycles])
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


_FILE_KEYS = ("scenario", "description", "output", "set", "grid", "zip")


def is_sweep_file(name: str) -> bool:
    """A TOML file with ``scenario =`` and no ``kind =`` is a sweep file (a scenario names its
    kind)."""
    if not name.endswith(".toml") or not os.path.isfile(name):
        return False
    try:
        data = tomllib.loads(Path(name).read_text())
    except tomllib.TOMLDecodeError:
        return False
    return "scenario" in data and "kind" not in data


def load(
    name: str,
    *,
    grid: Sequence[str] = (),
    zip_: Sequence[str] = (),
    overrides: Sequence[str] = (),
    livelock_cycles: int = 1_000_000,
) -> Sweep:
    """The sweep of scenario or sweep file ``name``, with command-line axes and overrides added
    after the file's (``--set`` wins over the file's ``[set]``)."""
    axes: list[Axis] = []
    fixed: list[tuple[str, Any]] = []
    output = None
    scen_name = name
    if is_sweep_file(name):
        data = tomllib.loads(Path(name).read_text())
        unknown = sorted(set(data) - set(_FILE_KEYS))
        if unknown:
            raise ScenarioError(
                f"sweep file '{name}': unknown key(s) {', '.join(unknown)}; "
                f"a sweep file has {', '.join(_FILE_KEYS)}"
            )
        scen_name = str(data["scenario"])
        if scen_name.endswith(".toml") or "/" in scen_name:
            scen_name = str(Path(name).parent / scen_name)
        output = data.get("output")
        fixed = list(_flatten(data.get("set", {})).items())
        for key, values in _flatten(data.get("grid", {})).items():
            axes.append(crossed(key, values, f"sweep file '{name}' [grid]"))
        zips = data.get("zip", [])
        for i, table in enumerate([zips] if isinstance(zips, dict) else zips):
            axes.append(zipped(_flatten(table), f"sweep file '{name}' [[zip]] #{i + 1}"))
    for text in grid:
        key, values = parse_values(text)
        axes.append(crossed(key, values, f"--grid {text}"))
    if zip_:
        axes.append(zipped(dict(parse_values(t) for t in zip_), "--zip"))
    keys = [k for axis in axes for k in axis.keys]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ScenarioError(f"sweep key(s) {', '.join(twice)} on more than one axis; keep one")
    scen = scenario.find(scen_name)
    fixed += [cfg.parse_override(text) for text in overrides]
    return Sweep(scen, tuple(fixed), tuple(axes), livelock_cycles, output)


# -- results ---------------------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """A metric as JSON-able Python (numpy scalars and arrays, tuples -> lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def normalise(result: dict[str, Any]) -> dict[str, Any]:
    """A result as the journal stores and returns it: the same whether it came from a worker
    just now or from a file written by an earlier, interrupted run."""
    return json.loads(json.dumps(plain(result)))


class Journal:
    """Results appended one JSON line per point as they arrive (``OUTPUT.journal.jsonl``), so
    that a sweep killed part-way keeps what it has. A line cut short by the kill is ignored."""

    def __init__(self, output: str) -> None:
        self.path = output + ".journal.jsonl"
        self._file: Any = None

    def read(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        if os.path.exists(self.path):
            with open(self.path) as f:
                for line in f:
                    try:
                        result = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(result, dict) and "config_hash" in result:
                        found[result["config_hash"]] = result
        return found

    def append(self, result: dict[str, Any]) -> None:
        if self._file is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._file = open(self.path, "a")  # noqa: SIM115 - kept open for the whole sweep
        self._file.write(json.dumps(result) + "\n")
        self._file.flush()

    def close(self, *, remove: bool = False) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if remove and os.path.exists(self.path):
            os.remove(self.path)


def previous_results(output: str) -> dict[str, dict[str, Any]]:
    """Results of an earlier run to the same output (its table, then its journal), by hash."""
    found: dict[str, dict[str, Any]] = {}
    if os.path.exists(output):
        # not a sweep table (or a damaged one): nothing to resume from
        with contextlib.suppress(pa.ArrowInvalid, OSError, KeyError, ValueError):
            found.update(results_from_table(pq.read_table(output)))
    found.update(Journal(output).read())
    return found


def results_from_table(table: pa.Table) -> dict[str, dict[str, Any]]:
    """The inverse of :func:`build_table` on its results: hash -> result."""
    meta = json.loads((table.schema.metadata or {})[META_KEY])
    columns = meta["metrics"]
    found: dict[str, dict[str, Any]] = {}
    for row in table.to_pylist():
        metrics = {}
        for column, (name, is_json) in columns.items():
            value = row[column]
            if value is not None:
                metrics[name] = json.loads(value) if is_json else value
        result = {k: row[k] for k in ("config_hash", "status", "error", *MEASURED, "attempts")}
        result["metrics"] = metrics
        result["trace"] = row.get("trace")
        found[row["config_hash"]] = normalise(result)
    return found


def _column(values: list[Any]) -> tuple[pa.Array, bool]:
    """An Arrow column of ``values`` (None = null); mixed or nested values become JSON text."""
    try:
        if not any(isinstance(v, dict) for v in values):
            return pa.array(values), False
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    return pa.array([None if v is None else json.dumps(v) for v in values], pa.string()), True


def build_table(
    sweep: Sweep, points: Sequence[Point], results: dict[str, dict[str, Any]], traces: bool
) -> pa.Table:
    """One row per point, in sweep order: ``point``, the swept keys, ``status``, ``error``,
    every metric (null where a point has none), ``wall_s``, ``peak_rss_bytes``, ``attempts``,
    ``config_hash``, ``config`` (the full effective configuration, JSON) and, with traces
    (asked for now, or kept from an earlier run), ``trace``. A metric named like a swept key
    is ``metrics.NAME``."""
    keys = sweep.keys
    rows = [results[p.config_hash] for p in points]
    names: list[str] = []
    for r in rows:
        names.extend(n for n in r.get("metrics", {}) if n not in names)
    columns: dict[str, pa.Array] = {"point": pa.array([p.index for p in points], pa.int64())}
    for key in keys:
        columns[key], _ = _column([plain(p.values[key]) for p in points])
    columns["status"] = pa.array([r["status"] for r in rows], pa.string())
    columns["error"] = pa.array([r.get("error") or None for r in rows], pa.string())
    metric_columns: dict[str, tuple[str, bool]] = {}
    for name in names:
        column = f"metrics.{name}" if name in columns or name in TAIL else name
        columns[column], is_json = _column([r.get("metrics", {}).get(name) for r in rows])
        metric_columns[column] = (name, is_json)
    columns["wall_s"] = pa.array([r.get("wall_s") for r in rows], pa.float64())
    columns["peak_rss_bytes"] = pa.array([r.get("peak_rss_bytes") for r in rows], pa.int64())
    columns["attempts"] = pa.array([r.get("attempts", 1) for r in rows], pa.int64())
    columns["config_hash"] = pa.array([p.config_hash for p in points], pa.string())
    columns["config"] = pa.array([p.config or None for p in points], pa.string())
    if traces or any(r.get("trace") for r in rows):
        columns["trace"] = pa.array([r.get("trace") for r in rows], pa.string())
    meta = {
        "wafersim_version": __version__,
        "scenario": sweep.scen.name,
        "kind": sweep.scen.kind.name,
        "set": [[k, plain(v)] for k, v in sweep.fixed],
        "axes": [list(axis.keys) for axis in sweep.axes],
        "metrics": metric_columns,
    }
    return pa.table(columns).replace_schema_metadata({META_KEY: json.dumps(meta)})


def write_table(table: pa.Table, output: str) -> None:
    """Write atomically: a sweep killed while writing leaves the previous table (or none)."""
    folder = os.path.dirname(output)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with outputs.atomic(output, "the sweep table (-o)") as tmp:  # a full disk: a clear error
        pq.write_table(table, tmp)


def read_table(path: str) -> pa.Table:
    if not os.path.exists(path):
        raise WafersimError(f"sweep table '{path}' does not exist (write one with wafersim sweep)")
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise WafersimError(f"'{path}' is not a Parquet table: {exc}") from None


def trace_name(point: Point) -> str:
    """A point's trace file name: its axis values (readable) and config hash (unique)."""
    words = "_".join(f"{k}{_slug(v)}" for k, v in point.values.items())
    words = re.sub(r"[^A-Za-z0-9_.=+-]", "", words.replace(".", "-"))[:80]
    return f"{words}-{point.config_hash[:12]}.arrows" if words else f"{point.config_hash}.arrows"


def _slug(value: Any) -> str:
    return json.dumps(plain(value)).strip('"').replace(" ", "")


def summarise(statuses: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return {k: v for k, v in counts.items() if v}


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
        "--no-resume", action="store_true",
        help="run every point again, ignoring results already in OUT",
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
