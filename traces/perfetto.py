"""Export a wafersim trace to Perfetto's native protobuf format (``.pftrace``).

The output is a stream of ``TracePacket`` messages built with the classes of the official
``perfetto`` Python package, on one trusted packet sequence:

* Timestamps are simulated nanoseconds whatever the tick rate: every tick time ``t`` is written
  as ``round(t * 1e9 / tick_hz)`` (:class:`TickToNs`, exact integer arithmetic), and a slice's
  end as the converted end tick, so adjacent slices stay adjacent. Perfetto's own resolution is
  1 ns; a clock with ``unit_multiplier_ns`` could only express whole-nanosecond ticks, which
  850 MHz, 1.2 GHz, 17 GHz and 1.503 THz time bases are not (docs/traces.md, "Time").
* ``TrackDescriptor`` packets build the component tree (:mod:`traces.layout`); a component's own
  track is its lane 0, extra lanes for overlapping slices are its child tracks ``lane N``, and
  each counter name of a component is a child counter track.
* Slices become ``TYPE_SLICE_BEGIN``/``TYPE_SLICE_END`` pairs, zero-length slices and instants
  ``TYPE_INSTANT``, counters ``TYPE_COUNTER`` with ``double_counter_value``. Event names,
  categories and argument names are interned (``InternedData``); arguments become debug
  annotations; every (send, receive) pair is one flow (``flow_ids``/``terminating_flow_ids``).

The input is read batch by batch (a pre-pass for component paths and flow ids, then the export),
so memory stays flat whatever the trace length.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from array import array
from typing import BinaryIO

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from simcore.config import parse_region as parse_block
from simcore.errors import TraceError
from traces.layout import (
    Lanes,
    TrackNode,
    build_tree,
    counter_unit,
    display_segments,
    kept_flow_plan,
    map_rows,
    natural_key,
    open_output,
    prepass,
    start_order,
)
from traces.reader import iter_batches, read_header

SEQUENCE_ID = 1
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_COUNTER = pb.TrackEvent.TYPE_COUNTER
_EXPLICIT = pb.TrackDescriptor.EXPLICIT


#: Above this many PEs (a 32 x 32 mesh), a wafer trace's per-PE tracks are summarised into
#: blocks of :data:`BLOCK_PES` x :data:`BLOCK_PES` PEs (one active % track each), except the
#: PEs of ``detail_region``; ``detail_region="all"`` keeps every PE's tracks.
SUMMARY_ABOVE_PES = 1024
BLOCK_PES = 8
_PE_SEG = re.compile(r"^pe\[(\d+),\s*(\d+)\]$")


@dataclasses.dataclass(frozen=True)
class Region:
    """PEs ``x0 <= x < x1``, ``y0 <= y < y1`` (``all``: every PE)."""

    x0: int = 0
    x1: int = 0
    y0: int = 0
    y1: int = 0
    everything: bool = False

    def __contains__(self, xy: tuple[int, int]) -> bool:
        return self.everything or (self.x0 <= xy[0] < self.x1 and self.y0 <= xy[1] < self.y1)

    def describe(self) -> str:
        return "all" if self.everything else f"{self.x0}:{self.x1},{self.y0}:{self.y1}"


def parse_region(text: str | None) -> Region | None:
    """``x0:x1,y0:y1`` (half-open, like Python slices) or ``all``; None stays None. A bad
    spelling is a :class:`TraceError` saying the form."""
    if text is None:
        return None
    if text.strip() == "all":
        return Region(everything=True)
    try:
        return Region(*parse_block(text))
    except ValueError as e:
        raise TraceError(f"--detail-region {e}; or all (every PE)") from None


@dataclasses.dataclass
class DetailPlan:
    """Which components keep their tracks, and the block each summarised one counts in."""

    block_of: dict[str, str]  # summarised component -> its block's synthetic path
    pes: int  # PEs in the trace
    kept_pes: int
    region: Region | None

    def describe(self) -> str:
        if not self.block_of:
            return ""
        where = f"detail kept for {self.region.describe()}" if self.region else "no detail region"
        return (
            f"{self.pes:,} PEs above {SUMMARY_ABOVE_PES:,}: summarised in {BLOCK_PES}x{BLOCK_PES} "
            f"blocks ({where}, {self.kept_pes:,} PEs in full; --detail-region x0:x1,y0:y1 or all)"
        )


def detail_plan(components: list[str], region: Region | None) -> DetailPlan:
    """Above :data:`SUMMARY_ABOVE_PES` PEs, every component under a PE outside ``region`` is
    summarised into its block ``<prefix>/PE blocks/pe[x0:x1,y0:y1]``."""
    pe_of: dict[str, tuple[str, int, int]] = {}
    for comp in components:
        parts = comp.split("/")
        for i, part in enumerate(parts):
            m = _PE_SEG.match(part)
            if m:
                pe_of[comp] = ("/".join(parts[:i]), int(m[1]), int(m[2]))
                break
    pes = {v for v in pe_of.values()}
    if len(pes) <= SUMMARY_ABOVE_PES or (region is not None and region.everything):
        return DetailPlan({}, len(pes), len(pes), region)
    block_of = {}
    for comp, (prefix, x, y) in pe_of.items():
        if region is not None and (x, y) in region:
            continue
        bx, by = x // BLOCK_PES * BLOCK_PES, y // BLOCK_PES * BLOCK_PES
        head = f"{prefix}/" if prefix else ""
        block_of[comp] = f"{head}PE blocks/pe[{bx}:{bx + BLOCK_PES},{by}:{by + BLOCK_PES}]"
    kept = len({v for c, v in pe_of.items() if c not in block_of})
    return DetailPlan(block_of, len(pes), kept, region)


@dataclasses.dataclass
class ExportStats:
    """What an export wrote; the counts are what a trace processor should find."""

    events: int = 0
    slices: int = 0  # slice events (a begin/end pair each) plus instants
    instants: int = 0
    counters: int = 0
    overview_values: int = 0  # counter values of the groups' active % overview tracks
    path_slices: int = 0  # slices of the critical-path track (not events of the trace)
    summarised: int = 0  # events of summarised PEs, counted in their block's active % only
    flows: int = 0  # (send, receive) pairs
    orphan_receives: int = 0  # flow_in events whose id no event sends
    tracks: int = 0  # every track descriptor written
    event_tracks: int = 0  # lane and counter tracks (the ones holding events)
    tick_hz: int = 1_000_000_000
    wall_s: float = 0.0
    bytes: int = 0
    note: str = ""  # the input was cut off: what was lost (the readable part is exported)
    detail: str = ""  # how a large wafer's PEs were summarised (empty: every PE in full)

    def describe(self) -> str:
        """One line for the command line."""
        time_note = TickToNs(self.tick_hz).describe()
        orphans = f", {self.orphan_receives:,} receives without a send" * bool(self.orphan_receives)
        return (
            f"{self.events:,} events -> {self.slices:,} slices ({self.instants:,} instants), "
            f"{self.counters:,} counter values, {self.flows:,} flows, {self.tracks:,} tracks "
            f"({self.overview_values:,} overview values, {self.path_slices:,} critical-path "
            f"slices){orphans}; {time_note}; {self.bytes / 1e6:.1f} MB in {self.wall_s:.2f} s"
        )


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


_PREFIXED = 1 << 14
_PREFIX = [b"\x0a" + _varint(n) for n in range(_PREFIXED)]  # tag of field 1 + length


class TickToNs:
    """Converts ticks of ``1 / tick_hz`` seconds to whole nanoseconds, rounding half up.

    The ratio ``1e9 / tick_hz`` is kept as a reduced fraction ``num / den``, so the conversion
    is exact integer arithmetic at any trace length (no float drift)."""

    def __init__(self, tick_hz: int) -> None:
        if tick_hz <= 0:
            raise TraceError(f"trace header has tick_hz {tick_hz!r}; it must be a positive integer")
        g = math.gcd(1_000_000_000, tick_hz)
        self.tick_hz = tick_hz
        self.num = 1_000_000_000 // g
        self.den = tick_hz // g

    def __call__(self, ticks: int) -> int:
        return (2 * ticks * self.num + self.den) // (2 * self.den)

    @property
    def exact(self) -> bool:
        """Whether every tick is a whole number of nanoseconds (no rounding happens)."""
        return self.den == 1

    def describe_span(self, ticks: int) -> str:
        """``ticks`` as a duration with a readable unit."""
        ns = ticks * self.num / self.den
        for unit, size in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
            if ns >= size:
                return f"{ns / size:.4g} {unit}"
        return f"{ns:.4g} ns"

    def describe(self) -> str:
        ns = self.num / self.den
        if self.exact:
            return f"1 tick = {self.num} ns"
        return f"1 tick = {ns:.6g} ns (times rounded to the nearest ns)"


class _Out:
    """Frames serialized packets as the ``repeated TracePacket packet = 1`` field of ``Trace``."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.parts: list[bytes] = []
        self.bytes = 0

    def add(self, packet: pb.TracePacket) -> None:
        data = packet.SerializeToString()
        n = len(data)
        self.parts.append((_PREFIX[n] if n < _PREFIXED else b"\x0a" + _varint(n)) + data)

    def flush(self) -> None:
        blob = b"".join(self.parts)
        self.fh.write(blob)
        self.bytes += len(blob)
        self.parts.clear()


def export_perfetto(
    trace_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    detail_region: str | None = None,
) -> ExportStats:
    """Write ``trace_path`` (a wafersim Arrow trace) as a Perfetto trace at ``out_path``.
    Above :data:`SUMMARY_ABOVE_PES` PEs, PEs outside ``detail_region`` (``x0:x1,y0:y1`` or
    ``all``) are summarised in blocks (:func:`detail_plan`)."""
    t0 = time.perf_counter()
    trace_path, out_path = os.fspath(trace_path), os.fspath(out_path)
    region = parse_region(detail_region)
    header = read_header(trace_path)
    pre = prepass(trace_path)
    plan = detail_plan(pre.components, region)
    if plan.block_of:
        pre = dataclasses.replace(pre, flows=kept_flow_plan(trace_path, set(plan.block_of)))
    to_ns = TickToNs(int(header.get("tick_hz") or 0))
    stats = ExportStats(tick_hz=to_ns.tick_hz, detail=plan.describe())
    stats.orphan_receives = pre.flows.orphan_receives
    stats.note = pre.note
    fh = open_output(out_path, "wb")  # closed in the finally below
    try:
        out = _Out(fh)
        _write_preamble(out, header, to_ns)
        kept = [c for c in pre.components if c not in plan.block_of]
        blocks = sorted(set(plan.block_of.values()), key=natural_key)
        nodes, uid_of = build_tree(kept + blocks, first_uid=2)
        overview = Overview(nodes, pre, {c: uid_of[b] for c, b in plan.block_of.items()})
        for node in nodes:
            td = pb.TrackDescriptor(
                uuid=node.uid,
                name=node.name,
                parent_uuid=node.parent or 1,
                sibling_order_rank=node.rank,
                child_ordering=_EXPLICIT,
            )
            members = overview.members.get(node.uid)
            if members:
                td.counter.unit_name = "%"
                td.description = (
                    f"overview: active % = mean share of time its {members} component(s) with "
                    "slices spend inside a slice (compute, async and fabric; stalls excluded), "
                    "per bin of "
                    f"{to_ns.describe_span(overview.width)}"
                )
            out.add(_wrap(td))
        stats.tracks = len(nodes) + 1
        exporter = _Exporter(out, stats, uid_of, pre, 2 + len(nodes), to_ns, overview)
        exporter.summarised = frozenset(plan.block_of)
        exporter.run(trace_path)
        overview.write(out, to_ns, stats)
        _write_critical_path(out, trace_path, exporter.next_uid, to_ns, stats)
        out.flush()
        stats.bytes = out.bytes
    finally:
        fh.close()
    stats.wall_s = time.perf_counter() - t0
    return stats


#: The critical-path track lists at most this many steps (the path's first ones).
CRITICAL_PATH_STEPS = 20_000


def _write_critical_path(
    out: _Out, path: str, uid: int, to_ns: TickToNs, stats: ExportStats
) -> None:
    """The critical path of ``trace summary`` as the first track under the root: one slice per
    step, over the time that step adds to the path (from the later of its start and the
    previous step's end, so the slices never overlap), named ``component: category:name``."""
    from traces.summary import critical_path_of

    cp = critical_path_of(path, events=CRITICAL_PATH_STEPS)
    if not cp or "events" not in cp:
        return
    td = pb.TrackDescriptor(uuid=uid, parent_uuid=1, name="critical path",
                            sibling_order_rank=-1_000_000)  # fmt: skip
    td.description = (
        f"critical path (trace summary): {to_ns.describe_span(cp['length_ticks'])} over "
        f"{cp['steps']} slices, {cp['via_flows']} hops along flows; each slice is the time its "
        "step adds to the path; gaps are time in flight or waiting"
    )
    out.add(_wrap(td))
    stats.tracks += 1
    stats.event_tracks += 1
    pk = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=_NEEDS)
    te = pk.track_event
    reached = cp["events"][0]["ts_ticks"] if cp["events"] else 0
    for e in cp["events"]:
        start = max(e["ts_ticks"], reached)
        stop = e["ts_ticks"] + e["dur_ticks"]
        reached = max(reached, stop)
        if stop <= start or to_ns(stop) <= to_ns(start):
            continue
        te.Clear()
        te.type = _BEGIN
        te.track_uuid = uid
        te.name = f"{e['component']}: {e['event']}"
        pk.timestamp = to_ns(start)
        out.add(pk)
        te.Clear()
        te.type = _END
        te.track_uuid = uid
        pk.timestamp = to_ns(stop)
        out.add(pk)
        stats.path_slices += 1


def _wrap(td: pb.TrackDescriptor) -> pb.TracePacket:
    return pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, track_descriptor=td)


def _write_preamble(out: _Out, header: dict, to_ns: TickToNs) -> None:
    first = pb.TracePacket(
        trusted_packet_sequence_id=SEQUENCE_ID,
        sequence_flags=_CLEARED,
        first_packet_on_sequence=True,
    )
    scenario = header.get("scenario", "trace")
    first.track_descriptor.CopyFrom(
        pb.TrackDescriptor(
            uuid=1,
            name=f"wafersim {scenario} (seed {header.get('seed')})",
            description=f"wafersim {header.get('wafersim_version')} trace, simulated time in ns; "
            f"tick_hz {to_ns.tick_hz}: {to_ns.describe()}",
            child_ordering=_EXPLICIT,
        )
    )
    out.add(first)


class Overview:
    """Active % over time for every group track (a node with children and no events of its own:
    a PE row, a chip row, a pod, a stack), shown in the group's own row, so it reads while the
    group is collapsed.

    A component is active while inside any of its slices except stalls (its slices' union,
    exact while a slice arriving out of start order overlaps only the last :data:`KEEP`
    covered spans of its component); a group's value per time bin is the mean over its
    descendant components that have slices. At most :data:`BINS` bins span the run, fewer
    when there are many groups (:data:`VALUES` values in all at most, 20 bins at least)."""

    BINS = 400
    VALUES = 200_000

    def __init__(
        self, nodes: list[TrackNode], pre, block_uid: dict[str, int] | None = None
    ) -> None:
        has_events = {display_segments(c) for c in pre.components}
        uid_of_key = {n.key: n.uid for n in nodes}
        key_of_uid = {n.uid: n.key for n in nodes}
        groups = {n.key for n in nodes if n.has_children and n.key not in has_events}
        block_uid = block_uid or {}
        bins = min(self.BINS, max(20, self.VALUES // max(1, len(groups))))
        self.width = max(1, -(-pre.end_ticks // bins))
        self.bins = max(1, -(-pre.end_ticks // self.width))
        self.end = pre.end_ticks
        widths = np.full(self.bins, float(self.width))
        widths[-1] = max(1, self.end - (self.bins - 1) * self.width)
        self.widths = widths
        self.groups_of: dict[str, list[int]] = {}
        count: dict[int, int] = {}
        for comp in sorted(pre.sliced):
            segs = display_segments(comp)
            uids = [uid_of_key[segs[:i]] for i in range(1, len(segs)) if segs[:i] in groups]
            block = block_uid.get(comp)
            if block is not None:  # a summarised PE's component: its block and the blocks' group
                key = key_of_uid[block]
                up = [uid_of_key[key[:i]] for i in range(1, len(key)) if key[:i] in groups]
                uids += [u for u in up if u not in uids] + [block]
            self.groups_of[comp] = uids
            for uid in uids:
                count[uid] = count.get(uid, 0) + 1
        self.members = count
        # Per component: ticks in its partial first and last bins, and a difference array
        # counting the whole bins it covers (a few list operations per slice, whatever the
        # number of groups; summed into the groups once, at the end).
        self.partial: dict[str, array] = {}
        self.whole: dict[str, array] = {}
        self.covered: dict[str, list[list[int]]] = {}

    #: Disjoint covered spans remembered per component: slices arriving out of start order
    #: (across record batches) are counted exactly while they overlap only these.
    KEEP = 16

    def add(self, comp: str, start: int, end: int) -> None:
        spans = self.covered.setdefault(comp, [])
        if not spans or start >= spans[-1][1]:  # the common case: after everything so far
            self._bins(comp, start, end)
            if spans and start == spans[-1][1]:
                spans[-1][1] = end
            else:
                spans.append([start, end])
        elif start >= spans[-1][0]:  # overlaps only the last span (a nested or later slice)
            last = spans[-1]
            if end > last[1]:
                self._bins(comp, last[1], end)
                last[1] = end
        else:
            cur = start
            for a, b in spans:  # count only the parts no remembered span covers
                if b <= cur:
                    continue
                if a >= end:
                    break
                if a > cur:
                    self._bins(comp, cur, a)
                cur = max(cur, b)
                if cur >= end:
                    break
            if cur < end:
                self._bins(comp, cur, end)
            spans.append([start, end])
            spans.sort()
            merged = [spans[0]]
            for a, b in spans[1:]:
                if a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            spans[:] = merged
        if len(spans) > self.KEEP:
            del spans[: len(spans) - self.KEEP]

    def _bins(self, comp: str, start: int, end: int) -> None:
        partial = self.partial.get(comp)
        if partial is None:
            if comp not in self.groups_of or not self.groups_of[comp]:
                return
            partial = self.partial[comp] = array("d", bytes(8 * self.bins))
            self.whole[comp] = array("d", bytes(8 * (self.bins + 1)))
        w = self.width
        b0, b1 = start // w, (end - 1) // w
        if b0 == b1:
            partial[b0] += end - start
        else:
            partial[b0] += (b0 + 1) * w - start
            partial[b1] += end - b1 * w
            if b1 > b0 + 1:
                whole = self.whole[comp]
                whole[b0 + 1] += 1
                whole[b1] -= 1

    def _groups(self) -> dict[int, np.ndarray]:
        busy = {uid: np.zeros(self.bins) for uid in self.members}
        for comp, partial in self.partial.items():
            ticks = np.frombuffer(partial) + np.cumsum(np.frombuffer(self.whole[comp]))[:-1] * (
                self.width
            )
            for uid in self.groups_of[comp]:
                busy[uid] += ticks
        return busy

    def write(self, out: _Out, to_ns: TickToNs, stats: ExportStats) -> None:
        pk = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=_NEEDS)
        te = pk.track_event
        te.type = _COUNTER
        busy = self._groups()
        for uid in sorted(busy):
            te.track_uuid = uid
            pct = busy[uid] * 100.0 / (self.widths * self.members[uid])
            last = None
            for b, v in enumerate(pct.tolist()):
                if v != last:
                    pk.timestamp = to_ns(b * self.width)
                    te.double_counter_value = v
                    out.add(pk)
                    stats.overview_values += 1
                    last = v
            pk.timestamp = to_ns(self.end)
            te.double_counter_value = 0.0
            out.add(pk)
            stats.overview_values += 1
            stats.event_tracks += 1
        out.flush()


class _Exporter:
    """Pass two: events to packets, with lanes, counter tracks, interning and flows."""

    def __init__(
        self, out: _Out, stats: ExportStats, uid_of: dict[str, int], pre, next_uid: int,
        to_ns: TickToNs, overview: Overview,
    ) -> None:  # fmt: skip
        self.to_ns = to_ns
        self.overview = overview
        self.scale: dict[int, float] = {}
        self.out = out
        self.stats = stats
        self.uid_of = uid_of
        self.flows = pre.flows
        self.next_uid = next_uid
        self.lanes: dict[str, Lanes] = {}
        self.lane_uid: dict[tuple[str, int], int] = {}
        self.counter_uid: dict[tuple[str, str], int] = {}
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.arg_names: dict[str, int] = {}
        self.seen: dict[int, int] = {}
        self.summarised: frozenset[str] = frozenset()  # components drawn only in their block

    def _new_track(self, parent: int, name: str, rank: int) -> int:
        uid = self.next_uid
        self.next_uid += 1
        td = pb.TrackDescriptor(uuid=uid, parent_uuid=parent, name=name, sibling_order_rank=rank)
        self.out.add(_wrap(td))
        self.stats.tracks += 1
        self.stats.event_tracks += 1
        return uid

    def _lane_track(self, comp: str, lane: int) -> int:
        key = (comp, lane)
        uid = self.lane_uid.get(key)
        if uid is None:
            if lane == 0:
                uid = self.uid_of[comp]
                self.stats.event_tracks += 1
            else:
                name = self.lanes[comp].name(lane)
                uid = self._new_track(self.uid_of[comp], name, -1_000_000 + lane)
            self.lane_uid[key] = uid
        return uid

    def _counter_track(self, comp: str, name: str) -> int:
        key = (comp, name)
        uid = self.counter_uid.get(key)
        if uid is None:
            shown = counter_unit(name)
            uid = self.next_uid
            self.next_uid += 1
            td = pb.TrackDescriptor(
                uuid=uid, parent_uuid=self.uid_of[comp], name=shown.name,
                sibling_order_rank=1_000_000 + len(self.counter_uid),
            )  # fmt: skip
            td.counter.SetInParent()
            if shown.unit:
                td.counter.unit_name = shown.unit
            self.out.add(_wrap(td))
            self.stats.tracks += 1
            self.stats.event_tracks += 1
            self.scale[uid] = shown.scale
            self.counter_uid[key] = uid
        return uid

    def _iid(self, table: dict[str, int], value: str, packet: pb.TracePacket, kind: str) -> int:
        iid = table.get(value)
        if iid is None:
            iid = table[value] = len(table) + 1
            getattr(packet.interned_data, kind).add(iid=iid, name=value)
        return iid

    def run(self, path: str) -> None:
        st = self.stats
        out = self.out
        # Packets are reused (cleared, refilled, serialized): much cheaper than new messages.
        pk = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=_NEEDS)
        te = pk.track_event
        end = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=_NEEDS)
        end_te = end.track_event
        end_te.type = _END
        ctr = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=_NEEDS)
        ctr_te = ctr.track_event
        ctr_te.type = _COUNTER
        flows = self.flows
        overview = self.overview
        summarised = self.summarised
        num2, den, den2 = 2 * self.to_ns.num, self.to_ns.den, 2 * self.to_ns.den
        for batch in iter_batches(path):
            n = batch.num_rows
            st.events += n
            names = ("component", "category", "name", "phase")
            cols = [batch.column(c) for c in names]
            comp_d, cat_d, name_d, ph_d = (c.dictionary.to_pylist() for c in cols)
            comp_i, cat_i, name_i, ph_i = (c.indices.to_pylist() for c in cols)
            ts = batch.column("ts_ticks").to_pylist()
            dur = batch.column("dur_ticks").to_pylist()
            value = batch.column("value").to_pylist()
            send_base, send_count = flows.batch_sends(batch.column("flow_out"))
            fin = batch.column("flow_in").to_pylist()
            arg_cols = [map_rows(batch.column(c)) for c in ("args_int", "args_float", "args_str")]
            arg_cols = [a for a in arg_cols if a is not None]
            for r in start_order(
                batch.column("ts_ticks"),
                batch.column("dur_ticks"),
                batch.column("flow_out"),
                batch.column("flow_in"),
            ):
                comp = comp_d[comp_i[r]]
                t = ts[r]
                if comp in summarised:
                    d = dur[r]
                    if d > 0 and ph_d[ph_i[r]] != "counter" and cat_d[cat_i[r]] != "stall":
                        overview.add(comp, t, t + d)
                    st.summarised += 1
                    continue
                t_ns = (t * num2 + den) // den2
                if ph_d[ph_i[r]] == "counter":
                    ctr.timestamp = t_ns
                    uid = self._counter_track(comp, name_d[name_i[r]])
                    ctr_te.track_uuid = uid
                    v = value[r]
                    ctr_te.double_counter_value = 0.0 if v is None else v * self.scale[uid]
                    st.counters += 1
                    out.add(ctr)
                    continue
                te.Clear()
                if pk.HasField("interned_data"):
                    pk.ClearField("interned_data")
                pk.timestamp = t_ns
                d = dur[r]
                te.name_iid = self._iid(self.names, name_d[name_i[r]], pk, "event_names")
                te.category_iids.append(
                    self._iid(self.cats, cat_d[cat_i[r]], pk, "event_categories")
                )
                lanes = self.lanes.get(comp)
                if lanes is None:
                    lanes = self.lanes[comp] = Lanes()
                cat = cat_d[cat_i[r]]
                if d > 0 and cat != "stall":
                    overview.add(comp, t, t + d)
                track = self._lane_track(comp, lanes.place(t, t + d, cat) if d > 0 else 0)
                te.track_uuid = track
                for col in arg_cols:
                    group = col[r]
                    if group:
                        for k, v in group:
                            ann = te.debug_annotations.add()
                            ann.name_iid = self._iid(
                                self.arg_names, k, pk, "debug_annotation_names"
                            )
                            if isinstance(v, str):
                                ann.string_value = v
                            elif isinstance(v, float):
                                ann.double_value = v
                            else:
                                ann.int_value = v
                k = send_count[r]
                if k:
                    base = send_base[r]
                    te.flow_ids.extend(range(base, base + k))
                    st.flows += k
                f_in = fin[r]
                if f_in is not None:
                    rid = flows.receive_id(f_in, self.seen)
                    if rid is not None:
                        te.terminating_flow_ids.append(rid)
                st.slices += 1
                if d > 0:
                    te.type = _BEGIN
                    out.add(pk)
                    end.timestamp = ((t + d) * num2 + den) // den2
                    end_te.track_uuid = track
                    out.add(end)
                else:
                    te.type = _INSTANT
                    st.instants += 1
                    out.add(pk)
            out.flush()
