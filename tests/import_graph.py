"""The import graph of wafersim's packages and modules, read from the source (nothing is
imported): ``python tests/import_graph.py`` prints, per package, the packages it imports;
``--modules`` adds the module-level graph inside each package; ``--dot`` prints Graphviz;
``--markdown`` prints the layer table of docs/design.md ("Layers": ranks, roles, imports) and
``--update-docs`` writes it there, between its markers (tests/test_layer_docs.py keeps the two
equal).

Used by tests/test_layers.py, which holds the layering rules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Every top-level package: its rank (a package may import only packages of a lower rank) and
#: its role in one line (the docs' layer table is generated from these: ``--markdown``).
LAYERS = {
    "simcore": (0, "the kernel: time, clocks, components, channels, config, errors, sub-runs"),
    "numerics": (0, "number formats (bf16, fp16, the MX reference): numpy only"),
    "traces": (1, "the trace format, writer, reader, summaries, exports, plots"),
    "fabric": (1, "the wafer's mesh: routers, links, wavelets, edge ports, express streams"),
    "pe": (2, "the wafer's processing elements: SRAM, DSDs, ISA, compute engine, program API"),
    "memoryx": (2, "the weight store of the cluster"),
    "swarmx": (2, "the broadcast/reduce tree of the cluster"),
    "tpu": (2, "TPU chips, slices and the ICI"),
    "pim": (2, "HBM at DRAM-command level with PIM units; JIT-Q compiler"),
    "wafer": (3, "the assembled wafer: PEs on the fabric, collectives, lock-step phase, programs"),
    "cs2": (4, "a CS-2 system of the cluster, running wafer programs; its plan and GPT"),
    "runner": (5, "registry, scenarios, runs and sub-runs, budget, outputs, progress hooks"),
    "workloads": (6, "the families' kinds, validation cases, scenarios, calibration"),
    "sweeps": (6, "sweep grids, journal, tables, the Dask engine"),
    "app": (7, "the wafersim command: argument parsing, plots, terminal progress"),
}
RANK = {pkg: rank for pkg, (rank, _) in LAYERS.items()}
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
    package = _package(module)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing_too:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_imported(node, package, known))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def _imported(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> set[str]:
    """The modules one import statement imports, dotted (first- or third-party)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1])
        base = f"{base}.{node.module}" if node.module else base
    subs = [f"{base}.{a.name}" for a in node.names]
    return set([m for m in subs if m in known] or [base])


def _package(module: str) -> str:
    return module if (ROOT / Path(*module.split("."))).is_dir() else module.rsplit(".", 1)[0]


def split_imports(
    tree: ast.AST, module: str, known: set[str]
) -> tuple[set[str], list[tuple[str, str]]]:
    """``module``'s imports, split by when they run: (the modules importing it imports at once,
    [(where, module)] of the others). The others are inside a function (``where`` is its name:
    they run when it is called) or under ``if TYPE_CHECKING`` (``where`` is ``TYPE_CHECKING``:
    they never run). Modules are dotted, first- or third-party (``from a.b import c`` names
    ``a.b.c`` when that is a module of the tree)."""
    package = _package(module)
    eager: set[str] = set()
    late: list[tuple[str, str]] = []

    def visit(node: ast.AST, where: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            where = where or node.name
        elif isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, where or "TYPE_CHECKING")
            for child in node.orelse:
                visit(child, where)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = _imported(node, package, known)
            if where is None:
                eager.update(names)
            else:
                late.extend((where, name) for name in sorted(names))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, None)
    return eager, late


def loads(module: str, eager: dict[str, set[str]]) -> set[str]:
    """Every module importing ``module`` imports, transitively (``eager``: each module's
    :func:`split_imports` at once), with the packages whose ``__init__`` runs first."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            part = ".".join(parts[:i])
            if part not in seen:
                seen.add(part)
                todo.extend(eager.get(part, ()))
    return seen - {module}


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


#: docs/design.md's generated block lies between these two lines.
DOC = ROOT / "docs" / "design.md"
BEGIN = "<!-- layers: generated by `python tests/import_graph.py --update-docs`; do not edit -->"
END = "<!-- layers: end -->"


def markdown() -> str:
    """The package graph as a Markdown table, lowest rank first: rank, package, role, imports."""
    graph = package_graph()
    rows = ["| rank | package | role | imports |", "|---|---|---|---|"]
    for pkg in sorted(PACKAGES, key=lambda p: (RANK[p], PACKAGES.index(p))):
        deps = sorted(graph[pkg], key=lambda d: (RANK[d], d))
        imports = ", ".join(f"`{d}`" for d in deps) or "-"
        rows.append(f"| {RANK[pkg]} | `{pkg}/` | {LAYERS[pkg][1]} | {imports} |")
    return "\n".join(rows) + "\n"


def docs_block(text: str) -> str:
    """What ``text`` (docs/design.md) holds between the markers."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{DOC} has no generated layer table (markers {BEGIN!r} ... {END!r})")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def update_docs() -> bool:
    """Write the table into docs/design.md between the markers; True if it changed."""
    text = DOC.read_text()
    old = docs_block(text)
    new = markdown()
    if old != new:
        head, rest = text.split(BEGIN, 1)
        DOC.write_text(f"{head}{BEGIN}\n{new}{END}{rest.split(END, 1)[1]}")
    return old != new


def main(argv: list[str]) -> int:
    if "--markdown" in argv:
        print(markdown(), end="")
        return 0
    if "--update-docs" in argv:
        print(f"{DOC.relative_to(ROOT)}: " + ("updated" if update_docs() else "up to date"))
        return 0
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
