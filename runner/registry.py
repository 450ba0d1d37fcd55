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
of hardware (:data:`FAMILIES`). A family package's ``register()`` *declares* its modules and the
kinds each defines (:func:`declare`), without importing them; a module's own ``register()``
registers its kinds and cases (:func:`register_kind`, :func:`register_case`) when the registry
imports the module (:func:`load_module`): the first time one of its kinds is looked up in
:data:`KINDS`, or when everything is needed (:func:`load_all`). So ``wafersim list`` knows every
kind's name without importing any, and ``wafersim params summa`` imports the summa module and
nothing else of the families (docs/cli.md, "Start time"). Importing a module registers nothing.

:func:`declare_all` declares every family; :func:`load_all` also imports every declared module,
registering every kind and case. Names are global (a scenario names its kind, the CLI names a
case), so a name defined twice, declared or registered, is an error naming both definitions,
never a silent replacement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from simcore.config import ScenarioParams
from simcore.errors import WafersimError

if TYPE_CHECKING:
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
    #: The validation case of a kind whose inputs come from a file (``wafer-program``): given
    #: the ``--set`` values of ``wafersim validate KIND --set program=FILE``, the case the file
    #: declares.
    validation: Callable[[dict[str, Any]], ValidationCase] | None = None


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


class KindTable(MutableMapping[str, WorkloadKind]):
    """The workload kinds by name, each either *declared* (the module that defines it is known
    and not imported yet) or *defined* (its :class:`WorkloadKind`).

    Membership, iteration and length see declared kinds as well, without importing anything;
    ``table[name]`` imports a declared kind's module first (calling its ``register()``, which
    defines the kind), so a kind is loaded only when it is used. ``values()`` and ``items()``
    therefore import every declared module.
    """

    def __init__(self) -> None:
        #: name -> its definition, or the name of the module that defines it (declared).
        self._entries: dict[str, WorkloadKind | str] = {}
        #: declared module -> the kinds it defines (modules that define none included).
        self.modules: dict[str, tuple[str, ...]] = {}
        #: declared modules imported and registered so far.
        self.imported: set[str] = set()

    def __getitem__(self, name: str) -> WorkloadKind:
        entry = self._entries[name]
        if isinstance(entry, str):
            load_module(entry)
            entry = self._entries[name]
        if isinstance(entry, str):  # the table is not the registry's (a test's own)
            raise RegistryError(f"workload kind '{name}' of {entry} is not defined")
        return entry

    def __setitem__(self, name: str, kind: WorkloadKind) -> None:
        self._entries[name] = kind

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def origin(self, name: str) -> str:
        """Where kind ``name`` is defined (its module), without importing it."""
        entry = self._entries[name]
        return entry if isinstance(entry, str) else _origin(entry)

    def is_declared(self, name: str) -> bool:
        """True while ``name`` is declared and its module not imported yet."""
        return isinstance(self._entries.get(name), str)

    def declare(self, name: str, module: str) -> None:
        self._entries[name] = module

    def copy(self) -> KindTable:
        """A copy of the table as it is (declared kinds stay declared)."""
        other = KindTable()
        other.restore(self)
        return other

    def restore(self, other: KindTable) -> None:
        """Make this table what ``other`` is."""
        self._entries, self.modules = dict(other._entries), dict(other.modules)
        self.imported = set(other.imported)


KINDS = KindTable()
CASES: dict[str, ValidationCase] = {}


def _origin(item: WorkloadKind | ValidationCase) -> str:
    return item.origin or "a definition without origin"


def _defined_twice(name: str, first: str, second: str) -> RegistryError:
    return RegistryError(
        f"workload kind '{name}' is defined twice: in {first} and in {second}; rename one of "
        "them (scenarios name kinds, so names are global)"
    )


def declare(module: str, *kinds: str) -> None:
    """Declare that ``module`` (``workloads.<family>.<name>``) defines ``kinds``: its
    ``register()`` registers them, and any validation cases, when the module is imported.

    What a family package's ``register()`` calls, once per module that registers anything (a
    module of cases only declares no kinds). Nothing is imported here: the kinds' names are
    known at once (``wafersim list`` checks scenarios' kinds against them) and the module is
    imported when one of them is first looked up in :data:`KINDS`, or by :func:`load_all`.
    A name declared or defined already is an error naming both modules.
    """
    if module in KINDS.modules:
        raise RegistryError(f"module {module} is declared twice; declare each module once")
    for name in kinds:
        if name in KINDS:
            raise _defined_twice(name, KINDS.origin(name), module)
    KINDS.modules[module] = kinds
    for name in kinds:
        KINDS.declare(name, module)


def load_module(module: str) -> None:
    """Import the declared ``module`` and call its ``register()``, once; every kind it was
    declared to define must then be defined (and it may define no other). If it fails (a
    duplicate name), the tables are left as they were."""
    if module in KINDS.imported:
        return
    if module not in KINDS.modules:
        raise RegistryError(f"module {module} is not declared (registry.declare)")
    with _all_or_nothing():
        KINDS.imported.add(module)
        importlib.import_module(module).register()
        missing = [name for name in KINDS.modules[module] if KINDS.is_declared(name)]
        if missing:
            raise RegistryError(
                f"{module} is declared to define workload kind(s) {', '.join(missing)}, but its "
                "register() does not register them; register them there, or declare only the "
                "kinds it defines"
            )


def register_kind(kind: WorkloadKind) -> WorkloadKind:
    """Add ``kind`` to :data:`KINDS`. A kind of the same name already defined is an error, as
    is one declared by another module; a declared module may define only the kinds it was
    declared with."""
    if kind.name in KINDS:
        declared = KINDS.is_declared(kind.name) and KINDS.origin(kind.name) == kind.origin
        if not declared:
            raise _defined_twice(kind.name, KINDS.origin(kind.name), _origin(kind))
    elif kind.origin in KINDS.modules:
        raise RegistryError(
            f"workload kind '{kind.name}' of {kind.origin} is not declared: add it to the "
            f"family's registry.declare('{kind.origin}', ...) so that its name is known "
            "before the module is imported"
        )
    KINDS[kind.name] = kind
    if kind.origin in KINDS.modules:
        KINDS.imported.add(kind.origin)  # registered by hand: not to be registered again
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


def families_folder() -> Path:
    """The folder of the ``workloads`` package, which holds a folder per family (found, not
    imported)."""
    spec = importlib.util.find_spec("workloads")
    assert spec is not None and spec.submodule_search_locations, "wafersim is installed"
    return Path(spec.submodule_search_locations[0])


_declared = False
_loaded = False


def declare_all() -> None:
    """Declare the kinds of every family in :data:`FAMILIES`, once, importing no kind.

    Each family is the package ``workloads.<family>``; its ``register()`` declares its modules
    (:func:`declare`). If a family fails (a duplicate name), the tables are left as they were.
    """
    global _declared
    if _declared:
        return
    with _all_or_nothing():
        for family in FAMILIES:
            importlib.import_module(f"workloads.{family}").register()
        _declared = True


def load_all() -> None:
    """Register the kinds and cases of every family in :data:`FAMILIES`, once: declare them
    (:func:`declare_all`) and import every declared module. If a family fails (a duplicate
    name), the tables are left as they were before."""
    global _loaded
    if _loaded:
        return
    with _all_or_nothing():
        declare_all()
        for module in list(KINDS.modules):
            load_module(module)
        _loaded = True


@contextlib.contextmanager
def _all_or_nothing() -> Iterator[None]:
    """Restore :data:`KINDS`, :data:`CASES` and the flags if the block fails."""
    global _declared, _loaded
    kinds, cases, flags = KINDS.copy(), dict(CASES), (_declared, _loaded)
    try:
        yield
    except BaseException:
        KINDS.restore(kinds)
        CASES.clear()
        CASES.update(cases)
        _declared, _loaded = flags
        raise
