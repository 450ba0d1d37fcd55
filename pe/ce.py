"""The compute engine (CE) of one PE: tasks, queues, microthreads, timestamps.

Tasks (docs/wafer/hardware.md, "Programming model")
    64 task ids. A *data* task is bound to a colour (through an input queue) and runs once per
    wavelet that arrives on it, with the wavelet's data; a *local* task runs when activated; a
    *control* task when a control wavelet names it. A task runs only when activated (or fed) and
    not blocked, and runs to completion. When the CE is free it picks among runnable tasks the
    high-priority ones first, then the lowest id.

    A task is a plain Python function executed in one go: its instructions advance a local cycle
    counter (``t.now``) and compute real results on SRAM at once, so a task costs one kernel event
    however many instructions it has. Its side effects that others can observe (async operations,
    route writes, teardown exits) are scheduled at the local cycle they happen.

    Which task runs next is decided after everything that happens in a cycle has happened (an
    end-of-cycle hook of the wafer's cycle scheduler), so the choice does not depend on the order
    in which same-cycle events are processed.

Time
    Everything here counts cycles of the wafer's clock domain (task starts and ends, ``busy_until``,
    async operations); the wafer's :class:`simcore.stepping.CycleScheduler` converts to kernel
    ticks, so other clock domains in the same run change nothing.

Queues and microthreads
    8 input queues and 6 output queues with the WSE-2 depths (docs/wafer/hardware.md). A colour is
    bound to one input queue. An asynchronous DSD operation runs on a microthread whose id is its
    output queue if it writes to the fabric, else the input queue of its fabric input; two
    concurrent operations may not share one. Each cycle the CE advances at most one microthread by
    one element: the eligible one (inputs present, output credit available) of highest priority.

Ramps
    Wavelets go up to the router and come down from it through credit loops (see
    :mod:`fabric.config`): the CE may have ``ramp_credits`` wavelets in flight up per colour, and
    the router may have ``min(ramp_credits, queue depth)`` in flight down.

The main thread shares the datapath (docs/wafer/pe-isa.md, "One issue per cycle")
    A running task is the *main thread*. From the end of its task switch to its end it holds the
    CE's issue slot, and sits between medium and low in the microthread scheduler: a low-priority
    microthread (the default of every async operation) does not issue while a task runs, and
    resumes in the cycle the task ends; a high- or medium-priority microthread takes the slot
    from the task, which then ends one cycle later per cycle taken (``stolen_cycles``). The
    task body runs in one go when it is dispatched, so what it does at a local cycle (async
    launches, route writes, marks) keeps the cycle computed then; only its end (and so the next
    task, and the low microthreads waiting for it) moves with the stolen cycles.

Trace flows (ops level and above)
    Slices carry send/receive flows along what causes what, so a trace's critical path can walk
    across PEs: a task -> the async operations it starts; a send operation -> the operations
    that receive its stream (its wavelets carry the id; an express stream hands it to its
    receivers) and the tasks its completion activates or unblocks; a receive -> the tasks it
    activates or unblocks; a data task <- the wavelet it runs on. A slice has one outgoing id,
    which any number of slices may receive.

Left out: pre-emption of a running task by a high-priority one (the hardware does not pre-empt
either); stolen cycles moving the side effects inside the task that suffered them (see above).
"""

from __future__ import annotations

import operator
from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from fabric.endpoints import busy_at
from fabric.express import ExpressReceive, ExpressSend, try_express
from fabric.relay import MIN_RELAY_ELEMENTS, RelayPart, try_relay
from fabric.routes import Dir, RouteError
from fabric.wavelet import Wavelet
from pe.memory import Cache
from pe.ops import (
    DATA_TASK_IDS,
    INPUT_QUEUE_DEPTHS,
    LOCAL_TASK_MAX,
    PRIORITY_RANK,
    TASK_IDS,
    AsyncOp,
    TaskDef,
)
from pe.task import TaskContext
from simcore.errors import BuildError
from simcore.stepping import LATE, NORMAL
from simcore.tracing import TraceLevel

if TYPE_CHECKING:
    from fabric.engine import FabricEngine, Router

RAMP = Dir.RAMP
_new_wavelet = object.__new__  # a Wavelet without its constructor (see ComputeEngine._advance)
_new_context = object.__new__  # a TaskContext without its constructor (one per task run)
_OPS = TraceLevel.OPS  # (a module name: reading an enum member off its class costs per call)
_NO_QUEUE: Any = ()  # an input queue that has held nothing yet (see ComputeEngine.input_queue)
_NO_TRIGGERS = array("I", bytes(4 * TASK_IDS))  # (a CE's ``triggers`` with none waiting)
#: The CEs' dispatch orders (``ComputeEngine._make_order``), one object per distinct order.
_ORDERS: dict[tuple[bytes, bytes, bool, tuple[tuple[int, int], ...]], Any] = {}
_KEYS: dict[tuple[int, int], tuple[int, int]] = {}
_KIND_OF = operator.attrgetter("kind")  # (TaskDef fields read in C: see _make_order)
_PRIORITY_OF = operator.attrgetter("priority")
_ID_OF = operator.attrgetter("id")
_SECOND = operator.itemgetter(1)


def _key_of(priority: int, microthread: int) -> tuple[int, int]:
    """An arbitration key (priority, microthread), one tuple per value (a relay keeps one per
    position while it moves)."""
    key = (priority, microthread)
    return _KEYS.setdefault(key, key)


#: Microthread priority ranks (``pe.ops.PRIORITY_RANK``) below this one outrank the main thread.
MAIN_THREAD_RANK = PRIORITY_RANK["low"]


class ComputeEngine:
    """The CE of the PE at ``xy``. Built by :mod:`wafer.system`; programs talk to it via tasks.

    To the fabric it is a ramp endpoint that can take part in express streams
    (:class:`fabric.express.ExpressEndpoint`), and a stepper of the wafer's ``endpoints`` group.
    """

    # Slots: a wafer has many compute engines, and one of them is touched a few hundred times
    # per collective: its fields in the object rather than in a dict of their own take less
    # memory and fewer cache lines (``__dict__`` stays for tests that patch a method).
    __slots__ = (
        "__dict__", "_dispatch_at", "_order", "_task_flow", "_task_flow_in",
        "_task_flow_in_now", "_task_start", "_wake_at", "activated", "active", "blocked",
        "busy_cycles", "busy_until", "cache", "cfg", "colour_of_queue", "data_task_of_queue",
        "engine", "env", "exited", "express_begun", "express_issue", "express_stream",
        "express_until", "hold_from", "in_queues",
        "index", "instructions", "last_task", "marks", "ops", "ops_finished", "ops_in",
        "ops_out", "path", "queue_of_colour", "router", "running", "sched", "sim", "sram",
        "stolen_cycles", "tasks", "tasks_run", "teardown_task", "tensor_unit", "timing",
        "torn_down", "trace_level", "triggers", "up_credits", "wafer", "xy",
    )  # fmt: skip

    #: The flow id of the express stream being committed (set around ``try_express``, which
    #: commits the receivers synchronously), so the receiving operations can take it.
    _express_flow: int | None = None

    def __init__(
        self, wafer: Any, xy: tuple[int, int], index: int, path: str, sram: Any, pe_cfg: Any
    ) -> None:
        self.wafer = wafer
        self.sim = wafer.sim
        self.env = wafer.sim.env
        self.xy = xy
        self.index = index
        self.path = path
        self.sram = sram
        self.cache = Cache(pe_cfg, owner=path)  # the 256 B software-managed cache
        self.cfg = pe_cfg
        self.tensor_unit = wafer.tensor_unit  # runs and costs tensor instructions (pe.isa)
        self.timing = wafer.cfg.ce
        self.engine: FabricEngine[ComputeEngine, AsyncOp] = wafer.engine
        self.sched = wafer.engine.sched
        self.active = wafer.engine.endpoints.active  # the endpoints step group (see activate)
        self.router: Router = None  # type: ignore[assignment]
        self.tasks: dict[int, TaskDef] = {}
        # (task ids in dispatch order, their input queues, only local tasks, the data tasks'
        # (queue, id)), on first use (``_make_order``)
        self._order: tuple[bytes, bytes, bool, tuple[tuple[int, int], ...]] | None = None
        # Per task id: activated, blocked (0/1 bytes: a wafer has many PEs), control wavelets
        # waiting to run it.
        self.activated = bytearray(TASK_IDS)
        self.triggers = array("I", bytes(4 * TASK_IDS))
        self.blocked = bytearray(TASK_IDS)
        self.queue_of_colour: dict[int, int] = {}
        self.colour_of_queue: dict[int, int] = {}  # the reverse map, kept by bind_queue
        # An input queue's list is made when it is first used (input_queue); until then it is
        # a shared empty tuple.
        self.in_queues: list[list[Wavelet]] = [_NO_QUEUE] * len(INPUT_QUEUE_DEPTHS)
        self.data_task_of_queue: dict[int, int] = {}
        self.ops_in: dict[int, AsyncOp] = {}
        self.ops_out: dict[int, AsyncOp] = {}
        self.ops: list[AsyncOp] = []
        self.up_credits: dict[int, int] = {}
        self.teardown_task: int | None = None
        self.torn_down: list[int] = []
        self.running: TaskDef | None = None
        self.busy_until = 0
        self.hold_from = 0  # first cycle the running task holds the issue slot (after its switch)
        self._task_start = 0  # dispatch cycle of the running task (its trace slice starts there)
        self._task_flow_in_now: int | None = None  # the flow that caused the running task
        self.stolen_cycles = 0  # all issue cycles microthreads took from tasks
        self._wake_at = -1
        self._dispatch_at = -1
        self.marks: dict[str, int] = {}
        self.exited = False
        self.express_until = -1  # last cycle of an express stream this CE takes part in
        # (issue cycles, shift, arbitration key) of that stream's microthread on this CE
        self.express_issue: tuple[Any, int, tuple[int, int]] | None = None
        self.express_stream: Any = None  # that stream (fabric.express.ExpressStream)
        self.express_begun = False  # whether its operation here has reached its begin cycle
        self.busy_cycles = 0
        self.tasks_run = 0
        self.last_task: TaskDef | None = None
        self.instructions = 0  # synchronous tensor instructions run (livelock watchdog)
        self.ops_finished = 0  # async operations finished (livelock watchdog)
        self.trace_level = 0
        # Trace flows (see _flow): the running task's outgoing flow id, and per task id the
        # flow of what last made it runnable.
        self._task_flow: int | None = None
        self._task_flow_in: dict[int, int] = {}

    # -- build-time binding --------------------------------------------------------------------
    def bind_task(self, task: TaskDef) -> None:
        if not 0 <= task.id < TASK_IDS:
            raise BuildError(f"{self.path}: task id {task.id} out of range 0..{TASK_IDS - 1}")
        if task.kind == "data" and task.id >= DATA_TASK_IDS:
            raise BuildError(
                f"{self.path}: data task '{task.name}' has id {task.id}; data task ids are the "
                f"colours 0..{DATA_TASK_IDS - 1}"
            )
        if task.kind == "local" and task.id > LOCAL_TASK_MAX:
            raise BuildError(
                f"{self.path}: local task '{task.name}' has id {task.id}; local task ids are "
                f"0..{LOCAL_TASK_MAX}"
            )
        if task.id in self.tasks:
            other = self.tasks[task.id]
            raise BuildError(
                f"{self.path}: task id {task.id} is bound twice ('{other.name}' and "
                f"'{task.name}'); give one of them another id"
            )
        self.tasks[task.id] = task
        self._order = None
        if task.kind == "data":
            self.bind_queue(task.colour, task.queue)  # type: ignore[arg-type]
            self.data_task_of_queue[task.queue] = task.id  # type: ignore[index]

    def bind_queue(self, colour: int, queue: int) -> None:
        bound = self.queue_of_colour.get(colour)
        if bound is not None and bound == queue:
            return  # bound already (a collective binds its colour at every call)
        if not 0 <= queue < len(INPUT_QUEUE_DEPTHS):
            raise BuildError(
                f"{self.path}: input queue {queue} does not exist "
                f"(0..{len(INPUT_QUEUE_DEPTHS) - 1})"
            )
        old = self.queue_of_colour.get(colour)
        if old is not None and old != queue:
            raise BuildError(
                f"{self.path}: colour {colour} is bound to input queue {old} and {queue}"
            )
        for c, q in self.queue_of_colour.items():
            if q == queue and c != colour:
                raise BuildError(
                    f"{self.path}: input queue {queue} is bound to colour {c}; cannot also bind "
                    f"colour {colour} (use another queue)"
                )
        self.queue_of_colour[colour] = queue
        self.colour_of_queue[queue] = colour

    def input_queue(self, q: int) -> list[Wavelet]:
        """Input queue ``q``'s list, made when the first wavelet arrives or an operation first
        reads it (until then the queue is the shared empty tuple, which reads as empty). A list,
        not a deque: a queue holds at most 6 wavelets, and an empty deque takes 760 B to a
        list's 56, which on a full array's 745,500 PEs is gigabytes."""
        queue = self.in_queues[q]
        if queue is _NO_QUEUE:
            queue = self.in_queues[q] = []
        return queue

    def down_credits(self, colour: int) -> int:
        q = self.queue_of_colour.get(colour)
        if q is None:
            raise RouteError(
                f"colour {colour}: {self.path} routes it to its RAMP but binds no input queue or "
                "data task to it (bind a queue, or drop RAMP from the colour's tx)"
            )
        return min(self.wafer.cfg.fabric.ramp_credits, INPUT_QUEUE_DEPTHS[q])

    # -- fabric side -----------------------------------------------------------------------------
    def fabric_deliver(self, colour: int, w: Wavelet) -> None:
        """A wavelet came down the ramp (called by the engine at the start of a cycle).

        Data and control wavelets queue in arrival order in the colour's input queue. A control
        wavelet is acted on when it reaches the head: one naming a control task triggers one run
        of that task; one naming none is consumed. With no reader on the queue, control
        wavelets at the head are acted on at once."""
        q = self.queue_of_colour.get(colour)
        if q is None:  # only control wavelets get here (the route check needs a queue for data)
            self._return_down_credit(colour)
            self.act_on_control(w)
            return
        queue = self.in_queues[q]
        if queue is _NO_QUEUE:
            queue = self.input_queue(q)
        queue.append(w)
        engine = self.engine
        if engine.detail:
            engine.counter(f"{self.path}/ce", f"input queue {q}", len(queue))
        if q in self.ops_in:
            self.active[self.index] = self
        elif q in self.data_task_of_queue:
            if self.running is None:
                self._schedule_dispatch()
        else:
            self._drain_control(q, colour)  # (the colour's queue: a queue has one colour)

    def act_on_control(self, w: Wavelet) -> None:
        """Act on a control wavelet that reached the head of its queue (one naming a control
        task triggers one run of it). Part of the interface a fast engine uses."""
        if w.task_id is not None:
            self.triggers[w.task_id] += 1
            if w.flow is not None:
                self._task_flow_in[w.task_id] = w.flow
            self._schedule_dispatch()

    def _drain_control(self, q: int, colour: int | None = None) -> None:
        """Consume the control wavelets at the head of input queue ``q`` (of ``colour``, looked
        up if not given): the TEARDOWN behind every broadcast comes here on each CE of its
        tree. One naming no task is only consumed (``act_on_control``)."""
        queue = self.in_queues[q]
        while queue and queue[0].ctrl:
            w = queue.pop(0)
            if colour is None:
                colour = self._colour_of_queue(q)
            self._return_down_credit(colour)
            if w.task_id is not None:
                self.act_on_control(w)

    def _return_down_credit(self, colour: int) -> None:
        # (``engine.later(ramp_credit_latency, router.ramp_credit, colour)`` without its call:
        # the same due list, the same order; the latency is at least one cycle)
        sched = self.sched
        t = self.env._now // sched.period + self.engine.ramp_credit_latency
        (sched.due.get(t) or sched.due_slot(t)).append((self.router.ramp_credit, (colour,)))

    def up_credit(self, colour: int) -> None:
        up = self.up_credits
        up[colour] = up.get(colour, 0) + 1
        if self.ops:
            self.active[self.index] = self

    def teardown_signal(self, colour: int, flow: int | None = None) -> None:
        task_id = self.teardown_task
        if task_id is None:
            return
        if flow is not None:
            self._task_flow_in[task_id] = flow
        self.torn_down.append(colour)
        self.activated[task_id] = True  # (``_activate_now``, inlined: once per TEARDOWN seen)
        if self.running is None:
            self._schedule_dispatch()

    def up_credit_count(self, colour: int) -> int:
        """Up-ramp credits the CE holds for ``colour`` (all ``ramp_credits`` until first used).
        Part of the interface a fast engine uses."""
        c = self.up_credits.get(colour)
        if c is None:
            c = self.up_credits[colour] = self.wafer.cfg.fabric.ramp_credits
        return c

    def _eligible(self, op: AsyncOp) -> bool:
        if op.fab_in is not None and not op.in_queue:
            return False
        colour = op.out_colour
        if colour is None:
            return True
        c = self.up_credits.get(colour)
        return (c if c is not None else self.up_credit_count(colour)) > 0

    def step(self, t: int) -> bool:
        """Advance the eligible microthread of highest priority by one issue. Returns whether
        any microthread can still issue next cycle; otherwise the CE sleeps until a wavelet or
        a credit arrives (``fabric_deliver`` / ``up_credit`` wake it)."""
        best: AsyncOp | None = None
        best_key = None
        held = self.running is not None and self.hold_from <= t < self.busy_until
        waiting = False  # an eligible microthread below the main thread waits for the task
        others = 0  # eligible microthreads found, ``best`` among them (for the return value)
        up = self.up_credits
        for op in self.ops:
            # ``_eligible``, inlined (this loop runs once per issue of every microthread)
            if op.fab_in is not None and not op.in_queue:
                continue
            colour = op.out_colour
            if colour is not None:
                c = up.get(colour)
                if (c if c is not None else self.up_credit_count(colour)) <= 0:
                    continue
            others += 1
            if held and op.priority >= MAIN_THREAD_RANK:
                waiting = True
                continue
            if best is None:
                best = op  # (its key is made only when a second one is found, or read below)
            else:
                if best_key is None:
                    best_key = (best.priority, best.microthread)
                key = (op.priority, op.microthread)
                if key < best_key:
                    best, best_key = op, key
        if best is None:
            if waiting and self._wake_at != self.busy_until:
                self._wake_at = self.busy_until  # step again when the task gives the slot back
                self.engine.at(self.busy_until, self._wake)
            return False
        if self.express_until >= t and self.express_issue is not None:
            cycles, shift, key = self.express_issue
            if best_key is None:
                best_key = (best.priority, best.microthread)
            if key < best_key and busy_at(cycles, shift, t):
                # The express stream's microthread wins this cycle's issue slot (taken from a
                # task holding it already: counted by _express_steals when it was dispatched).
                return True
        if held:  # a microthread above the main thread takes this cycle: the task ends later
            self.busy_until += 1
            self.busy_cycles += 1
            self.stolen_cycles += 1
            issue = self.express_issue
            if (self.express_until >= self.busy_until - 1 and issue is not None
                    and issue[2][0] < MAIN_THREAD_RANK):  # fmt: skip
                # the hold now reaches one cycle further: the stream's issues there take it too
                self._express_steals(self.busy_until - 1)
        # One issue moves up to the op's SIMD width of elements, as inputs and credits allow.
        best.issues += 1
        out_colour = best.out_colour
        if best.width == 1:
            self._advance(best, t)
        else:
            fab_in = best.fab_in
            for _ in range(best.width):
                self._advance(best, t)
                if best.done == best.length:
                    break
                # (``_eligible``, inlined: once per element of a wide issue)
                if fab_in is not None and not best.in_queue:
                    break
                if out_colour is not None:
                    c = up.get(out_colour)
                    if (c if c is not None else self.up_credit_count(out_colour)) <= 0:
                        break
        if out_colour is None:
            # Advancing a microthread that writes to memory touches only its own input queue,
            # so the others found eligible above still are, and no other became eligible.
            return others > 1 or (
                best.done < best.length and (best.fab_in is None or bool(best.in_queue))
            )
        for op in self.ops:  # (``_eligible``, inlined: once per issue)
            if op.fab_in is not None and not op.in_queue:
                continue
            colour = op.out_colour
            if colour is None:
                return True
            c = up.get(colour)
            if (c if c is not None else self.up_credit_count(colour)) > 0:
                return True
        return False

    def _wake(self) -> None:
        self._wake_at = -1
        if self.ops:
            self.active[self.index] = self

    def _advance(self, op: AsyncOp, t: int) -> None:
        k = op.done
        engine = self.engine
        value: Any
        fab_in = op.fab_in
        if fab_in is not None:
            w = op.in_queue.pop(0)  # type: ignore[union-attr]
            if engine.detail:
                engine.counter(f"{self.path}/ce", f"input queue {fab_in}", len(op.in_queue))
            colour = self.colour_of_queue.get(fab_in)
            if colour is None:
                colour = self._colour_of_queue(fab_in)  # raises
            # (engine.later, inlined: the same list of due actions)
            due_t = t + engine.ramp_credit_latency
            sched = self.sched
            (sched.due.get(due_t) or sched.due_slot(due_t)).append(
                (self.router.ramp_credit, (colour,))
            )
            if w.flow is not None:
                op.flow_in = w.flow  # the data decides when a receive ends: its sender
            if w.ctrl:
                self.act_on_control(w)  # a control wavelet in the stream: acted on, not an element
                return
            value = w.data
            if op.func is not None:
                value = op.elem(value, k)  # type: ignore[misc]
        elif op.control_wavelet is not None:
            value = None
        else:
            value = op.values[k]  # type: ignore[index]
        out_colour = op.out_colour
        if out_colour is not None:
            self.up_credits[out_colour] -= 1
            w_out = op.control_wavelet
            if w_out is None:
                # ``Wavelet(data, flow=op.flow_out)`` without the constructor's call (one per
                # element sent): the same five fields, set here.
                w_out = _new_wavelet(Wavelet)
                w_out.data = float(value) if value is not None else 0.0
                w_out.ctrl = False
                w_out.commands = ()
                w_out.task_id = None
                w_out.flow = op.flow_out
            elif op.flow_out is not None:
                w_out.flow = op.flow_out
            due_t = t + engine.ramp_latency
            sched = self.sched
            (sched.due.get(due_t) or sched.due_slot(due_t)).append(
                (self.router.receive, (RAMP, out_colour, w_out))
            )
        else:
            op.out_view[k] = value  # type: ignore[index]
        k += 1
        op.done = k
        if k == op.length:
            self.finish_op(op, t)

    def _colour_of_queue(self, q: int) -> int:
        colour = self.colour_of_queue.get(q)
        if colour is None:
            raise BuildError(f"{self.path}: input queue {q} has no colour bound")
        return colour

    def finish_op(self, op: AsyncOp, t: int) -> None:
        """``op`` moved its last element in cycle ``t``: free its queues, write its memory
        result, act on the control wavelets behind its input, run its completion actions. Part
        of the interface a fast engine uses (the engine leaves an ``express`` operation to it)."""
        self.ops_finished += 1
        if not op.express:
            self.ops.remove(op)
        if op.fab_in is not None:
            del self.ops_in[op.fab_in]
            self._drain_control(op.fab_in)  # control wavelets that followed the data
        if op.out_colour is not None:
            del self.ops_out[op.microthread]
        if op.out_mem is not None and op.out_view is not None and op.out_view.base is None:
            op.out_mem.write(self.sram, op.out_view)
        if self.trace_level >= _OPS:
            if op.on_done and op.flow_out is None:
                op.flow_out = self._flow()
            self.emit_slice(
                f"{self.path}/mt[{op.microthread}]", "async", op.name, op.started,
                t + 1 - op.started, {"elements": op.length, "issue_cycles": op.issues},
                flow_out=op.flow_out, flow_in=op.flow_in,
            )  # fmt: skip
            for _, task_id in op.on_done:
                self._task_flow_in[task_id] = op.flow_out  # type: ignore[assignment]
        for action, task_id in op.on_done:
            if action == "activate":
                self.activated[task_id] = True
            else:
                self.blocked[task_id] = False
        if op.on_done:
            self._schedule_dispatch()

    def start_op(self, op: AsyncOp, at_cycle: int) -> None:
        """Register ``op`` now (queue conflicts are checked at once) and start it at a cycle."""
        # (``_claim`` and ``input_queue`` called only where they have something to do: one
        # operation or more per task)
        q = op.fab_in
        if q is not None:
            if q in self.ops_in:
                self._claim(self.ops_in, "input", q, op)  # (raises)
            self.ops_in[q] = op
            queue = self.in_queues[q]
            op.in_queue = queue if queue is not _NO_QUEUE else self.input_queue(q)
        if op.out_colour is not None:
            mt = op.microthread
            if mt in self.ops_out:
                self._claim(self.ops_out, "output", mt, op)  # (raises)
            self.ops_out[mt] = op
        if self.trace_level >= _OPS:
            if self.running is not None:  # started by the running task: a flow from it
                if self._task_flow is None:
                    self._task_flow = self._flow()
                op.flow_in = self._task_flow
            if op.out_colour is not None:
                op.flow_out = self._flow()  # carried by its wavelets to the receiving ops
        op.begin_at = at_cycle
        # (``engine.at(at_cycle, self._begin, op)`` without its call: the same due list)
        sched = self.sched
        if at_cycle <= self.env._now // sched.period:
            sched.at(at_cycle, self._begin, op)  # (raises: not after the current cycle)
        (sched.due.get(at_cycle) or sched.due_slot(at_cycle)).append((self._begin, (op,)))

    def _flow(self) -> int:
        """A new trace flow id, unique over the wafer."""
        self.wafer.flows_issued += 1
        return self.wafer.flows_issued

    def _claim(self, table: dict[int, AsyncOp], kind: str, queue: int, op: AsyncOp) -> None:
        other = table.get(queue)
        if other is not None:
            raise BuildError(
                f"{self.path}: two async operations use {kind} queue {queue} at once "
                f"('{other.name}' and '{op.name}'); give one a different queue"
            )
        table[queue] = op

    def _begin(self, op: AsyncOp) -> None:
        lockstep = self.engine.lockstep
        if lockstep is not None and lockstep.take(self, op):
            return  # moved by the lock-step phase (wafer/lockstep.py)
        if op.express:
            self.express_begun = True
            return  # already carried by an express stream
        now = self.engine.now_cycle()
        if (
            self.express_until >= now
            and self.express_issue is not None
            and (op.priority, op.microthread) < self.express_issue[2]
        ):
            # An express stream is using this CE's issue slots and the new operation outranks
            # its microthread: the stream goes on wavelet by wavelet from this cycle, where the
            # two arbitrate (fabric/express.py). An operation the stream outranks only issues
            # in the cycles the stream leaves free, as it would.
            self.express_stream.hand_back(now)
        op.started = now
        if self.engine.fast and op.out_colour is not None and self._express_send(op, now):
            return
        self.ops.append(op)
        self.active[self.index] = self
        if self.engine.fast and op.control_wavelet is None and op.length >= MIN_RELAY_ELEMENTS:
            # A link of a chain reduction: the whole chain may move as a relay (fabric/relay.py)
            fab_in = op.fab_in
            colour_in = self.colour_of_queue.get(fab_in) if fab_in is not None else None
            if colour_in is not None or (op.values is not None and op.out_colour is not None):
                try_relay(self.engine, self, colour_in, op.out_colour, now)

    # -- express streams (the fast fidelity; see fabric/express.py) ------------------------------
    def _express_send(self, op: AsyncOp, now: int) -> bool:
        """Offer ``op`` to the fabric as an express stream if this CE's side qualifies: a plain
        memory -> fabric move, no other microthread, the colour's ramp credits all home."""
        if op.values is None or op.fab_in is not None or op.control_wavelet is not None:
            return False
        if self.ops or len(self.ops_out) != 1 or self.ops_in or self.express_until >= now:
            return False
        if self.running is not None and self.busy_until > now:
            return False  # the main thread holds issue cycles of the stream: wavelet by wavelet
        colour: int = op.out_colour  # type: ignore[assignment]
        if self.up_credit_count(colour) != self.wafer.cfg.fabric.ramp_credits:
            return False
        send = ExpressSend(
            op, colour, op.length, op.width, op.values, (op.priority, op.microthread),
            op.flow_out,
        )  # fmt: skip
        ComputeEngine._express_flow = op.flow_out  # read by the receivers' commits, just below
        try:
            return try_express(self.engine, self.router, send, now)
        finally:
            ComputeEngine._express_flow = None

    def express_receive(self, colour: int, length: int, now: int) -> ExpressReceive | None:
        q = self.queue_of_colour.get(colour)
        if q is None:
            return None
        rop = self.ops_in.get(q)
        if (
            rop is None
            or rop.func is not None
            or rop.out_view is None
            or rop.length != length
            or len(self.ops_in) != 1
            or self.ops_out
            or (self.ops and (len(self.ops) != 1 or self.ops[0] is not rop))
            or rop.done
            or self.in_queues[q]
            or self.express_until >= now
            or (self.running is not None and self.busy_until > rop.begin_at)
        ):
            return None
        down = min(self.engine.cfg.ramp_credits, INPUT_QUEUE_DEPTHS[q])  # (down_credits)
        return ExpressReceive(rop, rop.begin_at, down, (rop.priority, rop.microthread))

    def commit_express_send(
        self, send: ExpressSend, issues: np.ndarray, credits_away: int, stream: Any
    ) -> None:
        op: AsyncOp = send.op
        self.express_until = int(issues[-1])
        self.express_issue = (issues, 0, send.key)
        self.express_stream = stream
        self.express_begun = True  # (committed as it begins)
        self.up_credits[send.colour] -= credits_away
        op.started = int(issues[0])
        op.express = True
        op.issues = int(np.count_nonzero(np.diff(issues))) + 1

    def commit_express_receive(
        self, recv: ExpressReceive, pops: np.ndarray, shift: int, stream: Any
    ) -> None:
        rop: AsyncOp = recv.op
        self.express_begun = rop in self.ops
        if self.express_begun:
            self.ops.remove(rop)  # begun this cycle, nothing moved yet: the stream takes it over
        self.express_until = int(pops[-1]) + shift
        self.express_issue = (pops, shift, recv.key)
        self.express_stream = stream
        rop.express = True
        rop.started = rop.begin_at
        rop.issues = len(pops)
        if ComputeEngine._express_flow is not None:
            rop.flow_in = ComputeEngine._express_flow

    def express_hand_back(
        self, stream: Any, op: AsyncOp, done: int, issues: int, t: int,
        values: np.ndarray | None, up_adjust: int, queued: list[Wavelet],
    ) -> None:  # fmt: skip
        """The express stream ``stream`` gives its work here back to the wavelet path from
        cycle ``t`` (see :class:`fabric.express.ExpressEndpoint`)."""
        if self.express_stream is stream:
            if self.express_issue is not None and self.express_issue[2][0] < MAIN_THREAD_RANK:
                self._express_unsteal(t)
            self.express_until = -1
            self.express_issue = None
            self.express_stream = None
        if up_adjust:
            colour: int = op.out_colour  # type: ignore[assignment]
            self.up_credits[colour] = self.up_credit_count(colour) + up_adjust
        if done == op.length:
            return  # its part of the stream was over (completed) before t
        op.express = False
        op.done = done
        op.issues = issues
        if values is not None and done:
            op.out_view[:done] = values[:done]  # type: ignore[index]
        if queued:
            # (before anything that reached the queue behind the stream, e.g. its TEARDOWN)
            self.input_queue(op.fab_in)[0:0] = queued  # type: ignore[arg-type]
        if not self.express_begun:
            return  # (it joins the microthreads when it begins, as any operation)
        self.ops.append(op)
        if t <= self.engine.now_cycle():
            self.active[self.index] = self
        else:
            self.engine.at(t, self.engine.activate_endpoint, self)

    # -- relay chains (the fast fidelity; see fabric/relay.py) ----------------------------------
    def relay_part(
        self, colour_in: int | None, colour_out: int | None, now: int
    ) -> RelayPart | None:
        """This CE's side of a relay chain (:class:`fabric.relay.RelayEndpoint`): the far end's
        plain memory -> fabric move, a relay's or the root's ``fadds`` of the fabric input and
        a memory source, alone on the CE."""
        if self.express_until >= now or self.trace_level >= _OPS:
            # (an ops-level trace keeps the wavelet path: a relay's completions would come
            # first in their cycle, not in the CEs' order, and move slices and flow ids)
            return None
        if colour_in is not None:
            q = self.queue_of_colour.get(colour_in)
            op = self.ops_in.get(q) if q is not None else None  # type: ignore[arg-type]
            if op is None or op.out_colour != colour_out or op.name != "fadds":
                return None
            plan = op.plan  # (the fabric value and one memory source, in either order)
            if len(plan) != 2 or plan[0][0] + plan[1][0] not in ("fm", "mf"):
                return None
            if colour_out is None and op.out_view is None:
                return None
            down = min(self.engine.cfg.ramp_credits, INPUT_QUEUE_DEPTHS[q])  # type: ignore[index]
            queued = list(op.in_queue) if op.in_queue else []
            if len(self.ops_in) != 1:
                return None
        else:
            op = next((o for o in self.ops_out.values() if o.out_colour == colour_out), None)
            if op is None or op.fab_in is not None or op.values is None or self.ops_in:
                return None
            down = 0
            queued = []
        if op.control_wavelet is not None or op.express:
            return None
        if len(self.ops_out) != (colour_out is not None):
            return None
        if self.ops and (len(self.ops) != 1 or self.ops[0] is not op):
            return None
        began = bool(self.ops)
        start = op.begin_at if op.begin_at > now else now
        gate = start
        if self.running is not None and self.busy_until > start:
            if self.hold_from > start or op.priority < MAIN_THREAD_RANK:
                return None  # issues before the task holds the slot, or takes it from the task
            gate = self.busy_until
        up = self.up_credit_count(colour_out) if colour_out is not None else 0
        return RelayPart(
            op, gate, op.width, down, _key_of(op.priority, op.microthread), op.done, op.issues,
            queued, up, op.flow_out, began,
        )  # fmt: skip

    def commit_relay(
        self, part: RelayPart, issues: Any, last: int, count: int, up_after: int, stream: Any,
        flow_in: int | None,
    ) -> None:  # fmt: skip
        op: AsyncOp = part.op
        if part.began:
            self.ops.remove(op)
        self.express_begun = part.began
        self.express_until = last
        self.express_issue = (issues, 0, part.key)
        self.express_stream = stream
        if op.out_colour is not None:
            self.up_credits[op.out_colour] = up_after
        if op.in_queue:
            del op.in_queue[:]  # (the stream's now; a hand-back gives back what is left)
        op.express = True
        if not part.began:
            op.started = op.begin_at
        op.issues = part.issues + count
        if flow_in is not None:
            op.flow_in = flow_in

    def _express_unsteal(self, t: int) -> None:
        """Give back the issue cycles from ``t`` on that :meth:`_express_steals` took from the
        running task for the stream: on the wavelet path the stream's microthread takes them
        again as it issues."""
        cycles, shift, _ = self.express_issue  # type: ignore[misc]
        lo = max(t, self.hold_from)
        if self.running is None or self.busy_until <= lo:
            return
        seg = cycles[cycles.searchsorted(lo - shift) : cycles.searchsorted(self.busy_until - shift)]
        taken = int(np.count_nonzero(np.diff(seg))) + 1 if len(seg) else 0
        if taken:
            self.busy_until -= taken
            self.busy_cycles -= taken
            self.stolen_cycles -= taken
            # (the task's end may already wait at the later cycle: one more look at this one)
            self.sched.event_at(self.busy_until, self._task_end)

    def complete_express(self, op: AsyncOp, values: Any) -> None:
        """The end of an express stream for ``op`` (a send, or a receive given its data)."""
        if values is not None:
            op.out_view[:] = values  # type: ignore[index]
        op.done = op.length
        self.finish_op(op, self.engine.now_cycle())

    # -- task dispatch -----------------------------------------------------------------------
    def activate_at_start(self, task_id: int) -> None:
        self.activated[task_id] = True
        self._schedule_dispatch()

    def _activate_now(self, task_id: int) -> None:
        self.activated[task_id] = True
        self._schedule_dispatch()

    def _schedule_dispatch(self) -> None:
        """Choose the next task at the end of this cycle (or when the running one ends)."""
        if self.running is not None:
            return
        sched = self.sched
        now = self.env._now // sched.period
        when = now if now > self.busy_until else self.busy_until
        if self._dispatch_at == when:
            return
        self._dispatch_at = when
        # (sched.end_of_cycle(when, ...) without its past-time check, ``when`` is not before
        # now, and ``kernel_call``'s body without its call: see ``CycleScheduler.open_batches``)
        w = when * sched.period
        key = 4 * w + LATE
        eid = next(sched.eid_counter)
        batch = sched.open_batches.get(key) or sched.open_batch(w, LATE, key, eid)
        batch.fns.append(self._dispatch)
        batch.eids.append(eid)

    def _make_order(self) -> tuple[bytes, bytes, bool, tuple[tuple[int, int], ...]]:
        """``_order``: task ids in dispatch order and each one's input queue (255: not a data
        task), two small bytes objects read on every dispatch of every PE (few cache lines);
        whether all tasks are local; and the data tasks' (queue, id) in dispatch order."""
        table = self.tasks.values()
        if "data" not in map(_KIND_OF, table):
            # Local and control tasks only (made once per PE on its first dispatch: C-level
            # maps and one sort of (rank, id) pairs, the same order as the general form below)
            ranks = map(PRIORITY_RANK.__getitem__, map(_PRIORITY_OF, table))
            keys = sorted(zip(ranks, map(_ID_OF, table)))  # noqa: B905 (one table, two maps)
            n = len(keys)
            order = (bytes(map(_SECOND, keys)), b"\xff" * n, True, ())
        else:
            tasks = sorted(table, key=lambda task: (PRIORITY_RANK[task.priority], task.id))
            queues = bytes(255 if task.kind != "data" else task.queue for task in tasks)  # type: ignore[misc]
            local_only = all(q == 255 for q in queues)
            data = tuple((q, task.id) for task, q in zip(tasks, queues, strict=True) if q != 255)
            order = (bytes(task.id for task in tasks), queues, local_only, data)
        # (shared by the CEs with the same tasks: a full array has 745,500)
        order = self._order = _ORDERS.setdefault(order, order)
        return order

    def _runnable(self) -> TaskDef | None:
        """The task to run next: high priority first, then the lowest id."""
        order = self._order
        if order is None:
            order = self._make_order()
        ids, queues, local_only, _ = order
        activated, blocked, triggers = self.activated, self.blocked, self.triggers
        if local_only:
            if 1 not in activated and triggers == _NO_TRIGGERS:
                return None  # (nothing activated or triggered: a dispatch after a task's end)
            for tid in ids:
                if (activated[tid] or triggers[tid]) and not blocked[tid]:
                    return self.tasks[tid]
            return None
        in_queues = self.in_queues
        for tid, queue in zip(ids, queues):  # noqa: B905 (equal lengths by construction)
            if queue == 255:
                if (activated[tid] or triggers[tid]) and not blocked[tid]:
                    return self.tasks[tid]
            elif in_queues[queue] and not blocked[tid]:
                return self.tasks[tid]  # a data task: runnable while its queue holds a wavelet
        return None

    def _dispatch(self, _ev: Any) -> None:
        self._dispatch_at = -1
        start = self.env._now // self.sched.period
        if self.running is not None or start < self.busy_until:
            return
        # ``_runnable`` without its call (every task is chosen here, and a third of dispatches
        # find nothing): with no task activated or triggered, only a data task can run, the
        # first in dispatch order whose queue holds a wavelet and that is not blocked; on a CE
        # with local tasks only, the first activated or triggered one that is not blocked;
        # else ``_runnable``'s loop. (``_runnable`` stays as the reference: tests check every
        # dispatch's choice against it, tests/test_conformance.py.)
        order = self._order
        if order is None:
            order = self._make_order()
        task: TaskDef | None
        activated, triggers = self.activated, self.triggers
        if 1 not in activated and triggers == _NO_TRIGGERS:
            in_queues, blocked = self.in_queues, self.blocked
            for q, tid in order[3]:
                if in_queues[q] and not blocked[tid]:
                    task = self.tasks[tid]
                    break
            else:
                return
        elif order[2]:
            blocked = self.blocked
            if triggers == _NO_TRIGGERS and activated.count(1) == 1:
                # One task activated and none triggered (most dispatches): the loop below would
                # find that one (a bound task) unless it is blocked, and nothing else; two
                # searches in C instead of its walk of the dispatch order.
                task = self.tasks.get(activated.index(1))  # type: ignore[assignment]
                if task is None or blocked[task.id]:
                    return
            else:
                for tid in order[0]:
                    if (activated[tid] or triggers[tid]) and not blocked[tid]:
                        task = self.tasks[tid]
                        break
                else:
                    return
        else:  # (the rest of ``_runnable``, as it is: local and data tasks in dispatch order)
            in_queues, blocked = self.in_queues, self.blocked
            for tid, queue in zip(order[0], order[1]):  # noqa: B905 (equal lengths)
                if queue == 255:
                    if (activated[tid] or triggers[tid]) and not blocked[tid]:
                        task = self.tasks[tid]
                        break
                elif in_queues[queue] and not blocked[tid]:
                    task = self.tasks[tid]
                    break
            else:
                return
        begin = start + self.cfg.task_switch_cycles
        ctx = _new_context(TaskContext)  # (``TaskContext(self, task, begin)`` without its call)
        ctx.ce = self
        ctx.task = task
        ctx.now = begin
        self.running = task
        self._task_flow = None
        self.hold_from = begin
        engine = self.engine
        flow_in = self._task_flow_in.pop(task.id, None) if self._task_flow_in else None
        if task.kind == "data":
            queue = self.in_queues[task.queue]  # type: ignore[index]
            w = queue.pop(0)
            self._return_down_credit(task.colour)  # type: ignore[arg-type]
            if w.ctrl:
                # A control wavelet in the data stream, acted on in its turn; then the scheduler
                # chooses again (priority decides between its control task and the next data).
                self.act_on_control(w)
                self.running = None
                self._schedule_dispatch()
                return
            flow_in = w.flow if w.flow is not None else flow_in
            task.fn(ctx, w.data)
        else:
            if triggers[task.id]:
                triggers[task.id] -= 1
            else:
                activated[task.id] = False
            task.fn(ctx)
        end = ctx.now if ctx.now > start else start + 1
        self.busy_cycles += end - start
        self.tasks_run += 1
        self.last_task = task
        self.busy_until = end
        if self.express_until >= begin and self.express_issue is not None:
            if self.express_issue[2][0] >= MAIN_THREAD_RANK:
                # The task holds the stream's microthread from ``begin``: a relay chain takes
                # the hold into its schedule (fabric/relay.py); otherwise the stream goes on
                # wavelet by wavelet from the next cycle (fabric/express.py).
                stream = self.express_stream
                if not stream.task_holds(self, begin, end):
                    stream.hand_back(start + 1)
            else:
                self._express_steals(begin)
        self._task_start = start
        self._task_flow_in_now = flow_in
        # (sched.event_at(end, ...) without its check, ``end`` is not before now, and
        # ``kernel_call``'s body without its call: see ``CycleScheduler.open_batches``)
        sched = self.sched
        when = end * sched.period
        key = 4 * when + NORMAL
        eid = next(sched.eid_counter)
        batch = sched.open_batches.get(key) or sched.open_batch(when, NORMAL, key, eid)
        batch.fns.append(self._task_end)
        batch.eids.append(eid)
        lockstep = engine.lockstep
        if lockstep is not None and lockstep.on:
            lockstep.hold(self)

    def _express_steals(self, begin: int) -> None:
        """The running task (holding the issue slot from ``begin`` to its end) loses the cycles
        in which the express stream's microthread, above the main thread, issues: each moves
        its end one cycle later, as :meth:`step` does for a microthread on the wavelet path.
        (Called at dispatch, and by :meth:`step` with the one cycle another microthread's
        issue added to the hold: every stream issue inside the hold is counted once.)"""
        cycles, shift, _ = self.express_issue  # type: ignore[misc]
        n = len(cycles)
        i = int(cycles.searchsorted(begin - shift))
        end = self.busy_until
        stolen = 0
        while i < n:
            c = int(cycles[i])
            if c + shift >= end:
                break
            end += 1
            stolen += 1
            while i < n and int(cycles[i]) == c:  # (several elements per issue: one cycle)
                i += 1
        if stolen:
            self.busy_until = end
            self.busy_cycles += stolen
            self.stolen_cycles += stolen

    def _task_end(self, _ev: Any) -> None:
        now = self.env._now // self.sched.period
        if self.busy_until > now:
            self.sched.event_at(self.busy_until, self._task_end)  # microthreads took cycles
            return
        task = self.running
        if self.trace_level >= _OPS and task is not None:
            start = self._task_start  # the slice ends when the task does, stolen cycles included
            self.emit_slice(
                f"{self.path}/ce", "task", task.name, start, now - start,
                {"task_id": task.id, "kind": task.kind},
                flow_out=self._task_flow, flow_in=self._task_flow_in_now,
            )  # fmt: skip
        self.running = None
        lockstep = self.engine.lockstep
        if lockstep is not None:
            if lockstep.on:
                lockstep.hold(self)
        elif self._dispatch_finds_nothing(now):
            # Left out; its insertion id is taken as it would be (the ids, hence ``events``,
            # stay the reference's), and a later activation in this cycle schedules its own
            # dispatch, as it would once this one had run.
            next(self.sched.eid_counter)
            return
        self._schedule_dispatch()  # (no task runs now)

    def _dispatch_finds_nothing(self, now: int) -> bool:
        """Whether the dispatch a task's end at cycle ``now`` would put at the end of the cycle
        (no lock-step phase) must find nothing: on a CE with local tasks only it looks at
        ``activated`` and ``triggers``, which only this CE's tasks (none runs), the wafer's due
        actions and steps (no tick of this cycle is left: none can be added now) and the
        lock-step phase (none) change. (tests/test_conformance.py runs the random families with
        this answering False, the reference, and compares everything a run leaves.)"""
        order = self._order
        return (
            self._dispatch_at < 0
            and 1 not in self.activated
            and self.triggers == _NO_TRIGGERS
            and order is not None
            and order[2]
            and now not in self.sched.ticking
        )

    def emit_slice(
        self, path: str, category: str, name: str, start: int, dur: int, args: dict[str, Any],
        *, flow_out: int | None = None, flow_in: int | None = None,
    ) -> None:  # fmt: skip
        """Trace a slice of ``dur`` cycles from cycle ``start`` (callers check the level).
        ``flow_out``/``flow_in`` link it to what it caused and what caused it (module doc)."""
        p = self.sched.period
        self.sim.tracer.emit(
            start * p, dur * p, start, dur, self.sched.domain.name, path, category, name,
            flow_out=flow_out, flow_in=flow_in, args=args,
        )  # fmt: skip

    # -- diagnosis -------------------------------------------------------------------------------
    def _describe_op(self, op: AsyncOp) -> str:
        """An operation's progress and what it waits for, naming colours, queues and routes."""
        parts = [op.describe()]
        if op.fab_in is not None:
            colour = self._colour_of_queue(op.fab_in)
            route = self.router.routes.get(colour)
            state = "no route" if route is None else route.current.describe()
            if route is not None and route.teardown:
                state += ", in teardown"
            parts.append(
                f"waiting for colour {colour} on input queue {op.fab_in} "
                f"({len(self.in_queues[op.fab_in])}/{INPUT_QUEUE_DEPTHS[op.fab_in]} wavelets); "
                f"this router's colour {colour}: {state}"
            )
        if op.out_colour is not None and self.up_credit_count(op.out_colour) <= 0:
            parts.append(
                f"no ramp credit for colour {op.out_colour}: the router is not draining it"
            )
        return "; ".join(parts)

    def pending(self) -> list[str]:
        # (asked of every PE at a run's end: each loop only where the byte search, or ``any``,
        # in C finds something it could report)
        notes = [self._describe_op(op) for op in self.ops] if self.ops else []
        if 1 in self.activated and 1 in self.blocked:
            for tid, task in sorted(self.tasks.items()):
                if task.kind != "data" and self.activated[tid] and self.blocked[tid]:
                    notes.append(f"task '{task.name}' (id {tid}) is activated but blocked")
        if any(self.in_queues):
            for q, queue in enumerate(self.in_queues):
                if queue and q not in self.ops_in and q not in self.data_task_of_queue:
                    notes.append(f"input queue {q} holds {len(queue)} wavelet(s) nobody reads")
        return notes
