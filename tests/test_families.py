"""Workloads come in families: each registers its own kinds, cases and built-in scenarios, names
are global, and a name defined twice is an error naming both places. A family declares its
modules and their kinds; a module is imported when one of its kinds is first used."""

from __future__ import annotations

import ast
import importlib
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from runner import registry, scenario
from workloads.kernel import linkchain

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def empty_registry(monkeypatch):
    """Empty tables for the test, nothing declared; the session's come back afterwards."""
    monkeypatch.setattr(registry, "KINDS", registry.KindTable())
    monkeypatch.setattr(registry, "CASES", {})
    monkeypatch.setattr(registry, "_declared", False)
    monkeypatch.setattr(registry, "_loaded", False)


def kind(name: str, origin: str) -> registry.WorkloadKind:
    return registry.WorkloadKind(
        name=name, summary="", params=registry.ScenarioParams, build=lambda sim, p: None,
        metrics=lambda *a: {}, origin=origin,
    )  # fmt: skip


def case(name: str, origin: str) -> registry.ValidationCase:
    return registry.ValidationCase(
        name=name, summary="", run=lambda runner: [], tolerance=1.0, origin=origin
    )


def family_of(origin: str) -> str:
    """``workloads.<family>.module`` -> ``<family>``."""
    top, family, *_ = origin.split(".")
    assert top == "workloads", origin
    return family


def test_every_family_is_a_package_that_registers_its_own():
    assert registry.FAMILIES == ("kernel", "wafer", "cluster", "tpu", "pim")
    families = {k.name: family_of(k.origin) for k in registry.KINDS.values()}
    assert set(families.values()) <= set(registry.FAMILIES)
    assert {"link-chain": "kernel", "wse-fmac": "wafer", "wse-bcast": "wafer", "summa": "wafer",
            "ws-matmul": "wafer"}.items() <= families.items()  # fmt: skip
    assert {family_of(c.origin) for c in registry.CASES.values()} <= set(registry.FAMILIES)
    assert {"workloads.kernel.linkchain", "workloads.wafer.wse", "workloads.wafer.summa",
            "workloads.wafer.wsmatmul"} <= {c.origin for c in registry.CASES.values()}  # fmt: skip


def _register_kind_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "register_kind"
    ]


#: What every kind's registration names, by keyword (``model`` and ``footprint`` when it has them).
KIND_KEYWORDS = {"name", "summary", "params", "build", "metrics", "origin"}


def test_every_kind_is_registered_one_way():
    """docs/adding-a-family.md, "Registration": the module that defines a kind registers it in
    its ``register()``, with ``registry.WorkloadKind(...)`` given every field by keyword and
    ``origin=__name__``; its build and metrics live in that module."""
    registering = {}
    for path in sorted((ROOT / "workloads").rglob("*.py")):
        for call in _register_kind_calls(path):
            where = f"{path.relative_to(ROOT)}:{call.lineno}"
            assert len(call.args) == 1 and not call.keywords, where
            (kind_call,) = call.args
            assert isinstance(kind_call, ast.Call), where
            assert ast.unparse(kind_call.func) == "registry.WorkloadKind", where
            assert not kind_call.args, where  # every field by keyword
            keywords = {k.arg: ast.unparse(k.value) for k in kind_call.keywords}
            assert keywords.keys() >= KIND_KEYWORDS, where
            assert keywords["origin"] == "__name__", where
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            registering[ast.literal_eval(keywords["name"])] = module
    assert registering.keys() == registry.KINDS.keys()
    for name, kind in registry.KINDS.items():
        assert kind.origin == registering[name], name
        assert kind.build.__module__ == kind.metrics.__module__ == kind.origin, name
        assert callable(getattr(importlib.import_module(kind.origin), "register", None)), name


@pytest.mark.parametrize("family", registry.FAMILIES)
def test_a_family_that_registers_nothing_says_so(family, empty_registry):
    package = importlib.import_module(f"workloads.{family}")
    package.register()
    for module in list(registry.KINDS.modules):
        registry.load_module(module)
    empty = len(registry.KINDS) == 0 and registry.CASES == {}
    assert package.__doc__ and ("none registered yet" in package.__doc__) == empty
    assert (ROOT / "workloads" / family / "scenarios").exists() != empty


def test_built_in_scenarios_live_in_their_family_folders():
    where = {name: path.parent.parent.name for name, path in scenario.builtin_scenarios().items()}
    known = {"link-chain": "kernel", "link-chain-backpressure": "kernel", "summa": "wafer",
             "ws-matmul": "wafer", "wse-bcast": "wafer", "wse-fmac": "wafer"}  # fmt: skip
    assert known.items() <= where.items()
    for name in where:
        assert family_of(scenario.find(name).kind.origin) == where[name], name
    families = [f for f in registry.FAMILIES if (ROOT / "workloads" / f / "scenarios").is_dir()]
    assert scenario.builtin_dirs() == [ROOT / "workloads" / f / "scenarios" for f in families]


def test_a_kind_defined_twice_names_both_places(empty_registry):
    registry.register_kind(kind("gemm", "workloads.wafer.summa"))
    with pytest.raises(registry.RegistryError) as err:
        registry.register_kind(kind("gemm", "workloads.tpu.matmul"))
    assert str(err.value) == (
        "workload kind 'gemm' is defined twice: in workloads.wafer.summa and in "
        "workloads.tpu.matmul; rename one of them (scenarios name kinds, so names are global)"
    )
    assert registry.KINDS["gemm"].origin == "workloads.wafer.summa"


def test_a_case_defined_twice_names_both_places(empty_registry):
    registry.register_case(case("gemm", "workloads.wafer.summa"))
    with pytest.raises(registry.RegistryError) as err:
        registry.register_case(case("gemm", "workloads.pim.gemv"))
    assert str(err.value) == (
        "validation case 'gemm' is defined twice: in workloads.wafer.summa and in "
        "workloads.pim.gemv; rename one of them (`wafersim validate` takes case names)"
    )


def test_a_built_in_scenario_in_two_families_names_both_files(tmp_path):
    wafer, tpu = tmp_path / "wafer" / "scenarios", tmp_path / "tpu" / "scenarios"
    for folder in (wafer, tpu):
        folder.mkdir(parents=True)
        (folder / "gemm.toml").write_text('kind = "summa"\n')
    (wafer / "other.toml").write_text('kind = "summa"\n')
    assert set(scenario.builtin_scenarios([wafer])) == {"gemm", "other"}
    with pytest.raises(registry.RegistryError) as err:
        scenario.builtin_scenarios([wafer, tpu])
    assert str(err.value) == (
        f"built-in scenario 'gemm' is defined twice: {wafer / 'gemm.toml'} and "
        f"{tpu / 'gemm.toml'}; rename one of the files (built-in scenarios are found by name)"
    )


def test_a_family_that_fails_leaves_the_tables_as_they_were(monkeypatch, empty_registry):
    registry.register_kind(kind("link-chain", "tests.test_families"))
    with pytest.raises(registry.RegistryError) as err:
        registry.load_all()
    assert str(err.value) == (
        "workload kind 'link-chain' is defined twice: in tests.test_families and in "
        "workloads.kernel.linkchain; rename one of them (scenarios name kinds, so names are "
        "global)"
    )
    assert list(registry.KINDS) == ["link-chain"] and registry.CASES == {}
    assert registry.KINDS["link-chain"].origin == "tests.test_families"
    assert registry.KINDS.modules == {}
    assert registry._loaded is False and registry._declared is False


def test_importing_workloads_registers_nothing():
    code = (
        "import app.cli, workloads.kernel, workloads.wafer, workloads.cluster, "
        "workloads.tpu, workloads.pim\n"
        "from runner import registry\n"
        "assert len(registry.KINDS) == 0 and registry.CASES == {}, list(registry.KINDS)\n"
        "registry.load_all()\n"
        "print(len(registry.KINDS), len(registry.CASES))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == [str(len(registry.KINDS)), str(len(registry.CASES))]


def test_unknown_cases_are_named():
    with pytest.raises(registry.RegistryError) as err:
        registry.find_cases(["wse-fmac", "nope", "summa-tiny"])
    assert str(err.value).startswith("unknown validation case(s): nope, summa-tiny; known cases: ")
    assert [c.name for c in registry.find_cases([])] == sorted(registry.CASES)


class AnyMetrics(dict):
    """Metrics of a fake run: every key a case asks for has the value ``value``."""

    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def __missing__(self, key):
        return self.value


def test_every_case_hands_the_runner_all_its_points_in_one_call():
    """So a parallel runner can run a whole sweep at once (one call per workload kind: the TPU
    case sweeps several kinds); the rows of a one-kind case follow the runner's order."""
    for name, case in sorted(registry.CASES.items()):
        calls = []

        def runner(kind, points, calls=calls):
            calls.append((kind, list(points)))
            return [AnyMetrics(1000.0 + i) for i in range(len(points))]

        rows = case.run(runner)
        kinds = [kind for kind, _ in calls]
        assert len(kinds) == len(set(kinds)), name  # one call per workload kind
        for kind, points in calls:
            assert all(type(p) is registry.KINDS[kind].params for p in points), name
            assert pickle.loads(pickle.dumps(points)) == points, name  # can go to a worker
        if len(calls) == 1 and len(rows) == len(calls[0][1]):
            n = len(rows)
            scale = rows[0].simulated / 1000.0  # a case may report in other units
            assert [r.simulated for r in rows] == pytest.approx(
                [scale * (1000.0 + i) for i in range(n)]
            ), name
        assert {r.case for r in rows} == {name}


def test_the_sequential_runner_runs_each_point_in_order():
    points = [linkchain.LinkChainParams(items=n) for n in (5, 50, 20)]
    assert [m["received_items"] for m in scenario.run_points("link-chain", points)] == [5, 50, 20]
    assert scenario.run_points("link-chain", []) == []


# -- declared kinds: known by name at once, imported on first use ------------------------------
KIND_MODULE = """
from runner import registry


def register():
    for name in NAMES:
        registry.register_kind(registry.WorkloadKind(
            name=name, summary="", params=registry.ScenarioParams, build=lambda sim, p: None,
            metrics=lambda *a: {}, origin=__name__,
        ))
    registry.register_case(registry.ValidationCase(
        name=f"{__name__}-case", summary="", run=lambda runner: [], tolerance=1.0,
        origin=__name__,
    ))
"""


@pytest.fixture
def kind_modules(tmp_path, monkeypatch, empty_registry):
    """``make(module, *names)`` writes a module whose ``register()`` registers kinds ``names``
    and a case ``<module>-case``; nothing is imported until the registry does."""

    def make(module: str, *names: str) -> None:
        (tmp_path / f"{module}.py").write_text(f"NAMES = {names!r}\n" + KIND_MODULE)

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in [m for m in sys.modules if m.startswith("fake_")]:
        del sys.modules[name]


def test_a_declared_kind_is_known_at_once_and_imported_when_looked_up(kind_modules):
    kind_modules("fake_gemm", "gemm", "gemv")
    kind_modules("fake_conv", "conv")
    registry.declare("fake_gemm", "gemm", "gemv")
    registry.declare("fake_conv", "conv")
    assert list(registry.KINDS) == ["gemm", "gemv", "conv"] and "gemv" in registry.KINDS
    assert registry.KINDS.origin("conv") == "fake_conv"
    assert "fake_gemm" not in sys.modules and registry.CASES == {}
    assert registry.KINDS["gemv"].origin == "fake_gemm"  # imports fake_gemm, registers it all
    assert not registry.KINDS.is_declared("gemm") and registry.KINDS.is_declared("conv")
    assert list(registry.CASES) == ["fake_gemm-case"] and "fake_conv" not in sys.modules
    assert sorted(k.name for k in registry.KINDS.values()) == ["conv", "gemm", "gemv"]
    assert list(registry.CASES) == ["fake_gemm-case", "fake_conv-case"]


def test_a_kind_declared_twice_names_both_modules(kind_modules):
    registry.declare("fake_gemm", "gemm")
    with pytest.raises(registry.RegistryError) as err:
        registry.declare("fake_tpu", "conv", "gemm")
    assert str(err.value) == (
        "workload kind 'gemm' is defined twice: in fake_gemm and in fake_tpu; rename one of "
        "them (scenarios name kinds, so names are global)"
    )
    with pytest.raises(registry.RegistryError, match="module fake_gemm is declared twice"):
        registry.declare("fake_gemm")


def test_a_module_must_register_what_it_declares_and_nothing_else(kind_modules):
    kind_modules("fake_gemm", "gemm")
    kind_modules("fake_more", "gemm2", "extra")
    registry.declare("fake_gemm", "gemm", "gemv")
    with pytest.raises(registry.RegistryError) as err:
        registry.KINDS["gemm"]
    assert str(err.value) == (
        "fake_gemm is declared to define workload kind(s) gemv, but its register() does not "
        "register them; register them there, or declare only the kinds it defines"
    )
    assert registry.KINDS.is_declared("gemm") and registry.CASES == {}  # left as it was
    registry.declare("fake_more", "gemm2")
    with pytest.raises(registry.RegistryError) as err:
        registry.load_module("fake_more")
    assert str(err.value) == (
        "workload kind 'extra' of fake_more is not declared: add it to the family's "
        "registry.declare('fake_more', ...) so that its name is known before the module is "
        "imported"
    )
    with pytest.raises(registry.RegistryError, match="module fake_none is not declared"):
        registry.load_module("fake_none")


def test_a_kind_defined_by_another_module_than_declared_names_both(kind_modules):
    kind_modules("fake_gemm", "gemm")
    registry.declare("fake_tpu", "gemm")
    registry.declare("fake_gemm")
    with pytest.raises(registry.RegistryError) as err:
        registry.load_module("fake_gemm")
    assert str(err.value).startswith(
        "workload kind 'gemm' is defined twice: in fake_tpu and in fake_gemm; "
    )


def test_finding_a_scenario_imports_its_kind_alone():
    """``wafersim params summa`` imports the summa module and no other kind's (in a fresh
    process: this one has loaded every family)."""
    code = (
        "import sys\n"
        "from runner import registry, scenario\n"
        "assert scenario.read('summa').kind == 'summa'\n"
        "assert not [m for m in sys.modules if m.count('.') == 2 and m.startswith('workloads.')]\n"
        "assert scenario.find('summa').kind.name == 'summa'\n"
        "print(sorted(m for m in sys.modules if m.count('.') == 2 and m.startswith('workloads')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    loaded = set(eval(out))
    assert "workloads.wafer.summa" in loaded
    assert not {"workloads.wafer.spmv", "workloads.wafer.wse", "workloads.cluster.gptws",
                "workloads.tpu.collective", "workloads.pim.jitq"} & loaded  # fmt: skip


def test_every_declared_kind_is_registered():
    assert all(not registry.KINDS.is_declared(name) for name in registry.KINDS)
    for module, names in registry.KINDS.modules.items():
        assert {registry.KINDS[n].origin for n in names} <= {module}
    assert set(registry.KINDS.modules) == {k.origin for k in registry.KINDS.values()} | {
        c.origin for c in registry.CASES.values()
    }
