"""The simulation: build, check, run.

A :class:`Simulation` owns the SimPy environment, the time base, the component tree, the channels
and the tracer. Its life has three phases:

1. **build**: components are constructed and connected (:meth:`connect`), clock domains declared;
2. **check** (:meth:`check`): the time base is frozen, every component's ``check`` hook runs and
   every non-optional port must be connected; a problem raises :class:`BuildError` naming it;
3. **run** (:meth:`run`): components' ``start`` hooks launch processes and the kernel runs.

Run control: a run stops when nothing is left to do, at an optional time limit, or on Ctrl-C
(``KeyboardInterrupt`` ends the run cleanly with status ``interrupted``). When the event queue
empties while non-daemon processes still wait, the run is *stalled*: the result carries a report
naming each blocked process, what it waits on, and the state of the channels involved. Runs
longer than a couple of seconds print progress to stderr (simulated time, events/s, ETA when a
limit is known); the clock is looked at every few events, fewer when events are slow (one cycle
of a full wafer is one event and can take a second), so lines come every couple of seconds
whatever an event costs.

Livelock: events can keep flowing while nothing useful happens (a task that re-activates itself
waiting for a flag nobody sets). Components that do useful work report a ``progress_count()``
(the wafer: wavelets forwarded, instructions run, operations finished, edge words); when the sum
has not moved for ``livelock_cycles`` main-domain cycles, the run ends with status ``livelock``
and a report naming what kept running (each component's ``activity()`` over one more batch of
events). Checked between batches of 20,000 events, so it costs nothing per event; 0 turns it
off.

Garbage collection: during a run the objects built before it (the model: components, routers,
programs; most of a large wafer's heap) are frozen out of Python's cyclic collector and young
collections run far less often (:func:`_run_gc`, :data:`RUN_GC_YOUNG`). A simulation allocates
short-lived events at a high rate, and each full collection would otherwise rescan the whole
model; this changes when memory is reclaimed, never what is simulated.

Sub-runs: a system may run simulations of its own inside a run (a CS-2 at PE fidelity runs each
streamed product as a PE-level program in a simulation of its own). It does so through the
parent's :attr:`Simulation.sub_runs` (:class:`SubRuns`), never by running a :class:`Simulation`
by hand, so a sub-run shares the parent's progress hook (and with it a sweep's deadline) and
livelock setting, an interrupt ends the whole run, and a stalled sub-run stops it with a report
naming the sub-run. The runner installs a :class:`SubRuns` that also checks the memory budget
and tells the progress display (:mod:`runner.subrun`).

Determinism: SimPy orders events by (time, priority, insertion order); the kernel never iterates
over unordered sets while scheduling, and random streams are per component, fixed by the seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import sys
import time
from collections.abc import Callable, Generator
from typing import Any, TextIO, TypeVar, cast

import simpy
from simpy.core import EmptySchedule

from simcore.channel import Channel, ChannelGet, ChannelPut
from simcore.clock import ClockDomain, KernelEnv, Ticks, TimeBase
from simcore.component import Component, Port
from simcore.errors import BuildError, SimulationStalled
from simcore.stepping import CycleScheduler
from simcore.tracing import NullTracer, Tracer


class _Watchdog:
    """Livelock check between batches: the components' progress counts, summed, must move
    within ``limit_ticks``."""

    def __init__(self, sim: Simulation, sources: list[Component], limit_ticks: int) -> None:
        self.sim = sim
        self.sources = sources  # components that keep a progress count
        self.limit = limit_ticks
        self.count = self._count()
        self.since = sim.env.now  # when the count last moved

    def _count(self) -> int:
        return sum(c.progress_count() or 0 for c in self.sources)

    def stuck(self) -> bool:
        count, now = self._count(), self.sim.env.now
        if count != self.count:
            self.count, self.since = count, now
            return False
        return now - self.since >= self.limit


#: How a run can end (:attr:`RunResult.status`).
RUN_STATUSES = ("completed", "stalled", "livelock", "interrupted", "limit")


class _LimitReached(Exception):
    """Internal: the next event lies at or beyond the run's time limit."""


@dataclasses.dataclass
class RunResult:
    """How a run ended. ``status`` is one of completed, stalled, livelock, interrupted,
    limit."""

    status: str
    end_ticks: int
    events: int
    wall_s: float
    report: list[str] = dataclasses.field(default_factory=list)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else math.inf


@dataclasses.dataclass
class _Proc:
    owner: Component
    name: str
    daemon: bool
    process: simpy.Process


class Progress:
    """Prints a progress line to a stream every ``every_s`` seconds after ``after_s`` seconds."""

    def __init__(self, stream: TextIO | None = None, *, after_s: float = 2.0, every_s: float = 2.0):
        self.stream = stream if stream is not None else sys.stderr
        self.after_s = after_s
        self.every_s = every_s
        self._last = 0.0
        self.printed = False

    def update(self, sim: Simulation, wall: float, events: int, limit: int | None) -> None:
        if wall < self.after_s or wall - self._last < self.every_s:
            return
        self._last = wall
        dom = sim.main_domain
        now = Ticks(sim.env.now)
        line = (
            f"[wafersim] t = {dom.cycle_at(now):,} {dom.name} cycles"
            f" | {events / wall:,.0f} events/s"
        )
        if limit:
            frac = now / limit
            eta = wall * (1 - frac) / frac if frac > 0 else math.inf
            line += f" | {100 * frac:.0f}% | ETA {eta:.0f} s"
        print(line, file=self.stream, flush=True)
        self.printed = True


T = TypeVar("T")


class SubRuns:
    """How a simulation runs simulations nested in its run (see the module docstring).

    :meth:`run` builds a child simulation with ``build``, runs it and returns what ``build``
    returned with the :class:`RunResult`. The child has the parent's progress hook (see
    :meth:`child_progress`) and livelock setting, and its seed unless another is given. An
    interrupted sub-run raises ``KeyboardInterrupt``; one that stalled or livelocked raises
    :class:`SimulationStalled` naming the sub-run. ``count`` and ``events`` total the sub-runs.
    Subclasses (the runner's) add checks before a build and reports after a run through
    :meth:`before` and :meth:`after`.
    """

    def __init__(self, parent: Simulation) -> None:
        self.parent = parent
        self.count = 0
        self.events = 0

    def run(
        self,
        label: str,
        build: Callable[[Simulation], T],
        *,
        seed: int | None = None,
        footprint_bytes: int | None = None,
    ) -> tuple[T, RunResult]:
        """Build and run the sub-run ``label`` (``footprint_bytes``: its estimated peak memory,
        when known, for the budget check)."""
        self.before(label, footprint_bytes)
        parent = self.parent
        child = Simulation(
            seed=parent.seed if seed is None else seed,
            progress=self.child_progress(label),
            livelock_cycles=parent.livelock_cycles,
        )
        child.sub_runs = self.for_child(child)
        handle = build(child)
        result = child.run()
        self.count += 1
        self.events += result.events
        self.after(label, child, result)
        if result.status == "interrupted":
            raise KeyboardInterrupt
        if result.status in ("stalled", "livelock"):
            raise SimulationStalled(
                f"sub-run '{label}' {'livelocked' if result.status == 'livelock' else 'stalled'}"
                f" at cycle {child.cycles():,}:\n  " + "\n  ".join(result.report),
                result.report,
            )
        return handle, result

    def for_child(self, child: Simulation) -> SubRuns:
        """The sub-runs of a sub-run (nested again): of the same kind as this one's."""
        return SubRuns(child)

    def child_progress(self, label: str) -> Progress | None:
        """The progress hook of a sub-run: the parent's (which may end the run at a deadline)."""
        return self.parent.progress

    def before(self, label: str, footprint_bytes: int | None) -> None:
        """Called before a sub-run is built (the runner checks the memory budget here)."""

    def after(self, label: str, child: Simulation, result: RunResult) -> None:
        """Called when a sub-run has ended (the runner tells the progress display)."""


class Simulation:
    """One simulated system: time base, component tree, channels, tracer and run control."""

    def __init__(
        self,
        *,
        seed: int = 0,
        tracer: Tracer | None = None,
        progress: Progress | None = None,
        livelock_cycles: int = 1_000_000,
    ) -> None:
        self.env = cast(KernelEnv, simpy.Environment())
        self.livelock_cycles = livelock_cycles
        self.timebase = TimeBase()
        self.seed = seed
        self.tracer: Tracer = tracer if tracer is not None else NullTracer()
        self.trace_level = self.tracer.level
        #: (x0, x1, y0, y1), half-open: the block of a model's array of parts (the wafer's PEs)
        #: whose detail-level events are recorded; None records them everywhere. Cycles and data
        #: do not depend on it (``run --trace-region``).
        self.trace_region: tuple[int, int, int, int] | None = None
        self.progress = progress
        self.components: dict[str, Component] = {}
        self.channels: list[Channel] = []
        self.schedulers: list[CycleScheduler] = []
        self._procs: list[_Proc] = []
        self.phase = "build"
        self._main_domain: ClockDomain | None = None
        self._eid_reads = 0
        #: Called with the number of components so far as each one is built (build progress).
        self.on_build: Callable[[int], None] | None = None
        #: Runs simulations nested in this one's run (see the module docstring).
        self.sub_runs: SubRuns = SubRuns(self)

    # -- build -----------------------------------------------------------------------------------
    def domain(self, name: str, freq_hz: int) -> ClockDomain:
        """Declare (or fetch) a clock domain. The first one declared is the run's main domain."""
        dom = self.timebase.domain(name, freq_hz)
        if self._main_domain is None:
            self._main_domain = dom
        return dom

    @property
    def main_domain(self) -> ClockDomain:
        """The first domain declared: progress lines, ``livelock_cycles`` and :meth:`cycles`
        count its cycles."""
        if self._main_domain is None:
            raise BuildError("no clock domain defined: a simulation needs at least one")
        return self._main_domain

    def add_component(self, comp: Component) -> None:
        """Register ``comp`` by its path (``Component.__init__`` calls this)."""
        if self.phase != "build":
            raise BuildError(f"component '{comp.path}' created after the build phase")
        if comp.path in self.components:
            raise BuildError(f"two components are named '{comp.path}'")
        self.components[comp.path] = comp
        if self.on_build is not None:
            self.on_build(len(self.components))

    def add_scheduler(self, sched: CycleScheduler) -> None:
        """Register a cycle scheduler, frozen at ``check`` (``CycleScheduler.__init__`` calls
        this)."""
        if self.phase != "build":
            raise BuildError(
                f"cycle scheduler of '{sched.owner.path}' created after the build phase"
            )
        self.schedulers.append(sched)

    def find(self, path: str) -> Component:
        try:
            return self.components[path]
        except KeyError:
            raise BuildError(f"no component named '{path}'") from None

    def connect(
        self,
        src: Port,
        dst: Port,
        *,
        latency_cycles: int,
        capacity: int,
        items_per_cycle: int = 1,
        pipe: bool = False,
        name: str | None = None,
    ) -> Channel:
        """Join an out port to an in port with a new channel, clocked in the sender's domain."""
        if self.phase != "build":
            raise BuildError(f"cannot connect {src.path} -> {dst.path} after the build phase")
        if src.direction != "out":
            raise BuildError(f"cannot connect {src.path} -> {dst.path}: {src.path} is an in port")
        if dst.direction != "in":
            raise BuildError(f"cannot connect {src.path} -> {dst.path}: {dst.path} is an out port")
        for port in (src, dst):
            if port.channel is not None:
                raise BuildError(
                    f"cannot connect {src.path} -> {dst.path}: {port.path} is already connected "
                    f"to channel '{port.channel.name}'"
                )
        chan = Channel(
            self,
            name or f"{src.path}->{dst.path}",
            domain=src.owner.domain,
            latency_cycles=latency_cycles,
            capacity=capacity,
            items_per_cycle=items_per_cycle,
            pipe=pipe,
        )
        chan.src, chan.dst = src, dst
        src.channel = dst.channel = chan
        self.channels.append(chan)
        return chan

    # -- check -----------------------------------------------------------------------------------
    def check(self) -> None:
        """Freeze the time base and validate the whole system; raise BuildError on a problem."""
        if self.phase != "build":
            return
        self.timebase.freeze()
        for sched in self.schedulers:
            sched.freeze()
        for comp in self.components.values():
            comp.check()
        loose = [
            port.path
            for comp in self.components.values()
            for port in comp.ports.values()
            if port.channel is None and not port.optional
        ]
        if loose:
            raise BuildError(
                f"{len(loose)} unconnected port(s): {', '.join(loose[:10])}"
                + (" ..." if len(loose) > 10 else "")
                + " (connect them, or create them with optional=True)"
            )
        for chan in self.channels:
            chan.freeze()
        self.phase = "ready"

    # -- run -------------------------------------------------------------------------------------
    def start_process(
        self, owner: Component, gen: Generator[Any, Any, Any], name: str, daemon: bool
    ) -> simpy.Process:
        """Start ``gen`` as a kernel process of ``owner``, watched for stalls unless a
        ``daemon`` (``Component.process`` calls this)."""
        proc = self.env.process(gen)
        self._procs.append(_Proc(owner, name, daemon, proc))
        return proc

    def events_so_far(self) -> int:
        """Events scheduled so far. Reads SimPy's insertion counter, which consumes one id; the
        ids consumed by earlier reads are subtracted, so the count does not depend on how
        often it is read (a progress line reads it once per batch)."""
        reads = self._eid_reads
        self._eid_reads = reads + 1
        return next(self.env._eid) - reads

    def run(self, *, until_ticks: int | None = None) -> RunResult:
        """Run until nothing is left, the limit, a stall or Ctrl-C. See the module docstring."""
        self.check()
        if self.phase == "ready":
            self.phase = "running"
            for comp in list(self.components.values()):
                comp.start()
        env = self.env
        step, peek = env.step, env.peek
        ev0 = self.events_so_far()
        wall0 = time.perf_counter()
        status = "completed"
        batch = 20_000  # events between livelock checks; a Ctrl-C lands within one batch
        # Progress is looked at every ``chunk`` events, a divisor of the batch that shrinks when
        # events are slow (a cycle of a full wafer's 745,500 PEs can take seconds: 20,000 of
        # them would leave a run silent for hours) and grows back when they are fast. The
        # livelock check stays on whole batches, so its verdicts do not depend on the chunk.
        ladder = (batch, 2_000, 200, 20, 2, 1)  # each divides the ones before it
        rung = 3  # from 20 events: a slow model's first line comes within seconds
        chunk, done = ladder[rung], 0
        watch = self._livelock_watch()
        report: list[str] = []
        try:
            with _run_gc():
                while True:
                    t_chunk = time.perf_counter()
                    if until_ticks is None:
                        for _ in range(chunk):
                            step()
                    else:
                        for _ in range(chunk):
                            if peek() >= until_ticks:
                                raise _LimitReached
                            step()
                    done += chunk
                    took = time.perf_counter() - t_chunk
                    if took > 0.5 and rung + 1 < len(ladder):
                        rung += 1
                    elif took < 0.05 and rung > 0 and done % ladder[rung - 1] == 0:
                        rung -= 1
                    chunk = ladder[rung]
                    if done % batch == 0 and watch is not None and watch.stuck():
                        status = "livelock"
                        report = self._livelock_report(watch, batch, until_ticks)
                        break
                    if self.progress is not None:
                        self.progress.update(
                            self,
                            time.perf_counter() - wall0,
                            self.events_so_far() - ev0,
                            until_ticks,
                        )
        except EmptySchedule:
            pass
        except _LimitReached:
            status = "limit"
        except KeyboardInterrupt:
            status = "interrupted"
        wall = time.perf_counter() - wall0
        events = self.events_so_far() - ev0
        if status == "completed":
            report = self.stall_report()
            if report:
                status = "stalled"
        end = until_ticks if status == "limit" and until_ticks is not None else env.now
        return RunResult(status, end, events, wall, report)

    def _livelock_watch(self) -> _Watchdog | None:
        """The run's livelock check, or None when it is off or no component keeps progress."""
        sources = [
            c for c in self.components.values()
            if type(c).progress_count is not Component.progress_count
        ]  # fmt: skip
        if self.livelock_cycles <= 0 or not sources:
            return None
        return _Watchdog(self, sources, self.livelock_cycles * self.main_domain.period_ticks)

    def _livelock_report(self, watch: _Watchdog, batch: int, until_ticks: int | None) -> list[str]:
        """Name what keeps running: run one more batch and compare each part's activity."""
        p = self.main_domain.period_ticks
        before: dict[str, tuple[int, str]] = {}
        for comp in self.components.values():
            before.update(comp.activity())
        with contextlib.suppress(EmptySchedule):
            for _ in range(batch):
                if until_ticks is not None and self.env.peek() >= until_ticks:
                    break
                self.env.step()
        lines = [
            f"no progress for {(self.env.now - watch.since) // p:,} cycles (since cycle "
            f"{watch.since // p:,}; limit livelock_cycles = {self.livelock_cycles:,}): nothing "
            "computed or moved, but events keep coming"
        ]
        for comp in self.components.values():
            for path, (count, last) in comp.activity().items():
                runs = count - before.get(path, (0, ""))[0]
                if runs > 0:
                    lines.append(f"{path}: {runs:,} runs in the last batch, the last: {last}")
        return lines

    def stall_report(self) -> list[str]:
        """Lines naming every non-daemon process still waiting and what on, and every
        component that still reports pending work (its ``pending()``)."""
        lines: list[str] = []
        chans: list[Channel] = []
        for p in self._procs:
            if p.daemon or not p.process.is_alive:
                continue
            target = p.process.target
            if isinstance(target, ChannelGet):
                what = f"receive from {target.channel.describe()}"
                chans.append(target.channel)
            elif isinstance(target, ChannelPut):
                what = f"send into {target.channel.describe()}"
                chans.append(target.channel)
            else:
                what = getattr(target, "wait_reason", None) or type(target).__name__
            lines.append(f"{p.owner.path}: '{p.name}' is waiting to {what}")
        notes: list[str] = []
        for comp in self.components.values():
            note = comp.pending()
            if note is None:  # (nothing pending: most of a large wafer's parts at its end)
                continue
            notes.extend(
                f"{comp.path}: {n}" for n in ([note] if isinstance(note, str) else note or ())
            )
        if lines or notes:
            return lines + notes
        return lines

    def cycles(self, ticks: int | None = None) -> int:
        """``ticks`` (default: now) in cycles of the main domain."""
        return (self.env.now if ticks is None else ticks) // self.main_domain.period_ticks


#: The young generation's threshold during a run (net allocations of tracked objects between
#: young collections; Python's default is 700). A run keeps many young objects alive for a
#: while (the due actions, operations and route writes of the cycles to come: at 64 x 64 PEs a
#: SUMMA step's set-up makes some 10^5 at once), and a young collection scans every one of
#: them and promotes them, so the older generations scan them again: at 7,000 (the value
#: before) SUMMA P=64 Mt=8 spent about 13 s of CPU in 1,735 collections, at 500,000 0.06 s.
#: What it leaves waiting longer is cyclic garbage only, at most this many objects (a run makes
#: almost none: the collections of a whole SUMMA P=32 Mt=8 process found 72).
#:
#: A large model raises it to :data:`RUN_GC_PER_MODEL_OBJECT` times the number of objects it
#: froze (:func:`_run_gc`): its pending work grows with it (spmv's product at 256 x 256 PEs
#: holds up to 4.8 million young objects at once, 1.36 times the 3.5 million frozen: some 70
#: per PE, 55 million on the full array), and at a fixed threshold every young collection
#: scans at least that many live objects, each touching the cold parts it refers to (about
#: 0.4 us an object: at 256 x 256 twelve young collections and one of the older generation
#: took 4.5 s of a 37 s product; none at twice the frozen objects).
RUN_GC_YOUNG = 500_000
#: The young threshold of a run is at least this many times the objects the model froze: cyclic
#: garbage waits for at most twice as many objects as the model has (a run makes almost none).
#: Counting them walks every frozen object (``gc.get_freeze_count``: about 10 ms in a small test
#: process, far more in a large one), so it is done only when a run reaches its first young
#: collection (:class:`_ScaleYoungOnFirstCollection`): a run that allocates fewer than
#: :data:`RUN_GC_YOUNG` objects never counts (counting at every run's start made the test
#: suite, thousands of small runs in one large process, 2.6 times slower).
RUN_GC_PER_MODEL_OBJECT = 2


class _ScaleYoungOnFirstCollection:
    """A collector callback for the length of a run: at the first collection it sees, raise the
    young threshold to :data:`RUN_GC_PER_MODEL_OBJECT` times the frozen objects if that is more
    (the collection under way still runs; the ones after it are rarer)."""

    def __init__(self) -> None:
        self.done = False

    def __call__(self, phase: str, info: dict) -> None:
        if self.done or phase != "start":
            return
        self.done = True
        young, *older = gc.get_threshold()
        scaled = min(RUN_GC_PER_MODEL_OBJECT * gc.get_freeze_count(), 2**31 - 1)  # (C ints)
        if scaled > young:
            gc.set_threshold(scaled, *older)


@contextlib.contextmanager
def _run_gc() -> Generator[None, None, None]:
    """Freeze what exists (the built model) out of the cyclic collector and make young
    collections rarer (every :data:`RUN_GC_YOUNG` net allocations at least, or
    :data:`RUN_GC_PER_MODEL_OBJECT` times the frozen objects if more, from the run's first
    collection on), for the length of a run; then restore both, the run's survivors moved to the
    oldest generation with the model."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], RUN_GC_YOUNG), *threshold[1:])
    scale = _ScaleYoungOnFirstCollection()
    gc.callbacks.append(scale)
    try:
        yield
    finally:
        gc.callbacks.remove(scale)
        # What the run made and kept is young; frozen with the model, it moves with it to the
        # oldest generation unscanned (restored, the young threshold would have the first
        # allocation after the run scan all of it: about 1 s at 256 x 256 PEs).
        gc.freeze()
        gc.set_threshold(*threshold)
        gc.unfreeze()
