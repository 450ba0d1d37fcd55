"""The import graph of wafersim's packages and modules, read from the source (nothing is
imported): ``python tests/import_graph.py`` prints, per package, the packages it imports;
``--modules`` adds the module-level graph inside each package; ``--dot`` prints Graphviz.

Used by tests/test_layering.py, which holds the layering rules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Every top-level package and its rank: a package may import only packages of a lower rank.
RANK = {
    "simcore": 0,  # the kernel: time, clocks, components, channels, config, errors
    "numerics": 0,  # number formats (bf16, fp16, MX): numpy only
    "traces": 1,  # the trace format, reader, summaries, exports
    "fabric": 1,  # the wafer's mesh: routers, links, wavelets
    "pe": 2,  # the wafer's processing elements
    "memoryx": 2,  # the weight store of the cluster
    "swarmx": 2,  # the broadcast/reduce tree of the cluster
    "tpu": 2,  # TPU chips, slices and the ICI
    "pim": 2,  # HBM at DRAM-command level with PIM units
    "wafer": 3,  # the assembled wafer: PEs on the fabric, collectives, lock-step phase, programs
    "cs2": 4,  # a CS-2 system of the cluster, running wafer programs
    "runner": 5,  # registry, scenarios, runs and sub-runs, budget, outputs, progress hooks
    "workloads": 6,  # the families' kinds, validation cases, scenarios, calibration
    "sweeps": 6,  # sweep grids, journal, tables, the Dask engine
    "app": 7,  # the wafersim command: argument parsing, plots, terminal progress
}
PACKAGES = tuple(RANK)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, known: set[str], typing_too: bool) -> set[str]:
    """First-party modules ``module`` imports (at any depth: inside functions too).

    ``from a.b import c`` is an edge to the module ``a.b.c`` when there is one, else to ``a.b``
    (the package ``__init__`` Python runs first is not counted when a name is a module: a
    package importing its own modules is how it assembles itself)."""
    found: set[str] = set()
    package = module if (ROOT / Path(*module.split("."))).is_dir() else module.rsplit(".", 1)[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing_too:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            subs = [f"{base}.{a.name}" for a in node.names]
            found.update([m for m in subs if m in known] or [base])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def module_graph(typing_too: bool = False) -> dict[str, set[str]]:
    """Module -> first-party modules it imports (names that are modules of the tree)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        deps = _imports(tree, name, set(mods), typing_too)
        graph[name] = {m for m in deps if m in mods and m != name}
    return graph


def package_graph() -> dict[str, set[str]]:
    """Package -> other packages it imports (typing-only imports count: a package must not
    even name a higher one)."""
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for mod, deps in module_graph(typing_too=True).items():
        pkg = mod.split(".")[0]
        graph[pkg].update(d.split(".")[0] for d in deps if d.split(".")[0] != pkg)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def main(argv: list[str]) -> int:
    if "--dot" in argv:
        print("digraph wafersim {")
        for pkg, deps in package_graph().items():
            print(f'  "{pkg}";')
            for d in sorted(deps):
                print(f'  "{pkg}" -> "{d}";')
        print("}")
        return 0
    for pkg, deps in package_graph().items():
        print(f"{pkg:<10} -> {', '.join(sorted(deps)) or '(nothing)'}")
    if "--modules" in argv:
        for mod, deps in sorted(module_graph().items()):
            if deps:
                print(f"  {mod} -> {', '.join(sorted(deps))}")
    found = cycles(package_graph()) + cycles(module_graph())
    print("cycles: " + ("; ".join(" <-> ".join(c) for c in found) if found else "none"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
