"""The TPU chip (HBM -> VMEM -> MXU pipeline) and sharded matmuls on a slice: the MXU's pass
count and cycles, its function (bf16 in, float32 accumulate), the roofline emerging from the
pipeline, and every sharding case equal to numpy with payload=size giving the same time."""

from __future__ import annotations

import numpy as np
import pytest

from numerics.floats import round_bf16
from runner import scenario
from simcore import Component, Simulation
from simcore import config as cfg
from tpu.chip import Job, TensorChip, mxu_function
from tpu.chips import CHIPS
from workloads.tpu import models
from workloads.tpu.matmul import MatmulParams
from workloads.tpu.trainstep import TrainStepParams


def chip(name: str = "v5e") -> tuple[Simulation, TensorChip]:
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    return sim, TensorChip(top, "chip", CHIPS[name])


@pytest.mark.parametrize(
    ("m", "k", "n", "passes", "cycles"),
    [
        (8, 128, 128, 1, 8),  # the spec's unit: bf16[8,128] x bf16[128,128] in 8 cycles
        (32, 128, 128, 4, 8),  # four passes on four MXUs at once
        (40, 128, 128, 5, 16),
        (1, 1, 1, 1, 8),  # a partial pass costs a whole one
        (256, 512, 512, 512, 1024),
    ],
)
def test_mxu_passes_and_cycles(m, k, n, passes, cycles):
    _, c = chip("v5e")
    assert c.mxu.passes(m, k, n) == passes
    assert c.mxu.cycles(m, k, n) == cycles


def test_mxu_function_is_bf16_in_f32_accumulate():
    rng = np.random.default_rng(1)
    a = round_bf16(rng.standard_normal((16, 64)).astype(np.float32))
    b = round_bf16(rng.standard_normal((64, 32)).astype(np.float32))
    assert np.all(a.view(np.uint32) & 0xFFFF == 0)  # bf16 values
    got = mxu_function(a[:, 32:], b[32:], mxu_function(a[:, :32], b[:32], None))
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert got.dtype == np.float32
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)


def run_job(m: int, k: int, n: int, name: str = "v5e") -> tuple[float, Job]:
    sim, c = chip(name)
    rng = np.random.default_rng(0)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    b = rng.integers(-2, 3, (k, n)).astype(np.float32)
    job = Job(m, k, n, a, b)

    class Start(Component):
        def start(self):
            c.matmul(job)

    Start(c, "start")
    sim.run()
    assert np.array_equal(job.out, a @ b)
    return float(sim.timebase.to_seconds(job.end_ticks)), job


def test_matmul_roofline_emerges_from_the_pipeline():
    """A weight matmul X[B, 2048]·W[2048, 2048]: memory-bound at small batch, compute-bound at
    large; within 15 % of the roofline on both sides (the rest is pipeline fill and drain)."""
    spec = CHIPS["v5e"]
    for batch, bound in ((64, "memory"), (1024, "compute")):
        t, _ = run_job(batch, 2048, 2048)
        roof = models.matmul_roofline(batch, 2048, 2048, spec)
        assert roof["bound"] == bound
        assert 1.0 <= t / roof["time_s"] < 1.15


@pytest.mark.parametrize("sharding", ["none", "noncontracting", "contracting", "both"])
@pytest.mark.parametrize(
    ("chip_name", "topology", "axes"), [("v5e", "4x2", "x"), ("v5p", "2x2x2", "xz")]
)
def test_sharded_matmuls_equal_numpy_and_size_mode_times_match(sharding, chip_name, topology, axes):
    kw = dict(chip=chip_name, topology=topology, axes=axes, sharding=sharding, i=64, j=256,
              k=128, blocks=2, tile_k=128, tile_n=64)  # fmt: skip
    real = scenario.run_kind("tpu-matmul", cfg.load(MatmulParams, kw))
    size = scenario.run_kind("tpu-matmul", cfg.load(MatmulParams, {**kw, "payload": "size"}))
    assert real["correct"] is True and size["correct"] is None
    assert real["time_s"] == size["time_s"]


def test_contracting_sharding_overlaps_the_allreduce_with_compute():
    """Compute (174 us of MXU per chip) about equal to the AllReduce of the 8 MiB of partial
    sums (about 186 us on a 16-chip ring): in 8 blocks, most of one hides behind the other.
    (A communication-bound case, 11 us of compute, has little to hide: with store-and-forward
    chunks, blocks also pipelined the hops, which cut-through packets do anyway.)"""
    kw = dict(chip="v5e", topology="16x1", axes="x", sharding="contracting", i=512,
              j=131072, k=4096, payload="size",
              ici={"packet_bytes": 65536, "buffer_bytes": 1 << 20})  # fmt: skip
    one = scenario.run_kind("tpu-matmul", cfg.load(MatmulParams, {**kw, "blocks": 1}))
    eight = scenario.run_kind("tpu-matmul", cfg.load(MatmulParams, {**kw, "blocks": 8}))
    assert eight["time_s"] < 0.7 * one["time_s"]
    assert abs(eight["model_error_pct"]) < 10


@pytest.mark.parametrize("strategy", ["dp", "fsdp"])
@pytest.mark.parametrize(("topology", "axes"), [("4x2", "x"), ("2x2", "xy")])
def test_train_step_equals_numpy_and_size_mode_times_match(strategy, topology, axes):
    kw = dict(strategy=strategy, topology=topology, axes=axes, batch=32, d_model=128, d_ff=256,
              blocks=2, tile_k=64, tile_n=64)  # fmt: skip
    real = scenario.run_kind("tpu-train-step", cfg.load(TrainStepParams, {**kw, "payload": "real"}))
    size = scenario.run_kind("tpu-train-step", cfg.load(TrainStepParams, kw))
    assert real["correct"] is True and size["correct"] is None
    assert real["time_s"] == size["time_s"]


def test_train_step_crosses_from_communication_to_compute_bound():
    """v5p, 4x4x4, data parallel over x: C/W ≈ 2550 per chip; below it the AllReduce
    dominates, above it the matmuls do."""
    kw = dict(chip="v5p", topology="4x4x4", strategy="dp", axes="x", d_model=2048, d_ff=4096)
    low = scenario.run_kind("tpu-train-step", cfg.load(TrainStepParams, {**kw, "batch": 512}))
    high = scenario.run_kind("tpu-train-step", cfg.load(TrainStepParams, {**kw, "batch": 8192}))
    assert low["bound"] == "communication" and high["bound"] == "compute"
    assert low["model_critical_batch"] == pytest.approx(4.59e14 / 1.8e11)
    for m in (low, high):
        assert abs(m["model_error_pct"]) < 8


@pytest.mark.parametrize(
    ("topology", "strategy", "batch"),
    [("1x1", "dp", 512), ("16x1", "dp", 512), ("16x1", "dp", 8192), ("4x1", "fsdp", 64)],
)
def test_train_step_bound_follows_its_own_compute_and_communication_times(
    topology, strategy, batch
):
    """``bound`` names the larger of the step's own times: its chips' time in matmuls
    (``compute_s``) and the time a collective of the step was in flight (``comm_s``); a single
    chip communicates nothing and is compute-bound."""
    kw = dict(chip="v5e", topology=topology, strategy=strategy, batch=batch, d_model=1024,
              d_ff=2048)  # fmt: skip
    m = scenario.run_kind("tpu-train-step", cfg.load(TrainStepParams, kw))
    assert 0 < m["compute_s"] <= m["time_s"] and 0 <= m["comm_s"] <= m["time_s"]
    want = "compute" if m["compute_s"] >= m["comm_s"] else "communication"
    assert m["bound"] == want
    if topology == "1x1":
        assert m["comm_s"] == 0 and m["ici_link_utilisation"] == 0 and m["bound"] == "compute"


def test_the_one_chip_step_agrees_with_its_model():
    """A single chip's step is its 12 matmuls queued back to back (the next one's copies start
    while one computes): within 5 % of the per-matmul rooflines (+3.3 %: the step's one fill and
    one drain); it was +31.3 % when each matmul waited for the one before to drain."""
    m = scenario.run_kind("tpu-train-step", cfg.load(TrainStepParams, {"topology": "1x1"}))
    assert m["bound"] == "compute" and m["comm_s"] == 0
    assert 0 < m["model_error_pct"] < 5


@pytest.mark.parametrize(
    ("kind", "kw", "label"),
    [
        ("tpu-matmul", dict(topology="16x1", sharding="contracting", i=64, j=8192, k=4096),
         "communication"),
        ("tpu-matmul", dict(topology="1x1", sharding="none", i=64, j=2048, k=2048), "memory"),
        ("tpu-matmul", dict(topology="1x1", sharding="none", i=4096, j=2048, k=2048), "compute"),
        ("tpu-collective", dict(op="allgather", bytes=1024 * 16), "latency"),
        ("tpu-collective", dict(op="allgather", bytes=64 << 20), "bandwidth"),
    ],
)  # fmt: skip
def test_every_kinds_bound_label_names_its_larger_time(kind, kw, label):
    """The other kinds' bound labels (their models'): a matmul's names the larger of its compute
    (its roofline's compute or memory) and its communication; a collective's the larger of its
    latency and bandwidth terms."""
    from runner import registry

    k = registry.KINDS[kind]
    m = k.model(cfg.load(k.params, {**kw, "payload": "size"}))
    assert m["bound"] == label
    if kind == "tpu-matmul":
        assert (m["comm_s"] > m["compute_s"]) == (label == "communication")
    else:
        assert (m["latency_term_s"] >= m["bandwidth_term_s"]) == (label == "latency")
