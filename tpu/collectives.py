"""The system layer: collectives as phases of sends over the logical axes of a slice.

Algorithms see the network only through :class:`tpu.network.Flow` (a message along a path of
neighbouring chips, in packets that cut through the chips) and hooks run where a packet
lands. They never compute a time: times come from the links the flows cross.

Groups. A collective over axes ``A`` (``"x"``, ``"xy"``...) runs in every group of chips that share
their coordinates on the other axes, all groups at once (they use disjoint links). Within a group,
a chip's *rank* is its coordinates on ``A`` read as a mixed-radix number, the first axis named
most significant; the gathered array is the concatenation of the shards in rank order.

One axis, one ring. Along an axis the chips form a ring if the axis wraps, else a line:

- ``bidirectional`` ring (default): every chip sends its whole bundle both ways, ``ceil((N-1)/2)``
  hops one way and ``floor((N-1)/2)`` the other, so every link direction carries ``N/2`` shards
  (the algorithm the analytical formula T = max(T_min·N/2, V/W) describes);
- ``unidirectional`` ring: one way only, ``N-1`` hops;
- a line (no wraparound): both ways, each chip to every chip on each side (the end links carry
  ``N-1`` shards: about twice the ring's time).

AllGather sends a chip's bundle along those paths and every chip on the way keeps a copy.
ReduceScatter is its mirror: the block destined for chip ``b`` starts at the farthest
contributing chip and travels towards ``b``; each chip on the way adds its own part of that block
to each packet (the sums are formed in float32) and ``b`` adds its own and the other side's.

Several axes. ``schedule="rotated"`` (default): the data is cut into ``n_axes`` parts; part ``p``
visits the axes rotated by ``p`` (x then y for part 0, y then x for part 1), so in every phase
the parts use different axes' links at once. ``schedule="axis-by-axis"``: all the data visits
the axes in the order named, one axis at a time (ASTRA-sim's hierarchical collectives).
AllReduce = ReduceScatter over the axes then AllGather over them in reverse.
A phase starts at a chip once its previous phase is complete there; a packet of a later phase
reaching a chip early is held there until the chip starts that phase (the chip's contribution
does not exist before).

AllToAll: every chip sends block ``j`` of its data straight to rank ``j`` over a minimal
dimension-order route (a tie between the two ways round goes + from even coordinates, - from
odd ones).

``payload=size``: flows carry byte counts only (``inputs`` is None); the same flows, packets, holds
and links run, so the timing is identical (tested).

``symmetry=True`` (the flow fidelity's fast path, for a collective alone on its network): where
the collective is invariant under translations of the chips (:meth:`Collective.translations`),
only one representative chip per class runs; the network folds every link onto its
representative's (:meth:`tpu.network.IciNetwork.fold`), a message reaching a chip counts at the
chip's representative, and every chip's times are its representative's, exactly
(docs/tpu/design.md#symmetry, tests/test_tpu_symmetry.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simcore.tracing import TraceLevel
from tpu.network import Flow, IciNetwork, Packet
from tpu.topology import Coord, Slice, Translations

OPS = ("allgather", "reducescatter", "allreduce", "alltoall")
RINGS = ("bidirectional", "unidirectional")
SCHEDULES = ("rotated", "axis-by-axis")


class Group:
    """The chips of one group: rank <-> coordinates over ``axes`` (first axis most significant)."""

    def __init__(self, topo: Slice, axes: tuple[int, ...], base: Coord) -> None:
        self.axes = axes
        self.sizes = tuple(topo.shape[a] for a in axes)
        self.n = math.prod(self.sizes)
        self.chips: list[Coord] = []
        for rank in range(self.n):
            c = list(base)
            for a, d in zip(axes, self.digits(rank), strict=True):
                c[a] = d
            self.chips.append(tuple(c))
        self.rank_of = {c: r for r, c in enumerate(self.chips)}

    def digits(self, rank: int) -> tuple[int, ...]:
        """The coordinates of ``rank`` on the group's axes."""
        out = []
        for size in reversed(self.sizes):
            rank, d = divmod(rank, size)
            out.append(d)
        return tuple(reversed(out))

    def shift(self, keys: np.ndarray, src: Coord, dst: Coord) -> np.ndarray:
        """``keys`` (ranks) as seen from chip ``dst`` when they were seen from chip ``src``: each
        rank's coordinates on the group's axes moved by ``dst - src`` (modulo the axis sizes),
        the translation taking ``src`` to ``dst`` (the symmetric fast path's)."""
        out = np.zeros_like(keys)
        stride = 1
        for a, size in zip(reversed(self.axes), reversed(self.sizes), strict=True):
            d = (keys // stride) % size
            out += ((d + dst[a] - src[a]) % size) * stride
            stride *= size
        return out

    def on_axis(self, keys: np.ndarray, axis_pos: int, value: int) -> np.ndarray:
        """The ranks among ``keys`` whose coordinate on the group's ``axis_pos``-th axis is
        ``value`` (keys are sorted int64 arrays: a thousand ranks cost one vector operation)."""
        stride = math.prod(self.sizes[axis_pos + 1 :])
        size = self.sizes[axis_pos]
        return keys[(keys // stride) % size == value]


def groups(topo: Slice, axes: tuple[int, ...]) -> list[Group]:
    """Every group of a collective over ``axes``, in a fixed order."""
    bases = sorted({tuple(0 if i in axes else v for i, v in enumerate(c)) for c in topo.coords})
    return [Group(topo, axes, b) for b in bases]


def ring_paths(n: int, pos: int, wrap: bool, ring: str, role: str) -> list[tuple[int, int]]:
    """(sign, hops) of the flows of one axis phase, as seen from ring position ``pos``.

    ``role="source"`` (AllGather): the flows leaving ``pos`` with its bundle.
    ``role="dest"`` (ReduceScatter): the flows arriving at ``pos`` with sums for it.
    """
    if n == 1:
        return []
    if wrap:
        if ring == "unidirectional":
            return [(1, n - 1)]
        up, down = n // 2, (n - 1) // 2
        return [(1, up)] + ([(-1, down)] if down else [])
    if role == "source":
        ahead, behind = n - 1 - pos, pos
    else:
        ahead, behind = pos, n - 1 - pos  # sums for pos come from both sides towards it
    return ([(1, ahead)] if ahead else []) + ([(-1, behind)] if behind else [])


class _Part:
    """One part's progress at one chip."""

    __slots__ = (
        "acc", "expected", "flow_id", "got", "held", "incoming", "keys", "phase", "since", "snap",
        "vals",
    )  # fmt: skip

    def __init__(self, keys: np.ndarray, vals: dict[int, np.ndarray] | None) -> None:
        self.keys = keys
        self.vals = vals
        self.phase = -1
        self.expected = 0
        self.got = 0
        self.held: dict[int, list[tuple[Flow, Packet]]] = {}
        self.acc: np.ndarray | None = None
        self.snap: dict[int, dict[int, np.ndarray] | None] = {}  # phase -> vals at its start
        self.incoming: list[np.ndarray] = []  # keys received in this (AllGather) phase
        self.since = 0  # tick the current phase started
        self.flow_id: int | None = None  # trace flow from the previous phase


class _Msg:
    """What a collective flow carries: part, phase, kind, keys, and per-hop receive buffers."""

    __slots__ = ("bufs", "counts", "dest", "gather", "keys", "part", "phase")

    def __init__(
        self, part: int, phase: int, keys: np.ndarray, hops: int, dest: Coord, gather: bool
    ) -> None:
        self.gather = gather  # an AllGather phase (else ReduceScatter)
        self.part = part
        self.phase = phase
        self.keys = keys
        self.dest = dest
        self.counts = [0] * (hops + 1)
        self.bufs: list[np.ndarray | None] = [None] * (hops + 1)


class _Outputs(dict):  # type: ignore[type-arg]
    """Each chip's result, concatenated from its blocks the first time it is asked for."""

    def __init__(self, coll: Collective) -> None:
        super().__init__()
        self.coll = coll

    def __missing__(self, c: Coord) -> np.ndarray:
        if c not in self.coll.state:
            raise KeyError(c)
        out = self[c] = np.concatenate(self.coll.result_blocks(c))
        return out

    def get(self, c: Coord, default: Any = None) -> Any:
        return self[c] if c in self.coll.state else default


class Collective:
    """One collective over ``axes`` of the slice behind ``net``.

    ``nbytes`` is the size V of the full (gathered) array per group; ``itemsize`` its element size.
    ``inputs`` maps each chip to its input (AllGather: its shard; ReduceScatter / AllReduce: the
    full array; AllToAll: its V/N bytes), or is None for ``payload=size``. After the run,
    ``outputs`` holds each chip's result and ``end_ticks`` the time the last chip finished.
    """

    def __init__(
        self,
        net: IciNetwork,
        op: str,
        axes: tuple[int, ...],
        nbytes: int,
        itemsize: int,
        *,
        ring: str = "bidirectional",
        schedule: str = "rotated",
        inputs: dict[Coord, np.ndarray] | None = None,
        on_done: Callable[[Collective], None] | None = None,
        symmetry: bool = False,
    ) -> None:
        self.net = net
        self.topo = net.topo
        self.op = op
        self.axes = axes
        self.nbytes = nbytes
        self.itemsize = itemsize
        self.ring = ring
        self.inputs = inputs
        self.real = inputs is not None
        self.on_done = on_done
        self.groups = groups(self.topo, axes)
        self.n = self.groups[0].n
        # DCN axes (between slices) are not rotated: data crosses DCN at its smallest (last in
        # a ReduceScatter, first in an AllGather); the ICI axes share the parts
        self.ici_axes = tuple(a for a in axes if not self.topo.is_dcn(a))
        self.dcn_axes = tuple(a for a in axes if self.topo.is_dcn(a))
        self.schedule = schedule
        rotated = op != "alltoall" and schedule == "rotated"
        self.parts = max(1, len(self.ici_axes)) if rotated else 1
        self.elems = nbytes // itemsize
        # shard r = elements [r·shard, (r+1)·shard) of the full array; its part p is
        # [cut[p], cut[p+1]) within it (parts differ by at most one element)
        self.shard = self.elems // self.n
        self.cut = [p * self.shard // self.parts for p in range(self.parts + 1)]
        self.blocks = [b - a for a, b in zip(self.cut, self.cut[1:], strict=False)]
        self.programs = [self._program(p) for p in range(self.parts)]
        self.outputs: dict[Coord, np.ndarray] = {}
        self.state: dict[Coord, list[_Part]] = {}
        self.group_of: dict[Coord, Group] = {c: g for g in self.groups for c in g.chips}
        #: the symmetric fast path's translations (one representative chip per class runs), or
        #: None: every chip runs (docs/tpu/design.md#symmetry); decided at :meth:`start`
        self.symmetry = symmetry
        self.sym: Translations | None = None
        #: the chips that run: every chip, or one per class of the translations
        self.chips = self.topo.coords
        self.chips_left = len(self.chips) * self.parts
        #: the tick each running chip finished its last part (AllToAll: its last block landed)
        self.done_ticks: dict[Coord, int] = {}
        self.start_ticks = -1  # the first chip joined
        self.end_ticks = -1
        self.flows = 0  # flows started
        self._a2a_flows: list[Flow] = []
        self.phase_hops = [[0] * len(prog) for prog in self.programs]

    # -- symmetry ----------------------------------------------------------------------------
    def _may_fold(self) -> bool:
        """The symmetric fast path runs at the flow fidelity, with sizes only (real shards differ
        from chip to chip), untraced (a trace, at any level, shows every chip and link; the
        trace is open once the run starts), on a network that carries nothing yet (the caller
        vouches that nothing else will be sent on it)."""
        net = self.net
        return (
            net.fluid is not None
            and self.inputs is None
            and net.sim.trace_level == TraceLevel.OFF
            and net.flow_ids == 0
            and net.symmetry is None
        )

    def translations(self) -> Translations:
        """The translations under which this collective, alone on the network, is invariant.

        Per axis: an axis outside the collective carries none of its traffic, so every value of
        it holds an identical, independent copy (collapsed); a wrapped axis of the collective
        is invariant under any shift (a ring's flows from a chip depend on its position only
        through the ring, ``ring_paths``), except that an AllToAll's tie between the two ways
        round goes by the parity of the coordinate (shifts by 2 on an even ring); an axis that
        does not wrap (a line) has no shift. Between slices, a host's NIC is shared by the
        host's block of chips (``spec.host``), so the ICI axes shift only by whole host blocks
        when the collective crosses DCN."""
        topo = self.topo
        dcn = bool(self.dcn_axes)
        strides = []
        for a, n in enumerate(topo.shape):
            if a not in self.axes:
                s = 0
            elif not topo.wrap[a]:
                s = n
            elif self.op == "alltoall" and n % 2 == 0:
                s = 2
            else:
                s = 1
            if dcn and not topo.is_dcn(a):
                h = topo.spec.host[a - 1]
                s = h if s == 0 else math.lcm(s, h)
                if n % s:
                    s = n
            strides.append(s)
        return Translations(topo.shape, strides)

    # -- plan --------------------------------------------------------------------------------
    def _program(self, p: int) -> list[tuple[str, int]]:
        ici = self.ici_axes[p:] + self.ici_axes[:p]
        order = ici + self.dcn_axes  # the order of a ReduceScatter
        if self.op == "allgather":
            return [("ag", a) for a in reversed(order)]
        if self.op == "reducescatter":
            return [("rs", a) for a in order]
        if self.op == "allreduce":
            return [("rs", a) for a in order] + [("ag", a) for a in reversed(order)]
        return [("a2a", -1)]

    @property
    def hops(self) -> int:
        """Links crossed on the longest chain of phases: the sum over phases of the longest
        flow, for the part whose sum is largest."""
        return max(sum(h) for h in self.phase_hops)

    def _block(self, x: np.ndarray, rank: int, part: int) -> np.ndarray:
        lo = rank * self.shard + self.cut[part]
        return x[lo : lo + self.blocks[part]]

    # -- run ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Every chip joins now with its input from ``inputs`` (with ``symmetry``, where it is
        exact, one representative chip per class of translations: :meth:`translations`)."""
        if self.symmetry and not self.state and self._may_fold():
            sym = self.translations()
            if sym.size > 1:
                self.sym = sym
                self.net.fold(sym)
                self.chips = sym.reps
                self.chips_left = len(self.chips) * self.parts
        if self.op == "alltoall":
            self.start_ticks = self.net.env.now
            self._prepare()
            self._alltoall()
            return
        for c in self.chips:
            self.join(c, None if self.inputs is None else self.inputs[c])

    def join(self, c: Coord, x: np.ndarray | None = None) -> None:
        """Chip ``c`` joins with its input ``x`` (None for ``payload=size``) and starts its first
        phase; packets from chips that joined earlier wait for it (not for AllToAll)."""
        if not self.state:
            self.start_ticks = self.net.env.now
            self._prepare()
        if x is not None:
            self.real = True
            for p in range(self.parts):
                st = self.state[c][p]
                g = self.group_of[c]
                if self.op == "allgather":
                    st.vals = {g.rank_of[c]: x[self.cut[p] : self.cut[p + 1]]}
                else:
                    st.vals = {k: self._block(x, k, p) for k in st.keys}
        for p in range(self.parts):
            self._start_phase(c, p, 0)

    def _prepare(self) -> None:
        runs = None if self.sym is None else set(self.chips)
        for g in self.groups:
            for rank, c in enumerate(g.chips):
                if runs is not None and c not in runs:
                    continue
                x = self.inputs[c] if self.inputs is not None else None
                parts = []
                for p in range(self.parts):
                    if self.op == "allgather":
                        keys = np.array([rank], np.int64)
                        vals = None if x is None else {rank: x[self.cut[p] : self.cut[p + 1]]}
                    elif self.op == "alltoall":
                        keys, vals = np.zeros(0, np.int64), None
                    else:
                        keys = np.arange(self.n, dtype=np.int64)
                        vals = None if x is None else {k: self._block(x, k, p) for k in keys}
                    parts.append(_Part(keys, vals))
                self.state[c] = parts

    def _ring_pos(self, c: Coord, axis: int) -> tuple[int, int, bool]:
        return c[axis], self.topo.shape[axis], self.topo.wrap[axis]

    def _along(self, c: Coord, axis: int, sign: int, hops: int) -> list[Coord]:
        path, cur = [c], c
        n = self.topo.shape[axis]
        for _ in range(hops):
            v = (cur[axis] + sign) % n
            cur = (*cur[:axis], v, *cur[axis + 1 :])
            path.append(cur)
        return path

    def _start_phase(self, c: Coord, p: int, t: int) -> None:
        st = self.state[c][p]
        prog = self.programs[p]
        if t == len(prog):
            self._chip_done(c)
            return
        kind, axis = prog[t]
        st.phase, st.got = t, 0
        st.since = self.net.env.now
        st.snap[t] = st.vals
        g = self.group_of[c]
        pos, n, wrap = self._ring_pos(c, axis)
        gi = g.axes.index(axis)
        if kind == "ag":
            st.expected = n - 1
            st.incoming = []
            keys = st.keys
            data = None
            if st.vals is not None:
                data = np.concatenate([st.vals[k] for k in keys])
            for sign, hops in ring_paths(n, pos, wrap, self.ring, "source"):
                self._flow(self._along(c, axis, sign, hops), p, t, keys, data, "allgather")
        else:
            own = g.on_axis(st.keys, gi, pos)
            arriving = ring_paths(n, pos, wrap, self.ring, "dest")
            st.expected = len(arriving)
            if st.vals is not None:
                st.acc = np.concatenate([st.vals[k] for k in own]).astype(np.float32)
            # the flows this chip starts: those whose destination lies hops away from it, the
            # longest first (it has the most hops to cross after this link)
            starts = [
                (hops, sign, dest_pos)
                for dest_pos in range(n)
                for sign, hops in ring_paths(n, dest_pos, wrap, self.ring, "dest")
                if (dest_pos - sign * hops) % n == pos
            ]
            for hops, sign, dest_pos in sorted(starts, key=lambda s: (-s[0], -s[1], s[2])):
                path = self._along(c, axis, sign, hops)
                keys = g.on_axis(st.keys, gi, dest_pos)
                data = None
                if st.vals is not None:
                    data = np.concatenate([st.vals[k] for k in keys]).astype(np.float32)
                self._flow(path, p, t, keys, data, "reducescatter")
        held = st.held.pop(t, [])
        if st.expected == 0:
            self._phase_done(c, p)
        for flow, ch in held:
            if self._visit(flow, ch):
                flow.forward(ch)

    def _flow(
        self, path: list[Coord], p: int, t: int, keys: np.ndarray, data: Any, name: str
    ) -> None:
        hops = len(path) - 1
        self.phase_hops[p][t] = max(self.phase_hops[p][t], hops)
        flow = Flow(
            self.net, path, len(keys) * self.blocks[p] * self.itemsize, data=data,
            itemsize=self.itemsize, visit=self._visit, done=None, name=name,
            tag=_Msg(p, t, keys, hops, path[-1], name == "allgather"),
        )  # fmt: skip
        self.flows += self.net.multiplicity
        flow.start()

    def _visit(self, flow: Flow, ch: Packet) -> bool:
        msg: _Msg = flow.tag
        c = flow.path[ch.hop]
        if self.sym is not None:  # the chip's representative sees the flow's translate
            c = self.sym.rep(c)
        st = self.state[c][msg.part]
        if st.phase < msg.phase:
            st.held.setdefault(msg.phase, []).append((flow, ch))
            return False
        if ch.probe:  # the flow fidelity's head passing: the chip is in the phase
            return True
        if msg.gather:
            if ch.data is not None:
                lo = ch.lo
                buf = msg.bufs[ch.hop]
                if buf is None:
                    buf = msg.bufs[ch.hop] = np.empty(len(flow.data), flow.data.dtype)
                buf[lo : lo + len(ch.data)] = ch.data
            msg.counts[ch.hop] += 1
            if msg.counts[ch.hop] == flow.npackets:
                keys = msg.keys
                if self.sym is not None:  # the keys the translate into c carries
                    keys = self.group_of[c].shift(keys, flow.path[ch.hop], c)
                self._ag_received(c, keys, msg.part, msg.bufs[ch.hop])
            return True
        # reducescatter: add this chip's part of the block, or land at the destination
        lo = ch.lo
        if ch.hop < flow.hops:
            if ch.data is not None:
                vals = st.snap[msg.phase]
                mine = np.concatenate([vals[k] for k in msg.keys])  # type: ignore[index]
                ch.data = ch.data + mine[lo : lo + len(ch.data)]
            return True
        if ch.data is not None:
            st.acc[lo : lo + len(ch.data)] += ch.data  # type: ignore[index]
        msg.counts[ch.hop] += 1
        if msg.counts[ch.hop] == flow.npackets:
            st.got += 1
            if st.got == st.expected:
                self._phase_done(c, msg.part)
        return True

    def _ag_received(self, c: Coord, keys: np.ndarray, part: int, buf: np.ndarray | None) -> None:
        st = self.state[c][part]
        st.incoming.append(keys)
        if buf is not None:
            if st.vals is st.snap.get(st.phase):
                st.vals = dict(st.vals)  # type: ignore[arg-type]
            for i, k in enumerate(keys):
                b = self.blocks[part]
                st.vals[k] = buf[i * b : (i + 1) * b]  # type: ignore[index]
        st.got += 1
        if st.got == st.expected:
            self._phase_done(c, part)

    def _phase_done(self, c: Coord, p: int) -> None:
        st = self.state[c][p]
        kind, axis = self.programs[p][st.phase]
        if self.net.sim.trace_level >= TraceLevel.OPS:
            self._trace_phase(c, p, st, kind, axis)
        g = self.group_of[c]
        if kind == "ag":
            st.keys = np.sort(np.concatenate([st.keys, *st.incoming]))
        else:
            gi = g.axes.index(axis)
            own = g.on_axis(st.keys, gi, c[axis])
            if st.acc is not None:
                acc = st.acc
                b = self.blocks[p]
                st.vals = {k: acc[i * b : (i + 1) * b] for i, k in enumerate(own)}
                st.acc = None
            st.keys = own
        self._start_phase(c, p, st.phase + 1)

    def _trace_phase(self, c: Coord, p: int, st: _Part, kind: str, axis: int) -> None:
        """One slice per phase on the chip's track, linked to the chip's next phase by a flow."""
        net = self.net
        net.trace_ids += 1
        fid = net.trace_ids
        now, per = net.env.now, net.domain.period_ticks
        name = {"ag": "allgather", "rs": "reducescatter"}[kind]
        net.sim.tracer.emit(
            st.since, now - st.since, st.since // per, (now - st.since) // per, net.domain.name,
            f"{net.parent.path}/chip[{','.join(map(str, c))}]", "collective",
            f"{name} {self.topo.axis_names[axis]}", flow_in=st.flow_id,
            flow_out=fid if st.phase + 1 < len(self.programs[p]) else None,
            args={"op": self.op, "part": p, "phase": st.phase, "ring": self.ring},
        )  # fmt: skip
        st.flow_id = fid

    def _chip_done(self, c: Coord) -> None:
        self.done_ticks[c] = self.net.env.now
        self.chips_left -= 1
        if self.chips_left == 0:
            self._finish()

    def _finish(self) -> None:
        self.end_ticks = self.net.env.now
        if self.real:
            self.outputs = _Outputs(self)
        if self.on_done is not None:
            self.on_done(self)

    def result_blocks(self, c: Coord) -> list[np.ndarray]:
        """Chip ``c``'s result as the blocks it holds, in output order (their concatenation is
        ``outputs[c]``; comparing block by block avoids building it)."""
        parts = self.state[c]
        return [parts[p].vals[k] for k in parts[0].keys for p in range(self.parts)]  # type: ignore[index]

    # -- AllToAll ------------------------------------------------------------------------------
    def _a2a_route(self, src: Coord, dst: Coord) -> list[Coord]:
        """Dimension order; on a wrapped axis the shorter way, and on a tie (the destination
        half-way round) + from chips at even coordinates and - from odd ones, so both
        directions carry half of those blocks."""
        path, cur = [src], src
        for axis in range(len(self.topo.shape)):
            if cur[axis] == dst[axis]:
                continue
            n, d = self.topo.shape[axis], dst[axis] - cur[axis]
            if self.topo.wrap[axis]:
                fwd = d % n
                sign = 1 if fwd < n - fwd or (fwd == n - fwd and cur[axis] % 2 == 0) else -1
                hops = fwd if sign == 1 else n - fwd
            else:
                sign, hops = (1 if d > 0 else -1), abs(d)
            seg = self._along(cur, axis, sign, hops)
            path += seg[1:]
            cur = seg[-1]
        return path

    def _alltoall(self) -> None:
        blk = self.elems // (self.n * self.n)
        runs = set(self.chips)
        self._a2a_left = {c: self.n - 1 for c in self.chips}
        self._a2a_recv: dict[Coord, list[np.ndarray | None]] = {}
        for g in self.groups:
            for r, c in enumerate(g.chips):
                if c not in runs:
                    continue
                x = self.inputs[c] if self.inputs is not None else None
                recv: list[np.ndarray | None] = [None] * self.n
                if x is not None:
                    recv[r] = x[r * blk : (r + 1) * blk]
                self._a2a_recv[c] = recv
        for g in self.groups:
            for r, src in enumerate(g.chips):
                if src not in runs:
                    continue
                x = self.inputs[src] if self.inputs is not None else None
                routes = [(self._a2a_route(src, dst), j) for j, dst in enumerate(g.chips) if j != r]
                # the longest routes leave first: they have the most links still to cross
                for path, j in sorted(routes, key=lambda pj: (-len(pj[0]), pj[1])):
                    hops = len(path) - 1
                    self.phase_hops[0][0] = max(self.phase_hops[0][0], hops)
                    data = None if x is None else x[j * blk : (j + 1) * blk]
                    flow = Flow(
                        self.net, path, blk * self.itemsize, data=data, itemsize=self.itemsize,
                        visit=self._a2a_visit, done=self._a2a_done, name="alltoall",
                        tag=(r, j, g),
                    )  # fmt: skip
                    self._a2a_flows.append(flow)
                    self.flows += self.net.multiplicity
        if self.n == 1:
            if self.inputs is not None:
                self.outputs = dict(self.inputs)
            self._finish_a2a()
            return
        for flow in self._a2a_flows:
            flow.start()

    def _a2a_visit(self, flow: Flow, ch: Packet) -> bool:
        """At the destination, each packet lands in the block from its source."""
        if ch.data is not None and ch.hop == flow.hops:
            r, j, g = flow.tag
            recv = self._a2a_recv[g.chips[j]]
            if recv[r] is None:
                recv[r] = np.empty(len(flow.data), flow.data.dtype)
            lo = ch.lo
            recv[r][lo : lo + len(ch.data)] = ch.data  # type: ignore[index]
        return True

    def _a2a_done(self, flow: Flow) -> None:
        _r, j, g = flow.tag
        dst = g.chips[j]
        if self.sym is not None:  # the translate landing on the representative
            dst = self.sym.rep(dst)
        self._a2a_left[dst] -= 1
        if self._a2a_left[dst] == 0:
            if self.real:
                self.outputs[dst] = np.concatenate(self._a2a_recv[dst])  # type: ignore[arg-type]
            self.done_ticks[dst] = self.net.env.now
            self.chips_left -= 1
            if self.chips_left == 0:
                self._finish_a2a()

    def _finish_a2a(self) -> None:
        self.end_ticks = self.net.env.now
        if self.on_done is not None:
            self.on_done(self)
