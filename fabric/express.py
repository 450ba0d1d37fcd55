"""Express streams: the fast fidelity's way of moving a whole stream of wavelets at once.

When a send operation begins, the engine tries to commit it as an *express stream*: it computes,
with the same rules the wavelet-exact engine applies cycle by cycle, the cycle at which every
wavelet leaves the sending CE and every router on the colour's multicast tree, and then schedules
only what others can observe: the completion of the send and of each receive (with the data
written), and the few credits still travelling back when each credit loop's last wavelet has
passed. No event is spent per wavelet or per hop.

The schedule is exact because it is only used when nothing else can interfere:

- the sending CE runs no other microthread, and its ramp credits for the colour are all home;
- every router of the tree is idle (no wavelet buffered, no credit of the tree's ports away, not
  inside another express window, the colour not in teardown, no wavelet filter on it), and the
  root does not route the stream back to itself;
- no other colour configured on a router of the tree (in any of its switch positions, or in a
  configuration write on its way) sends out of a port the stream uses: its traffic could need
  that port inside the window, where the reference would arbitrate between the two;
- every receiving CE runs exactly one microthread, the plain fabric -> memory move of this
  stream's length, registered to begin no later than the first wavelet arrives, with nothing
  moved yet and an empty queue;
- the receivers' down-ramp credit loops keep up with the sender's pattern (checked on the whole
  schedule with numpy), so no router ever waits.

The stream's wavelet times follow from the mechanisms: the sender issues up to its SIMD width of
wavelets per cycle while it holds up-ramp credits; the root router forwards one wavelet per cycle
and port once it has arrived (``ramp_latency_cycles`` later) and the next router holds a free
slot; a credit comes home ``ramp_credit_latency_cycles`` (or ``hop_credit_latency_cycles``) after
its wavelet leaves (or is consumed). Downstream routers forward each wavelet in the cycle it
arrives, so a receiver at depth d sees the root router's pattern shifted by d hops.

The compute engines at both ends take part through two small protocols defined here (the fabric
imports nothing from ``pe/``): the sending CE, having checked its own side (a plain memory ->
fabric move, no other microthread, its ramp credits for the colour all home), offers an
:class:`ExpressSend`; each receiving CE answers :meth:`ExpressEndpoint.express_receive` with an
:class:`ExpressReceive` when its side qualifies; on commit each end is told its schedule
(:meth:`ExpressEndpoint.commit_express_send` / :meth:`ExpressEndpoint.commit_express_receive`).

Anything else (relays, data tasks, several streams sharing links or CEs) runs wavelet by wavelet.

**Hand-back.** Should something the commit did not account for reach the stream inside its
window, the stream hands its remaining work back to the wavelet path at that cycle
(:meth:`ExpressStream.hand_back`), as the lock-step phase does (``wafer/lockstep.py``):

- an operation that begins on one of its CEs and outranks the stream's microthread
  (priority, then microthread id), or a task dispatched on one of its CEs while the stream's
  microthread ranks below the main thread (the CEs call it);
- a configuration write the commit did not plan with landing on a router of its tree, and a
  wavelet of another colour that needs one of the stream's ports (the routers call it; a
  committed stream owns its ports, so only such a write can bring one).

From the schedule it writes into the routers and CEs exactly what the reference engine would
hold at that cycle: wavelets buffered at routers and queued at receivers, each operation's
progress (and a receive's data so far), credits home, and what is on its way (wavelets on a
hop or a ramp, credits coming back) as the engine's own due actions; the events the commit
scheduled that are still to come (tail credits, completions) are taken back. A hand-back asked
for during a cycle's due actions is done once they have all run, first in that cycle's steps
(:class:`Completions`), so that every event of the cycle has landed. The engine then goes on as
if it had moved the stream itself, so the answer never depends on whether, or where, a stream
was express (``tests/test_conformance.py``).
An operation the stream outranks issues only in the cycles the stream leaves free, as it would,
and needs no hand-back; a task under a stream that outranks the main thread loses the cycles the
stream issues in (``ComputeEngine._express_steals``). ``fast_conflicts`` counts what could still
differ; nothing increments it now (it stays in the run's metrics as a check).

The commit sets the round-robin pointers of the stream's ports to its colour (the last to use
them in its window, as in the reference; a hand-back before the stream's first send there puts
them back). A detail trace's stream slice is emitted at the commit and covers the planned
window even when the stream is handed back later.

The completions run in the ``routers`` step group (:class:`Completions`, first), after every due
action of their cycle, as the reference engine finishes an operation in its CE's step: an
operation that begins in that cycle can still take the issue slot of the stream's last element.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from fabric.endpoints import RampEndpoint
from fabric.engine import OPPOSITE, Router
from fabric.routes import Dir
from fabric.wavelet import Wavelet

RAMP = Dir.RAMP

if TYPE_CHECKING:
    from fabric.engine import FabricEngine


@dataclasses.dataclass(frozen=True, slots=True)
class ExpressSend:
    """A send a compute engine offers as an express stream: ``length`` wavelets of ``values``
    on ``colour``, up to ``width`` per issue, from the microthread with arbitration ``key``
    (priority, microthread id: lower wins). ``op`` is the engine's own handle, passed back."""

    op: Any
    colour: int
    length: int
    width: int
    values: np.ndarray
    key: tuple[int, int]
    flow: int | None = None  # the trace flow its wavelets carry (the send's)


class ExpressReceive(NamedTuple):
    """A receiving compute engine's matching operation: a plain fabric -> memory move of the
    stream's length, registered to begin at cycle ``begin_at``, taking ``down_credits`` ramp
    slots, on the microthread with arbitration ``key``. ``op`` is the engine's own handle.
    (A named tuple: one is made per receiver of every stream, and a frozen dataclass costs
    several times as much to build.)"""

    op: Any
    begin_at: int
    down_credits: int
    key: tuple[int, int]


class ExpressEndpoint(RampEndpoint, Protocol):
    """A ramp endpoint that can take part in express streams."""

    def express_receive(self, colour: int, length: int, now: int) -> ExpressReceive | None:
        """The receive this endpoint would run for a stream of ``length`` wavelets on
        ``colour`` starting at cycle ``now``, if it can be moved as an express stream: it is
        the only operation on the engine (nothing moved yet, its queue empty, no express
        stream of its own running). None otherwise."""
        ...

    def commit_express_send(
        self, send: ExpressSend, issues: np.ndarray, credits_away: int, stream: ExpressStream
    ) -> None:
        """The send is an express stream: wavelet k issues at cycle ``issues[k]``;
        ``credits_away`` ramp credits are still away after the last issue (the stream brings
        them home through the endpoint's ``up_credit``). The endpoint yields its issue slots to
        the stream in those cycles; the stream completes the operation (``complete_express``)
        at ``issues[-1]``."""
        ...

    def commit_express_receive(
        self, recv: ExpressReceive, pops: np.ndarray, shift: int, stream: ExpressStream
    ) -> None:
        """The receive is part of the express stream: wavelet k comes down the ramp and is
        popped at cycle ``pops[k] + shift``; at the last one the stream completes the operation
        with its data written (``complete_express``)."""
        ...

    def complete_express(self, op: Any, values: np.ndarray | None) -> None:
        """The end of an express stream for ``op``: a send, or a receive given its data."""
        ...

    def express_hand_back(
        self, stream: ExpressStream, op: Any, done: int, issues: int, t: int,
        values: np.ndarray | None, up_adjust: int, queued: list[Wavelet],
    ) -> None:  # fmt: skip
        """``stream`` hands its work on this endpoint back to the wavelet path from cycle
        ``t``: ``op`` has moved ``done`` elements in ``issues`` issue cycles (a receive: the
        first ``done`` of ``values`` written), ``queued`` wavelets wait in its input queue, and
        its up-ramp credits for the colour change by ``up_adjust``. An operation with
        ``done`` short of its length runs on as a microthread from cycle ``t``; the endpoint
        gives back the issue cycles it had yielded to the stream from ``t`` on."""
        ...


class _Tree(NamedTuple):
    """The colour's multicast tree from its root, breadth first, as flat lists: each router,
    its depth, the ports it sends the stream out of and the port the stream comes in through.
    (Flat lists, not a tuple per router: a tree is walked at every stream's commit.)"""

    routers: list[Router]
    depths: list[int]
    txs: list[tuple[Dir, ...]]
    ins: list[Dir]


def _tree(root: Router, colour: int, first_arrival: int, hop: int, now: int) -> _Tree | None:
    """Routers of the colour's multicast tree from ``root`` (see :class:`_Tree`), or None if
    it is not one an express stream can take: a router not idle (``_router_idle``: inside an
    express window, or holding wavelets) or filtering the colour, a route not ready.

    A router's route is the one its pending configuration writes will leave, provided they land
    no later than the stream's first wavelet reaches it (then they cannot affect the stream).
    """
    routers: list[Router] = []
    depths: list[int] = []
    txs: list[tuple[Dir, ...]] = []
    ins: list[Dir] = []
    ready, route = root.route_at(colour)
    todo = [(root, 0, ready, route, RAMP)]  # (breadth first: read in order as it grows)
    seen = {root.index}
    for r, depth, ready, route, in_port in todo:
        if route is None or route.teardown or ready > first_arrival + depth * hop:
            return None
        if r.express_until >= now or r.buffered or colour in r.filters:  # (_router_idle)
            return None
        tx = route.positions[route.pos].tx
        routers.append(r)
        depths.append(depth)
        txs.append(tx)
        ins.append(in_port)
        nbrs = r.nbr
        for port in tx:
            if port is RAMP:
                continue
            nbr = nbrs.get(port)
            if not isinstance(nbr, Router) or nbr.index in seen:
                return None  # off the mesh (an edge port) or a loop: not for an express stream
            pending = nbr.future.get(colour) if nbr.future else None  # (route_at, inlined)
            if pending is not None:
                nready, nroute = pending
            else:
                nready, nroute = -1, nbr.routes.get(colour)
            back = OPPOSITE[port]
            if nroute is None or back not in nroute.positions[nroute.pos].rx:
                return None
            seen.add(nbr.index)
            todo.append((nbr, depth + 1, nready, nroute, back))
    return _Tree(routers, depths, txs, ins)


def _router_idle(r: Router, now: int) -> bool:
    return r.express_until < now and not r.buffered


def _outstanding(tail: list[int], shift: int, after: int, n_credits: int) -> list[int]:
    """Credit-return cycles (``tail`` + ``shift``) still in the future at cycle ``after``.
    Returns increase with the wavelet index and at most ``n_credits`` can be away, so only the
    last ``credits`` wavelets of the stream (``tail``) are looked at."""
    return [t + shift for t in tail[-n_credits:] if t + shift > after]


def try_express(engine: FabricEngine, root: Router, send: ExpressSend, now: int) -> bool:
    """Commit ``send`` (beginning at cycle ``now`` on the compute engine at ``root``'s ramp,
    whose own side qualifies) as an express stream if the fabric and every receiver allow it.
    See the module docstring."""
    cfg = engine.cfg
    colour = send.colour
    ready, route = root.route_at(colour)
    if route is None or RAMP not in route.current.rx or RAMP in route.current.tx:
        return False
    n = send.length
    buf = cfg.router_buffer_wavelets
    hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
    lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
    # A configuration write still on its way to the root (a posted write leaving teardown)
    # holds the stream there until it lands; with no write pending the root holds nothing.
    hold = max(ready - now, 0)
    s, fa = engine.schedules.get(n, now, send.width, cfg.ramp_credits, lr, lc, buf, hop, lch, hold)
    first = int(fa[0])
    tree = _tree(root, colour, first, hop, now)
    if tree is None:
        return False
    receivers: list[tuple[Router, int, ExpressReceive]] = []
    for r, depth, tx in zip(tree.routers, tree.depths, tree.txs, strict=True):
        # Whether another colour configured on ``r`` (in any of its switch positions, now or
        # once its pending configuration writes land) may send out of a port ``tx`` the stream
        # uses: its wavelets could then need that port in a cycle the stream holds it, which
        # the schedule does not see, so the stream is not committed (it runs wavelet by
        # wavelet). (Plain loops, written here: a call, or a generator per route, cost more
        # than the test, at every router of every tree.)
        routes, future = r.routes, r.future
        if len(routes) != 1 or future:
            for c, other in routes.items():
                if c != colour:
                    for p in other.positions:
                        for d in p.tx:
                            if d in tx:
                                return False
            if future:
                for c, (_, other) in future.items():
                    if c != colour:
                        for p in other.positions:
                            for d in p.tx:
                                if d in tx:
                                    return False
        held_by = r.credits
        for port in tx:
            if port is RAMP:
                rce: ExpressEndpoint = r.ce  # type: ignore[assignment]
                recv = rce.express_receive(colour, n, now)
                if recv is None:
                    return False
                held = held_by.get((RAMP, colour))
                if held is None:
                    held = r.credit(RAMP, colour)
                if held != recv.down_credits:
                    return False
                receivers.append((r, depth, recv))
            else:
                held = held_by.get((port, colour))
                if held is None:
                    held = r.credit(port, colour)
                if held != buf:
                    return False
    keeps_up: dict[int, bool] = {}
    for _r, depth, recv in receivers:
        if recv.begin_at > first + depth * hop + lr:
            return False
        cd = recv.down_credits
        ok = keeps_up.get(cd)
        if ok is None:
            ok = keeps_up[cd] = n <= cd or not np.any(fa[cd:] - fa[:-cd] < lr + lc)
        if not ok:
            return False
    _commit(engine, root, send, tree, receivers, s, fa)
    return True


# ``Router.express_busy`` of a stream's routers (read for membership only): one shared dict
# per tuple of tx ports, not one per router and stream.
_BUSY: dict[tuple[Dir, ...], dict[Dir, bool]] = {}


def _key(index: int, small: int) -> int:
    """A router index (from -1) and a port or colour (below 64) packed in one int."""
    return (index + 1) * 64 + small


class ExpressStream:
    """A committed express stream: its schedule, and what it needs to hand its remaining work
    back to the wavelet path (:meth:`hand_back`).

    The events the commit schedules are the engine's own due actions (the credits still away
    after a part's last wavelet: the sender's one action each, the routers' one action per
    cycle, :meth:`credits_home`) or the :class:`Completions`' (the completions); the stream
    keeps when they are (``tails``, ``credit_due``; a completion is at its part's last cycle)
    so that a hand-back can take back those still to come, and then schedules exactly what is
    on its way at that cycle. (Few objects per stream: a stream is made per broadcast, and
    collections over many small containers cost more than the rest of the commit; the tail
    credits hold one tuple per router port, shared by its cycles, where their due actions held
    two per credit.)
    """

    __slots__ = (
        "bases", "behind", "colour", "credit_due", "depths", "engine", "fa", "flow", "ins",
        "live", "rops", "routers", "rr", "s", "send", "tails", "txs", "written",
    )  # fmt: skip

    def __init__(
        self,
        engine: FabricEngine,
        send: ExpressSend,
        tree: _Tree,
        receivers: list[tuple[Router, int, ExpressReceive]],
        s: np.ndarray,
        fa: np.ndarray,
    ) -> None:
        self.engine = engine
        self.send = send
        self.colour = send.colour
        self.flow = send.flow
        # The tree, as flat lists (router, depth, tx ports, the port the stream comes in
        # through: :class:`_Tree`'s) and each receiving router's operation
        self.routers, self.depths, self.txs, self.ins = tree
        self.rops = {r.index: recv.op for r, _, recv in receivers}
        self.s = s
        self.fa = fa
        self.live = True
        # (router index, port) -> (shift, base): the credits the commit scheduled for the tail of
        # the stream there come at ``bases[base]`` + shift (the sender's up-ramp credits under
        # index -1); keys and values are packed in ints (``_key``, ``_tail``), which the
        # garbage collector does not follow
        self.tails: dict[int, int] = {}
        self.bases: dict[int, list[int]] = {}
        # cycle -> the routers' tail credits coming home then, (router, (port, colour)) in the
        # reference's order (:meth:`credits_home`; a cycle is dropped once it has run)
        self.credit_due: dict[int, list[tuple[Router, tuple[Dir, int]]]] = {}
        # Per router of the tree: the round-robin pointers of its tx ports before the commit.
        self.rr: list[int] = []  # (five per router of the tree, in its order)
        # Control wavelets of the stream's colour that reached a router inside its window and
        # wait behind its last wavelet: (router, port, wavelet).
        self.behind: list[tuple[Router, Dir, Any]] = []
        # Per router: colours whose configuration writes were on their way at the commit, and
        # the cycle the last of them lands (the schedule counted them as done).
        self.written: dict[int, int] = {}  # _key(router index, colour) -> cycle

    def hold_behind(self, r: Router, port: Dir, w: Any, colour: int) -> bool:
        """A wavelet of the stream's own colour reached ``r`` inside its window (the TEARDOWN
        sent behind the stream while it was held at a posted teardown exit): it queues after
        the stream's last wavelet there (lands in the buffer after the router's window)."""
        until = r.express_until
        item = (r, port, w)
        self.behind.append(item)
        self.engine.at(until + 1, self._behind_lands, item)
        return True

    def _behind_lands(self, item: tuple[Router, Dir, Any]) -> None:
        if self.live:
            self.behind.remove(item)
            r, port, w = item
            r.receive(port, self.colour, w)

    def credits_home(self, u: int) -> None:
        """Cycle ``u``'s tail credits come home, in order: each one through
        :meth:`fabric.engine.Router.return_credit` (a ramp credit's key is ``(RAMP, colour)``
        too), one due action for the cycle rather than one per credit."""
        for r, (port, colour) in self.credit_due.pop(u):
            r.return_credit(port, colour)

    def written_is_planned(self, r: Router, colour: int, t: int) -> bool:
        """Whether a configuration write of cycle ``t`` landing on ``r`` is one the commit
        counted (on its way then, landing no later than the last one it saw)."""
        return t <= self.written.get((r.index + 1) * 64 + colour, -1)  # (_key, inlined)

    def task_holds(self, ce: Any, begin: int, end: int) -> bool:
        """A task dispatched on one of the stream's CEs holds the issue slot over ``[begin,
        end)`` above the stream's microthread: an express stream cannot take that into its
        schedule, so the caller hands it back (a relay chain can:
        :meth:`fabric.relay.RelayStream.task_holds`)."""
        return False

    # -- handing back ----------------------------------------------------------------------------
    def hand_back(self, t: int) -> None:
        """Give the stream's remaining work back to the wavelet path: from cycle ``t`` (the
        first cycle whose router and CE steps have not run; deliveries of the current cycle
        have all landed), the routers, CEs and due actions hold exactly what the reference
        engine would hold had it moved the stream wavelet by wavelet: wavelets buffered at
        routers and queued at receivers, the operations with their progress and data so far,
        credits home or on their way, wavelets in flight. Called when something the commit
        did not account for reaches the stream's CEs or ports inside its window (module doc).
        """
        if not self.live:
            return
        engine = self.engine
        now = engine.now_cycle()
        if t <= now:
            # Asked during the cycle's due actions: done once they have all landed, first in the
            # cycle's steps (Completions), so that every event of this cycle has run.
            engine.express_done.pending.append(self)
            engine.routers_group.active[Completions.index] = engine.express_done
            return
        self._hand_back(t)

    def _hand_back(self, t: int) -> None:
        """:meth:`hand_back` at cycle ``t``, with every event of the cycles before ``t`` run
        and none of ``t``'s steps."""
        if not self.live:
            return
        self.live = False
        engine = self.engine
        engine.express_handbacks += 1
        cfg = engine.cfg
        now = engine.now_cycle()  # (t - 1, or t in Completions' step: its events have all run)
        due = engine.sched.due
        colour = self.colour
        bases = self.bases
        packed = self.tails.get(_key(-1, RAMP))  # the sender's up-ramp credits
        if packed is not None:
            action = (self.routers[0].ce.up_credit, (colour,))
            for u in bases[packed % 128]:
                if u + packed // 128 > now:
                    due[u + packed // 128].remove(action)
        credit_due = self.credit_due  # the routers' (one due action per cycle)
        for u in [u for u in credit_due if u > now]:
            due[u].remove((self.credits_home, (u,)))
            del credit_due[u]
        ends = engine.express_done.due
        hop, lr = cfg.hop_latency_cycles, cfg.ramp_latency_cycles
        rops = self.rops
        parts = [(int(self.s[-1]), self.send.op)] + [
            (int(self.fa[-1]) + depth * hop + lr, rops[r.index])
            for r, depth in zip(self.routers, self.depths, strict=True)
            if r.index in rops
        ]
        for u, op in parts:
            if u >= t:
                slot = ends[u]
                slot.remove(next(e for e in slot if e[1][0] is op))
        hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
        lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
        s, fa, n = self.s, self.fa, len(self.s)
        colour = self.colour
        values = self.send.values
        flow = self.flow
        at = engine.at

        def count_before(times: np.ndarray, shift: int, cycle: int) -> int:
            """#k with times[k] + shift < cycle (times sorted)."""
            return int(times.searchsorted(cycle - shift, "left"))

        def count_landed(times: np.ndarray, shift: int) -> int:
            """#k with times[k] + shift <= now: landed by the current cycle's due actions."""
            return int(times.searchsorted(now - shift, "right"))

        def wavelet(k: int) -> Wavelet:
            return Wavelet(float(values[k]), flow=flow)

        def activate_router(r: Router) -> None:
            if t <= now:
                engine.activate_router(r)
            else:
                at(t, engine.activate_router, r)

        def express_away(index: int, port: Dir) -> int:
            """Credits the commit took away there and has not brought home by now."""
            packed = self.tails.get(_key(index, port))
            if packed is None:
                return 0
            shift = packed // 128
            return sum(1 for u in self.bases[packed % 128] if u + shift > now)

        def credit_adjust(r: Router, port: Dir, sent: int, home: int) -> None:
            """The (port, colour) credits: the reference has ``sent - home`` away now."""
            r.credits[(port, colour)] += express_away(r.index, port) - (sent - home)

        # The sender: issues before t done; arrivals at the root, up-ramp credits.
        root = self.routers[0]
        sender: ExpressEndpoint = root.ce  # type: ignore[assignment]
        ks = count_before(s, 0, t)
        kf0 = count_before(fa, 0, t)
        for k in range(count_landed(s, lr), ks):
            at(int(s[k]) + lr, root.receive, RAMP, colour, wavelet(k))
        home = count_landed(fa, lc)
        for k in range(home, kf0):
            at(int(fa[k]) + lc, sender.up_credit, colour)
        up_adjust = express_away(-1, RAMP) - (ks - home)
        sender.express_hand_back(
            self,
            self.send.op, ks, int(np.count_nonzero(np.diff(s[:ks]))) + 1 if ks else 0, t,
            None, up_adjust, [],
        )  # fmt: skip
        # Routers: wavelets arrived but not forwarded are buffered; what left before t and has
        # not arrived or come back is on its way.
        old_rr = self.rr
        for i, r in enumerate(self.routers):
            depth, tx, in_port = self.depths[i], self.txs[i], self.ins[i]
            shift = depth * hop
            kf = count_before(fa, shift, t)  # forwarded (sent out of every tx port) before t
            if depth:
                ka = count_landed(fa, shift)  # arrived
                parent_sent = count_before(fa, shift - hop, t)
                for k in range(ka, parent_sent):
                    at(int(fa[k]) + shift, r.receive, in_port, colour, wavelet(k))
            else:
                ka = count_landed(s, lr)
            if ka > kf:
                r.hold_first(in_port, colour, [wavelet(k) for k in range(kf, ka)])
            r.forwarded -= n - kf
            if kf == 0:
                for port in tx:
                    r.rr[port] = old_rr[5 * i + port]
            for port in tx:
                if port is RAMP:
                    continue
                # (a wavelet the next router has not forwarded yet: it returns the credit)
                back = count_landed(fa, shift + hop + lch)
                for k in range(back, count_before(fa, shift + hop, t)):
                    at(int(fa[k]) + shift + hop + lch, r.return_credit, port, colour)
                credit_adjust(r, port, kf, back)
            rop = self.rops.get(r.index)
            if rop is not None:
                ce: ExpressEndpoint = r.ce  # type: ignore[assignment]
                down = shift + lr
                delivered = count_landed(fa, down)
                for k in range(delivered, kf):
                    at(int(fa[k]) + down, ce.fabric_deliver, colour, wavelet(k))
                popped = count_before(fa, down, t)
                back = count_landed(fa, down + lc)
                for k in range(back, popped):
                    at(int(fa[k]) + down + lc, r.ramp_credit, colour)
                credit_adjust(r, RAMP, kf, back)
                queued = [wavelet(k) for k in range(popped, delivered)]
                ce.express_hand_back(self, rop, popped, popped, t, values, 0, queued)
            if r.express_stream is self:
                r.express_until = -1
                r.express_colour = -1
                r.express_busy = {}
                r.express_stream = None
            if r.buffered:
                activate_router(r)
        # Control wavelets of the colour held behind the stream: in their buffers, in order.
        for r, port, w in self.behind:
            r.hold_last(port, colour, w)
            activate_router(r)
        self.behind = []


def _commit(
    engine: FabricEngine,
    root: Router,
    send: ExpressSend,
    tree: _Tree,
    receivers: list[tuple[Router, int, ExpressReceive]],
    s: np.ndarray,
    fa: np.ndarray,
) -> None:
    cfg = engine.cfg
    colour = send.colour
    hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
    lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
    n = send.length
    buf = cfg.router_buffer_wavelets
    sched = engine.sched
    at_each, due, due_slot = sched.at_each, sched.due, sched.due_slot
    done = engine.express_done
    if done is None:
        done = engine.express_done = Completions(engine)
    engine.express_streams += 1
    engine.express_wavelets += n
    stream = ExpressStream(engine, send, tree, receivers, s, fa)
    # The sender: issues end at s[-1]; up-ramp credits still away then come home later.
    last_issue = int(s[-1])
    last_f = int(fa[-1])
    tail = fa[-64:].tolist()  # credits per loop are at most 64 (config ranges)
    sender: ExpressEndpoint = root.ce  # type: ignore[assignment]
    home = _outstanding(tail, lc, last_issue, cfg.ramp_credits)
    sender.commit_express_send(send, s, len(home), stream)
    tails = stream.tails
    if home:
        tails[_key(-1, RAMP)] = 0
        stream.bases[0] = home
        at_each(home, sender.up_credit, colour)
    done.add(last_issue, sender.complete_express, send.op, None)
    # Routers: each forwards wavelet k at fa[k] + depth * hop; hop credits return one hop and
    # a credit latency later. Which credits are still away when a router's last wavelet leaves
    # does not depend on its depth (both sides shift by depth * hop): computed once.
    hop_away = _outstanding(tail, hop + lch, last_f, buf)
    stream.bases[1] = hop_away
    # The routers' tail credits (hop credits here, down-ramp credits below) come home through
    # one due action per cycle (ExpressStream.credits_home), in the place of the cycle's first
    # one: the reference appends them one action each, all during this call, so they sit
    # together in the cycle's list in this order (only the receivers' completion wakes, which
    # only wake the Completions step, fall between them there).
    credit_due, credits_home = stream.credit_due, stream.credits_home

    def owe(item: tuple[Router, tuple[Dir, int]], times: list[int], shift: int) -> None:
        """``item``'s credits come home at ``times`` shifted by ``shift``: each cycle's through
        its one ``credits_home`` due action."""
        for u in times:
            u += shift
            items = credit_due.get(u)
            if items is None:
                credit_due[u] = [item]
                (due.get(u) or due_slot(u)).append((credits_home, (u,)))
            else:
                items.append(item)

    detail = engine.detail
    saved_rr = stream.rr
    written = stream.written
    n_hop = len(hop_away)
    for r, depth, tx in zip(tree.routers, tree.depths, tree.txs, strict=True):
        shift = depth * hop
        last_send = last_f + shift
        r.express_until = last_send
        r.express_colour = colour
        r.express_stream = stream
        r.forwarded += n
        busy = _BUSY.get(tx)
        if busy is None:
            busy = _BUSY[tx] = dict.fromkeys(tx, True)
        r.express_busy = busy
        rr = r.rr
        saved_rr.extend(rr)
        for p in tx:
            rr[p] = colour  # (the stream is the last to use its ports in its window)
        if r.future:
            for c, (ready, _) in r.future.items():
                written[(r.index + 1) * 64 + c] = ready  # (_key, inlined)
        if detail:
            first = int(fa[0]) + shift
            ports = ",".join(p.name for p in tx)
            engine.trace(r.path, "wavelet", f"stream c{colour}", first, last_send + 1 - first,
                         colour=colour, wavelets=n, ports=ports, express=1)  # fmt: skip
        if hop_away:
            for port in tx:
                if port is RAMP:
                    continue
                r.credits[(port, colour)] -= n_hop
                tails[(r.index + 1) * 64 + port] = shift * 128 + 1  # (_key, inlined)
                # (every time is after the router's last forward, so not past)
                owe((r, (port, colour)), hop_away, shift)
    # Receivers: wavelet k arrives (and is popped) at fa[k] + depth * hop + ramp latency; the
    # down-ramp credits still away at the last pop come home to the router (again the same
    # for every depth, per number of down-ramp credits).
    ramp_away: dict[int, list[int]] = {}
    # (Completions.add, inlined: once per receiver; every pop is after the current cycle)
    done_due, wake, values = done.due, done._wake, send.values
    for router, depth, recv in receivers:
        shift = depth * hop + lr
        cd = recv.down_credits
        away = ramp_away.get(cd)
        if away is None:
            away = ramp_away[cd] = stream.bases[2 + cd] = _outstanding(tail, lr + lc, last_f, cd)
        if away:
            router.credits[(RAMP, colour)] -= len(away)
            dh = depth * hop
            tails[(router.index + 1) * 64 + RAMP] = dh * 128 + 2 + cd  # (_key, inlined)
            owe((router, (RAMP, colour)), away, dh)  # (as the hop credits above)
        rce: ExpressEndpoint = router.ce  # type: ignore[assignment]
        rce.commit_express_receive(recv, fa, shift, stream)
        u = last_f + shift
        entry = (rce.complete_express, (recv.op, values))
        slot = done_due.get(u)
        if slot is None:
            done_due[u] = [entry]
            (due.get(u) or due_slot(u)).append((wake, ()))  # (at, inlined: u is after now)
        else:
            slot.append(entry)


class Completions:
    """The express streams' completions, run in the cycle they are due *after* every due
    action of that cycle (first in the ``routers`` step group), as the reference engine
    finishes an operation in its compute engine's step: an operation that begins, or a write
    that lands, in that cycle can still hand the stream back before it completes. The
    hand-backs asked for during a cycle's due actions run here too, before the completions."""

    index = -2

    def __init__(self, engine: FabricEngine) -> None:
        self.engine = engine
        self.due: dict[int, list[tuple[Any, tuple[Any, ...]]]] = {}
        self.pending: list[ExpressStream] = []

    def add(self, t: int, fn: Any, *args: Any) -> tuple[int, tuple[Any, tuple[Any, ...]]]:
        """Run ``fn(*args)`` in cycle ``t``'s steps; returns (t, the entry)."""
        entry = (fn, args)
        slot = self.due.get(t)
        if slot is None:
            self.due[t] = [entry]
            if t <= self.engine.now_cycle():
                self.engine.routers_group.active[-2] = self
            else:
                self.engine.at(t, self._wake)
        else:
            slot.append(entry)
        return t, entry

    def _wake(self) -> None:
        self.engine.routers_group.active[-2] = self

    def step(self, t: int) -> bool:
        if self.pending:
            # (the routers a hand-back gives wavelets to are stepped here, once, in index
            # order; those the scheduler already holds for this cycle are stepped by it)
            active = self.engine.routers_group.active
            scheduled = set(active)
            pending, self.pending = self.pending, []
            for stream in pending:
                stream._hand_back(t)
            for idx in sorted(i for i in active if i not in scheduled):
                if not active[idx].step(t):
                    del active[idx]
        for fn, args in self.due.pop(t, ()):
            fn(*args)
        return False
