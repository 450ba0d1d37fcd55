"""The packages import only downwards: traces uses simcore and third-party packages, never the
workloads that run simulations. Checked on the source, so a new module is covered the day it is
added."""

from __future__ import annotations

import ast
from pathlib import Path

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
