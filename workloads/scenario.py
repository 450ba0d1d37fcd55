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
import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from simcore import config as cfg
from simcore.errors import ScenarioError, SimulationStalled, WafersimError
from simcore.sim import Progress, RunResult, Simulation
from simcore.tracing import TraceLevel
from traces.writer import TraceWriter
from workloads import __version__, registry


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    kind: registry.WorkloadKind
    description: str
    data: dict[str, Any]


def builtin_dirs() -> list[Path]:
    """The ``scenarios/`` folder of every family that has one, in ``registry.FAMILIES`` order."""
    root = resources.files("workloads")
    folders = (Path(str(root / family / "scenarios")) for family in registry.FAMILIES)
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
    """A built-in scenario by name, or a TOML file by path."""
    registry.load_all()
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        path = Path(name_or_path)
        if not path.is_file():
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
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"scenario file '{path}' is not valid TOML: {exc}") from None
    kind_name = data.pop("kind", None)
    description = data.pop("description", "")
    if kind_name not in registry.KINDS:
        raise ScenarioError(
            f"scenario '{path}': kind = {kind_name!r} is not a known workload kind; "
            f"known kinds: {', '.join(sorted(registry.KINDS))}"
        )
    return Scenario(path.stem, str(path), registry.KINDS[kind_name], description, data)


def resolve_params(scenario: Scenario, overrides: list[str]) -> Any:
    data = _deepcopy(scenario.data)
    for text in overrides:
        cfg.apply_override(data, text)
    return cfg.load(scenario.kind.params, data)


def _deepcopy(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _deepcopy(v) if isinstance(v, dict) else v for k, v in d.items()}


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
        out["events"] = self.result.events
        out["trace"] = self.trace_path
        return out


def run_kind(kind: str, params: Any) -> dict[str, Any]:
    """Run workload kind ``kind`` with ``params`` (no trace) and return its metrics: what
    validation sweeps and tests need, without a scenario file."""
    registry.load_all()
    scen = Scenario(kind, "<validate>", registry.KINDS[kind], "", {})
    return run_scenario(scen, params).metrics


def run_points(kind: str, points: Sequence[registry.ScenarioParams]) -> list[dict[str, Any]]:
    """The sequential :class:`registry.Runner`: each point in turn, in this process."""
    return [run_kind(kind, params) for params in points]


def _header(scenario: Scenario, params: Any, sim: Simulation) -> dict[str, Any]:
    return {
        "wafersim_version": __version__,
        "scenario": scenario.name,
        "kind": scenario.kind.name,
        "seed": params.seed,
        "config": cfg.to_dict(params),
        "tick_hz": sim.timebase.tick_hz,
        "domains": sim.timebase.describe(),
    }


def run_scenario(
    scenario: Scenario,
    params: Any,
    *,
    trace_path: str | None = None,
    trace_level: TraceLevel = TraceLevel.OPS,
    progress: Progress | None = None,
    livelock_cycles: int = 1_000_000,
) -> RunOutput:
    """Build, check, trace and run one scenario. See the module docstring."""
    sim = Simulation(seed=params.seed, progress=progress, livelock_cycles=livelock_cycles)
    writer: TraceWriter | None = None
    status, message = "failed", ""
    result: RunResult | None = None
    try:
        handle = scenario.kind.build(sim, params)
        sim.check()
        if trace_path and trace_level > TraceLevel.OFF:
            writer = TraceWriter(
                trace_path, level=trace_level, header=_header(scenario, params, sim)
            )
            sim.tracer = writer
            sim.trace_level = writer.level
        result = sim.run()
        status = result.status
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
        if writer is not None:
            now = sim.env.now
            p = sim.main_domain.period_ticks
            writer.emit(
                now, 0, now // p, 0, sim.main_domain.name, "run", "run", "end", "instant",
                args={"status": status, "message": message[:2000]},
            )  # fmt: skip
            writer.close()
