"""An op graph run on a TPU slice: the workload layer's input from outside (HLO, Chakra traces).

The IR (what a reader produces):

- a :class:`Graph` is ``devices`` device ids ``0 .. devices-1`` and, for each device, its
  *program*: a list of :class:`Op` in a topological order. An SPMD program (one HLO module
  for every partition) is one list shared by all devices (:meth:`Graph.spmd`); a per-rank
  trace (Chakra) gives each device its own list;
- an :class:`Op` has a ``name``, a source location ``where`` (``file:line`` or a node id), a
  class ``cls`` and ``deps``: the indices, in the same program, of the ops that must finish
  before it starts (earlier ones only). The reader decides the schedule: an HLO reader in module
  order makes each op depend on the one before it (an async ``-start`` is an op whose successor
  does not wait for it; its ``-done`` does), a dataflow reader on its operands only;
- classes: ``compute`` (on the MXUs: ``matmul=(m, k, n)`` runs the chip's HBM -> VMEM -> MXU
  tile pipeline of :class:`tpu.chip.TensorChip`; otherwise ``flops`` as MXU passes while its
  ``bytes`` stream from HBM, the op ending when both have); ``memory`` (``bytes`` through the
  chip's HBM); ``collective`` (``kind`` one of :data:`COLLECTIVES`, ``bytes`` the per-device
  buffer as the program sees it: all-reduce's operand, all-gather's *result*, reduce-scatter's
  *operand*, all-to-all's operand, collective-permute's operand; ``groups`` the replica groups
  as tuples of device ids, ``pairs`` the (source, target) pairs of a collective-permute,
  ``channel`` its channel id); ``send`` / ``recv`` (``bytes`` to / from device ``peer``);
- a collective or a send/recv pair is one instance across devices: ops with the same ``key``
  (HLO: the op's name; a trace: what its reader uses to match ranks) join the same instance.

Devices on the torus: device ``d`` is chip ``topo.coords[d]``, row-major over the slice's
shape (the last axis fastest), like JAX's default device order on a TPU slice. A program may
name fewer devices than the slice has chips (the rest stay idle), not more.

Execution (mechanisms only): every device has two streams, ``compute`` (compute and memory
ops, one at a time on the chip) and ``comm`` (collectives, sends and receives, one at a time).
With ``issue="in-order"`` (the default) each takes its ops in program order and starts one when
its dependencies are done; with ``issue="ready"`` a free stream takes the lowest-numbered of
its ops whose dependencies are done (out of order, as a latency-hiding scheduler could). Compute
and communication overlap where the dependencies allow. A collective runs on the ICI
as flows of packets (:mod:`tpu.network`):

- if its groups are exactly the groups of a set of the slice's axes (and cover every chip),
  it is a :class:`tpu.collectives.Collective` over those axes (rings per axis, the rotated
  schedule); a device joins when its comm stream reaches the op, packets wait for late joiners;
- otherwise (an arbitrary group) a unidirectional ring over the group's chips in device order,
  each step's block routed on the torus in dimension order (:meth:`tpu.topology.Slice.route`):
  ``N-1`` steps of ``V/N`` for all-gather and reduce-scatter, ``2(N-1)`` for all-reduce, a step
  leaving a chip once it has joined and received the previous one; an all-to-all sends each
  block straight to its destination;
- a collective-permute (and a send) is a flow per pair, source to target, routed the same way.

An instance completes when its last chip is done; every device's op ends then (a group that
finishes early still waits for the others: a stated simplification). Payloads are size only.

After the run, :meth:`GraphRun.report` gives ``time_s``, the per-op table of the device that
finished last, its compute, memory and communication time (unions of its streams' busy spans),
their overlap and the bound.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import simpy

from simcore.component import Component
from simcore.errors import WafersimError
from simcore.tracing import TraceLevel
from tpu.chip import Job, TensorChip
from tpu.collectives import Collective
from tpu.collectives import groups as axis_groups
from tpu.network import Flow, IciNetwork
from tpu.topology import Coord, Slice

CLASSES = ("compute", "memory", "collective", "send", "recv")
#: How a stream picks its next op: in program order, or the lowest-numbered ready one.
ISSUES = ("in-order", "ready")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "collective-permute")
#: The stream each class runs on.
STREAM = {"compute": "compute", "memory": "compute", "collective": "comm", "send": "comm",
          "recv": "comm"}  # fmt: skip


class GraphError(WafersimError):
    """An op graph that cannot run on the slice (the reader names the file and line)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Op:
    """One operation of a device's program (see the module docstring for each class)."""

    name: str
    cls: str
    where: str = ""
    deps: tuple[int, ...] = ()
    matmul: tuple[int, int, int] | None = None
    flops: int = 0
    bytes: int = 0
    kind: str = ""
    groups: tuple[tuple[int, ...], ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()
    channel: int | None = None
    peer: int = -1
    key: str = ""
    itemsize: int = 4

    @property
    def stream(self) -> str:
        return STREAM[self.cls]

    @property
    def match_key(self) -> str:
        return self.key or self.name


@dataclasses.dataclass
class Graph:
    """``devices`` device ids and each one's program (``programs[d]``, a list of :class:`Op`)."""

    devices: int
    programs: dict[int, Sequence[Op]]

    @classmethod
    def spmd(cls, ops: Sequence[Op], devices: int) -> Graph:
        """One program run by every device (the list is shared, not copied)."""
        return cls(devices, {d: ops for d in range(devices)})

    def check(self, chips: int) -> None:
        """Refuse a graph the slice cannot run, naming the op."""
        if not 1 <= self.devices <= chips:
            raise GraphError(
                f"the program runs on {self.devices} devices but the slice has {chips} chips"
            )
        seen: set[int] = set()
        for d, ops in self.programs.items():
            if not 0 <= d < self.devices:
                raise GraphError(f"device {d} is not one of 0..{self.devices - 1}")
            if id(ops) in seen:
                continue
            seen.add(id(ops))
            for i, op in enumerate(ops):
                _check_op(op, i, self.devices)


def _where(op: Op) -> str:
    return f"{op.where}: " if op.where else ""


def _check_op(op: Op, i: int, devices: int) -> None:
    if op.cls not in CLASSES:
        raise GraphError(f"{_where(op)}op {op.name}: class {op.cls!r} is not one of {CLASSES}")
    for dep in op.deps:
        if not 0 <= dep < i:
            raise GraphError(f"{_where(op)}op {op.name}: dependency {dep} is not an earlier op")
    if op.cls == "collective":
        if op.kind not in COLLECTIVES:
            raise GraphError(f"{_where(op)}op {op.name}: collective {op.kind!r} is not one of "
                             f"{COLLECTIVES}")  # fmt: skip
        ids = [d for g in op.groups for d in g] + [d for p in op.pairs for d in p]
        bad = [d for d in ids if not 0 <= d < devices]
        if bad:
            raise GraphError(f"{_where(op)}op {op.name}: device {bad[0]} is not one of "
                             f"0..{devices - 1}")  # fmt: skip
        flat = [d for g in op.groups for d in g]
        if len(flat) != len(set(flat)):
            raise GraphError(f"{_where(op)}op {op.name}: a device is in two replica groups")
    if op.cls in ("send", "recv") and not 0 <= op.peer < devices:
        raise GraphError(f"{_where(op)}op {op.name}: peer {op.peer} is not one of "
                         f"0..{devices - 1}")  # fmt: skip


def device_coord(topo: Slice, device: int) -> Coord:
    """Device ``device``'s chip: row-major over the slice's shape (the last axis fastest)."""
    return topo.coords[device]


def match_axes(topo: Slice, groups: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """The axes whose groups (:func:`tpu.collectives.groups`) are exactly ``groups`` (as sets
    of device ids, covering every chip), or None."""
    want = {frozenset(g) for g in groups}
    if sum(len(g) for g in groups) != topo.chips or len(want) != len(groups):
        return None
    dims = len(topo.shape)
    for r in range(1, dims + 1):
        for axes in itertools.combinations(range(dims), r):
            got = {frozenset(topo.index[c] for c in g.chips) for g in axis_groups(topo, axes)}
            if got == want:
                return axes
    return None


class _Instance:
    """One collective (or send/recv pair) across devices: devices join, ``done`` fires once."""

    def __init__(self, run: GraphRun, op: Op) -> None:
        self.run = run
        self.op = op
        self.done = run.env.event()
        self.start_ticks = -1
        self.end_ticks = -1
        self.joined_devices = 0

    def join(self, device: int) -> None:
        if self.start_ticks < 0:
            self.start_ticks = self.run.env.now
        self.joined_devices += 1
        self._join(device)

    def _join(self, device: int) -> None:
        raise NotImplementedError

    def finish(self, *_: Any) -> None:
        if not self.done.triggered:
            self.end_ticks = self.run.env.now
            self.done.succeed()


class _Trivial(_Instance):
    """Nothing to move (groups of one chip, zero bytes): done as soon as a device joins."""

    def _join(self, device: int) -> None:
        self.finish()


class _AxisCollective(_Instance):
    """Groups that are a set of the slice's axes: :class:`tpu.collectives.Collective`."""

    def __init__(self, run: GraphRun, op: Op, axes: tuple[int, ...], n: int) -> None:
        super().__init__(run, op)
        # V, the whole array per group (an all-to-all's is N x each device's buffer)
        v = op.bytes * n if op.kind == "alltoall" else op.bytes
        item = max(1, op.itemsize)
        v = max(item, v // item * item)
        self.coll = Collective(run.net, op.kind, axes, v, item, on_done=self.finish)
        self.waiting = run.graph.devices

    def _join(self, device: int) -> None:
        if self.op.kind == "alltoall":  # AllToAll starts when every chip is in
            self.waiting -= 1
            if self.waiting == 0:
                self.coll.start()
            return
        self.coll.join(self.run.coord[device], None)


class _RingCollective(_Instance):
    """Arbitrary groups: a unidirectional ring per group in device order (module docstring)."""

    def __init__(self, run: GraphRun, op: Op, groups: Sequence[Sequence[int]]) -> None:
        super().__init__(run, op)
        self.groups = [list(g) for g in groups if len(g) > 1]
        self.next: dict[int, int] = {}
        self.n: dict[int, int] = {}
        for g in self.groups:
            for i, d in enumerate(g):
                self.next[d] = g[(i + 1) % len(g)]
                self.n[d] = len(g)
        self.joined: set[int] = set()
        self.finished: set[int] = set()
        self.sent = dict.fromkeys(self.next, 0)
        self.got = dict.fromkeys(self.next, 0)
        self.left = len(self.next)
        self.flows = 0

    def steps(self, d: int) -> int:
        n = self.n[d]
        if self.op.kind == "alltoall":
            return n - 1
        return 2 * (n - 1) if self.op.kind == "allreduce" else n - 1

    def block(self, d: int) -> int:
        """Bytes per step (all-to-all: per destination): V/N of the per-device buffer."""
        return max(1, self.op.bytes // self.n[d])

    def _join(self, device: int) -> None:
        if device not in self.next:
            return
        self.joined.add(device)
        if self.op.kind == "alltoall":
            self._alltoall(device)
        else:
            self._send(device)
        self._check(device)

    def _flow(self, src: int, dst: int, nbytes: int, tag: Any) -> None:
        run = self.run
        path = run.topo.route(run.coord[src], run.coord[dst])
        self.flows += 1
        Flow(run.net, path, nbytes, name=self.op.kind, done=self._arrived, tag=tag).start()

    def _send(self, d: int) -> None:
        while self.sent[d] < self.steps(d) and self.sent[d] <= self.got[d]:
            self.sent[d] += 1
            self._flow(d, self.next[d], self.block(d), self.next[d])

    def _alltoall(self, d: int) -> None:
        g = next(g for g in self.groups if d in g)
        for other in g:
            if other != d:
                self._flow(d, other, self.block(d), other)

    def _arrived(self, flow: Flow) -> None:
        d = flow.tag
        self.got[d] += 1
        if d in self.joined and self.op.kind != "alltoall":
            self._send(d)
        self._check(d)

    def _check(self, d: int) -> None:
        if d in self.joined and d not in self.finished and self.got[d] == self.steps(d):
            self.finished.add(d)
            self.left -= 1
            if self.left == 0:
                self.finish()


class _Pairs(_Instance):
    """A collective-permute: one flow per (source, target) pair, each leaving when its source
    joins; done when every flow has arrived."""

    def __init__(self, run: GraphRun, op: Op, pairs: Sequence[tuple[int, int]]) -> None:
        super().__init__(run, op)
        self.pairs = [(s, t) for s, t in pairs if s != t]
        self.sources: dict[int, list[int]] = {}
        for s, t in self.pairs:
            self.sources.setdefault(s, []).append(t)
        self.left = len(self.pairs)
        if not self.pairs:
            self.left = 0

    def _join(self, device: int) -> None:
        run = self.run
        for t in self.sources.pop(device, []):
            path = run.topo.route(run.coord[device], run.coord[t])
            Flow(
                run.net, path, max(1, self.op.bytes), name=self.op.name, done=self._arrived
            ).start()
        if self.left == 0:
            self.finish()

    def _arrived(self, _flow: Flow) -> None:
        self.left -= 1
        if self.left == 0:
            self.finish()


class GraphRun(Component):
    """Runs a :class:`Graph` on the chips of a slice (module docstring)."""

    def __init__(
        self,
        parent: Component,
        topo: Slice,
        net: IciNetwork,
        chips: dict[Coord, TensorChip],
        graph: Graph,
        *,
        issue: str = "in-order",
    ) -> None:
        super().__init__(parent, "program")
        graph.check(topo.chips)
        if issue not in ISSUES:
            raise GraphError(f"issue {issue!r} is not one of {ISSUES}")
        self.issue = issue
        self.topo = topo
        self.net = net
        self.chips = chips
        self.graph = graph
        self.coord = [device_coord(topo, d) for d in range(graph.devices)]
        self.instances: dict[str, _Instance] = {}
        self._axes_cache: dict[tuple[tuple[int, ...], ...], tuple[int, ...] | None] = {}
        # per device: each op's (start, end) ticks, -1 until run
        self.spans: dict[int, list[list[int]]] = {
            d: [[-1, -1] for _ in graph.programs.get(d, ())] for d in range(graph.devices)
        }
        self.done_events: dict[int, list[simpy.Event]] = {}
        self.left = 0

    def start(self) -> None:
        env = self.env
        for d in range(self.graph.devices):
            ops = self.graph.programs.get(d, ())
            self.done_events[d] = [env.event() for _ in ops]
            for stream in ("compute", "comm"):
                mine = [i for i, op in enumerate(ops) if op.stream == stream]
                if mine:
                    self.left += 1
                    run = self._stream if self.issue == "in-order" else self._ready_stream
                    self.process(run(d, mine), f"dev{d}/{stream}")

    def pending(self) -> str | None:
        """What a stalled run waits for: the unfinished streams and the open collectives (a
        collective some device never reaches, e.g. a key spelled differently on one rank)."""
        if not self.left:
            return None
        open_ = [f"{k} ({i.joined_devices} device(s) joined)"
                 for k, i in self.instances.items() if not i.done.triggered]  # fmt: skip
        waits = f"; waiting: {', '.join(open_[:4])}" if open_ else ""
        return f"{self.left} device stream(s) unfinished{waits}"

    # -- the streams ---------------------------------------------------------------------------
    def _stream(self, d: int, order: list[int]) -> Any:
        ops = self.graph.programs[d]
        events = self.done_events[d]
        chip = self.chips[self.coord[d]]
        trace = self.sim.trace_level >= TraceLevel.OPS
        for i in order:
            op = ops[i]
            waits = [events[j] for j in op.deps if not events[j].processed]
            if waits:
                yield self.env.all_of(waits)
            yield from self._run(d, i, chip, trace)
        self.left -= 1

    def _ready_stream(self, d: int, order: list[int]) -> Any:
        """``issue="ready"``: whenever the stream is free, the lowest-numbered of its ops whose
        dependencies are done (out of program order; ties impossible: indices differ)."""
        ops = self.graph.programs[d]
        events = self.done_events[d]
        chip = self.chips[self.coord[d]]
        trace = self.sim.trace_level >= TraceLevel.OPS
        waiting = list(order)  # in program order
        while waiting:
            ready = next((i for i in waiting if all(events[j].processed for j in ops[i].deps)),
                         None)  # fmt: skip
            if ready is None:
                # wait for any dependency of a waiting op to finish, then look again
                deps = {j for i in waiting for j in ops[i].deps if not events[j].processed}
                yield self.env.any_of([events[j] for j in sorted(deps)])
                continue
            waiting.remove(ready)
            yield from self._run(d, ready, chip, trace)
        self.left -= 1

    def _run(self, d: int, i: int, chip: TensorChip, trace: bool) -> Any:
        op = self.graph.programs[d][i]
        t0 = self.env.now
        self.spans[d][i][0] = t0
        yield from self._op(d, op, chip)
        self.spans[d][i][1] = self.env.now
        if trace:
            chip.trace(op.cls, op.name, t0, self.env.now - t0, where=op.where, op=i)
        self.done_events[d][i].succeed()

    def _op(self, d: int, op: Op, chip: TensorChip) -> Any:
        if op.cls == "compute":
            if op.matmul is not None:
                m, k, n = op.matmul
                yield chip.matmul(Job(m, k, n, name=op.name))
                return
            evs = []
            if op.flops:
                dim = chip.mxu.dim
                rows = 8 * -(-op.flops // (16 * dim * dim))
                ticks = chip.domain.ticks(chip.mxu.cycles(rows, dim, dim))
                chip.mxu.busy_ticks += ticks
                chip.mxu.flops += op.flops
                evs.append(self.env.timeout(ticks))
            if op.bytes:
                evs.append(chip.hbm.transfer(op.bytes, op.name))
            if evs:
                yield self.env.all_of(evs)
            return
        if op.cls == "memory":
            if op.bytes:
                yield chip.hbm.transfer(op.bytes, op.name)
            return
        inst = self._instance(op)
        if isinstance(inst, _SendRecv):
            inst.join_op(d, op)
        else:
            inst.join(d)
        if not inst.done.processed:
            yield inst.done

    def _instance(self, op: Op) -> _Instance:
        pair = op.cls in ("send", "recv")
        key = f"{'p2p' if pair else op.cls}:{op.match_key}"
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = self._make(op)
        return inst

    def _make(self, op: Op) -> _Instance:
        if op.cls in ("send", "recv"):
            return _SendRecv(self, op)
        if op.kind == "collective-permute":
            return _Pairs(self, op, op.pairs) if op.pairs else _Trivial(self, op)
        groups = op.groups or (tuple(range(self.graph.devices)),)
        if op.bytes == 0 or all(len(g) <= 1 for g in groups):
            return _Trivial(self, op)
        axes = self._axes(groups)
        if axes is not None:
            return _AxisCollective(self, op, axes, len(groups[0]))
        return _RingCollective(self, op, groups)

    def _axes(self, groups: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
        key = tuple(tuple(g) for g in groups)
        if key not in self._axes_cache:
            self._axes_cache[key] = match_axes(self.topo, groups)
        return self._axes_cache[key]

    # -- results -------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """Times in ticks of the device that finished last: ``end``, its per-op ``table``
        (index, name, class, where, start, end), ``compute``/``memory``/``comm`` (unions of
        its ops' spans by class), ``overlap`` (compute-stream and comm-stream time at once),
        and the ``bound``."""
        ends = {d: max((e for _s, e in sp), default=0) for d, sp in self.spans.items()}
        dev = max(ends, key=lambda d: (ends[d], -d)) if ends else 0
        ops = self.graph.programs.get(dev, ())
        sp = self.spans.get(dev, [])
        by_cls: dict[str, list[tuple[int, int]]] = {"compute": [], "memory": [], "comm": []}
        table = []
        for i, (op, (s, e)) in enumerate(zip(ops, sp, strict=True)):
            table.append((i, op.name, op.cls, op.where, s, e))
            key = op.cls if op.cls in ("compute", "memory") else "comm"
            if e > s:
                by_cls[key].append((s, e))
        comp = _union(by_cls["compute"] + by_cls["memory"])
        comm = _union(by_cls["comm"])
        overlap = _intersect(comp, comm)
        sizes = {k: _length(_union(v)) for k, v in by_cls.items()}
        bound = max(("compute", "memory", "comm"), key=lambda k: (sizes[k], k == "compute"))
        return {
            "device": dev,
            "end": max(ends.values(), default=0),
            "table": table,
            "compute": sizes["compute"],
            "memory": sizes["memory"],
            "comm": sizes["comm"],
            "busy": _length(comp),
            "overlap": _length(overlap),
            "bound": "communication" if bound == "comm" else bound,
        }


class _SendRecv(_Instance):
    """A send on one device and its recv on the peer (one key): the flow starts when the send
    runs; both ops end when it has arrived."""

    def join_op(self, device: int, op: Op) -> None:
        if self.start_ticks < 0:
            self.start_ticks = self.run.env.now
        self.joined_devices += 1
        if op.cls == "send":
            run = self.run
            path = run.topo.route(run.coord[device], run.coord[op.peer])
            Flow(run.net, path, max(1, op.bytes), name=op.name, done=self.finish).start()


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(spans: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in spans)
