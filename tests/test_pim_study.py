"""The JIT-Q study: the GPU roofline by hand, the study's metrics, the command line."""

from __future__ import annotations

import json

import pytest

from app import cli
from simcore.sim import Simulation
from workloads.pim import study
from workloads.pim.study import MODELS, GpuConfig, StudyParams


def test_roofline_by_hand():
    gpu = GpuConfig()
    # a big square GEMM is compute bound: 2 x 8192^3 flop at 181 TFLOP/s
    assert study.gemm_time((8192, 8192, 8192), "mx6", gpu) == pytest.approx(2 * 8192**3 / 181e12)
    # a skinny one is bound by reading its inputs (6 bits each) at 90 % of 1638.4 GB/s
    t = study.gemm_time((1, 8192, 8192), "mx6", gpu)
    assert t == pytest.approx((8192 + 8192 * 8192) * 6 / 8 / (0.9 * 1638.4e9))


def test_a_layer_has_the_megatron_gemms():
    m = MODELS["gpt3-175b"]
    fwd = study.gemms(m, "fwd")
    assert fwd[0] == (2048, 3 * 12288 // 8, 12288)  # QKV on this GPU's heads
    assert len(study.gemms(m, "bwd")) == 2 * len(fwd)
    flops = sum(2 * a * b * c for a, b, c in fwd if b != m.seq and c != m.seq)
    assert flops == 2 * 2048 * 12 * 12288**2 // 8  # the weight GEMMs: 24 s b H^2 / TP


def test_study_metrics_and_the_all_table(capsys):
    small = ["--set", "calibration_rows=256", "--set", "placement=tiled"]  # a fast calibration
    argv = ["run", "jitq-study", "--set", "model=gpt3-175b", "--set", "format=mx6", "--json",
            "--quiet", *small]  # fmt: skip
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["slack_ratio"]) == {"fwd/row", "fwd/col", "bwd/row", "bwd/col"}
    assert out["min_slack_ratio"] == min(out["slack_ratio"].values())
    assert out["slack_ratio"]["bwd/row"] == pytest.approx(2 * out["slack_ratio"]["fwd/row"])
    assert 0 < out["capacity_savings_pct"] < 100 and 0 < out["throughput_loss_pct"] < 100
    # the plan's span: two layers of GPU work, each phase at least its GEMMs and its PIM work
    span = 2 * sum(max(out["gpu_layer_s"][f], out["pim_quantize_s"][f"{f}/{d}"])
                   for f, d in (("fwd", "row"), ("bwd", "col")))  # fmt: skip
    assert out["time_s"] == pytest.approx(span, rel=1e-5)  # whole nanoseconds per GEMM group
    assert cli.main(["run", "jitq-study", "--set", "model=all", "--json", "--quiet", *small]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in data["summary_table"]] == list(MODELS)
    assert list(data["per_model_table"]) == list(MODELS) and data["time_s"] == 0.0


def test_larger_formats_free_more_memory():
    savings = [
        study.study(
            Simulation(),
            "gpt3-175b",
            StudyParams(format=f, calibration_rows=256, placement="tiled"),
        )["capacity_savings_pct"]
        for f in ("mx4", "mx6", "mx9")
    ]
    assert savings == sorted(savings)
