"""gpt-ws: weight-streamed GPT training on MemoryX, SwarmX and CS-2s.

Functional checks (the weights MemoryX holds after one simulated step equal a numpy reference
of the same data-parallel step, SGD and Adam, at wafer and PE fidelity), size-only runs timed
like data-carrying ones, the plan, model vs simulation, traces, determinism and every bad-input
message, verbatim."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from app.cli import main
from cs2 import calibration as cal
from cs2.plan import PlanConfig, build_plan, split
from runner import scenario
from simcore import config as cfg
from simcore.sim import Simulation
from simcore.tracing import ListTracer, TraceLevel
from wafer.programs.wscommon import WsMatmulParams
from workloads.cluster import gptws
from workloads.cluster.model import model_flops, step_model
from workloads.cluster.validation import sparse_reference_rows

TINY = dict(model="custom", layers=2, hidden=16, sequence=8, vocab=32, heads=2, batch=1, steps=1)


def params(**kw):
    return cfg.load(gptws.GptWsParams, {**TINY, **kw})


def run(p, tracer=None):
    sim = Simulation(seed=p.seed, tracer=tracer)
    c = gptws.build(sim, p)
    result = sim.run()
    assert result.status == "completed", result.report
    return sim, c, gptws.metrics(sim, p, c, result)


# -- function ------------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("systems", [1, 2, 5])
def test_one_step_equals_the_numpy_data_parallel_reference(optimizer, systems):
    p = params(systems=systems, functional=True, chunk_bytes=1024,
               memoryx={"optimizer": optimizer})  # fmt: skip
    _, _, m = run(p)
    assert m["correct"], m
    assert m["max_weight_change"] > 1e-4  # the step moved the weights


def test_sparse_weights_stay_sparse_and_match_the_reference():
    p = params(systems=2, functional=True, sparsity=0.5, chunk_bytes=1024)
    _, c, m = run(p)
    assert m["correct"], m
    w = c.memx.data["l0.fc1"].dense
    assert np.all(w.w[~w.mask] == 0) and w.mask.mean() == 0.5


def test_regrowth_requests_every_gradient_and_grows_the_mask():
    p = params(systems=2, functional=True, sparsity=0.5, memoryx={"regrow_threshold": 1e-3})
    _, c, m = run(p)
    assert m["correct"], m
    t = c.memx.data["l0.fc1"]
    assert t.dense.mask.mean() > 0.5 and np.array_equal(t.csr.mask, t.dense.mask)


@pytest.mark.parametrize("optimizer", [pytest.param("sgd", marks=pytest.mark.slow), "adam"])
def test_pe_fidelity_step_equals_the_reference(optimizer):
    p = params(layers=1, hidden=8, sequence=4, vocab=16, systems=2, fidelity="pe",
               cs2={"pe_px": 2, "pe_py": 2}, memoryx={"optimizer": optimizer})  # fmt: skip
    _, _c, m = run(p)
    assert m["correct"], m
    assert m["pe_runs"] == 2 * 15  # per system: 5 matrices x (fwd, bwd, wgrad)
    # and per system 9 programs without streamed weights: attention, its backward, the loss,
    # 2 residual adds and GELU forward, GELU' and 2 residual adds backward
    assert m["pe_side_runs"] == 2 * 9
    assert set(m["pe_side_cycles"]) == {"attention", "attention-grad", "loss", "add", "gelu",
                                        "gelu-grad"}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_two_layer_tiny_gpt_on_an_8x8_sub_array(optimizer):
    p = params(systems=2, fidelity="pe", chunk_bytes=1024, memoryx={"optimizer": optimizer})
    _, _, m = run(p)
    assert m["correct"], m


def test_two_steps_train_the_model():
    first = run(params(systems=2, functional=True, memoryx={"lr": 0.5}))[2]["loss"]
    two = params(systems=2, functional=True, steps=2, memoryx={"lr": 0.5})
    _, c, _ = run(two)
    assert sum(f.loss for f in c.functions) < first  # the loss of the second step


# -- timing --------------------------------------------------------------------------------------
def test_size_only_runs_take_the_same_time_as_data_carrying_ones():
    keys = ("time_s", "exposed_latency_s", "swarmx_link_utilisation", "run_time_s")
    sized = run(params(systems=3, steps=2))[2]
    real = run(params(systems=3, steps=2, functional=True))[2]
    assert {k: sized[k] for k in keys} == {k: real[k] for k in keys}


def test_model_predicts_step_time_and_exposed_latency():
    p = cfg.load(gptws.GptWsParams, dict(model="gpt2-xl", systems=8, batch=4))
    _, _, m = run(p)
    mod = step_model(p)
    assert m["time_s"] == pytest.approx(mod["time_s"], rel=0.01)
    assert abs(m["exposed_latency_s"] - mod["exposed_latency_s"]) < 1e-3
    assert mod["latency_hidden"]


@pytest.mark.parametrize("hidden, batch, chunk", [(1024, 2, 128 * 2**20), (2048, 4, 16 * 2**20)])
def test_model_walks_the_links_chunk_by_chunk(hidden, batch, chunk):
    """A step boundary bound by the embedding's bandwidth: the wafer gathers its rows almost
    for free and waits for each; what it waits for is set by the chunks each stage and link
    holds on the way down, which the model walks stage by stage."""
    p = cfg.load(gptws.GptWsParams, dict(model="custom", layers=2, hidden=hidden, sequence=512,
                                         vocab=50257, heads=8, batch=batch, systems=4,
                                         chunk_bytes=chunk))  # fmt: skip
    _, _, m = run(p)
    mod = step_model(p)
    assert m["exposed_latency_s"] > 1e-3
    assert m["exposed_latency_s"] == pytest.approx(mod["exposed_latency_s"], rel=1e-4)


def test_sparsity_cuts_streamed_bytes_and_step_time_nearly_linearly():
    def gpt3(sparsity):
        return run(cfg.load(gptws.GptWsParams, dict(model="gpt3-175b", batch=8, steps=1,
                                                     sparsity=sparsity)))[2]  # fmt: skip

    dense, sparse = gpt3(0.0), gpt3(0.75)
    assert 0.25 < sparse["time_s"] / dense["time_s"] < 0.35
    # a non-zero costs 4 B (FP16 value, 16-bit index) and 2 B of gradient request
    assert sparse["memoryx_stream_bytes_per_step"] < 0.65 * dense["memoryx_stream_bytes_per_step"]


@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.75, 0.9])
def test_counted_flops_equal_the_formula(sparsity):
    """The FLOPs the CS-2 counts from the work it is sent are the formula's 6·tokens·P + attention
    (forward: 2·tokens·P + attention): exactly, at a width where every row keeps
    density x width non-zeros."""
    p = params(hidden=160, sequence=16, vocab=128, sparsity=sparsity)
    _, _, m = run(p)
    tokens, shape = p.seqs() * 16, p.shape()
    rel = 1e-12
    assert m["train_flops_per_step"] == pytest.approx(model_flops(shape, tokens, 1 - sparsity),
                                                      rel=rel)  # fmt: skip
    assert m["forward_flops_per_step"] == pytest.approx(
        model_flops(shape, tokens, 1 - sparsity, forward=True), rel=rel
    )
    assert m["wafer_utilisation"] == pytest.approx(
        m["train_flops_per_step"] / (m["time_s"] * 750 * 994 * 2 * 850e6)
    )


def test_sparse_flops_match_the_published_gpt3_xl_reference_points():
    rows = sparse_reference_rows(lambda kind, points: [run(q)[2] for q in points])
    assert [round(r.model, 1) for r in rows] == [2.5, 3.0]
    for r in rows:
        assert abs(r.error_pct) < 1.0, r


def test_layer_weights_of_the_next_step_stream_before_the_backward_pass_ends():
    p = params(systems=2, steps=2, layers=3, chunk_bytes=2048)
    tracer = ListTracer(TraceLevel.OPS)
    _sim, _c, _ = run(p, tracer)
    reads = [e for e in tracer.events if e["component"] == "memoryx/reader"]
    first_next = min(e["ts_ticks"] for e in reads if e["args"]["step"] == 1)
    computes = [e for e in tracer.events if e["component"] == "cs2/cs2[0]"
                and e["category"] == "compute" and e["args"]["step"] == 0]  # fmt: skip
    assert first_next < max(e["ts_ticks"] + e["dur_ticks"] for e in computes)


def check_against_pe(points):
    for flavour, cost in (("fwd", cal.FWD), ("wgrad", cal.WGRAD)):
        for point in points:
            r, c, t, px, py, d = point
            m = scenario.run_kind("ws-matmul", WsMatmulParams(
                flavour=flavour, rows=r, cols=c, tokens=t, px=px, py=py, density=d))  # fmt: skip
            model = cal.model_cycles(cost, r, c, t, px, py, m["nnz"])
            assert abs(model - m["cycles"]) / m["cycles"] < 0.15, (flavour, point)


def test_wafer_level_model_against_a_fresh_pe_run():
    """The row model (fitted MAPE 12.1 % fwd, 3.4 % wgrad) on a fresh PE-level run."""
    check_against_pe([cal.POINTS[0]])


@pytest.mark.slow
def test_wafer_fidelity_step_matches_pe_fidelity_on_the_same_array():
    """A 1-layer tiny GPT on a 4x4 array: the step at PE level (every product, attention,
    loss and epilogue a cycle-level run) and at wafer level (the calibrated models on a 4x4
    array) agree within 15 % (measured: 119.1 us vs 115.6 us, -3.0 %)."""
    same = dict(layers=1, batch=2, cs2={"pe_px": 4, "pe_py": 4,
                                         "compute": {"pe_columns": 4, "pe_rows": 4}})  # fmt: skip
    pe = run(params(fidelity="pe", **same))[2]
    wafer = run(params(fidelity="wafer", **same))[2]
    assert pe["correct"]
    assert abs(wafer["time_s"] - pe["time_s"]) / pe["time_s"] < 0.15


@pytest.mark.slow
def test_wafer_level_model_against_fresh_pe_runs():
    """Dense calibration points re-run at PE level: within 15 % (sparse rows on wide arrays
    err most, up to -32 %)."""
    check_against_pe([cal.POINTS[0], cal.POINTS[7], cal.POINTS[10]])


# -- plan ----------------------------------------------------------------------------------------
def test_split_keeps_aligned_boundaries():
    assert split(48, 2, 8) == [(0, 24), (24, 48)]
    assert split(10, 4, 1) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert split(8, 5, 8) == [(0, 8)]


def test_plan_streams_forward_then_backward_and_returns_every_row_once():
    p = params(steps=2, chunk_bytes=1024)
    plan = build_plan(p.shape(), p.plan_config())
    for step in (0, 1):
        grads = [e for e in plan if e.step == step and e.returns_gradient]
        for name, r, _ in p.shape().tensors():
            rows = sorted((e.glo, e.ghi) for e in grads if e.tensor == name)
            assert rows[0][0] == 0 and rows[-1][1] == r
            assert all(a[1] == b[0] for a, b in itertools.pairwise(rows))
    step1 = [e for e in plan if e.step == 1 and e.pass_ == "fwd" and e.tensor]
    assert all(e.needs for e in step1)
    dense = build_plan(p.shape(), PlanConfig(1, 1.0, 10**9))
    qkv = next(e for e in dense if e.tensor == "l0.qkv" and e.pass_ == "fwd")
    assert qkv.stream_bytes == 48 * 16 * 2 + 64  # FP16 values and the command


# -- traces and determinism ----------------------------------------------------------------------
def test_trace_shows_streams_updates_links_and_each_systems_layers():
    tracer = ListTracer(TraceLevel.OPS)
    run(params(systems=4, steps=2), tracer)
    seen = {(e["component"].split("[")[0], e["category"]) for e in tracer.events}
    for want in [("memoryx/reader", "memoryx"), ("memoryx/io", "stream"),
                 ("memoryx/updater", "update"), ("swarmx/node", "swarmx"),
                 ("cs2/cs2", "compute"), ("cs2/cs2", "stream")]:  # fmt: skip
        assert want in seen, want
    systems = {e["component"] for e in tracer.events if e["category"] == "compute"}
    assert systems == {f"cs2/cs2[{k}]" for k in range(4)}


def test_same_seed_same_trace():
    def events():
        t = ListTracer(TraceLevel.OPS)
        run(params(systems=3, steps=2, functional=True), t)
        return t.events

    assert events() == events()


# -- the command line ----------------------------------------------------------------------------
def cli(capsys, *sets):
    argv = ["run", "gpt-ws", "--quiet", "--json"]
    for s in sets:
        argv += ["--set", s]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_issue_command_prints_the_fixed_keys(capsys):
    code, out, _ = cli(capsys, "model=gpt2-xl", "systems=16", "sparsity=0.0")
    assert code == 0
    data = json.loads(out)
    for key in ("time_s", "tokens_per_s", "wafer_utilisation", "memoryx_bytes",
                "swarmx_link_utilisation", "exposed_latency_s", "scaling_efficiency"):  # fmt: skip
        assert isinstance(data[key], float | int), key
    assert 0.95 < data["scaling_efficiency"] <= 1.0


def test_model_command_prints_the_requirements(capsys):
    assert main(["model", "gpt-ws", "--set", "model=gpt3-175b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["train_flops"] == pytest.approx(6 * 3e11 * 1.75e11)
    assert data["one_week_pflops"] == pytest.approx(6 * 3e11 * 1.75e11 / 604_800 / 1e15)
    assert data["memoryx_bytes"] == pytest.approx(20 * 1.75e11)
    assert data["interconnect_bits_per_s"] == pytest.approx(1.75e11 * 3e11 / 3.2e6 * 32 / 604_800)


BAD = [
    (["model=gpt4"], "config key 'model' = 'gpt4': not an allowed choice; allowed: 'gpt2-xl', "
     "'megatron-8.3b', 'turing-nlg', 'gpt3-175b', 'mt-nlg-530b', 'custom'"),
    (["systems=0"], "config key 'systems' = 0: out of range; allowed: 1 .. 1024; change systems"),
    (["systems=-3"], "config key 'systems' = -3: out of range; allowed: 1 .. 1024; change "
     "systems"),
    (["sparsity=1.0"], "config key 'sparsity' = 1.0: must be in [0, 1); allowed: [0, 1); "
     "sparsity is the fraction of zero weights: 0 is dense, 0.9 keeps one weight in ten"),
    (["model=mt-nlg-530b", "memoryx.flash_bytes=0"], "config key 'memoryx.flash_bytes' = 0: the "
     "model needs 10,611,589,120,000 B in MemoryX (530,579,456,000 parameters x 20 B) but "
     "MemoryX holds 4,000,000,000,000 B (memoryx.dram_bytes = 4,000,000,000,000 + "
     "memoryx.flash_bytes = 0); raise memoryx.flash_bytes or memoryx.dram_bytes to at least "
     "10,611,589,120,000 B in total, or choose a smaller model"),
    (["model=custom", "layers=1", "hidden=256", "sequence=64", "vocab=256", "heads=2", "batch=1",
      "fidelity=pe", "cs2.pe_px=2", "cs2.pe_py=2"], "config key 'fidelity' = 'pe': the largest "
     "layer (width 1024) needs 133,376 B per PE on a 2x2 sub-array but a PE has 47,104 B beside "
     "the code; use a larger sub-array (cs2.pe_px, cs2.pe_py), a smaller model, or fidelity = "
     "'wafer'"),
    (["model=custom", "layers=1", "hidden=12", "sequence=8", "vocab=32", "heads=2", "batch=1",
      "fidelity=pe"], "config key 'cs2.pe_px' = 8: PE fidelity splits every matrix dimension "
     "over cs2.pe_px = 8 columns and the 8 tokens per system over cs2.pe_py = 8 rows; "
     "dimension(s) 12, 36 do not divide; choose a sub-array whose sides divide them"),
    (["model=custom", "layers=1", "hidden=16", "sequence=256", "vocab=32", "heads=1", "batch=1",
      "fidelity=pe"], "config key 'fidelity' = 'pe': the attention-grad program needs 105,476 B "
     "of data per PE on a 8x8 sub-array but a PE has 47,104 B beside the code; use a larger "
     "sub-array (cs2.pe_px, cs2.pe_py), a shorter sequence, a smaller model, or fidelity = "
     "'wafer'"),
    (["model=gpt3-175b", "batch=64"], "config key 'batch' = 64: the stored activations need "
     "309,237,645,312 B but a wafer holds 40,000,000,000 B (cs2.sram_bytes); lower batch (or 0 "
     "for the largest that fits)"),
]  # fmt: skip


@pytest.mark.parametrize(("sets", "message"), BAD)
def test_bad_input_gets_one_clear_message(capsys, sets, message):
    code, out, err = cli(capsys, *sets)
    assert (code, out) == (2, "")
    assert err == f"wafersim: error: {message}\n"
