"""Perfetto and Chrome JSON exports: structure checked by parsing the output back."""

from __future__ import annotations

import collections
import itertools
import json

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from app import cli
from simcore.errors import TraceError
from tests.trace_samples import write_wafer_trace
from traces.chrome_json import export_chrome_json
from traces.export import export
from traces.layout import Lanes, build_tree, display_segments
from traces.perfetto import TickToNs, export_perfetto

TE = pb.TrackEvent


def read_packets(path) -> list[pb.TracePacket]:
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return list(trace.packet)


def test_display_segments_group_rows():
    assert display_segments("wafer/pe[3,4]/router") == ("wafer", "pe[*,4]", "pe[3,4]", "router")
    assert display_segments("pod/chip[1,2,3]") == ("pod", "chip[*,2,3]", "chip[1,2,3]")
    assert display_segments("chain/relay[2]") == ("chain", "relay[2]")
    # a TPU link is named by its ends, not a grid position: no row group
    assert display_segments("pod/ici/link[0,0>1,0]") == ("pod", "ici", "link[0,0>1,0]")
    assert display_segments("hbm/stack[0]/pch[3]/bank[7]") == (
        "hbm", "stack[0]", "pch[3]", "bank[7]",
    )  # fmt: skip


def test_tree_orders_naturally_and_parents_first():
    nodes, uid_of = build_tree(["w/pe[10,0]", "w/pe[2,0]", "w/pe[2,0]/r"])
    names = [n.name for n in nodes]
    assert names == ["w", "pe[*,0]", "pe[2,0]", "pe[10,0]", "r"]
    by_uid = {n.uid: n for n in nodes}
    assert [n.rank for n in nodes] == [0, 0, 0, 1, 0]
    assert by_uid[uid_of["w/pe[2,0]/r"]].name == "r"
    for n in nodes:
        assert n.parent == 0 or n.parent < n.uid


def test_lanes_nest_and_never_overlap():
    lanes = Lanes()
    spans = [(0, 10), (2, 8), (3, 8), (5, 15), (10, 20), (12, 13), (30, 31), (25, 40)]
    got = [lanes.place(s, e, "task") for s, e in spans]
    # (2,8) and (3,8) nest in (0,10); (5,15) overlaps it partly: lane 1; (12,13) nests in
    # (10,20); (25,40) starts before lane 0's last start: lane 1, where (5,15) has ended
    assert got == [0, 0, 0, 1, 0, 0, 0, 1]
    assert lanes.name(1) == "lane 1: task"


def test_start_order_puts_enclosing_slices_first():
    import pyarrow as pa

    from traces.layout import start_order

    # an instruction written before its task (the task ends last), and a tie of equal spans
    ts, dur = pa.array([4, 0, 9, 9]), pa.array([42, 47, 3, 3])
    assert start_order(ts, dur) == [1, 0, 3, 2]


def test_ticks_to_ns():
    assert [TickToNs(1_000_000_000)(t) for t in (0, 7)] == [0, 7]
    assert TickToNs(250_000_000)(3) == 12 and TickToNs(250_000_000).exact
    at_850 = TickToNs(850_000_000)  # 1.17647 ns: 1,886 cycles are 2,218.8 ns
    assert not at_850.exact and at_850(1886) == 2219 and at_850(1) == 1 and at_850(2) == 2
    at_17g = TickToNs(17_000_000_000)  # 1/17 ns
    assert at_17g(17 * 450_000) == 450_000 and at_17g(8) == 0 and at_17g(9) == 1
    assert TickToNs(1_503_000_000_000)(10**15 * 1503 + 751) == 10**15  # exact at any length
    assert at_850.describe() == "1 tick = 1.17647 ns (times rounded to the nearest ns)"


def test_perfetto_export_structure(tmp_path):
    src = tmp_path / "w.arrows"
    counts = write_wafer_trace(src)
    stats = export_perfetto(src, tmp_path / "w.pftrace")
    packets = read_packets(tmp_path / "w.pftrace")
    first = packets[0]
    assert first.sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert not first.HasField("clock_snapshot")  # timestamps are ns of the default clock
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets
              if p.HasField("track_descriptor")}  # fmt: skip
    assert len(tracks) == stats.tracks
    for td in tracks.values():
        assert td.parent_uuid == 0 or td.parent_uuid in tracks
    names = {td.name for td in tracks.values()}
    assert {"wafer", "pe[*,0]", "pe[*,1]", "pe[2,1]", "router", "lane 1: task", "east"} <= names
    kinds = collections.Counter(p.track_event.type for p in packets if p.HasField("track_event"))
    assert kinds[TE.TYPE_SLICE_BEGIN] == kinds[TE.TYPE_SLICE_END]
    assert kinds[TE.TYPE_SLICE_BEGIN] + kinds[TE.TYPE_INSTANT] == (
        counts["slices"] + stats.path_slices
    )
    # the critical path of `trace summary`: the first track under the root, slices that
    # never overlap (each the time its step adds), named by component and event
    (path,) = [td for td in tracks.values() if td.name == "critical path"]
    assert path.parent_uuid == 1 and path.description.startswith("critical path (trace summary)")
    assert all(td.sibling_order_rank >= path.sibling_order_rank for td in tracks.values()
               if td.parent_uuid == 1)  # fmt: skip
    on_path = [p for p in packets if p.track_event.track_uuid == path.uuid]
    assert stats.path_slices > 1 and len(on_path) == 2 * stats.path_slices
    times = [p.timestamp for p in on_path]
    assert times == sorted(times) and all(
        a < b for a, b in zip(times[::2], times[1::2], strict=True)
    )
    assert all("wafer/pe[" in p.track_event.name for p in on_path[::2])
    assert kinds[TE.TYPE_INSTANT] == counts["instants"]
    assert kinds[TE.TYPE_COUNTER] == counts["counters"] + stats.overview_values
    # each row group shows its PEs' busy % in its own (collapsed) row
    overview = {td.name: td for td in tracks.values() if td.description.startswith("overview")}
    assert {"wafer", "pe[*,0]", "pe[*,1]"} <= set(overview)
    assert overview["pe[*,0]"].counter.unit_name == "%"
    values = [p.track_event.double_counter_value for p in packets
              if p.track_event.track_uuid == overview["pe[*,0]"].uuid]  # fmt: skip
    assert max(values) > 0 and all(0 <= v <= 100 for v in values)
    starts = [f for p in packets for f in p.track_event.flow_ids]
    ends = [f for p in packets for f in p.track_event.terminating_flow_ids]
    assert len(starts) == len(set(starts)) == counts["flows"] == stats.flows
    assert sorted(starts) == sorted(ends)
    interned = {i.iid: i.name for p in packets for i in p.interned_data.event_names}
    used = {p.track_event.name_iid for p in packets if p.track_event.name_iid}
    assert used <= set(interned) and "fmac" in interned.values()
    # per track, slices must nest: every begin inside the innermost open slice
    per_track = collections.defaultdict(list)
    ends = iter([p.timestamp for p in packets if p.track_event.type == TE.TYPE_SLICE_END])
    for p in packets:
        if p.track_event.type == TE.TYPE_SLICE_BEGIN:
            per_track[p.track_event.track_uuid].append((p.timestamp, next(ends)))
    deepest = 0
    for spans in per_track.values():
        stack: list[int] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1]
            stack.append(end)
            deepest = max(deepest, len(stack))
    assert deepest >= 1


def test_chrome_json_export(tmp_path):
    src = tmp_path / "w.arrows"
    counts = write_wafer_trace(src)
    stats = export_chrome_json(src, tmp_path / "w.json")
    events = json.loads((tmp_path / "w.json").read_text())
    ph = collections.Counter(e["ph"] for e in events)
    assert ph["X"] + ph["i"] == counts["slices"] == stats.slices
    assert ph["C"] == counts["counters"]
    assert ph["s"] == ph["f"] == counts["flows"]
    threads = [e["args"]["name"] for e in events if e.get("name") == "thread_name"]
    assert "wafer/pe[1,0]/task lane 1: task" in threads


def test_export_errors(tmp_path):
    with pytest.raises(TraceError) as err:
        export(str(tmp_path / "none.arrows"), "perfetto")
    assert str(err.value) == f"trace file '{tmp_path / 'none.arrows'}' does not exist"
    src = tmp_path / "w.arrows"
    write_wafer_trace(src)
    with pytest.raises(TraceError) as err:
        export(str(src), "json", str(src))
    assert str(err.value) == f"export output '{src}' would overwrite its input; give another -o"


def test_cli_export_and_run_perfetto(tmp_path, capsys):
    src = tmp_path / "w.arrows"
    write_wafer_trace(src)
    assert cli.main(["trace", "export", str(src), "--to", "perfetto"]) == 0
    assert (tmp_path / "w.pftrace").stat().st_size > 1000
    assert "flows" in capsys.readouterr().out
    assert cli.main(["trace", "export", str(tmp_path / "x.arrows"), "--to", "json"]) == 2
    missing = tmp_path / "x.arrows"
    assert capsys.readouterr().err == f"wafersim: error: trace file '{missing}' does not exist\n"
    out = tmp_path / "run.pftrace"
    rc = cli.main(["run", "link-chain", "--set", "items=20", "--quiet", "--perfetto", str(out)])
    assert rc == 0 and out.stat().st_size > 100 and (tmp_path / "run.arrows").exists()


def test_overview_is_the_mean_busy_share_of_its_components(tmp_path):
    """The row group's values equal a direct computation: per bin, the union of each
    component's non-stall slices, averaged over the row's components that have slices."""
    import numpy as np

    from traces.layout import display_segments
    from traces.reader import read_trace

    src = tmp_path / "w.arrows"
    write_wafer_trace(src, w=3, h=2, steps=5)
    export_perfetto(src, tmp_path / "w.pftrace")
    packets = read_packets(tmp_path / "w.pftrace")
    row = next(p.track_descriptor for p in packets if p.track_descriptor.name == "pe[*,0]")
    points = [(p.timestamp, p.track_event.double_counter_value) for p in packets
              if p.HasField("track_event") and p.track_event.track_uuid == row.uuid]  # fmt: skip
    rows = read_trace(src).table.to_pylist()
    end = max(r["ts_ticks"] + r["dur_ticks"] for r in rows)
    comps = sorted({r["component"] for r in rows if r["phase"] != "counter"
                    and "pe[*,0]" in display_segments(r["component"])})  # fmt: skip
    assert points[-1] == (end, 0.0) and len(points) > 2
    # a value is written when it changes: it holds, bin after bin, until the next one
    for (t, value), (t_next, _) in itertools.pairwise(points):
        shares = []
        for comp in comps:
            covered = np.zeros(end + 1, bool)
            for r in rows:
                if r["component"] == comp and r["category"] != "stall" and r["dur_ticks"] > 0:
                    covered[r["ts_ticks"] : r["ts_ticks"] + r["dur_ticks"]] = True
            shares.append(covered[t:t_next].mean())
        assert value == pytest.approx(100 * np.mean(shares)), t
