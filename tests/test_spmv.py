"""spmv: sparse y = A·x on the wafer, from .mtx files and generators, against scipy."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from runner import registry, scenario
from simcore import config as cfg
from simcore.errors import ConfigError
from simcore.sim import Simulation
from workloads.wafer import sparse, spmv

DATA = pathlib.Path(__file__).parent / "data"
POISSON_MTX = DATA / "poisson2d_8x8.mtx"


def run(**kw):
    return scenario.run_kind("spmv", spmv.SpmvParams(**kw))


def sim_y(**kw) -> tuple[np.ndarray, dict, sp.csr_matrix, np.ndarray]:
    """(y read from the row roots, metrics, A, x_0) of one run."""
    p = cfg.load(spmv.SpmvParams, kw)
    sim = Simulation(seed=p.seed)
    h = spmv.build(sim, p)
    sim.check()
    m = spmv.metrics(sim, p, h, sim.run())
    y = np.concatenate([h.y[r].read(h.wafer.ce(0, r).sram) for r in range(p.py)])
    return y[: h.a.shape[0]], m, h.a, h.x0


def test_shipped_mtx_is_the_projects_poisson_stencil():
    a = scipy.io.mmread(POISSON_MTX)
    assert (sp.csr_matrix(a) != sparse.poisson2d(8)).nnz == 0


@pytest.mark.parametrize(
    "kw",
    [
        {"matrix": str(POISSON_MTX), "px": 2, "py": 2},
        {"matrix": "poisson2d", "n": 64, "px": 4, "py": 2},
        {"matrix": "random", "n": 60, "density": 0.1, "px": 3, "py": 2},
        {"matrix": "banded", "n": 50, "bandwidth": 3, "px": 2, "py": 3},
        {"matrix": "laplacian", "n": 40, "graph": "barabasi_albert", "degree": 2},
        {"matrix": "laplacian", "n": 40, "graph": "watts_strogatz", "degree": 4, "px": 2},
        {"matrix": "laplacian", "n": 36, "graph": "grid", "px": 3, "py": 3},
        {"matrix": "laplacian", "n": 30, "graph": "erdos_renyi", "density": 0.2, "py": 1},
    ],
)
def test_product_equals_scipy(kw):
    y, m, a, x0 = sim_y(**kw)
    ref = a.astype(np.float64) @ x0.astype(np.float64)
    assert m["correct"] is True
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert m["nnz"] == a.nnz


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(4, 40),
    density=st.floats(0.01, 0.5),
    px=st.integers(1, 4),
    py=st.integers(1, 4),
    layout=st.sampled_from(sparse.LAYOUTS),
    seed=st.integers(0, 2**16),
)
def test_random_products_equal_numpy(n, density, px, py, layout, seed):
    px, py = min(px, n), min(py, n)
    y, m, a, x0 = sim_y(
        matrix="random", n=n, density=density, px=px, py=py, layout=layout, seed=seed
    )
    assert m["correct"] is True
    np.testing.assert_allclose(y, a.toarray().astype(np.float64) @ x0, rtol=1e-5, atol=1e-5)


def test_rectangular_matrix_from_mtx(tmp_path):
    a = sp.random(30, 50, density=0.1, rng=np.random.default_rng(3), format="coo")
    path = tmp_path / "rect.mtx"
    scipy.io.mmwrite(path, a)
    y, m, got_a, x0 = sim_y(matrix=str(path), px=5, py=3)
    assert (m["rows"], m["cols"]) == (30, 50)
    np.testing.assert_allclose(y, got_a.astype(np.float64) @ x0, rtol=1e-5, atol=1e-5)


def test_power_iteration_on_the_wafer_matches_numpy():
    y, m, a, x0 = sim_y(matrix="poisson2d", n=64, px=2, py=2, iterations=5)
    ref, _ = spmv.reference(a, x0, 5)
    assert m["correct"] is True
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert len(m["iteration_cycles"]) == 5
    assert m["steady_iteration_cycles"] == m["iteration_cycles"][-2]
    # normalised iterations cost more than the last one (which is only a product)
    assert m["iteration_cycles"][1] > m["iteration_cycles"][-1]


def test_hypersparse_blocks_choose_dcsr_and_save_rows():
    kw = {"matrix": "random", "n": 512, "density": 0.0005, "px": 4, "py": 4}
    auto, csr = run(**kw), run(**kw, layout="csr")
    assert auto["dcsr_blocks"] == 16 and csr["dcsr_blocks"] == 0
    assert auto["cycles"] < csr["cycles"]
    assert auto["pe_bytes"] < csr["pe_bytes"]
    assert auto["correct"] and csr["correct"]


def test_cycles_grow_with_the_busiest_block():
    light = run(matrix="banded", n=128, bandwidth=1)
    heavy = run(matrix="banded", n=128, bandwidth=6)
    assert heavy["max_block_nnz"] > light["max_block_nnz"]
    assert heavy["cycles"] > light["cycles"]


def test_model_within_tolerance_small():
    m = run(matrix="poisson2d", n=256, px=2, py=2)
    assert abs(m["model_error_pct"]) <= spmv.VALIDATE_TOLERANCE_PCT


def test_validation_case_registered():
    case = registry.CASES["spmv"]
    assert case.criterion == "mape"
    assert case.tolerance == spmv.VALIDATE_TOLERANCE_PCT


# -- bad input: one clear message each, exit 2 ------------------------------------------------
def err_of(capsys, *sets):
    argv = ["run", "spmv", "--json"]
    for s in sets:
        argv += ["--set", s]
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2
    return err


def test_missing_file(capsys):
    assert err_of(capsys, "matrix=nope/none.mtx") == (
        "wafersim: error: config key 'matrix' = 'nope/none.mtx': no such file; allowed: a Matrix "
        "Market file (.mtx) or a generator: random, banded, poisson2d, laplacian, powerlaw; set it "
        "with --set matrix=<path>\n"
    )


def test_malformed_file(capsys, tmp_path):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n")
    err = err_of(capsys, f"matrix={bad}")
    assert err.startswith(f"wafersim: error: config key 'matrix' = '{bad}': not a readable Matrix ")
    assert err.endswith(
        "; allowed: a Matrix Market file (.mtx) or a generator: random, banded, poisson2d, "
        "laplacian, powerlaw\n"
    )


def test_not_square_for_iterations(capsys, tmp_path):
    path = tmp_path / "rect.mtx"
    scipy.io.mmwrite(path, sp.random(6, 8, density=0.5, rng=np.random.default_rng(1)))
    assert err_of(capsys, f"matrix={path}", "iterations=3", "px=2", "py=2") == (
        f"wafersim: error: config key 'matrix' = '{path}': is 6 x 8; iterations = 3 needs a "
        "square matrix (y feeds the next product); allowed: iterations = 1 for a rectangular "
        "matrix\n"
    )


def test_too_large_for_sram(capsys):
    assert err_of(capsys, "matrix=banded", "n=4096", "bandwidth=8", "px=2", "py=2") == (
        "wafersim: error: config key 'matrix' = 'banded': 4096 x 4096 with 69,560 non-zeros "
        "needs 228,954 B per PE on 2 x 2 PEs but a PE has 47,104 B beside the code; the "
        "smallest square rectangle that fits is 10 x 10 (--set px=10 --set py=10)\n"
    )


def test_square_pe_block_for_iterations():
    with pytest.raises(ConfigError) as exc:
        cfg.load(spmv.SpmvParams, {"iterations": 2, "px": 4, "py": 2})
    assert str(exc.value) == (
        "config key 'px' = 4: iterations > 1 needs a square PE block (px = py; py = 2): block "
        "row r of y becomes block column r of x on the diagonal"
    )


def test_density_out_of_range():
    with pytest.raises(ConfigError) as exc:
        cfg.load(spmv.SpmvParams, {"matrix": "random", "density": 1.5})
    assert str(exc.value) == (
        "config key 'density' = 1.5: out of range; allowed: (0.0 .. 1.0]; change density"
    )


def test_poisson_needs_square_n():
    with pytest.raises(ConfigError) as exc:
        cfg.load(spmv.SpmvParams, {"matrix": "poisson2d", "n": 50})
    assert str(exc.value) == (
        "config key 'n' = 50: matrix = 'poisson2d' needs a square grid: n must be a perfect "
        "square; "
        "allowed: e.g. 49 or 64"
    )


def test_cli_run_from_mtx(capsys):
    code = main(["run", "spmv", "--set", f"matrix={POISSON_MTX}", "--set", "px=2", "--set",
                 "py=2", "--json"])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in ("cycles", "steady_iteration_cycles", "nnz", "model_cycles", "correct"):
        assert key in data, key
    assert data["correct"] is True and data["nnz"] == 288 - 64 + 64  # 5-point stencil, 8 x 8


def test_cli_model(capsys):
    code = main(["model", "spmv", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["cycles"] == pytest.approx(spmv.model(spmv.SpmvParams(iterations=3))["cycles"])


@pytest.mark.parametrize(
    "kw",
    [
        {"matrix": "poisson2d", "n": 64, "px": 2, "py": 2, "iterations": 3},
        {"matrix": "random", "n": 90, "density": 0.05, "px": 3, "py": 2},
    ],
)
def test_fidelities_agree(kw):
    ref = sim_y(**kw, wafer={"fidelity": "reference"})
    fast = sim_y(**kw, wafer={"fidelity": "fast"})
    assert ref[1]["cycles"] == fast[1]["cycles"]
    assert ref[1]["iteration_cycles"] == fast[1]["iteration_cycles"]
    np.testing.assert_array_equal(ref[0], fast[0])


def test_footprint_counts_at_the_full_array_size():
    """At 750 x 994 PEs a PE index times a block's rows passes 2**31: the footprint estimate
    counts in int64 (scipy's indices are int32). A sparse matrix of that shape with one
    non-zero in the last PE's block is cheap to count."""
    px, py, rb, cb = 750, 994, 3000, 3000
    a = sp.csr_matrix(([1.0], ([py * rb - 1], [px * cb - 1])), shape=(py * rb, px * cb))
    got = sparse.pe_bytes(a, px, py, "auto", 0)
    assert got == 1 * (sparse.WORD_BYTES + sparse.INDEX_BYTES) + 3 * sparse.INDEX_BYTES


def test_a_file_larger_than_its_entries_need_is_refused_before_reading(tmp_path):
    """np.loadtxt holds what it reads: a huge file (here 3 MB of blanks after a 3-entry header;
    4 GB took 8 GB of memory) is refused from its size, naming what its entries need."""
    path = tmp_path / "big.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n3 3 3\n" + " " * 3_000_000)
    with pytest.raises(ConfigError) as exc:
        sparse.read_mtx(str(path))
    assert str(exc.value) == (
        f"config key 'matrix' = '{path}': the file has 3,000,052 bytes but its 3 declared "
        "entries need at most 1,048,960 (128 bytes an entry, 1,048,576 of comments); allowed: "
        "a file no larger than its entries need; check the size line"
    )


def _split_by_slicing(a, px, py, layout):
    """The blocks cut from the matrix one slice at a time (the reference for sparse.split)."""
    rb, cb = sparse.block_shape(a.shape, px, py)
    out = {}
    for y in range(py):
        for x in range(px):
            blk = sp.csr_matrix(a[y * rb : (y + 1) * rb, x * cb : (x + 1) * cb])
            ptr = np.zeros(rb + 1, np.int64)
            ptr[1 : blk.shape[0] + 1] = blk.indptr[1:]
            ptr[blk.shape[0] + 1 :] = blk.indptr[-1]
            out[(x, y)] = (blk, ptr)
    return out


@pytest.mark.parametrize("layout", sparse.LAYOUTS)
@pytest.mark.parametrize("matrix", ["powerlaw", "random", "poisson2d"])
def test_split_sorts_once_and_gives_the_sliced_blocks(matrix, layout):
    a = sparse.load(matrix, 144, 0.05, 2, "grid", 3, 7)
    blocks = sparse.split(a, 5, 4, layout)
    assert len(blocks) == 20 and list(blocks)[:2] == [(0, 0), (1, 0)]
    for xy, (blk, ptr) in _split_by_slicing(a, 5, 4, layout).items():
        got = blocks[xy]
        assert got.nnz == blk.nnz
        np.testing.assert_array_equal(got.cols, blk.indices)
        np.testing.assert_array_equal(got.vals, blk.data)
        counts = np.diff(ptr)
        rows = np.repeat(got.row_ids, np.diff(got.rowptr.astype(np.int64)))
        np.testing.assert_array_equal(rows, np.repeat(np.arange(len(counts)), counts))
        assert got.fmt == ("dcsr" if sparse.choose_format(blk.nnz, len(counts), layout) else "csr")


def test_poisson2d_is_the_kronecker_stencil():
    side = 7
    t = sp.diags([-np.ones(side - 1), 4 * np.ones(side), -np.ones(side - 1)], [-1, 0, 1])
    off = sp.diags([-np.ones(side - 1), -np.ones(side - 1)], [-1, 1])
    ref = sp.kron(sp.identity(side), t) + sp.kron(off, sp.identity(side))
    got = sparse.poisson2d(side)
    assert got.nnz == ref.nnz and abs(got - ref).max() == 0


def test_powerlaw_rows_are_heavy_tailed_and_the_product_is_right():
    a = sparse.load("powerlaw", 4096, 0.0, 0, "grid", 4, 3)
    counts = np.diff(a.indptr)
    assert a.shape == (4096, 4096) and 3 * 4096 < a.nnz <= 4 * 4096
    assert counts.max() > 20 * counts.mean()  # a power law's heavy rows, not a uniform spread
    y, m, a2, x0 = sim_y(matrix="powerlaw", n=256, degree=3, px=4, py=4)
    np.testing.assert_allclose(y, a2.astype(np.float64) @ x0.astype(np.float64), rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    assert m["correct"] is True


def test_powerlaw_exponent_must_give_a_finite_mean():
    with pytest.raises(ConfigError, match="exponent"):
        sparse.powerlaw(100, 2, 1.5, 0)
