"""Exact simulated time in Perfetto, for every registered kind.

Each kind runs at its first small point of ``tests/test_metric_names.POINTS``, traced at the
``ops`` level; the trace is exported to ``.pftrace`` and read back with Perfetto's own protos
(``perfetto_trace_pb2.Trace``). Checked:

- every timestamp in the export is the Arrow trace's tick time in nanoseconds,
  ``round(ticks * 1e9 / tick_hz)`` (so a slice's duration is its simulated duration);
- the trace's span (time 0 to its last timestamp, the ``run/end`` event) is the run's simulated
  end within one tick (or 1 ns, Perfetto's resolution, where a tick is shorter);
- the run's ``time_s`` is that span within one tick, except for the kinds in
  :data:`MEASURED_WITHIN`, whose ``time_s`` is a measured region of the run (given with why).
"""

from __future__ import annotations

import collections

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from runner import registry, scenario
from simcore import config as cfg
from tests.test_metric_names import POINTS
from traces.perfetto import export_perfetto
from traces.reader import Trace, read_trace

TE = pb.TrackEvent

#: Kinds whose ``time_s`` is not the whole traced run: the ticks by which it differs at the
#: tested point, and why.
#: - wafer kinds (a user's ``wafer-program`` too): ``cycles = max(end) - min(start)`` of the PEs'
#:   measured work (workloads/wafer/wse.py); the 4 setup cycles before the first instruction are
#:   outside it.
#: - hbm-read, hbm-trace: the controller's ``end_cycle`` counts the last read burst's data
#:   transfer, which the kernel does not simulate as an event of its own
#:   (workloads/pim/hbmread.py).
#: - jitq: the study's tiled kernel ends on a precharge; ``end_cycle`` counts the cycle that
#:   command takes, while the row's slice in the trace ends where the precharge is issued
#:   (pim/controller.py).
MEASURED_WITHIN = {
    "wse-fmac": 4, "wse-bcast": 4, "summa": 4, "spmv": 4, "ws-matmul": 4, "wafer-program": 4,
    "gemv": 4, "hbm-read": 19, "hbm-trace": 9, "jitq": 1,
}  # fmt: skip

#: Kinds whose run goes on after what ``time_s`` measures, by this many simulated ns: the TPU
#: kinds' last packets return their credits one hop latency (``ici.hop_latency_ns``, 1,000 ns by
#: default) after the data arrived (tpu/network.py); the trace ends then, the operation's time
#: does not.
AFTER_NS = {"tpu-collective": 1000, "tpu-matmul": 1000, "tpu-p2p": 1000, "tpu-train-step": 1000}

registry.load_all()


def _export(kind_name: str, tmp_path) -> tuple[dict, list[pb.TracePacket], Trace]:
    kind = registry.KINDS[kind_name]
    params = cfg.load(kind.params, POINTS[kind_name][0][0])
    scen = scenario.Scenario(kind_name, "<test>", kind, "", {})
    arrows = tmp_path / f"{kind_name}.arrows"
    out = scenario.run_scenario(scen, params, trace_path=str(arrows))
    export_perfetto(arrows, tmp_path / f"{kind_name}.pftrace")
    trace = pb.Trace()
    trace.ParseFromString((tmp_path / f"{kind_name}.pftrace").read_bytes())
    return out.metrics, list(trace.packet), read_trace(arrows)


@pytest.mark.parametrize("name", sorted(registry.KINDS))
def test_perfetto_time_is_simulated_time(name, tmp_path):
    metrics, packets, arrow = _export(name, tmp_path)
    tick_hz = int(arrow.header["tick_hz"])
    tick_ns = 1e9 / tick_hz
    table = arrow.table
    # an ``ops`` trace holds the run's work, not only its run record (tpu-p2p's did not);
    # link-chain's only records are its items' (``wavelet``, at ``detail``) and the sink's end
    cats = set(table.column("category").cast("string").to_pylist())
    assert name == "link-chain" or cats - {"run"}, name
    ts = table.column("ts_ticks").to_pylist()
    dur = table.column("dur_ticks").to_pylist()

    def ns(ticks: int) -> int:
        return (2 * ticks * 10**9 + tick_hz) // (2 * tick_hz)

    want = collections.Counter(ns(t) for t in ts)
    want.update(ns(t + d) for t, d in zip(ts, dur, strict=True) if d > 0)
    overview = {p.track_descriptor.uuid for p in packets
                if p.track_descriptor.description.startswith("overview:")}  # fmt: skip
    ends = [p.timestamp for p in packets if p.track_event.track_uuid in overview]
    assert not ends or max(ends) == ns(max(t + d for t, d in zip(ts, dur, strict=True)))
    path = {p.track_descriptor.uuid for p in packets
            if p.track_descriptor.name == "critical path"}  # fmt: skip
    on_path = [p.timestamp for p in packets if p.track_event.track_uuid in path]
    assert all(ns(0) <= t <= ns(max(t + d for t, d in zip(ts, dur, strict=True)))
               for t in on_path)  # fmt: skip
    events = [p for p in packets if p.HasField("track_event")
              and p.track_event.track_uuid not in overview | path]  # fmt: skip
    assert not any(p.HasField("timestamp_clock_id") for p in packets)
    assert not any(p.HasField("clock_snapshot") for p in packets)
    got = collections.Counter(p.timestamp for p in events)
    assert got == want, name
    # the span: from 0 to the run's end
    span_ns = max(p.timestamp for p in events)
    end_ticks = max(t + d for t, d in zip(ts, dur, strict=True))
    tolerance_ns = max(tick_ns, 1.0)
    assert abs(span_ns - end_ticks * tick_ns) <= tolerance_ns, name
    differs = MEASURED_WITHIN.get(name, 0) * tick_ns + AFTER_NS.get(name, 0)
    assert abs(abs(span_ns - metrics["time_s"] * 1e9) - differs) <= tolerance_ns, (
        f"{name}: trace spans {span_ns} ns, time_s is {metrics['time_s'] * 1e9:.3f} ns"
    )


def test_a_known_slice_keeps_its_duration(tmp_path):
    """wse-fmac's main task: 47 cycles of 850 MHz are 55.29 ns, shown as 55 ns (it was 47)."""
    _, packets, _ = _export("wse-fmac", tmp_path)
    names = {i.iid: i.name for p in packets for i in p.interned_data.event_names}
    begin = next(p for p in packets
                 if p.track_event.type == TE.TYPE_SLICE_BEGIN
                 and names[p.track_event.name_iid] == "main")  # fmt: skip
    end = next(p for p in packets
               if p.track_event.type == TE.TYPE_SLICE_END
               and p.track_event.track_uuid == begin.track_event.track_uuid
               and p.timestamp > begin.timestamp)  # fmt: skip
    assert (begin.timestamp, end.timestamp) == (0, 55)
