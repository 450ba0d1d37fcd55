"""Cycle-stepped scheduling: the kernel's second way to model hardware, beside processes.

Processes with channels (:mod:`simcore.channel`) suit parts that act at the transaction level: a
memory controller, a weight store, a network switch. Parts that decide *every cycle* what to do
(a router picking which wavelet leaves on each port, a bank choosing the next command, an ICI link
arbiter) would cost a kernel event per part per cycle as processes. A :class:`CycleScheduler`
steps them instead, in the cycles where something happens:

1. **due actions** land first: callbacks scheduled for this cycle with :meth:`~CycleScheduler.at`
   or :meth:`~CycleScheduler.later` (deliveries, credit returns, configuration writes), in the
   order they were scheduled;
2. then each :class:`StepGroup`, in the order the groups were declared, steps its *active*
   parts in increasing ``index``: a part's ``step(cycle)`` returns True to be stepped again next
   cycle, False to sleep until an action re-activates it (:meth:`StepGroup.activate`).

A cycle with nothing due and no active part costs nothing: one kernel event per cycle that has
work, whatever the number of parts. Parts must interact through actions at least one cycle in
the future (``later(n >= 1, ...)``); then nothing one part does in a cycle is seen by another in
the same cycle, and the result does not depend on the order parts are stepped in.

Two more hooks, both kernel events of their own at a cycle's clock edge:

- :meth:`~CycleScheduler.event_at`: a callback at cycle ``t``'s edge, ordered with the other
  events of that instant by when it was scheduled (as any kernel event; e.g. the end of a task);
- :meth:`~CycleScheduler.end_of_cycle`: a callback after *every* other event of cycle ``t``'s edge
  instant, whichever part or clock domain scheduled them (e.g. a scheduler that must see all of a
  cycle's arrivals before choosing what runs next). End-of-cycle callbacks of one instant run in
  the order they were registered.

Both, and the ticks, take their place in the kernel's order as SimPy events of their own would
(an insertion id each), but the ones of one instant and priority share one entry of the kernel's
queue (:class:`_Batch`): thousands of parts acting at the same cycles cost a few queue
operations, not thousands.

Time: the scheduler counts cycles of its owner's clock domain and converts to kernel ticks through
it (fixed when the simulation is checked), so other domains in the same run change nothing. A
callback scheduled by another domain's process lands at this domain's cycles only through
:meth:`~CycleScheduler.at`/:meth:`~CycleScheduler.later` with ``t`` after the current cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from heapq import heappush
from typing import TYPE_CHECKING, Any, Protocol

from simcore.clock import Cycles, Ticks
from simcore.errors import BuildError

if TYPE_CHECKING:
    from simcore.component import Component

#: Priority of end-of-cycle events: after SimPy's URGENT (0) and NORMAL (1) events of an instant.
LATE = 2
#: Priority of :meth:`CycleScheduler.event_at` and tick events: SimPy's NORMAL (a Timeout's).
NORMAL = 1
#: Kernel priorities are 0..2, so ``4 * time + priority`` names an instant's batch.


class _Batch:
    """The scheduler's callbacks for one (time, priority) of the kernel's queue, in the order of
    their insertion ids, standing in the queue as one event under the first id not yet run.

    Each callback takes an insertion id from the kernel as a SimPy event would, and runs at
    exactly that event's place in the kernel's order: before each callback after the first,
    the batch looks at the head of the kernel's queue, and if anything there comes first (an
    event of another part registered between two of the batch's, or one of a more urgent
    priority registered meanwhile) the batch stands in the queue again under that callback's
    id and lets it go first. A wafer's parts share a few instants many times over, so this
    saves most of the queue's pushes and pops (each a dozen tuple comparisons at 4,096 PEs).
    What SimPy's ``step`` reads of an event is ``callbacks`` and ``_ok``."""

    __slots__ = ("callbacks", "eids", "fns", "key", "pos", "prio", "sched", "when")
    _ok = True

    def __init__(self, sched: CycleScheduler, when: int, prio: int, key: int) -> None:
        self.sched = sched
        self.when = when
        self.prio = prio
        self.key = key
        self.fns: list[Callable[[Any], None]] = []
        self.eids: list[int] = []
        self.pos = 0  # the next callback to run
        self.callbacks: Any = (self._run,)

    def _run(self, _ev: Any) -> None:
        fns, eids = self.fns, self.eids
        queue = self.sched._queue
        when, prio = self.when, self.prio
        i = self.pos
        while i < len(fns):  # (callbacks may add more to this batch while it runs)
            # (also before the first callback: the kernel has just popped this batch, the least
            # entry of its queue, and pushed nothing since, so nothing there comes first)
            if queue:
                head = queue[0]
                if head[0] == when and (head[1] < prio or (head[1] == prio and head[2] < eids[i])):
                    self.pos = i  # something else comes first: stand in the queue again
                    self.callbacks = (self._run,)
                    heappush(queue, (when, prio, eids[i], self))
                    return
            fn = fns[i]
            i += 1
            fn(self)
        open_batches = self.sched._open
        if open_batches.get(self.key) is self:
            del open_batches[self.key]


class Stepper(Protocol):
    """A part stepped by a :class:`CycleScheduler`. ``index`` orders it within its group."""

    index: int

    def step(self, cycle: int) -> bool:
        """Do this cycle's work; return True to be stepped again next cycle."""
        ...


class StepGroup:
    """Parts stepped one after another each cycle while active (see the module docstring).

    ``active`` maps index -> part; hot paths may write ``group.active[part.index] = part``
    directly (that is all :meth:`activate` does). The dict is updated in place, never replaced.
    """

    __slots__ = ("active", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.active: dict[int, Stepper] = {}

    def activate(self, part: Stepper) -> None:
        self.active[part.index] = part

    def __repr__(self) -> str:
        return f"<StepGroup {self.name}: {len(self.active)} active>"


class CycleScheduler:
    """Steps the parts of one component in the cycles where something happens.

    ``groups`` names the step groups in stepping order. Scheduling needs the time base, so it
    starts once the simulation is checked (:meth:`freeze` is called then).
    """

    def __init__(self, owner: Component, groups: Sequence[str]) -> None:
        if not groups or len(set(groups)) != len(groups):
            raise BuildError(
                f"{owner.path}: a cycle scheduler needs distinct step group names, got "
                f"{list(groups)!r}"
            )
        self.owner = owner
        self.sim = owner.sim
        self.env = owner.sim.env
        self.domain = owner.domain
        self.groups = [StepGroup(name) for name in groups]
        self._by_name = {g.name: g for g in self.groups}
        self.period = 0  # ticks per cycle: set by freeze()
        self._due: dict[int, list[tuple[Callable[..., None], tuple[Any, ...]]]] = {}
        #: The same dict, for hot callers that look a cycle's list up before asking
        #: :meth:`due_slot` (which makes it): ``due.get(t) or due_slot(t)``.
        self.due = self._due
        self._ticking: set[int] = set()
        #: The same set: the cycles whose tick is scheduled and has not begun (read by a hot
        #: caller that must know whether anything of the current cycle is still to run here).
        self.ticking = self._ticking
        self._open: dict[int, _Batch] = {}  # batches of kernel events not yet run, by instant
        # The kernel's insertion-id counter and event queue (SimPy makes each once and never
        # replaces it), read by every kernel_call.
        self._eid = self.env._eid
        self._queue = self.env._queue
        #: The same counter and open batches, for a hot caller that puts its callback in place
        #: itself (:meth:`kernel_call`'s body without its call, e.g. the compute engines'
        #: dispatches and task ends, several per task): ``eid = next(sched.eid_counter)``, then
        #: ``batch = sched.open_batches.get(key) or sched.open_batch(when, prio, key, eid)``
        #: with ``key = 4 * when + prio``, then ``batch.fns.append(fn)`` and
        #: ``batch.eids.append(eid)``: the same entries, in the same order, as ``kernel_call``.
        self.eid_counter = self._eid
        self.open_batches = self._open
        self.cycles_stepped = 0  # cycles in which the scheduler ran
        self.sim.add_scheduler(self)

    def freeze(self) -> None:
        """Fix the cycle length in ticks (the simulation calls this when it is checked)."""
        self.period = self.domain.period_ticks

    def group(self, name: str) -> StepGroup:
        try:
            return self._by_name[name]
        except KeyError:
            raise BuildError(
                f"{self.owner.path}: no step group '{name}' (groups: "
                f"{', '.join(g.name for g in self.groups)})"
            ) from None

    # -- time ----------------------------------------------------------------------------------
    def now(self) -> Cycles:
        """The current cycle: the last clock edge of the domain at or before the kernel's now."""
        return Cycles(self.env._now // self.period)

    def edge(self, cycle: int) -> Ticks:
        """The kernel time of cycle ``cycle``'s clock edge."""
        return Ticks(cycle * self.period)

    # -- due actions ---------------------------------------------------------------------------
    def later(self, cycles: int, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` as a due action ``cycles`` (>= 1) cycles from now.

        The body repeats :meth:`at`'s on purpose: this is called for every hop, credit and
        delivery of a fabric, and a call into ``at`` (with its past-time check) would cost on
        each."""
        t = self.env._now // self.period + cycles
        slot = self._due.get(t)
        if slot is None:
            self._due[t] = [(fn, args)]
            if t not in self._ticking:  # (a cycle with due actions always has its tick)
                self._tick_at(t)
        else:
            slot.append((fn, args))

    def due_slot(self, t: int) -> list[tuple[Callable[..., None], tuple[Any, ...]]]:
        """The list of cycle ``t``'s due actions (``t`` after the current cycle), to which a
        hot caller appends ``(fn, args)`` itself: ``later``/``at`` without a call each. The
        list is the one they append to, so actions keep the order in which they were added,
        however added; it stays valid until cycle ``t`` runs."""
        slot = self._due.get(t)
        if slot is None:
            slot = self._due[t] = []
            if t not in self._ticking:
                self._tick_at(t)
        return slot

    def at(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` as a due action at the start of cycle ``t`` (after the current one)."""
        if t <= self.env._now // self.period:
            raise ValueError(
                f"{self.owner.path}: action scheduled for cycle {t}, which is not after the "
                f"current cycle {self.env._now // self.period}"
            )
        slot = self._due.get(t)
        if slot is None:
            self._due[t] = [(fn, args)]
            if t not in self._ticking:
                self._tick_at(t)
        else:
            slot.append((fn, args))

    def at_each(self, times: Sequence[int], fn: Callable[..., None], *args: Any) -> None:
        """``at(t, fn, *args)`` for each ``t`` of ``times`` in turn (e.g. the credits of a
        stream still on their way back): the same due actions in the same order, one call."""
        now = self.env._now // self.period
        due = self._due
        action = (fn, args)
        for t in times:
            if t <= now:
                raise ValueError(
                    f"{self.owner.path}: action scheduled for cycle {t}, which is not after "
                    f"the current cycle {now}"
                )
            slot = due.get(t)
            if slot is None:
                due[t] = [action]
                if t not in self._ticking:
                    self._tick_at(t)
            else:
                slot.append(action)

    def at_or_now(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        """``at(t, ...)``, or call at once when ``t`` is the current cycle (inside a step)."""
        if t <= self.env._now // self.period:
            fn(*args)
        else:
            self.at(t, fn, *args)

    # -- events of their own ---------------------------------------------------------------------
    def event_at(self, t: int, fn: Callable[[Any], None]) -> None:
        """Call ``fn(event)`` at cycle ``t``'s edge (not before now) as a kernel event."""
        when = t * self.period
        if when < self.env._now:
            raise ValueError(f"{self.owner.path}: event scheduled in the past (cycle {t})")
        self.kernel_call(when, NORMAL, fn)  # (ordered as env.timeout would be)

    def end_of_cycle(self, t: int, fn: Callable[[Any], None]) -> None:
        """Call ``fn(event)`` after every other event of cycle ``t``'s edge (not before now)."""
        when = t * self.period
        if when < self.env._now:
            raise ValueError(f"{self.owner.path}: end-of-cycle hook in the past (cycle {t})")
        self.kernel_call(when, LATE, fn)

    def kernel_call(self, when: int, prio: int, fn: Callable[[Any], None]) -> None:
        """Call ``fn`` at kernel time ``when`` with priority ``prio``, in the order a SimPy
        event scheduled now would be (see :class:`_Batch`). No check that ``when`` is not in
        the past: :meth:`event_at` and :meth:`end_of_cycle` are the checked forms, and a hot
        caller that knows its time is not past (the compute engine's dispatch) calls this."""
        eid = next(self._eid)
        key = 4 * when + prio
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = _Batch(self, when, prio, key)
            heappush(self._queue, (when, prio, eid, batch))
        batch.fns.append(fn)
        batch.eids.append(eid)

    def open_batch(self, when: int, prio: int, key: int, eid: int) -> _Batch:
        """The batch of kernel time ``when`` and priority ``prio`` (``key = 4 * when + prio``),
        made and put in the kernel's queue under ``eid`` (its first callback's id, taken just
        before): :meth:`kernel_call`'s second branch, for the hot callers named at
        ``open_batches``. Only called when no batch of ``key`` is open."""
        batch = self._open[key] = _Batch(self, when, prio, key)
        heappush(self._queue, (when, prio, eid, batch))
        return batch

    # -- stepping --------------------------------------------------------------------------------
    def _tick_at(self, t: int) -> None:
        if t in self._ticking:
            return
        self._ticking.add(t)
        self.kernel_call(t * self.period, NORMAL, self._tick)

    def _tick(self, _ev: Any) -> None:
        t = self.env._now // self.period
        self._ticking.discard(t)
        due = self._due.pop(t, None)
        if due:
            for fn, args in due:
                fn(*args)
        self.cycles_stepped += 1
        again = False
        for group in self.groups:
            active = group.active
            if active:
                for idx in sorted(active):
                    if not active[idx].step(t):
                        del active[idx]
                again = again or bool(active)
        if again:
            self._tick_at(t + 1)

    def pending_actions(self) -> int:
        """Due actions not yet run (for diagnosis)."""
        return sum(len(v) for v in self._due.values())
