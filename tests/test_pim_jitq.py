"""JIT-Q: the bits the PIM units leave in the banks are the reference quantizer's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import cli
from numerics import mx
from numerics.floats import bf16_bits, fp32_bits
from pim import jitq
from pim.stack import HbmConfig, HbmStack
from runner import scenario
from runner.scenario import run_kind
from simcore import Simulation
from simcore.errors import ConfigError
from simcore.tracing import TraceLevel
from traces.reader import read_trace
from workloads.pim.jitq import JitqParams, model, planes_of

COMBOS = [
    (f, p, d) for f in jitq.FORMATS for p in jitq.PLACEMENTS for d in jitq.DIRECTIONS
]  # fmt: skip
#: Strided placements fill a 256-word super-tile per unit whatever the size: a second each.
SWEEP = [
    pytest.param(*c, marks=pytest.mark.slow) if c[1] != "tiled" else c
    for c in COMBOS
]  # fmt: skip


def quantize_on_pim(bits: np.ndarray, fmt: str, placement: str, direction: str):
    """One pseudo-channel holding all the units' data (a 1-pCH stack): codes, scale, pch."""
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(), pchs=1)
    pch = stack.pchs[0]
    planes = 2 if bits.dtype == np.uint32 else 1
    lay = jitq.make_layout(*bits.shape, placement, direction, stack.std.org, 1, planes)
    plan = jitq.compile_jitq(
        lay, fmt, batch_groups=3, conf_row=pch.row_conf, abmr_row=pch.row_abmr,
        sbmr_row=pch.row_sbmr,
    )  # fmt: skip
    jitq.load(pch, lay, [lay.scatter(b) for b in planes_of(bits)])
    stack.controllers[0].submit_stream(plan.stream)
    assert sim.run().status == "completed"
    codes, scale = jitq.read_back(pch, lay)
    return lay.gather(codes), lay.gather(scale), pch


def reference(bits, fmt, direction):
    return mx.lanes(mx.quantize_matrix(bits, fmt, direction), bits.shape, direction)


SPECIAL_BITS = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80, 0xBFFF]


@st.composite
def matrices(draw, max_tiles: int = 3):
    tr, tc = draw(st.integers(1, max_tiles)), draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    vals = rng.standard_normal((16 * tr, 16 * tc)) * np.exp2(rng.integers(-20, 20, (16 * tr, 1)))
    bits = bf16_bits(vals.astype(np.float32))
    if draw(st.booleans()):  # zeros, subnormals, extremes, ties
        mask = rng.random(bits.shape) < 0.2
        bits[mask] = rng.choice(np.array(SPECIAL_BITS, np.uint16), mask.sum())
    return bits


@pytest.mark.parametrize("fmt,placement,direction", SWEEP)
def test_every_format_placement_and_direction_is_bit_exact(fmt, placement, direction):
    rng = np.random.default_rng(7)
    vals = rng.standard_normal((32, 16)) * np.exp2(rng.integers(-9, 9, (32, 16)))
    vals[rng.random((32, 16)) < 0.1] = 0.0
    bits = bf16_bits(vals.astype(np.float32))
    codes, scale, pch = quantize_on_pim(bits, fmt, placement, direction)
    want_codes, want_scale = reference(bits, fmt, direction)
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scale, want_scale)
    assert pch.mode == "SB" and all(r < 0 for r in pch.open)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # fmt: skip
@given(matrices(), st.sampled_from(COMBOS), st.booleans())
def test_random_tensors_quantize_to_the_reference_bits(bits, combo, fp32):
    fmt, placement, direction = combo
    if fp32:  # the BF16 values with random low halves: ties, sticky bits, FP32 subnormals
        rng = np.random.default_rng(int(bits.sum()))
        low = rng.integers(0, 1 << 16, bits.shape, dtype=np.uint32)
        low[rng.random(bits.shape) < 0.5] = 0
        bits = (bits.astype(np.uint32) << 16) | low
    codes, scale, _ = quantize_on_pim(bits, fmt, placement, direction)
    want_codes, want_scale = reference(bits, fmt, direction)
    assert np.array_equal(codes, want_codes) and np.array_equal(scale, want_scale), combo


@pytest.mark.parametrize("placement,direction", [("tiled", "row"), ("tiled", "col")])
def test_fp32_master_weights_are_bit_exact(placement, direction):
    rng = np.random.default_rng(11)
    vals = rng.standard_normal((32, 32)) * np.exp2(rng.integers(-9, 9, (32, 32)))
    vals[rng.random((32, 32)) < 0.1] = 0.0
    vals[0, :4] = [1.0 + 2**-9, 1.0 + 2**-8 + 2**-20, 2.0**-140, -(1.0 + 2**-8)]  # sticky ties
    bits = fp32_bits(vals.astype(np.float32))
    for fmt in jitq.FORMATS:
        codes, scale, _ = quantize_on_pim(bits, fmt, placement, direction)
        want_codes, want_scale = reference(bits, fmt, direction)
        np.testing.assert_array_equal(codes, want_codes)
        np.testing.assert_array_equal(scale, want_scale)


def test_the_fp32_kernel_reads_the_low_halves():
    m = run_kind("jitq", JitqParams(rows=64, cols=64, master="fp32", format="mx9"))
    b = run_kind("jitq", JitqParams(rows=64, cols=64, master="bf16", format="mx9"))
    assert m["correct"] and m["cycles"] > b["cycles"]
    assert m["commands_per_pch"]["pim_triggers"] > b["commands_per_pch"]["pim_triggers"]


def test_programs_fit_the_crf_and_use_the_extensions_they_claim():
    lay = jitq.make_layout(16, 16, "tiled", "row", _org(), pchs=1)
    plan = jitq.compile_jitq(lay, "mx6", conf_row=1, abmr_row=3, sbmr_row=2)
    ops = {i.op for prog in plan.phases for i in prog}
    assert all(len(prog) <= 32 for prog in plan.phases)
    assert {"LSHIFT", "CMP", "MAX", "BSHIFT"} <= ops
    lay = jitq.make_layout(16, 16, "opt", "col", _org(), pchs=1)
    plan = jitq.compile_jitq(lay, "mx6", conf_row=1, abmr_row=3, sbmr_row=2)
    assert "LSHIFT" not in {i.op for prog in plan.phases for i in prog}


def _org():
    return HbmConfig().standard().org


def test_two_fidelities_give_one_answer():
    base = dict(rows=32, cols=64, placement="tiled", direction="col", format="mx4")
    one = run_kind("jitq", JitqParams(fidelity="pch", **base))
    full = run_kind("jitq", JitqParams(fidelity="stack", **base))
    assert one["correct"] and full["correct"] and full["simulated_pchs"] == 32
    for key in ("time_s", "cycles", "commands", "row_activations", "pch_bus_utilisation"):
        assert one[key] == full[key], key


@pytest.mark.parametrize(
    "master,direction",
    [
        ("bf16", "col"),
        ("fp32", "row"),
        *(pytest.param(*c, marks=pytest.mark.slow) for c in (("bf16", "row"), ("fp32", "col"))),
    ],
)
def test_row_major_tiles_wrap_into_strips_bit_exact(direction, master):
    """34 tiles a unit: two strips of a DRAM row's width (BF16: 32 words) or three (FP32: 16),
    the last partly filled; groups of the row direction then straddle DRAM rows."""
    rng = np.random.default_rng(3)
    vals = rng.standard_normal((17 * 16, 256)) * np.exp2(rng.integers(-9, 9, (17 * 16, 256)))
    bits = bf16_bits(vals.astype(np.float32))
    if master == "fp32":
        bits = (bits.astype(np.uint32) << 16) | rng.integers(0, 1 << 16, bits.shape, np.uint32)
    codes, scale, _ = quantize_on_pim(bits, "mx4", "tiled", direction)
    want_codes, want_scale = reference(bits, "mx4", direction)
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scale, want_scale)


#: 16 tiles a unit (1024 x 1024 on one stack): no padding (one strided super-tile), a strip of
#: 16 tiles per DRAM row.
COST_SIZE = dict(rows=1024, cols=1024)


@pytest.fixture(scope="module")
def costs() -> dict:
    return {
        (pl, d): run_kind("jitq", JitqParams(placement=pl, direction=d, **COST_SIZE))
        for pl in jitq.PLACEMENTS
        for d in jitq.DIRECTIONS
    }


def test_kernels_contain_the_instructions_of_their_placement(costs):
    """Counts per instruction class, per word of the unit (one word = 16 elements), as
    docs/pim/design.md derives them: the study's tiled rows reduce E_max by 15 one-lane
    shifts down and align it by 15 up, plus one pair swap (31 laneSHIFTs a word); the butterfly
    variant needs 4 + 1; column blocks and strided tiles none. The 3-command variable shift
    (CMP, masked bitSHIFT, ADD) of 8 steps becomes 8 counter bitSHIFTs with opt."""
    words = 1024 * 1024 // 16 // 256  # per unit (a trigger runs in every unit at once)
    cls = {k: v["commands_per_pch"]["pim_by_class"] for k, v in costs.items()}
    per_word = {k: {c: n / words for c, n in v.items()} for k, v in cls.items()}
    assert all(v["correct"] for v in costs.values())
    assert per_word["tiled", "row"]["laneSHIFT"] == 31
    assert per_word["tiled-butterfly", "row"]["laneSHIFT"] == 5
    for k in (("tiled", "col"), ("strided", "row"), ("strided", "col"), ("opt", "row")):
        assert per_word[k]["laneSHIFT"] == 0, k
    # one MAX a reduction step, with the tiles unpacked: every word pays its own
    assert per_word["tiled", "row"]["MAX/CMP"] - per_word["tiled-butterfly", "row"]["MAX/CMP"] == 26
    # MAX: 30 reduction steps, the pair, k's floor; CMP: mu, k's floor, 8 shift steps, 3 to
    # round. Strided: a pair's MAX and E_max's MAX and mu's CMP serve two words.
    assert per_word["tiled", "row"]["MAX/CMP"] == 32 + 13
    assert per_word["strided", "row"]["MAX/CMP"] == per_word["strided", "col"]["MAX/CMP"] == 14.5
    # the variable shift: 8 x (CMP, bitSHIFT, ADD) -> 8 x bitSHIFT
    s, o = per_word["strided", "row"], per_word["opt", "row"]
    assert s["MAX/CMP"] - o["MAX/CMP"] == 8 and s["ADD"] - o["ADD"] == 8
    assert s["bitSHIFT"] == o["bitSHIFT"]
    shift = {k: v["commands_per_pch"]["shift_related"]["total"] for k, v in costs.items()}
    assert shift["opt", "row"] < shift["strided", "row"] < shift["tiled", "row"]


def test_placements_and_directions_differ_in_rows_and_time(costs):
    """Row-major tiles put a column block's 16 words in 16 DRAM rows; strided super-tiles in 8:
    column quantization opens more rows, and with it takes longer. The study's order of time:
    tiled > strided > opt in both directions, and every run's time split into shift-related
    and other."""
    act = {k: v["row_activations"] for k, v in costs.items()}
    t = {k: v["time_s"] for k, v in costs.items()}
    assert act["tiled", "col"] > 4 * act["tiled", "row"]
    assert act["strided", "col"] > 2 * act["strided", "row"]
    assert act["opt", "col"] > 2 * act["opt", "row"]
    for d in jitq.DIRECTIONS:
        assert t["tiled", d] > t["strided", d] > t["opt", d], d
    for pl in ("strided", "opt"):
        assert t[pl, "col"] > t[pl, "row"], pl
    for v in costs.values():
        assert 0 < v["shift_time_s"] < v["time_s"]
        assert v["shift_time_s"] + v["other_time_s"] == pytest.approx(v["time_s"])
    shift = {k: v["shift_time_s"] for k, v in costs.items()}
    assert shift["tiled", "row"] > shift["strided", "row"] > shift["opt", "row"]


def test_the_model_orders_opt_below_strided():
    p = {pl: JitqParams(rows=256, cols=256, placement=pl) for pl in ("strided", "opt")}
    assert model(p["opt"])["cycles"] < model(p["strided"])["cycles"]


def test_model_is_close_to_the_simulation():
    for placement, direction in (("tiled", "row"), ("strided", "col"), ("opt", "row")):
        m = run_kind("jitq", JitqParams(rows=64, cols=64, placement=placement, direction=direction))
        assert abs(m["model_error_pct"]) < 2, (placement, direction, m["model_error_pct"])


def test_the_issue_command_prints_the_fixed_keys(capsys):
    argv = ["run", "jitq", "--set", "format=mx6", "--set", "placement=tiled", "--set",
            "direction=row", "--set", "rows=256", "--set", "cols=256", "--set", "master=bf16",
            "--json", "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["correct"] is True
    for key in ("time_s", "commands", "row_activations", "pch_bus_utilisation"):
        assert key in out
    assert {"ACT", "RD", "WR", "pim_triggers", "shift_related"} <= set(out["commands"])
    assert out["row_activations"] == out["commands"]["ACT"]


@pytest.mark.parametrize(
    "sets,message",
    [
        (["format=mx5"], "config key 'format' = 'mx5': not an allowed choice; allowed: 'mx9', "
         "'mx6', 'mx4'"),
        (["placement=diag"], "config key 'placement' = 'diag': not an allowed choice; allowed: "
         "'tiled', 'strided', 'opt'"),
        (["rows=100"], "config key 'rows' = 100: does not tile into 16-element MX blocks (the "
         "kernel refuses, it does not pad); pad the tensor to a multiple of 16"),
        (["rows=1048576", "cols=65536"], "config key 'rows' = 1048576: a 1048576 x 65536 BF16 "
         "tensor needs 1,048,576 rows per bank but a bank has 32,765 data rows (one odd-bank "
         "row per group of 256 elements: at most 2,147,287,040 elements in the stacks); use a "
         "smaller tensor or more stacks (hbm.stacks)"),
    ],
)  # fmt: skip
def test_bad_input_is_a_clear_error(capsys, sets, message):
    argv = ["run", "jitq", "--quiet"]
    for s in sets:
        argv += ["--set", s]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_make_layout_errors_name_the_key():
    with pytest.raises(ConfigError) as err:
        jitq.make_layout(16, 16, "tiled", "diagonal", _org(), pchs=1)
    assert str(err.value) == (
        "config key 'direction' = 'diagonal': unknown direction; allowed: row, col"
    )


def test_traces_have_bank_tracks_bus_counters_and_pim_programs(tmp_path):
    scen = scenario.find("jitq")
    params = scenario.resolve_params(scen, ["rows=32", "cols=32"])
    path = tmp_path / "jitq.arrows"
    scenario.run_scenario(scen, params, trace_path=str(path), trace_level=TraceLevel.DETAIL)
    events = read_trace(path).table
    comps = set(events.column("component").to_pylist())
    assert {"hbm/pch[0]/bank[0]", "hbm/pch[0]/bank[15]", "hbm/pch[0]/pim"} <= comps
    names = set(events.column("name").to_pylist())
    assert {"bus_utilisation", "pim_triggers", "exponents+scales", "significands"} <= names


def test_same_seed_same_trace_bytes(tmp_path):
    paths = []
    for i in range(2):
        scen = scenario.find("jitq")
        params = scenario.resolve_params(scen, ["rows=32", "cols=32", "direction=col"])
        path = tmp_path / f"run{i}.arrows"
        scenario.run_scenario(scen, params, trace_path=str(path), trace_level=TraceLevel.DETAIL)
        paths.append(path)
    a, b = (read_trace(p).table for p in paths)
    assert a.equals(b) and a.num_rows > 1000


def test_plot_jitq_breakdown_draws_every_placement_and_direction(tmp_path, capsys, costs):
    """The plot runs the jitq scenario with the overrides at every placement and direction
    (here the runs of ``costs``, handed back by the runner it is given) and draws each."""
    from app.plots import plot_jitq_breakdown

    asked = []

    def runner(kind, points):
        asked.extend((kind, p.placement, p.direction, p.rows, p.cols) for p in points)
        return [costs[p.placement, p.direction] for p in points]

    sets = [f"rows={COST_SIZE['rows']}", f"cols={COST_SIZE['cols']}"]
    runs = plot_jitq_breakdown(str(tmp_path / "c.svg"), sets, runner)
    assert (tmp_path / "c.svg").stat().st_size > 0
    want = [("jitq", pl, d, 1024, 1024) for pl in jitq.PLACEMENTS for d in jitq.DIRECTIONS]
    assert asked == want and len(runs) == len(want)
    out = tmp_path / "b.png"
    assert cli.main(["plot", "jitq-breakdown", "--set", "rows=17", "-o", str(out)]) == 2
    assert "rows" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("master", ("bf16", "fp32"))
def test_the_matrix_drawn_in_strips_is_the_matrix_drawn_whole(monkeypatch, master):
    """The seeded master matrix: the draws as whole-matrix calls (normals, exponents, zeros),
    converted at once; matrix() draws and converts in strips of rows."""
    import workloads.pim.jitq as wj

    p = JitqParams(rows=96, cols=48, master=master, seed=3)
    rng = np.random.default_rng([p.seed, 12])
    vals = rng.standard_normal((p.rows, p.cols)) * np.exp2(rng.integers(-8, 8, (p.rows, p.cols)))
    vals[rng.random((p.rows, p.cols)) < p.zero_fraction] = 0.0
    f = vals.astype(np.float32)
    want = fp32_bits(f) if master == "fp32" else bf16_bits(f)
    monkeypatch.setattr(wj, "MATRIX_STRIP_ELEMENTS", 48 * 5)  # strips of 5 rows and a rest
    assert np.array_equal(wj.matrix(p), want)


def test_a_run_compiles_its_plan_once_and_a_reused_plan_changes_nothing():
    """The progress display's model, the build and the metrics' model share one compiled plan
    and its static counts (workloads.pim.jitq keeps the last one); the seed is not part of it.
    A run after the plan was compiled for its display gives what a run from scratch gives."""
    from workloads.pim import jitq as work

    p = JitqParams(rows=64, cols=64, placement="tiled", direction="col")
    stack = HbmStack(Simulation(), p.hbm, pchs=1)
    work._LAST_PLAN.clear()
    work._LAST_COUNTS.clear()
    fresh = run_kind("jitq", p)
    _, plan = work.plan_for(p, stack)
    assert work.plan_for(JitqParams(rows=64, cols=64, placement="tiled", direction="col",
                                    seed=7), stack)[1] is plan  # fmt: skip
    assert work.plan_for(JitqParams(rows=64, cols=128, placement="tiled", direction="col"),
                         stack)[1] is not plan  # fmt: skip
    modelled = model(p)  # compiles p's plan again (the cache held the other one), keeps it
    again = run_kind("jitq", p)
    assert again == fresh and modelled["cycles"] == fresh["model_cycles"]
