"""The parallel engine: sweep and validation points run on a Dask cluster.

Every point is an independent simulation, so the engine is a plain task farm on Dask's
``distributed`` scheduler: tasks run by worker processes of one thread each (a simulation is
pure Python and holds the GIL), results streamed back as they finish. Locally that is a
:class:`distributed.LocalCluster` of one worker process per core, started and stopped with the
command; ``--scheduler ADDRESS`` runs on a cluster already up (one started by ``dask-jobqueue``
on SLURM, say: see docs/sweeps.md). Nothing here pools processes or places tasks on workers.

A task carries the kind's *name* and the point's parameter dataclass (plain, picklable values);
the worker calls :func:`registry.load_all` and looks the kind up, so a worker needs wafersim
importable, nothing else. What the engine adds to Dask:

- a point's outcome is data, not an exception: :func:`run_point` catches a point's failure and
  returns its status and error text (see :data:`sweeps.grid.STATUSES`), with its wall time
  and the worker's peak resident memory while it ran;
- a per-point time limit, checked by the kernel between batches of events (the progress hook of
  :meth:`simcore.sim.Simulation.run`), with a backstop for a point stuck elsewhere (building,
  measuring) that raises in its thread a little later (:class:`_Backstop`);
- retries of points that failed, timed out or crashed their worker (Dask's own rerun of a task
  whose worker died is turned off on the local cluster so that ``--retries`` alone decides);
- the journal and the result table (:mod:`sweeps.journal`, :mod:`sweeps.tables`), and a
  progress bar (tqdm);
- :class:`DaskRunner`, the :class:`registry.Runner` that ``validate --workers`` hands its cases.

Feeding the cluster (:class:`_Queue`): the client keeps two tasks per worker thread in flight.
A task is one point, or several consecutive tiny ones: once points have finished, a task takes
as many as fill :data:`CHUNK_S` at the median wall time of the recent points, so that Dask's cost
per task (a few milliseconds: a round trip through the scheduler) stays small beside the work;
points longer than that go one per task. Points are handed out from the *last* of the sweep to
the first: sweeps and validation cases list sizes in ascending order, and starting the largest
point first keeps one long point from being the tail of the whole run. Results never depend on
any of this: the table is assembled in sweep order.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import logging
import os
import resource
import signal
import statistics
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import dask
from distributed import Client, LocalCluster, as_completed
from tqdm import tqdm

from runner import budget, registry, scenario
from simcore.errors import SimulationStalled, WafersimError
from simcore.sim import Progress, Simulation
from simcore.tracing import TraceLevel
from sweeps import grid, tables
from sweeps.journal import Journal, normalise, plain

T = TypeVar("T")


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Memory of one idle worker process: an interpreter with wafersim, numpy, SimPy and Dask's
#: worker loaded (measured: 77 MB for wafersim's kinds and ``distributed`` imported; the rest is
#: margin for the worker's own buffers). A point's own footprint comes on top.
WORKER_BASE_BYTES = 200_000_000


def workers_allowed(point_bytes: int = 0, available: int | None = None) -> tuple[int, str]:
    """The most worker processes this machine can run at once, and why: one per core, and no
    more than fit in the memory available (:func:`runner.budget.available_bytes`, of which
    :data:`runner.budget.USABLE`) at :data:`WORKER_BASE_BYTES` plus ``point_bytes`` (the largest
    point's footprint estimate) each."""
    cores = default_workers()
    free = budget.available_bytes() if available is None else available
    each = WORKER_BASE_BYTES + max(0, point_bytes)
    if free is None:
        return cores, f"{cores} core" + ("s" if cores != 1 else "")
    by_memory = max(1, int(budget.USABLE * free) // each)
    why = (
        f"{cores} core{'s' if cores != 1 else ''}, {budget.gb(free)} of memory available at "
        f"about {budget.gb(each)} per worker"
    )
    return min(cores, by_memory), why


def check_workers(workers: int | None, point_bytes: int = 0, available: int | None = None) -> int:
    """The number of local workers to start: ``workers`` if this machine can run them (see
    :func:`workers_allowed`), else a :class:`WafersimError` naming the largest allowed; by
    default the largest allowed."""
    limit, why = workers_allowed(point_bytes, available)
    if workers is None:
        return limit
    if workers > limit:
        raise WafersimError(
            f"--workers {workers} is more than this machine can run at once ({why}): the "
            f"largest allowed is {limit}; give --workers {limit} or fewer, or run on a cluster "
            "with --scheduler"
        )
    return workers


@contextlib.contextmanager
def connect(
    workers: int | None = None,
    scheduler: str | None = None,
    *,
    processes: bool = True,
    point_bytes: int = 0,
) -> Iterator[Client]:
    """A Dask client: on the cluster at ``scheduler``, else on a local cluster of ``workers``
    worker processes (default: one per core; threads of this process with ``processes=False``,
    which starts faster but runs one simulation at a time), closed on exit. A local cluster is
    bounded by :func:`check_workers` (cores, and memory at ``point_bytes`` per point)."""
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as exc:
            raise WafersimError(
                f"cannot reach a Dask scheduler at '{scheduler}' ({exc}); start one "
                "(`dask scheduler`, or a dask-jobqueue cluster: docs/sweeps.md) or drop "
                "--scheduler to run on a local cluster"
            ) from None
        with client:
            yield client
        return
    settings = {
        # a point that kills its worker is reported (status crashed), not rerun on the next
        # worker it could kill too; --retries decides
        "distributed.scheduler.allowed-failures": 0,
        # the workers' statistical profiler (a stack sample every 10 ms) costs a simulation
        # about a quarter more CPU: measured 2.2 s against 1.75 s for summa P=16 Mt=1
        "distributed.worker.profile.enabled": False,
    }
    with dask.config.set(settings), _workers_ignore_ctrl_c():
        cluster = LocalCluster(
            n_workers=check_workers(workers, point_bytes),
            threads_per_worker=1,
            processes=processes,
            dashboard_address=":0",
            silence_logs=logging.CRITICAL,
        )
    with cluster, Client(cluster) as client:
        yield client


@contextlib.contextmanager
def _workers_ignore_ctrl_c() -> Iterator[None]:
    """Ctrl-C in a terminal reaches every process of the foreground group: the client ends the
    sweep (and the cluster) cleanly, so the workers it starts here must not take it too (each
    would print a traceback). An ignored SIGINT is inherited by the processes started meanwhile
    and kept by Python; this process's own handler comes back at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# -- in the worker ---------------------------------------------------------------------------------
class PointTimeout(Exception):
    """Internal: a point ran past its time limit."""


class _Deadline(Progress):
    """The kernel's progress hook, used as a clock: past ``deadline`` the run is ended."""

    def __init__(self, deadline: float, limit_s: float) -> None:
        super().__init__(after_s=0.0, every_s=0.0)
        self.deadline = deadline
        self.limit_s = limit_s

    def update(self, sim: Simulation, wall: float, events: int, limit: int | None) -> None:
        if time.perf_counter() > self.deadline:
            raise PointTimeout(f"still running after the time limit of {self.limit_s:g} s")


class _Backstop:
    """The time limit outside the run loop (a huge system being built, metrics computed): a
    point still busy ``after_s`` seconds from now gets :class:`PointTimeout` raised in its
    thread by a timer thread (CPython's ``PyThreadState_SetAsyncExc``: delivered at the next
    bytecode the thread runs, so a long call into C ends first). Disarmed on exit, under a lock,
    with a shot fired but not yet delivered taken back."""

    def __init__(self, after_s: float) -> None:
        self.thread = threading.get_ident()
        self.lock = threading.Lock()
        self.armed = True
        self.fired = False
        self.timer = threading.Timer(after_s, self._fire)
        self.timer.daemon = True

    def __enter__(self) -> _Backstop:
        self.timer.start()
        return self

    def _fire(self) -> None:
        with self.lock:
            if self.armed:
                self.fired = True
                _async_raise(self.thread, ctypes.py_object(PointTimeout))

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.armed = False
            if self.fired:
                _async_raise(self.thread, ctypes.c_void_p(None))  # NULL: take it back
        self.timer.cancel()


def _async_raise(thread: int, exc: Any) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), exc)


def _reset_peak_rss() -> None:
    """Start a new peak of this process's resident memory (Linux: /proc/self/clear_refs)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_rss_bytes() -> int:
    """The process's peak resident memory since :func:`_reset_peak_rss` (since the start of
    the process where that cannot be reset)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def run_point(
    kind: str,
    params: registry.ScenarioParams,
    *,
    scenario_name: str,
    trace_path: str | None = None,
    trace_level: str = "ops",
    time_limit_s: float | None = None,
    livelock_cycles: int = 1_000_000,
    backstop_grace_s: float = 2.0,
) -> dict[str, Any]:
    """Run one point (in a worker) and return its outcome: status, error text, metrics, wall
    time, peak memory and trace path. A point's failure is an outcome, never an exception.

    The time limit is checked by the kernel between batches of events (the trace then ends
    with a ``run/end`` event); a point busy elsewhere ``backstop_grace_s`` past its limit is
    stopped by :class:`_Backstop`."""
    registry.load_all()
    _reset_peak_rss()
    t0 = time.perf_counter()
    deadline = _Deadline(t0 + time_limit_s, time_limit_s) if time_limit_s else None
    backstop = (
        _Backstop(time_limit_s + backstop_grace_s) if time_limit_s else contextlib.nullcontext()
    )
    scen = scenario.Scenario(scenario_name, "<sweep>", registry.KINDS[kind], "", {})
    status, error, metrics, trace = "completed", None, {}, None
    try:
        with backstop:
            try:
                out = scenario.run_scenario(
                    scen, params, trace_path=trace_path,
                    trace_level=TraceLevel[trace_level.upper()], progress=deadline,
                    livelock_cycles=livelock_cycles,
                )  # fmt: skip
                metrics, trace = out.metrics, out.trace_path
            except SimulationStalled as exc:
                status = "livelock" if "livelocked at cycle" in str(exc) else "stalled"
                error = str(exc)
            except WafersimError as exc:
                status, error = "invalid", str(exc)
            except PointTimeout:
                raise
            except Exception as exc:
                status, error = "failed", "".join(traceback.format_exception(exc))[-4000:]
    except PointTimeout:  # from the run loop, or the backstop wherever the point was
        status, error, metrics = (
            "timeout",
            f"still running after the time limit of {time_limit_s:g} s",
            {},
        )
    if trace_path and status != "completed" and os.path.exists(trace_path):
        trace = trace_path  # the trace so far, ended by a run/end event naming the failure
    return {
        "status": status,
        "error": error,
        "metrics": plain(metrics),
        "wall_s": time.perf_counter() - t0,
        "peak_rss_bytes": _peak_rss_bytes(),
        "trace": trace,
    }


def run_metrics(kind: str, params: registry.ScenarioParams) -> registry.Metrics:
    """Run one validation point (in a worker): its metrics, or the user error as a plain
    :class:`WafersimError` (whose message survives pickling whatever its subclass takes)."""
    registry.load_all()
    try:
        return scenario.run_kind(kind, params)
    except WafersimError as exc:
        raise WafersimError(str(exc)) from None


def run_chunk(
    kind: str, items: Sequence[tuple[registry.ScenarioParams, str | None]], **options: Any
) -> list[dict[str, Any]]:
    """Run several points one after another (in a worker): :func:`run_point` for each
    ``(params, trace_path)``."""
    return [run_point(kind, params, trace_path=trace, **options) for params, trace in items]


def run_metrics_chunk(
    kind: str, points: Sequence[registry.ScenarioParams]
) -> list[tuple[registry.Metrics, float]]:
    """:func:`run_metrics` for several points one after another (in a worker), each with its
    wall time."""
    out = []
    for params in points:
        t0 = time.perf_counter()
        out.append((plain(run_metrics(kind, params)), time.perf_counter() - t0))
    return out


class DaskRunner:
    """A :class:`registry.Runner` on a Dask client: the points of a call farmed out as the
    sweep engine does (the last first, tiny ones several to a task); the first point that
    fails raises its error here, as the serial runner would. ``on_point`` (optional) is called
    here with a :class:`registry.PointDone` as each point's result arrives."""

    def __init__(
        self, client: Client, on_point: Callable[[registry.PointDone], None] | None = None
    ) -> None:
        self.client = client
        self.on_point = on_point  # called here as each point's result comes back

    def __call__(
        self, kind: str, points: Sequence[registry.ScenarioParams]
    ) -> list[registry.Metrics]:
        queue = _Queue(list(enumerate(points)), key=lambda item: item[0])
        threads = max(1, sum(self.client.nthreads().values()))
        out: list[registry.Metrics] = [{} for _ in points]
        in_flight: dict[str, list[tuple[int, registry.ScenarioParams]]] = {}
        stream = as_completed(loop=self.client.loop, with_results=True, raise_errors=False)

        def fill() -> None:
            while queue and len(in_flight) < 2 * threads:
                chunk = queue.take()
                fut = self.client.submit(
                    run_metrics_chunk, kind, [params for _, params in chunk], key=_key(kind),
                    pure=False,
                )  # fmt: skip
                in_flight[fut.key] = chunk
                stream.add(fut)

        fill()
        for batch in stream.batches():
            for fut, value in batch:
                chunk = in_flight.pop(fut.key)
                if fut.status != "finished":  # the client's exit cancels the others
                    raise value[1] if isinstance(value, tuple) else value
                for (i, params), (metrics, wall) in zip(chunk, value, strict=True):
                    out[i] = metrics
                    queue.walls.append(wall)
                    if self.on_point is not None:
                        done = registry.PointDone(kind, i, len(points), params, metrics, wall)
                        self.on_point(done)
                fut.release()
            fill()
        return out


def _key(label: str) -> str:
    return f"wafersim-{label}-{uuid.uuid4().hex[:10]}"


# -- in the client ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    """What a sweep did: counts by status, points skipped as done before, wall time."""

    output: str
    points: int
    ran: int
    skipped: int
    counts: dict[str, int]
    wall_s: float
    workers: int

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in self.counts.items())
        return (
            f"wrote {self.output}: {self.points} points ({counts}); ran {self.ran}, "
            f"{self.skipped} done before; {self.wall_s:.1f} s on {self.workers} worker"
            + ("s" if self.workers != 1 else "")
        )


class _Bar:
    """The progress bar: points done (of all), failed, running, and tqdm's rate and ETA."""

    def __init__(self, client: Client, total: int, done: int, failed: int, quiet: bool):
        self.client = client
        self.failed = failed
        self.bar = tqdm(
            total=total, initial=done, desc="sweep", unit="pt", file=sys.stderr,
            disable=True if quiet else None, dynamic_ncols=True,
        )  # fmt: skip
        self.threads = 1
        self._polled = -1e9
        self.bar.set_postfix_str(f"failed {failed}, running 0", refresh=False)

    def poll(self) -> None:
        """Count the cluster's threads again, every 2 s at most (workers come and go on an
        adaptive cluster)."""
        now = time.monotonic()
        if now - self._polled > 2.0:
            self.threads = max(1, sum(self.client.nthreads().values()))
            self._polled = now

    def update(self, *, finished: int, failed: bool, pending: int) -> None:
        self.failed += failed
        running = min(pending, self.threads)
        self.bar.set_postfix_str(f"failed {self.failed}, running {running}", refresh=False)
        self.bar.update(finished)

    def close(self) -> None:
        self.bar.close()


#: A task of several points aims at this much work, so that Dask's cost per task (a few
#: milliseconds) is a small part of it; long points go one per task.
CHUNK_S = 0.2
MAX_CHUNK = 100


class _Queue(Generic[T]):
    """Items still to run, the last first (see the module docstring), taken in chunks whose
    size follows the measured wall times of the items finished so far. ``key`` names an item
    (a point's config hash, a validation point's index)."""

    def __init__(self, items: Sequence[T], key: Callable[[T], Hashable]) -> None:
        self.todo = collections.deque(reversed(items))
        self.key = key
        self.attempts = dict.fromkeys((key(item) for item in items), 1)
        self.walls: list[float] = []  # the own wall times of the items finished so far
        self.solo: set[Hashable] = set()  # items to run one per task

    def __bool__(self) -> bool:
        return bool(self.todo)

    def size(self) -> int:
        """1 until an item has finished; then CHUNK_S over the median wall time of the recent
        items (at most MAX_CHUNK)."""
        if not self.walls:
            return 1
        median = statistics.median(self.walls[-64:])
        return max(1, min(MAX_CHUNK, int(CHUNK_S / max(median, 1e-6))))

    def take(self) -> list[T]:
        chunk = [self.todo.popleft()]
        if self.key(chunk[0]) in self.solo:
            return chunk
        size = self.size()
        while self.todo and len(chunk) < size and self.key(self.todo[0]) not in self.solo:
            chunk.append(self.todo.popleft())
        return chunk

    def again(self, item: T) -> None:
        """Run ``item`` once more, next, in a task of its own."""
        self.attempts[self.key(item)] += 1
        self.solo.add(self.key(item))
        self.todo.appendleft(item)

    def alone(self, chunk: list[T]) -> None:
        """Run each item of a chunk whose worker died in a task of its own, next."""
        self.solo.update(self.key(item) for item in chunk)
        self.todo.extendleft(reversed(chunk))


def _crashed(exc: BaseException) -> dict[str, Any]:
    """The outcome of a point whose worker died (Dask's KilledWorker) or was lost."""
    return {
        "status": "crashed", "error": f"{type(exc).__name__}: {exc}", "metrics": {},
        "wall_s": None, "peak_rss_bytes": None, "trace": None,
    }  # fmt: skip


def check_previous(
    output: str, points: Sequence[grid.Point], *, resume: bool, overwrite: bool
) -> None:
    """A table or journal already at ``output`` (``sweep``'s check before a cluster starts):
    refused without ``resume`` or ``overwrite``; with ``resume``, it must be a sweep table
    holding points of this sweep only."""
    table_there = os.path.exists(output)
    journal_there = os.path.exists(Journal(output).path)
    if overwrite or not (table_there or journal_there):
        return
    what = f"sweep table '{output}'" if table_there else f"sweep journal '{output}.journal.jsonl'"
    if not resume:
        raise WafersimError(
            f"{what} exists (from an earlier sweep): give --resume to continue that sweep (the "
            "same grid: its results are kept, the rest run), --overwrite to replace it, or "
            "another -o"
        )
    if table_there and not tables.is_table(output):
        raise WafersimError(
            f"'{output}' is not a wafersim sweep table, so --resume cannot continue it: give "
            "--overwrite to replace it, or another -o"
        )
    previous = tables.previous_results(output)
    ours = {p.config_hash for p in points}
    foreign = [h for h in previous if h not in ours]
    if foreign:
        raise WafersimError(
            f"{what} holds {len(foreign)} result(s) of points not in this sweep (another grid, "
            "other --set values or another wafersim version); --resume continues the same "
            "sweep only: give --overwrite to replace it, or another -o"
        )


def run_sweep(
    client: Client,
    sw: grid.Sweep,
    output: str,
    *,
    retries: int = 0,
    time_limit_s: float | None = None,
    traces: str | None = None,
    trace_level: str = "ops",
    resume: bool = True,
    quiet: bool = True,
) -> Outcome:
    """Run sweep ``sw`` on ``client`` and write its table to ``output``. See the module
    docstring; points already done in ``output`` or its journal are skipped when ``resume``."""
    t0 = time.perf_counter()
    points = sw.points()
    journal = Journal(output)
    if not resume:
        journal.close(remove=True)
    previous = tables.previous_results(output) if resume else {}
    results: dict[str, dict[str, Any]] = {}
    todo: list[grid.Point] = []
    seen: set[str] = set()
    for p in points:
        if p.config_hash in seen:  # the same configuration twice: run once
            continue
        seen.add(p.config_hash)
        old = previous.get(p.config_hash)
        if old is not None and old["status"] in grid.FINAL:
            results[p.config_hash] = old
        elif p.params is None:
            results[p.config_hash] = normalise(
                {"config_hash": p.config_hash, "status": "invalid", "error": p.error,
                 "metrics": {}, "wall_s": None, "peak_rss_bytes": None, "attempts": 0,
                 "trace": None}
            )  # fmt: skip
        else:
            todo.append(p)
    skipped = sum(1 for p in points if p.config_hash in results and p.config_hash in previous)
    if traces:
        os.makedirs(traces, exist_ok=True)
    kind = sw.scen.kind.name
    options = {
        "scenario_name": sw.scen.name, "trace_level": trace_level, "time_limit_s": time_limit_s,
        "livelock_cycles": sw.livelock_cycles,
    }  # fmt: skip

    def trace_path(p: grid.Point) -> str | None:
        return os.path.join(traces, grid.trace_name(p)) if traces else None

    done_before = sum(1 for p in points if p.config_hash in results)
    failed_before = sum(
        1 for p in points if p.config_hash in results
        and results[p.config_hash]["status"] != "completed"
    )  # fmt: skip
    bar = _Bar(client, len(points), done_before, failed_before, quiet)
    copies = collections.Counter(p.config_hash for p in points)
    queue = _Queue(todo, key=lambda p: p.config_hash)
    in_flight: dict[str, list[grid.Point]] = {}
    # on this client's loop: with no futures yet, as_completed would take the default client's
    stream = as_completed(loop=client.loop, with_results=True, raise_errors=False)

    def fill() -> None:
        while queue and len(in_flight) < 2 * bar.threads:
            chunk = queue.take()
            items = [(p.params, trace_path(p)) for p in chunk]
            fut = client.submit(run_chunk, kind, items, **options, key=_key(kind), pure=False)
            in_flight[fut.key] = chunk
            stream.add(fut)

    try:
        bar.poll()
        fill()
        # results come back in batches: one round trip for all the tasks that finished
        # together, not one per task
        for batch in stream.batches():
            for fut, value in batch:
                chunk = in_flight.pop(fut.key)
                crashed = fut.status != "finished"
                fut.release()
                if crashed and len(chunk) > 1:
                    queue.alone(chunk)  # find which point kills its worker: one at a time
                    continue
                if crashed:  # the value is Dask's (type, exception, traceback)
                    value = [_crashed(value[1] if isinstance(value, tuple) else value)]
                for p, result in zip(chunk, value, strict=True):
                    attempt = queue.attempts[p.config_hash]
                    if result["status"] not in grid.FINAL and attempt <= retries:
                        queue.again(p)
                        continue
                    if result["wall_s"] is not None:
                        queue.walls.append(result["wall_s"])
                    result = normalise(
                        {"config_hash": p.config_hash, **result, "attempts": attempt}
                    )
                    results[p.config_hash] = result
                    journal.append(result)
                    bar.update(
                        finished=copies[p.config_hash],
                        failed=result["status"] != "completed",
                        pending=len(in_flight),
                    )
            bar.poll()
            fill()
    except KeyboardInterrupt:
        bar.close()
        print(
            f"wafersim: sweep interrupted; {len(journal.read())} results kept in "
            f"{journal.path}: run the same command with --resume to continue",
            file=sys.stderr,
        )
        raise
    finally:
        bar.close()
        journal.close()
    table = tables.build_table(sw, points, results, traces=bool(traces))
    tables.write_table(table, output)
    journal.close(remove=True)
    return Outcome(
        output=output,
        points=len(points),
        ran=len(todo),
        skipped=skipped,
        counts=tables.summarise(table.column("status").to_pylist()),
        wall_s=time.perf_counter() - t0,
        workers=len(client.nthreads()),
    )
