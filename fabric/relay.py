"""Relay chains: the schedule of a chain reduction's wavelets from the engine's rules alone.

A *relay chain* is what ``Collectives.reduce_fadds`` runs along a row or column: the PE at the
far end sends its buffer (a memory -> fabric move), every PE on the way adds the partial sum
coming in from upstream to its own buffer as it streams through (an operation with a fabric
input and a memory source that sends to the fabric: a *relay*), and the root adds the total
into its buffer (fabric input, memory output). Between two neighbours each wavelet goes up the
sender's ramp, out of its router, one hop, and down the receiver's ramp.

:func:`chain_schedule` computes, for every element of such a chain, the cycle each compute
engine issues it and each router forwards it, with the rules the wavelet-exact engine
(:mod:`fabric.engine`, :mod:`pe.ce`) applies cycle by cycle:

- a compute engine issues in a cycle when its operation has begun and no task holds the issue
  slot (``gates``), its input has come down the ramp (``ramp_latency_cycles`` after its router
  sent it) and it holds an up-ramp credit (one comes home ``ramp_credit_latency_cycles`` after
  the router forwarded an earlier wavelet of the colour); one issue moves up to the operation's
  SIMD width of elements, as long as each has its input and its credit, and an engine issues
  once per cycle;
- a router forwards one wavelet per cycle and port once it has arrived (``ramp_latency_cycles``
  after the CE issued it, or ``hop_latency_cycles`` after the upstream router sent it), its
  colour has left teardown (``ready``), and the next part holds a free slot: the next router's
  input buffer (``router_buffer_wavelets``; a slot comes back ``hop_credit_latency_cycles``
  after that router forwarded the wavelet in it) or, down the ramp, the receiving CE's queue
  (its down-ramp credits; one comes back ``ramp_credit_latency_cycles`` after the CE popped the
  wavelet).

Every dependency of element ``k`` at position ``j`` is on element ``k`` upstream or on an earlier
element, so one pass over the elements, each over the chain from its far end, gives the whole
schedule: a few integer operations per element and PE, where the wavelet path spends a dozen
Python calls and six due actions. The schedule holds only while nothing else shares the chain's
compute engines, ports or colours (a task dispatched on one of its CEs, another colour's
traffic, a route written): tests/test_relay.py checks it against the wavelet path on the
collectives' chains.

The fast fidelities move a chain by this schedule as a :class:`RelayStream`, found by
:func:`try_relay` as its operations begin and handed back to the wavelet path as
:mod:`fabric.express`'s streams are, but for a task dispatched on one of its CEs, which the
chain takes into its schedule as a hold (:meth:`RelayStream.task_holds`); see
docs/wafer/design.md, "Relay chains".
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from fabric.config import FabricConfig
from fabric.engine import Router
from fabric.express import Completions, ExpressEndpoint
from fabric.routes import Dir
from fabric.wavelet import Wavelet

if TYPE_CHECKING:
    from fabric.engine import FabricEngine

RAMP = Dir.RAMP


@dataclasses.dataclass(frozen=True, slots=True)
class ChainSchedule:
    """The cycles of every element of a chain (positions from the far end, ``0``, to the root,
    ``len(issue) - 1``): ``issue[j][k]`` the CE at position ``j`` issues element ``k`` (the far
    end reads it from memory; a relay pops it and sends the sum; the root pops it and writes the
    sum); ``out[j][k]`` its router forwards it towards the root (every position but the root);
    ``down[j][k]`` its router forwards the element coming from upstream down its ramp (every
    position but the far end; ``down[0]`` is empty)."""

    issue: list[Any]  # (lists of ints, or int64 arrays)
    out: list[Any]
    down: list[Any]
    counts: list[int]  # per position, its issue cycles from the first element it had to move


#: The shortest operation a chain is offered as a relay for (elements per position). With
#: tries now a few dict reads, what decides is a commit's cost (about 60-70 us a position: the
#: walk, the parts, the schedule, the state written, two events and the tail credits) against
#: the wavelets it saves (about 30 us per element and position), and whether the relay runs to
#: its end: measured with the floor at 4 (bench/notes/wafer-speed.md, "Relay chains at a few
#: words a PE"), 4-5-word relays gained 1.4 % of a run's instructions on 128-position rows and
#: lost 1.7 % on 64-position rows, and gemv at 8 words a PE on 64 x 64 handed every relay back
#: (a task on one of its CEs inside the window) for 16.7 % more instructions. So the floor
#: stays 16, where every relay measured pays. Which path moves a chain changes no cycle or
#: datum (tests/test_conformance.py runs relays from 2 words with the floor lowered), only the
#: speed.
MIN_RELAY_ELEMENTS = 16

#: A cycle standing for "before the schedule begins" (an element already moved, a credit home).
PAST = -(1 << 40)


def chain_schedule(
    n: int,
    gates: list[int],
    widths: list[int],
    down_credits: list[int],
    cfg: FabricConfig,
    *,
    out_ready: list[int] | None = None,
    down_ready: list[int] | None = None,
    issued: list[int] | None = None,
    sent: list[int] | None = None,
    taken: list[int] | None = None,
    floor: int = PAST,
    tail_only: bool = False,
    holds: dict[int, list[tuple[int, int]]] | None = None,
    general: bool = False,
) -> ChainSchedule:
    """The schedule of ``n`` elements along a chain of ``len(gates)`` compute engines (see the
    module docstring). ``gates[j]``: the first cycle position ``j``'s CE may issue (its
    operation has begun, no task holds the slot); ``widths[j]``: its operation's SIMD width;
    ``down_credits[j]``: the wavelets its router may have on their way down its ramp (position 0
    takes none); ``out_ready[j]`` / ``down_ready[j]``: the cycle the colour its router sends on
    (receives on) leaves teardown, -1 if it already has.

    A chain already under way with nothing on its way (every wavelet in a buffer or a queue,
    every credit home): ``issued[j]`` elements issued by position ``j``'s CE, ``sent[j]``
    forwarded by its router towards the root, ``taken[j]`` forwarded down its ramp; those
    cycles are :data:`PAST`, and nothing else happens before ``floor``.

    ``tail_only``: keep only each list's last few cycles (as many as a credit loop looks
    back; what a commit schedules from), in a ring of that size instead of ``n``.

    ``holds[j]``: the cycles ``[begin, end)`` in which a task holds position ``j``'s issue slot
    (dispatched while the chain moves, above its operation's microthread: the CE issues none
    of the chain's elements there), in time order; an issue that would fall inside one waits
    for its end, as the wavelet path's CE waits for the task to give the slot back.

    ``general``: every element by the general loop (the reference the steady loop is
    tested against: tests/test_relay.py)."""
    m = len(gates)
    if m < 2 or len(widths) != m or len(down_credits) != m:
        raise ValueError("a chain has at least two positions, and one gate, width and credit each")
    lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
    hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
    b, up = cfg.router_buffer_wavelets, cfg.ramp_credits
    out_ready = out_ready or [-1] * m
    down_ready = down_ready or [-1] * m
    issued = issued or [0] * m
    sent = sent or [0] * m
    taken = taken or [0] * m
    # Element k's cycles sit at k & mask: every element (window off), or a ring of the last
    # few, as far back as the rules look (a credit loop), where only the chain's end is wanted.
    size = max(up, b, max(down_credits), 1) + 1 if tail_only else max(n, 1)
    size = 1 << (size - 1).bit_length()
    mask = size - 1
    issue = [[PAST] * size for _ in range(m)]
    out: list[list[int]] = [[PAST] * size for _ in range(m - 1)] + [[]]
    down: list[list[int]] = [[]] + [[PAST] * size for _ in range(1, m)]
    in_issue = [0] * m  # elements in position j's current issue
    counts = [0] * m  # issue cycles from issued[j] on
    last = m - 1
    # Per position, what the loop reads (one tuple unpacked, not a dozen list lookups): its
    # cycles' lists, the next position's down list, its constants.
    holds = holds or {}
    rows = [
        (j, issue[j], down[j], out[j] if j < last else None, down[j + 1] if j < last else None,
         down_credits[j], gates[j], widths[j], down_ready[j], out_ready[j], taken[j],
         issued[j], sent[j], holds.get(j))
        for j in range(m)
    ]  # fmt: skip
    # From element ``steady`` on every rule applies in full (each position has moved its
    # elements before the commit, and the credit loops look back at real elements): the
    # loop after this one, which is this one without those tests and with the far end and
    # the root taken out of the positions' loop (the same integers, computed the same way).
    steady = min(n, max(max(b, up, max(down_credits), 1), max(taken), max(issued) + 1, max(sent)))
    if general:
        steady = n
    for k in range(steady):
        kk = k & mask
        k1 = (k - 1) & mask
        kb = (k - b) & mask
        ku = (k - up) & mask
        prev_out = PAST  # out[j - 1][k]
        for j, ij, dj, oj, dn, dc, gate, width, d_ready, o_ready, tk, iss, snt, held in rows:
            # Down the ramp (from upstream): arrival, one per cycle, a queue slot, teardown.
            if j:
                if k >= tk:
                    d = prev_out + hop
                    if floor > d:
                        d = floor
                    if k and dj[k1] + 1 > d:
                        d = dj[k1] + 1
                    if k >= dc:
                        c = ij[(k - dc) & mask] + lc
                        if c > d:
                            d = c
                    if d_ready > d:
                        d = d_ready
                    dj[kk] = d
                else:
                    dj[kk] = PAST
                ready = dj[kk] + lr  # (in the CE's queue)
            else:
                ready = gate
            if k >= iss:
                # The CE: gate, input, up-ramp credit; the same issue as k - 1 if it has room.
                if ready < gate:
                    ready = gate
                if ready < floor:
                    ready = floor
                if oj is not None and k >= up and oj[ku] + lc > ready:
                    ready = oj[ku] + lc
                p = ij[k1] if k else PAST
                if p != PAST and ready <= p and in_issue[j] < width:
                    ready = p
                    in_issue[j] += 1
                else:
                    if ready < p + 1:
                        ready = p + 1
                    if held is not None:  # (a task holds the slot: wait for its end)
                        for hb, he in held:
                            if hb <= ready < he:
                                ready = he
                    in_issue[j] = 1
                    counts[j] += 1
                ij[kk] = ready
            else:
                ij[kk] = PAST
            # Its router towards the root: arrival, one per cycle, a slot downstream, teardown.
            if oj is not None:
                if k >= snt:
                    o = ij[kk] + lr
                    if floor > o:
                        o = floor
                    if k and oj[k1] + 1 > o:
                        o = oj[k1] + 1
                    if k >= b and dn[kb] + lch > o:  # type: ignore[index]
                        o = dn[kb] + lch  # type: ignore[index]
                    if o_ready > o:
                        o = o_ready
                    oj[kk] = o
                else:
                    oj[kk] = PAST
                prev_out = oj[kk]
    if steady < n:
        _steady_loop(steady, n, mask, rows, in_issue, counts, cfg, floor)
    if not tail_only:
        return ChainSchedule(
            [x[:n] for x in issue], [x[:n] for x in out], [x[:n] for x in down], counts
        )
    keep = min(n, size)
    order = [(k & mask) for k in range(n - keep, n)]

    def tail(x: list[int]) -> list[int]:
        return [x[i] for i in order] if x else x

    return ChainSchedule(
        [tail(x) for x in issue], [tail(x) for x in out], [tail(x) for x in down], counts
    )


def _steady_loop(
    k0: int, n: int, mask: int, rows: list, fill: list[int], counts: list[int],
    cfg: FabricConfig, floor: int,
) -> None:  # fmt: skip
    """:func:`chain_schedule`'s loop for elements ``k0`` to ``n - 1``, where every rule applies
    in full (``k0`` is past each position's elements moved before, and past a credit loop):
    the tests of the general loop that are always true there are left out, and the far end and
    the root are taken out of the loop over the positions in between."""
    lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
    hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
    b, up = cfg.router_buffer_wavelets, cfg.ramp_credits
    _, i0, _, o0, dn0, _, gate0, width0, _, o_ready0, _, _, _, held0 = rows[0]
    mids = rows[1:-1]
    last = len(rows) - 1
    _, ir, dr, _, _, dcr, gater, widthr, d_readyr, _, _, _, _, heldr = rows[last]
    for k in range(k0, n):
        kk = k & mask
        k1 = (k - 1) & mask
        kb = (k - b) & mask
        ku = (k - up) & mask
        # The far end: its gate, its up-ramp credit, then its router.
        ready = gate0
        if ready < floor:
            ready = floor
        x = o0[ku] + lc
        if x > ready:
            ready = x
        p = i0[k1]
        if ready <= p and fill[0] < width0:
            ready = p
            fill[0] += 1
        else:
            if ready <= p:
                ready = p + 1
            if held0 is not None:
                for hb, he in held0:
                    if hb <= ready < he:
                        ready = he
            fill[0] = 1
            counts[0] += 1
        i0[kk] = ready
        o = ready + lr
        if floor > o:
            o = floor
        x = o0[k1] + 1
        if x > o:
            o = x
        x = dn0[kb] + lch
        if x > o:
            o = x
        if o_ready0 > o:
            o = o_ready0
        o0[kk] = o
        prev_out = o
        for j, ij, dj, oj, dn, dc, gate, width, d_ready, o_ready, _, _, _, held in mids:
            d = prev_out + hop
            if floor > d:
                d = floor
            x = dj[k1] + 1
            if x > d:
                d = x
            x = ij[(k - dc) & mask] + lc
            if x > d:
                d = x
            if d_ready > d:
                d = d_ready
            dj[kk] = d
            ready = d + lr
            if ready < gate:
                ready = gate
            if ready < floor:
                ready = floor
            x = oj[ku] + lc
            if x > ready:
                ready = x
            p = ij[k1]
            if ready <= p and fill[j] < width:
                ready = p
                fill[j] += 1
            else:
                if ready <= p:
                    ready = p + 1
                if held is not None:
                    for hb, he in held:
                        if hb <= ready < he:
                            ready = he
                fill[j] = 1
                counts[j] += 1
            ij[kk] = ready
            o = ready + lr
            if floor > o:
                o = floor
            x = oj[k1] + 1
            if x > o:
                o = x
            x = dn[kb] + lch
            if x > o:
                o = x
            if o_ready > o:
                o = o_ready
            oj[kk] = o
            prev_out = o
        # The root: down its ramp, then its issue (into memory).
        d = prev_out + hop
        if floor > d:
            d = floor
        x = dr[k1] + 1
        if x > d:
            d = x
        x = ir[(k - dcr) & mask] + lc
        if x > d:
            d = x
        if d_readyr > d:
            d = d_readyr
        dr[kk] = d
        ready = d + lr
        if ready < gater:
            ready = gater
        if ready < floor:
            ready = floor
        p = ir[k1]
        if ready <= p and fill[last] < widthr:
            ready = p
            fill[last] += 1
        else:
            if ready <= p:
                ready = p + 1
            if heldr is not None:
                for hb, he in heldr:
                    if hb <= ready < he:
                        ready = he
            fill[last] = 1
            counts[last] += 1
        ir[kk] = ready


# -- relay streams (the fast fidelity) ------------------------------------------------------------
class RelayPart(NamedTuple):
    """A compute engine's side of a relay chain: its operation ``op`` (the engine's handle;
    the chain's data comes from its ``values``, or its ``plan``'s memory source and ``elem``),
    free to issue from cycle ``gate``, ``width`` elements per issue, ``down`` down-ramp
    credits for its input colour, arbitration ``key``; ``done`` elements moved so far in
    ``issues`` issue cycles, ``queued`` the wavelets in its input queue; ``up_held`` its up-ramp
    credits for its output colour; ``flow_out`` the trace flow its wavelets carry; ``began``:
    its begin cycle has come."""

    op: Any
    gate: int
    width: int
    down: int
    key: tuple[int, int]
    done: int
    issues: int
    queued: list
    up_held: int
    flow_out: int | None
    began: bool


class RelayEndpoint(ExpressEndpoint, Protocol):
    """A ramp endpoint that can take part in relay chains (besides express streams)."""

    def relay_part(
        self, colour_in: int | None, colour_out: int | None, now: int
    ) -> RelayPart | None:
        """This engine's operation reading ``colour_in`` (None: the far end, reading memory) and
        sending on ``colour_out`` (None: the root, writing memory), if it can be moved as part
        of a relay chain from cycle ``now``: it is the engine's only operation, no express
        stream of its own runs, and no task holds its issue slot past ``gate`` in a way the
        schedule cannot see. None otherwise."""
        ...

    def commit_relay(
        self, part: RelayPart, issues: Any, last: int, count: int, up_after: int, stream: Any,
        flow_in: int | None,
    ) -> None:  # fmt: skip
        """The operation is part of relay ``stream``: its elements from ``part.done`` on issue
        at ``issues`` (an array-like of every element's cycle, the last one ``last``) in
        ``count`` more issue cycles; its up-ramp credits are ``up_after`` once the stream has
        passed (the stream brings the rest home through ``up_credit``); its input queue is the
        stream's; ``flow_in``: the trace flow of the data it reads. The stream completes it
        (``complete_express``) at ``last``."""
        ...


def _route_now(r: Router, colour: int) -> tuple[int, Any]:
    """(cycle its pending writes land or -1, the colour's switch position then), or None's
    position if the colour is unrouted, in teardown after them, or has several positions."""
    ready, route = r.route_at(colour)
    if route is None or route.teardown or len(route.positions) != 1:
        return ready, None
    return ready, route.positions[0]


def _down_link(r: Router, cout: int) -> tuple[Router, Any, Dir] | None:
    """The position after router ``r``'s, which sends on ``cout`` towards the root: (its router,
    the operation registered on its CE reading ``cout``, the port out of ``r``), or None if the
    routes do not make a link (RAMP -> one mesh port on ``r``, that port's opposite -> RAMP on
    the next, single switch position) or no operation reads it there."""
    _, pos = _route_now(r, cout)
    if pos is None or pos.rx != _RAMP_SET or len(pos.tx) != 1 or pos.tx[0] is RAMP:
        return None
    port = pos.tx[0]
    nbr = r.nbr.get(port)
    if not isinstance(nbr, Router):
        return None
    _, npos = _route_now(nbr, cout)
    if npos is None or npos.tx != _TO_RAMP or len(npos.rx) != 1 or port.opposite not in npos.rx:
        return None
    nce = nbr.ce
    q = nce.queue_of_colour.get(cout)  # type: ignore[attr-defined]
    op = nce.ops_in.get(q) if q is not None else None  # type: ignore[attr-defined]
    if op is None:
        return None
    return nbr, op, port


def _up_link(r: Router, cin: int) -> tuple[Router, Any, Dir, int | None] | None:
    """The position before router ``r``'s, which reads ``cin`` from the far end's side: (its
    router, the operation registered on its CE sending ``cin``, its port out, the colour that
    operation reads or None: memory), or None as :func:`_down_link`."""
    _, pos = _route_now(r, cin)
    if pos is None or pos.tx != _TO_RAMP or len(pos.rx) != 1:
        return None
    (port,) = pos.rx
    if port is RAMP:
        return None
    nbr = r.nbr.get(port)
    if not isinstance(nbr, Router):
        return None
    back = port.opposite
    _, npos = _route_now(nbr, cin)
    if npos is None or npos.rx != _RAMP_SET or npos.tx != (back,):
        return None
    nce = nbr.ce
    op = next(
        (o for o in nce.ops_out.values() if o.out_colour == cin),  # type: ignore[attr-defined]
        None,
    )
    if op is None:
        return None
    q = op.fab_in
    cin_up = None if q is None else nce.colour_of_queue.get(q)  # type: ignore[attr-defined]
    if q is not None and cin_up is None:
        return None
    return nbr, op, back, cin_up


def _chain_of(engine: FabricEngine, ce: Any, colour_in: int | None, colour_out: int | None) -> (
    list[tuple[Router, int | None, int | None, Dir | None]] | None
):  # fmt: skip
    """The chain through the compute engine ``ce`` (reading ``colour_in``, sending on
    ``colour_out``), from the far end to the root: per position its router, the colours it
    reads and sends on and the port it sends out of; None if the routes do not make a chain
    (each link as :func:`_down_link`; no filter) or a position's operation is not registered."""
    r0: Router = ce.router
    down: list[tuple[Router, int | None, int | None, Dir | None]] = []
    r, cin, cout = r0, colour_in, colour_out
    seen = {r0.index}
    # downstream (towards the root)
    while cout is not None:
        link = _down_link(r, cout)
        if link is None:
            return None
        nbr, op, port = link
        if nbr.index in seen:
            return None
        down.append((r, cin, cout, port))
        seen.add(nbr.index)
        r, cin, cout = nbr, cout, op.out_colour
    down.append((r, cin, None, None))
    # upstream (towards the far end)
    up: list[tuple[Router, int | None, int | None, Dir | None]] = []
    r, cin = r0, colour_in
    while cin is not None:
        ulink = _up_link(r, cin)
        if ulink is None:
            return None
        nbr, _, back, cin_up = ulink
        if nbr.index in seen:
            return None
        seen.add(nbr.index)
        up.append((nbr, cin_up, cin, back))
        r, cin = nbr, cin_up
    chain = up[::-1] + down
    for r, cin, cout, _ in chain:
        if r.filters and (cin in r.filters or cout in r.filters):
            return None
    return chain


_RAMP_SET = frozenset((RAMP,))
_TO_RAMP = (RAMP,)

# A relay chain's operations find each other as they begin. Each operation's node
# (``op.relay``) is in a union-find group: a stretch of registered operations linked one to
# the next (``_down_link``); its root keeps the stretch's ends (router and colour each side)
# and flags (it holds the far end, the root, or its chain failed a walk). An operation's begin
# extends its group from both ends as far as registered operations go, joining stretches
# found before, and the chain is walked (``_chain_of``) and tried only once the group is the
# whole chain: a few dict reads per begin and one link per operation, where walking the chain
# at every begin cost O(positions) each (O(positions^2) per chain). A whole group whose walk
# fails (an operation of it finished or its routes changed) is not tried again; one that
# fails another way (something on its way, a task in the schedule's way) is tried again at
# its other operations' begins, as before.
_FAR, _ROOT, _DEAD = 1, 2, 4
_WHOLE = _FAR | _ROOT
# a node: [parent or None, flags, far-side router, colour in, root-side router, colour out, size]
_PARENT, _FLAGS, _UP_R, _UP_C, _DOWN_R, _DOWN_C, _SIZE = range(7)


def _find(node: list) -> list:
    """The root of ``node``'s group (halving the path on the way)."""
    while node[0] is not None:
        parent = node[0]
        if parent[0] is not None:
            node[0] = parent[0]
        node = node[0]
    return node


def _merge(up: list, down: list) -> list:
    """Join two groups' roots, ``up`` on the far end's side of ``down``: the new root."""
    top, sub = (up, down) if up[_SIZE] >= down[_SIZE] else (down, up)
    sub[_PARENT] = top
    top[_FLAGS] = up[_FLAGS] | down[_FLAGS]
    top[_UP_R], top[_UP_C] = up[_UP_R], up[_UP_C]
    top[_DOWN_R], top[_DOWN_C] = down[_DOWN_R], down[_DOWN_C]
    top[_SIZE] = up[_SIZE] + down[_SIZE]
    return top


def _group(op: Any, r: Router, colour_in: int | None, colour_out: int | None) -> list:
    """``op``'s group (on router ``r``, reading ``colour_in``, sending on ``colour_out``),
    extended from both ends over the registered operations next to it."""
    node = op.relay
    if node is None:
        flags = (colour_in is None) | ((colour_out is None) << 1)
        node = op.relay = [None, flags, r, colour_in, r, colour_out, 1]
    group = _find(node)
    while not group[_FLAGS] & (_ROOT | _DEAD):  # towards the root
        link = _down_link(group[_DOWN_R], group[_DOWN_C])
        if link is None:
            break
        nbr, nop, _ = link
        c = group[_DOWN_C]
        other = nop.relay
        if other is None:
            cout = nop.out_colour
            other = nop.relay = [None, (cout is None) << 1, nbr, c, nbr, cout, 1]
        else:
            other = _find(other)
            if other is group or other[_UP_R] is not nbr or other[_UP_C] != c:
                break  # (not the next stretch of one chain)
        group = _merge(group, other)
    while not group[_FLAGS] & (_FAR | _DEAD):  # towards the far end
        ulink = _up_link(group[_UP_R], group[_UP_C])
        if ulink is None:
            break
        nbr, nop, _, cin = ulink
        if nop.control_wavelet is not None:
            break  # (a far end's TEARDOWN after its data: no chain to move until it is sent)
        c = group[_UP_C]
        other = nop.relay
        if other is None:
            other = nop.relay = [None, int(cin is None), nbr, cin, nbr, c, 1]
        else:
            other = _find(other)
            if other is group or other[_DOWN_R] is not nbr or other[_DOWN_C] != c:
                break
        group = _merge(other, group)
    return group


def try_relay(engine: FabricEngine, ce: Any, colour_in: int | None, colour_out: int | None,
              now: int) -> bool:  # fmt: skip
    """Commit the relay chain through ``ce`` (an operation of it, the last one
    ``ComputeEngine._begin`` appended to ``ce.ops``, began there at cycle ``now``, during the
    cycle's due actions) if every operation of the chain is registered and the chain has
    nothing on its way (module docstring). True if committed. The chain is walked only once
    its operations' group is whole (see ``_group``)."""
    if engine.detail:
        return False
    group = _group(ce.ops[-1], ce.router, colour_in, colour_out)
    if group[_FLAGS] & (_WHOLE | _DEAD) != _WHOLE:
        return False
    done = _try_chain(engine, ce, colour_in, colour_out, now)
    if done is None:
        group[_FLAGS] |= _DEAD
    return bool(done)


def _try_chain(engine: FabricEngine, ce: Any, colour_in: int | None, colour_out: int | None,
               now: int) -> bool | None:  # fmt: skip
    """:func:`try_relay` on a whole group: None if the routes and registered operations do not
    make a chain now."""
    chain = _chain_of(engine, ce, colour_in, colour_out)
    if chain is None or len(chain) < 2:
        return None
    cfg = engine.cfg
    parts: list[RelayPart] = []
    for r, cin, cout, _ in chain:
        if r.express_until >= now:
            return False
        part = r.ce.relay_part(cin, cout, now)  # type: ignore[attr-defined]
        if part is None:
            return False
        parts.append(part)
    n = parts[0].op.length
    if any(p.op.length != n for p in parts) or parts[0].op.values is None:
        return False
    b, up = cfg.router_buffer_wavelets, cfg.ramp_credits
    m = len(chain)
    issued = [p.done for p in parts]
    sent = [0] * m
    taken = [0] * m
    bufs_out: list[list[Wavelet]] = [[] for _ in range(m)]
    bufs_in: list[list[Wavelet]] = [[] for _ in range(m)]
    for j in range(m - 1):
        r, _, cout, port = chain[j]
        r2 = chain[j + 1][0]
        a = r.bufs.get((RAMP, cout)) or []
        bb = r2.bufs.get((port.opposite, cout)) or []  # type: ignore[union-attr]
        q = parts[j + 1].queued
        # nothing on its way: every credit loop of the link is whole
        if parts[j].up_held + len(a) != up:
            return False
        if r.credit(port, cout) + len(bb) != b:  # type: ignore[arg-type]
            return False
        if r2.credit(RAMP, cout) + len(q) != parts[j + 1].down:  # type: ignore[arg-type]
            return False
        if any(w.ctrl for w in a) or any(w.ctrl for w in bb) or any(w.ctrl for w in q):
            return False
        sent[j] = issued[j] - len(a)
        taken[j + 1] = sent[j] - len(bb)
        if taken[j + 1] - len(q) != issued[j + 1]:
            return False
        bufs_out[j], bufs_in[j + 1] = a, bb
    for j, (r, _, _, _) in enumerate(chain):
        keys = len(bufs_out[j]) + len(bufs_in[j])
        if r.buffered != keys:
            return False  # other traffic waits there
    out_ready = [_route_now(r, cout)[0] if cout is not None else -1 for r, _, cout, _ in chain]
    down_ready = [_route_now(r, cin)[0] if cin is not None else -1 for r, cin, _, _ in chain]
    sched = chain_schedule(
        n, [p.gate for p in parts], [p.width for p in parts], [p.down for p in parts], cfg,
        out_ready=out_ready, down_ready=down_ready, issued=issued, sent=sent, taken=taken,
        floor=now, tail_only=True,
    )  # fmt: skip
    inputs = np.array(
        [[p.gate for p in parts], [p.width for p in parts], [p.down for p in parts], out_ready,
         down_ready, issued, sent, taken, [p.issues for p in parts]],
        np.int64,
    )  # fmt: skip
    _commit_relay(engine, chain, parts, sched, inputs, bufs_out, bufs_in, now)
    return True


def _operands(op: Any) -> tuple[np.ndarray, bool]:
    """A relay's or the root's memory source and whether the fabric value comes first (the
    operation's plan, ``pe/task.py``)."""
    plan = op.plan
    fabric_first = plan[0][0] == "f"
    return (plan[1][1] if fabric_first else plan[0][1]), fabric_first


def _sums(ops: list[Any], issued: list[int], known: dict[int, list[float]], n: int) -> (
    list[np.ndarray]
):  # fmt: skip
    """What each position sends (the root: writes), as FP32: the far end its buffer; position
    ``j`` ``fp32(in + mem_j)`` in the operation's operand order, ``in`` being what ``j - 1``
    sent (``known[j]``: the values still on their way to ``j`` at the commit, from element
    ``issued[j]``). numpy's FP32 add is the engine's rounding for every finite input; any
    other input takes the engine's own element function."""
    out: list[np.ndarray] = [np.asarray(ops[0].values, np.float32)]
    if not known and not any(issued):
        # A chain that has moved nothing: element k is the FP32 sum in chain order, which
        # add.accumulate gives in one call (its steps are sequential FP32 adds)
        rows = [out[0][:n]] + [np.asarray(_operands(op)[0], np.float32)[:n] for op in ops[1:]]
        table = np.stack(rows)
        if np.isfinite(table).all():
            with np.errstate(over="ignore"):
                sums = np.add.accumulate(table, axis=0, dtype=np.float32)
            if np.isfinite(sums).all():
                return [out[0], *sums[1:]]  # (rows of one table)
    for j in range(1, len(ops)):
        op = ops[j]
        k0 = issued[j]
        got = known.get(j, ())
        inp = np.zeros(n, np.float32)
        inp[k0 : k0 + len(got)] = got
        start = k0 + len(got)
        inp[start:] = out[j - 1][start:]
        if got:  # (what j - 1 sent before the commit, for a hand-back's wavelets)
            sent = out[j - 1] = out[j - 1].copy()
            sent[k0:start] = got
        mem, fabric_first = _operands(op)
        mem = np.asarray(mem, np.float32)[:n]
        if np.isfinite(inp[k0:]).all() and np.isfinite(mem[k0:]).all():
            with np.errstate(over="ignore"):
                res = np.add(inp, mem) if fabric_first else np.add(mem, inp)
        else:
            res = np.zeros(n, np.float32)
            elem = op.elem
            for k in range(k0, n):
                res[k] = elem(float(inp[k]), k)
        out.append(res)
    return out


def _after(times: list[int], lat: int, last: int, count: int) -> list[int]:
    """The returns (``times`` + ``lat``) of the last ``count`` elements still to come after
    cycle ``last``."""
    tail = times[-count:]
    if isinstance(tail, np.ndarray):
        tail = tail.tolist()
    return [u + lat for u in tail if u + lat > last]


def _tails(
    cfg: FabricConfig,
    chain: list[tuple[Router, int | None, int | None, Dir | None]],
    downs: list[int],
    sched: ChainSchedule,
) -> list[tuple[Any, tuple[Any, ...], list[int]]]:
    """The credits still on their way back once each link's last wavelet has passed, per
    link: the sender's up-ramp credits after its last issue, its router's hop credits after
    its last send, the receiver's router's down-ramp credits after its last delivery."""
    out: list[tuple[Any, tuple[Any, ...], list[int]]] = []
    for j in range(len(chain) - 1):
        out += _link_tails(cfg, chain, downs, sched, j)
    return out


def _link_tails(
    cfg: FabricConfig,
    chain: list[tuple[Router, int | None, int | None, Dir | None]],
    downs: list[int],
    sched: ChainSchedule,
    j: int,
) -> list[tuple[Any, tuple[Any, ...], list[int]]]:
    lc, lch = cfg.ramp_credit_latency_cycles, cfg.hop_credit_latency_cycles
    b, up = cfg.router_buffer_wavelets, cfg.ramp_credits
    r, _, c, port = chain[j]
    r2 = chain[j + 1][0]
    o = sched.out[j]
    last_down = int(sched.down[j + 1][-1])
    return [
        (r.ce.up_credit, (c,), _after(o, lc, int(sched.issue[j][-1]), up)),
        (r.return_credit, (port, c), _after(sched.down[j + 1], lch, int(o[-1]), b)),
        (r2.ramp_credit, (c,), _after(sched.issue[j + 1], lc, last_down, downs[j + 1])),
    ]


def _commit_relay(
    engine: FabricEngine,
    chain: list[tuple[Router, int | None, int | None, Dir | None]],
    parts: list[RelayPart],
    sched: ChainSchedule,
    inputs: np.ndarray,
    bufs_out: list[list[Wavelet]],
    bufs_in: list[list[Wavelet]],
    now: int,
) -> None:
    cfg = engine.cfg
    b, up = cfg.router_buffer_wavelets, cfg.ramp_credits
    n = parts[0].op.length
    m = len(chain)
    issued, sent, taken = inputs[5].tolist(), inputs[6].tolist(), inputs[7].tolist()
    done = engine.express_done
    if done is None:
        done = engine.express_done = Completions(engine)
    known: dict[int, list[float]] = {}
    for j in range(1, m):
        got = (
            [w.data for w in parts[j].queued]
            + [w.data for w in bufs_in[j]]
            + [w.data for w in bufs_out[j - 1]]
        )
        if got:
            known[j] = got
    ops = [p.op for p in parts]
    for op in ops:
        op.relay = None  # (its group is the stream now)
    stream = RelayStream(engine, chain, ops, inputs, known, now)
    issued_list = inputs[5].tolist()
    root_values = _sums(ops, issued_list, known, n)[-1].copy()  # (the rest is not kept)
    if issued_list[-1]:
        root_values[: issued_list[-1]] = parts[-1].op.out_view[: issued_list[-1]]
    lasts = stream.lasts
    tails = _tails(cfg, chain, inputs[2].tolist(), sched)
    for _, _, times in tails:
        stream.tail_times.extend(times)
        stream.tail_at.append(len(stream.tail_times))
    rr_old = stream.rr
    for j, (r, cin, cout, port) in enumerate(chain):
        part = parts[j]
        issue = sched.issue[j]
        last_issue = issue[-1]
        up_after = 0
        last = -1
        if cout is not None:
            up_after = up - len(tails[3 * j][2])
            r.credits[(port, cout)] = b - len(tails[3 * j + 1][2])  # type: ignore[index]
            r2 = chain[j + 1][0]
            r2.credits[(RAMP, cout)] = parts[j + 1].down - len(tails[3 * j + 2][2])
            key = (RAMP, cout)
            buf = r.bufs.get(key)
            if buf:
                r.buffered -= len(buf)
                del buf[:]
            r.pending.pop(key, None)
            r.forwarded += n - sent[j]
            rr_old[2 * j] = r.rr[port]  # type: ignore[index]
            r.rr[port] = cout  # type: ignore[index]
            last = sched.out[j][-1]
            lasts[2 * j] = last
        if cin is not None:
            key = (chain[j - 1][3].opposite, cin)  # type: ignore[union-attr]
            buf = r.bufs.get(key)
            if buf:
                r.buffered -= len(buf)
                del buf[:]
            r.pending.pop(key, None)
            r.forwarded += n - taken[j]
            rr_old[2 * j + 1] = r.rr[RAMP]
            r.rr[RAMP] = cin
            d = sched.down[j][-1]
            lasts[2 * j + 1] = d
            if d > last:
                last = d
        r.express_until = last
        r.express_colour = cout if cout is not None else -1
        r.express_colour_in = cin if cin is not None else -1
        r.express_busy = _busy(port, cin is not None)
        r.express_stream = stream
        if r.future:
            for c, (ready, _) in r.future.items():
                stream.written[r.index * 64 + c] = ready  # (one int key: see express._key)
        flow_in = parts[j - 1].flow_out if j else None
        issues = sched.counts[j]
        r.ce.commit_relay(part, _Issues(stream, j), last_issue, issues, up_after, stream, flow_in)  # type: ignore[attr-defined]
    # The events each position still owes, in time order (a completion by its CE's index,
    # as the engines' steps go): at its router's last delivery down the ramp (the far end: its
    # last issue) the credits still away then are scheduled, and at its last issue the
    # operation completes. One is pending at a time, so a moving chain holds few due actions.
    tail_at = [sched.down[j][-1] if j else sched.issue[0][-1] for j in range(m)]
    ends = [sched.issue[j][-1] for j in range(m)]
    cycles = np.array(tail_at + ends, np.int64)
    rank = np.array([-1] * m + [r.ce.index for r, _, _, _ in chain], np.int64)
    stream.order = array("q", np.lexsort((rank, cycles)).tolist())
    stream.cycles = array("q", cycles.tolist())
    stream.root_values = root_values
    stream.pending = done.add(int(cycles[stream.order[0]]), stream._event)
    engine.relay_streams += 1
    engine.relay_elements += sum(n - k for k in issued)


_BUSY: dict[tuple[Dir | None, bool], dict[Dir, bool]] = {}


def _busy(port: Dir | None, down: bool) -> dict[Dir, bool]:
    """The ports a position's router lends the chain (``Router.express_busy``, read for
    membership only): one shared dict per combination, not one per router."""
    busy = _BUSY.get((port, down))
    if busy is None:
        busy = _BUSY[(port, down)] = dict.fromkeys(
            ([port] if port is not None else []) + ([RAMP] if down else []), True
        )
    return busy


class _Issues:
    """The issue cycles of position ``j`` of a relay (what ``ComputeEngine.express_issue``
    holds, read only when another operation or a task meets the relay on that CE): computed
    again from the stream's inputs when first read, so that a moving chain keeps no array per
    element. ``last``: the last one."""

    __slots__ = ("j", "stream")

    def __init__(self, stream: RelayStream, j: int) -> None:
        self.stream = stream
        self.j = j

    def _array(self) -> np.ndarray:
        return self.stream.schedule().issue[self.j]

    def __len__(self) -> int:
        return len(self._array())

    def __getitem__(self, k: Any) -> Any:
        return self._array()[k]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._array(), name)


class RelayStream:
    """A committed relay chain: what it needs to hand its remaining work back to the wavelet
    path (:meth:`hand_back`, as :class:`fabric.express.ExpressStream`'s). It keeps the
    schedule's inputs, not the schedule: a chain's schedule and data are computed again, the
    same, when a hand-back or an operation meeting it on a CE needs them (few chains are), so a
    moving chain costs a few objects per position and none per element."""

    __slots__ = (
        "_cache", "at", "behind", "cycles", "engine", "floor", "holds", "inputs", "known",
        "lasts", "live", "meta", "ops", "order", "pending", "root_values", "routers", "rr",
        "tail_at", "tail_times", "written",
    )  # fmt: skip

    def __init__(
        self,
        engine: FabricEngine,
        chain: list[tuple[Router, int | None, int | None, Dir | None]],
        ops: list[Any],
        inputs: np.ndarray,
        known: dict[int, list[float]],
        floor: int,
    ) -> None:
        self.engine = engine
        # the chain, packed: per position its router, and its colours in, out and port out
        # (-1: none) three ints to a position
        self.routers = [r for r, _, _, _ in chain]
        self.meta = array("q")
        for _, cin, cout, port in chain:
            self.meta.extend((
                -1 if cin is None else cin, -1 if cout is None else cout,
                -1 if port is None else int(port),
            ))  # fmt: skip
        self.ops = ops  # per position, the CE's operation
        # gates, widths, down credits, out_ready, down_ready, issued, sent, taken and the
        # issue cycles before the commit (per position)
        self.inputs = inputs
        self.known = known  # per position: the data on its way to it at the commit
        self.floor = floor
        self.live = True
        m = len(chain)
        # per position: its router's last send towards the root and down its ramp (-1: none)
        self.lasts = array("q", [-1]) * (2 * m)
        # per position: the round-robin pointers of those two ports before the commit
        self.rr = array("q", [-1]) * (2 * m)
        self.behind: list[tuple[Router, Dir, Any, int]] = []
        self.written: dict[int, int] = {}
        self._cache: tuple[ChainSchedule, list[np.ndarray]] | None = None
        # its events (see _commit_relay): cycles, their order, the next one's place, the
        # pending Completions entry, the root's sums
        self.cycles = array("q")
        self.order = array("q")
        self.at = 0
        self.pending: Any = None
        self.root_values: np.ndarray | None = None
        # the tail credits' cycles, per link and kind (up, hop, down: see _tails), flat
        self.tail_times = array("q")
        self.tail_at = array("q", [0])
        # per position, the cycles a task held its CE's issue slot while the chain moved
        # (see task_holds); part of the schedule's inputs
        self.holds: dict[int, list[tuple[int, int]]] | None = None

    def link(self, j: int) -> tuple[Router, int | None, int | None, Dir | None]:
        """Position ``j``: its router, the colours it reads and sends on, its port out."""
        meta = self.meta
        cin, cout, port = meta[3 * j], meta[3 * j + 1], meta[3 * j + 2]
        return (
            self.routers[j], None if cin < 0 else cin, None if cout < 0 else cout,
            None if port < 0 else Dir(port),
        )  # fmt: skip

    def chain(self) -> list[tuple[Router, int | None, int | None, Dir | None]]:
        """:meth:`link` of every position."""
        return [self.link(j) for j in range(len(self.routers))]

    def _event(self) -> None:
        """The chain's next event (run in the Completions step of its cycle), and any others of
        the same cycle; then the next one is made pending."""
        cycles, order, m = self.cycles, self.order, len(self.routers)
        now = cycles[order[self.at]]
        engine = self.engine
        while self.at < len(order) and cycles[order[self.at]] == now:
            e = order[self.at]
            self.at += 1
            if e < m:
                self._schedule_tails(e)
            else:
                j = e - m
                r = self.routers[j]
                r.ce.complete_express(  # type: ignore[attr-defined]
                    self.ops[j], self.root_values if j == m - 1 else None
                )
        if self.at < len(order):
            self.pending = engine.express_done.add(cycles[order[self.at]], self._event)
        else:
            self.pending = None
            self.root_values = None

    def _tails_of(self, j: int) -> list[tuple[Any, tuple[Any, ...], list[int]]]:
        """Position ``j``'s credits still on their way back after its last wavelets (its
        link's up-ramp and hop credits, the down-ramp credits of the link into it): (action,
        arguments, cycles), as the commit computed them (``tail_times``)."""
        times, at = self.tail_times, self.tail_at
        out: list[tuple[Any, tuple[Any, ...], list[int]]] = []
        if j < len(self.routers) - 1:
            r, _, c, port = self.link(j)
            i = 3 * j
            out.append((r.ce.up_credit, (c,), times[at[i] : at[i + 1]].tolist()))
            out.append((r.return_credit, (port, c), times[at[i + 1] : at[i + 2]].tolist()))
        if j:
            r, c = self.routers[j], self.meta[3 * j]
            i = 3 * (j - 1) + 2
            out.append((r.ramp_credit, (c,), times[at[i] : at[i + 1]].tolist()))
        return out

    def _schedule_tails(self, j: int) -> None:
        """Schedule position ``j``'s tail credits (each after this cycle)."""
        at_each = self.engine.sched.at_each
        for fn, args, times in self._tails_of(j):
            if times:
                at_each(times, fn, *args)

    def schedule(self) -> ChainSchedule:
        """The chain's schedule (int64 arrays), computed again from its inputs."""
        if self._cache is None:
            self._compute()
        return self._cache[0]  # type: ignore[index]

    def values(self) -> list[np.ndarray]:
        """What each position sends (the root: writes), as FP32."""
        if self._cache is None:
            self._compute()
        return self._cache[1]  # type: ignore[index]

    def _compute(self) -> None:
        g, w, d, o_r, d_r, issued, sent, taken, _ = (x.tolist() for x in self.inputs)
        ops = self.ops
        n = ops[0].length
        s = chain_schedule(
            n, g, w, d, self.engine.cfg, out_ready=o_r, down_ready=d_r, issued=issued,
            sent=sent, taken=taken, floor=self.floor, holds=self.holds,
        )  # fmt: skip
        sched = ChainSchedule(
            [np.asarray(x, np.int64) for x in s.issue],
            [np.asarray(x, np.int64) for x in s.out],
            [np.asarray(x, np.int64) for x in s.down],
            s.counts,
        )
        values = _sums(ops, issued, self.known, n)
        if issued[-1]:
            values[-1][: issued[-1]] = ops[-1].out_view[: issued[-1]]
        self._cache = (sched, values)

    def _until(self, r: Router, colour: int, lasts: Any = None) -> int:
        j = self.routers.index(r)
        lasts = self.lasts if lasts is None else lasts
        if colour == self.meta[3 * j + 1]:
            return lasts[2 * j]
        if colour == self.meta[3 * j]:
            return lasts[2 * j + 1]
        return -1

    def task_holds(self, ce: Any, begin: int, end: int) -> bool:
        """A task dispatched now on ``ce``, one of the chain's compute engines, holds its issue
        slot over cycles ``[begin, end)`` while the chain's operation there, below the main
        thread, still has elements to issue: on the wavelet path that operation issues none
        there and goes on at ``end``. The chain takes the hold into its schedule (``holds``,
        :func:`chain_schedule`) and goes on as a relay, where it was handed back before.

        Exact: a hold only delays, so every cycle of the schedule before ``begin`` (after the
        current one) is the same with it as without, and what the chain has done so far
        stands; what depends on the later cycles is written again from the new schedule: the
        positions' completions and tail credits (those already scheduled moved), the credit
        counts they leave (by the difference in credits still to come), the routers' and CEs'
        windows, the wavelets held behind the chain, each operation's issue count. False if
        the hold cannot be taken (it begins now, or an event of the chain is due now): the
        caller hands the chain back."""
        engine = self.engine
        now = engine.now_cycle()
        if not self.live or begin <= now:
            return False
        if end <= begin:
            return True  # (an empty hold: the wavelet path's CE is never held either)
        order, at = self.order, self.at
        if at >= len(order) or self.cycles[order[at]] <= now:
            return False
        r0 = ce.router
        if r0 not in self.routers:
            return False
        j = self.routers.index(r0)
        holds = self.holds
        if holds is None:
            holds = self.holds = {}
        held = holds.setdefault(j, [])
        held.append((begin, end))
        held.sort()
        self._replan(now)
        return True

    def _replan(self, now: int) -> None:
        """The schedule computed again with ``holds`` (see :meth:`task_holds`), at cycle
        ``now``: everything after ``now`` that the commit wrote from the schedule, again."""
        engine = self.engine
        cfg = engine.cfg
        m = len(self.routers)
        chain = self.chain()
        self._cache = None
        sched = self.schedule()
        tails = _tails(cfg, chain, self.inputs[2].tolist(), sched)
        old_times, old_at = self.tail_times, self.tail_at
        old_cycles, old_lasts = self.cycles, self.lasts[:]
        due = engine.sched.due
        ran = [old_cycles[j] <= now for j in range(m)]  # (its tails are scheduled)
        # The tails already scheduled that come after now: out of their cycles' due lists.
        for j in range(m):
            if ran[j]:
                for fn, args, times in self._tails_of(j):
                    action = (fn, args)
                    for u in times:
                        if u > now:
                            due[u].remove(action)
        # The credit counts: the credits still to come after now, before and after.
        for i, (_, _, times) in enumerate(tails):
            before = sum(1 for u in old_times[old_at[i] : old_at[i + 1]] if u > now)
            delta = before - sum(1 for u in times if u > now)
            if delta:
                j, kind = divmod(i, 3)
                r, _, c, port = chain[j]
                if kind == 0:
                    r.ce.up_credits[c] += delta  # type: ignore[attr-defined]
                elif kind == 1:
                    r.credits[(port, c)] += delta  # type: ignore[index]
                else:
                    chain[j + 1][0].credits[(RAMP, c)] += delta  # type: ignore[index]
        self.tail_times = array("q")
        self.tail_at = array("q", [0])
        for _, _, times in tails:
            self.tail_times.extend(times)
            self.tail_at.append(len(self.tail_times))
        at_each = engine.sched.at_each
        for j in range(m):
            if ran[j]:
                for fn, args, times in self._tails_of(j):
                    later = [u for u in times if u > now]
                    if later:
                        at_each(later, fn, *args)
        # The windows: the routers' last sends and deliveries, the CEs' last issues.
        lasts = self.lasts
        pre = self.inputs[8].tolist()
        for j, (r, cin, cout, _) in enumerate(chain):
            last = old = -1
            if cout is not None:
                lasts[2 * j] = last = int(sched.out[j][-1])
                old = old_lasts[2 * j]
            if cin is not None:
                d = lasts[2 * j + 1] = int(sched.down[j][-1])
                if d > last:
                    last = d
                if old_lasts[2 * j + 1] > old:
                    old = old_lasts[2 * j + 1]
            if last != old and r.express_stream is self:
                r.express_until = last
            ce = r.ce
            last_issue = int(sched.issue[j][-1])
            if ce.express_stream is self and ce.express_until != last_issue:  # type: ignore[attr-defined]
                ce.express_until = last_issue  # type: ignore[attr-defined]
            self.ops[j].issues = pre[j] + sched.counts[j]
        # What waits behind the chain lands after its new last wavelet there.
        for item in self.behind:
            r, _, _, colour = item
            was, until = self._until(r, colour, old_lasts), self._until(r, colour)
            if was != until:
                due[was + 1].remove((self._behind_lands, (item,)))
                engine.at(until + 1, self._behind_lands, item)
        # The events, in time order again; those up to now have run (all of them: no event
        # is due now, see task_holds), the next one is made pending.
        tail_at = [int(sched.down[j][-1]) if j else int(sched.issue[0][-1]) for j in range(m)]
        ends = [int(sched.issue[j][-1]) for j in range(m)]
        cycles = np.array(tail_at + ends, np.int64)
        rank = np.array([-1] * m + [r.ce.index for r in self.routers], np.int64)
        self.order = array("q", np.lexsort((rank, cycles)).tolist())
        self.cycles = array("q", cycles.tolist())
        self.at = int(np.count_nonzero(cycles <= now))
        done = engine.express_done
        if self.pending is not None:
            u, entry = self.pending
            done.due[u].remove(entry)
        self.pending = done.add(int(cycles[self.order[self.at]]), self._event)
        engine.relay_holds += 1  # (bumps the epoch: credits were edited, as at a commit)
        self._cache = None  # (a moving chain keeps no schedule: computed again when read)

    def hold_behind(self, r: Router, port: Dir, w: Any, colour: int) -> bool:
        """A wavelet of one of the chain's colours reached ``r`` while the chain still moves
        that colour there (the TEARDOWN a position sends behind its data): it queues after the
        chain's last wavelet there. False if the colour's part there is over."""
        until = self._until(r, colour)
        if until < self.engine.now_cycle():
            return False
        item = (r, port, w, colour)
        self.behind.append(item)
        self.engine.at(until + 1, self._behind_lands, item)
        return True

    def _behind_lands(self, item: tuple[Router, Dir, Any, int]) -> None:
        if self.live:
            self.behind.remove(item)
            r, port, w, colour = item
            r.receive(port, colour, w)

    def written_is_planned(self, r: Router, colour: int, t: int) -> bool:
        return t <= self.written.get(r.index * 64 + colour, -1)

    def hand_back(self, t: int) -> None:
        """Give the chain's remaining work back to the wavelet path from cycle ``t`` (see
        :meth:`fabric.express.ExpressStream.hand_back`)."""
        if not self.live:
            return
        engine = self.engine
        if t <= engine.now_cycle():
            engine.express_done.pending.append(self)
            engine.routers_group.active[Completions.index] = engine.express_done
            return
        self._hand_back(t)

    def _hand_back(self, t: int) -> None:
        if not self.live:
            return
        self.live = False
        engine = self.engine
        engine.relay_handbacks += 1
        cfg = engine.cfg
        now = engine.now_cycle()
        due = engine.sched.due
        sched = self.schedule()
        values = self.values()
        self._cache = None
        chain, ops = self.chain(), self.ops
        m = len(chain)
        for j in range(m):
            if self.cycles[j] < t:  # (its tails were scheduled)
                for fn, args, times in self._tails_of(j):
                    action = (fn, args)
                    for u in times:
                        if u > now:
                            due[u].remove(action)
        if self.pending is not None:
            u, entry = self.pending
            engine.express_done.due[u].remove(entry)
            self.pending = None
        self.root_values = None
        hop, lch = cfg.hop_latency_cycles, cfg.hop_credit_latency_cycles
        lr, lc = cfg.ramp_latency_cycles, cfg.ramp_credit_latency_cycles
        b, up = cfg.router_buffer_wavelets, cfg.ramp_credits
        at = engine.at
        m = len(chain)
        n = ops[0].length
        issue, outs, downs = sched.issue, sched.out, sched.down
        issued, sent, taken, pre_issues = (x.tolist() for x in self.inputs[5:9])
        downs_in = self.inputs[2].tolist()

        def before(a: np.ndarray, shift: int) -> int:
            return int(a.searchsorted(t - shift, "left"))

        def landed(a: np.ndarray, shift: int) -> int:
            return int(a.searchsorted(now - shift, "right"))

        def wavelets(j: int, lo: int, hi: int) -> list[Wavelet]:
            flow = ops[j].flow_out
            vals = values[j]
            return [Wavelet(float(vals[k]), flow=flow) for k in range(lo, hi)]

        touched: list[Router] = []
        queued: list[list[Wavelet]] = [[] for _ in range(m)]
        up_held: list[int] = [0] * m
        for j in range(m - 1):
            r, _, c, port = chain[j]
            r2 = chain[j + 1][0]
            ce, ce2 = r.ce, r2.ce
            A, OUT, D, I2 = issue[j], outs[j], downs[j + 1], issue[j + 1]
            ks = before(A, 0)
            lu = landed(A, lr)
            for k, w in zip(range(lu, ks), wavelets(j, lu, ks), strict=True):
                at(int(A[k]) + lr, r.receive, RAMP, c, w)
            fwd = before(OUT, 0)
            if lu > fwd:
                r.hold_first(RAMP, c, wavelets(j, fwd, lu))
            home = landed(OUT, lc)
            for k in range(home, fwd):
                at(int(OUT[k]) + lc, ce.up_credit, c)
            up_held[j] = up - (ks - home)
            arr = landed(OUT, hop)
            back_port = port.opposite  # type: ignore[union-attr]
            for k, w in zip(range(arr, fwd), wavelets(j, arr, fwd), strict=True):
                at(int(OUT[k]) + hop, r2.receive, back_port, c, w)
            dfwd = before(D, 0)
            if arr > dfwd:
                r2.hold_first(back_port, c, wavelets(j, dfwd, arr))
            back = landed(D, lch)
            for k in range(back, dfwd):
                at(int(D[k]) + lch, r.return_credit, port, c)
            r.credits[(port, c)] = b - (fwd - back)  # type: ignore[index]
            delivered = landed(D, lr)
            for k, w in zip(range(delivered, dfwd), wavelets(j, delivered, dfwd), strict=True):
                at(int(D[k]) + lr, ce2.fabric_deliver, c, w)
            popped = before(I2, 0)
            queued[j + 1] = wavelets(j, popped, delivered)
            dback = landed(I2, lc)
            for k in range(dback, popped):
                at(int(I2[k]) + lc, r2.ramp_credit, c)
            r2.credits[(RAMP, c)] = downs_in[j + 1] - (dfwd - dback)
            r.forwarded -= n - fwd
            r2.forwarded -= n - dfwd
            if fwd == sent[j]:
                r.rr[port] = self.rr[2 * j]  # type: ignore[index]
            if dfwd == taken[j + 1]:
                r2.rr[RAMP] = self.rr[2 * j + 3]
        for j in range(m):
            r, _, cout, _ = chain[j]
            A = issue[j]
            ks = before(A, 0)
            k0 = issued[j]
            issues = pre_issues[j] + (
                int(np.count_nonzero(np.diff(A[k0:ks]))) + 1 if ks > k0 else 0
            )
            adjust = 0
            if cout is not None:
                adjust = up_held[j] - r.ce.up_credit_count(cout)  # type: ignore[attr-defined]
            r.ce.express_hand_back(  # type: ignore[attr-defined]
                self, ops[j], ks, issues, t, values[j] if j == m - 1 else None, adjust,
                queued[j],
            )  # fmt: skip
            if r.express_stream is self:
                r.express_until = -1
                r.express_colour = -1
                r.express_colour_in = -1
                r.express_busy = {}
                r.express_stream = None
            touched.append(r)
        for r, port, w, colour in self.behind:
            r.hold_last(port, colour, w)
        self.behind = []
        for r in touched:
            if r.buffered:
                if t <= now:
                    engine.activate_router(r)
                else:
                    at(t, engine.activate_router, r)
