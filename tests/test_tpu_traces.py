"""TPU traces: chips' compute tracks, per-link transfer tracks (per chunk at detail, per message
at ops), collective phases linked by flows; the same seed gives the same trace bytes; the trace
exports to Perfetto and Chrome JSON."""

from __future__ import annotations

import pyarrow.compute as pc

from runner import scenario
from traces import read_trace
from traces.chrome_json import export_chrome_json
from traces.perfetto import export_perfetto

SETS = ["topology=2x2", "i=64", "j=256", "k=256", "blocks=2"]


def run(path, level):
    sc = scenario.find("tpu-matmul")
    params = scenario.resolve_params(sc, SETS)
    return scenario.run_scenario(sc, params, trace_path=str(path), trace_level=level)


def test_tracks_at_each_level(tmp_path):
    run(tmp_path / "ops.arrows", scenario.TraceLevel.OPS)
    run(tmp_path / "detail.arrows", scenario.TraceLevel.DETAIL)
    ops = read_trace(tmp_path / "ops.arrows").table
    detail = read_trace(tmp_path / "detail.arrows").table

    def count(t, cat):
        return int(pc.sum(pc.equal(t["category"].cast("string"), cat)).as_py() or 0)

    assert count(ops, "ici") == 0 and count(ops, "hbm") == 0  # per chunk: detail only
    for cat in ("mxu", "ici_msg", "collective"):
        assert count(ops, cat) == count(detail, cat) > 0
    assert count(detail, "ici") >= count(detail, "ici_msg")
    comps = set(detail["component"].cast("string").to_pylist())
    assert "pod/chip[0,0]/core" in comps  # the chip's compute track
    assert "pod/chip[0,0]" in comps  # its collective phases
    assert "pod/ici/link[0,0>1,0]" in comps  # a link direction's track
    phases = detail.filter(pc.equal(detail["category"].cast("string"), "collective"))
    sent = set(phases["flow_out"].drop_null().to_pylist())
    got = set(phases["flow_in"].drop_null().to_pylist())
    assert got and got <= sent  # every phase after the first is linked to the one before


def test_same_seed_same_trace_bytes(tmp_path):
    run(tmp_path / "a.arrows", scenario.TraceLevel.DETAIL)
    run(tmp_path / "b.arrows", scenario.TraceLevel.DETAIL)
    assert (tmp_path / "a.arrows").read_bytes() == (tmp_path / "b.arrows").read_bytes()


def test_exports(tmp_path):
    run(tmp_path / "t.arrows", scenario.TraceLevel.DETAIL)
    stats = export_perfetto(tmp_path / "t.arrows", tmp_path / "t.pftrace")
    assert stats.flows > 0 and stats.orphan_receives == 0
    export_chrome_json(tmp_path / "t.arrows", tmp_path / "t.json")
    assert (tmp_path / "t.json").stat().st_size > 0
