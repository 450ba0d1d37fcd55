"""SUMMA on the wafer: the product is right, timing behaves, the model agrees, errors are exact."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from pe.config import PeConfig
from runner import registry
from runner.scenario import Scenario, run_points, run_scenario
from simcore import config as cfg
from simcore.errors import ConfigError
from workloads.wafer import summa

FAST = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_summa(**kw):
    params = cfg.load(summa.SummaParams, kw)
    scen = Scenario("summa", "<test>", registry.KINDS["summa"], "", {})
    return run_scenario(scen, params).metrics


@FAST
@given(p=st.integers(2, 4), mt=st.integers(1, 8), seed=st.integers(0, 2**32))
def test_product_matches_numpy(p, mt, seed):
    m = run_summa(p=p, mt=mt, seed=seed)
    assert m["correct"], m["max_abs_error"]
    assert m["matrix_rows"] == p * mt


@FAST
@given(p=st.integers(2, 3), mt=st.integers(1, 6), seed=st.integers(0, 2**32))
def test_overlap_product_matches_numpy(p, mt, seed):
    assert run_summa(p=p, mt=mt, seed=seed, overlap=True)["correct"]


def test_error_bound_is_tight_enough_to_catch_a_wrong_block():
    a = np.eye(4, dtype=np.float32)
    b = np.arange(16, dtype=np.float32).reshape(4, 4)
    bound = summa.fp32_error_bound(a, b)
    assert np.all(bound < 1e-5)  # a swapped or missing block would be off by >= 1


def test_cycles_grow_with_mt():
    cycles = [run_summa(p=2, mt=mt)["cycles"] for mt in range(1, 8)]
    assert all(b > a for a, b in itertools.pairwise(cycles)), cycles


def test_split_adds_up_to_the_critical_pe():
    m = run_summa(p=3, mt=6)
    parts = m["compute_cycles"] + m["comm_cycles"] + m["control_cycles"]
    assert parts <= m["cycles"] <= parts + 2  # marks' own timestamp reads at start/end
    # Compute is Mt² fmacs of 2·Mt + 10 cycles plus 0.5 loop cycles each, per step.
    assert m["compute_cycles"] >= 3 * 36 * (2 * 6 + 10 + 0.5)


@pytest.mark.parametrize(
    ("p", "mt", "limit_pct"),
    [
        (2, 8, 6.0),
        (3, 8, 6.0),
        (2, 12, 3.0),
        pytest.param(4, 8, 6.0, marks=pytest.mark.slow),
        pytest.param(3, 14, 2.0, marks=pytest.mark.slow),
        pytest.param(4, 14, 2.0, marks=pytest.mark.slow),
    ],
)
def test_model_agrees_with_simulation(p, mt, limit_pct):
    m = run_summa(p=p, mt=mt)
    assert abs(m["model_error_pct"]) <= limit_pct, m
    assert m["model_cycles"] == summa.model(summa.SummaParams(p=p, mt=mt))["cycles"]


def test_model_is_the_study_formula():
    out = summa.model(summa.SummaParams(p=750, mt=47))
    t_comp = 47 * 47 * (2 * 47 + 10) + 0.5 * 47 * 47 + 10
    t_comm = 1.6 * 47 * 47 + 250
    assert out["cycles"] == pytest.approx((t_comp + t_comm + 100) * 750)
    m = 750 * 47
    assert out["tflops"] == pytest.approx(2 * m**3 * 850e6 / out["cycles"] / 1e12)
    assert out["peak_fraction"] == pytest.approx(out["tflops"] / (750 * 750 * 850e6 / 1e12))


def test_overlap_hides_the_write_latency_not_the_streams():
    """With the datapath shared, low-priority broadcasts wait for the compute task, and medium
    ones take one issue per word from it: either way what overlap still hides is the posted
    router writes' latency (docs/wafer/summa.md, "Overlap and the shared datapath")."""
    plain = run_summa(p=2, mt=8)
    low = run_summa(p=2, mt=8, overlap=True, microthread_priority="low")
    medium = run_summa(p=2, mt=8, overlap=True)
    assert medium["correct"] and low["correct"]
    assert low["cycles"] < plain["cycles"] and medium["cycles"] <= low["cycles"]
    assert plain["cycles"] - medium["cycles"] < 0.05 * plain["cycles"]


def test_largest_mt():
    assert summa.max_mt(PeConfig()) == 48  # (49152 - 2048) / 20 = 2355.2 -> 48² = 2304
    assert summa.max_mt(PeConfig(), overlap=True) == 41
    assert summa.max_mt(PeConfig(code_bytes=4900)) == 47  # the study's largest


def test_too_large_mt_message():
    with pytest.raises(ConfigError) as exc:
        cfg.load(summa.SummaParams, {"mt": 49})
    assert str(exc.value) == (
        "config key 'mt' = 49: 5 buffers of 49 x 49 FP32 (48,020 B) plus code (2,048 B) need "
        "50,068 B but a PE has 49,152 B of SRAM (wafer.pe.sram_bytes); allowed: 1 .. 48 "
        "(the largest Mt that fits); lower mt (raise p to keep M = p·mt)"
    )


def test_too_large_mt_with_overlap_message():
    with pytest.raises(ConfigError) as exc:
        cfg.load(summa.SummaParams, {"mt": 42, "overlap": True})
    assert str(exc.value) == (
        "config key 'mt' = 42: 7 buffers of 42 x 42 FP32 (49,392 B) plus code (2,048 B) need "
        "51,440 B but a PE has 49,152 B of SRAM (wafer.pe.sram_bytes); allowed: 1 .. 41 "
        "(the largest Mt that fits); lower mt (raise p to keep M = p·mt)"
    )


def test_cli_too_large_mt_exits_2(capsys):
    code = main(["run", "summa", "--set", "mt=49", "--json"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == (
        "wafersim: error: config key 'mt' = 49: 5 buffers of 49 x 49 FP32 (48,020 B) plus code "
        "(2,048 B) need 50,068 B but a PE has 49,152 B of SRAM (wafer.pe.sram_bytes); allowed: "
        "1 .. 48 (the largest Mt that fits); lower mt (raise p to keep M = p·mt)\n"
    )


def test_cli_run_json_keys(capsys):
    code = main(["run", "summa", "--set", "p=2", "--set", "mt=3", "--set", "seed=5", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in (
        "cycles", "compute_cycles", "comm_cycles", "control_cycles", "tflops", "peak_fraction",
        "max_abs_error", "correct", "model_cycles",
    ):  # fmt: skip
        assert key in data, key
    assert data["correct"] is True
    assert data["seed"] == 5


def test_cli_model_huge_p(capsys):
    code = main(["model", "summa", "--set", "p=750", "--set", "mt=47", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["cycles"] == pytest.approx(summa.model(summa.SummaParams(p=750, mt=47))["cycles"])
    assert 0 < data["peak_fraction"] < 1
    assert data["tflops"] > 0


def test_validation_cases_registered():
    for name in ("summa", "summa-strong", "summa-weak"):
        assert registry.CASES[name].criterion == "mape"


@pytest.mark.slow
def test_validate_summa_passes():
    case = registry.CASES["summa"]
    assert case.judge(case.run(run_points))[3]
