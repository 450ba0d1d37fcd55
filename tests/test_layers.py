"""Layering: packages import only downwards (the kernel, then the trace format and the wafer's
fabric, then the hardware models, then the workloads and the command line); no modules import
each other in a circle, lazy imports inside functions included (they are how a cycle hides);
``workloads/`` imports at module level. Checked on the source, so a new module is covered the
day it is added. ``python tests/import_graph.py`` prints the graph (docs/design.md, "Layers")."""

from __future__ import annotations

import ast

from import_graph import PACKAGES, RANK, ROOT, cycles, module_graph, package_graph


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


def test_workloads_import_at_module_level():
    """The exceptions: the CLI's ``plot`` command imports the plotting modules when it runs,
    because matplotlib adds about a second to the start of every other command; ``sweep`` and
    ``validate --workers`` import the Dask engine, since distributed adds half a second."""
    lazy = set()
    paths = [
        p for pkg in ("runner", "workloads", "sweeps", "app") for p in (ROOT / pkg).rglob("*.py")
    ]
    for path in sorted(paths):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(node)):
                    lazy.add(f"{path.relative_to(ROOT)}:{node.name}")
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                lazy.add(f"{path.relative_to(ROOT)}:{node.lineno} TYPE_CHECKING")
    assert lazy == {
        "app/cli.py:cmd_plot",
        "app/sweepcli.py:sweep_command",
        "app/cli.py:cmd_validate",
    }


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
