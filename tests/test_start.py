"""A fast start: what ``wafersim --version``, ``list`` and ``params`` import.

Each command runs in a fresh interpreter, which reports the modules it imported: ``--version``
and ``list`` load no heavy package and no kind's module (the registry knows kinds by their
declared names), and ``params SCENARIO`` loads its own kind's module and none of the packages
only other commands need. No time is measured here (``bench/start_bench.py`` does that): the
mechanism is what is tested. docs/cli.md, "Start time".
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from import_graph import loads, modules, split_imports

from runner import registry, scenario

ROOT = Path(__file__).resolve().parent.parent

#: Runs ``main(argv)`` and prints, last on stderr, the modules the interpreter holds then.
PROBE = """
import json, sys
from app.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
print(json.dumps([code, sorted(sys.modules)]), file=sys.stderr)
"""

#: Packages that no start loads (the commands that need them import them: docs/cli.md).
NEVER = (
    "scipy", "networkx", "pyarrow", "perfetto", "google.protobuf", "matplotlib", "distributed",
    "dask", "tqdm", "polars", "duckdb", "traces.writer", "traces.reader", "sweeps.engine",
    "app.progress", "app.plots",
)  # fmt: skip

#: What a start without a kind (``--version``, ``list``) does not load either.
NO_KIND = ("numpy", "simpy", "simcore.sim")

#: Packages a kind's parameters need for their checks: spmv loads its matrix (a SciPy sparse
#: matrix) to check that every PE's block fits in its SRAM.
NEEDED = {"spmv": ("scipy",)}


def imported(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    code, modules = json.loads(done.stderr.splitlines()[-1])
    assert code == 0, done.stderr
    return modules


def loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return sorted({p for p in packages for m in modules if m == p or m.startswith(p + ".")})


def kind_modules(modules: list[str]) -> set[str]:
    return set(modules) & set(registry.KINDS.modules)


@pytest.mark.parametrize("argv", [["--version"], ["list"]])
def test_version_and_list_load_no_kind_and_nothing_heavy(argv):
    modules = imported(*argv)
    assert loaded(modules, NEVER + NO_KIND) == []
    assert kind_modules(modules) == set()


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_params_loads_its_kind_alone(name):
    kind = scenario.read(name).kind
    modules = imported("params", name)
    allowed = NEEDED.get(kind, ())
    assert loaded(modules, tuple(p for p in NEVER if p not in allowed)) == []
    own = registry.KINDS.origin(kind)
    assert kind_modules(modules) - {own} <= _needed_by(own)
    assert own in modules


@functools.cache
def _eager() -> dict[str, set[str]]:
    mods = modules()
    return {
        name: split_imports(ast.parse(path.read_text(), str(path)), name, set(mods))[0]
        for name, path in mods.items()
    }


def _needed_by(module: str) -> set[str]:
    """The declared modules importing ``module`` imports (a study's kind runs another kind)."""
    return loads(module, _eager()) & set(registry.KINDS.modules)


def test_help_lists_the_cases_when_asked():
    """``validate --help`` loads every family (its epilog lists the cases); the parser built
    for any other command does not."""
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "validate", "--help"], cwd=ROOT, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    assert "validation cases:" in done.stdout
    assert all(f"  {name:<14} " in done.stdout for name in registry.CASES)
