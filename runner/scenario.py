"""Scenarios: finding, loading and running them.

A scenario is a TOML file: ``kind`` names the workload kind, ``description`` is its one-line
summary, every other key is a parameter of that kind (nested tables for hardware blocks). Built-in
scenarios live in their family's folder, ``workloads/<family>/scenarios/NAME.toml`` (a family may
have none yet); they are found by NAME alone, so a NAME in two folders is an error. A path to any
``.toml`` file also works.

:func:`run_scenario` is the whole life of a run: load and validate parameters, build, check, open
the trace (header = versions, scenario, seed, effective config, time base), run, write the final
``run/end`` event with the status, close the trace, and only then raise if the run stalled. A run
that fails or is interrupted therefore always leaves a readable trace of what happened so far.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import budget, outputs, registry
from simcore import config as cfg
from simcore.errors import MISSING, ConfigError, ScenarioError, SimulationStalled, WafersimError
from simcore.tracing import TraceLevel
from simcore.version import __version__

if TYPE_CHECKING:
    from simcore.sim import Progress, RunResult, Simulation
    from traces.writer import TraceWriter


@dataclasses.dataclass(frozen=True)
class ScenarioFile:
    """A scenario as its file says: what :func:`read` returns without loading its kind
    (``wafersim list``). ``data`` is every key but ``kind`` and ``description``."""

    name: str
    path: str
    kind: str
    description: str
    data: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    kind: registry.WorkloadKind
    description: str
    data: dict[str, Any]


def builtin_dirs() -> list[Path]:
    """The ``scenarios/`` folder of every family that has one, in ``registry.FAMILIES`` order."""
    root = registry.families_folder()
    folders = (root / family / "scenarios" for family in registry.FAMILIES)
    return [folder for folder in folders if folder.is_dir()]


def builtin_scenarios(folders: list[Path] | None = None) -> dict[str, Path]:
    """Built-in scenario name -> file, over ``folders`` (default: :func:`builtin_dirs`).

    A name found in two folders is an error naming both files: the CLI finds a built-in
    scenario by its name alone.
    """
    found: dict[str, Path] = {}
    for folder in builtin_dirs() if folders is None else folders:
        for path in sorted(folder.glob("*.toml")):
            if path.stem in found:
                raise registry.RegistryError(
                    f"built-in scenario '{path.stem}' is defined twice: {found[path.stem]} and "
                    f"{path}; rename one of the files (built-in scenarios are found by name)"
                )
            found[path.stem] = path
    return found


def builtin_names() -> list[str]:
    return sorted(builtin_scenarios())


def find(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a TOML file by path, with its workload kind (whose
    module is imported now, if it was not)."""
    sc = read(name_or_path)
    kind = registry.KINDS[sc.kind]
    # a relative path in the file (matrix = "m.mtx") names the file beside it
    data = cfg.resolve_files(kind.params, sc.data, os.path.dirname(sc.path))
    return Scenario(sc.name, sc.path, kind, sc.description, data)


def input_files(sc: Scenario, params: Any) -> dict[str, str]:
    """What a run of ``sc`` with ``params`` reads, named for an error message -> its path: the
    scenario file and every file-valued parameter's file (checked against the outputs by
    :func:`runner.outputs.check_paths`)."""
    found = {"the scenario file": sc.path if os.path.isfile(sc.path) else None}
    for key, path in cfg.input_files(params).items():
        found[f"the input of {key}"] = path
    return found


def read(name_or_path: str) -> ScenarioFile:
    """A built-in scenario by name, or a TOML file by path, as its file says; its kind must be
    a known one (declared: no family module is imported)."""
    registry.declare_all()
    if name_or_path.endswith(".toml") or os.sep in name_or_path or os.path.isdir(name_or_path):
        path = Path(name_or_path)
        if path.is_dir():
            raise ScenarioError(
                f"scenario '{name_or_path}' is a directory; give a scenario file (.toml) or a "
                "built-in scenario name (wafersim list)"
            )
        if not path.exists():
            raise ScenarioError(f"scenario file '{name_or_path}' does not exist")
    else:
        builtins = builtin_scenarios()
        if name_or_path not in builtins:
            names = sorted(builtins)
            close = difflib.get_close_matches(name_or_path, names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ScenarioError(
                f"unknown scenario '{name_or_path}'; {hint}"
                f"built-in scenarios: {', '.join(names)} (or give a path to a .toml file)"
            )
        path = builtins[name_or_path]
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"scenario file '{path}' is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
            f"offset {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file '{path}': {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"scenario file '{path}' is not valid TOML: {exc}") from None
    kind_name = data.pop("kind", None)
    description = data.pop("description", "")
    if not isinstance(description, str):
        raise ScenarioError(
            f"scenario '{path}': description = {description!r} must be a string (one line)"
        )
    if not isinstance(kind_name, str) or kind_name not in registry.KINDS:
        raise ScenarioError(
            f"scenario '{path}': kind = {kind_name!r} is not a known workload kind; "
            f"known kinds: {', '.join(sorted(registry.KINDS))}"
        )
    return ScenarioFile(path.stem, str(path), kind_name, description, data)


def resolve_params(scenario: Scenario, overrides: list[str]) -> Any:
    data = copy_tables(scenario.data)
    seen: dict[str, str] = {}
    for text in overrides:
        key = cfg.parse_override(text)[0]
        if key in seen:
            raise ConfigError(
                key, MISSING, f"set twice (--set {seen[key]} and --set {text.strip()})",
                hint="give each key once",
            )  # fmt: skip
        seen[key] = text.strip()
        cfg.apply_override(data, text)
    try:
        return cfg.load(scenario.kind.params, data)
    except ConfigError as err:
        if err.problem == cfg.EXPECTED_STRING and err.key not in seen:
            in_file = as_written(scenario, err)
            if in_file is not None:
                raise in_file from None
        raise


def as_written(
    scenario: Scenario, err: ConfigError, path: str | None = None, table: str = ""
) -> ConfigError | None:
    """``err`` (a string key given a number or a boolean by a file) quoting the value as the
    file writes it, with the file and line: TOML has read ``topology = 0x4`` as the integer 4,
    which the plain message would show as ``4``. The file is the scenario's, or ``path`` (a
    sweep file, whose ``[set]`` is ``table = "set."``). None if the file does not say it."""
    path = path or scenario.path
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = cfg.toml_literal(text, table + err.key)
    if found is None:
        return None
    line, literal = found
    value = err.value
    try:
        same = tomllib.loads(f"v = {literal}")["v"] == value and type(value) is not str
    except tomllib.TOMLDecodeError:
        same = False
    if not same:  # another line, or the value came from elsewhere (--set)
        return None
    what = {bool: "boolean", int: "integer", float: "number"}.get(type(value), "value")
    if isinstance(value, bool) or literal == str(value):
        read = f"TOML reads {literal} as a{'n' if what[0] in 'aeiou' else ''} {what}"
    else:
        read = f"TOML reads {literal} as the {what} {value}"
    example = _default_text(scenario.kind.params, err.key) or literal
    return ConfigError(
        err.key, literal, f"a string is expected ({read})", allowed=err.allowed,
        hint=f'quote it, e.g. {err.key.rsplit(".", 1)[-1]} = "{example}"',
        where=f"in {path} line {line}",
    )  # fmt: skip


def _default_text(cls: type, dotted: str) -> str | None:
    """The default of string key ``dotted`` of config class ``cls`` (an example to quote)."""
    for part in dotted.split("."):
        fields = {f.name: (f, tp) for f, tp in cfg.config_fields(cls)}
        if part not in fields:
            return None
        f, cls = fields[part]
    default = f.default
    return default if isinstance(default, str) and default else None


def copy_tables(d: dict[str, Any]) -> dict[str, Any]:
    """A copy of a scenario's nested tables (the dicts copied, the values shared), for
    overrides that must leave the scenario as it was."""
    return {k: copy_tables(v) if isinstance(v, dict) else v for k, v in d.items()}


@dataclasses.dataclass
class RunOutput:
    scenario: Scenario
    params: Any
    result: RunResult
    metrics: dict[str, Any]
    trace_path: str | None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scenario": self.scenario.name,
            "kind": self.scenario.kind.name,
            "status": self.result.status,
            "seed": self.params.seed,
        }
        out.update(self.metrics)
        out["wall_s"] = round(self.result.wall_s, 6)
        out["kernel_events"] = self.result.events
        out["trace"] = self.trace_path
        out["config"] = cfg.to_dict(self.params)  # every effective parameter, nested
        return out


def run_kind(kind: str, params: Any) -> dict[str, Any]:
    """Run workload kind ``kind`` with ``params`` (no trace) and return its metrics: what
    validation sweeps and tests need, without a scenario file."""
    registry.declare_all()
    scen = Scenario(kind, "<validate>", registry.KINDS[kind], "", {})
    return run_scenario(scen, params).metrics


class SequentialRunner:
    """A :class:`registry.Runner` running each point in turn, in this process; ``on_point``
    (optional) is called with a :class:`registry.PointDone` as each point finishes."""

    def __init__(self, on_point: Callable[[registry.PointDone], None] | None = None) -> None:
        self.on_point = on_point

    def __call__(
        self, kind: str, points: Sequence[registry.ScenarioParams]
    ) -> list[dict[str, Any]]:
        out = []
        for i, params in enumerate(points):
            t0 = time.perf_counter()
            metrics = run_kind(kind, params)
            out.append(metrics)
            if self.on_point is not None:
                wall = time.perf_counter() - t0
                self.on_point(registry.PointDone(kind, i, len(points), params, metrics, wall))
        return out


def run_points(kind: str, points: Sequence[registry.ScenarioParams]) -> list[dict[str, Any]]:
    """The sequential :class:`registry.Runner`: each point in turn, in this process."""
    return SequentialRunner()(kind, points)


def _header(scenario: Scenario, params: Any, sim: Simulation) -> dict[str, Any]:
    return {
        "wafersim_version": __version__,
        "scenario": scenario.name,
        "kind": scenario.kind.name,
        "seed": params.seed,
        "config": cfg.to_dict(params),
        "tick_hz": sim.timebase.tick_hz,
        "domains": sim.timebase.describe(),
        # (only when set: a trace of the whole array keeps the header it always had)
        **({"trace_region": list(sim.trace_region)} if sim.trace_region is not None else {}),
    }


def run_scenario(
    scenario: Scenario,
    params: Any,
    *,
    trace_path: str | None = None,
    trace_level: TraceLevel = TraceLevel.OPS,
    progress: Progress | None = None,
    livelock_cycles: int = 1_000_000,
    trace_region: tuple[int, int, int, int] | None = None,
) -> RunOutput:
    """Build, check, trace and run one scenario. See the module docstring. ``trace_region``
    limits detail-level events to a block of the PE array (:attr:`Simulation.trace_region`)."""
    # Imported here: they load SimPy and numpy, which finding and describing scenarios
    # (``wafersim list``, ``params``) do without (docs/cli.md, "Start time").
    from runner.progress import RunHooks
    from runner.subrun import RunnerSubRuns
    from simcore.sim import Simulation

    sim = Simulation(seed=params.seed, progress=progress, livelock_cycles=livelock_cycles)
    sim.trace_region = trace_region
    sim.sub_runs = RunnerSubRuns(sim, progress)
    writer: TraceWriter | None = None
    tmp_trace = ""
    status, message = "failed", ""
    result: RunResult | None = None
    try:
        budget.check_fits(scenario.kind, params)  # before building: refuse what cannot fit
        if isinstance(progress, RunHooks):
            progress.start_build(sim, scenario.kind, params)
        handle = scenario.kind.build(sim, params)
        sim.check()
        if isinstance(progress, RunHooks):
            progress.end_build(sim)
        if trace_path and trace_level > TraceLevel.OFF:
            from traces.writer import TraceWriter  # pyarrow: only a traced run writes Arrow

            # Written under a temporary name and renamed into place once closed (outputs.py).
            tmp_trace = outputs.temp_for(trace_path)
            writer = TraceWriter(
                tmp_trace, level=trace_level, header=_header(scenario, params, sim),
                name=trace_path,
            )  # fmt: skip
            sim.tracer = writer
            sim.trace_level = writer.level
        result = sim.run()
        status = result.status
        if isinstance(progress, RunHooks):
            progress.end_run(sim, result)
        message = "; ".join(result.report)
        if status == "interrupted":
            raise KeyboardInterrupt
        if status == "stalled":
            raise SimulationStalled(
                f"scenario '{scenario.name}' stalled at cycle {sim.cycles():,}: nothing can "
                "happen but work is pending:\n  " + "\n  ".join(result.report),
                result.report,
            )
        if status == "livelock":
            raise SimulationStalled(
                f"scenario '{scenario.name}' livelocked at cycle {sim.cycles():,}:\n  "
                + "\n  ".join(result.report)
                + "\n(raise --livelock-cycles if the program really works that long without "
                "computing or moving data)",
                result.report,
            )
        metrics = scenario.kind.metrics(sim, params, handle, result)
        return RunOutput(scenario, params, result, metrics, trace_path if writer else None)
    except WafersimError as exc:
        if status not in ("stalled", "livelock"):
            status = "failed"
        message = message or str(exc)
        raise
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except Exception as exc:
        status = "failed"
        message = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if isinstance(progress, RunHooks):
            progress.close()
        if writer is not None:
            _close_trace(writer, sim, status, message, tmp_trace, trace_path or "")


def _close_trace(
    writer: TraceWriter, sim: Simulation, status: str, message: str, tmp: str, path: str
) -> None:
    """End the trace with the ``run/end`` event and rename it into place; a trace that could not
    be written whole (a full disk) is removed and its error raised instead of the run's."""
    try:
        if writer.failed is None:
            now = sim.env.now
            p = sim.main_domain.period_ticks
            writer.emit(
                now, 0, now // p, 0, sim.main_domain.name, "run", "run", "end", "instant",
                args={"status": status, "message": message[:2000]},
            )  # fmt: skip
        writer.close()
    except OSError:
        pass
    if writer.failed is not None:
        outputs.discard(tmp, path)
        raise outputs.write_error("trace", path, writer.failed) from None
    outputs.commit(tmp, path, "trace")
