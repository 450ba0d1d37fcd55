"""Exported traces open in a real Perfetto UI and show exactly what the Arrow trace holds."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from runner import scenario
from tests.trace_samples import write_wafer_trace
from traces import read_trace
from traces.chrome_json import export_chrome_json
from traces.perfetto import TickToNs, export_perfetto

pytestmark = pytest.mark.browser

OUT = Path(__file__).resolve().parents[2] / "out"
BAD_STATS = (
    "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')"
)


def arrow_counts(path: Path, overview_values: int = 0, path_slices: int = 0) -> dict[str, int]:
    """What the UI must show: the Arrow trace's events (plus the export's overview values and
    critical-path slices), first slice start and last slice end in simulated nanoseconds."""
    trace = read_trace(path)
    t = trace.table
    to_ns = TickToNs(int(trace.header["tick_hz"]))
    phase = t["phase"].cast("string")
    flows_in = t.filter(pc.invert(pc.is_null(t["flow_in"])))
    senders = t.filter(pc.invert(pc.is_null(t["flow_out"])))
    sent_at = dict(
        zip(senders["flow_out"].to_pylist(), senders["ts_ticks"].to_pylist(), strict=True)
    )
    received = zip(flows_in["flow_in"].to_pylist(), flows_in["ts_ticks"].to_pylist(), strict=True)
    return {
        "slices": int(pc.sum(pc.not_equal(phase, "counter")).as_py()) + path_slices,
        "counters": int(pc.sum(pc.equal(phase, "counter")).as_py()) + overview_values,
        # Perfetto draws a flow only forward in time: a receive posted before its send began (a
        # wafer's async receive waiting for the neighbour's stream) keeps its id in the Arrow
        # trace and the export, but the UI drops that flow (docs/traces.md).
        "flows": sum(1 for f, ts in received if f in sent_at and ts >= sent_at[f]),
        "min_ts": to_ns(int(pc.min(t["ts_ticks"]).as_py())),
        # a known slice: the one ending last keeps its simulated end (exact time, every family)
        "max_end": max(to_ns(int(a) + int(b)) for a, b, p in
                       zip(t["ts_ticks"].to_pylist(), t["dur_ticks"].to_pylist(),
                           phase.to_pylist(), strict=True) if p != "counter"),
    }  # fmt: skip


def check_open_on_load(ui, overviews: set[str]) -> None:
    """Without a click: the top level is open (Perfetto opens a single top-level group), and
    shows the named overview tracks, each with its active % values in its collapsed row, and
    the critical-path track with its slices."""
    shown = ui.visible_tracks()
    top = [t for t in shown if t["depth"] == 0]
    assert len(top) == 1 and top[0]["expanded"] and top[0]["name"].startswith("wafersim "), top
    names = {t["name"] for t in shown if t["depth"] == 1}
    assert overviews | {"critical path"} <= names, names
    for name in overviews:
        assert (
            ui.scalar(
                f"select count(*) from counter join track on counter.track_id = track.id "
                f"where track.name = '{name}'"
            )
            > 0
        ), name
    assert (
        ui.scalar(
            "select count(*) from slice join track on slice.track_id = track.id "
            "where track.name = 'critical path'"
        )
        > 0
    )


def check_ui_matches(ui, counts: dict[str, int], event_tracks: int) -> dict[str, int]:
    got = ui.query(
        "select (select count(*) from slice) as slices, (select count(*) from counter) as "
        "counters, (select count(*) from flow) as flows, (select min(ts) from slice) as min_ts, "
        "(select max(ts + dur) from slice) as max_end, "
        "(select count(distinct track_id) from slice) + (select count(distinct track_id) "
        "from counter) as event_tracks"
    )[0]
    assert ui.query(BAD_STATS) == []
    assert {k: got[k] for k in counts} == counts
    assert got["event_tracks"] == event_tracks
    return got


def record(name: str, **figures) -> None:
    OUT.mkdir(exist_ok=True)
    path = OUT / "browser-metrics.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = figures
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def test_synthetic_wafer_trace_in_perfetto_ui(tmp_path, open_in_ui):
    src = tmp_path / "wafer.arrows"
    write_wafer_trace(src, w=4, h=3, steps=8)
    stats = export_perfetto(src, tmp_path / "wafer.pftrace")
    ui = open_in_ui(tmp_path / "wafer.pftrace")
    got = check_ui_matches(
        ui, arrow_counts(src, stats.overview_values, stats.path_slices), stats.event_tracks
    )
    # the component tree: wafer -> row -> PE -> router
    chain = ui.query(
        "select r.name as r, pe.name as pe, row.name as row, w.name as w from track r "
        "join track pe on r.parent_id = pe.id join track row on pe.parent_id = row.id "
        "join track w on row.parent_id = w.id where r.name = 'router' and pe.name = 'pe[2,1]'"
    )
    assert chain == [{"r": "router", "pe": "pe[2,1]", "row": "pe[*,1]", "w": "wafer"}]
    args = ui.query(
        "select display_value from args join slice using (arg_set_id) "
        "where slice.name = 'stall' and key = 'debug.cause' limit 1"
    )
    assert args and args[0]["display_value"] in ("backpressure", "operand_wait")
    ui.screenshot(OUT / "perfetto-ui-wafer.png")
    record("synthetic_wafer", load_s=round(ui.load_s, 3), **got)


def test_link_chain_run_in_perfetto_ui(tmp_path, open_in_ui):
    sc = scenario.find("link-chain")
    params = scenario.resolve_params(sc, ["items=2000"])
    src = tmp_path / "chain.arrows"
    scenario.run_scenario(sc, params, trace_path=str(src), trace_level=scenario.TraceLevel.DETAIL)
    stats = export_perfetto(src, tmp_path / "chain.pftrace")
    ui = open_in_ui(tmp_path / "chain.pftrace")
    got = check_ui_matches(
        ui, arrow_counts(src, stats.overview_values, stats.path_slices), stats.event_tracks
    )
    record("link_chain_2000", load_s=round(ui.load_s, 3), **got)


def test_jitq_run_in_perfetto_ui(tmp_path, open_in_ui):
    """Per-bank command tracks, per-pCH bus and trigger counters, PIM program slices."""
    sc = scenario.find("jitq")
    params = scenario.resolve_params(sc, ["rows=32", "cols=32", "placement=strided"])
    src = tmp_path / "jitq.arrows"
    scenario.run_scenario(sc, params, trace_path=str(src), trace_level=scenario.TraceLevel.DETAIL)
    stats = export_perfetto(src, tmp_path / "jitq.pftrace")
    ui = open_in_ui(tmp_path / "jitq.pftrace")
    check_open_on_load(ui, {"hbm"})
    got = check_ui_matches(
        ui, arrow_counts(src, stats.overview_values, stats.path_slices), stats.event_tracks
    )
    names = {r["name"] for r in ui.query("select distinct name from slice")}
    assert {"exponents", "scales", "significands", "ACT", "RD", "WR"} <= names
    record("jitq_strided_32x32_detail", load_s=round(ui.load_s, 3), **got)


def test_chrome_json_in_perfetto_ui(tmp_path, open_in_ui):
    src = tmp_path / "wafer.arrows"
    write_wafer_trace(src, w=3, h=2, steps=4)
    export_chrome_json(src, tmp_path / "wafer.json")
    ui = open_in_ui(tmp_path / "wafer.json")
    counts = arrow_counts(src)
    assert ui.scalar("select count(*) from slice") == counts["slices"]
    assert ui.scalar("select max(ts + dur) from slice") == counts["max_end"]
    assert ui.scalar("select count(*) from flow") == counts["flows"]
    assert ui.query(BAD_STATS) == []
    record("chrome_json", load_s=round(ui.load_s, 3))


def test_simulated_wafer_run_in_perfetto_ui(tmp_path, open_in_ui):
    """A real wafer run (SUMMA on 2x2 PEs, every wavelet traced) opens with matching counts."""
    sc = scenario.find("summa")
    params = scenario.resolve_params(sc, ["p=2", "mt=4", "wafer.fidelity=reference"])
    src = tmp_path / "summa.arrows"
    scenario.run_scenario(sc, params, trace_path=str(src), trace_level=scenario.TraceLevel.DETAIL)
    categories = set(read_trace(src).table.column("category").to_pylist())
    assert {"task", "instr", "async", "wavelet", "queue"} <= categories
    stats = export_perfetto(src, tmp_path / "summa.pftrace")
    ui = open_in_ui(tmp_path / "summa.pftrace")
    check_open_on_load(ui, {"wafer"})
    got = check_ui_matches(
        ui, arrow_counts(src, stats.overview_values, stats.path_slices), stats.event_tracks
    )
    chain = ui.query(
        "select ce.name as ce, pe.name as pe, row.name as row, w.name as w from track ce "
        "join track pe on ce.parent_id = pe.id join track row on pe.parent_id = row.id "
        "join track w on row.parent_id = w.id where ce.name = 'ce' and pe.name = 'pe[1,1]'"
    )
    assert chain == [{"ce": "ce", "pe": "pe[1,1]", "row": "pe[*,1]", "w": "wafer"}]
    ui.screenshot(OUT / "perfetto-ui-summa.png")
    record("summa_2x2_reference_detail", load_s=round(ui.load_s, 3), **got)


def test_tpu_matmul_run_in_perfetto_ui(tmp_path, open_in_ui):
    """A TPU slice (J-sharded matmul on 2x2 v5e chips, AllReduce overlapped): chips' MXU
    slices, per-chunk link slices, collective phases linked by flows, all shown."""
    sc = scenario.find("tpu-matmul")
    params = scenario.resolve_params(sc, ["topology=2x2", "i=64", "j=256", "k=256", "blocks=2"])
    src = tmp_path / "tpu.arrows"
    scenario.run_scenario(sc, params, trace_path=str(src), trace_level=scenario.TraceLevel.DETAIL)
    categories = set(read_trace(src).table.column("category").to_pylist())
    assert {"mxu", "hbm", "ici", "ici_msg", "collective"} <= categories
    stats = export_perfetto(src, tmp_path / "tpu.pftrace")
    ui = open_in_ui(tmp_path / "tpu.pftrace")
    check_open_on_load(ui, {"pod"})
    got = check_ui_matches(
        ui, arrow_counts(src, stats.overview_values, stats.path_slices), stats.event_tracks
    )
    ui.screenshot(OUT / "perfetto-ui-tpu.png")
    record("tpu_matmul_2x2_detail", load_s=round(ui.load_s, 3), **got)


def test_weight_streaming_run_in_perfetto_ui(tmp_path, open_in_ui):
    """A weight-streamed GPT run (MemoryX, SwarmX, 4 CS-2s, two steps) opens with matching
    counts, one track per system, and the next step's reads overlapping this step's compute."""
    sc = scenario.find("gpt-ws")
    params = scenario.resolve_params(sc, ["layers=4", "systems=4"])
    src = tmp_path / "ws.arrows"
    scenario.run_scenario(sc, params, trace_path=str(src), trace_level=scenario.TraceLevel.OPS)
    stats = export_perfetto(src, tmp_path / "ws.pftrace")
    ui = open_in_ui(tmp_path / "ws.pftrace")
    check_open_on_load(ui, {"memoryx", "swarmx", "cs2"})
    got = check_ui_matches(
        ui, arrow_counts(src, stats.overview_values, stats.path_slices), stats.event_tracks
    )
    names = {r["name"] for r in ui.query("select distinct name from track")}
    assert {"cs2[0]", "cs2[3]", "reader", "updater", "node[1,0]"} <= names
    events = read_trace(src).table.to_pylist()
    next_read = min(
        e["ts_ticks"]
        for e in events
        if e["component"] == "memoryx/reader"
        and e["args_int"]
        and dict(e["args_int"]).get("step") == 1
    )
    last_wgrad = max(
        e["ts_ticks"] + e["dur_ticks"]
        for e in events
        if e["name"].startswith("bwd wgrad") and dict(e["args_int"])["step"] == 0
    )
    assert next_read < last_wgrad  # the pipeline overlap the UI shows
    ui.screenshot(OUT / "perfetto-ui-gpt-ws.png")
    record("gpt_ws_4_systems_ops", load_s=round(ui.load_s, 3), **got)


def test_large_wafer_with_a_detail_region_in_perfetto_ui(tmp_path, open_in_ui):
    """A 40x40 wafer (above the summary threshold) exported with ``--detail-region 0:8,2:4``:
    the UI shows the region's 16 PEs whole, every other PE only in its 8x8 block's active %
    track, and the export's counts."""
    src = tmp_path / "w40.arrows"
    write_wafer_trace(src, w=40, h=40, steps=1, batch_rows=8192, fanout=2)
    stats = export_perfetto(src, tmp_path / "w40.pftrace", detail_region="0:8,2:4")
    assert stats.summarised > 0
    ui = open_in_ui(tmp_path / "w40.pftrace")
    check_open_on_load(ui, {"wafer"})
    got = check_ui_matches(
        ui,
        {"slices": stats.slices + stats.path_slices,
         "counters": stats.counters + stats.overview_values, "flows": stats.flows},
        stats.event_tracks,
    )  # fmt: skip
    names = [r["name"] for r in ui.query("select distinct name from track")]
    whole = {n for n in names if n.startswith("pe[") and ":" not in n and "*" not in n}
    assert whole == {f"pe[{x},{y}]" for x in range(8) for y in (2, 3)}
    blocks = [n for n in names if n.startswith("pe[") and ":" in n]
    assert len(blocks) == 25
    busy = ui.scalar(
        "select count(distinct track.name) from counter join track on counter.track_id = "
        "track.id where track.name like 'pe[%:%' and counter.value > 0"
    )
    assert busy == 25
    record("wafer_40x40_detail_region", load_s=round(ui.load_s, 3), **got)
