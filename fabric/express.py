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
Should something reach a router or CE inside an express window after all, the engine counts a
``fast_conflict`` (the only way the two fidelities can differ; runs report the count):

- a wavelet of another colour that needs an output port in a cycle the stream uses it (possible
  only if a route written inside the window gives that colour one of the stream's ports) is
  served at once, as round robin between two colours would serve it, but the stream keeps its
  schedule (the reference would push the stream back by one cycle); one that needs no such
  port, or comes in a free cycle, is no conflict at all;
- an operation that begins on a CE inside its window is stepped wavelet by wavelet and yields
  the issue slots the stream's microthread takes whenever that microthread would win the
  arbitration; when it would lose, the stream keeps its slots anyway (the reference would delay
  the stream by a cycle).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from fabric.endpoints import RampEndpoint
from fabric.engine import Router
from fabric.routes import Dir

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
        self, send: ExpressSend, issues: np.ndarray, credits_home: list[int]
    ) -> None:
        """The send is an express stream: wavelet k issues at cycle ``issues[k]``; the ramp
        credits still away after the last issue come home at the cycles ``credits_home`` (the
        endpoint calls its own ``up_credit`` then). The endpoint completes the operation at
        ``issues[-1]`` and yields its issue slots to the stream in those cycles."""
        ...

    def commit_express_receive(
        self, recv: ExpressReceive, pops: np.ndarray, shift: int, values: np.ndarray
    ) -> None:
        """The receive is part of the express stream: wavelet k comes down the ramp and is
        popped at cycle ``pops[k] + shift``; at the last one the operation completes with
        ``values`` written."""
        ...


def _tree(
    root: Router, colour: int, first_arrival: int, hop: int
) -> list[tuple[Router, int, Any]] | None:
    """Routers of the colour's multicast tree from ``root`` with their depth and route, or None.

    A router's route is the one its pending configuration writes will leave, provided they land
    no later than the stream's first wavelet reaches it (then they cannot affect the stream).
    """
    out: list[tuple[Router, int, Any]] = []
    ready, route = root.route_at(colour)
    todo = [(root, 0, ready, route)]  # (breadth first: read in order as it grows)
    seen = {root.index}
    for r, depth, ready, route in todo:
        if route is None or route.teardown or ready > first_arrival + depth * hop:
            return None
        out.append((r, depth, route))
        nbrs = r.nbr
        for port in route.positions[route.pos].tx:
            if port is RAMP:
                continue
            nbr = nbrs.get(port)
            if not isinstance(nbr, Router) or nbr.index in seen:
                return None  # off the mesh (an edge port) or a loop: not for an express stream
            nready, nroute = nbr.route_at(colour)
            if nroute is None or port.opposite not in nroute.positions[nroute.pos].rx:
                return None
            seen.add(nbr.index)
            todo.append((nbr, depth + 1, nready, nroute))
    return out


def _shares_a_port(r: Router, colour: int, tx: tuple[Dir, ...]) -> bool:
    """Whether another colour configured on ``r`` (in any of its switch positions, now or once
    its pending configuration writes land) may send out of one of the ports ``tx`` the stream
    uses: its wavelets could then need such a port in a cycle the stream holds it, which the
    schedule does not see, so the stream is not committed (it runs wavelet by wavelet)."""
    routes = r.routes
    future = r.future
    if len(routes) == 1 and not future:
        return False
    # (plain loops: a generator per route cost more than the test, at every router of a tree)
    for c, route in routes.items():
        if c != colour:
            for p in route.positions:
                for d in p.tx:
                    if d in tx:
                        return True
    if future:
        for c, (_, route) in future.items():
            if c != colour:
                for p in route.positions:
                    for d in p.tx:
                        if d in tx:
                            return True
    return False


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
    tree = _tree(root, colour, first, hop)
    if tree is None:
        return False
    receivers: list[tuple[Router, int, ExpressReceive]] = []
    for r, depth, route in tree:
        if r.express_until >= now or r.buffered or colour in r.filters:  # (_router_idle)
            return False
        tx = route.positions[route.pos].tx
        if _shares_a_port(r, colour, tx):
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


def _commit(
    engine: FabricEngine,
    root: Router,
    send: ExpressSend,
    tree: list[tuple[Router, int, Any]],
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
    at_each = engine.sched.at_each
    engine.express_streams += 1
    engine.express_wavelets += n
    # The sender: issues end at s[-1]; up-ramp credits still away then come home later.
    last_issue = int(s[-1])
    last_f = int(fa[-1])
    tail = fa[-64:].tolist()  # credits per loop are at most 64 (config ranges)
    sender: ExpressEndpoint = root.ce  # type: ignore[assignment]
    sender.commit_express_send(send, s, _outstanding(tail, lc, last_issue, cfg.ramp_credits))
    # Routers: each forwards wavelet k at fa[k] + depth * hop; hop credits return one hop and
    # a credit latency later. Which credits are still away when a router's last wavelet leaves
    # does not depend on its depth (both sides shift by depth * hop): computed once.
    hop_away = _outstanding(tail, hop + lch, last_f, buf)
    detail = engine.detail
    for r, depth, route in tree:
        shift = depth * hop
        last_send = last_f + shift
        r.express_until = last_send
        r.express_colour = colour
        r.forwarded += n
        tx = route.current.tx
        r.express_busy = dict.fromkeys(tx, (fa, shift))
        if detail:
            first = int(fa[0]) + shift
            ports = ",".join(p.name for p in tx)
            engine.trace(r.path, "wavelet", f"stream c{colour}", first, last_send + 1 - first,
                         colour=colour, wavelets=n, ports=ports, express=1)  # fmt: skip
        if hop_away:
            for port in tx:
                if port is RAMP:
                    continue
                r.credits[(port, colour)] -= len(hop_away)
                at_each([t + shift for t in hop_away], r.return_credit, port, colour)
    # Receivers: wavelet k arrives (and is popped) at fa[k] + depth * hop + ramp latency; the
    # down-ramp credits still away at the last pop come home to the router (again the same
    # for every depth, per number of down-ramp credits).
    ramp_away: dict[int, list[int]] = {}
    for router, depth, recv in receivers:
        shift = depth * hop + lr
        cd = recv.down_credits
        away = ramp_away.get(cd)
        if away is None:
            away = ramp_away[cd] = _outstanding(tail, lr + lc, last_f, cd)
        if away:
            router.credits[(RAMP, colour)] -= len(away)
            at_each([t + depth * hop for t in away], router.ramp_credit, colour)
        rce: ExpressEndpoint = router.ce  # type: ignore[assignment]
        rce.commit_express_receive(recv, fa, shift, send.values)
