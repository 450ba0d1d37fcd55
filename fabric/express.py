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

from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from fabric.routes import Dir

if TYPE_CHECKING:
    from fabric.engine import FabricEngine, Router
    from pe.ce import AsyncOp, ComputeEngine


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
            if nbr is None or not hasattr(nbr, "route_at") or nbr.index in seen:
                return None  # off the mesh (an edge port) or a loop: not for an express stream
            _, nroute = nbr.route_at(colour)
            if nroute is None or port.opposite not in nroute.current.rx:
                return None
            seen.add(nbr.index)
            todo.append((nbr, depth + 1))
    return out


def _router_idle(r: Router, now: int) -> bool:
    return r.express_until < now and not any(r.bufs.values())


_SCHEDULES: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}


def source_schedule(
    n: int, begin: int, width: int, n_credits: int, lr: int, lc: int, b: int, hop: int, lch: int
) -> tuple[np.ndarray, np.ndarray]:
    """Issue cycles ``s`` at the sending CE and forward cycles ``f`` at the root router.

    Relative to ``begin`` the schedule depends only on the mechanism parameters, and a shorter
    stream's schedule is a prefix of a longer one's; so it is computed once per parameter set
    (grown by doubling) and sliced.
    """
    key = (width, n_credits, lr, lc, b, hop, lch)
    cached = _SCHEDULES.get(key)
    if cached is None or len(cached[0]) < n:
        size = max(n, 2 * len(cached[0]) if cached else 1024)
        s_list, f_list = _recurrence(size, width, n_credits, lr, lc, b, hop, lch)
        cached = (np.asarray(s_list, np.int64), np.asarray(f_list, np.int64))
        _SCHEDULES[key] = cached
    return cached[0][:n] + begin, cached[1][:n] + begin


def _recurrence(
    n: int, width: int, n_credits: int, lr: int, lc: int, b: int, hop: int, lch: int
) -> tuple[list[int], list[int]]:
    """The cycle-by-cycle rules of the sender and its router, from cycle 0 (see the module)."""
    begin = 0
    s = [0] * n
    f = [0] * n
    back: deque[int] = deque()
    avail = n_credits
    t = begin
    k = 0
    while k < n:
        while back and back[0] <= t:
            back.popleft()
            avail += 1
        if avail == 0:
            t = back[0]
            continue
        for _ in range(min(width, avail, n - k)):
            s[k] = t
            fk = t + lr
            if k and f[k - 1] + 1 > fk:
                fk = f[k - 1] + 1
            if k >= b and f[k - b] + hop + lch > fk:
                fk = f[k - b] + hop + lch
            f[k] = fk
            back.append(fk + lc)
            avail -= 1
            k += 1
        t += 1
    return s, f


def _outstanding(tail: list[int], shift: int, after: int, n_credits: int) -> list[int]:
    """Credit-return cycles (``tail`` + ``shift``) still in the future at cycle ``after``.
    Returns increase with the wavelet index and at most ``n_credits`` can be away, so only the
    last ``credits`` wavelets of the stream (``tail``) are looked at."""
    return [t + shift for t in tail[-n_credits:] if t + shift > after]


def try_express(ce: ComputeEngine, op: AsyncOp, now: int) -> bool:
    """Commit ``op`` (a send beginning at cycle ``now``) as an express stream if it qualifies."""
    engine = ce.engine
    cfg = engine.cfg
    colour = op.out_colour
    if op.values is None or op.fab_in is not None or op.control_wavelet is not None:
        return False
    if ce.ops or len(ce.ops_out) != 1 or ce.ops_in or ce.express_until >= now:
        return False
    up_credits = ce._up_credit_count(colour)
    if up_credits != cfg.ramp_credits:
        return False
    root = ce.router
    _, route = root.route_at(colour)
    if route is None or Dir.RAMP not in route.current.rx or Dir.RAMP in route.current.tx:
        return False
    n = op.length
    buf = cfg.router_buffer_wavelets
    hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
    lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
    s, fa = source_schedule(n, now, op.width, up_credits, lr, lc, buf, hop, lch)
    tree = _tree(root, colour, now + lr, hop)
    if tree is None:
        return False
    receivers: list[tuple[Any, int, AsyncOp]] = []
    for r, depth, route in tree:
        if not _router_idle(r, now) or colour in r.filters:
            return False
        for port in route.current.tx:
            if port is Dir.RAMP:
                rce = r.ce
                q = rce.queue_of_colour.get(colour)
                if q is None:
                    return False
                rop = rce.ops_in.get(q)
                if (
                    rop is None
                    or rop.func is not None
                    or rop.out_view is None
                    or rop.length != op.length
                    or len(rce.ops_in) != 1
                    or rce.ops_out
                    or (rce.ops and rce.ops != [rop])
                    or rop.done
                    or rce.in_queues[q]
                    or rce.express_until >= now
                    or r.credit(Dir.RAMP, colour) != rce.down_credits(colour)
                ):
                    return False
                receivers.append((rce, depth, rop))
            elif r.credit(port, colour) != buf:
                return False
    keeps_up: dict[int, bool] = {}
    for rce, depth, rop in receivers:
        if rop.begin_at > int(fa[0]) + depth * hop + lr:
            return False
        cd = rce.down_credits(colour)
        ok = keeps_up.get(cd)
        if ok is None:
            ok = keeps_up[cd] = n <= cd or not np.any(fa[cd:] - fa[:-cd] < lr + lc)
        if not ok:
            return False
    _commit(engine, ce, op, tree, receivers, s, fa)
    return True


def _commit(
    engine: FabricEngine,
    ce: ComputeEngine,
    op: AsyncOp,
    tree: list[tuple[Router, int, Any]],
    receivers: list[tuple[Any, int, AsyncOp]],
    s: np.ndarray,
    fa: np.ndarray,
) -> None:
    cfg = engine.cfg
    colour = op.out_colour
    hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
    lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
    n = op.length
    buf = cfg.router_buffer_wavelets
    now = int(s[0])
    engine.express_streams += 1
    engine.express_wavelets += n
    # The sender: issues end at s[-1]; up-ramp credits still away then come home later.
    last_issue = int(s[-1])
    last_f = int(fa[-1])
    ce.express_until = last_issue
    ce.express_issue = (s, 0, (op.priority, op.microthread))
    tail = fa[-64:].tolist()  # credits per loop are at most 64 (config ranges)
    away = _outstanding(tail, lc, last_issue, cfg.ramp_credits)
    ce.up_credits[colour] -= len(away)
    for t in away:
        engine.at(t, ce.up_credit, colour)
    op.started = now
    op.express = True
    op.issues = int(np.count_nonzero(np.diff(s))) + 1
    engine.at_or_now(last_issue, ce.complete_express, op, None)
    # Routers: each forwards wavelet k at fa[k] + depth * hop; hop credits return one hop and
    # a credit latency later.
    for r, depth, route in tree:
        last_send = last_f + depth * hop
        r.express_until = last_send
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
    # Receivers: wavelet k arrives (and is popped) at fa[k] + depth * hop + ramp latency.
    for rce, depth, rop in receivers:
        if rop in rce.ops:
            rce.ops.remove(rop)  # begun this cycle, nothing moved yet: the stream takes it over
        shift = depth * hop + lr
        last_pop = last_f + shift
        rce.express_until = last_pop
        rce.express_issue = (fa, shift, (rop.priority, rop.microthread))
        router = rce.router
        cd = rce.down_credits(colour)
        away = _outstanding(tail, shift + lc, last_pop - lr, cd)
        router.credits[(Dir.RAMP, colour)] -= len(away)
        for t in away:
            engine.at(t, router.ramp_credit, colour)
        rop.express = True
        rop.started = rop.begin_at
        rop.issues = n
        engine.at_or_now(last_pop, rce.complete_express, rop, op.values)
