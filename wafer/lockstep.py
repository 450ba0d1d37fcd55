"""A lock-step phase: two broadcast colours moved by one stepper, with the engine's own rules.

SUMMA's x and y broadcasts share every PE's down-ramp port, so they are never express streams
and ran wavelet by wavelet: each wavelet and hop costs a router step, two sends and a credit
through the scheduler, the CE's delivery, issue and ramp credit (~46 Python calls). Between two
steps the fabric is silent (docs/wafer/design.md, "The lock-step phase"), so a step's broadcasts can
be moved by one stepper that owns the data movement of the program's broadcast colours on every
router and compute engine while they run. It applies, cycle by cycle, the rules of
:meth:`fabric.engine.Router.step` and :meth:`pe.ce.ComputeEngine.step` for what these colours
carry (plain memory <-> fabric moves and the TEARDOWN behind each stream) on compact state: a
wavelet is its place in its stream, and the data lands when a receive completes. Routes, tasks,
the operations' completions and the counters are the real ones.

Two forms: :class:`LockstepPhase` writes the rules out per router and CE (the readable
specification; it keeps the engine's activation rules, so it agrees even on
``Router.stall_cycles``) and :class:`VectorPhase` runs them on numpy arrays over every router
and CE at once (the fast one; it does not keep ``stall_cycles``, a diagnostic no metric reads).

Entry (``take``, called by the CE when an operation begins): the operation is a plain move or a
control send on one of the colours, and the fabric is silent (no wavelet buffered or queued
anywhere, every credit home, no async operation running, no express stream, no wavelet filter
on the colours, traces off); the program has no edge port and no data task reading the colours.
Otherwise the phase declines and the engine moves the operation. The phase ends when nothing
it moves is left (no operation, no wavelet, no credit on its way).

Hand-back: while the phase is on, every operation that begins is offered to it. One it does
not move (another colour's, a memory-only one, one its state cannot hold: in the array form a
medium- or high-priority one, a second stream before the first one's TEARDOWN), a wavelet its
state cannot hold as it lands (a router buffer fed from two sides, a CE queue holding the ends
of two streams, a receive that is not its stream's length) and, in the array form, a route
write to a colour out of teardown make it hand everything back to the engine: the wavelets in
router buffers and CE queues, its operations with their progress, and what is on its way as
the engine's due actions (``_hand_back``). The engine then goes on as if it had moved it all,
so a program's answer never depends on whether, or where, the phase ran.

What the engine does in a cycle the phase does in the same order: deliveries and credits due
this cycle (the scheduler's own due actions, such as posted route writes landing and
operations beginning, run before the phase's step), then the routers' sends, then the compute
engines' issues. Everything it does to the world outside (operation completions through the
CE's ``finish_op``, control wavelets through its ``act_on_control``, teardown signals through
the router's ``apply_commands``, tasks) goes through the same public calls at the same cycles;
the engine and the CEs call the phase through :class:`fabric.endpoints.FastPhase`.
``tests/test_summa_exact.py`` holds both forms to the wavelet path's cycles, marks and bytes on
SUMMA, ``tests/test_conformance.py`` on per-cycle tables and random programs.

Which runs use it: the wafer's fidelity (``WaferConfig.fidelity``) on the colours the program
declares (``Layout.lockstep_colours``): 'lockstep-scalar' builds a :class:`LockstepPhase`,
'lockstep-array' a :class:`VectorPhase`, and 'fast' a :class:`VectorPhase` where the program
says it pays (``Layout.lockstep_pays``; SUMMA does, see :mod:`workloads.wafer.summa`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fabric.config import FabricConfig
from fabric.engine import Router
from fabric.routes import Dir, RouteError
from fabric.wavelet import Wavelet
from pe.ce import MAIN_THREAD_RANK

if TYPE_CHECKING:
    from pe.ce import ComputeEngine
    from pe.ops import AsyncOp
    from wafer.system import Wafer

RAMP = Dir.RAMP
OPPOSITE = {d: d.opposite for d in Dir}
TOKEN = -1  # the sequence number of a stream's control wavelet (its TEARDOWN)
NEVER = 1 << 62  # a cycle no run reaches
RETRY_CYCLES = 256  # after the fabric was found busy, cycles before entry is looked at again
# "any element set" of a table: ``np.count_nonzero`` is a C function (``ndarray.any`` goes through
# a Python wrapper and a generic reduction, 2-3 times its cost on the phase's tables), read as a
# truth value
_nz = np.count_nonzero

#: A due action of the engine: a callable and its arguments.
Action = tuple[Callable[..., None], tuple[Any, ...]]


class _Entry:
    """One (router, colour) input buffer. A wavelet is a tuple (the send operation whose
    stream it belongs to, its sequence number or ``TOKEN``, the control wavelet or None), made
    once when its sender issues it."""

    __slots__ = ("buf", "pend", "src")

    def __init__(self) -> None:
        self.buf: deque[tuple] = deque()
        self.pend: list[Dir] | None = None  # ports the head still has to go out of
        self.src: Dir = RAMP  # the input port the buffered wavelets came through


class LockstepPhase:
    """See the module docstring. ``colours``: the broadcast colours the phase moves."""

    index = -1  # stepped first in the routers group (its work has its own order inside)

    def __init__(self, wafer: Wafer, colours: tuple[int, ...]) -> None:
        self.wafer = wafer
        self.engine = wafer.engine
        self.sched = wafer.engine.sched
        self.colours = frozenset(colours)
        # The compute engines by index (a router's ``ce`` is a fabric.endpoints.RampEndpoint to
        # the fabric; the phase needs the compute engine's own interface).
        self.ce_at: list[ComputeEngine] = [pe.ce for pe in wafer.pes.values()]
        if any(ce.index != i or r.index != i for i, (ce, r) in
               enumerate(zip(self.ce_at, self.engine.routers, strict=True))):  # fmt: skip
            raise RouteError("lock-step phase: routers and compute engines are numbered apart")
        self.on = False
        # Handing back (see _hand_back): what lands at the cycle of the hand-back, and the
        # routers the phase had active, both for the step of that cycle.
        self.handing = False
        self.landing: list[Action] = []
        self.to_step: list[Router] = []
        self.handbacks = 0  # phases that handed their traffic back to the engine
        self.offered = 0  # operations offered to the phase as they began (``take``)
        self.taken = 0  # operations it moved
        self.entry_ok: bool | None = None  # the program's static conditions (_can_enter)
        self.receiving: dict[AsyncOp, AsyncOp] = {}  # a receive -> the send it takes from
        self.due: dict[int, list[tuple]] = {}
        self.entries: dict[tuple[int, int], _Entry] = {}
        # The parts stepped this cycle, activated as the engine activates them (an arrival, a
        # credit while something is buffered, a landing route write; a CE by a delivery to a
        # queue its operation reads, a credit, a new operation, the end of a task's hold).
        self.active_routers: dict[int, Router] = {}
        self.active_ces: dict[int, ComputeEngine] = {}
        self.buffered: dict[int, int] = {}  # router index -> phase wavelets it buffers
        self.in_routers = 0  # phase wavelets buffered in all routers
        self.queues: dict[tuple[int, int], deque[tuple]] = {}  # (CE index, colour) -> queue
        self.ops: dict[int, list[AsyncOp]] = {}  # CE index -> the phase's running operations
        self.ces: dict[int, ComputeEngine] = {}
        self.phases = 0  # phases run
        self.quiet_cycles = (
            0  # cycles of a phase skipped because nothing could change (VectorPhase)
        )
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
                full = self.ce_at[r.index].down_credits(colour) if port is RAMP else buf
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
        if kind == "recv" and self.on:
            queue = self.queues.get((ce.index, ce.colour_of_queue[op.fab_in]))  # type: ignore[index]
            if queue and (queue[0][1] != 0 or queue[0][0].length != op.length):
                kind = None  # its queue holds what it would not take as a whole stream
        if not self._admit(ce, op, kind, self.engine.now_cycle()):
            return False
        self.ops.setdefault(ce.index, []).append(op)
        self.ces[ce.index] = ce
        self.active_ces[ce.index] = ce
        return True

    def _admit(self, ce: ComputeEngine, op: AsyncOp, kind: str | None, now: int) -> bool:
        """Whether the phase moves ``op`` (of ``kind``, None if not a broadcast's part),
        beginning now: off, it turns on if the fabric is silent; on, any other operation makes
        it hand everything back to the engine (see the module docstring)."""
        self.offered += 1
        if self.handing:
            return False  # (handed back this cycle: the engine has the traffic now)
        if not self.on:
            if kind is None or now < self._retry_at or not self._can_enter():
                return False
            if not self._silent(now):
                # (the check visits every PE: not again for a while, so a run whose windows
                # touch does not pay it at every operation)
                self._retry_at = now + RETRY_CYCLES
                return False
            self.on = True
            self.phases += 1
            self._start(now)
            self.engine.routers_group.active[self.index] = self
        elif kind is None:
            # An operation the phase does not move: the engine takes everything over.
            self._hand_back(now)
            return False
        op.started = now
        op.express = True  # carried by a fast path: the CE's own step leaves it alone
        self.taken += 1
        return True

    def _can_enter(self) -> bool:
        """What the program must satisfy, checked once: no edge port (the phase does not
        model them), and no data task reading one of the phase's colours."""
        if self.entry_ok is None:
            colours = self.colours
            self.entry_ok = not self.wafer.edges and not any(
                ce.colour_of_queue.get(q) in colours
                for ce in self.ce_at
                for q in ce.data_task_of_queue
            )
        return self.entry_ok

    def _start(self, now: int) -> None:
        """Load the phase's state as it turns on (the scalar form reads the objects live)."""

    def hold(self, ce: ComputeEngine) -> None:
        """The CE's main thread changed (this phase reads it from the CE when it needs it)."""

    def route_written(self, router: Router, colour: int) -> None:
        """A configuration write landed on ``router``'s ``colour`` (the engine forgets which
        ports the head still has to go out of, and so does the phase)."""
        entry = self.entries.get((router.index, colour))
        if entry is not None:
            entry.pend = None
        if self.buffered.get(router.index):
            self.active_routers[router.index] = router

    # -- the cycle -------------------------------------------------------------------------------
    @staticmethod
    def _send(due: dict[int, list[tuple]], t: int, item: tuple) -> None:
        """Add ``item`` to what lands at cycle ``t`` in ``due`` (cycle -> items, in order)."""
        slot = due.get(t)
        if slot is None:
            due[t] = [item]
        else:
            slot.append(item)

    def _later(self, t: int, item: tuple) -> None:
        self._send(self.due, t, item)

    def step(self, t: int) -> bool:
        if self.handing:
            return self._handing_step(t)
        due = self.due.pop(t, None)
        if due:
            for j, item in enumerate(due):
                if not self._fits(item):
                    self.due[t] = due[j:]
                    self._hand_back(t)
                    return self._handing_step(t)
                self._land_item(t, item)
        routers = self.active_routers
        if routers:
            for idx in sorted(routers):
                if not self._router(t, routers[idx]):
                    del routers[idx]
        ces = self.active_ces
        if ces:
            for idx in sorted(ces):
                if not self._ce(t, ces[idx], self.ops.get(idx)):
                    del ces[idx]
        for idx in [i for i, ops in self.ops.items() if not ops]:
            del self.ops[idx]
        if self.ops or self.due or self.in_routers or self._queued():
            return True
        self.on = False
        return False

    def _queued(self) -> bool:
        return any(self.queues.values())

    def _fits(self, item: tuple) -> bool:
        """Whether the phase's state can hold what ``item`` brings: a router's buffer takes
        wavelets from one input port at a time, and a CE's queue only the stream its reader
        takes whole, in order, with the stream's TEARDOWN right behind it."""
        kind = item[0]
        if kind == "arrive":
            _, r, colour, port, _ = item
            entry = self.entries.get((r.index, colour))
            return entry is None or not entry.buf or entry.src is port
        if kind != "deliver":
            return True
        _, ce, colour, w = item
        q = ce.queue_of_colour.get(colour)
        if q is None:
            return False
        queue = self.queues.get((ce.index, colour))
        last = queue[-1] if queue else None
        reader = ce.ops_in.get(q)
        stream, seq, _ = w
        if seq == TOKEN:
            if last is None:
                return reader is None  # (acted on at once)
            return last[1] != TOKEN and last[1] == last[0].length - 1
        if last is not None:
            return last[1] != TOKEN and last[0] is stream and seq == last[1] + 1
        if reader is None:
            return seq == 0
        return reader.length == stream.length and seq == reader.done

    # -- handing back ----------------------------------------------------------------------------
    def _hand_back(self, t: int) -> None:
        """Give everything the phase moves back to the engine at cycle ``t``, before the
        phase's step of ``t`` (from :meth:`take`, when an operation it does not move begins,
        or from the step, when something lands that its state cannot hold): the wavelets
        buffered in routers and queued at CEs become the engine's, its operations go to their
        CEs' microthreads with their progress, and what is on its way becomes the engine's due
        actions (those of cycle ``t`` land in the step, after the scheduler's own, as the
        phase's do). From then on the engine runs as if it had moved everything itself: the
        phase moved it by the engine's rules (``tests/test_conformance.py``)."""
        self.on = False
        self.handing = True
        self.handbacks += 1
        actions = self._materialise()
        self.landing = actions.pop(t, [])
        at = self.engine.at
        for u in sorted(actions):
            for fn, args in actions[u]:
                at(u, fn, *args)

    def _handing_step(self, t: int) -> bool:
        """The phase's step in the cycle it handed back: what was due lands through the
        engine's own calls, and the routers the engine would step this cycle (those the phase
        had active, and those the landing woke) are stepped in index order, once (the ones the
        scheduler already holds are stepped by it, after this step)."""
        self.handing = False
        active = self.engine.routers_group.active
        scheduled = set(active)
        for r in self.to_step:
            active[r.index] = r
        for fn, args in self.landing:
            fn(*args)
        self.landing, self.to_step = [], []
        for idx in sorted(i for i in active if i not in scheduled):
            if not active[idx].step(t):
                del active[idx]
        return False

    def _wavelet(self, w: tuple) -> Wavelet:
        """The engine's wavelet for a phase wavelet (a TOKEN is its control wavelet)."""
        op, seq, ctrl = w
        return ctrl if seq == TOKEN else Wavelet(float(op.values[seq]))

    def _action(self, item: tuple) -> Action:
        """The engine's due action for an item on its way."""
        kind = item[0]
        if kind == "arrive":
            _, r, colour, port, w = item
            return r.receive, (port, colour, self._wavelet(w))
        if kind == "deliver":
            _, ce, colour, w = item
            return ce.fabric_deliver, (colour, self._wavelet(w))
        if kind == "credit":
            _, r, port, colour = item
            return (r.ramp_credit, (colour,)) if port is RAMP else (r.return_credit, (port, colour))
        if kind == "up":
            _, ce, colour = item
            return ce.up_credit, (colour,)
        return self.engine.activate_endpoint, (item[1],)  # "wake"

    def _materialise(self) -> dict[int, list[Action]]:
        """Write the phase's state into the routers and CEs (see :meth:`_hand_back`); return
        what is on its way as the engine's due actions, by cycle."""
        engine = self.engine
        routers = engine.routers
        wavelet = self._wavelet
        for (i, colour), entry in self.entries.items():
            if not entry.buf:
                continue
            r = routers[i]
            key = (entry.src, colour)
            buf = r.bufs.get(key)
            if buf is None:
                buf = r.bufs[key] = []
            buf.extend(wavelet(w) for w in entry.buf)
            r.buffered += len(entry.buf)
            if entry.pend is not None:
                r.pending[key] = list(entry.pend)
        self.to_step = [r for _, r in sorted(self.active_routers.items())]
        for (i, colour), queue in self.queues.items():
            if queue:
                ce = self.ce_at[i]
                ce.input_queue(ce.queue_of_colour[colour]).extend(wavelet(w) for w in queue)
        for i, ops in sorted(self.ops.items()):
            ce = self.ce_at[i]
            for op in ops:
                self._give(ce, op, self.receiving.get(op))
            if ops:
                engine.activate_endpoint(ce)
        actions = {u: [self._action(item) for item in items] for u, items in self.due.items()}
        self.due.clear()
        self.entries.clear()
        self.buffered.clear()
        self.in_routers = 0
        self.queues.clear()
        self.ops.clear()
        self.ces.clear()
        self.active_routers.clear()
        self.active_ces.clear()
        self.receiving.clear()
        return actions

    @staticmethod
    def _give(ce: ComputeEngine, op: AsyncOp, stream: AsyncOp | None) -> None:
        """Hand ``op`` to ``ce``'s microthreads with its progress (a receive's data so far
        written, as the engine writes it element by element)."""
        op.express = False
        if stream is not None and op.done:
            op.out_view[: op.done] = stream.values[: op.done]  # type: ignore[index]
        ce.ops.append(op)

    def _land_item(self, t: int, item: tuple) -> None:
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
            self.buffered[r.index] = self.buffered.get(r.index, 0) + 1
            self.in_routers += 1
            self.active_routers[r.index] = r
        elif kind == "deliver":
            _, ce, colour, w = item
            self._deliver(t, ce, colour, w)
        elif kind == "credit":
            _, r, port, colour = item
            r.credits[(port, colour)] += 1
            if self.buffered.get(r.index):
                self.active_routers[r.index] = r
        elif kind == "up":  # a ramp slot back at a sending CE
            _, ce, colour = item
            ce.up_credits[colour] += 1
            if self.ops.get(ce.index):
                self.active_ces[ce.index] = ce
        else:  # "wake": a task's hold on the issue slot ends
            ce = item[1]
            if self.ops.get(ce.index):
                self.active_ces[ce.index] = ce

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
            if ce.index in self.ops:
                self.active_ces[ce.index] = ce
            return
        if q in ce.data_task_of_queue:
            raise RouteError(f"{ce.path}: a data task reads colour {colour} inside a phase")
        self._drain(t, ce, colour, queue)

    def _drain(self, t: int, ce: ComputeEngine, colour: int, queue: deque[tuple]) -> None:
        """``ComputeEngine._drain_control``: act on the control wavelets at the queue's head."""
        while queue and queue[0][1] == TOKEN:
            w = queue.popleft()[2]
            self._later(t + self.engine.ramp_credit_latency, ("credit", ce.router, RAMP, colour))
            ce.act_on_control(w)

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
            # Empty, or everything blocked: a credit, an arrival or a route write wakes it.
            return False
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
                self._later(t + engine.ramp_latency, ("deliver", self.ce_at[r.index], colour, w))
            else:
                self._later(t + engine.hop_latency,
                            ("arrive", r.nbr[port], colour, OPPOSITE[port], w))  # fmt: skip
            pend = entry.pend
            pend.remove(port)  # type: ignore[union-attr]
            if not pend:
                entry.pend = None
                entry.buf.popleft()
                self.buffered[r.index] -= 1
                self.in_routers -= 1
                r.forwarded += 1
                self.wavelets += 1
                src = entry.src
                if src is RAMP:
                    self._later(t + engine.ramp_credit_latency, ("up", self.ce_at[r.index], colour))
                else:
                    self._later(t + engine.hop_credit_latency,
                                ("credit", r.nbr[src], OPPOSITE[src], colour))  # fmt: skip
                if w[1] == TOKEN:
                    r.apply_commands(colour, w[2])
        return self.buffered[r.index] > 0

    # -- compute engines -------------------------------------------------------------------------
    def _eligible(self, ce: ComputeEngine, op: AsyncOp) -> bool:
        if op.fab_in is not None:
            return bool(self.queues.get((ce.index, ce.colour_of_queue[op.fab_in])))
        c = ce.up_credits.get(op.out_colour)  # type: ignore[arg-type]
        return (c if c is not None else ce.up_credit_count(op.out_colour)) > 0  # type: ignore[arg-type]

    def _ce(self, t: int, ce: ComputeEngine, ops: list[AsyncOp] | None) -> bool:
        """``ComputeEngine.step`` for the phase's operations on ``ce``: True while one of them
        can issue next cycle."""
        if not ops:
            return False
        best = None
        best_key = None
        held = ce.running is not None and ce.hold_from <= t < ce.busy_until
        waiting = False
        eligible = self._eligible
        for op in ops:
            if not eligible(ce, op):
                continue
            if held and op.priority >= MAIN_THREAD_RANK:
                waiting = True
                continue
            key = (op.priority, op.microthread)
            if best is None or key < best_key:  # type: ignore[operator]
                best, best_key = op, key
        if best is None:
            if waiting:  # step again when the task gives the slot back
                self._later(ce.busy_until, ("wake", ce))
            return False
        if held:
            ce.busy_until += 1
            ce.busy_cycles += 1
            ce.stolen_cycles += 1
        best.issues += 1
        for _ in range(best.width):
            self._advance(t, ce, best, ops)
            if best.done == best.length or not eligible(ce, best):
                break
        for op in ops:  # noqa: SIM110
            if eligible(ce, op):
                return True
        return False

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
            self.receiving[op] = stream
            if op.done == op.length:
                del self.receiving[op]
                op.out_view[:] = stream.values  # type: ignore[index]
                ops.remove(op)
                ce.finish_op(op, t)
                self._drain(t, ce, colour, queue)  # (finish_op drains the queue's control head)
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
            ce.finish_op(op, t)


class VectorPhase(LockstepPhase):
    """:class:`LockstepPhase`'s rules on numpy arrays: every router and compute engine of the
    wafer at once, a few dozen array operations a cycle instead of Python work per wavelet.

    State per (router, colour slot): buffered wavelets, the head's sequence number (the
    stream's length for its TEARDOWN), the input port and stream, credits per port; per compute
    engine: the receive, send and control operations of each colour slot with their progress,
    queued wavelets and up-ramp credits per slot, and the main thread's hold. A set of ports
    (a route's tx, the ports the head still has to go out of, the ports with a credit, the sends
    of a cycle) is eight bytes, one per port (0 or 1; ports 5-7 unused), read as one ``uint64``:
    set operations and "any port" are then one operation on a word per entry, and the sends of
    a cycle one ``flatnonzero`` over the bytes. What is in flight (arrivals, deliveries,
    credits) is kept per landing cycle as the index arrays of the entries it reaches, applied
    in the order it was sent. The few events that reach Python objects (a TEARDOWN passing a
    router, an operation completing) are handled one by one in router, then CE, index order,
    as the engine would; what the hooks tell the phase (route writes, a task's hold) goes into
    the tables at once, while the object is in cache (read later, 4,096 routers' and CEs'
    objects are cache misses), and only where the tables' readers would see it. The phase moves
    only low-priority operations (the SDK's default), so it never steals issue cycles from a
    task; a medium or high one begins on the wavelet path (entry refused), and one beginning
    during the phase makes it hand back. The tables number an entry's wavelets from its head
    and a queue's from its reader's progress, one stream each: what breaks that (two streams
    at once in one entry or queue, a route write to a live colour) also makes it hand back."""

    def __init__(self, wafer: Wafer, colours: tuple[int, ...]) -> None:
        super().__init__(wafer, colours)
        engine = self.engine
        cfg = engine.cfg
        self.cols = tuple(sorted(colours))
        if len(self.cols) != 2:
            raise RouteError(f"lock-step phase (arrays): two colours, not {list(self.cols)}")
        # the round-robin state per (router, port) is kept as the last colour plus one (-1, no
        # colour yet, is 0), so the arbitration reads whether slot 0 loses from a table by it
        self.rr_of_slot = np.array(self.cols, np.int64) + 1
        c0, c1 = self.cols
        self.slot0_loses = np.array(
            [(c1 - last - 1) % 32 < (c0 - last - 1) % 32 for last in range(-1, 63)], bool
        )
        self.slot = {c: k for k, c in enumerate(self.cols)}
        routers = engine.routers
        n = len(routers)
        self.n = n
        self.lat = (engine.hop_latency, engine.ramp_latency, engine.hop_credit_latency,
                    engine.ramp_credit_latency)  # fmt: skip
        self.ring = max(self.lat) + 1  # (everything sent lands within this many cycles)
        nb = np.full((n, 8), -1, np.int64)
        for r in routers:
            for d in (Dir.N, Dir.E, Dir.S, Dir.W):
                other = r.nbr.get(d)
                if isinstance(other, Router):  # (not an edge port)
                    nb[r.index, d] = other.index
        self.nb = nb
        self.nb_list: list[list[int]] = nb.tolist()  # (read per TEARDOWN hop, as Python ints)
        # per (entry, port), index 8 * entry + port: the entry a wavelet sent out of the port
        # reaches, and the index into ``cred_f`` of the credit its leaving returns upstream
        # when it came in through that port (mesh ports only; computed once, read per send)
        entry = np.arange(2 * n, dtype=np.int64)[:, None]
        to = nb[entry >> 1, np.arange(8)] * 2 + (entry & 1)
        self.hop_to = to.reshape(-1)
        self.credit_to = (to * 8 + _OPP).reshape(-1)
        self.buf_wavelets = cfg.router_buffer_wavelets
        self.low = MAIN_THREAD_RANK
        self._masks: dict[int, tuple[tuple[Dir, ...], int]] = {}  # id(tx) -> (tx, port set)
        self._home_fixed: np.ndarray | None = None  # (see _homes)
        self._alloc()

    def _alloc(self) -> None:
        n = self.n
        z = np.zeros
        # routers, per (router, colour slot)
        self.cnt = z((n, 2), np.int64)
        self.hd = z((n, 2), np.int64)
        self.nlen = z((n, 2), np.int64)  # length of the stream whose wavelets an entry holds
        self.sid = z((n, 2), np.int64)  # that stream (index into self.streams)
        self.src = z((n, 2), np.int64)
        self.txm = z((n, 2), np.uint64)  # the route's tx (a port set)
        # NEVER while the colour's route is in teardown (or absent), else 0: an entry can send
        # where its count exceeds it (one compare)
        self.td = np.full((n, 2), NEVER, np.int64)
        self.pend = z((n, 2), np.uint64)  # the ports the head still has to go out of
        self.fresh = np.ones((n, 2), bool)  # the head's ports are still to be read from tx
        self.cred = z((n, 2, 8), CREDIT_DTYPE)
        self.rrv = z((n, 8), np.int64)
        self.rrv_f = self.rrv.reshape(-1)  # (index 8 * router + port)
        self.fw = z((n, 2), np.int64)
        # compute engines: queued wavelets and up-ramp credits per colour slot
        self.q = z((n, 2), np.int64)
        self.qsid = z((n, 2), np.int64)
        self.up = z((n, 2), np.int64)
        # operations per CE, column 2 * kind + slot (kind 0 receive, 1 send, 2 control send)
        self.oact = z((n, 8), bool)
        self.empty_ops = 0  # operations of no wavelets taken and not yet complete
        self.odone = z((n, 8), np.int64)
        self.olen = z((n, 8), np.int64)
        # an operation's issue order: (priority * 64 + microthread) * 8 + column, so the least
        # of a CE's row is its first operation in the engine's order (kind, then slot on ties);
        # NEVER where the column has no operation with wavelets still to move (kept as they
        # begin and end: an operation whose last wavelet moves completes in that cycle); kept
        # by column, ``okey_t[column, CE]``, so the CEs' pass reads whole rows
        self.okey_t = np.full((8, n), NEVER, np.int64)
        self.owidth = np.ones((n, 8), np.int64)
        self.oissues = z((n, 8), np.int64)
        self.oref: dict[tuple[int, int, int], Any] = {}  # (kind, router index, slot) -> op
        # the main thread's hold: it holds the issue slot at cycles ``hold_from <= t <
        # hold_from + hold_span`` (span 0 while no task runs, or the last task's, which is
        # over: see ``hold``), so "held now" is one unsigned compare of ``t - hold_from`` with
        # the span
        self.hold_from = z(n, np.int64)
        self.hold_span = z(n, np.uint64)
        self.streams: list[Any] = [None]
        self.ssid = z((n, 2), np.int64)  # the stream a CE sends (or last sent) per colour slot
        # a CE's stream on a slot waits for its TEARDOWN, by entry (read and written only by
        # ``take``, one at a time: a Python bytearray)
        self.tok_due = bytearray(2 * n)
        # flat views of the (n, 2) tables (and of ``cred`` per port): index 2 * router + slot
        self.cnt_f, self.hd_f, self.nlen_f = (x.reshape(-1) for x in (self.cnt, self.hd, self.nlen))
        self.sid_f, self.src_f, self.td_f = (x.reshape(-1) for x in (self.sid, self.src, self.td))
        self.txm_f, self.fresh_f = self.txm.reshape(-1), self.fresh.reshape(-1)
        self.pend_f, self.fw_f = self.pend.reshape(-1), self.fw.reshape(-1)
        self.cred_f = self.cred.reshape(-1)  # (index 8 * (2 * router + slot) + port)
        self.q_f, self.qsid_f = self.q.reshape(-1), self.qsid.reshape(-1)
        self.reached = z(2 * n, bool)  # (scratch, all False between uses: _unfit_deliveries)
        self.up_f, self.ssid_f = self.up.reshape(-1), self.ssid.reshape(-1)
        # and of the (n, 8) operation tables: index 8 * CE + column
        self.odone_f, self.olen_f = self.odone.reshape(-1), self.olen.reshape(-1)
        self.oissues_f, self.owidth_f = self.oissues.reshape(-1), self.owidth.reshape(-1)
        self.oact_f = self.oact.reshape(-1)
        # in flight, by landing cycle: batches (entries, then values) in the order sent
        self.arrivals: dict[int, list[tuple]] = {}  # (entries, src port, stream, length, n)
        self.deliveries: dict[int, list[tuple]] = {}  # (entries, stream, n): data to a CE
        self.credits: dict[int, list[tuple]] = {}  # (index into cred_f, n)
        self.upcredits: dict[int, list[tuple]] = {}  # (entries, n)
        self.tok_arrive: dict[int, list[tuple[int, int, Any]]] = {}  # cycle -> (r, k, wavelet)
        self.tok_deliver: dict[int, list[tuple[int, int, Any]]] = {}
        self.tokw: dict[tuple[int, int], list[Any]] = {}  # (r, k) -> tokens buffered, in order
        self.qtok: dict[tuple[int, int], Any] = {}  # (r, k) -> a token queued behind data
        # the routers' pass's scratch: the ports each entry sends out of this cycle, as words
        # and as bytes, and the ports with a credit (written in place, not made per cycle)
        self.want = z((n, 2), np.uint64)
        self.want_f = self.want.reshape(-1)
        self.want_b = self.want.view(bool).reshape(-1)
        self.credpos = z((n, 2, 8), bool)
        self.credpos_u = self.credpos.view(np.uint64).reshape(n, 2)
        self.nops = bytearray(n)  # operations of the phase running on each CE (at most 6)
        self.left = 0  # operations the phase still runs
        self.horizon = -1  # everything the phase sent lands before this cycle
        self.quiet_until = -1  # steps before this cycle would change nothing (``_quiet``)
        self.stirred = False  # a hook told the phase something during this cycle's step
        self.held_elig: int | None = None  # the first end of a hold keeping an issue waiting
        self.waiting: Any = None  # the CEs whose operations wait for a hold to end, by index

    # -- entry and the CE's hooks ----------------------------------------------------------------
    def _start(self, now: int) -> None:
        """Load the arrays from the (silent) wafer. Silent means every credit is home
        (``_silent`` checked each table), so the credit arrays start at their home values."""
        self._alloc()
        routers = self.engine.routers
        self.home = self._homes()
        self.cred[:] = self.home
        self.up[:] = self.wafer.cfg.fabric.ramp_credits
        self.rrv[:, :5] = np.array([r.rr for r in routers], np.int64) + 1
        # every entry's route (index 2 * router + slot: routers by index, slots in colour
        # order); ``_alloc`` made every entry fresh with no pending port, as a route write does
        states = [self._route_state(r.routes.get(c)) for r in routers for c in self.cols]
        self.td_f[:] = [s[0] for s in states]
        self.txm_f[:] = [s[1] for s in states]
        holds = [_hold(ce) for ce in self.ce_at]
        self.hold_from[:] = [h[0] for h in holds]
        self.hold_span[:] = [h[1] for h in holds]

    def _homes(self) -> np.ndarray:
        """Every entry's credits per port when all are home: a hop buffer's size on the mesh
        ports, the CE's down-ramp credits on the ramp. Those depend on the queue a CE binds the
        colour to, which never changes once bound (``bind_queue``), so the table is made once
        every CE has bound both colours (read again at each entry until then)."""
        if self._home_fixed is not None:
            return self._home_fixed
        home = np.zeros((self.n, 2, 8), np.int64)
        home[:, :, :RAMP] = self.buf_wavelets
        ramp = [[self._home(r, RAMP, c) for c in self.cols] for r in self.engine.routers]
        home[:, :, RAMP] = [[0 if c is None else c for c in row] for row in ramp]
        table = home.astype(self.cred.dtype)
        if all(c is not None for row in ramp for c in row):
            self._home_fixed = table
        return table

    def _home(self, r: Router, port: int, colour: int) -> int | None:
        """A port's credits at home; None on the ramp of a CE that binds the colour no queue
        (it takes no wavelets of the colour: 0 credits)."""
        if port != RAMP:
            return self.buf_wavelets
        try:
            return self.ce_at[r.index].down_credits(colour)
        except RouteError:
            return None

    def _mask(self, ports: tuple[Dir, ...]) -> int:
        """A set of ports as the ``uint64`` whose byte ``p`` is 1 for each port ``p``."""
        b = np.zeros(8, bool)
        b[[int(p) for p in ports]] = True
        return int(b.view(np.uint64)[0])

    def _route_state(self, route: Any) -> tuple[int, int]:
        """(0, the tx port set) of a colour's route out of teardown; (NEVER, 0) in teardown
        (None: no route, as in teardown), where the tx is read by nothing: an entry in
        teardown sends nothing, and a write that takes it out of teardown reads it again."""
        if route is None or route.teardown:
            return NEVER, 0
        tx = route.positions[route.pos].tx
        # (the port sets by the tx tuple's identity: a tuple of Dir hashes in Python; the cache
        # keeps the tuple, so its id is not reused)
        hit = self._masks.get(id(tx))
        if hit is None or hit[0] is not tx:
            hit = self._masks[id(tx)] = (tx, self._mask(tx))
        return 0, hit[1]

    def hold(self, ce: ComputeEngine) -> None:
        """The CE's main thread changed (a task dispatched or ended)."""
        i = ce.index
        if not self.nops[i]:
            return  # (read only where an operation of the phase runs: written when one begins)
        if ce.running is not None:
            # A task dispatched: its hold into the tables now, while the CE is in cache (two
            # scalar writes cost less than a note put in the tables at the CEs' next pass). A
            # task's end writes nothing: it ends at its hold's end (``busy_until``), so the
            # span kept says "not held" from then on, as a span of 0 would.
            self.hold_from[i], self.hold_span[i] = _hold(ce)
        # (while the phase is quiet, a hold matters only where an operation waits for it)
        waiting = self.waiting
        if waiting is not None and waiting[i]:
            self._wake()

    def _wake(self) -> None:
        """Something the phase reads changed outside its step: step fully next time."""
        self.quiet_until = -1
        self.stirred = True

    def route_written(self, router: Router, colour: int) -> None:
        if self.on and colour in self.slot:
            route = router.routes.get(colour)
            if route is None or route.teardown:
                # A write that leaves the colour in teardown (a set-up's first two of three; no
                # write enters teardown, so it was in teardown before) changes nothing the
                # tables hold: the entry is (NEVER, 0) from ``_route_state``, fresh, with no
                # pending port. Nothing to write, and nothing a step would do differently.
                return
            e = 2 * router.index + self.slot[colour]
            if not self.td_f[e]:
                # A write to a colour out of teardown could cut or join a stream's tree
                # mid-stream, whose wavelets the tables number from its start: the engine's.
                self._hand_back(self.engine.now_cycle())
                return
            # (written now, while the route is in cache: the routers' pass reads the tables.
            # The entry was in teardown, so it is fresh with no pending port: its head reads
            # its ports from the route when it first sends, ``_routers``)
            self.td_f[e], self.txm_f[e] = self._route_state(route)
            if self.cnt_f[e]:  # (else it matters only once a wavelet lands)
                self._wake()

    def _can_enter(self) -> bool:
        # (the arrays implement round-robin arbitration only, and read a port set's bytes as
        # a little-endian word)
        return self.engine.cfg.arbitration == "round_robin" and sys.byteorder == "little"

    def _receive_fits(self, op: AsyncOp, i: int, k: int) -> bool:
        """Whether the tables can hold the receive ``op`` as it begins on slot ``k`` of CE
        ``i``: it takes the whole stream its queue holds. (The tables also hold one operation
        per kind and colour, and a stream's TEARDOWN right behind its data: a send begins when
        none is due, a control send when one is; ``take`` checks those.)"""
        e = 2 * i + k
        if self.q_f[e]:
            return self.streams[int(self.qsid_f[e])].length == op.length
        return (i, k) not in self.qtok

    def take(self, ce: ComputeEngine, op: AsyncOp) -> bool:
        kind = self._kind(op)
        if kind is not None and op.priority < self.low:
            kind = None  # it would take issue cycles from tasks: not moved by the phase
        i = ce.index
        k = o = 0
        if kind is not None:
            if kind == "recv":
                k, o = self.slot[ce.colour_of_queue[op.fab_in]], 0  # type: ignore[index]
            else:
                k, o = self.slot[op.out_colour], 1 if kind == "send" else 2  # type: ignore[index]
            if self.on and (
                (o, i, k) in self.oref  # (as ``oact``: the operations running, by column)
                or (self.tok_due[2 * i + k] if o == 1 else not self.tok_due[2 * i + k]
                    if o == 2
                    else (self.q_f[2 * i + k] or self.qtok) and not self._receive_fits(op, i, k))
            ):  # fmt: skip
                kind = None  # (a second of its kind, a stream without its TEARDOWN, ...)
        if not self._admit(ce, op, kind, self.engine.now_cycle()):
            return False
        f = 8 * i + 2 * o + k  # (flat: one integer index per table, not an (i, j) tuple)
        if o == 1:
            self.tok_due[2 * i + k] = 1
        elif o == 2:
            self.tok_due[2 * i + k] = 0
        length = op.length
        self.oact_f[f] = True
        if length <= 0:
            self.empty_ops += 1
        # (its progress and issues are 0: the tables start so, and the completion of the
        # column's previous operation puts them back)
        self.olen_f[f] = length
        key = (op.priority * 64 + op.microthread) * 8 + 2 * o + k
        self.okey_t[2 * o + k, i] = key if length > 0 else NEVER
        self.owidth_f[f] = op.width if o != 2 else 1
        self.oref[(o, i, k)] = op
        self.left += 1
        self.nops[i] += 1
        # the main thread's hold, which the CE's hooks note only while it runs phase operations
        self.hold_from[i], self.hold_span[i] = _hold(ce)
        if o == 1:
            self.ssid_f[2 * i + k] = len(self.streams)
            self.streams.append(op)
        if o or self.q_f[2 * i + k]:  # (a receive with nothing queued waits for a landing)
            self._wake()
        return True

    # -- the cycle -------------------------------------------------------------------------------
    def step(self, t: int) -> bool:
        if self.handing:
            return self._handing_step(t)
        if t < self.quiet_until:
            self.quiet_cycles += 1
            return True  # provably nothing changes this cycle (see _quiet)
        self.stirred = False
        landed = self._land(t)
        if landed is None:  # something the tables cannot hold: the engine takes over
            self._hand_back(t)
            return self._handing_step(t)
        sent = self._routers(t)
        moved = self._ces(t) or sent
        if moved:
            self.horizon = t + self.ring  # what moved lands before then
        if self.left or self.qtok or self._in_flight() or _nz(self.cnt) or _nz(self.q):
            if not (moved or landed or self.stirred):
                self.quiet_until = self._quiet(t)
            return True
        self._finish_phase()
        return False

    def _in_flight(self) -> bool:
        """Whether anything the phase sent has still to land (it ends in the cycle the last
        of it lands, as the engine's last due action would)."""
        return bool(self.arrivals or self.deliveries or self.credits or self.upcredits
                    or self.tok_arrive or self.tok_deliver)  # fmt: skip

    def _quiet(self, t: int) -> int:
        """After a cycle in which nothing landed, moved or was told to the phase: the next
        cycle in which something can change. Until then a step would do nothing again: the
        routers stay blocked (only a landing or a route write unblocks one), and a CE that
        could not issue can only by a landing, a new operation, a hold told (all of which
        wake the phase) or its task's hold ending (``held_elig``, below). The horizon is
        kept too, so the phase ends in the same cycle."""
        end = self.horizon if self.horizon > t else NEVER  # (the phase ends only at a horizon)
        if self.held_elig is not None:
            end = min(end, self.held_elig)
        due = (self.arrivals, self.deliveries, self.credits, self.upcredits, self.tok_arrive,
               self.tok_deliver)  # fmt: skip
        for u in range(t + 1, min(t + self.ring, end)):
            if any(u in d for d in due):
                return u
        return end

    def _land(self, t: int) -> bool | None:
        """What lands this cycle; True if anything did, None if something the tables cannot
        hold would (it is left to land through the engine: see :meth:`_unfit_arrivals`)."""
        landed = False
        toks = self.tok_arrive.pop(t, None)
        if toks:  # (first: a batch below that counts a TEARDOWN finds it buffered)
            landed = True
            for i, k, w in toks:
                self.tokw.setdefault((i, k), []).append(w)
        batches = self.arrivals.pop(t, None)
        if batches:
            landed = True
            cnt, src, sid, nlen = self.cnt_f, self.src_f, self.sid_f, self.nlen_f
            for b, (e, port, stream, length, seq, m) in enumerate(batches):
                new = sid[e] != stream
                if np.count_nonzero(new):
                    if self._unfit_arrivals(e, new):
                        self.arrivals[t] = batches[b:]
                        return None
                    # An entry's input port, stream and length are written when a stream's
                    # first wavelet reaches it: the rest of the stream (and its TEARDOWN)
                    # comes through the same port of the same tree.
                    if np.ndim(e):
                        en = e[new]
                        self.hd_f[en] = seq[new] if np.ndim(seq) else seq
                        src[en] = port[new] if np.ndim(port) else port
                        sid[en] = stream[new] if np.ndim(stream) else stream
                        nlen[en] = length[new] if np.ndim(length) else length
                    else:
                        self.hd_f[e] = seq
                        src[e] = port
                        sid[e] = stream
                        nlen[e] = length
                cnt[e] += m
        batches = self.deliveries.pop(t, None)
        if batches:
            landed = True
            q, qsid = self.q_f, self.qsid_f
            for b, (e, stream, length, _, m) in enumerate(batches):
                new = qsid[e] != stream
                fresh = np.count_nonzero(new)
                if (fresh or self.qtok) and self._unfit_deliveries(e, new, length):
                    self.deliveries[t] = batches[b:]
                    return None
                if fresh:  # (elsewhere the queue holds this stream already)
                    qsid[e] = stream
                q[e] += m
        toks = self.tok_deliver.pop(t, None)
        if toks:
            landed = True
            toks.sort(key=lambda e: (e[0], e[1]))
            qtok, ce_at, cols, streams = self.qtok, self.ce_at, self.cols, self.streams
            # (the tables read below do not change in this loop: read for all tokens at once)
            ti = np.fromiter((x[0] for x in toks), np.int64, len(toks))
            tk = np.fromiter((x[1] for x in toks), np.int64, len(toks))
            te = 2 * ti + tk
            queued_l = self.q_f[te].tolist()
            reading_l = self.oact[ti, tk].tolist()
            done_l = self.odone[ti, tk].tolist()
            qsid_l = self.qsid_f[te].tolist()
            acted: list[int] = []  # (the ramp credits of TEARDOWNs acted on at once)
            for j, (i, k, w) in enumerate(toks):
                ce = ce_at[i]
                queue_id = ce.queue_of_colour.get(cols[k])
                if queue_id is None:
                    raise RouteError(f"{ce.path}: colour {cols[k]} has no queue")
                # Held only right behind the last element of the stream its reader takes whole
                # (or, with no reader and nothing queued, acted on at once); not behind another.
                queued = queued_l[j]
                reading = reading_l[j]
                if (i, k) in qtok or (
                    queue_id in ce.ops_in
                    if not (queued or reading)
                    else (done_l[j] if reading else 0) + queued != streams[qsid_l[j]].length
                ):
                    self.tok_deliver[t] = toks[j:]
                    if acted:
                        self._credit_ramps(t, acted)
                    return None
                if queue_id in ce.ops_in:  # behind the data its reader has still to take
                    qtok[(i, k)] = w
                elif queue_id in ce.data_task_of_queue:
                    raise RouteError(f"{ce.path}: a data task reads a phase colour")
                elif queued == 0:
                    acted.append(2 * i + k)
                    ce.act_on_control(w)
                else:
                    qtok[(i, k)] = w
            if acted:
                self._credit_ramps(t, acted)
        batches = self.credits.pop(t, None)
        if batches:
            landed = True
            cred = self.cred_f
            for f, m in batches:
                cred[f] += m
        batches = self.upcredits.pop(t, None)
        if batches:
            landed = True
            up = self.up_f
            for e, m in batches:
                up[e] += m
        return landed

    def _unfit_arrivals(self, e: Any, new: Any) -> bool:
        """Whether wavelets of a new stream (``new``: per entry of ``e``) reach entries that
        still hold another stream's, or reach one entry from two sides at once (an entry
        holds one stream, numbered from its head)."""
        fresh = np.atleast_1d(e)[np.atleast_1d(new)]
        return bool(_nz(self.cnt_f[fresh])) or len(set(fresh.tolist())) != fresh.size

    def _unfit_deliveries(self, e: Any, new: Any, length: Any) -> bool:
        """Whether data reaching CE queues (``e``) cannot be held: a new stream's (``new``)
        where another's is queued or half read, or one whose length is not its reader's; any
        behind a queued TEARDOWN."""
        es = np.atleast_1d(e)
        if self.qtok:
            # (marked in a scratch table of entries: no Python set of the batch's entries)
            reached = self.reached
            reached[es] = True
            behind = bool(_nz(reached[[2 * i + k for i, k in self.qtok]]))
            reached[es] = False
            if behind:
                return True
        new = np.atleast_1d(new)
        fresh = es[new]
        if not fresh.size:
            return False
        i, k = fresh >> 1, fresh & 1
        lengths = length[new] if np.ndim(length) else length  # (one per entry, or one for all)
        reading = self.oact[i, k]
        return bool(
            _nz(self.q_f[fresh])
            or _nz(reading & (self.odone[i, k] > 0))
            or _nz(reading & (self.olen[i, k] != lengths))
        )

    def _credit_ramps(self, t: int, entries: list[int]) -> None:
        """One ramp credit each for ``entries`` (distinct: one TEARDOWN per entry and cycle),
        as one batch: the same credits, in the same order, as a ``_credit_ramp`` each."""
        f = entries[0] * 8 + _RAMP if len(entries) == 1 else np.array(entries, np.int64) * 8 + _RAMP
        self._send(self.credits, t + self.lat[3], (f, 1))
        self.horizon = max(self.horizon, t + self.ring)

    def _routers(self, t: int) -> bool:
        """The routers' sends (``Router.step``); True if any wavelet moved."""
        act = self.cnt > self.td  # (wavelets buffered, route out of teardown)
        if not _nz(act):
            return False
        init = act & self.fresh
        if _nz(init):
            if _nz(init & (self.txm == 0)):
                raise RouteError("a phase colour accepts wavelets but has no tx")
            np.copyto(self.pend, self.txm, where=init)
            self.fresh ^= init  # (``init`` is inside ``fresh``)
        # (an entry that cannot send has no pending ports: its head went out of the last one,
        # or a route write made it fresh; so no mask by ``act`` here)
        want = self.want
        np.greater(self.cred, 0, out=self.credpos)
        np.bitwise_and(self.pend, self.credpos_u, out=want)
        both = want[:, 0] & want[:, 1]
        if _nz(both):  # round-robin between the two colours on the ports both want
            bi = both.nonzero()[0]
            lose0 = self.slot0_loses.take(self.rrv[bi]).view(np.uint64)[:, 0]
            b = both[bi]
            lose0 &= b
            w0 = bi * 2  # (flat: one index array, numpy's fast path)
            wf = self.want_f
            wf[w0] &= ~lose0
            wf[w0 + 1] &= ~(b & ~lose0)
        f = self.want_b.nonzero()[0]  # the sends: index into (router, slot, port)
        if not f.size:
            return False
        e = f >> 3
        pi = f & 7
        ki = e & 1
        # (one colour per port after arbitration; flat index 8 * router + port)
        self.rrv_f[(f >> 4 << 3) | pi] = self.rr_of_slot[ki]
        self.cred_f[f] -= 1
        # the entries that sent (ascending): the rest of the pass works on those, not on
        # whole tables; the ports sent out of leave the pending set (``want`` is inside it)
        es = self.want_f.nonzero()[0]
        pend_f = self.pend_f
        np.bitwise_xor(self.pend, want, out=self.pend)
        hop, lr, lch, lc = self.lat
        hd_e, nlen_e = self.hd_f[e], self.nlen_f[e]  # (each send's sequence number, length)
        tok = hd_e == nlen_e  # the sends of a TEARDOWN (numbered as its stream's length)
        mesh = pi != _RAMP
        n_mesh = _nz(mesh)
        if n_mesh:
            sent = (self.hop_to[f[mesh]], _OPP[pi[mesh]], self.sid_f[e[mesh]], nlen_e[mesh],
                    hd_e[mesh], 1)  # fmt: skip
            self._send(self.arrivals, t + hop, sent)
        if n_mesh < f.size:  # (some go down the ramp)
            data = ~(mesh | tok)  # (a TEARDOWN is not data)
            if _nz(data):
                er = e[data]
                self._send(self.deliveries, t + lr,
                           (er, self.sid_f[er], nlen_e[data], hd_e[data], 1))  # fmt: skip
        if _nz(tok):
            # (``f`` ascends: by entry, then port, the order the engine's routers send in)
            ft = f[tok]
            nbl, tokw = self.nb_list, self.tokw
            arrive = deliver = None  # (this cycle's lists, made on first use as _send does)
            for e_, p in zip((ft >> 3).tolist(), (ft & 7).tolist(), strict=True):
                i, k = e_ >> 1, e_ & 1
                w = tokw[(i, k)][0]
                if p == _RAMP:
                    if deliver is None:
                        deliver = self.tok_deliver.setdefault(t + lr, [])
                    deliver.append((i, k, w))
                else:
                    if arrive is None:
                        arrive = self.tok_arrive.setdefault(t + hop, [])
                    arrive.append((nbl[i][p], k, w))
        ed = es[pend_f[es] == 0]  # the entries whose head went out of its last port
        if ed.size:
            self.cnt_f[ed] -= 1
            hd_d = self.hd_f[ed]
            tok_done = hd_d == self.nlen_f[ed]  # (a TEARDOWN: the next stream's head is 0)
            self.hd_f[ed] = np.where(tok_done, 0, hd_d + 1)
            self.fw_f[ed] += 1  # (per colour slot: summed at the phase's end)
            self.fresh_f[ed] = True
            self.wavelets += int(ed.size)
            sp = self.src_f[ed]
            mesh = sp != _RAMP
            n_mesh = _nz(mesh)
            if n_mesh:
                self._send(self.credits, t + lch, (self.credit_to[(ed * 8 + sp)[mesh]], 1))
            if n_mesh < ed.size:  # (some came down the ramp)
                self._send(self.upcredits, t + lc, (ed[~mesh], 1))
            if _nz(tok_done):
                routers = self.engine.routers
                tokw, cols, state = self.tokw, self.cols, self._route_state
                td_f, txm_f = self.td_f, self.txm_f
                for e_ in ed[tok_done].tolist():
                    i, k = e_ >> 1, e_ & 1
                    toks = tokw[(i, k)]
                    w = toks.pop(0)
                    if not toks:
                        del tokw[(i, k)]
                    r = routers[i]
                    c = cols[k]
                    r.apply_commands(c, w)
                    # teardown now (and any switch); the entry is fresh with no pending port
                    td_f[e_], txm_f[e_] = state(r.routes.get(c))
        return True

    def _ces(self, t: int) -> bool:
        """The CEs' issues (``ComputeEngine.step``); True if any operation moved."""
        self.held_elig = self.waiting = None
        if not self.left:
            return False
        held = (t - self.hold_from).view(np.uint64) < self.hold_span
        # each CE's first ready operation: the least key of its ready columns (the column is
        # the key's low three bits; NEVER where nothing is to move). A receive (columns 0-1)
        # needs a queued wavelet of its slot, a send or control send (2-3, 4-5) an up-ramp
        # credit of its slot: one ``where`` per table, then element-wise minimums over the
        # columns (a gather of the eligible rows and an ``argmin`` over an axis of eight cost
        # ~6 times that at 4,096 CEs)
        okey, minimum, where = self.okey_t, np.minimum, np.where
        qp, upp = self.q > 0, self.up > 0
        least = where(qp[:, 0], okey[0], NEVER)
        minimum(least, where(qp[:, 1], okey[1], NEVER), out=least)
        minimum(least, where(upp[:, 0], minimum(okey[2], okey[4]), NEVER), out=least)
        minimum(least, where(upp[:, 1], minimum(okey[3], okey[5]), NEVER), out=least)
        ready = least != NEVER  # (any operation of the CE ready)
        ci = (ready > held).nonzero()[0]  # (ready and not held)
        if not ci.size:
            if _nz(ready):  # waiting for a task to give the issue slot back
                self.waiting = ready
                # (where each of them is held: a held CE's hold ends at its from + span)
                ends = self.hold_from[ready] + self.hold_span[ready].view(np.int64)
                self.held_elig = int(ends.min())
            return False
        best = least[ci] & 7
        bo, bk = best >> 1, best & 1
        # (the issuing operations as flat indices into the (CE, column) tables: one CE each)
        fb = ci * 8 + best
        odone_f, olen_f = self.odone_f, self.olen_f
        self.oissues_f[fb] += 1
        width = self.owidth_f[fb]
        done_b = odone_f[fb]
        len_b = olen_f[fb]  # (lengths do not change in this pass: read once)
        r_ = len_b - done_b
        ek = ci * 2 + bk  # (each one's (CE, slot) entry)
        _, lr, _, lc = self.lat
        # receives: up to the width, as the queue allows
        rv = bo == 0
        if _nz(rv):
            e = ek[rv]
            m = np.minimum(np.minimum(width[rv], self.q_f[e]), r_[rv])
            self.q_f[e] -= m
            odone_f[fb[rv]] += m
            self._send(self.credits, t + lc, (e * 8 + _RAMP, m))
        sd = bo == 1
        if _nz(sd):
            e = ek[sd]
            m = np.minimum(np.minimum(width[sd], self.up_f[e]), r_[sd])
            self.up_f[e] -= m
            seq = done_b[sd]  # (the receives above are other CEs' operations)
            odone_f[fb[sd]] = seq + m
            self._send(self.arrivals, t + lr, (e, _RAMP, self.ssid_f[e], len_b[sd], seq, m))
        ct = bo == 2
        if _nz(ct):
            for i, k in zip(ci[ct].tolist(), bk[ct].tolist(), strict=True):
                op = self.oref[(2, i, k)]
                e = 2 * i + k
                self.up_f[e] -= 1
                self.odone[i, 4 + k] += 1
                w = op.control_wavelet
                if op.flow_out is not None:
                    w.flow = op.flow_out
                self._send(self.tok_arrive, t + lr, (i, k, w))
                # the token belongs to the stream just sent: its sequence number is the length
                n = self.olen[i, 2 + k]
                self._send(self.arrivals, t + lr, (e, _RAMP, self.ssid_f[e], n, n, 1))
        # Complete what finished, in CE index order, then kind and slot. Only the operations that
        # issued now can have finished (one per CE, ``ci`` ascending), but for any of no
        # wavelets, which the engine completes in a cycle some CE issues: all are looked at.
        more = odone_f[fb] < len_b
        if self.empty_ops:
            done = np.flatnonzero(self.oact & (self.odone == self.olen))
        elif _nz(more) == more.size:
            return True
        else:
            done = fb[~more]
        self._complete(t, done)
        return True

    def _complete(self, t: int, done: Any) -> None:
        """Complete the operations at flat (CE, column) indices ``done`` (ascending: CE index
        order, then kind and slot), each with the CE's own ``finish_op`` in that order; a
        TEARDOWN queued behind a receive's data is acted on, their ramp credits sent as one
        batch. The tables are read and cleared for all at once: what the completions call
        (the CE's finish, its teardown signal, the hooks) writes none of them."""
        self.oact_f[done] = False
        self.okey_t[done & 7, done >> 3] = NEVER
        e = (done >> 3) * 2 + (done & 1)  # (each one's (CE, slot) entry)
        rows = zip(done.tolist(), self.oissues_f[done].tolist(), self.qsid_f[e].tolist(),
                   self.q_f[e].tolist(), strict=True)  # fmt: skip
        # (the columns' progress and issues back to 0, as the next operation on each begins)
        self.odone_f[done] = 0
        self.oissues_f[done] = 0
        oref, qtok, streams, nops, ce_at = self.oref, self.qtok, self.streams, self.nops, self.ce_at
        acted: list[int] = []
        for f, issues, qsid, queued in rows:
            i, j = f >> 3, f & 7
            o, k = j >> 1, j & 1
            op = oref.pop((o, i, k))
            if op.length <= 0:
                self.empty_ops -= 1
            self.left -= 1
            nops[i] -= 1
            op.issues = issues
            op.done = op.length
            ce = ce_at[i]
            if o == 0:
                op.out_view[:] = streams[qsid].values
            ce.finish_op(op, t)
            if o == 0:
                w = qtok.pop((i, k), None)
                if w is not None and queued == 0:
                    acted.append(2 * i + k)
                    ce.act_on_control(w)
                elif w is not None:
                    qtok[(i, k)] = w
        if acted:
            self._credit_ramps(t, acted)

    def _finish_phase(self) -> None:
        self.on = False
        self._write_back()

    def _materialise(self) -> dict[int, list[Action]]:
        """:meth:`LockstepPhase._materialise` from the tables: an entry's wavelets are its
        stream's from the head's sequence number on (its TEARDOWN at the stream's length), a
        queue's from its reader's progress on; what is in flight is numbered by the batches'
        first sequence numbers, in landing order."""
        self._write_back()
        engine = self.engine
        routers = engine.routers
        cols, streams = self.cols, self.streams
        tokens: dict[int, deque[Any]] = {}  # entry -> its TEARDOWNs, buffered then in flight
        for (i, k), ws in self.tokw.items():
            tokens.setdefault(2 * i + k, deque()).extend(ws)
        for u in sorted(self.tok_arrive):
            for i, k, w in self.tok_arrive[u]:
                tokens.setdefault(2 * i + k, deque()).append(w)

        def wavelet(e: int, sid: int, n: int, seq: int) -> Wavelet:
            if seq == n:
                return tokens[e].popleft()
            return Wavelet(float(streams[sid].values[seq]))

        to_step = set()
        for e in np.flatnonzero(self.cnt_f).tolist():
            i, k = e >> 1, e & 1
            r, colour = routers[i], cols[k]
            sid, n, hd = int(self.sid_f[e]), int(self.nlen_f[e]), int(self.hd_f[e])
            key = (Dir(int(self.src_f[e])), colour)
            buf = r.bufs.get(key)
            if buf is None:
                buf = r.bufs[key] = []
            c = int(self.cnt_f[e])
            buf.extend(wavelet(e, sid, n, s) for s in range(hd, hd + c))
            r.buffered += c
            if not self.fresh_f[e]:
                pend = int(self.pend_f[e])
                r.pending[key] = [p for p in r.routes[colour].current.tx if pend >> (8 * p) & 1]
            to_step.add(i)
        self.to_step = [routers[i] for i in sorted(to_step)]
        for e in np.flatnonzero(self.q_f).tolist():
            i, k = e >> 1, e & 1
            ce, colour = self.ce_at[i], cols[k]
            sid = int(self.qsid_f[e])
            first = int(self.odone[i, k]) if self.oact[i, k] else 0
            values = streams[sid].values
            queue = ce.input_queue(ce.queue_of_colour[colour])
            queue.extend(Wavelet(float(values[s])) for s in range(first, first + int(self.q_f[e])))
        for (i, k), w in self.qtok.items():
            ce = self.ce_at[i]
            ce.input_queue(ce.queue_of_colour[cols[k]]).append(w)
        gave = set()
        for (o, i, k), op in self.oref.items():  # (in the order they began)
            j = 2 * o + k
            op.done = int(self.odone[i, j])
            op.issues = int(self.oissues[i, j])
            ce = self.ce_at[i]
            self._give(ce, op, streams[int(self.qsid[i, k])] if o == 0 else None)
            gave.add(i)
        for i in sorted(gave):
            engine.activate_endpoint(self.ce_at[i])
        actions: dict[int, list[Action]] = {}
        due = (self.arrivals, self.deliveries, self.tok_deliver, self.credits, self.upcredits)
        for u in sorted(set().union(*due)):
            acts = actions[u] = []
            for batch in self.arrivals.get(u, ()):
                for e, port, sid, n, seq, m in _rows(*batch):
                    r, colour, side = routers[e >> 1], cols[e & 1], Dir(port)
                    for s in range(seq, seq + m):
                        w = wavelet(e, sid, n, s)
                        acts.append((r.receive, (side, colour, w)))
            for batch in self.deliveries.get(u, ()):
                for e, sid, _, seq, m in _rows(*batch):
                    ce, colour = self.ce_at[e >> 1], cols[e & 1]
                    values = streams[sid].values
                    for s in range(seq, seq + m):
                        acts.append((ce.fabric_deliver, (colour, Wavelet(float(values[s])))))
            for i, k, w in sorted(self.tok_deliver.get(u, ()), key=lambda x: (x[0], x[1])):
                acts.append((self.ce_at[i].fabric_deliver, (cols[k], w)))
            for f, m in self.credits.get(u, ()):
                for f_, m_ in _rows(f, m):
                    e, port = f_ >> 3, f_ & 7
                    r, colour = routers[e >> 1], cols[e & 1]
                    act = (r.ramp_credit, (colour,)) if port == _RAMP else (
                        r.return_credit, (Dir(port), colour))  # fmt: skip
                    acts.extend([act] * m_)
            for e, m in self.upcredits.get(u, ()):
                for e_, m_ in _rows(e, m):
                    ce, colour = self.ce_at[e_ >> 1], cols[e_ & 1]
                    acts.extend([(ce.up_credit, (colour,))] * m_)
        self._alloc()
        return actions

    def _write_back(self) -> None:
        """The round-robin state, the wavelets forwarded and the credits into the routers and
        CEs."""
        routers = self.engine.routers
        fws = self.fw.sum(axis=1).tolist()
        for r, rr, fw in zip(routers, (self.rrv[:, :5] - 1).tolist(), fws, strict=True):
            r.rr[:] = rr
            r.forwarded += fw
        self.fw[:] = 0
        if (self.cred == self.home).all() and (self.up == self.wafer.cfg.fabric.ramp_credits).all():
            return  # every credit home, as at entry: the tables are as they were
        for r in routers:  # (not reached when the phase ends with nothing in flight)
            i = r.index
            for c, k in self.slot.items():
                for port in range(5):
                    key = (Dir(port), c)
                    if key in r.credits or self.cred[i, k, port] != self.home[i, k, port]:
                        r.credits[key] = int(self.cred[i, k, port])
                self.ce_at[i].up_credits[c] = int(self.up[i, k])


def _hold(ce: ComputeEngine) -> tuple[int, int]:
    """A CE's main-thread hold as the phase keeps it: (from, span); it holds the issue slot at
    ``from <= t < from + span`` (until the CE's ``busy_until``; span 0: no task runs, or a hold
    already over)."""
    hold_from, busy = ce.hold_from, ce.busy_until
    return hold_from, busy - hold_from if ce.running is not None and busy > hold_from else 0


def _rows(*columns: Any) -> Any:
    """The rows of a batch whose columns are index arrays or scalars, as Python ints."""
    arrays = np.broadcast_arrays(*(np.atleast_1d(c) for c in columns))
    return zip(*(a.tolist() for a in arrays), strict=True)


_OPP = np.array([Dir.S, Dir.W, Dir.N, Dir.E, Dir.RAMP, -1, -1, -1], np.int64)


def credit_dtype(cap: int) -> np.dtype:
    """The smallest signed integer type that holds credit counts up to ``cap``."""
    return np.min_scalar_type(-cap - 1)  # (-cap - 1: a signed type whose max is >= cap)


#: The credit table's type: the largest home a port can have is FabricConfig's cap on
#: ``router_buffer_wavelets`` and ``ramp_credits`` (64 today: ``int8``, 64 kB at 64x64).
CREDIT_DTYPE = credit_dtype(
    max(f.metadata["max"] for f in dataclasses.fields(FabricConfig)
        if f.name in ("router_buffer_wavelets", "ramp_credits"))
)  # fmt: skip
_RAMP = int(Dir.RAMP)  # (a plain int: numpy compares and indexes with an IntEnum slowly)
