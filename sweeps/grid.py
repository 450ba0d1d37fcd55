"""Sweeps: a scenario run at many parameter points, and the table of their results.

A *sweep* is a scenario, fixed overrides applied to every point (``--set``), and *axes*. An axis
is either one key with a list of values (``--grid p=4,8,16``) or several keys whose lists move
together (``--zip``, or a ``[[zip]]`` table of a sweep file); the points are the cross product of
the axes, the last axis varying fastest. Every point is an independent simulation, so the engine
(:mod:`sweeps.engine`, on Dask) may run them in any order and on any number of workers.

This module reads a sweep (command line or TOML file) and resolves each point to its parameters
and a hash of its full configuration; :mod:`sweeps.journal` keeps results as they arrive, so a
sweep is resumable, and :mod:`sweeps.tables` makes the result table. The table is a pure
function of the sweep and of the results keyed by hash, whatever ran them and in which order: a
row per point in sweep order; that is what makes it the same with one worker or ten, and the
same after a resume.

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

import dataclasses
import hashlib
import itertools
import json
import os
import re
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from runner import scenario
from simcore import config as cfg
from simcore.errors import MISSING, ConfigError, ScenarioError
from simcore.version import __version__

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
    if '"' not in raw and "'" not in raw and re.search(r"^\s*,|,\s*,|,\s*$", raw):
        raise ConfigError(
            key, raw, "an empty value in the list (two commas in a row, or one at an end)",
            hint=f"e.g. --grid {key}=4,8,16",
        )  # fmt: skip
    words = raw.split(",")
    try:
        if any(cfg.RADIX_INT.fullmatch(w.strip()) for w in words):
            raise tomllib.TOMLDecodeError("kept as typed")  # as --set does: see cfg.RADIX_INT
        values = tomllib.loads(f"v = [{raw}]")["v"]
    except tomllib.TOMLDecodeError:
        values = [cfg.parse_override(f"v={word}")[1] for word in words]
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
    file: str | None = None  # the sweep file, if the sweep came from one
    set_keys: tuple[str, ...] = ()  # the keys --set fixes (over the files' values)

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
        base = scenario.copy_tables(self.scen.data)
        for key, value in self.fixed:
            cfg.set_key(base, key, value)
        return [self._point(i, values, base) for i, values in enumerate(self.combinations())]

    def _point(self, index: int, values: dict[str, Any], base: dict[str, Any]) -> Point:
        data = scenario.copy_tables(base)
        for key, value in values.items():
            cfg.set_key(data, key, value)
        try:
            params = cfg.load(self.scen.kind.params, data)
        except ConfigError as err:
            if err.problem in _STRUCTURAL:
                raise
            if err.problem == cfg.EXPECTED_STRING and err.key not in (*values, *self.set_keys):
                # as the sweep file's [set] or the scenario file writes it
                err = (
                    (self.file and scenario.as_written(self.scen, err, self.file, "set."))
                    or scenario.as_written(self.scen, err)
                    or err
                )
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
    sweep_file = None
    if is_sweep_file(name):
        sweep_file = name
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
    for text in overrides:
        key, value = cfg.parse_override(text)
        if key in keys:
            raise ScenarioError(
                f"--set {text.strip()}: key '{key}' is also swept (an axis of the sweep); keep "
                "one: the axis sets it at every point"
            )
        fixed.append((key, value))
    set_keys = tuple(cfg.parse_override(t)[0] for t in overrides)
    return Sweep(scen, tuple(fixed), tuple(axes), livelock_cycles, output, sweep_file, set_keys)


def trace_name(point: Point) -> str:
    """A point's trace file name: its axis values (readable) and config hash (unique)."""
    words = "_".join(f"{k}{_slug(v)}" for k, v in point.values.items())
    words = re.sub(r"[^A-Za-z0-9_.=+-]", "", words.replace(".", "-"))[:80]
    return f"{words}-{point.config_hash[:12]}.arrows" if words else f"{point.config_hash}.arrows"


def _slug(value: Any) -> str:
    return json.dumps(plain(value)).strip('"').replace(" ", "")


def plain(value: Any) -> Any:
    """A metric as JSON-able Python (numpy scalars and arrays, tuples -> lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value
