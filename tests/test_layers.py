"""The packages import only downwards: traces uses simcore and third-party packages, never the
workloads that run simulations; the modules of workloads import each other without cycles and at
module level (no lazy or TYPE_CHECKING-only imports hiding a cycle). Checked on the source, so a
new module is covered the day it is added."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = {"simcore", "fabric", "pe", "memoryx", "swarmx", "tpu", "pim", "workloads", "traces"}


def imports(path: Path) -> list[tuple[str, ast.AST]]:
    """(top-level package, node) of every import in ``path``, relative ones as the package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            top = path.relative_to(ROOT).parts[0] if node.level else node.module.split(".")[0]
            found.append((top, node))
    return found


def test_traces_imports_only_simcore_and_third_party():
    above = {
        f"{path.relative_to(ROOT)}:{node.lineno} imports {top}"
        for path in sorted((ROOT / "traces").rglob("*.py"))
        for top, node in imports(path)
        if top in FIRST_PARTY - {"simcore", "traces"}
    }
    assert above == set()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_workloads_import_at_module_level():
    """The one exception: the CLI's ``plot`` command imports the plotting modules when it runs,
    because matplotlib adds about a second to the start of every other command."""
    lazy = set()
    for path in sorted((ROOT / "workloads").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(node)):
                    lazy.add(f"{path.relative_to(ROOT)}:{node.name}")
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                lazy.add(f"{path.relative_to(ROOT)}:{node.lineno} TYPE_CHECKING")
    assert lazy == {"workloads/cli.py:cmd_plot"}


def test_workloads_modules_import_each_other_without_cycles():
    """``from workloads.wafer import wse`` is an edge to ``workloads.wafer.wse``; the package
    ``__init__`` that Python runs first is not counted (a package importing its own modules is
    how families register)."""
    paths = {module_name(p): p for p in sorted((ROOT / "workloads").rglob("*.py"))}
    graph = nx.DiGraph()
    for name, path in paths.items():
        graph.add_node(name)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [t for t in subs if t in paths] or [node.module]
            else:
                continue
            graph.add_edges_from((name, t) for t in targets if t in paths)
    assert graph.has_edge("workloads.wafer.wsmatmul", "workloads.wafer.wsgrad")
    assert list(nx.simple_cycles(graph)) == []
