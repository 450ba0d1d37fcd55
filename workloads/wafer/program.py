"""``wafer-program``: a user's wafer kernel, read from a Python file, run like a built-in kind.

``wafersim run wafer-program --set program=path/to/kernel.py [--set KEY=VALUE ...]`` loads the
file and runs the kernel it declares on the cycle-level wafer (:mod:`wafer.system`), with
everything a built-in kind has: traces, Perfetto, progress, the memory budget, sweeps and
``validate``. The file's interface is plain module-level names (docs/workloads-from-outside.md):

- ``PARAMS``: ``{name: Param(default, "description", min=, max=, choices=)}``, the kernel's own
  parameters, set with ``--set name=value`` and listed by ``wafersim params``;
- ``layout(p, data) -> Layout`` (required): the layout and the PE code, as in
  docs/wafer/programming.md; ``p`` holds the parameters (``p.n``), ``data`` the inputs;
- ``inputs(p, rng) -> dict`` : the input arrays, drawn from ``rng`` (seeded with ``seed``);
- ``output(p, wafer, data)``: the result read back from the PEs' SRAM after the run, and
  ``reference(p, data)``: the same computed by numpy; with both, ``correct`` and
  ``max_abs_error`` compare them (``TOLERANCE = {"rtol": ..., "atol": ...}``, default exact);
- ``model(p) -> cycles``: an analytical model, reported beside the run (``model_cycles``,
  ``model_time_s``, ``model_error_pct``); it never feeds the simulation;
- ``VALIDATION = [{...}, ...]`` and ``VALIDATION_MAX_ERROR_PCT``: points for
  ``wafersim validate wafer-program --set program=...`` (simulated cycles against the model).

The run's time is the SDK's measure, ``max(end) - min(start)`` over the PEs' ``t.mark("start")``
and ``t.mark("end")`` marks, or the whole run when the kernel marks neither.

A mistake in the file is the user's, not wafersim's: a syntax error, a missing function, a bad
declared parameter, or an exception raised by the file's code (at import, while building, or in
a task during the run) is a :class:`ProgramError` (exit status 2) naming the file and the line.

The kind's parameters depend on the file: :meth:`ProgramParams.for_data` (the hook
:func:`simcore.config.load` calls) makes a parameter class per file, whose fields are the
file's ``PARAMS`` after ``seed``, ``program`` and ``wafer``. Its instances pickle by the file's
path and their values, so sweeps and validation points travel to other processes.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from pe.program import Layout
from runner import registry
from simcore import config as cfg
from simcore.config import file_param, param, section
from simcore.errors import ConfigError, WafersimError
from wafer.system import Wafer, WaferConfig
from workloads.wafer.footprint import wafer as wafer_footprint

#: The kernel run when ``program`` is not set: a small one shipped with wafersim.
DEMO = Path(__file__).with_name("kernels") / "axpy.py"

#: Names the file may define (anything else it defines is its own business).
REQUIRED = ("layout",)
OPTIONAL = ("PARAMS", "inputs", "output", "reference", "model", "TOLERANCE", "VALIDATION",
            "VALIDATION_MAX_ERROR_PCT")  # fmt: skip
#: Parameter names the kind itself owns: a file may not declare them.
RESERVED = ("seed", "program", "wafer")


class ProgramError(WafersimError):
    """A mistake in a user's kernel file; the message names the file and the line."""


@dataclasses.dataclass(frozen=True)
class Param:
    """A kernel parameter: its default (its type is the parameter's: int, float, bool or str),
    a one-line description and an optional range (``min`` .. ``max``) or set of ``choices``."""

    default: Any
    doc: str
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] | None = None


def _where(path: Path, exc: BaseException) -> str:
    """``file:line`` of the deepest frame of ``exc``'s traceback in the user's file."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path:
            line = frame.lineno
    return f"{path}:{line}" if line is not None else str(path)


def _in_file(path: Path, exc: BaseException) -> bool:
    return any(Path(f.filename) == path for f in traceback.extract_tb(exc.__traceback__))


@contextmanager
def guard(path: Path, what: str) -> Iterator[None]:
    """Turn an exception raised by the user's file while doing ``what`` into a
    :class:`ProgramError` naming the file and the line (wafersim's own errors raised by a call
    the file made keep their message, with the file's line in front)."""
    try:
        yield
    except ProgramError:
        raise
    except WafersimError as exc:
        if not _in_file(path, exc):
            raise
        raise ProgramError(f"{_where(path, exc)}: {what}: {exc}") from None
    except Exception as exc:
        if not _in_file(path, exc):
            raise
        raise ProgramError(
            f"{_where(path, exc)}: {what} raised {type(exc).__name__}: {exc}; fix the kernel file"
        ) from None


@dataclasses.dataclass(frozen=True)
class Program:
    """A loaded kernel file: its path, module and parameter class."""

    path: Path
    module: ModuleType
    params: type[ProgramParams]

    def has(self, name: str) -> bool:
        return hasattr(self.module, name)

    def call(self, name: str, *args: Any) -> Any:
        """Call the file's function ``name``, its exceptions reported as the file's."""
        fn = getattr(self.module, name)
        with guard(self.path, f"{name}()"):
            return fn(*args)


def resolve(program: str) -> Path:
    """The kernel file ``program`` names ('' = :data:`DEMO`), absolute."""
    path = Path(program).expanduser() if program else DEMO
    path = path.resolve()
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise ConfigError(
            "program", program, f"the kernel file {what}",
            allowed="a path to a Python kernel file (docs/workloads-from-outside.md)",
            hint="e.g. --set program=examples/wafer/gemv.py",
        )  # fmt: skip
    return path


def load(program: str) -> Program:
    """Load the kernel file ``program`` names (cached by its path and modification time)."""
    path = resolve(program)
    stat = path.stat()
    return _load(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _load(path: Path, mtime_ns: int, size: int) -> Program:
    name = f"wafersim_kernel_{abs(hash((str(path), mtime_ns))):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProgramError(f"{path}: not a Python file wafersim can load (name it NAME.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ProgramError(
            f"{exc.filename or path}:{exc.lineno}: syntax error: {exc.msg}; fix the kernel file"
        ) from None
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ProgramError(
            f"{_where(path, exc)}: loading the kernel file raised {type(exc).__name__}: {exc}"
        ) from None
    missing = [n for n in REQUIRED if not callable(getattr(module, n, None))]
    if missing:
        raise ProgramError(
            f"{path}: defines no function {', '.join(missing)}(p, data); a kernel file defines "
            "layout(p, data) returning a pe.program.Layout (docs/workloads-from-outside.md)"
        )
    for fn in ("inputs", "output", "reference", "model"):
        if hasattr(module, fn) and not callable(getattr(module, fn)):
            raise ProgramError(f"{path}: {fn} must be a function, not {getattr(module, fn)!r}")
    return Program(path, module, _params_class(path, module))


def _params_class(path: Path, module: ModuleType) -> type[ProgramParams]:
    declared = getattr(module, "PARAMS", {})
    if not isinstance(declared, dict):
        raise ProgramError(f"{path}: PARAMS must be a dict of name -> Param(...), not {declared!r}")
    fields: list[tuple[str, type, Any]] = []
    for key, spec in declared.items():
        where = f"{path}: PARAMS['{key}']"
        if not isinstance(key, str) or not key.isidentifier():
            raise ProgramError(f"{path}: PARAMS key {key!r} is not a Python identifier")
        if key in RESERVED:
            raise ProgramError(f"{where}: '{key}' is the kind's own; name it otherwise")
        if not isinstance(spec, Param):
            raise ProgramError(f"{where} must be a Param(default, description, ...), not {spec!r}")
        tp = type(spec.default)
        if tp not in (int, float, bool, str):
            raise ProgramError(
                f"{where}: default {spec.default!r} must be an int, float, bool or str"
            )
        if not isinstance(spec.doc, str) or not spec.doc:
            raise ProgramError(f"{where}: give a one-line description (Param(default, 'what'))")
        low, high = spec.min, spec.max
        if (low is not None and spec.default < low) or (high is not None and spec.default > high):
            raise ProgramError(
                f"{where}: default {spec.default!r} is outside min..max ({low} .. {high})"
            )
        if spec.choices is not None and spec.default not in spec.choices:
            raise ProgramError(f"{where}: default {spec.default!r} is not one of its choices")
        choices = tuple(spec.choices) if spec.choices is not None else None
        field = param(spec.default, spec.doc, min=low, max=high, choices=choices)
        fields.append((key, tp, field))
    cls = dataclasses.make_dataclass(
        "KernelParams", fields, bases=(ProgramParams,), frozen=True, kw_only=True
    )
    cls.__module__ = __name__
    return cls


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProgramParams(registry.ScenarioParams):
    """The kind's own parameters; a kernel file's class adds its ``PARAMS`` after them."""

    program: str = file_param(
        "",
        "the kernel file, a Python file declaring its parameters, layout and PE code "
        "(docs/workloads-from-outside.md); '' = the bundled demo, workloads/wafer/kernels/axpy.py",
        names=("",),
        allowed="a path to a Python kernel file, or '' for the bundled demo",
    )
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    @classmethod
    def for_data(cls, data: dict[str, Any]) -> type:
        """The parameter class of the kernel file ``data['program']`` names."""
        program = data.get("program", "")
        if not isinstance(program, str):
            raise ConfigError("program", program, "expected a string", hint="--set program=PATH")
        if program and not os.path.isfile(program):
            return cls  # the config's file check names what is wrong with the path
        return load(program).params

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return (_rebuild, (values,))


def _rebuild(values: dict[str, Any]) -> ProgramParams:
    return load(values["program"]).params(**values)


# -- the kind --------------------------------------------------------------------------------
@dataclasses.dataclass
class ProgramRun:
    program: Program
    wafer: Wafer
    data: dict[str, Any]


def inputs(program: Program, p: ProgramParams) -> dict[str, Any]:
    if not program.has("inputs"):
        return {}
    data = program.call("inputs", p, np.random.default_rng([p.seed, 26]))
    if not isinstance(data, dict):
        raise ProgramError(
            f"{program.path}: inputs() must return a dict, not {type(data).__name__}"
        )
    return data


def make_layout(program: Program, p: ProgramParams, data: dict[str, Any]) -> Any:
    layout = program.call("layout", p, data)
    if not isinstance(layout, Layout):
        raise ProgramError(
            f"{program.path}: layout() must return a pe.program.Layout, not {type(layout).__name__}"
        )
    return layout


def _guarded_code(program: Program, code: Callable[[Any], None]) -> Callable[[Any], None]:
    """A tile's code run under :func:`guard`, binding tasks whose bodies run under it too."""

    def run(pe: Any) -> None:
        ce = pe.ce
        bind = ce.bind_task

        def bind_guarded(task: Any) -> None:
            fn = task.fn

            @functools.wraps(fn)
            def body(*args: Any) -> None:
                with guard(program.path, f"task '{task.name}' on PE ({pe.x},{pe.y})"):
                    fn(*args)

            bind(dataclasses.replace(task, fn=body))

        ce.bind_task = bind_guarded
        try:
            with guard(program.path, f"the PE code of PE ({pe.x},{pe.y})"):
                code(pe)
        finally:
            del ce.bind_task  # the engine's own method again

    return run


def build(sim: Any, p: ProgramParams) -> ProgramRun:
    program = load(p.program)
    data = inputs(program, p)
    layout = make_layout(program, p, data)
    for tile in layout.tiles.values():
        tile.code = _guarded_code(program, tile.code)
    with guard(program.path, "building the wafer"):
        wafer = Wafer(sim, p.wafer, layout)
    return ProgramRun(program, wafer, data)


def _cycles(run: ProgramRun, sim: Any) -> int:
    marks = [pe.ce.marks for pe in run.wafer.pes.values()]
    if any("start" in m for m in marks) and any("end" in m for m in marks):
        return run.wafer.span_cycles()
    return int(sim.cycles())


def _as_arrays(value: Any) -> dict[str, np.ndarray]:
    if isinstance(value, dict):
        return {str(k): np.asarray(v) for k, v in value.items()}
    return {"": np.asarray(value)}


def check(run: ProgramRun, p: ProgramParams) -> dict[str, Any]:
    """``correct`` and ``max_abs_error``: the result read back against numpy's."""
    program = run.program
    if not (program.has("output") and program.has("reference")):
        return {"correct": None}
    got = _as_arrays(program.call("output", p, run.wafer, run.data))
    want = _as_arrays(program.call("reference", p, run.data))
    tol = getattr(program.module, "TOLERANCE", {})
    rtol, atol = float(tol.get("rtol", 0.0)), float(tol.get("atol", 0.0))
    if got.keys() != want.keys():
        raise ProgramError(
            f"{program.path}: output() gives {sorted(got)} but reference() gives {sorted(want)}"
        )
    correct, err = True, 0.0
    for key, g in got.items():
        w = want[key]
        if g.shape != w.shape:
            raise ProgramError(
                f"{program.path}: output(){'[' + key + ']' if key else ''} has shape {g.shape} "
                f"but reference() has {w.shape}"
            )
        if g.size:
            diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
            err = max(err, float(np.max(diff)))
        correct &= bool(np.allclose(g, w, rtol=rtol, atol=atol))
    return {"correct": correct, "max_abs_error": err}


def metrics(sim: Any, p: ProgramParams, run: ProgramRun, result: Any) -> dict[str, Any]:
    cycles = _cycles(run, sim)
    out: dict[str, Any] = {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "pes": len(run.wafer.pes),
        **check(run, p),
    }
    if run.program.has("model"):
        m = model(p)
        out["model_time_s"] = m["time_s"]
        out["model_cycles"] = m["cycles"]
        out["model_error_pct"] = (
            100.0 * (cycles - m["cycles"]) / m["cycles"] if m["cycles"] else 0.0
        )
    return out


def model(p: ProgramParams) -> dict[str, Any]:
    """The kernel file's model, ``model(p)`` -> cycles (an empty dict when it has none)."""
    program = load(p.program)
    if not program.has("model"):
        return {}
    cycles = program.call("model", p)
    if isinstance(cycles, bool) or not isinstance(cycles, int | float | np.number):
        raise ProgramError(f"{program.path}: model() must return cycles (a number), not {cycles!r}")
    return {"time_s": float(cycles) / p.wafer.clock_hz, "cycles": float(cycles)}


def footprint(p: ProgramParams) -> registry.Footprint:
    """The layout's PEs, with the inputs spread over them (the host keeps them twice)."""
    program = load(p.program)
    data = inputs(program, p)
    layout = make_layout(program, p, data)
    pes = layout.width * layout.height
    data_bytes = sum(int(getattr(v, "nbytes", 0)) for v in data.values())
    return wafer_footprint(pes, data_bytes // pes, 2 * data_bytes, "")


# -- validation ------------------------------------------------------------------------------
def validation_case(overrides: dict[str, Any]) -> registry.ValidationCase:
    """The case a kernel file declares (``VALIDATION``): its points' simulated cycles against
    its ``model``; ``overrides`` (``program`` and any parameter) apply to every point."""
    program_name = overrides.get("program", "")
    program = load(program_name)
    points = getattr(program.module, "VALIDATION", None)
    if not points or not program.has("model"):
        raise ProgramError(
            f"{program.path}: declares no validation: define model(p) and VALIDATION = "
            "[{param: value, ...}, ...] (docs/workloads-from-outside.md)"
        )
    if not isinstance(points, list | tuple) or not all(isinstance(x, dict) for x in points):
        raise ProgramError(f"{program.path}: VALIDATION must be a list of dicts of parameters")
    tolerance = float(getattr(program.module, "VALIDATION_MAX_ERROR_PCT", 5.0))
    params = []
    for point in points:
        data = {**point, **overrides}
        try:
            params.append(cfg.load(program.params, data))
        except ConfigError as exc:
            raise ProgramError(f"{program.path}: VALIDATION point {point}: {exc}") from None

    def run(runner: registry.Runner) -> list[registry.ValidationRow]:
        results = runner("wafer-program", params)
        return [
            registry.ValidationRow(
                "wafer-program", ", ".join(f"{k}={v}" for k, v in point.items()),
                m["cycles"], m["model_cycles"], unit="cycles",
            )
            for point, m in zip(points, results, strict=True)
        ]  # fmt: skip

    return registry.ValidationCase(
        name="wafer-program",
        summary=f"{program.path.name}: simulated cycles vs the file's model(p)",
        run=run,
        tolerance=tolerance,
        origin=str(program.path),
    )


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="wafer-program",
            summary="a user's wafer kernel from a Python file (--set program=kernel.py)",
            params=ProgramParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
            validation=validation_case,
        )
    )
