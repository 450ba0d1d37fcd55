"""The network layer: ICI links as FIFO servers, chunks that hop, behind send/receive.

Each direction of each ICI link is an :class:`IciLink` component: a server with a first-come,
first-served queue, a one-way bandwidth and a per-hop latency (the latency lives on the link, not
on the chips). A chunk handed to a link waits until the link is free, occupies it for its
serialisation time ``ceil(bytes x clock / bandwidth)`` cycles, and reaches the far chip a hop
latency after its last byte left: ``arrival = start + serialise + latency``. Transfers that share
a link therefore contend: their chunks queue behind each other in arrival order.

Cost: the queue is served in virtual time (the link keeps the tick at which it becomes free),
which is exact for a FIFO server with known service times and no back-pressure, so a chunk costs
one kernel event per hop (its arrival), whatever its size; and since arrivals leave a link in
queue order, only the head chunk's arrival is scheduled (one pending event per busy link, which
keeps the kernel's event heap small when a collective queues thousands of chunks at once).
Receivers never refuse a chunk: it lands in the far chip's HBM (flow control inside the link is
not modelled).

:class:`IciNetwork` owns the links of one slice and offers the small interface the system layer
uses: :meth:`IciNetwork.link` (the channel from a chip to a neighbour) and :meth:`Flow` objects
that carry a message along a path of chips, chunk by chunk, each chip forwarding a chunk as soon
as it has all of it (store and forward per chunk, so the chunks of one message pipeline across
hops). A flow calls hooks at every chip it reaches: the collectives store or reduce there.

Tracing: at ``detail`` every chunk is a slice on its link's track; at ``ops`` every message is one
slice per link it crosses (first chunk's start to last chunk's end).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from simcore.component import Component
from simcore.tracing import TraceLevel
from tpu.config import IciConfig
from tpu.topology import Coord, Slice


def _fmt(c: Coord) -> str:
    return ",".join(map(str, c))


class IciLink(Component):
    """One direction of one ICI link: a FIFO server with bandwidth and per-hop latency."""

    def __init__(
        self, parent: Component, src: Coord, dst: Coord, *, bytes_per_s: float, cfg: IciConfig
    ) -> None:
        super().__init__(parent, f"link[{_fmt(src)}>{_fmt(dst)}]")
        self.src, self.dst = src, dst
        self.bytes_per_s = bytes_per_s
        self.latency_cycles = cfg.hop_latency_ns * cfg.clock_hz // 1_000_000_000
        self.clock_hz = cfg.clock_hz
        self.free_at = 0  # tick at which the link finishes what it has been given
        self.busy_ticks = 0
        self.bytes = 0
        self.chunks = 0
        self._ser: dict[int, int] = {}
        self._queue: deque[tuple[int, Callable[[Any], None], Any]] = deque()
        self._lat = 0
        self._period = 0
        self._env = self.sim.env

    def check(self) -> None:
        self._freeze()

    def _freeze(self) -> None:
        """Tick-valued timing, once the time base is frozen (at check, or at the first send)."""
        self._period = self.domain.period_ticks
        self._lat = self.domain.ticks(self.latency_cycles)
        self._ser.clear()

    def serialise_ticks(self, nbytes: int) -> int:
        """Ticks the link is busy with ``nbytes`` (whole cycles of its clock, rounded up)."""
        t = self._ser.get(nbytes)
        if t is None:
            cycles = -(-nbytes * self.clock_hz // int(self.bytes_per_s))
            t = self._ser[nbytes] = cycles * self.domain.period_ticks
        return t

    def send(self, nbytes: int, callback: Callable[[Any], None], value: Any) -> tuple[int, int]:
        """Queue ``nbytes``; ``callback(value)`` runs when its last byte reaches the far chip.
        Returns the (start, end) ticks of its serialisation."""
        if not self._period:
            self._freeze()
        env = self._env
        now = env._now
        start = self.free_at if self.free_at > now else now
        ser = self.serialise_ticks(nbytes)
        end = start + ser
        self.free_at = end
        self.busy_ticks += ser
        self.bytes += nbytes
        self.chunks += 1
        queue = self._queue
        queue.append((end + self._lat, callback, value))
        if len(queue) == 1:
            env.timeout(end + self._lat - now).callbacks.append(self._deliver)
        return start, end

    def _deliver(self, _event: Any) -> None:
        """The head chunk has arrived: hand it over, then wait for the next one (arrivals leave
        in the order chunks were queued, so one pending event per link suffices)."""
        queue = self._queue
        _, callback, value = queue.popleft()
        if queue:
            env = self._env
            env.timeout(queue[0][0] - env._now).callbacks.append(self._deliver)
        callback(value)

    def progress_count(self) -> int:
        return self.chunks


class IciNetwork(Component):
    """The links of one slice, one :class:`IciLink` per direction, in the ``ici`` domain."""

    def __init__(self, parent: Component, topo: Slice, cfg: IciConfig) -> None:
        super().__init__(parent, "ici")
        self.topo = topo
        self.cfg = cfg
        bw = cfg.link_bytes_per_s or topo.spec.ici_oneway_bytes_per_s
        self.links: dict[tuple[Coord, Coord], IciLink] = {}
        for e in topo.edges():
            self.links[(e.src, e.dst)] = IciLink(self, e.src, e.dst, bytes_per_s=bw, cfg=cfg)
        self.flows_done = 0
        self.flow_ids = 0  # flows made so far: each flow's id (trace flows), per simulation
        self.trace_ids = 1 << 40  # trace flow ids the system layer takes (phase links)

    def link(self, src: Coord, dst: Coord) -> IciLink:
        return self.links[(src, dst)]

    def path_links(self, path: Sequence[Coord]) -> list[IciLink]:
        return [self.links[(a, b)] for a, b in itertools.pairwise(path)]

    def used_links(self) -> list[IciLink]:
        return [lk for lk in self.links.values() if lk.chunks]

    def progress_count(self) -> int:
        return self.flows_done


def chunk_sizes(nbytes: int, chunk_bytes: int) -> list[int]:
    """A message of ``nbytes`` cut into chunks of at most ``chunk_bytes`` (at least one chunk)."""
    if nbytes <= chunk_bytes:
        return [nbytes]
    full, rest = divmod(nbytes, chunk_bytes)
    return [chunk_bytes] * full + ([rest] if rest else [])


class Chunk:
    """One piece of a :class:`Flow`: its index, size, data (or None) and links crossed so far."""

    __slots__ = ("data", "flow", "hop", "index", "nbytes")

    def __init__(self, flow: Flow, index: int, nbytes: int, data: Any) -> None:
        self.flow = flow
        self.index = index
        self.nbytes = nbytes
        self.data = data
        self.hop = 0  # links crossed so far


class Flow:
    """A message moving along ``path`` (consecutive neighbours), cut into chunks.

    ``data`` is a 1-D numpy array (``payload=real``) or None (``payload=size``: byte counts only,
    the same chunks and timing). ``itemsize`` converts chunk bytes to elements. Hooks:

    - ``visit(flow, chunk) -> bool``: ``chunk`` (with ``.hop``, ``.index``, ``.data``) has
      reached ``path[chunk.hop]``; the hook may store it or replace ``chunk.data`` (add a
      contribution). It returns False to hold the chunk there; its owner later calls
      :meth:`forward` to let it go on;
    - ``done(flow)``: every chunk has reached the end of the path.

    ``tag`` is the owner's own data (the collectives keep the phase and the blocks carried).

    ``first_arrival`` and ``last_arrival`` are the ticks at which the first and the last chunk
    reached the end of the path.
    """

    __slots__ = (
        "_hop_spans",
        "arrived",
        "data",
        "done",
        "first_arrival",
        "id",
        "itemsize",
        "last_arrival",
        "links",
        "name",
        "nbytes",
        "net",
        "path",
        "sizes",
        "tag",
        "visit",
    )  # fmt: skip

    def __init__(
        self,
        net: IciNetwork,
        path: Sequence[Coord],
        nbytes: int,
        *,
        data: Any = None,
        itemsize: int = 1,
        visit: Callable[[Flow, Chunk], bool] | None = None,
        done: Callable[[Flow], None] | None = None,
        name: str = "msg",
        tag: Any = None,
    ) -> None:
        net.flow_ids += 1
        self.id = net.flow_ids
        self.net = net
        self.path = list(path)
        self.links = net.path_links(self.path)
        self.nbytes = nbytes
        self.data = data
        self.itemsize = itemsize
        self.visit = visit
        self.done = done
        self.name = name
        self.tag = tag
        self.sizes = chunk_sizes(nbytes, net.cfg.chunk_bytes)
        self.arrived = 0
        self.first_arrival = -1
        self.last_arrival = -1
        ops = net.sim.trace_level >= TraceLevel.OPS
        self._hop_spans: list[list[int]] = [[-1, -1] for _ in self.links] if ops else []

    @property
    def hops(self) -> int:
        return len(self.links)

    def start(self) -> None:
        """Hand every chunk to the first link (now): they leave back to back."""
        if not self.links:
            self.arrived = len(self.sizes)
            self.first_arrival = self.last_arrival = self.net.env.now
            if self.done is not None:
                self.done(self)
            return
        off = 0
        step = self.itemsize
        for i, n in enumerate(self.sizes):
            part = None
            if self.data is not None:
                lo = off // step
                part = self.data[lo : lo + n // step]
            off += n
            self._send(Chunk(self, i, n, part))

    def _send(self, ch: Chunk) -> None:
        link = self.links[ch.hop]
        start, end = link.send(ch.nbytes, self._arrived, ch)
        level = link.sim.trace_level
        if level >= TraceLevel.OPS:
            span = self._hop_spans[ch.hop]
            if span[0] < 0:
                span[0] = start
            span[1] = end
            if level >= TraceLevel.DETAIL:
                link.trace(
                    "ici", self.name, start, end - start, bytes=ch.nbytes, chunk=ch.index,
                    flow=self.id,
                )  # fmt: skip
            if ch.index == len(self.sizes) - 1:
                link.trace(
                    "ici_msg", self.name, span[0], span[1] - span[0], bytes=self.nbytes,
                    chunks=len(self.sizes), flow=self.id, hop=ch.hop,
                    flow_out=self.id * 256 + ch.hop + 1 if ch.hop + 1 < len(self.links) else None,
                    flow_in=self.id * 256 + ch.hop if ch.hop else None,
                )  # fmt: skip

    def _arrived(self, ch: Chunk) -> None:
        ch.hop += 1
        if self.visit is not None and not self.visit(self, ch):
            return
        self.forward(ch)

    def forward(self, ch: Chunk) -> None:
        """Send ``ch`` on from where it is (or count it in, at the end of the path)."""
        if ch.hop < len(self.links):
            self._send(ch)
            return
        now = self.net.env._now
        if self.first_arrival < 0:
            self.first_arrival = now
        self.arrived += 1
        if self.arrived == len(self.sizes):
            self.last_arrival = now
            self.net.flows_done += 1
            if self.done is not None:
                self.done(self)
