"""The full 750 x 994 array: host memory per PE against the estimates, parameter ranges, and the
outputs that stay usable at that size (a trace region, busy per region)."""

from __future__ import annotations

import dataclasses
import gc
import math
import tracemalloc

import pyarrow as pa
import pytest

from app.cli import main
from pe.program import Layout
from runner import registry, scenario
from simcore.sim import Simulation
from traces.reader import BatchStream
from traces.summary import format_summary, summarize
from wafer.system import MAX_HEIGHT, MAX_WIDTH, Wafer, WaferConfig
from workloads.wafer import footprint, gemv, spmv


def test_an_idle_pe_takes_at_most_12_kb():
    gc.collect()
    tracemalloc.start()
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(), Layout(32, 32))
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_pe = held / len(wafer.pes)
    assert per_pe <= footprint.IDLE_PE_BYTES <= 12_000, per_pe
    assert per_pe > footprint.IDLE_PE_BYTES / 2  # the estimate follows the measurement


def measured_peak(kind: str, params) -> int:
    """Host bytes at the peak of a build and run (footprint.measured_peak), after a 2 x 2 run
    of the same kind."""
    small = dataclasses.replace(params, px=2, py=2)
    if kind == "gemv":  # (a gemv's block grows as the array shrinks)
        small = dataclasses.replace(small, m=8, n=8)
    return footprint.measured_peak(kind, params, small)


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("spmv", spmv.SpmvParams(matrix="poisson2d", n=1024, px=16, py=16)),
        ("spmv", spmv.SpmvParams(matrix="powerlaw", n=1024, degree=4, px=16, py=16)),
        ("gemv", gemv.GemvParams(m=64, n=64, px=16, py=16)),
        ("gemv", gemv.GemvParams(m=256, n=256, px=16, py=16)),
    ],
)
def test_the_footprint_estimate_covers_the_measured_peak(kind, params):
    """Without the build's fixed part (resident memory, which tracemalloc does not see), the
    estimate's per-PE and host parts alone hold the traced peak of a 16 x 16 array, whose
    fixed objects are spread over few PEs, and are within twice of it."""
    registry.declare_all()
    estimate = registry.KINDS[kind].footprint(params).bytes - footprint.BUILD_BYTES
    measured = measured_peak(kind, params)
    assert measured <= estimate <= 2 * measured, (measured, estimate)


#: Peaks measured with ``bench/wafer_bench.py --full-wafer --point P --array WxH``
#: (``ru_maxrss`` over the interpreter's before the build, bytes per PE; 2026-11-26):
#: (point, px, py, bytes per PE). The estimates must stay above every one of them.
MEASURED_PEAKS = (
    ("spmv-poisson2d", 128, 128, 18_980),
    ("spmv-powerlaw", 128, 128, 19_133),
    ("gemv", 128, 128, 18_800),
    ("spmv-poisson2d", 256, 256, 17_544),
    ("spmv-powerlaw", 256, 256, 17_631),
    ("gemv", 256, 256, 17_432),
    ("spmv-poisson2d", 750, 994, 16_242),
    ("gemv", 750, 994, 16_806),
    ("spmv-powerlaw", 750, 994, 16_286),
    # after the express hand-back (its live streams' state: about 1 kB more per PE)
    ("gemv", 128, 128, 19_954),
    ("spmv-poisson2d", 750, 994, 17_247),
    # after the build's second round (t25build, c9da931)
    ("gemv", 750, 994, 17_521),
)


#: The bench's points' parameters at px x py (bench/full_wafer.py's, which the tests do not
#: import): the full array's block per PE.
def bench_point(name: str, px: int, py: int):
    if name == "spmv-poisson2d":
        side = math.isqrt(4 * py - 1) + 1
        return "spmv", spmv.SpmvParams(matrix="poisson2d", n=side * side, px=px, py=py)
    if name == "spmv-powerlaw":
        return "spmv", spmv.SpmvParams(matrix="powerlaw", n=4 * max(px, py), degree=4, px=px, py=py)
    return "gemv", gemv.GemvParams(m=4 * py, n=4 * px, px=px, py=py)


@pytest.mark.parametrize(("name", "px", "py", "per_pe"), MEASURED_PEAKS)
def test_the_estimate_stays_above_the_peaks_measured_at_scale(name, px, py, per_pe):
    registry.declare_all()
    kind, params = bench_point(name, px, py)
    estimate = registry.KINDS[kind].footprint(params).bytes
    measured = per_pe * px * py
    assert measured < estimate < 1.25 * measured, estimate / measured


def test_every_wafer_kind_reaches_the_whole_array():
    registry.declare_all()
    for name in ("spmv", "gemv", "ws-matmul", "summa"):
        fields = {f.name: f for f in dataclasses.fields(registry.KINDS[name].params)}
        if "px" in fields:
            assert fields["px"].metadata["max"] == MAX_WIDTH, name
            assert fields["py"].metadata["max"] == MAX_HEIGHT, name
        else:  # summa: a square block, as large as the array's short side
            assert fields["p"].metadata["max"] == min(MAX_WIDTH, MAX_HEIGHT)


def test_spmv_and_gemv_accept_the_full_array():
    full = {"px": MAX_WIDTH, "py": MAX_HEIGHT}
    for p in (
        spmv.SpmvParams(matrix="poisson2d", n=63 * 63, **full),
        spmv.SpmvParams(matrix="powerlaw", n=4 * MAX_HEIGHT, degree=4, **full),
        gemv.GemvParams(m=4 * MAX_HEIGHT, n=4 * MAX_WIDTH, **full),
    ):
        p.check()
        fp = (spmv.footprint if isinstance(p, spmv.SpmvParams) else gemv.footprint)(p)
        assert fp.components == MAX_WIDTH * MAX_HEIGHT + 1
        assert 745_500 * footprint.IDLE_PE_BYTES < fp.bytes < 40e9


def _detail_paths(path: str) -> set[str]:
    out = set()
    for batch in BatchStream(path):
        cats = batch.column("category").cast(pa.string()).to_pylist()
        comps = batch.column("component").cast(pa.string()).to_pylist()
        out |= {c for cat, c in zip(cats, comps, strict=True) if cat in ("wavelet", "stall")}
        out |= {c for cat, c in zip(cats, comps, strict=True) if cat == "queue"}
    return out


def test_a_trace_region_keeps_detail_events_to_its_pes_and_changes_no_cycle(tmp_path):
    sc = scenario.find("spmv")
    params = scenario.resolve_params(sc, [])
    whole = scenario.run_scenario(sc, params, trace_path=str(tmp_path / "a.arrows"),
                                  trace_level=3)  # fmt: skip
    part = scenario.run_scenario(sc, params, trace_path=str(tmp_path / "b.arrows"),
                                 trace_level=3, trace_region=(0, 2, 1, 3))  # fmt: skip
    assert part.metrics["cycles"] == whole.metrics["cycles"]
    inside = {f"wafer/pe[{x},{y}]" for x in (0, 1) for y in (1, 2)}
    got = _detail_paths(str(tmp_path / "b.arrows"))
    assert got and {c.rsplit("/", 1)[0] for c in got} <= inside
    assert {c.rsplit("/", 1)[0] for c in _detail_paths(str(tmp_path / "a.arrows"))} > inside
    s = summarize(str(tmp_path / "b.arrows"))
    assert s["trace_region"] == [0, 2, 1, 3]
    assert "detail-level events recorded for the PEs 0:2,1:3 only" in format_summary(s)


def test_a_trace_region_outside_the_array_is_refused_in_one_line(capsys):
    assert main(["run", "spmv", "--quiet", "--trace-region", "9:10,0:1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "wafersim: error: --trace-region 9:10,0:1 holds no PE of the 4 x 4 array; give x0 < 4 "
        "and y0 < 4"
    ]


def test_summary_gives_busy_per_region_above_64_pes(tmp_path):
    sc = scenario.find("spmv")
    params = scenario.resolve_params(sc, ["px=12", "py=12", "n=576", "iterations=1"])
    scenario.run_scenario(sc, params, trace_path=str(tmp_path / "t.arrows"))
    s = summarize(str(tmp_path / "t.arrows"))
    reg = s["regions"]
    assert reg["width"] == reg["height"] == 12 and reg["block"] == [2, 2]
    assert sum(r["pes"] for r in reg["rows"]) == 144 and len(reg["rows"]) == 36
    text = format_summary(s)
    assert "busy by region (12 x 12 PEs in blocks of 2 x 2" in text
    lines = text.splitlines()
    title = next(i for i, ln in enumerate(lines) if ln.startswith("  busy by region"))
    header = "region (x0:x1,y0:y1)  PEs  mean busy (% of run)  max busy (% of run)  busiest PE"
    assert " ".join(lines[title + 1].split()) == " ".join(header.split())  # its header row
    assert "busiest components" not in text  # no line per PE at this size
    for row in reg["rows"]:
        assert 0.0 <= row["mean_busy_fraction"] <= row["max_busy_fraction"] <= 1.0
    small = scenario.resolve_params(sc, [])
    scenario.run_scenario(sc, small, trace_path=str(tmp_path / "s.arrows"))
    assert summarize(str(tmp_path / "s.arrows"))["regions"] is None
