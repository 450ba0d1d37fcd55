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
    """A sweep comparing simulation with a model. It passes when its criterion holds:

    - ``criterion="max_pct"``: every row's |error %| <= ``tolerance``;
    - ``criterion="mape"``: the mean of |error %| over the rows <= ``tolerance``;
    - ``criterion="max_abs"``: every row's |simulated - model| <= ``tolerance`` (model units).
    """

    name: str
    summary: str
    run: Callable[[], list[ValidationRow]]
    tolerance: float
    criterion: str = "max_pct"

    def judge(self, rows: list[ValidationRow]) -> tuple[float, float, float, bool]:
        """(MAPE %, max |error %|, max |error| absolute, passed)."""
        mape = sum(abs(r.error_pct) for r in rows) / len(rows)
        worst_pct = max(abs(r.error_pct) for r in rows)
        worst_abs = max(abs(r.simulated - r.model) for r in rows)
        value = {"mape": mape, "max_pct": worst_pct, "max_abs": worst_abs}[self.criterion]
        return mape, worst_pct, worst_abs, value <= self.tolerance

    def describe_tolerance(self) -> str:
        return {
            "mape": f"MAPE <= {self.tolerance:g} %",
            "max_pct": f"every |error| <= {self.tolerance:g} %",
            "max_abs": f"every |error| <= {self.tolerance:g}",
        }[self.criterion]


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
    from workloads import linkchain, summa, wse, wsmatmul

    linkchain.register()
    wse.register()
    summa.register()
    wsmatmul.register()
