"""Two fidelities, one answer: the fast mode against the wavelet-exact reference.

Uncontended streams must give identical cycle counts (every PE's timestamp marks equal);
contended traffic must stay within 1 % (the fast mode moves contended streams wavelet by wavelet,
so in practice it is exact there too, and the tests say so when it is). The data must be equal.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wafer_programs import chained_row_broadcasts

from pe.program import Layout
from runner import registry
from runner.scenario import Scenario, run_scenario
from simcore import Simulation
from wafer.collectives import Collectives
from wafer.system import Wafer, WaferConfig
from workloads.wafer import wse

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_both(build):
    """Run ``build(sim, cfg)`` in both fidelities; return {fidelity: (marks, data, engine)}."""
    out = {}
    for fidelity in ("reference", "fast"):
        sim = Simulation()
        wafer, read = build(sim, WaferConfig(fidelity=fidelity))
        result = sim.run()
        assert result.status == "completed", result.report
        marks = {xy: dict(pe.ce.marks) for xy, pe in wafer.pes.items()}
        out[fidelity] = (marks, read(wafer), wafer.engine)
    return out


@FAST
@given(
    width=st.integers(2, 9),
    height=st.integers(1, 3),
    words=st.integers(1, 300),
    rounds=st.integers(1, 4),
    seed=st.integers(0, 99),
)
def test_uncontended_broadcasts_are_cycle_exact(width, height, words, rounds, seed):
    res = run_both(chained_row_broadcasts(width, height, words, rounds, seed))
    assert res["fast"][0] == res["reference"][0]
    assert res["fast"][1] == res["reference"][1]
    assert res["fast"][2].express_streams == height * rounds  # the fast path was really taken
    assert res["fast"][2].fast_conflicts == 0


def crossing_traffic(width: int, height: int, words_x: int, words_y: int, delay: int, seed: int):
    """Row and column broadcasts at once (SUMMA-like), the column ones after a local delay."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(words_x).astype(np.float32)
    b = rng.standard_normal(words_y).astype(np.float32)

    def build(sim, cfg):
        bufs = {}

        def code(pe):
            coll = Collectives(pe)
            bx = pe.array("bx", a if pe.x == 0 else np.zeros(words_x, np.float32))
            by = pe.array("by", b if pe.y == 0 else np.zeros(words_y, np.float32))
            pad = pe.array("pad", np.ones(max(delay, 1), np.float32))
            bufs[(pe.x, pe.y)] = (bx, by)

            @pe.local_task(id=10)
            def main(t):
                t.mark("start")
                coll.x.broadcast(t, 0, bx, 11)
                t.fmacs(pad, pad, pad, 1.0)  # local work between the two collectives
                coll.y.broadcast(t, 0, by, 12)

            @pe.local_task(id=11)
            def done_x(t):
                t.mark("end_x")

            @pe.local_task(id=12)
            def done_y(t):
                t.mark("end_y")

            pe.start(main)

        layout = Layout(width, height)
        layout.set_rectangle_code(code)
        wafer = Wafer(sim, cfg, layout)

        def read(w):
            return {
                xy: (x.read(w.ce(*xy).sram).tolist(), y.read(w.ce(*xy).sram).tolist())
                for xy, (x, y) in bufs.items()
            }

        return wafer, read

    return build


@FAST
@given(
    width=st.integers(2, 5),
    height=st.integers(2, 5),
    words_x=st.integers(1, 200),
    words_y=st.integers(1, 200),
    delay=st.integers(1, 600),
    seed=st.integers(0, 99),
)
def test_contended_traffic_within_one_percent(width, height, words_x, words_y, delay, seed):
    res = run_both(crossing_traffic(width, height, words_x, words_y, delay, seed))
    ref, fast = res["reference"], res["fast"]
    assert fast[1] == ref[1]
    for name in ("end_x", "end_y"):
        r = max(m[name] for m in ref[0].values()) - min(m["start"] for m in ref[0].values())
        f = max(m[name] for m in fast[0].values()) - min(m["start"] for m in fast[0].values())
        assert abs(f - r) <= 0.01 * r
    if fast[2].fast_conflicts == 0:
        assert fast[0] == ref[0]


@pytest.mark.parametrize("kind", ["wse-fmac", "wse-bcast"])
def test_calibration_scenarios_agree(kind):
    params = registry.KINDS[kind].params
    points = (
        [dict(elements=i) for i in (1, 44, 128, 2048)]
        if kind == "wse-fmac"
        else [dict(elements=i, pes=n) for i in (1, 7, 64, 1000) for n in (4, 16, 64)]
    )
    for point in points:
        cycles = {}
        for fidelity in ("reference", "fast"):
            p = params(**point, wafer=WaferConfig(fidelity=fidelity))
            m = run_scenario(Scenario(kind, "", registry.KINDS[kind], "", {}), p).metrics
            assert m["correct"]
            cycles[fidelity] = m["cycles"]
        assert cycles["fast"] == cycles["reference"], point


def test_express_path_is_taken_for_the_calibration_broadcast():
    p = wse.BcastParams(elements=512, pes=8)
    sim = Simulation()
    run = wse.build_bcast(sim, p)
    sim.run()
    assert run.wafer.engine.express_streams == 1
    assert run.wafer.engine.express_wavelets == 512
