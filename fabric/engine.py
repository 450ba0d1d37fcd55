"""The wavelet-exact fabric engine (reference fidelity).

The engine runs on its wafer's :class:`simcore.stepping.CycleScheduler`: cycle by cycle, but only
in cycles where something happens, it steps every *active* router (step group ``routers``) and
then every active ramp endpoint (group ``endpoints``: compute engines' fabric microthreads, edge
ports):

1. deliveries due this cycle land (wavelets into router input buffers or CE input queues, credits
   back to senders, teardown signals to CEs);
2. each active router, in a fixed order, lets each output port send at most one wavelet: among
   the input buffers whose head wavelet still has to go out of that port, whose colour is not in
   teardown and for which the port holds a credit, arbitration picks one (round robin over
   colours by default). A multicast head leaves its buffer once every tx port has sent it; then
   the credit goes back upstream and, for a control wavelet, its commands take effect on this
   router (a switch moves only after the control wavelet has passed);
3. each CE with active fabric microthreads advances one of them by one element (one datapath
   slot per cycle, picked by microthread priority).

Every interaction between two parts has a latency of at least one cycle (hop, ramp, credit
return), so nothing a part does in cycle t is seen by another part in cycle t: the result does
not depend on the order parts are stepped in, and the engine is deterministic by construction.

Costs: one SimPy event per active cycle, plus Python work proportional to the wavelets moved.

The engine knows the parts at the ends of its links only through the protocols of
:mod:`fabric.endpoints` (a router's ramp leads to a :class:`~fabric.endpoints.RampEndpoint`, its
mesh ports to a :class:`~fabric.endpoints.LinkPeer`), so it is independent of the compute engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic

from fabric.config import FabricConfig
from fabric.endpoints import EndpointT, FastPhase, LinkPeer, OpT, RampEndpoint
from fabric.routes import STEP, ColourRoute, Dir, Position, RouteError, WaveletFilter, pe_name
from fabric.schedules import SourceSchedules
from fabric.wavelet import Cmd, Wavelet
from simcore.stepping import CycleScheduler

PORTS = (Dir.N, Dir.E, Dir.S, Dir.W, Dir.RAMP)
RAMP = Dir.RAMP
# Enum members read off their class cost about 0.7 us each in Python 3.11 (an ``enum.property``
# lookup), a module name a tenth of that: the hot paths read these.
_TEARDOWN, _ADVANCE, _RESET = Cmd.TEARDOWN, Cmd.SWITCH_ADV, Cmd.SWITCH_RST
OPPOSITE = {d: d.opposite for d in Dir}  # a dict lookup: cheaper than the enum property


class Router:
    """The router of one PE: per-(input port, colour) buffers, credits, switch state."""

    __slots__ = (
        "active",
        "blocked",
        "buffered",
        "bufs",
        "ce",
        "credits",
        "engine",
        "epoch",
        "express_busy",
        "express_colour",
        "express_colour_in",
        "express_stream",
        "express_until",
        "filters",
        "forwarded",
        "future",
        "index",
        "nbr",
        "path",
        "pending",
        "routes",
        "rr",
        "stall_cycles",
        "stalled",
        "waits",
        "xy",
    )  # fmt: skip

    def __init__(self, engine: FabricEngine, xy: tuple[int, int], index: int) -> None:
        self.engine = engine
        self.active = engine.routers_group.active  # this router's step group (see receive)
        self.xy = xy
        self.index = index
        self.routes: dict[int, ColourRoute] = {}
        # (lists, not deques: a few wavelets each, and an empty deque takes 760 B to a list's 56)
        self.bufs: dict[tuple[Dir, int], list[Wavelet]] = {}
        self.buffered = 0  # wavelets in all of bufs (a credit wakes the router only if > 0)
        # key -> the ports its head still has to go out of: a list, or the route's one-port tx
        # tuple (read-only) for a unicast head without a filter
        self.pending: dict[tuple[Dir, int], list[Dir] | tuple[Dir, ...]] = {}
        self.credits: dict[tuple[Dir, int], int] = {}
        self.rr: list[int] = [-1] * 5
        self.nbr: dict[Dir, LinkPeer | None] = {}
        self.ce: RampEndpoint = None  # type: ignore[assignment]  # set when the PE is built
        self.forwarded = 0
        self.stall_cycles = 0
        # A step known to send nothing (see step): the blocked (port, colour) credits it would
        # count, -1 when not known; the credits it waits on; the engine's epoch then.
        self.blocked = -1
        self.waits: list[tuple[Dir, int]] | tuple[()] = ()  # (no list per idle router)
        self.epoch = -1
        self.express_until = -1  # last cycle of an express stream through this router
        self.express_colour = -1  # that stream's colour
        self.express_colour_in = -1  # a relay chain's other colour here (fabric.relay)
        # the ports an express stream or relay chain passing here holds (read for membership
        # only; a dict shared by the routers with the same ports, never changed in place)
        self.express_busy: dict[Dir, bool] = {}
        self.express_stream: Any = None  # that stream (fabric.express.ExpressStream)
        self.path = f"wafer/{pe_name(xy)}/router"
        self.filters: dict[int, WaveletFilter] = {}
        self.stalled: dict[tuple[Dir, int], tuple[int, Dir]] = {}  # key -> (since, port)
        # colour -> (cycle of the last pending configuration write, the state it will leave)
        self.future: dict[int, tuple[int, ColourRoute]] = {}

    @property
    def name(self) -> str:
        return pe_name(self.xy)

    def write_config(self, t: int, colour: int, change: Callable[[ColourRoute], None]) -> None:
        """Schedule a configuration write by the CE at cycle ``t``: ``change`` mutates the
        colour's route then. The state it will leave is kept as ``future`` until it lands, so
        express streams can plan with the configuration already on its way."""
        ready = self.future.get(colour)
        if ready is None:
            base = self.routes[colour]
            # (the positions shared: a route's positions are replaced, never changed in place)
            predicted = ColourRoute(base.positions, base.pos, base.teardown, base.ring)
        else:
            # The state the writes already on their way will leave: this write changes it in
            # place (it is read only inside the express planning of one cycle, never kept).
            predicted = ready[1]
        change(predicted)
        self.future[colour] = (t, predicted)
        # (``at``, inlined: three writes per collective on every PE; the caller,
        # TaskContext._write, lands it after the current cycle)
        sched = self.engine.sched
        (sched.due.get(t) or sched.due_slot(t)).append((self._land, (colour, change, t)))

    def write_route(
        self, colour: int, t1: int, t2: int, t3: int, positions: tuple[Position, ...]
    ) -> None:
        """Post a collective's set-up of ``colour`` for a new route: return the switch to its
        first position at cycle ``t1``, set ``positions`` at ``t2`` and leave teardown at
        ``t3`` (each after the current cycle; ``t1 <= t2 <= t3``). The same as three
        :meth:`write_config` calls (``ColourRoute.reset``, a setter of ``positions``, one that
        clears teardown): the same state left as ``future``, the same landings appended to the
        same cycles' due lists in the same order, in one call, and each landing
        (:meth:`_land_route`) makes its change without a callable."""
        future = self.future
        ready = future.get(colour)
        if ready is None:
            predicted = ColourRoute(positions, 0, False, self.routes[colour].ring)
        else:  # (the three changes, made in place as write_config's would be)
            predicted = ready[1]
            predicted.positions = positions
            predicted.pos = 0
            predicted.teardown = False
        future[colour] = (t3, predicted)
        sched = self.engine.sched
        due = sched.due
        land = self._land_route
        (due.get(t1) or sched.due_slot(t1)).append((land, (colour, 0, t1)))
        (due.get(t2) or sched.due_slot(t2)).append((land, (colour, positions, t2)))
        (due.get(t3) or sched.due_slot(t3)).append((land, (colour, 1, t3)))

    def _land_route(self, colour: int, what: Any, t: int) -> None:
        """One of :meth:`write_route`'s writes lands: ``what`` is 0 (the switch to its first
        position), a positions tuple (set, at the first position) or 1 (leave teardown); then
        as :meth:`_land`."""
        route = self.routes[colour]
        if what.__class__ is tuple:
            route.positions = what
            route.pos = 0
        elif what:
            route.teardown = False
        else:
            route.pos = 0
        self._landed(colour, route, t)

    def _land(self, colour: int, change: Callable[[ColourRoute], None], t: int) -> None:
        """A configuration write of cycle ``t`` lands (see :meth:`write_config`)."""
        route = self.routes[colour]
        change(route)
        self._landed(colour, route, t)

    def _landed(self, colour: int, route: ColourRoute, t: int) -> None:
        """What every landing write does once ``route`` has its change (:meth:`_land`,
        :meth:`_land_route`)."""
        self.blocked = -1
        pending = self.future.get(colour)
        if pending is not None and pending[0] <= t:
            del self.future[colour]
        if self.express_until >= t and not self.express_stream.written_is_planned(self, colour, t):
            # A write the express stream passing here did not plan with: it goes on wavelet by
            # wavelet from this cycle (fabric/express.py).
            self.express_stream.hand_back(t)
        if self.buffered:  # (with nothing buffered, nothing is held, pending or to send)
            if not route.teardown:
                self._check_held(colour, route)
            self.pending = {k: v for k, v in self.pending.items() if k[1] != colour}
        if self.engine.lockstep is not None:
            self.engine.lockstep.route_written(self, colour)
        if self.buffered:
            self.engine.activate_router(self)

    def _check_held(self, colour: int, route: ColourRoute) -> None:
        """Wavelets held while the colour was in teardown must come from an input it accepts
        now that it is out."""
        for (port, c), buf in self.bufs.items():
            if c == colour and buf and port not in route.current.rx:
                raise RouteError(
                    f"colour {colour}: {self.name} left teardown holding {len(buf)} wavelet(s) "
                    f"from {port.name}, which it does not accept ({route.current.describe()})"
                )

    def route_at(self, colour: int) -> tuple[int, ColourRoute | None]:
        """(cycle from which it holds, the colour's route once pending writes have landed)."""
        pending = self.future.get(colour)
        if pending is not None:
            return pending
        return -1, self.routes.get(colour)

    def credit(self, port: Dir, colour: int) -> int:
        key = (port, colour)
        c = self.credits.get(key)
        if c is None:
            # The port's initial credits: the CE's input queue room down the ramp, a
            # neighbour's buffer otherwise (first looked at when the port first sends the colour)
            if port is RAMP:
                c = self.ce.down_credits(colour)
            else:
                c = self.engine.cfg.router_buffer_wavelets
            self.credits[key] = c
        return c

    def hold_first(self, port: Dir, colour: int, wavelets: list[Wavelet]) -> None:
        """Put ``wavelets`` at the head of the (port, colour) buffer: a hand-back's, which
        arrived before anything held behind its stream (no activation, no counter: the caller
        wakes the router)."""
        key = (port, colour)
        buf = self.bufs.get(key)
        if buf is None:
            buf = self.bufs[key] = []
        buf[0:0] = wavelets
        self.buffered += len(wavelets)
        self.blocked = -1

    def hold_last(self, port: Dir, colour: int, w: Wavelet) -> None:
        """Put ``w`` at the tail of the (port, colour) buffer: a wavelet a hand-back held behind
        its stream (no route check, activation or counter: the caller wakes the router)."""
        key = (port, colour)
        buf = self.bufs.get(key)
        if buf is None:
            buf = self.bufs[key] = []
        buf.append(w)
        self.buffered += 1
        self.blocked = -1

    def receive(self, port: Dir, colour: int, w: Wavelet) -> None:
        engine = self.engine
        until = self.express_until
        if until >= 0:
            now = engine.env._now // engine.sched.period  # (now_cycle, inlined)
            if until < now:
                # The stream has passed: forget it (every reader compares ``>= now``, and now
                # only grows), so later arrivals skip this check.
                self.express_until = -1
            elif (
                colour == self.express_colour or colour == self.express_colour_in
            ) and self.express_stream.hold_behind(self, port, w, colour):
                # Behind the stream on its own colour (e.g. the TEARDOWN sent while the stream
                # was held at a posted teardown exit, or behind a relay chain's data): it
                # queues after the stream's last wavelet there.
                return
            elif colour != self.express_colour and colour != self.express_colour_in:
                route = self.routes.get(colour)
                busy = self.express_busy
                if route is not None and any(p in busy for p in route.positions[route.pos].tx):
                    # The wavelet needs a port of the express stream passing here (a route
                    # written inside its window): the two arbitrate on the wavelet path.
                    self.express_stream.hand_back(now)
        route = self.routes.get(colour)
        if route is None or (port not in route.positions[route.pos].rx and not route.teardown):
            # (In teardown the colour holds whatever arrives; it must be accepted on exit.)
            have = route.current.describe() if route else "no route"
            raise RouteError(
                f"colour {colour}: a wavelet reached {self.name} from {port.name}, which it does "
                f"not accept ({have})"
            )
        # (hold_last's body, inlined: every wavelet of the wavelet path lands here)
        key = (port, colour)
        buf = self.bufs.get(key)
        if buf is None:
            buf = self.bufs[key] = []
        buf.append(w)
        self.buffered += 1
        self.blocked = -1
        if engine.detail:
            engine.counter(self.path, f"buffer c{colour} {port.name}", len(buf))
        self.active[self.index] = self

    def step(self, t: int) -> bool:
        """Send what this cycle allows; return True while buffers still hold wavelets."""
        engine = self.engine
        blocked = self.blocked
        if blocked >= 0:
            if self.epoch == engine.epoch:
                # Known to send nothing (every head waits on a credit that has not come, and
                # nothing has changed since): what the loop below would count, without it.
                self.stall_cycles += blocked
                return False
            self.blocked = -1
        detail = engine.detail
        stalls = self.stall_cycles
        waits: list[tuple[Dir, int]] | None = None  # the credits blocked heads wait on
        consumed = False  # a filtered-out head consumed here (the next one is not looked at)
        # The candidates of each port: most steps have one, kept in ``first_*`` without a
        # dict; ``wanted`` (port -> one key, or a list once there are two) from the second on.
        wanted: dict[Dir, Any] | None = None
        # (first_key None: no candidate yet; the other three are set with it)
        first_key: Any = None
        first_port: Dir
        first_ck: Any  # the first candidate's (port, colour): its credit's key
        first_pend: Any
        first_buf: list[Wavelet]  # (its buffer)
        routes = self.routes
        pending = self.pending
        held = self.credits
        filters = self.filters
        for key, buf in self.bufs.items():
            if not buf:
                continue
            colour = key[1]
            route = routes[colour]
            if route.teardown:
                continue
            pend = pending.get(key)
            if pend is None:
                tx = route.positions[route.pos].tx
                filt = filters.get(colour) if filters else None
                if len(tx) == 1 and filt is None:
                    # One port and no filter (most hops): the route's own tuple, never changed
                    # in place; the wavelet is done once that port has sent it. Kept only if
                    # a control wavelet may move the switch before it is sent (a route write
                    # clears what is kept anyway); otherwise the route gives the same again.
                    pend = tx
                    if len(route.positions) > 1:
                        pending[key] = tx
                else:
                    pend = pending[key] = list(tx)
                    if not pend:
                        raise RouteError(
                            f"colour {colour}: {self.name} accepts from {key[0].name} but has no "
                            f"tx ({route.current.describe()}); the wavelet has nowhere to go"
                        )
                    if (filt is not None and RAMP in pend and not buf[0].ctrl
                            and not filt.admit()):  # fmt: skip
                        pend.remove(RAMP)
                        if not pend:  # filtered out and going nowhere else: consumed here
                            self._done(t, key)
                            consumed = True
                            continue
            for port in pend:
                ck = (port, colour)
                c = held.get(ck)
                if c is None:
                    c = self.credit(port, colour)
                if c > 0:
                    if first_key is None:
                        first_port, first_key, first_pend, first_ck = port, key, pend, ck
                        first_buf = buf
                        continue
                    if wanted is None:
                        wanted = {first_port: first_key}
                    keys = wanted.get(port)
                    if keys is None:
                        wanted[port] = key
                    elif keys.__class__ is list:
                        keys.append(key)
                    else:
                        wanted[port] = [keys, key]
                else:
                    self.stall_cycles += 1
                    if waits is None:
                        waits = [ck]
                    else:
                        waits.append(ck)
                    if detail and key not in self.stalled:  # (read only by detail traces)
                        self.stalled[key] = (t, port)
        if first_key is None:
            # Empty, or everything blocked: a credit, an arrival or a teardown exit wakes it.
            if not consumed and not detail and engine.lockstep is None:
                self._known_blocked(stalls, waits)
            return False
        if wanted is None and not detail:
            # One send (most steps): the loop below for its one port, without the loop's
            # machinery; the same due actions in the same lists, in the same order.
            port, key, buf = first_port, first_key, first_buf
            colour = key[1]
            self.rr[port] = colour
            w = buf[0]
            held[first_ck] -= 1
            sched = engine.sched
            due = sched.due
            if port is RAMP:
                td = t + engine.ramp_latency
                (due.get(td) or sched.due_slot(td)).append((self.ce.fabric_deliver, (colour, w)))
            else:
                td = t + engine.hop_latency
                (due.get(td) or sched.due_slot(td)).append(
                    (self.nbr[port].receive, (OPPOSITE[port], colour, w))  # type: ignore[union-attr]
                )
            if first_pend.__class__ is list:
                first_pend.remove(port)
                if first_pend:
                    # The head's other ports, as every other head's, were counted blocked
                    if not consumed and engine.lockstep is None:
                        self._known_blocked(stalls, waits)
                    return True
            if w.ctrl:
                self._done(t, key)
                return self.buffered > 0
            if first_pend.__class__ is list or key in pending:
                del pending[key]
            del buf[0]
            self.buffered -= 1
            self.forwarded += 1
            src_port = key[0]
            if src_port is RAMP:
                td = t + engine.ramp_credit_latency
                (due.get(td) or sched.due_slot(td)).append((self.ce.up_credit, (colour,)))
            else:
                td = t + engine.hop_credit_latency
                (due.get(td) or sched.due_slot(td)).append(
                    (self.nbr[src_port].return_credit, (OPPOSITE[src_port], colour))  # type: ignore[union-attr]
                )
            if buf:  # a new head: first looked at in the next step
                return True
            if self.buffered:
                # Every other head was counted blocked: the next step sends nothing unless a
                # credit it waits on, an arrival or a route change comes first.
                if not consumed and engine.lockstep is None:
                    self._known_blocked(stalls, waits)
                return True
            return False
        # Each port sends its pick (``_send``, inlined: this is the engine's hottest loop).
        # The hops, ramp deliveries and credits go straight into their cycle's list of due
        # actions (``later``, inlined through ``due_slot``: the same list, the same order).
        bufs, rr, sched = self.bufs, self.rr, engine.sched
        due, slot_of = sched.due, sched.due_slot
        hops = downs = hop_credits = ramp_credits = None
        for port, keys in wanted.items() if wanted is not None else ((first_port, first_key),):
            key = keys if keys.__class__ is tuple else engine.arbitrate(self, port, keys)
            colour = key[1]
            rr[port] = colour
            w = bufs[key][0]
            held[(port, colour)] -= 1
            if detail:
                self._trace_send(t, key, port, w)
            if port is RAMP:
                if downs is None:
                    downs = due.get(t + engine.ramp_latency) or slot_of(t + engine.ramp_latency)
                downs.append((self.ce.fabric_deliver, (colour, w)))
            else:
                if hops is None:
                    hops = due.get(t + engine.hop_latency) or slot_of(t + engine.hop_latency)
                hops.append((self.nbr[port].receive, (OPPOSITE[port], colour, w)))
            # (the head's ports still to go: a list is changed in place, a tuple is this port)
            pend = first_pend if wanted is None else pending.get(key)
            if pend.__class__ is list:
                pend.remove(port)
                if pend:
                    continue
            # ``_done``, inlined for data wavelets (once per wavelet and hop)
            if detail or w.ctrl:
                self._done(t, key)
                continue
            # (a list is always kept; a unicast head's port only where the switch may move)
            if pend.__class__ is list or key in pending:
                del pending[key]
            del bufs[key][0]
            self.buffered -= 1
            self.forwarded += 1
            src_port = key[0]
            if src_port is RAMP:
                if ramp_credits is None:
                    ramp_credits = due.get(t + engine.ramp_credit_latency) or slot_of(
                        t + engine.ramp_credit_latency
                    )
                ramp_credits.append((self.ce.up_credit, (colour,)))
            else:
                if hop_credits is None:
                    hop_credits = due.get(t + engine.hop_credit_latency) or slot_of(
                        t + engine.hop_credit_latency
                    )
                hop_credits.append((self.nbr[src_port].return_credit, (OPPOSITE[src_port], colour)))
        return self.buffered > 0

    def _known_blocked(self, stalls: int, waits: list[tuple[Dir, int]] | None) -> None:
        """The step ending now leaves every buffered head looked at and waiting on a credit
        (``waits``; ``stall_cycles`` was ``stalls`` before the step): until one of those
        credits, an arrival, a route change or a fast engine's move (the engine's ``epoch``)
        comes, a step would count the same stalls and send nothing, so it only counts them.
        Not with detail traces (their stall slices start at the first blocked step) nor the
        lock-step phase (it edits router state itself)."""
        self.blocked = self.stall_cycles - stalls
        self.waits = waits if waits is not None else ()
        self.epoch = self.engine.epoch

    def _done(self, t: int, key: tuple[Dir, int]) -> None:
        """The head of ``key``'s buffer has gone out of every port it had to: free its slot."""
        engine = self.engine
        colour = key[1]
        buf = self.bufs[key]
        self.pending.pop(key, None)  # (a unicast head's port is not kept: see step)
        w = buf.pop(0)
        self.buffered -= 1
        self.forwarded += 1
        if engine.detail:
            engine.counter(self.path, f"buffer c{colour} {key[0].name}", len(buf))
        src_port = key[0]
        # (``later``, inlined as in step: ``t`` is the current cycle, the step's)
        sched = engine.sched
        if src_port is RAMP:
            td = t + engine.ramp_credit_latency
            (sched.due.get(td) or sched.due_slot(td)).append((self.ce.up_credit, (colour,)))
        else:
            up = self.nbr[src_port]
            td = t + engine.hop_credit_latency
            (sched.due.get(td) or sched.due_slot(td)).append(
                (up.return_credit, (OPPOSITE[src_port], colour))  # type: ignore[union-attr]
            )
        if w.ctrl:
            self.apply_commands(colour, w)

    def _trace_send(self, t: int, key: tuple[Dir, int], port: Dir, w: Wavelet) -> None:
        engine = self.engine
        colour = key[1]
        stall = self.stalled.pop(key, None)
        if stall is not None:
            since, blocked = stall
            cause = (
                "no ramp credit: the CE's input queue is full"
                if blocked is Dir.RAMP
                else f"no credit: {blocked.name} neighbour's buffer is full"
            )
            engine.trace(self.path, "stall", f"c{colour} {blocked.name}", since, t - since,
                         colour=colour, port=blocked.name, cause=cause)  # fmt: skip
        engine.trace(self.path, "wavelet", "ctrl" if w.ctrl else "data", t, 1,
                     colour=colour, port=port.name, came_from=key[0].name)  # fmt: skip

    def return_credit(self, port: Dir, colour: int) -> None:
        key = (port, colour)
        self.credits[key] += 1
        if self.buffered:  # (stepped with nothing buffered, a router does nothing)
            if self.blocked >= 0 and key in self.waits:
                self.blocked = -1  # a blocked head may go now
            self.active[self.index] = self

    def ramp_credit(self, colour: int) -> None:
        key = (RAMP, colour)
        self.credits[key] += 1
        if self.buffered:
            if self.blocked >= 0 and key in self.waits:
                self.blocked = -1
            self.active[self.index] = self

    def apply_commands(self, colour: int, w: Wavelet) -> None:
        """The control wavelet ``w`` of ``colour`` has left this router: its commands take
        effect (switch moves, teardown; a teardown is signalled to the CE a ramp latency later).
        Part of the interface a fast engine uses."""
        route = self.routes[colour]
        self.blocked = -1
        for cmd in w.commands:  # (the members by module names: see _TEARDOWN)
            if cmd is _TEARDOWN:  # (first: the command behind every collective)
                route.teardown = True
                # (``later(ramp_latency, ...)``, inlined as in step: the same list of due actions)
                engine = self.engine
                sched = engine.sched
                td = engine.env._now // sched.period + engine.ramp_latency
                (sched.due.get(td) or sched.due_slot(td)).append(
                    (self.ce.teardown_signal, (colour, w.flow))
                )
            elif cmd is _ADVANCE:
                route.advance()
            elif cmd is _RESET:
                route.reset()

    def describe(self) -> str:
        if not any(self.bufs.values()):  # (every PE is asked at a run's end: most hold nothing)
            return ""
        held = [
            f"colour {c} from {p.name}: {len(b)} wavelet(s)"
            + (" [teardown]" if self.routes[c].teardown else "")
            for (p, c), b in sorted(self.bufs.items())
            if b
        ]
        return "; ".join(held)


class FabricEngine(Generic[EndpointT, OpT]):
    """Routers, links and ramps of one mesh, stepped by ``sched`` (groups ``routers``, then
    ``endpoints``) in the cycles where something happens. ``EndpointT`` is what sits at the
    end of the ramps and ``OpT`` its operations (types only: see :class:`FastPhase`)."""

    def __init__(self, sched: CycleScheduler, cfg: FabricConfig, width: int, height: int) -> None:
        self.sched = sched
        self.sim = sched.sim
        self.env = sched.env
        self.cfg = cfg
        self.width = width
        self.height = height
        self.hop_latency = cfg.hop_latency_cycles
        self.hop_credit_latency = cfg.hop_credit_latency_cycles
        self.ramp_latency = cfg.ramp_latency_cycles
        self.ramp_credit_latency = cfg.ramp_credit_latency_cycles
        self.routers_group = sched.group("routers")
        self.endpoints = sched.group("endpoints")
        self.routers: list[Router] = []
        self.by_xy: dict[tuple[int, int], Router] = {}
        # The scheduler's verbs, bound once: they are called for every hop and credit.
        self.later = sched.later
        self.at = sched.at
        self.at_or_now = sched.at_or_now
        self.schedules = SourceSchedules()  # express streams' schedules, per parameter set
        self.fast = False  # express streams on (the 'fast' fidelity)
        self.detail = False  # trace wavelets, stalls and buffer occupancy (level 'detail')
        # With ``detail``: the paths whose detail events are kept (None: all; a trace region)
        self.detail_paths: frozenset[str] | None = None
        # Bumped whenever an express stream or a relay chain commits or hands back (the
        # counters below): the only code beside a router's own methods that edits its buffers,
        # credits and pending ports, so a router's known-blocked step (Router.step) holds
        # only within one epoch.
        self.epoch = 0
        self._moves = [0, 0, 0, 0, 0]
        self.express_wavelets = 0
        self.relay_elements = 0  # elements (one per position and element) relay chains moved
        self.fast_conflicts = 0
        # The express streams' completions (fabric.express.Completions), made at the first commit
        self.express_done: Any = None
        # A fast engine that moves some colours' broadcasts in lock step (wafer/lockstep.py), set
        # by the wafer when its fidelity asks for one; it takes operations as they begin and is
        # told of route writes and of the CEs' main threads.
        self.lockstep: FastPhase[EndpointT, OpT] | None = None

    # Express streams taken, express streams handed back to the wavelet path, relay chains moved
    # at once (fabric.relay), relay chains handed back, tasks' holds a relay chain took into its
    # schedule (fabric.relay.RelayStream.task_holds): each a count that bumps ``epoch``.
    def _count(i: int) -> property:  # type: ignore[misc]
        def get(self: FabricEngine) -> int:
            return self._moves[i]

        def put(self: FabricEngine, n: int) -> None:
            self._moves[i] = n
            self.epoch += 1

        return property(get, put)

    express_streams = _count(0)
    express_handbacks = _count(1)
    relay_streams = _count(2)
    relay_handbacks = _count(3)
    relay_holds = _count(4)
    del _count

    def add_router(self, xy: tuple[int, int]) -> Router:
        r = Router(self, xy, len(self.routers))
        self.routers.append(r)
        self.by_xy[xy] = r
        return r

    def link_neighbours(self) -> None:
        for r in self.routers:
            for d, (dx, dy) in STEP.items():
                r.nbr[d] = self.by_xy.get((r.xy[0] + dx, r.xy[1] + dy))

    def arbitrate(self, router: Router, port: Dir, keys: list[tuple[Dir, int]]) -> tuple[Dir, int]:
        if self.cfg.arbitration == "fixed":
            return min(keys, key=lambda k: (k[1], k[0]))
        last = router.rr[port]
        return min(keys, key=lambda k: ((k[1] - last - 1) % 32, k[0]))

    # -- time and tracing ----------------------------------------------------------------------
    def now_cycle(self) -> int:
        return self.env._now // self.sched.period

    @property
    def cycles_stepped(self) -> int:
        return self.sched.cycles_stepped

    def trace(self, path: str, category: str, name: str, t: int, dur: int, **args: Any) -> None:
        """A slice of ``dur`` cycles from cycle ``t`` on component ``path``."""
        if self.detail_paths is not None and path not in self.detail_paths:
            return
        p = self.sched.period
        self.sim.tracer.emit(
            t * p, dur * p, t, dur, self.sched.domain.name, path, category, name, args=args
        )

    def counter(self, path: str, name: str, value: float) -> None:
        """A counter sample at the current cycle (buffer and queue occupancy)."""
        if self.detail_paths is not None and path not in self.detail_paths:
            return
        now = self.env._now
        self.sim.tracer.emit(
            now, 0, now // self.sched.period, 0, self.sched.domain.name, path, "queue", name,
            "counter", float(value),
        )  # fmt: skip

    # Activation is only ever called while a step is delivering this cycle's due work (every
    # outside interaction arrives through ``later``/``at``), so the current step steps the part.
    def activate_router(self, r: Router) -> None:
        self.routers_group.active[r.index] = r

    def activate_endpoint(self, part: Any) -> None:
        self.endpoints.active[part.index] = part

    def describe_held(self) -> list[str]:
        return [f"{r.name}/router: {r.describe()}" for r in self.routers if r.describe()]
