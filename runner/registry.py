"""The registry of workload kinds and validation cases, filled family by family.

A *workload kind* (``link-chain``, ``wse-fmac``, ``summa``...) is the code that builds a system
for a scenario: its parameter dataclass, a ``build`` function that constructs and wires components
into a :class:`simcore.Simulation`, a ``metrics`` function that reads the results after the run,
and optionally an analytical ``model`` that predicts the same metrics *without* simulating. A
*scenario* is a TOML file naming a kind and setting its parameters.

A *validation case* runs the simulator and the model (and a published reference, where there is
one) over a sweep, and returns rows for ``wafersim validate``. It does not run simulations
itself: it is given a :class:`Runner` and hands it the sweep's points, so the same case runs
point after point today (``scenario.run_points``) and on a parallel engine later.

Kinds, cases and built-in scenarios come in *families*, one subpackage of ``workloads`` per kind
of hardware (:data:`FAMILIES`). :func:`load_all` imports each family package and calls its
``register()``, which registers that family's kinds and cases; importing a module registers
nothing. Names are global (a scenario names its kind, the CLI names a case), so a name defined
twice is an error naming both definitions, never a silent replacement.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from simcore.config import ScenarioParams
from simcore.errors import WafersimError
from simcore.sim import RunResult, Simulation

#: The hardware families, one subpackage of ``workloads`` each, registered in this order.
FAMILIES = ("kernel", "wafer", "cluster", "tpu", "pim")

Metrics = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What building a scenario will take, estimated from its parameters alone (before
    building): ``components`` the build registers (the build progress bar's total), ``bytes``
    of memory at the run's peak, and ``size_key``, the parameter that sets the size (named,
    with the largest value that fits, when the estimate exceeds the memory available)."""

    components: int
    bytes: int
    size_key: str


@dataclasses.dataclass(frozen=True)
class WorkloadKind:
    """How to build, measure and model one kind of scenario. ``origin`` is the module that
    defines it (``__name__``): a duplicate name's error names both origins. ``footprint``
    estimates a build's size and memory from the parameters (see :class:`Footprint`)."""

    name: str
    summary: str
    params: type[ScenarioParams]
    build: Callable[[Simulation, Any], Any]
    metrics: Callable[[Simulation, Any, Any, RunResult], Metrics]
    model: Callable[[Any], Metrics] | None = None
    origin: str = ""
    footprint: Callable[[Any], Footprint] | None = None


class Runner(Protocol):
    """Runs one workload kind at many parameter points: what a validation case is given.

    ``runner(kind, points)`` returns the metrics of each point, in the order of ``points``
    (``points`` are instances of the kind's parameter class). The points of one call are
    independent: a runner may run them in any order, all at once, or in other processes (a Dask
    engine), since the kind travels by name and points and metrics are plain picklable values
    (a worker process calls :func:`load_all` before looking the kind up). A case therefore
    hands over all the points it can in one call, and makes a second call only for points that
    depend on the first call's results.
    """

    def __call__(self, kind: str, points: Sequence[ScenarioParams]) -> list[Metrics]: ...


@dataclasses.dataclass(frozen=True)
class PointDone:
    """A point a runner finished: what its ``on_point`` callback is given.

    A runner may be made with ``on_point`` (``scenario.SequentialRunner(on_point=...)``); it then
    calls it in the calling process as each point of a call finishes, in the order they finish,
    so ``wafersim validate`` shows progress and results as they come whatever runs the points.
    ``index`` is the point's position in the call's ``points``, ``total`` their number, and
    ``wall_s`` the point's own run time."""

    kind: str
    index: int
    total: int
    params: ScenarioParams
    metrics: Metrics
    wall_s: float


@dataclasses.dataclass(frozen=True)
class ValidationRow:
    """One line of a validate table: ``simulated``, ``model`` and ``reference`` are in ``unit``
    (``cycles``, ``s``, ``bits/s``..., printed with the table). ``error_pct`` is
    (simulated - model) / model x 100."""

    case: str
    point: str
    simulated: float
    model: float
    reference: float | None = None
    unit: str = dataclasses.field(kw_only=True)

    def __post_init__(self) -> None:
        if not self.unit:
            raise ValueError(f"validation row '{self.case}: {self.point}' names no unit")

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.simulated - self.model) / self.model if self.model else 0.0


@dataclasses.dataclass(frozen=True)
class ValidationCase:
    """A sweep comparing simulation with a model. It passes when its criterion holds:

    - ``criterion="max_pct"``: every row's |error %| <= ``tolerance``;
    - ``criterion="mape"``: the mean of |error %| over the rows <= ``tolerance``;
    - ``criterion="max_abs"``: every row's |simulated - model| <= ``tolerance`` (model units).

    ``run(runner)`` computes the rows, running its simulations through ``runner``. ``origin`` is
    the module that defines it (``__name__``), named by a duplicate name's error.
    """

    name: str
    summary: str
    run: Callable[[Runner], list[ValidationRow]]
    tolerance: float
    criterion: str = "max_pct"
    origin: str = ""
    #: The published source of the case's reference figures and model constants (a citation),
    #: printed with the case's table; "" when the model is wafersim's own.
    source: str = ""

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


class RegistryError(WafersimError):
    """Two definitions of a kind, validation case or built-in scenario share a name, or a name
    asked for is not defined."""


KINDS: dict[str, WorkloadKind] = {}
CASES: dict[str, ValidationCase] = {}


def _origin(item: WorkloadKind | ValidationCase) -> str:
    return item.origin or "a definition without origin"


def register_kind(kind: WorkloadKind) -> WorkloadKind:
    """Add ``kind`` to :data:`KINDS`; a kind of the same name already there is an error."""
    if kind.name in KINDS:
        raise RegistryError(
            f"workload kind '{kind.name}' is defined twice: in {_origin(KINDS[kind.name])} and "
            f"in {_origin(kind)}; rename one of them (scenarios name kinds, so names are global)"
        )
    KINDS[kind.name] = kind
    return kind


def register_case(case: ValidationCase) -> ValidationCase:
    """Add ``case`` to :data:`CASES`; a case of the same name already there is an error."""
    if case.name in CASES:
        raise RegistryError(
            f"validation case '{case.name}' is defined twice: in {_origin(CASES[case.name])} "
            f"and in {_origin(case)}; rename one of them (`wafersim validate` takes case names)"
        )
    CASES[case.name] = case
    return case


def find_cases(names: Sequence[str]) -> list[ValidationCase]:
    """The registered cases called ``names`` (all of them, by name, when ``names`` is empty)."""
    load_all()
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise RegistryError(
            f"unknown validation case(s): {', '.join(unknown)}; "
            f"known cases: {', '.join(sorted(CASES))}"
        )
    return [CASES[n] for n in (names or sorted(CASES))]


_loaded = False


def load_all() -> None:
    """Register the kinds and cases of every family in :data:`FAMILIES`, once.

    Each family is the package ``workloads.<family>``; its ``register()`` registers what it
    defines. If a family fails (a duplicate name), the tables are left as they were before.
    """
    global _loaded
    if _loaded:
        return
    kinds, cases = dict(KINDS), dict(CASES)
    try:
        for family in FAMILIES:
            importlib.import_module(f"workloads.{family}").register()
    except BaseException:
        KINDS.clear()
        KINDS.update(kinds)
        CASES.clear()
        CASES.update(cases)
        raise
    _loaded = True
