"""Large wafers stay usable in Perfetto: above 1,024 PEs, PEs are summarised in 8x8 blocks (an
active % track each) except a chosen detail region; flows stay whole; `all` keeps everything."""

from __future__ import annotations

import collections

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from app import cli
from tests.trace_samples import write_wafer_trace
from traces.perfetto import SUMMARY_ABOVE_PES, export_perfetto

TE = pb.TrackEvent


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "w40.arrows"
    write_wafer_trace(path, w=40, h=40, steps=1, batch_rows=8192, fanout=2)
    assert SUMMARY_ABOVE_PES < 40 * 40
    return path


def _read(path):
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    packets = list(trace.packet)
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets
              if p.HasField("track_descriptor")}  # fmt: skip
    return packets, tracks


def _values(packets, uid):
    return [p.track_event.double_counter_value for p in packets if p.track_event.track_uuid == uid]


def _integral(packets, uid):
    """The time integral of a counter track's step function (value x ns)."""
    pts = [(p.timestamp, p.track_event.double_counter_value) for p in packets
           if p.track_event.track_uuid == uid]  # fmt: skip
    return sum(
        v * (b[0] - a[0]) for a, b, v in zip(pts, pts[1:], [v for _, v in pts], strict=False)
    )


def test_default_summarises_every_pe_in_blocks(big, tmp_path):
    out = tmp_path / "d.pftrace"
    stats = export_perfetto(big, out)
    assert "1,600 PEs above 1,024: summarised in 8x8 blocks" in stats.detail
    packets, tracks = _read(out)
    names = collections.Counter(td.name for td in tracks.values())
    assert not any(n.startswith("pe[") and ":" not in n for n in names)  # no PE's own track
    blocks = [td for td in tracks.values() if td.name.startswith("pe[") and ":" in td.name]
    assert len(blocks) == 25 and {"PE blocks", "wafer"} <= set(names)
    for td in blocks:
        assert td.counter.unit_name == "%" and td.description.startswith("overview")
        values = _values(packets, td.uuid)
        assert max(values) > 0 and all(0 <= v <= 100 for v in values)
    # the wafer's own overview covers the same activity whether its PEs are summarised or not
    # (its bins differ: fewer tracks leave room for more bins)
    full = tmp_path / "all.pftrace"
    assert export_perfetto(big, full, detail_region="all").summarised == 0
    packets_all, tracks_all = _read(full)
    (w_sum,) = [td.uuid for td in tracks.values() if td.name == "wafer"]
    (w_all,) = [td.uuid for td in tracks_all.values() if td.name == "wafer"]
    assert _integral(packets, w_sum) == pytest.approx(_integral(packets_all, w_all), rel=1e-9)
    assert len(tracks) < len(tracks_all) / 100


def test_a_detail_region_keeps_its_pes_whole_and_flows_paired(big, tmp_path):
    out = tmp_path / "r.pftrace"
    stats = export_perfetto(big, out, detail_region="0:8,2:4")
    assert "detail kept for 0:8,2:4, 16 PEs in full" in stats.detail
    packets, tracks = _read(out)
    pes = {td.name for td in tracks.values() if td.name.startswith("pe[") and ":" not in td.name}
    assert pes == {f"pe[{x},{y}]" for x in range(8) for y in (2, 3)} | {"pe[*,2]", "pe[*,3]"}
    starts = [f for p in packets for f in p.track_event.flow_ids]
    ends = [f for p in packets for f in p.track_event.terminating_flow_ids]
    assert starts and sorted(starts) == sorted(ends) == sorted(set(starts))
    assert stats.flows == len(starts) and stats.summarised > 0


def test_small_wafers_are_untouched_and_the_cli_says_what_it_did(tmp_path, capsys):
    small = tmp_path / "s.arrows"
    write_wafer_trace(small)
    assert export_perfetto(small, tmp_path / "s.pftrace").detail == ""
    big = tmp_path / "b.arrows"
    write_wafer_trace(big, w=33, h=32, steps=1, batch_rows=8192, fanout=1)
    assert cli.main(["trace", "export", str(big), "--to", "perfetto", "-o",
                     str(tmp_path / "b.pftrace"), "--detail-region", "0:4,0:4"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "1,056 PEs above 1,024: summarised in 8x8 blocks (detail kept for 0:4,0:4" in out
    assert cli.main(["trace", "export", str(big), "--to", "json", "--detail-region", "all"]) == 2
    assert "--detail-region applies to --to perfetto only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["trace", "export", str(big), "--to", "perfetto", "--detail-region", "4:1,0:2"])
    assert exc.value.code == 2
    assert "give x0:x1,y0:y1 with x0 < x1 and y0 < y1" in capsys.readouterr().err
