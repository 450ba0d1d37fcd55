"""How a trace is laid out for a timeline viewer: track tree, lanes and flow pairs.

Exporters (:mod:`traces.perfetto`, :mod:`traces.chrome_json`) share this layout so both show the
same picture. Nothing here knows a hardware family: it works on component *paths* only.

* **Track tree.** Every segment of a path such as ``wafer/pe[3,4]/router`` is a node. A segment
  with two or more integer indices gets a grouping node over all but its first index
  (``pe[*,4]`` is row 4), so a mesh reads wafer -> rows -> PEs -> children;
  ``pod/chip[x,y,z]`` becomes pod -> ``chip[*,y,z]`` -> chips (a TPU link, ``link[0,0>1,0]``,
  is named by its ends and gets no group). Siblings are ordered naturally (``pe[2,0]`` before
  ``pe[10,0]``).
* **Lanes.** Viewers need the slices of one track to nest. Exporters visit a batch's slices in
  start order (longest first at one start; at one start and length, the one written last first,
  as an enclosing slice is written when it ends, after what it encloses), and a slice goes on the
  first lane where it either starts after everything open there or lies inside the innermost
  open slice: a task's instructions nest under the task, a message's chunks under the message.
  A lane keeps only its stack of open ends and its last start, so memory is constant per lane;
  a slice that starts before its lane's last start (out of order across batches) takes another
  lane rather than break nesting.
* **Flows.** The schema lets one send (``flow_out``) reach any number of receives (``flow_in``);
  viewer flows are point to point. :class:`FlowPlan` (one streaming pre-pass) gives every
  (send, receive) pair its own viewer id: a send with *k* receives carries ids
  ``base .. base+k-1``, its receives take them in order. Receives without a send are dropped
  and counted.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simcore.errors import TraceError
from traces.reader import BatchStream, iter_batches

_INDEXED = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<idx>[^\[\]]*)\]$")
_NUM = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """Sort key that orders embedded numbers numerically: ``pe[2,0]`` < ``pe[10,0]``."""
    return tuple(int(p) if p.isdigit() else p for p in _NUM.split(text))


def display_segments(path: str) -> tuple[str, ...]:
    """Track-tree node names for ``path``, with row grouping nodes inserted (see module doc)."""
    out: list[str] = []
    for seg in path.split("/"):
        m = _INDEXED.match(seg)
        if m:
            idx = [i.strip() for i in m["idx"].split(",")]
            if len(idx) >= 2 and all(i.isdigit() for i in idx):
                out.append(f"{m['base']}[*,{','.join(idx[1:])}]")
        out.append(seg)
    return tuple(out)


@dataclasses.dataclass
class TrackNode:
    """One node of the component tree. ``uid`` is unique and non-zero; ``rank`` orders siblings."""

    uid: int
    name: str
    parent: int
    rank: int
    has_children: bool
    key: tuple[str, ...] = ()  # the display segments from the root to this node


def build_tree(paths: list[str], first_uid: int = 1) -> tuple[list[TrackNode], dict[str, int]]:
    """Nodes (parents before children) for all component paths, and each path's node uid."""
    keys: set[tuple[str, ...]] = set()
    for path in paths:
        segs = display_segments(path)
        for i in range(1, len(segs) + 1):
            keys.add(segs[:i])
    ordered = sorted(keys, key=lambda k: (len(k), tuple(natural_key(s) for s in k)))
    uid_of: dict[tuple[str, ...], int] = {}
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for key in ordered:
        children.setdefault(key[:-1], []).append(key)
    nodes: list[TrackNode] = []
    for key in ordered:
        uid_of[key] = first_uid + len(nodes)
        sibs = children[key[:-1]]
        nodes.append(
            TrackNode(
                uid=uid_of[key],
                name=key[-1],
                parent=uid_of.get(key[:-1], 0),
                rank=sibs.index(key),
                has_children=key in children,
                key=key,
            )
        )
    return nodes, {p: uid_of[display_segments(p)] for p in paths}


class Lanes:
    """Assigns each slice of one component to the first lane it nests on (see module doc)."""

    __slots__ = ("categories", "last", "stacks")

    def __init__(self) -> None:
        self.stacks: list[list[int]] = []  # per lane: ends of the open slices, innermost last
        self.last: list[int] = []  # per lane: the last start placed
        self.categories: list[str] = []  # per lane: the category of its first slice

    def place(self, start: int, end: int, category: str = "") -> int:
        for i, stack in enumerate(self.stacks):
            if start < self.last[i]:
                continue
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                self.last[i] = start
                return i
        self.stacks.append([end])
        self.last.append(start)
        self.categories.append(category)
        return len(self.stacks) - 1

    def name(self, lane: int) -> str:
        """A lane's track name: its number and the category that opened it."""
        cat = self.categories[lane]
        return f"lane {lane}: {cat}" if cat else f"lane {lane}"


def start_order(
    ts: pa.Array, dur: pa.Array, flow_out: pa.Array | None = None, flow_in: pa.Array | None = None
) -> list[int]:
    """Row indices of a batch in the order exporters visit them (see the module doc). Given the
    flow columns, a send goes before a receive of its flow at the same start (a viewer drops a
    flow whose receive it meets before the send: the receive slice that started waiting at the
    instant the item was sent is longer, so the start order alone would put it first)."""
    t = ts.to_numpy(zero_copy_only=False)
    d = dur.to_numpy(zero_copy_only=False)
    rows = np.arange(len(t))
    order = np.lexsort((-rows, -d, t)).tolist()
    if flow_out is None or flow_in is None or flow_in.null_count == len(flow_in):
        return order
    sends = flow_out.to_pylist()
    receives = flow_in.to_pylist()
    out: list[int] = []
    i, n = 0, len(order)
    while i < n:  # one group of rows with the same start at a time
        j = i
        while j < n and t[order[j]] == t[order[i]]:
            j += 1
        group = order[i:j]
        sent = {sends[r] for r in group if sends[r] is not None}
        waiting = {receives[r] for r in group if receives[r] is not None} & sent
        if waiting:  # a receive waits for its send: start order otherwise (chains included)
            group = _sends_first(group, sends, receives, waiting)
        out += group
        i = j
    return out


def _sends_first(
    group: list[int], sends: list[int | None], receives: list[int | None], waiting: set[int]
) -> list[int]:
    """``group`` in start order, except that a row receiving a flow sent in the group comes
    after the row that sends it (a stable topological order: the earliest ready row first)."""
    out: list[int] = []
    done: set[int] = set()
    pending = list(group)
    while pending:
        for k, r in enumerate(pending):  # noqa: B007 - k is used after the loop
            f = receives[r]
            if f is None or f not in waiting or f in done:
                break
        else:  # a cycle cannot happen (a send precedes its receive); keep the order if it does
            k, r = 0, pending[0]
        out.append(r)
        del pending[k]
        if sends[r] is not None:
            done.add(sends[r])
    return out


@dataclasses.dataclass
class FlowPlan:
    """Viewer flow ids for one trace: sorted send ids, their receive counts and first ids."""

    ids: np.ndarray
    counts: np.ndarray
    bases: np.ndarray
    orphan_receives: int

    @property
    def pairs(self) -> int:
        return int(self.counts.sum())

    def send_ids(self, flow_id: int) -> range:
        """Viewer ids a send of ``flow_id`` starts (empty if nothing receives it)."""
        i = int(np.searchsorted(self.ids, flow_id))
        if i < len(self.ids) and self.ids[i] == flow_id:
            base = int(self.bases[i])
            return range(base, base + int(self.counts[i]))
        return range(0)

    def batch_sends(self, flow_out: pa.Array) -> tuple[list[int], list[int]]:
        """Per row of a batch's ``flow_out`` column: first viewer id and count (0: no flow)."""
        if flow_out.null_count == len(flow_out) or len(self.ids) == 0:
            zeros = [0] * len(flow_out)
            return zeros, zeros
        fo = flow_out.fill_null(-1).to_numpy(zero_copy_only=False)
        i = np.minimum(np.searchsorted(self.ids, fo), len(self.ids) - 1)
        hit = self.ids[i] == fo
        return (
            np.where(hit, self.bases[i], 0).tolist(),
            np.where(hit, self.counts[i], 0).tolist(),
        )

    def receive_id(self, flow_id: int, seen: dict[int, int]) -> int | None:
        """Viewer id for the next receive of ``flow_id``; ``seen`` counts receives so far."""
        i = int(np.searchsorted(self.ids, flow_id))
        if i >= len(self.ids) or self.ids[i] != flow_id:
            return None
        j = seen.get(flow_id, 0)
        if j + 1 >= self.counts[i]:
            seen.pop(flow_id, None)
        else:
            seen[flow_id] = j + 1
        return int(self.bases[i]) + j


@dataclasses.dataclass
class Prepass:
    """What one cheap streaming pass learns before exporting: paths, flows, event counts."""

    components: list[str]
    flows: FlowPlan
    events: int
    end_ticks: int = 0  # the last tick any event reaches
    sliced: frozenset[str] = frozenset()  # components with at least one slice or instant
    note: str = ""  # what was lost if the trace is cut off, else ""


def _valid(arr: pa.Array) -> np.ndarray:
    return arr.drop_null().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def prepass(path: str) -> Prepass:
    """Collect component paths and flow ids batch by batch (memory: 8 bytes per flow event)."""
    comps: set[str] = set()
    sliced: set[str] = set()
    end = 0
    outs: list[np.ndarray] = []
    ins: list[np.ndarray] = []
    events = 0
    stream = BatchStream(path)
    for batch in stream:
        events += batch.num_rows
        col = batch.column("component")
        used = pc.unique(col.indices).to_numpy(zero_copy_only=False)
        dictionary = col.dictionary.to_pylist()
        comps.update(dictionary[i] for i in used)
        not_counter = pc.not_equal(batch.column("phase").cast(pa.string()), "counter")
        used = pc.unique(pc.filter(col.indices, not_counter)).to_numpy(zero_copy_only=False)
        sliced.update(dictionary[i] for i in used)
        last = pc.max(pc.add(batch.column("ts_ticks"), batch.column("dur_ticks"))).as_py()
        end = max(end, last or 0)
        outs.append(_valid(batch.column("flow_out")))
        ins.append(_valid(batch.column("flow_in")))
    plan = flow_plan(outs, ins)
    if stream.truncated and not events:
        raise TraceError(f"{stream.note}: nothing readable to export")
    return Prepass(
        sorted(comps, key=natural_key), plan, events, note=stream.note, end_ticks=end,
        sliced=frozenset(sliced),
    )  # fmt: skip


def flow_plan(outs: list[np.ndarray], ins: list[np.ndarray]) -> FlowPlan:
    """The viewer flow ids of the sends ``outs`` and receives ``ins`` (flow ids, per batch)."""
    sends = np.unique(np.concatenate(outs)) if outs else np.zeros(0, np.int64)
    recv = np.concatenate(ins) if ins else np.zeros(0, np.int64)
    rids, rcounts = np.unique(recv, return_counts=True)
    has_send = np.isin(rids, sends)
    ids, counts = rids[has_send], rcounts[has_send].astype(np.int64)
    bases = np.concatenate(([1], 1 + np.cumsum(counts)[:-1])).astype(np.int64)[: len(ids)]
    return FlowPlan(ids, counts, bases, orphan_receives=int(rcounts[~has_send].sum()))


def kept_flow_plan(path: str, dropped: set[str]) -> FlowPlan:
    """:func:`flow_plan` of the events of components not in ``dropped`` only (a pass over the
    component and flow columns): flows to or from a dropped component are left out."""
    outs: list[np.ndarray] = []
    ins: list[np.ndarray] = []
    for batch in iter_batches(path):
        col = batch.column("component")
        keep = np.asarray([c not in dropped for c in col.dictionary.to_pylist()], bool)
        mask = pa.array(keep[col.indices.to_numpy(zero_copy_only=False)])
        outs.append(_valid(batch.column("flow_out").filter(mask)))
        ins.append(_valid(batch.column("flow_in").filter(mask)))
    return flow_plan(outs, ins)


def map_rows(arr: pa.Array) -> list[list[tuple[str, object]] | None] | None:
    """The entries of a (non-sliced) map column per row, or None if no row has any."""
    if arr.null_count == len(arr) or len(arr.keys) == 0:
        return None
    offsets = arr.offsets.to_pylist()
    keys = arr.keys.to_pylist()
    items = arr.items.to_pylist()
    return [
        list(zip(keys[a:b], items[a:b], strict=True)) if b > a else None
        for a, b in itertools.pairwise(offsets)
    ]


def open_output(path: str, mode: str) -> IO[Any]:
    """Open an exporter's output file (``'w'`` text or ``'wb'``), creating its folder; a
    failure is a :class:`TraceError` naming the path."""
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        return open(path, mode, encoding="utf-8" if "b" not in mode else None)
    except OSError as exc:
        raise TraceError(f"cannot write '{path}': {exc.strerror}") from None


@dataclasses.dataclass(frozen=True)
class CounterUnit:
    """How a counter is shown: its track name, the factor applied to its values, and its unit."""

    name: str
    scale: float
    unit: str


#: Counter-name endings and what they count (the trace schema stores bare numbers).
_COUNT_UNITS = (
    ("_triggers", "triggers"),
    ("_commands", "commands"),
    ("_bytes", "bytes"),
    ("_chunks", "chunks"),
)


def counter_unit(name: str) -> CounterUnit:
    """The display of counter ``name``: shares (``*_utilisation``, ``*_fraction``) become
    percent, queue and buffer depths are in wavelets, ``*_<count noun>`` keeps its noun."""
    label = name.replace("_", " ")
    if name.endswith(("_utilisation", "_fraction")):
        return CounterUnit(f"{label} (%)", 100.0, "%")
    if name.startswith(("buffer ", "input queue")):
        return CounterUnit(f"{label} (wavelets)", 1.0, "wavelets")
    for ending, unit in _COUNT_UNITS:
        if name.endswith(ending):
            return CounterUnit(label, 1.0, unit)
    return CounterUnit(name, 1.0, "")
