"""TPU traces: chips' compute tracks, per-link transfer tracks (per chunk at detail, per message
at ops), collective phases linked by flows; the same seed gives the same trace bytes; the trace
exports to Perfetto and Chrome JSON."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

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


def test_p2p_trace_holds_the_transfer(tmp_path):
    """tpu-p2p's flows are made at the run's start, after the trace opens: its ``ops`` trace
    holds one ``p2p`` slice per part and the per-hop ``ici_msg`` messages, its ``detail`` trace
    the packets too (it held only the run record, issue 27)."""
    sc = scenario.find("tpu-p2p")
    params = scenario.resolve_params(sc, ["topology=2x2", "src=0,0", "dst=1,1", "bytes=65536"])
    tables = {}
    for level in (scenario.TraceLevel.OPS, scenario.TraceLevel.DETAIL):
        out = scenario.run_scenario(
            sc, params, trace_path=str(tmp_path / f"{level.name}.arrows"), trace_level=level
        )
        tables[level] = read_trace(tmp_path / f"{level.name}.arrows").table
    ops, detail = tables[scenario.TraceLevel.OPS], tables[scenario.TraceLevel.DETAIL]

    def count(t, cat):
        return int(pc.sum(pc.equal(t["category"].cast("string"), cat)).as_py() or 0)

    assert out.metrics["paths"] == 2 and out.metrics["hops"] == 2
    assert count(ops, "p2p") == count(detail, "p2p") == 2  # one slice per part
    assert count(ops, "ici_msg") == count(detail, "ici_msg") == 4  # 2 parts x 2 hops
    assert count(ops, "ici") == 0
    packets = out.metrics["paths"] * -(-65536 // 2 // params.ici.packet_bytes)
    assert count(detail, "ici") == 2 * packets  # every packet on each of its 2 hops
    parts = detail.filter(pc.equal(detail["category"].cast("string"), "p2p"))
    ends = pc.add(parts["ts_ticks"], parts["dur_ticks"]).to_pylist()
    tick_hz = int(read_trace(tmp_path / "DETAIL.arrows").header["tick_hz"])
    assert max(ends) / tick_hz == pytest.approx(out.metrics["time_s"], rel=1e-9)
