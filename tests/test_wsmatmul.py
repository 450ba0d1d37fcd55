"""ws-matmul (weight-streamed sparse matmul: fwd, bwd, wgrad): the products are right, zeros
never travel, cycles grow with the non-zeros, the models agree, the CLI reports what the issue
asks for."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from fabric.wavelet import Wavelet
from runner import registry
from runner.scenario import Scenario, run_points, run_scenario
from simcore import config as cfg
from simcore.errors import ConfigError
from wafer.programs import wscommon, wsfwd, wsgrad

#: A scenario file's text, to run the CLI on a path rather than a built-in name.
SCENARIO = """kind = "ws-matmul"
description = "weight-streamed sparse matmul X1 = X0·W^T: non-zeros of W stream in from the edge"
flavour = "fwd"
rows = 32
cols = 32
tokens = 32
density = 0.25
px = 4
py = 2
"""

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_ws(**kw):
    params = cfg.load(wscommon.WsMatmulParams, kw)
    scen = Scenario("ws-matmul", "<test>", registry.KINDS["ws-matmul"], "", {})
    return run_scenario(scen, params).metrics


@FAST
@given(
    px=st.integers(1, 3),
    py=st.integers(1, 3),
    f0=st.integers(1, 3),
    f1=st.integers(1, 3),
    bt=st.integers(1, 4),
    density=st.sampled_from([0.05, 0.3, 0.7, 1.0]),
    seed=st.integers(0, 2**32),
    flavour=st.sampled_from(["fwd", "bwd", "wgrad"]),
)
def test_product_matches_numpy(px, py, f0, f1, bt, density, seed, flavour):
    m = run_ws(
        rows=f1 * px, cols=f0 * px, tokens=bt * py, px=px, py=py, density=density, seed=seed,
        flavour=flavour,
    )  # fmt: skip
    assert m["correct"], m["max_abs_error"]


def test_bwd_streams_the_transpose_and_computes_dx1_times_w():
    p = wscommon.WsMatmulParams(flavour="bwd", rows=12, cols=8, tokens=4, px=4, py=1, seed=5)
    q, dx1, m = wsfwd.lowered(p)
    _, w = wscommon.inputs(p)
    assert (q.rows, q.cols) == (8, 12) and dx1.shape == (4, 12)
    np.testing.assert_array_equal(m, w.T)
    out = run_ws(flavour="bwd", rows=12, cols=8, tokens=4, px=4, py=1, seed=5)
    assert out["correct"] and out["flavour"] == "bwd" and out["nnz"] == np.count_nonzero(w)


def test_rows_end_with_fsum_to_the_owner_and_psum_to_the_others():
    p = wscommon.WsMatmulParams(rows=8, cols=8, tokens=4, px=4, py=1, density=0.3, seed=3)
    _, w = wscommon.inputs(p)
    for x in range(p.px):
        stream = wsfwd.column_stream(p, w, x)
        commands = [item.task_id for item in stream if isinstance(item, Wavelet)]
        assert all(item.ctrl for item in stream if isinstance(item, Wavelet))
        owners = [wscommon.owner(p, r) for r in range(p.rows)]
        assert commands == [wsfwd.FSUM if o == x else wsfwd.PSUM for o in owners]


def test_only_non_zeros_travel():
    p = wscommon.WsMatmulParams(rows=8, cols=8, tokens=4, px=2, py=1, density=0.3, seed=3)
    _, w = wscommon.inputs(p)
    m = run_ws(rows=8, cols=8, tokens=4, px=2, py=1, density=0.3, seed=3)
    # two words per non-zero (index, weight); one command per (row, column)
    assert m["edge_words"] == 2 * m["nnz"] + p.rows * p.px
    assert m["nnz"] == int(np.count_nonzero(w))
    g = run_ws(rows=8, cols=8, tokens=4, px=2, py=1, density=0.3, seed=3, flavour="wgrad")
    # wgrad: one index per masked element and a command per (row, column) in; one FP32 out each
    assert g["nnz"] == m["nnz"]
    assert g["edge_words"] == (g["nnz"] + p.rows * p.px) + g["nnz"]


def test_wgrad_gradients_leave_each_column_in_mask_order():
    p = cfg.load(
        wscommon.WsMatmulParams,
        {"flavour": "wgrad", "rows": 12, "cols": 9, "tokens": 6, "px": 3, "py": 2, "seed": 11,
         "density": 0.4},
    )  # fmt: skip
    from simcore.sim import Simulation

    sim = Simulation()
    run = wsgrad.build(sim, p)
    assert sim.run().status == "completed"
    got, want = wsgrad.result(run), wsgrad.expected(p)
    mask = wsgrad.mask_of(p)
    for x in range(p.px):
        assert got[x].size == np.count_nonzero(mask[:, 3 * x : 3 * x + 3])
        np.testing.assert_allclose(got[x], want[x], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flavour", ["fwd", "bwd", "wgrad"])
def test_cycles_grow_with_density(flavour):
    runs = [
        run_ws(rows=16, cols=16, tokens=16, px=2, py=2, density=d, flavour=flavour)
        for d in (0.1, 0.25, 0.5, 1.0)
    ]
    assert all(r["correct"] for r in runs)
    nnz = [r["nnz"] for r in runs]
    cycles = [r["cycles"] for r in runs]
    assert nnz == sorted(nnz) and cycles == sorted(cycles)
    assert cycles[-1] > 1.5 * cycles[0]  # wgrad: a row's broadcast and chain floor a sparse row


@pytest.mark.parametrize("flavour", ["fwd", "bwd", "wgrad"])
def test_model_is_within_10_percent_on_the_scenario(flavour):
    shape = dict(rows=32, cols=48, tokens=32, px=4, py=2, density=0.5, flavour=flavour)
    m = run_ws(**shape)
    assert abs(m["cycles"] - m["model_cycles"]) / m["model_cycles"] < 0.10
    # what a run reports is what `wafersim model` says for the same parameters
    kind = registry.KINDS["ws-matmul"]
    assert m["model_cycles"] == kind.model(cfg.load(wscommon.WsMatmulParams, shape))["cycles"]


@pytest.mark.parametrize("flavour", ["fwd", "bwd", "wgrad"])
def test_fast_and_reference_fidelities_agree_cycle_for_cycle(flavour):
    shape = {"rows": 12, "cols": 12, "tokens": 8, "px": 3, "py": 2, "density": 0.4}
    fast = run_ws(flavour=flavour, **shape)
    ref = run_ws(flavour=flavour, **shape, wafer={"fidelity": "reference"})
    assert fast["correct"] and ref["correct"]
    assert fast["cycles"] == ref["cycles"]


def test_bad_flavour_and_bad_split_are_rejected():
    with pytest.raises(ConfigError) as err:
        run_ws(flavour="wgard")
    assert str(err.value) == (
        "config key 'flavour' = 'wgard': not an allowed choice; allowed: 'fwd', 'bwd', 'wgrad'"
    )
    with pytest.raises(ConfigError) as err:
        run_ws(cols=10, px=4)
    assert str(err.value) == "config key 'cols' = 10: must be a multiple of px = 4"
    with pytest.raises(ConfigError) as err:
        run_ws(flavour="wgrad", rows=64, cols=64, tokens=512, px=1, py=1)
    assert str(err.value) == (
        "config key 'tokens' = 512: a PE needs 266,496 B for X0, dX1, two gradient-row buffers "
        "and the partials (tokens / py = 512 per PE) but has 47,104 B beside the code "
        "(wafer.pe.sram_bytes - wafer.pe.code_bytes); lower tokens (or the other sizes: rows, "
        "cols, tokens), or raise py"
    )


def test_cli_json_keys(capsys, tmp_path):
    path = tmp_path / "ws-matmul.toml"
    path.write_text(SCENARIO)
    argv = ["run", str(path), "--json"]
    for kv in ("flavour=fwd", "rows=8", "cols=8", "tokens=8", "density=0.5", "px=2", "py=2"):
        argv += ["--set", kv]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("cycles", "nnz", "correct", "fmac_utilisation", "edge_bytes_per_cycle"):
        assert key in out
    assert out["correct"] is True and out["edge_bytes_per_cycle"] > 0


@pytest.mark.slow
def test_validation_case_passes():
    case = registry.CASES["ws-matmul"]
    assert case.judge(case.run(run_points))[3]
