"""The registry of workload kinds and validation cases.

A *workload kind* (``link-chain``, later ``wse-fmac``, ``summa``...) is the code that builds a
system for a scenario: its parameter dataclass, a ``build`` function that constructs and wires
components into a :class:`simcore.Simulation`, a ``metrics`` function that reads the results after
the run, and optionally an analytical ``model`` that predicts the same metrics *without*
simulating. A *scenario* is a TOML file naming a kind and setting its parameters.

A *validation case* runs the simulator and the model (and a published reference, where there is
one) over a sweep, and returns rows for ``wafersim validate``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from simcore.config import param
from simcore.sim import RunResult, Simulation

Metrics = dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScenarioParams:
    """Fields every scenario has."""

    seed: int = param(0, "seed of all random streams (inputs, arbitration)", min=0, max=2**63 - 1)


@dataclasses.dataclass(frozen=True)
class WorkloadKind:
    """How to build, measure and model one kind of scenario."""

    name: str
    summary: str
    params: type[ScenarioParams]
    build: Callable[[Simulation, Any], Any]
    metrics: Callable[[Simulation, Any, Any, RunResult], Metrics]
    model: Callable[[Any], Metrics] | None = None


@dataclasses.dataclass(frozen=True)
class ValidationRow:
    """One line of a validate table. ``error_pct`` is (simulated - model) / model x 100."""

    case: str
    point: str
    simulated: float
    model: float
    reference: float | None = None

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.simulated - self.model) / self.model if self.model else 0.0


@dataclasses.dataclass(frozen=True)
class ValidationCase:
    name: str
    summary: str
    run: Callable[[], list[ValidationRow]]
    tolerance_pct: float


KINDS: dict[str, WorkloadKind] = {}
CASES: dict[str, ValidationCase] = {}


def register_kind(kind: WorkloadKind) -> WorkloadKind:
    KINDS[kind.name] = kind
    return kind


def register_case(case: ValidationCase) -> ValidationCase:
    CASES[case.name] = case
    return case


_loaded = False


def load_all() -> None:
    """Import every module that registers kinds and cases (explicit, no import-time magic)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from workloads import linkchain

    linkchain.register()
