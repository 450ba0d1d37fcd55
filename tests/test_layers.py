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
