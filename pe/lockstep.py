"""A lock-step phase: two broadcast colours moved by one stepper, with the engine's own rules.

SUMMA's x and y broadcasts share every PE's down-ramp port, so they are never express streams
and run wavelet by wavelet: each wavelet and hop costs a router step, two sends and a credit
through the scheduler, the CE's delivery, issue and ramp credit (~46 Python calls). Between two
steps the fabric is silent (docs/summa.md, "The phase's window, measured"), so a step's
broadcasts can be moved by one stepper that owns the data movement of the program's broadcast
colours on every router and compute engine while they run. It applies, cycle by cycle, the
rules of :meth:`fabric.engine.Router.step` and :meth:`pe.ce.ComputeEngine.step` for what these
colours carry (plain memory <-> fabric moves and the TEARDOWN behind each stream) on compact
state: a wavelet is its sequence number in its stream, and the data lands when a receive
completes. Credits, round-robin pointers, routes, counters and the tasks are the real ones, so
nothing is written back when the phase ends.

Entry (:meth:`LockstepPhase.take`, called when an operation begins on a compute engine): the
operation is a plain move or a control send on one of the colours, and the fabric is silent
(no wavelet buffered or queued anywhere, every credit home, no async operation running, no
express stream, no wavelet filter on the colours). From then on every operation that begins is
the phase's (anything else is a programming error of the opt-in, raised). The phase ends when
nothing it moves is left (no operation, no wavelet, no credit on its way).

What the engine does in a cycle the phase does in the same order: deliveries and credits due
this cycle (the scheduler's own due actions, such as posted route writes landing and
operations beginning, run before the phase's step), then the routers' sends, then the compute
engines' issues. Everything it does to the world outside (operation completions through the
CE's ``_finish``, teardown signals, tasks) goes through the same calls at the same cycles.

It differs from the wavelet path only in ``Router.stall_cycles``, a diagnostic no metric reads:
the engine counts a blocked port each time it steps a router, the phase each cycle.

Opt-in: a workload that knows its program uses the colours only for such broadcasts while they
run sets ``engine.lockstep = LockstepPhase(wafer, colours)`` (SUMMA does, see
:mod:`workloads.wafer.summa`); the fast fidelity only, traces off.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from fabric.routes import Dir, RouteError
from pe.ce import MAIN_THREAD_RANK

if TYPE_CHECKING:
    from fabric.engine import Router
    from pe.ce import ComputeEngine
    from pe.ops import AsyncOp

RAMP = Dir.RAMP
OPPOSITE = {d: d.opposite for d in Dir}
TOKEN = -1  # the sequence number of a stream's control wavelet (its TEARDOWN)
RETRY_CYCLES = 256  # after the fabric was found busy, cycles before entry is looked at again


class _Entry:
    """One (router, colour) input buffer. A wavelet is a tuple (the send operation whose
    stream it belongs to, its sequence number or ``TOKEN``, the control wavelet or None), made
    once when its sender issues it."""

    __slots__ = ("buf", "pend", "src")

    def __init__(self) -> None:
        self.buf: deque[tuple] = deque()
        self.pend: list[Dir] | None = None  # ports the head still has to go out of
        self.src: Dir | None = None  # the input port the buffered wavelets came through


class LockstepPhase:
    """See the module docstring. ``colours``: the broadcast colours the phase moves."""

    index = -1  # stepped first in the routers group (its work has its own order inside)

    def __init__(self, wafer: Any, colours: tuple[int, ...]) -> None:
        self.wafer = wafer
        self.engine = wafer.engine
        self.sched = wafer.engine.sched
        self.colours = frozenset(colours)
        self.on = False
        self.due: dict[int, list[tuple]] = {}
        self.entries: dict[tuple[int, int], _Entry] = {}
        self.busy_routers: dict[int, Router] = {}  # routers holding phase wavelets
        self.queues: dict[tuple[int, int], deque[tuple]] = {}  # (CE index, colour) -> queue
        self.ops: dict[int, list[AsyncOp]] = {}  # CE index -> the phase's running operations
        self.ces: dict[int, ComputeEngine] = {}
        self.phases = 0  # phases run
        self.wavelets = 0  # wavelets the phase moved through a router
        self._retry_at = -1  # after a refusal, the next cycle entry is looked at again

    # -- entry -----------------------------------------------------------------------------------
    def _kind(self, op: AsyncOp) -> str | None:
        """'recv', 'send' or 'ctrl' for an operation the phase can move, else None."""
        if op.fab_in is not None:
            ce = op.ce
            colour = ce.colour_of_queue.get(op.fab_in)
            if colour in self.colours and op.func is None and op.out_view is not None:
                return "recv"
            return None
        if op.out_colour in self.colours:
            if op.control_wavelet is not None:
                return "ctrl"
            if op.values is not None:
                return "send"
        return None

    def _silent(self, now: int) -> bool:
        engine = self.engine
        if engine.detail:
            return False
        buf = engine.cfg.router_buffer_wavelets
        home = self.wafer.cfg.fabric.ramp_credits
        for r in engine.routers:
            if r.buffered or r.express_until >= now or any(c in r.filters for c in self.colours):
                return False
            for (port, colour), c in r.credits.items():
                full = r.ce.down_credits(colour) if port is RAMP else buf
                if c != full:
                    return False
        for pe in self.wafer.pes.values():
            ce = pe.ce
            if ce.ops or ce.express_until >= now or ce.trace_level:
                return False
            if any(ce.in_queues) or any(c != home for c in ce.up_credits.values()):
                return False
        return True

    def take(self, ce: ComputeEngine, op: AsyncOp) -> bool:
        """``op`` begins on ``ce`` now: True if the phase moves it (see the module docstring)."""
        kind = self._kind(op)
        now = self.engine.now_cycle()
        if not self.on:
            if kind is None or now < self._retry_at:
                return False
            if not self._silent(now):
                # (the check visits every PE: not again for a while, so a run whose windows
                # touch does not pay it at every operation)
                self._retry_at = now + RETRY_CYCLES
                return False
            self.on = True
            self.phases += 1
            self.engine.routers_group.active[self.index] = self
        elif kind is None:
            raise RouteError(
                f"{ce.path}: operation '{op.name}' began while the lock-step phase moves colours "
                f"{sorted(self.colours)}; the workload that opted in must not run other "
                "operations then"
            )
        op.started = now
        op.express = True  # carried by a fast path: the CE's own step leaves it alone
        self.ops.setdefault(ce.index, []).append(op)
        self.ces[ce.index] = ce
        return True

    def route_written(self, router: Router, colour: int) -> None:
        """A configuration write landed on ``router``'s ``colour`` (the engine forgets which
        ports the head still has to go out of, and so does the phase)."""
        entry = self.entries.get((router.index, colour))
        if entry is not None:
            entry.pend = None

    # -- the cycle -------------------------------------------------------------------------------
    def _later(self, t: int, item: tuple) -> None:
        slot = self.due.get(t)
        if slot is None:
            self.due[t] = [item]
        else:
            slot.append(item)

    def step(self, t: int) -> bool:
        due = self.due.pop(t, None)
        if due:
            for item in due:
                self._land(t, item)
        if self.busy_routers:
            for idx in sorted(self.busy_routers):
                if not self._router(t, self.busy_routers[idx]):
                    del self.busy_routers[idx]
        for idx in sorted(self.ops):
            self._ce(t, self.ces[idx], self.ops[idx])
        for idx in [i for i, ops in self.ops.items() if not ops]:
            del self.ops[idx]
        if self.ops or self.due or self.busy_routers or self._queued():
            return True
        self.on = False
        return False

    def _queued(self) -> bool:
        return any(self.queues.values())

    def _land(self, t: int, item: tuple) -> None:
        kind = item[0]
        if kind == "arrive":
            _, r, colour, port, w = item
            route = r.routes.get(colour)
            if route is None or (port not in route.positions[route.pos].rx and not route.teardown):
                have = route.current.describe() if route else "no route"
                raise RouteError(
                    f"colour {colour}: a wavelet reached {r.name} from {port.name}, which it "
                    f"does not accept ({have})"
                )
            key = (r.index, colour)
            entry = self.entries.get(key)
            if entry is None:
                entry = self.entries[key] = _Entry()
            if entry.buf and entry.src is not port:
                raise RouteError(f"{r.name}: colour {colour} fed from two ports in one phase")
            entry.src = port
            entry.buf.append(w)
            self.busy_routers[r.index] = r
        elif kind == "deliver":
            _, ce, colour, w = item
            self._deliver(t, ce, colour, w)
        elif kind == "credit":
            _, r, port, colour = item
            r.credits[(port, colour)] += 1
        else:  # "up": a ramp slot back at a sending CE
            _, ce, colour = item
            ce.up_credits[colour] += 1

    def _deliver(self, t: int, ce: ComputeEngine, colour: int, w: tuple) -> None:
        """``ComputeEngine.fabric_deliver`` for a phase wavelet."""
        q = ce.queue_of_colour.get(colour)
        if q is None:
            raise RouteError(f"{ce.path}: colour {colour} reaches its ramp but has no queue")
        queue = self.queues.get((ce.index, colour))
        if queue is None:
            queue = self.queues[(ce.index, colour)] = deque()
        queue.append(w)
        if q in ce.ops_in:
            return
        if q in ce.data_task_of_queue:
            raise RouteError(f"{ce.path}: a data task reads colour {colour} inside a phase")
        self._drain(t, ce, colour, queue)

    def _drain(self, t: int, ce: ComputeEngine, colour: int, queue: deque[tuple]) -> None:
        """``ComputeEngine._drain_control``: act on the control wavelets at the queue's head."""
        while queue and queue[0][1] == TOKEN:
            w = queue.popleft()[2]
            self._later(t + self.engine.ramp_credit_latency, ("credit", ce.router, RAMP, colour))
            ce._control(w)

    # -- routers ---------------------------------------------------------------------------------
    def _router(self, t: int, r: Router) -> bool:
        """``Router.step`` for the phase's colours; True while it buffers phase wavelets."""
        wanted: dict[Dir, list[int]] = {}
        held = r.credits
        entries = self.entries
        for colour in self.colours:
            entry = entries.get((r.index, colour))
            if entry is None or not entry.buf:
                continue
            route = r.routes[colour]
            if route.teardown:
                continue
            pend = entry.pend
            if pend is None:
                pend = entry.pend = list(route.positions[route.pos].tx)
                if not pend:
                    raise RouteError(
                        f"colour {colour}: {r.name} accepts from {entry.src.name} but has no tx "
                        f"({route.current.describe()}); the wavelet has nowhere to go"
                    )
            for port in pend:
                c = held.get((port, colour))
                if c is None:
                    c = r.credit(port, colour)
                if c > 0:
                    keys = wanted.get(port)
                    if keys is None:
                        wanted[port] = [colour]
                    else:
                        keys.append(colour)
                else:
                    r.stall_cycles += 1
        if not wanted:
            return any((e := entries.get((r.index, c))) is not None and e.buf for c in self.colours)
        engine = self.engine
        rr = r.rr
        for port, colours in wanted.items():
            if len(colours) == 1:
                colour = colours[0]
            else:
                colour = engine.arbitrate(r, port, [(entries[(r.index, c)].src, c) for c in
                                                    colours])[1]  # fmt: skip
            rr[port] = colour
            entry = entries[(r.index, colour)]
            w = entry.buf[0]
            held[(port, colour)] -= 1
            if port is RAMP:
                self._later(t + engine.ramp_latency, ("deliver", r.ce, colour, w))
            else:
                self._later(t + engine.hop_latency,
                            ("arrive", r.nbr[port], colour, OPPOSITE[port], w))  # fmt: skip
            pend = entry.pend
            pend.remove(port)  # type: ignore[union-attr]
            if not pend:
                entry.pend = None
                entry.buf.popleft()
                r.forwarded += 1
                self.wavelets += 1
                src = entry.src
                if src is RAMP:
                    self._later(t + engine.ramp_credit_latency, ("up", r.ce, colour))
                else:
                    self._later(t + engine.hop_credit_latency,
                                ("credit", r.nbr[src], OPPOSITE[src], colour))  # fmt: skip
                if w[1] == TOKEN:
                    r._apply(colour, w[2])
        return any((e := entries.get((r.index, c))) is not None and e.buf for c in self.colours)

    # -- compute engines -------------------------------------------------------------------------
    def _eligible(self, ce: ComputeEngine, op: AsyncOp) -> bool:
        if op.fab_in is not None:
            return bool(self.queues.get((ce.index, ce.colour_of_queue[op.fab_in])))
        c = ce.up_credits.get(op.out_colour)  # type: ignore[arg-type]
        return (c if c is not None else ce._up_credit_count(op.out_colour)) > 0  # type: ignore[arg-type]

    def _ce(self, t: int, ce: ComputeEngine, ops: list[AsyncOp]) -> None:
        """``ComputeEngine.step`` for the phase's operations on ``ce``."""
        best = None
        best_key = None
        held = ce.running is not None and ce.hold_from <= t < ce.busy_until
        for op in ops:
            if not self._eligible(ce, op):
                continue
            if held and op.priority >= MAIN_THREAD_RANK:
                continue
            key = (op.priority, op.microthread)
            if best is None or key < best_key:  # type: ignore[operator]
                best, best_key = op, key
        if best is None:
            return
        if held:
            ce.busy_until += 1
            ce.busy_cycles += 1
            ce.stolen_cycles += 1
        best.issues += 1
        for _ in range(best.width):
            self._advance(t, ce, best, ops)
            if best.done == best.length or not self._eligible(ce, best):
                break

    def _advance(self, t: int, ce: ComputeEngine, op: AsyncOp, ops: list[AsyncOp]) -> None:
        engine = self.engine
        if op.fab_in is not None:
            colour = ce.colour_of_queue[op.fab_in]
            queue = self.queues[(ce.index, colour)]
            stream, seq, _ = queue.popleft()
            self._later(t + engine.ramp_credit_latency, ("credit", ce.router, RAMP, colour))
            if seq != op.done or stream.length != op.length:
                raise RouteError(
                    f"{ce.path}: '{op.name}' took wavelet {seq} of a {stream.length}-wavelet "
                    f"stream where element {op.done} of {op.length} was due (a control wavelet "
                    "inside the stream, or two streams mixed: not a plain broadcast)"
                )
            op.done += 1
            if op.done == op.length:
                op.out_view[:] = stream.values  # type: ignore[index]
                ops.remove(op)
                ce._finish(op, t)
                self._drain(t, ce, colour, queue)  # (_finish drains the queue's control head)
            return
        colour = op.out_colour  # type: ignore[assignment]
        ce.up_credits[colour] -= 1
        root = ce.router
        if op.control_wavelet is not None:
            w = op.control_wavelet
            if op.flow_out is not None:
                w.flow = op.flow_out
            self._later(t + engine.ramp_latency, ("arrive", root, colour, RAMP, (op, TOKEN, w)))
        else:
            self._later(t + engine.ramp_latency,
                        ("arrive", root, colour, RAMP, (op, op.done, None)))  # fmt: skip
        op.done += 1
        if op.done == op.length:
            ops.remove(op)
            ce._finish(op, t)
