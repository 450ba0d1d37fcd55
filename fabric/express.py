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

- a wavelet of another colour that needs an output port in a cycle the stream uses it is served
  at once, as round robin between two colours would serve it, but the stream keeps its schedule
  (the reference would push the stream back by one cycle); one that needs no such port, or
  comes in a free cycle, is no conflict at all;
- an operation that begins on a CE inside its window is stepped wavelet by wavelet and yields
  the issue slots the stream's microthread takes whenever that microthread would win the
  arbitration; when it would lose, the stream keeps its slots anyway (the reference would delay
  the stream by a cycle).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fabric.endpoints import RampEndpoint
from fabric.engine import Router
from fabric.routes import Dir

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


@dataclasses.dataclass(frozen=True, slots=True)
class ExpressReceive:
    """A receiving compute engine's matching operation: a plain fabric -> memory move of the
    stream's length, registered to begin at cycle ``begin_at``, taking ``down_credits`` ramp
    slots, on the microthread with arbitration ``key``. ``op`` is the engine's own handle."""

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
    todo = deque([(root, 0)])
    seen = {root.index}
    while todo:
        r, depth = todo.popleft()
        ready, route = r.route_at(colour)
        if route is None or route.teardown or ready > first_arrival + depth * hop:
            return None
        out.append((r, depth, route))
        for port in route.current.tx:
            if port is Dir.RAMP:
                continue
            nbr = r.nbr.get(port)
            if not isinstance(nbr, Router) or nbr.index in seen:
                return None  # off the mesh (an edge port) or a loop: not for an express stream
            _, nroute = nbr.route_at(colour)
            if nroute is None or port.opposite not in nroute.current.rx:
                return None
            seen.add(nbr.index)
            todo.append((nbr, depth + 1))
    return out


def _router_idle(r: Router, now: int) -> bool:
    return r.express_until < now and not any(r.bufs.values())


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
    if route is None or Dir.RAMP not in route.current.rx or Dir.RAMP in route.current.tx:
        return False
    n = send.length
    buf = cfg.router_buffer_wavelets
    hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
    lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
    # A configuration write still on its way to the root (a posted write leaving teardown)
    # holds the stream there until it lands; with no write pending the root holds nothing.
    hold = max(ready - now, 0)
    s, fa = engine.schedules.get(n, now, send.width, cfg.ramp_credits, lr, lc, buf, hop, lch, hold)
    tree = _tree(root, colour, int(fa[0]), hop)
    if tree is None:
        return False
    receivers: list[tuple[Router, int, ExpressReceive]] = []
    for r, depth, route in tree:
        if not _router_idle(r, now) or colour in r.filters:
            return False
        for port in route.current.tx:
            if port is Dir.RAMP:
                rce: ExpressEndpoint = r.ce  # type: ignore[assignment]
                recv = rce.express_receive(colour, n, now)
                if recv is None or r.credit(Dir.RAMP, colour) != recv.down_credits:
                    return False
                receivers.append((r, depth, recv))
            elif r.credit(port, colour) != buf:
                return False
    keeps_up: dict[int, bool] = {}
    for _r, depth, recv in receivers:
        if recv.begin_at > int(fa[0]) + depth * hop + lr:
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
    engine.express_streams += 1
    engine.express_wavelets += n
    # The sender: issues end at s[-1]; up-ramp credits still away then come home later.
    last_issue = int(s[-1])
    last_f = int(fa[-1])
    tail = fa[-64:].tolist()  # credits per loop are at most 64 (config ranges)
    sender: ExpressEndpoint = root.ce  # type: ignore[assignment]
    sender.commit_express_send(send, s, _outstanding(tail, lc, last_issue, cfg.ramp_credits))
    # Routers: each forwards wavelet k at fa[k] + depth * hop; hop credits return one hop and
    # a credit latency later.
    for r, depth, route in tree:
        last_send = last_f + depth * hop
        r.express_until = last_send
        r.express_colour = colour
        r.forwarded += n
        r.express_busy = {port: (fa, depth * hop) for port in route.current.tx}
        if engine.detail:
            first = int(fa[0]) + depth * hop
            ports = ",".join(p.name for p in route.current.tx)
            engine.trace(r.path, "wavelet", f"stream c{colour}", first, last_send + 1 - first,
                         colour=colour, wavelets=n, ports=ports, express=1)  # fmt: skip
        for port in route.current.tx:
            if port is Dir.RAMP:
                continue
            away = _outstanding(tail, depth * hop + hop + lch, last_send, buf)
            r.credits[(port, colour)] -= len(away)
            for t in away:
                engine.at(t, r.return_credit, port, colour)
    # Receivers: wavelet k arrives (and is popped) at fa[k] + depth * hop + ramp latency; the
    # down-ramp credits still away at the last pop come home to the router.
    for router, depth, recv in receivers:
        shift = depth * hop + lr
        away = _outstanding(tail, shift + lc, last_f + depth * hop, recv.down_credits)
        router.credits[(Dir.RAMP, colour)] -= len(away)
        for t in away:
            engine.at(t, router.ramp_credit, colour)
        rce: ExpressEndpoint = router.ce  # type: ignore[assignment]
        rce.commit_express_receive(recv, fa, shift, send.values)
