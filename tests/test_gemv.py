"""gemv: dense y = A·x on the wafer, against numpy; its limits allow the full array."""

from __future__ import annotations

import numpy as np
import pytest

from runner import scenario
from simcore import config as cfg
from simcore.errors import ConfigError
from simcore.sim import Simulation
from wafer.system import MAX_HEIGHT, MAX_WIDTH
from workloads.wafer import gemv


def sim_y(**kw) -> tuple[np.ndarray, dict, gemv.GemvRun]:
    p = cfg.load(gemv.GemvParams, kw)
    sim = Simulation(seed=p.seed)
    h = gemv.build(sim, p)
    sim.check()
    m = gemv.metrics(sim, p, h, sim.run())
    y = np.concatenate([h.y[r].read(h.wafer.ce(0, r).sram) for r in range(p.py)])
    return y[: p.m], m, h


@pytest.mark.parametrize(
    "kw",
    [
        {"m": 16, "n": 16, "px": 2, "py": 2},
        {"m": 37, "n": 23, "px": 3, "py": 5},  # padded last blocks
        {"m": 8, "n": 30, "px": 6, "py": 1},  # one row: no column broadcast
        {"m": 30, "n": 8, "px": 1, "py": 4},  # one column: no row reduction
    ],
)
def test_product_equals_numpy(kw):
    y, m, h = sim_y(**kw)
    ref = h.a.astype(np.float64) @ h.x.astype(np.float64)
    assert m["correct"] is True
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert m["cycles"] > 0 and m["model_cycles"] > 0


def test_cycles_grow_with_the_block_columns():
    small = scenario.run_kind("gemv", gemv.GemvParams(m=16, n=16, px=2, py=2))
    wide = scenario.run_kind("gemv", gemv.GemvParams(m=16, n=64, px=2, py=2))
    assert wide["cycles"] > small["cycles"]


def test_ranges_allow_the_full_array():
    p = gemv.GemvParams(m=4 * MAX_HEIGHT, n=4 * MAX_WIDTH, px=MAX_WIDTH, py=MAX_HEIGHT)
    p.check()  # 4 x 4 blocks fit a PE
    fp = gemv.footprint(p)
    assert fp.components == MAX_WIDTH * MAX_HEIGHT + 1


def test_too_large_for_sram():
    with pytest.raises(ConfigError, match=r"config key 'm'.*beside the code"):
        gemv.GemvParams(m=4096, n=4096, px=2, py=2).check()


def test_a_finished_product_keeps_none_of_its_srams():
    """The PEs share their column descriptors, and a descriptor keeps what the tensor unit
    derived from it in the last SRAM it ran in (pe/isa.py ``FastOperand``): the shared tuple is
    the build's, so once the run is dropped no SRAM of it stays alive (a module-level cache
    would keep one wafer's SRAMs per block layout for the process's life, e.g. a sweep's)."""
    import gc
    import weakref

    _, m, h = sim_y(m=16, n=16, px=2, py=2)
    assert m["correct"] is True
    srams = [weakref.ref(h.wafer.ce(x, y).sram.data) for x in range(2) for y in range(2)]
    del h
    gc.collect()
    assert [ref() for ref in srams] == [None] * 4
