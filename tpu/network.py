"""The network layer: ICI links that move packets by virtual cut-through, with credits.

A message (a :class:`Flow`) is cut into packets of ``ici.packet_bytes`` (the last one shorter).
Each direction of each ICI link is an :class:`IciLink`: an output port at the sending chip with
a one-way bandwidth, a per-hop latency (the latency lives on the link, not on the chips) and a
credit counter for the packet buffer at the far chip's input (``ici.buffer_bytes``).

Virtual cut-through: a packet starts on a link when the link is idle and holds a credit; it
occupies the link for its serialisation time ``bytes x clock / bandwidth`` cycles (rounded up to
whole cycles, the remainder carried to the next packet while the link streams); its head
reaches the far chip one hop latency after it started, and there it may at once start on the next
link of its path (its tail follows; a link never finishes a packet before the packet's tail has
reached it). So an idle path of ``h`` links delivers the first packet after
``h x latency + serialise(packet)`` and a long message after ``h x latency + serialise(message)``.

Flow control: the far chip's input buffer holds ``buffer_bytes`` (whole packets' worth) per
virtual channel, counted in bytes; a packet's bytes of credit are spent when it starts on the link
and come back one hop latency after the packet's tail has left that buffer (on to the next link,
or into the chip's HBM). Two virtual channels per link, the second taken after the ring's
wraparound link (a dateline), keep rings free of credit deadlock. A link whose head packets
lack credit waits, so a congested link backs traffic up towards its sources. The default
buffer covers the credit round trip (``2 x latency x bandwidth`` plus a packet) on every
generation, so an uncontended stream runs at the link's full rate.

Sharing: a link serves the flows that have a packet ready at it round-robin, one packet each in
turn, so flows crossing a link direction share its bandwidth. A chip injects a message's packets
as its first link accepts them (a DMA engine streaming from HBM); a packet that a collective holds
at a chip (its phase has not started there) is taken into HBM, frees its buffer slot, and is
injected again when released.

DCN between slices: a :class:`DcnHop` is the chain of shared stages a packet crosses (the chip's
PCIe link out, the host's NIC out with the network latency, the far host's NIC in, the far chip's
PCIe link in), each an :class:`IciLink` port with that stage's rate; their buffers cover their own
round trip (host memory is large).

Cost: three kernel events per packet per link (its head's arrival, the link becoming idle, the
credit's return), so the reference fidelity costs events in proportion to bytes x hops.

Tracing: at ``detail`` every packet is a slice on its link's track; at ``ops`` every message is
one slice per link it crosses (its first packet's start to its last packet's end).
"""

from __future__ import annotations

import gc
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from simcore.component import Component
from simcore.tracing import TraceLevel
from tpu.config import IciConfig
from tpu.fluid import FluidNet
from tpu.topology import Coord, Slice, Translations


def _fmt(c: Coord) -> str:
    return ",".join(map(str, c))


class IciLink(Component):
    """One direction of one ICI link (or one DCN stage): an output port with a round-robin
    arbiter over the flows that have a packet ready, a one-way bandwidth, a per-hop latency and
    credits for the packet buffer at its far end."""

    def __init__(
        self,
        parent: Component,
        src: Coord,
        dst: Coord,
        *,
        bytes_per_s: float,
        cfg: IciConfig,
        name: str | None = None,
        latency_ns: int | None = None,
        buffer_packets: int | None = None,
    ) -> None:
        super().__init__(parent, name or f"link[{_fmt(src)}>{_fmt(dst)}]")
        self.src, self.dst = src, dst
        self.bytes_per_s = bytes_per_s
        lat = cfg.hop_latency_ns if latency_ns is None else latency_ns
        self.latency_cycles = lat * cfg.clock_hz // 1_000_000_000
        self.clock_hz = cfg.clock_hz
        self.buffer_packets = buffer_packets or max(1, cfg.buffer_bytes // cfg.packet_bytes)
        self._buffer_bytes = self.buffer_packets * cfg.packet_bytes
        self._rate = max(1, int(bytes_per_s))
        self._env = self.sim.env

    # the rest of a link's state starts at these values (class attributes: a pod has tens of
    # thousands of links, and setting them on each cost a third of its build)
    wrap = False  # a wraparound link: the dateline of its ring
    axis = -1
    busy_ticks = 0
    bytes = 0
    packets = 0
    waking = False  # busy with a packet: a wake-up is pending at its end
    _carry = 0  # byte-cycles sent ahead of the whole cycles counted (rounding)
    _last_end = -1
    _lat = 0
    _period = 0
    # the packet fidelity's port state, made when the first packet is offered (:meth:`_open`)
    rr: deque[Any] | None = None  # queues with a packet ready, in service order
    ready: dict[int, Any]  # flow id -> its queue here
    credits: list[int]  # free bytes of the far buffer, per virtual channel
    _ser: dict[int, int]  # serialisation ticks by size (made at the freeze)

    def _open(self) -> None:
        self.rr = deque()
        self.ready = {}
        self.credits = [self._buffer_bytes, self._buffer_bytes]

    def check(self) -> None:
        if self._period:  # frozen before the time base was: again (else at the first use)
            self._freeze()

    def _freeze(self) -> None:
        """Tick-valued timing, once the time base is frozen (at check, or at the first send)."""
        self._period = self.domain.period_ticks
        self._lat = self.domain.ticks(self.latency_cycles)
        self._ser = {}

    def serialise_ticks(self, nbytes: int) -> int:
        """Ticks the link is busy with ``nbytes`` (whole cycles of its clock, rounded up)."""
        if not self._period:
            self._freeze()
        t = self._ser.get(nbytes)
        if t is None:
            cycles = -(-nbytes * self.clock_hz // int(self.bytes_per_s))
            t = self._ser[nbytes] = cycles * self.domain.period_ticks
        return t

    @property
    def latency_ticks(self) -> int:
        if not self._period:
            self._freeze()
        return self._lat

    def offer(self, flow: Flow, queue: Any) -> None:
        """``flow`` has ``queue`` (packets ready here, or its source) to send on this link."""
        if self.rr is None:
            self._open()
        self.ready[flow.id] = queue
        self.rr.append(queue)
        if not self.waking:
            self._kick()

    def accept(self, pkt: Packet) -> None:
        """A packet's head has arrived at this link's chip: queue it behind its flow's."""
        flow = pkt.flow
        if self.rr is None:
            self._open()
        q = self.ready.get(flow.id)
        if q is None:
            q = self.ready[flow.id] = _Queue(flow.port_vc[pkt.port])
            self.rr.append(q)
        q.append(pkt)
        if not self.waking:
            self._kick()

    def _kick(self) -> None:
        """Start the next packet if the link is idle, holds a credit and has one ready."""
        rr = self.rr
        if not rr:
            return
        free = self.credits
        for _ in range(len(rr)):  # round robin, skipping queues whose channel has no credit
            q = rr[0]
            if free[q.vc] >= q.head_bytes():
                break
            rr.rotate(-1)
        else:
            return
        if not self._period:
            self._freeze()
        env = self._env
        now = env._now
        rr.popleft()
        pkt = q.popleft()
        flow = pkt.flow
        if q:
            rr.append(q)
        else:
            del self.ready[flow.id]
        vc = q.vc
        free[vc] -= pkt.nbytes
        pkt.vc = vc
        # serialisation in whole cycles, the rounding carried over while the link streams back
        # to back (so a long stream takes its exact time, to within a cycle)
        need = pkt.nbytes * self.clock_hz - (self._carry if now == self._last_end else 0)
        cycles = -(-need // self._rate) if need > 0 else 0
        self._carry = cycles * self._rate - need
        end = now + cycles * self._period
        if pkt.tail_at > end:  # a faster link waits for the packet's tail
            end = pkt.tail_at
        self._last_end = end
        self.busy_ticks += end - now
        self.bytes += pkt.nbytes
        self.packets += 1
        up = pkt.upstream
        if up is not None:  # the slot it held here frees as its tail leaves
            env.timeout(end - now + up._lat, (pkt.upvc, pkt.nbytes)).callbacks.append(up._credit)
        lat = self._lat
        pkt.tail_at = end + lat
        pkt.upstream = self
        pkt.upvc = vc
        if pkt.port == flow.last_port:
            env.timeout(end + lat - now, pkt).callbacks.append(flow._landed)
        else:
            env.timeout(lat, pkt).callbacks.append(flow._head)
        self.waking = True
        env.timeout(end - now).callbacks.append(self._wake)
        if flow._level >= TraceLevel.OPS:
            flow._trace(self, pkt, now, end)

    def _wake(self, _event: Any) -> None:
        self.waking = False
        self._kick()

    def _credit(self, event: Any) -> None:
        vc, nbytes = event.value
        self.credits[vc] += nbytes
        if not self.waking:
            self._kick()

    def progress_count(self) -> int:
        return self.packets


class DcnHop(Component):
    """One hop between slices: HBM -> PCIe -> host NIC -> network -> host NIC -> PCIe -> HBM.

    Each stage is a port (:class:`IciLink`) shared the way the hardware shares it: a chip's PCIe
    link by every transfer to or from that chip, a host's NIC by the chips of the host
    (``spec.host`` of them). Packets cut through the stages; the network's latency
    (``ici.dcn_latency_ns``) is on the sending NIC. HBM is far faster than PCIe and is not a
    stage.
    """

    def __init__(self, parent: IciNetwork, src: Coord, dst: Coord) -> None:
        super().__init__(parent, f"dcn[{_fmt(src)}>{_fmt(dst)}]")
        self.src, self.dst = src, dst
        self.stages = [
            parent.dcn_server("pcie-out", src),
            parent.dcn_server("nic-out", parent.topo.host_of(src)),
            parent.dcn_server("nic-in", parent.topo.host_of(dst)),
            parent.dcn_server("pcie-in", dst),
        ]
        self.packets = 0
        self.bytes = 0
        self.busy_ticks = 0  # not an ICI link: left out of link utilisation


class IciNetwork(Component):
    """The links of one slice (or of slices joined over DCN), in the ``ici`` domain: one
    :class:`IciLink` per ICI link direction, one :class:`DcnHop` per DCN direction."""

    def __init__(self, parent: Component, topo: Slice, cfg: IciConfig) -> None:
        super().__init__(parent, "ici")
        self.topo = topo
        self.cfg = cfg
        bw = cfg.link_bytes_per_s or topo.spec.ici_oneway_bytes_per_s
        self.links: dict[tuple[Coord, Coord], Any] = {}
        self.dcn: dict[tuple[str, tuple[int, ...]], IciLink] = {}
        # A pod has tens of thousands of links, each a few containers that live as long as the
        # run: the cyclic garbage collector, triggered by the allocations, would scan them over
        # and over while they are made (half the build of a 4,096-chip slice). It pauses while
        # the links are made (nothing made here is garbage) and resumes as it was.
        collecting = gc.isenabled()
        gc.disable()
        try:
            names = {c: _fmt(c) for c in topo.coords}
            for e in topo.edges():
                if topo.is_dcn(e.axis):
                    self.links[(e.src, e.dst)] = DcnHop(self, e.src, e.dst)
                else:
                    name = f"link[{names[e.src]}>{names[e.dst]}]"
                    lk = IciLink(self, e.src, e.dst, bytes_per_s=bw, cfg=cfg, name=name)
                    lk.wrap, lk.axis = e.wrap, e.axis
                    self.links[(e.src, e.dst)] = lk
        finally:
            if collecting:
                gc.enable()
        #: the flow-level engine (``ici.fidelity = flow``), or None: packets
        self.fluid = FluidNet(self) if cfg.fidelity == "flow" else None
        self.flows_done = 0
        self.flow_ids = 0  # flows made so far: each flow's id (trace flows), per simulation
        self.trace_ids = 1 << 40  # trace flow ids the system layer takes (phase links)
        #: the translations the network is folded by (:meth:`fold`), or None
        self.symmetry: Translations | None = None
        self._folded: dict[tuple[Coord, Coord], Any] = {}

    def fold(self, sym: Translations) -> None:
        """Run one representative per class of ``sym``: every path's links become their
        translates from the representative of their source chip, so each link direction (and
        DCN stage) that carries anything stands for ``sym.size`` identical ones. Only for a
        system invariant under ``sym`` with nothing else on the network (the collectives'
        symmetric fast path, docs/tpu/design.md#symmetry); before any flow is made."""
        assert self.flow_ids == 0 and self.symmetry is None, "fold a network before its flows"
        self.symmetry = sym

    @property
    def multiplicity(self) -> int:
        """How many link directions each simulated one stands for (1 unless folded)."""
        return 1 if self.symmetry is None else self.symmetry.size

    def link(self, src: Coord, dst: Coord) -> Any:
        return self.links[(src, dst)]

    def path_links(self, path: Sequence[Coord]) -> list[Any]:
        if self.symmetry is None:
            return [self.links[(a, b)] for a, b in itertools.pairwise(path)]
        out = []
        for ab in itertools.pairwise(path):
            lk = self._folded.get(ab)
            if lk is None:
                lk = self._folded[ab] = self.links[self.symmetry.fold(*ab)]
            out.append(lk)
        return out

    def dcn_server(self, role: str, where: tuple[int, ...]) -> IciLink:
        """The shared DCN stage ``role`` of a chip (PCIe) or a host (NIC), made once; its buffer
        covers its credit round trip (host memory is large)."""
        key = (role, where)
        if key not in self.dcn:
            cfg = self.cfg
            nic = role.startswith("nic")
            rate = cfg.dcn_bytes_per_s if nic else cfg.pcie_bytes_per_s
            lat = cfg.dcn_latency_ns if role == "nic-out" else 0
            trip = 2 * lat * 1e-9 * rate + cfg.packet_bytes
            slots = max(cfg.buffer_bytes, int(trip) + 1) // cfg.packet_bytes + 1
            name = f"{'host' if nic else 'chip'}[{_fmt(where)}]/{role}"
            self.dcn[key] = IciLink(
                self, where, where, bytes_per_s=rate, cfg=cfg, name=name, latency_ns=lat,
                buffer_packets=slots,
            )  # fmt: skip
        return self.dcn[key]

    def used_links(self) -> list[IciLink]:
        """The ICI link directions that carried traffic."""
        return [lk for lk in self.links.values() if isinstance(lk, IciLink) and lk.packets]

    def sent_packets(self) -> int:
        """Packets that crossed an ICI link or a DCN hop (a packet counts once per hop; a
        folded network counts each simulated link for the ones it stands for)."""
        return sum(lk.packets for lk in self.links.values()) * self.multiplicity

    def progress_count(self) -> int:
        return self.flows_done


def packet_count(nbytes: int, packet_bytes: int) -> int:
    """Packets of a message of ``nbytes`` (at least one: an empty message is one empty packet)."""
    return max(1, -(-nbytes // packet_bytes))


class Packet:
    """One packet of a :class:`Flow`: its index, size, element offset ``lo`` in the flow's data,
    data (or None), the chip ``hop`` of the path it has reached and the ``port`` (index into the
    flow's ports) it is at."""

    __slots__ = (
        "data", "flow", "hop", "index", "lo", "nbytes", "port", "probe", "tail_at", "upstream",
        "upvc", "vc",
    )  # fmt: skip

    def __init__(self, flow: Flow, index: int, nbytes: int, lo: int, data: Any) -> None:
        self.flow = flow
        self.index = index
        self.nbytes = nbytes
        self.lo = lo
        self.data = data
        self.hop = 0  # chips of the path passed so far
        self.port = 0
        self.tail_at = 0  # tick its tail is (or will be) at its current chip
        self.upstream: IciLink | None = None  # the port whose buffer slot it holds
        self.upvc = 0  # and that slot's virtual channel
        self.vc = 0
        self.probe = False  # flow fidelity: the head asking a chip on the way (no data)


class _Queue(deque):  # type: ignore[type-arg]
    """A flow's packets ready at a link, all on one virtual channel ``vc``."""

    def __init__(self, vc: int) -> None:
        super().__init__()
        self.vc = vc

    def head_bytes(self) -> int:
        return self[0].nbytes  # type: ignore[no-any-return]


class _Source:
    """The packets a flow has not yet injected, made one by one as its first link takes them."""

    __slots__ = ("flow", "next", "vc")

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.next = 0
        self.vc = flow.port_vc[0]

    def __bool__(self) -> bool:
        return self.next < self.flow.npackets

    def __len__(self) -> int:
        return self.flow.npackets - self.next

    def head_bytes(self) -> int:
        flow = self.flow
        return min(flow.packet_bytes, flow.nbytes - self.next * flow.packet_bytes)

    def popleft(self) -> Packet:
        flow = self.flow
        i = self.next
        self.next += 1
        size = flow.packet_bytes
        off = i * size
        n = min(size, flow.nbytes - off)
        lo = off // flow.itemsize
        data = None
        if flow.data is not None:
            data = flow.data[lo : lo + n // flow.itemsize]
        pkt = Packet(flow, i, n, lo, data)
        pkt.tail_at = flow.net.env._now
        return pkt


class Flow:
    """A message moving along ``path`` (consecutive neighbours), cut into packets.

    ``data`` is a 1-D numpy array (``payload=real``) or None (``payload=size``: byte counts only,
    the same packets and timing). ``itemsize`` converts packet bytes to elements. Hooks:

    - ``visit(flow, packet) -> bool``: ``packet`` (with ``.hop``, ``.lo``, ``.data``) has reached
      ``path[packet.hop]`` (its head, at a chip on the way; its tail, at the end of the path); the
      hook may store it or replace ``packet.data`` (add a contribution). It returns False to hold
      the packet there (it goes into the chip's HBM); its owner later calls :meth:`forward`;
    - ``done(flow)``: every packet has reached the end of the path.

    ``tag`` is the owner's own data (the collectives keep the phase and the blocks carried).

    ``first_arrival`` and ``last_arrival`` are the ticks at which the first and the last packet
    reached the end of the path (tail included).

    At ``ici.fidelity = flow`` the network moves the message as one flow (:mod:`tpu.fluid`): the
    hooks see one packet holding the whole message (``npackets`` is 1) as its tail passes each
    chip, and, before, a ``probe`` packet (no data) as its head reaches each chip on the way,
    which the hook may hold as it would a packet.
    """

    __slots__ = (
        "_hop_spans",
        "_level",
        "arrived",
        "body",
        "data",
        "done",
        "first_arrival",
        "fluid",
        "id",
        "itemsize",
        "last_arrival",
        "last_port",
        "links",
        "name",
        "nbytes",
        "net",
        "npackets",
        "packet_bytes",
        "path",
        "port_hop",
        "port_vc",
        "ports",
        "tag",
        "visit",
        "wire_packets",
    )  # fmt: skip

    def __init__(
        self,
        net: IciNetwork,
        path: Sequence[Coord],
        nbytes: int,
        *,
        data: Any = None,
        itemsize: int = 1,
        visit: Callable[[Flow, Packet], bool] | None = None,
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
        self.packet_bytes = net.cfg.packet_bytes
        #: packets on the wire (what the links count); the hooks see ``npackets`` of them
        self.wire_packets = packet_count(nbytes, self.packet_bytes)
        self.npackets = 1 if net.fluid is not None else self.wire_packets
        self.fluid: Any = None  # the flow fidelity's state
        self.body: Packet | None = None  # the flow fidelity's one packet
        # the ports crossed (a DCN hop is four stages) and the chip reached after each (-1: none)
        self.ports: list[IciLink] = []
        self.port_hop: list[int] = []
        for i, lk in enumerate(self.links):
            if isinstance(lk, DcnHop):
                lk.packets += self.wire_packets
                lk.bytes += nbytes
                self.ports += lk.stages
                self.port_hop += [-1, -1, -1, i + 1]
            else:
                self.ports.append(lk)
                self.port_hop.append(i + 1)
        self.last_port = len(self.ports) - 1
        # virtual channel of each port's far buffer: 1 once the path has crossed its axis's
        # wraparound link (the dateline), else 0; DCN stages use 0
        self.port_vc: list[int] = []
        crossed: set[int] = set()
        for lk in self.ports:
            if lk.wrap:
                crossed.add(lk.axis)
            self.port_vc.append(1 if lk.axis in crossed else 0)
        self.arrived = 0
        self.first_arrival = -1
        self.last_arrival = -1
        self._level = net.sim.trace_level
        ops = self._level >= TraceLevel.OPS
        self._hop_spans: list[list[int]] = [[-1, -1, 0] for _ in self.ports] if ops else []

    @property
    def hops(self) -> int:
        return len(self.links)

    @property
    def traced(self) -> bool:
        """Whether the message's hops are traced (trace level ops or finer)."""
        return self._level >= TraceLevel.OPS

    def start(self) -> None:
        """Offer the message's packets to the first link: they leave as it takes them."""
        if not self.links:
            self.arrived = self.npackets
            self.first_arrival = self.last_arrival = self.net.env.now
            if self.done is not None:
                self.done(self)
            return
        if self.net.fluid is not None:
            self.net.fluid.start(self)
            return
        self.ports[0].offer(self, _Source(self))

    def make_packet(self, index: int, lo: int, data: Any) -> Packet:
        """The flow fidelity's packet: the whole message (or a probe, with no data)."""
        pkt = Packet(self, index, self.nbytes, lo, data)
        pkt.tail_at = self.net.env._now
        return pkt

    def trace_hop(self, port: IciLink, hop: int, start: int, dur: int) -> None:
        """The flow fidelity's trace of the message on one port of its path."""
        port.trace(
            "ici_msg", self.name, start, dur, bytes=self.nbytes, packets=self.wire_packets,
            flow=self.id, hop=hop,
            flow_out=self.id * 256 + hop + 1 if hop < self.last_port else None,
            flow_in=self.id * 256 + hop if hop else None,
        )  # fmt: skip

    def _trace(self, link: IciLink, pkt: Packet, start: int, end: int) -> None:
        span = self._hop_spans[pkt.port]
        if span[0] < 0:
            span[0] = start
        span[1] = end
        span[2] += 1
        if self._level >= TraceLevel.DETAIL:
            link.trace(
                "ici", self.name, start, end - start, bytes=pkt.nbytes, packet=pkt.index,
                flow=self.id,
            )  # fmt: skip
        if span[2] == self.npackets:
            hop = pkt.port
            link.trace(
                "ici_msg", self.name, span[0], span[1] - span[0], bytes=self.nbytes,
                packets=self.npackets, flow=self.id, hop=hop,
                flow_out=self.id * 256 + hop + 1 if hop < self.last_port else None,
                flow_in=self.id * 256 + hop if hop else None,
            )  # fmt: skip

    def _head(self, event: Any) -> None:
        """A packet's head has crossed a link (not the path's last): visit the chip it reached,
        then cut through to the next link."""
        pkt: Packet = event.value
        hop = self.port_hop[pkt.port]
        pkt.port += 1
        if hop >= 0:
            pkt.hop = hop
            if self.visit is not None and not self.visit(self, pkt):
                self._eject(pkt)
                return
        self.ports[pkt.port].accept(pkt)

    def _eject(self, pkt: Packet) -> None:
        """``pkt`` leaves the link buffers for the chip's HBM: its slot frees when its tail is
        in, and it is injected afresh when forwarded."""
        up = pkt.upstream
        if up is not None:
            env = self.net.env
            at = pkt.tail_at - env._now + up._lat
            env.timeout(at, (pkt.upvc, pkt.nbytes)).callbacks.append(up._credit)
            pkt.upstream = None

    def _landed(self, event: Any) -> None:
        """A packet's tail has reached the end of the path."""
        pkt: Packet = event.value
        pkt.hop = len(self.links)
        pkt.port += 1
        self._eject(pkt)
        if self.visit is not None and not self.visit(self, pkt):
            return
        self.forward(pkt)

    def forward(self, pkt: Packet) -> None:
        """Send ``pkt`` on from where it is (or count it in, at the end of the path)."""
        if self.net.fluid is not None:
            self.net.fluid.forward(self, pkt)
            return
        if pkt.hop < len(self.links):
            self.ports[pkt.port].accept(pkt)
            return
        now = self.net.env._now
        if self.first_arrival < 0:
            self.first_arrival = now
        self.arrived += 1
        if self.arrived == self.npackets:
            self.last_arrival = now
            self.net.flows_done += 1
            if self.done is not None:
                self.done(self)
