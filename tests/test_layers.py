"""Layering: packages import only downwards (the kernel, then the trace format and the wafer's
fabric, then the hardware models, then the workloads and the command line); no modules import
each other in a circle, lazy imports inside functions included (they are how a cycle hides);
a function imports only what a start should not load (a named list of heavy packages, and the
modules that load them), and modules are imported by name only through the registry. Checked
on the source, so a new module is covered the day it is added. ``python tests/import_graph.py``
prints the graph (docs/design.md, "Layers")."""

from __future__ import annotations

import ast

from import_graph import (
    PACKAGES,
    RANK,
    ROOT,
    cycles,
    loads,
    module_graph,
    modules,
    package_graph,
    split_imports,
)


def test_every_package_has_a_rank():
    assert sorted(RANK) == sorted(PACKAGES)


def test_packages_import_only_lower_ranks():
    upward = [
        f"{pkg} (rank {RANK[pkg]}) imports {dep} (rank {RANK[dep]})"
        for pkg, deps in package_graph().items()
        for dep in sorted(deps)
        if RANK[dep] >= RANK[pkg]
    ]
    assert upward == []


def test_no_import_cycles_between_modules():
    graph = module_graph()
    assert "wafer.programs.wsgrad" in graph["workloads.wafer.wsmatmul"]  # edges are resolved
    assert "pe.task" in graph["pe.ce"]
    assert cycles(graph) == []


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: Third-party packages that may be imported late (inside the function that needs them), and
#: why: each is a noticeable part of a start, and most commands never need it. A start is what
#: `wafersim --version`, `list` and `params` cost (docs/cli.md, "Start time";
#: tests/test_start.py checks which of these each loads).
HEAVY = {
    "numpy": "about 0.1 s; the kinds and hardware need it, `--version` and `list` do not",
    "simpy": "the kernel's engine (with importlib.metadata); only a kind's module needs it",
    "networkx": "graphs of routes, TPU slices, SwarmX trees: building needs them, `params` not",
    "scipy": "0.3 to 0.6 s: spmv's matrices, the side-work fit",
    "pyarrow": "0.2 s: writing and reading traces and sweep tables only",
    "perfetto": "the Perfetto export's protobuf classes: exports only",
    "matplotlib": "about a second: `plot` only",
    "distributed": "half a second: the Dask engine, for `sweep` and `validate --workers` only",
    "dask": "with distributed",
    "tqdm": "progress bars, drawn on a terminal only",
    "jax": "an optional extra, not installed by default: workloads/tpu/jaxhlo.py's helper only",
}

#: wafersim's own modules that may be imported late, each because importing it loads one of
#: the :data:`HEAVY` packages (checked below), so a command that does not use it starts without.
LATE = {
    "simcore.sim": "simpy, numpy: running a scenario, not finding or describing one",
    "runner.progress": "simcore.sim (a run's progress hooks)",
    "runner.subrun": "simcore.sim (a run's sub-runs)",
    "app.progress": "simcore.sim and tqdm: `run` and `validate` draw progress",
    "traces.writer": "pyarrow: only a traced run writes a trace",
    "traces.summary": "pyarrow, numpy: `trace summary`",
    "traces.export": "pyarrow, perfetto: `trace export`",
    "traces.perfetto": "perfetto, pyarrow: `run --perfetto`, `trace export --to perfetto`",
    "traces.chrome_json": "pyarrow: `trace export --to json`",
    "traces.plots": "matplotlib: `plot`",
    "traces.heatmap": "matplotlib (through traces.plots): `plot heatmap`",
    "app.plots": "matplotlib: `plot`",
    "sweeps.engine": "distributed: `sweep` and `validate --workers`",
}

#: Where a module may be imported by name at run time (``importlib.import_module``): the
#: registry imports a family's package and a kind's module when they are needed, and simcore
#: its own modules when a name of its API is first used.
DYNAMIC = {"runner/registry.py", "simcore/__init__.py"}

#: Packages whose ``if TYPE_CHECKING`` imports are checked too (the lower ones use them for
#: annotations that would otherwise import in a circle).
UPPER = ("runner", "workloads", "sweeps", "app")


def _checked(late: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``late`` without the lower packages' ``TYPE_CHECKING`` imports."""
    return [
        (module, where, name)
        for module, where, name in late
        if where != "TYPE_CHECKING" or module.split(".")[0] in UPPER
    ]


def unjustified(late: list[tuple[str, str, str]]) -> list[str]:
    """The imports of ``late`` (module, where, imported) that the policy does not allow: a
    third-party package not in :data:`HEAVY`, one of wafersim's modules not in :data:`LATE`,
    and, in the upper packages, a ``TYPE_CHECKING`` import of either."""
    out = []
    for module, where, name in _checked(late):
        top = name.split(".")[0]
        ok = name in LATE if top in PACKAGES else top in HEAVY
        if not ok:
            out.append(f"{module}:{where} imports {name}")
    return out


def _split() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    mods = modules()
    eager: dict[str, set[str]] = {}
    late: list[tuple[str, str, str]] = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        eager[name], found = split_imports(tree, name, set(mods))
        late += [(name, where, imported) for where, imported in found]
    return eager, late


def test_late_imports_are_of_heavy_modules_only():
    """A function may import what a start should not load (:data:`HEAVY`, :data:`LATE`);
    anything else is imported at the top of its module, where the import graph sees it."""
    eager, late = _split()
    assert unjustified(late) == []
    assert {name for _, _, name in _checked(late) if name.split(".")[0] in PACKAGES} == set(LATE)
    for module in LATE:  # each is late for a reason: it loads a heavy package
        assert {m.split(".")[0] for m in loads(module, eager)} & set(HEAVY), module


def test_the_late_import_check_refuses_what_is_not_heavy():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    from runner.outputs import OutputError\n"
        "    from simcore.sim import Simulation\n"
        "def f():\n"
        "    import re\n"
        "    from runner import outputs\n"
        "    from sweeps.engine import connect\n"
        "    import scipy.sparse\n"
        "    def g():\n"
        "        from workloads.wafer import summa\n"
    )
    known = {"runner.outputs", "sweeps.engine", "simcore.sim", "workloads.wafer.summa"}
    eager, found = split_imports(ast.parse(source), "app.fake", known)
    assert eager == {"typing", "json"}
    late = [("app.fake", where, name) for where, name in found]
    assert unjustified(late) == [
        "app.fake:TYPE_CHECKING imports runner.outputs",
        "app.fake:f imports re",
        "app.fake:f imports runner.outputs",
        "app.fake:f imports workloads.wafer.summa",
    ]
    assert unjustified([("fabric.fake", "TYPE_CHECKING", "fabric.engine")]) == []
    assert loads("app.fake", {"app.fake": {"runner.outputs"}, "runner": {"numpy"}}) == {
        "app", "runner", "runner.outputs", "numpy"
    }  # fmt: skip


def test_modules_are_imported_by_name_only_by_the_registry():
    """Family packages and kinds' modules are imported through the registry
    (``registry.load_module``), which checks what they register; nothing else imports by name."""
    calls = set()
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
                "import_module", "__import__"
            ):  # fmt: skip
                calls.add(str(path.relative_to(ROOT)))
    assert calls == DYNAMIC


def test_no_family_imports_another_familys_workloads():
    """``workloads/<family>/`` imports its own family's modules, the runner and the hardware:
    what two families share lives in a hardware package or a program library (``wafer/``)."""
    crossing = [
        f"{mod} imports {dep}"
        for mod, deps in module_graph(typing_too=True).items()
        if mod.startswith("workloads.") and mod.count(".") >= 1
        for dep in sorted(deps)
        if dep.startswith("workloads.") and dep.split(".")[1] != mod.split(".")[1]
    ]
    assert crossing == []


def test_nested_simulations_run_through_sub_runs():
    """Outside the kernel and the runner, nothing runs a :class:`Simulation` it built itself:
    a simulation inside a run is a sub-run (``sim.sub_runs.run``), which gets the budget
    check, deadline, interrupt handling and progress of the run (runner/subrun.py)."""
    by_hand = []
    for pkg in PACKAGES:
        if pkg in ("simcore", "runner"):
            continue
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                built = {
                    t.id
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Call)
                    and ast.unparse(n.value.func).endswith("Simulation")
                    for t in n.targets
                    if isinstance(t, ast.Name)
                }
                by_hand += [
                    f"{path.relative_to(ROOT)}:{n.lineno} {fn.name}"
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "run"
                    and isinstance(n.func.value, ast.Name)
                    and n.func.value.id in built
                ]
    assert by_hand == []


# -- no private names across modules ---------------------------------------------------------------
def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _declared(tree: ast.AST) -> set[str]:
    """The names a module declares itself: functions and classes, names assigned at module or
    class level (annotations and ``__slots__`` entries too), and attributes assigned through
    ``self``/``cls``."""
    names: set[str] = set()
    bodies = [tree.body] if isinstance(tree, ast.Module) else []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            bodies.append(node.body)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    for body in bodies:
        for stmt in body:
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign | ast.AugAssign)
                else []
            )
            for target in targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
                if isinstance(target, ast.Name) and target.id == "__slots__":
                    value = stmt.value
                    names.update(
                        c.value
                        for c in ast.walk(value)  # type: ignore[arg-type]
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    )
    return names


def private_uses(source: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """``x._name`` where no ``_name`` is declared in the module (nor in ``allowed``), and every
    ``from m import _name``: a module's private names are its own. Names are matched by name,
    not by type: a module that declares ``_x`` for itself may still read another's ``_x``
    (the test catches a name nobody here declares, which is what a reach into another module
    looks like)."""
    tree = ast.parse(source)
    own = _declared(tree) | allowed
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            found.extend(
                f"{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if _private(a.name)
            )
    return found


def kernel_env_names() -> frozenset[str]:
    """SimPy's private fields the kernel reads for speed (the clock, the event queue, the
    insertion counter: a property or a method call per event would cost on every hop and
    credit), declared in ``simcore.clock.KernelEnv``, the typed view of SimPy's environment
    every model gets: reading them through it is the documented way, from any module."""
    tree = ast.parse((ROOT / "simcore" / "clock.py").read_text())
    (env,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KernelEnv"]
    return frozenset(
        s.target.id
        for s in env.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and _private(s.target.id)
    )


#: Private names of other libraries that wafersim reads, and why (besides SimPy's, declared in
#: KernelEnv). None may be a name wafersim declares (checked), so none can hide a reach into one
#: of its own modules.
FOREIGN = {
    "_SubParsersAction": "argparse: add_subparsers() returns it and gives it no public name "
    "(the CLI's annotations)",
    "_extobj_contextvar": "numpy >= 2: the context variable np.errstate sets; the tensor unit's "
    "fast path sets and resets it around each instruction (pe/isa.py _quiet_on: 0.2 us against "
    "np.errstate's 1.6-2.7 us; numpy without it falls back to np.seterr)",
    "_make_extobj": "numpy >= 2: builds the error object np.errstate sets (made once, pe/isa.py)",
}


def test_no_private_names_across_modules():
    from import_graph import modules

    env = kernel_env_names()
    assert env == {"_now", "_queue", "_eid"}
    sources = [(path, path.read_text()) for path in modules().values()]
    declared = set().union(*(_declared(ast.parse(text)) for _, text in sources))
    assert not declared & set(FOREIGN)
    found = [
        f"{path.relative_to(ROOT)}:{use}"
        for path, text in sources
        for use in private_uses(text, env | set(FOREIGN))
    ]
    assert found == []


def test_the_private_name_checker_finds_reaches():
    source = (
        "from m import _hidden, shown\n"
        "class A:\n"
        "    __slots__ = ('_slot',)\n"
        "    _flag = True\n"
        "    def _own(self):\n"
        "        self._mine = 1\n"
        "        return self._mine + self._slot + A._flag + self._own()\n"
        "def f(x, env):\n"
        "    return x._theirs, x._mine, env._now\n"
    )
    assert private_uses(source, frozenset({"_now"})) == [
        "1: from m import _hidden",
        "9: x._theirs",
    ]
