"""The flow-level fidelity of the ICI (``ici.fidelity = flow``): messages as fluid flows.

The packet fidelity (:mod:`tpu.network`) moves every packet over every link. This one moves each
message (a :class:`tpu.network.Flow`) as a fluid over its path: its events are per message and
per hop (the head reaching a chip, the message done on a port, the tail reaching a chip), not
per packet, so its cost does not grow with the bytes.

Sharing. Each port (an ICI link direction, or a DCN stage) is shared by the messages on it in
equal parts (processor sharing: ``n`` messages on a port each get ``1/n`` of its bandwidth, the
fluid limit of the packet fidelity's round robin, which sends one packet of each in turn). A
message is on a port from the moment its head enters the port until the port has carried all of
its bytes. The shares change only when a message comes onto a port or leaves it; the port keeps
one virtual clock (bytes served per message), so a change costs a heap operation, not a pass
over the messages.

Cut-through, in the fluid. A message's head enters the first port when it starts and each later
port one hop latency after entering the one before (when the chip there lets it through): that
is when the message comes onto the port. A port cannot finish a message before the message's
tail has reached it: port ``i`` is done with it at ``max(its share's finish, tail at port i)``,
and the tail reaches the next chip one hop latency after that. An idle path of ``h`` hops thus
delivers ``B`` bytes after ``h x latency + B / bandwidth`` (rounded up to whole cycles of the link
clock, as the packet fidelity's serialisation), as the packet fidelity does; a port the message
reaches late serves the messages already there at the full rate meanwhile (the pipelining of a
ring whose far chips' messages are still on their way).

Holds. A collective holds a message at a chip that has not started the message's phase (the
chip's own contribution does not exist yet). The head *probes* each chip on the way (the flow's
``visit`` hook sees a packet with ``probe`` set and no data): a hold keeps the message off the
ports beyond that chip; when the owner forwards the probe, the head goes on from there. Every
chip on the way sees the message once more, as one packet holding the whole message, when its
tail passes (that is when a collective adds its contribution or keeps a copy), and the last chip
when the tail lands.

What this leaves out, by design: the order of packets within a round robin (a message of a
few packets that starts first finishes up to ``n - 1`` packets' serialisation earlier among
``n`` messages on a port than equal shares give), credits (the default buffers cover the credit
round trip, so they throttle only congested ports), and the coupling of a message's ports (a
port may serve a message's bytes before they reach it; the port's finish is then held back to
the tail's arrival, but the share it took is not given back to the others). Its agreement with
the packet fidelity is tested on a matrix of collectives and contention cases
(``tests/test_tpu_fidelity.py``); the bounds are in docs/tpu/design.md.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpu.network import Flow, IciNetwork


class _Port:
    """One port's processor sharing: ``n`` messages, a virtual clock ``v`` (bytes each message
    has been served since the port's start), the heap of the messages' finishing virtual times."""

    __slots__ = ("due", "heap", "link", "n", "rate", "since", "v", "version")

    def __init__(self, link: Any, per_tick: float) -> None:
        self.link = link
        self.rate = link.bytes_per_s * per_tick  # bytes per tick
        self.n = 0
        self.v = 0.0
        self.since = 0
        self.heap: list[tuple[float, int, FluidState, int, bool]] = []
        self.version = 0
        self.due = -1  # tick of the pending finish event (-1: none)


class FluidState:
    """The flow fidelity's bookkeeping of one :class:`Flow`, port by port: ``tail_at[i]`` the
    tick the whole message has reached port ``i`` (-1: not yet), ``served[i]`` the tick port ``i``
    served its last byte (-1: not yet)."""

    __slots__ = (
        "flow", "held", "lat", "mile", "probe", "seq", "served", "tail_at", "tail_waiting",
        "waiting",
    )  # fmt: skip

    def __init__(self, flow: Flow, seq: int) -> None:
        self.flow = flow
        self.seq = seq
        n = len(flow.ports)
        self.lat = [p.latency_ticks for p in flow.ports]
        self.tail_at = [-1] * n
        self.served = [-1] * n
        #: ``mile[i]``: port ``i`` has sent all but a buffer of the message (-1: not yet, or
        #: no such point): only then can the tail be in the chip before it (credits)
        self.mile = [0] * n
        self.waiting = [False] * n  # the tail is at the chip before port i, waiting for credit
        self.held = -1  # the port the head waits at (its chip holds the message), or -1
        self.tail_waiting = -1  # tick the tail reached the holding chip, or -1
        self.probe: Any = None


class FluidNet:
    """The flow engine of one :class:`IciNetwork`: ports sharing their bandwidth, and an agenda
    of per-tick actions (one kernel event per instant that has any)."""

    def __init__(self, net: IciNetwork) -> None:
        self.net = net
        self.env = net.sim.env
        self.ports: dict[Any, _Port] = {}
        self.agenda: dict[int, list[tuple[Callable[..., None], tuple[Any, ...]]]] = {}
        self.period = 0
        self.per_tick = 0.0
        self.seq = 0
        #: the most messages one port has carried at once (the bound on packet-order effects)
        self.max_sharing = 0

    # -- time --------------------------------------------------------------------------------
    def _freeze(self) -> None:
        dom = self.net.domain
        self.period = dom.period_ticks
        self.per_tick = 1.0 / (dom.freq_hz * self.period)

    def at(self, when: int, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn(*args)`` at tick ``when`` (now or later), after the actions already due."""
        todo = self.agenda.get(when)
        if todo is None:
            todo = self.agenda[when] = []
            ev = self.env.timeout(when - self.env._now, when)
            ev.callbacks.append(self._run)
        todo.append((fn, args))

    def _run(self, event: Any) -> None:
        for fn, args in self.agenda.pop(event.value):
            fn(*args)

    def _port(self, link: Any) -> _Port:
        p = self.ports.get(link)
        if p is None:
            p = self.ports[link] = _Port(link, self.per_tick)
        return p

    # -- ports -------------------------------------------------------------------------------
    def _advance(self, p: _Port) -> None:
        now = self.env._now
        if p.n:
            p.v += (now - p.since) * p.rate / p.n
        p.since = now

    def _schedule(self, p: _Port) -> None:
        """The port's next finish, at the current shares (whole cycles, rounded up)."""
        if not p.heap:
            p.version += 1
            p.due = -1
            return
        rest = p.heap[0][0] - p.v
        per = self.period
        cycles = max(0, math.ceil(rest * p.n / (p.rate * per) - 1e-9)) if rest > 0 else 0
        when = self.env._now + cycles * per
        if when == p.due:
            return  # the pending event stands
        p.version += 1
        p.due = when
        self.at(when, self._finish, p, p.version)

    def _enter(self, st: FluidState, i: int) -> None:
        """The message comes onto port ``i`` of its path now."""
        p = self._port(st.flow.ports[i])
        self._advance(p)
        p.n += 1
        if p.n > self.max_sharing:
            self.max_sharing = p.n
        self.seq += 1
        flow = st.flow
        heapq.heappush(p.heap, (p.v + flow.nbytes, self.seq, st, i, True))
        if i and flow.visit is not None and flow.port_hop[i - 1] >= 0:
            up = flow.ports[i - 1]
            shared = max(1, self.ports[up].n)  # the messages that share the chip's buffer
            ahead = flow.nbytes - up.buffer_packets * flow.packet_bytes // shared
            if ahead > 0:  # the chip's buffer cannot hold the rest: credits hold the tail back
                st.mile[i] = -1
                self.seq += 1
                heapq.heappush(p.heap, (p.v + ahead, self.seq, st, i, False))
        self._schedule(p)

    def _finish(self, p: _Port, version: int) -> None:
        if version != p.version:
            return
        p.due = -1
        self._advance(p)
        heap = p.heap
        limit = p.v + 1e-9 * max(1.0, p.v)
        done = []
        miles = []
        while heap and heap[0][0] <= limit:
            _v, _s, st, i, whole = heapq.heappop(heap)
            if whole:
                p.n -= 1
                done.append((st, i))
            else:
                miles.append((st, i))
        if not heap:
            p.v = 0.0  # idle: restart the clock (keeps its float error from accumulating)
        self._schedule(p)
        now = self.env._now
        for st, i in miles:
            st.mile[i] = now
            if st.waiting[i]:
                st.waiting[i] = False
                self._visit(st.flow, i - 1)
        for st, i in done:
            st.served[i] = now
            self._account(st, i)
            if i == 0 or st.tail_at[i] >= 0:
                self._done(st, i, max(now, st.tail_at[i]))

    def _account(self, st: FluidState, i: int) -> None:
        flow = st.flow
        lk = flow.ports[i]
        lk.bytes += flow.nbytes
        lk.packets += flow.wire_packets
        lk.busy_ticks += lk.serialise_ticks(flow.nbytes)

    def _done(self, st: FluidState, i: int, when: int) -> None:
        """Port ``i`` is done with the message at ``when``: its tail reaches the next chip (or
        stage) a latency later."""
        flow = st.flow
        if flow.traced:
            start = st.served[i] - flow.ports[i].serialise_ticks(flow.nbytes)
            flow.trace_hop(flow.ports[i], i, max(0, start), when - max(0, start))
        self.at(when + st.lat[i], self._tail, st, i)

    # -- flows -------------------------------------------------------------------------------
    def start(self, flow: Flow) -> None:
        """``flow`` starts at its source now."""
        if not self.period:
            self._freeze()
        st = flow.fluid = FluidState(flow, 0)
        st.tail_at[0] = self.env._now
        self._head(st, 0)

    def _head(self, st: FluidState, i: int) -> None:
        """The head enters port ``i`` now."""
        self._enter(st, i)
        self.at(self.env._now + st.lat[i], self._head_at, st, i)

    def _head_at(self, st: FluidState, i: int) -> None:
        """The head has crossed port ``i``: at the last chip, the first byte lands a packet's
        serialisation later; at a chip on the way, the chip may hold it; else on it goes."""
        flow = st.flow
        if i == flow.last_port:
            first = self.env._now + flow.ports[i].serialise_ticks(
                min(flow.nbytes, flow.packet_bytes)
            )
            if flow.first_arrival < 0 or first < flow.first_arrival:
                flow.first_arrival = first
            return
        hop = flow.port_hop[i]
        if hop >= 0 and flow.visit is not None:
            pkt = st.probe
            if pkt is None:
                pkt = st.probe = flow.make_packet(0, 0, None)
                pkt.probe = True
            pkt.hop = hop
            pkt.port = i + 1
            if not flow.visit(flow, pkt):
                st.held = i + 1
                return
        self._head(st, i + 1)

    def _tail(self, st: FluidState, i: int) -> None:
        """The tail has crossed port ``i`` now."""
        flow = st.flow
        now = self.env._now
        if i == flow.last_port:
            pkt = self._body(flow, i)
            if flow.visit is None or flow.visit(flow, pkt):
                self._arrive(flow)
            return
        if st.held == i + 1:  # the chip holds the message: it waits in HBM
            st.tail_waiting = now
            return
        if st.mile[i + 1] < 0:  # the chip sees the tail when a credit lets it in
            st.waiting[i + 1] = True
        else:
            self._visit(flow, i)
        self._tail_reaches(st, i + 1, now)

    def _tail_reaches(self, st: FluidState, j: int, now: int) -> None:
        st.tail_at[j] = now
        if st.served[j] >= 0:  # the port served the bytes before they all got there
            self._done(st, j, max(now, st.served[j]))

    def _body(self, flow: Flow, i: int) -> Any:
        pkt = flow.body
        if pkt is None:
            pkt = flow.body = flow.make_packet(0, 0, flow.data)
        pkt.hop = flow.port_hop[i] if i < flow.last_port else len(flow.links)
        pkt.port = i + 1
        return pkt

    def _visit(self, flow: Flow, i: int) -> None:
        if flow.port_hop[i] < 0 or flow.visit is None:
            return
        ok = flow.visit(flow, self._body(flow, i))
        assert ok, "a chip that let the head through holds the tail"

    def forward(self, flow: Flow, pkt: Any) -> None:
        """The owner lets a held ``pkt`` go on (a probe: the head; else the landed message)."""
        st: FluidState = flow.fluid
        if not pkt.probe:
            self._arrive(flow)
            return
        j = st.held
        st.held = -1
        if st.tail_waiting >= 0:  # the whole message is at the chip: it sees it now
            self._visit(flow, j - 1)
            st.tail_at[j] = self.env._now
            st.tail_waiting = -1
        self._head(st, j)

    def _arrive(self, flow: Flow) -> None:
        now = self.env._now
        if flow.first_arrival < 0 or flow.first_arrival > now:
            flow.first_arrival = now
        flow.arrived = 1
        flow.last_arrival = now
        self.net.flows_done += 1
        if flow.done is not None:
            flow.done(flow)
