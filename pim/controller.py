"""The memory controller of one pseudo-channel: one process issuing at most one command a cycle.

Recipe: a process per controller (docs/adding-a-family.md, "processes with channels"), not a
cycle-stepped part. The controller knows, from the timing checker, the earliest cycle at which
each candidate command is legal, so instead of waking every cycle it sleeps until the first
cycle at which something can be issued and decides there, which issues exactly the commands a
per-cycle loop would (every decision is taken at a cycle where at least one candidate is legal;
arrivals wake it too). One command per cycle on the pseudo-channel's command bus (real HBM has
separate row and column command buses; see docs/pim/design.md).

Two ways to feed it:

- **requests** (host reads and writes, :class:`Request`): a queue served by a swappable
  scheduling policy, ``fr-fcfs`` (first-ready: among the oldest ``queue_depth`` requests, a
  ready row hit first, then the oldest ready command) or ``fcfs`` (strictly the oldest request),
  with an ``open`` or ``closed`` page policy (closed: a row is precharged once no queued
  request hits it);
- **a command stream** (:class:`Command`): the PIM command sequence the host sends, issued in
  order (PIM commands must not be reordered), each at its first legal cycle.

Refresh is a swappable part too: ``all-bank`` issues PREA then REF every nREFI cycles (in a
stream, at the first command boundary after it falls due, then reopens the rows that were
open, which PIM state survives), ``none`` turns it off.

Every issued command goes through :meth:`TimingChecker.issue` (so a bug here is a
TimingViolation, never a silent wrong time), then :meth:`PseudoChannel.apply`; a command
stream's through :meth:`pim.bankset.SetTimingChecker.issue`, the same table kept per bank set
(``stream_timing="bank-sets"``, the default; ``"generic"``: the per-bank checker). ``record=True``
keeps the command trace for the independent checker of the tests.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from pim.bankset import SetTimingChecker
from pim.device import PseudoChannel
from pim.timing import TimingChecker
from simcore.component import Component
from simcore.tracing import TraceLevel


class Command(NamedTuple):
    """One command of a stream: ``data`` is a WR's payload (16 lanes), ``note`` metadata
    (a program's roles) that travels with it."""

    cmd: str
    bank: int = 0
    row: int = 0
    col: int = 0
    data: Any = None
    note: Any = None


@dataclasses.dataclass
class Request:
    """A host access of one 32-byte column: arrives at ``arrival`` (cycle)."""

    is_write: bool
    bank: int
    row: int
    col: int
    arrival: int = 0
    data: np.ndarray | None = None
    done: int = -1  # cycle the data has crossed the bus
    value: np.ndarray | None = None  # what a read returned
    seq: int = -1  # admission order in its controller (its age there)
    first: str = ""  # the first command issued for it: RD/WR a row hit, ACT a miss, PRE a conflict


class Issued(NamedTuple):
    cycle: int
    cmd: str
    banks: tuple[int, ...]
    row: int
    col: int


#: A stream's commands go in order, each at its first legal cycle, and nothing outside the
#: controller changes when that is (the stream is fixed, the state is its own): so the process
#: lets the kernel's clock lag behind the commands it issues by up to this many cycles, waking
#: the kernel only then (the commands and their cycles are the same; the run's progress hooks,
#: checked every 20,000 kernel events, see time advance in these steps: at 64 cycles, every
#: 1.3 M cycles, about 1.5 CPU s of a JIT-Q stream; bench/notes/pim-requests.md).
STREAM_LAG_CYCLES = 64

#: Cycles per window of the bus-utilisation and PIM-trigger counters in traces.
TRACE_WINDOW_CYCLES = 256


class Bank(Component):
    """A trace track per bank: row-open slices (OPS) and the commands it receives (DETAIL)."""


class PimTrack(Component):
    """A trace track for the pseudo-channel's PIM units: one slice per CRF program run."""


class Controller(Component):
    """Schedules and issues the commands of one pseudo-channel (see the module docstring).

    Traces (when a run records them): per bank, a slice per row visit (OPS) and a slice per
    command (DETAIL); per pseudo-channel, counters of data-bus utilisation and PIM triggers per
    window of ``TRACE_WINDOW_CYCLES`` (OPS); per PIM program, a slice on the ``pim`` track
    from its first trigger to its EXIT (OPS).
    """

    def __init__(
        self,
        parent: Component,
        name: str,
        pch: PseudoChannel,
        *,
        scheduler: str = "fr-fcfs",
        page_policy: str = "open",
        refresh: str = "all-bank",
        queue_depth: int = 32,
        write_queue_depth: int = 32,
        write_high_watermark: int = 24,
        write_low_watermark: int = 8,
        row_hit_cap: int = 4,
        record: bool = False,
        stream_timing: str = "bank-sets",
    ) -> None:
        super().__init__(parent, name)
        self.pch = pch
        self.std = pch.std
        self.checker = TimingChecker(pch.std, self.path)
        self.scheduler = scheduler
        self.page_policy = page_policy
        self.refresh = refresh
        self.queue_depth = queue_depth
        self.write_queue_depth = write_queue_depth
        self.write_high_watermark = write_high_watermark
        self.write_low_watermark = write_low_watermark
        self.row_hit_cap = row_hit_cap
        self.record = record
        # the checker of a command stream: per bank set (pim.bankset, the same answers in
        # fewer steps) or the generic per-bank one (pim.timing)
        self.stream_timing = stream_timing
        self.trace_log: list[Issued] = []
        self.requests: list[Request] = []
        self.stream: list[Command] = []
        self.source: Iterable[Request] | None = None
        self.latency_hist: dict[int, int] = {}  # cycles from arrival to data -> requests
        self.latency_sum_cycles = 0
        self.completed = 0
        self.row_hits = self.row_misses = self.row_conflicts = 0  # requests, by first command
        self._hits = [0] * self.std.org.banks  # column accesses since each bank's ACT
        self.counts: dict[str, int] = {}
        self.bus_busy_cycles = 0
        self.shift_cycles = 0  # cycles charged to shift-related PIM triggers (see _issue)
        self.host_bytes = 0
        self.first_cycle = -1
        self.last_cycle = -1
        self.end_cycle = 0
        self.next_refresh = self.std.timing.nREFI
        self._next_free = 0  # the command bus takes one command per cycle
        self.banks = [Bank(self, f"bank[{b}]") for b in range(self.std.org.banks)]
        self.pim_track = PimTrack(self, "pim")
        self._opened = [-1] * self.std.org.banks  # cycle each bank's row was opened
        self._window = 0  # trace counters: current window, its busy cycles and triggers
        self._win_busy = 0
        self._win_trig = 0
        self._program_start = -1
        self._program_name = ""
        self._done_after: dict[str, int] = {}  # a stream's RD/WR: cycles to its last beat
        self._tracing = False  # a stream's run records traces (OPS or more)

    # -- feeding ---------------------------------------------------------------------------------
    def submit(self, requests: list[Request]) -> None:
        self.requests.extend(requests)

    def submit_stream(self, commands: list[Command]) -> None:
        self.stream.extend(commands)

    def submit_source(self, source: Iterable[Request]) -> None:
        """Requests pulled one at a time as they are admitted (a trace streamed from a file):
        in order of arrival, which the source guarantees; none is kept once it completes."""
        self.source = source

    def start(self) -> None:
        if self.stream:
            self.process(self._run_stream(), "stream")
        elif self.requests or self.source is not None:
            self.process(self._run_requests(), "requests")

    # -- issuing ---------------------------------------------------------------------------------
    def _wait_until(self, cycle: int) -> Any:
        delay = cycle * self.domain.period_ticks - self.env.now
        return self.env.timeout(delay if delay > 0 else 0)

    def _issue(self, cmd: str, bank: int, row: int, col: int, data: Any, cycle: int) -> Any:
        banks = self.pch.targets(cmd, bank)
        self.checker.issue(cmd, banks, cycle)
        trig = (
            cmd in ("RD", "WR")
            and self.pch.mode == "AB-PIM"
            and self.pch.open[bank] != (self.pch.row_conf)
        )
        out = self.pch.apply(cmd, bank, row, col, data)
        if trig and self.pch.units.last_role.startswith("shift"):
            # each command is charged the cycles since the command before it
            self.shift_cycles += cycle - max(self.last_cycle, 0)
        self.counts[cmd] = self.counts.get(cmd, 0) + 1
        t = self.std.timing
        if cmd == "ACT":
            for b in banks:
                self._hits[b] = 0
        if cmd in ("RD", "WR"):
            self._hits[bank] += 1
            self.bus_busy_cycles += t.nBL
            if not trig:
                self.host_bytes += self.std.org.column_bytes
            done = cycle + (t.nCL if cmd == "RD" else t.nCWL) + t.nBL
            self.end_cycle = max(self.end_cycle, done)
        else:
            self.end_cycle = max(self.end_cycle, cycle + 1)
        if self.first_cycle < 0:
            self.first_cycle = cycle
        self.last_cycle = cycle
        self._next_free = cycle + 1
        if self.record:
            self.trace_log.append(Issued(cycle, cmd, banks, row, col))
        if self.sim.trace_level >= TraceLevel.OPS:
            self._trace(cmd, banks, row, col, cycle, trig)
        return out

    def _trace(
        self, cmd: str, banks: tuple[int, ...], row: int, col: int, cycle: int, trig: bool
    ) -> None:
        p = self.domain.period_ticks
        detail = self.sim.trace_level >= TraceLevel.DETAIL
        if detail:
            for b in banks:
                self.banks[b].trace("dram", cmd, cycle * p, p, row=row, col=col)
        if cmd == "ACT":
            for b in banks:
                self._opened[b] = cycle
        elif cmd in ("PRE", "PREA"):
            for b in banks:
                t0 = self._opened[b]
                if t0 >= 0:
                    self.banks[b].trace(
                        "row", f"row {self.pch.open_before[b]}", t0 * p, (cycle - t0) * p
                    )
                    self._opened[b] = -1
        # windowed counters
        w = cycle // TRACE_WINDOW_CYCLES
        if w != self._window:
            self._flush_window(p)
            self._window = w
        if cmd in ("RD", "WR"):
            self._win_busy += self.std.timing.nBL
            self._win_trig += trig
        units = self.pch.units
        if trig:
            if self._program_start < 0:
                self._program_start = cycle
            if units.done:
                self.pim_track.trace(
                    "pim", self._program_name or "program", self._program_start * p,
                    (cycle + 1 - self._program_start) * p, triggers=units.triggers,
                )  # fmt: skip
                self._program_start = -1

    def _flush_window(self, p: int) -> None:
        t = self._window * TRACE_WINDOW_CYCLES * p
        self.trace("bus", "bus_utilisation", t, phase="counter",
                   value=self._win_busy / TRACE_WINDOW_CYCLES)  # fmt: skip
        self.trace("pim", "pim_triggers", t, phase="counter", value=float(self._win_trig))
        self._win_busy = self._win_trig = 0

    def finish_trace(self) -> None:
        """Close the last counter window (called when the run ends)."""
        if self.sim.trace_level >= TraceLevel.OPS:
            self._flush_window(self.domain.period_ticks)

    def _refresh_due(self, now: int) -> bool:
        return self.refresh == "all-bank" and now >= self.next_refresh

    def _do_refresh(self) -> Any:
        """PREA (if a bank is open), REF; returns the rows to reopen as (bank, row)."""
        pch = self.pch
        reopen: list[tuple[int, int]] = []
        if pch.mode == "SB":
            reopen = [(b, r) for b, r in enumerate(pch.open) if r >= 0]
        else:
            for parity in (0, 1):
                r = pch.open[parity]
                if r >= 0:
                    reopen.append((parity, r))
        if any(r >= 0 for r in pch.open):
            t = max(self._next_free, self.checker.earliest("PREA", pch.targets("PREA", 0)))
            yield self._wait_until(t)
            self._issue("PREA", 0, 0, 0, None, t)
        t = max(self._next_free, self.checker.earliest("REF", pch.targets("REF", 0)))
        yield self._wait_until(t)
        self._issue("REF", 0, 0, 0, None, t)
        self.next_refresh += self.std.timing.nREFI
        return reopen

    def _run_stream(self) -> Any:
        yield from self._stream()
        self.pch.flush()  # the units' last triggers, if the stream stops inside a program
        self.finish_trace()

    def _stream(self) -> Any:
        pch, env = self.pch, self.env
        period = self.domain.period_ticks
        timing: TimingChecker | SetTimingChecker = (
            SetTimingChecker(self.std, self.path)
            if self.stream_timing == "bank-sets"
            else self.checker
        )
        issue = self._stream_issue
        refresh = self.refresh == "all-bank"
        t_ = self.std.timing
        self._done_after = {"RD": t_.nCL + t_.nBL, "WR": t_.nCWL + t_.nBL}
        self._tracing = self.sim.trace_level >= TraceLevel.OPS
        clock = env.now // period  # the kernel's cycle: it moves only at a yield
        for cmd, bank, row, col, data, note in self.stream:
            if refresh and max(self._next_free, clock) >= self.next_refresh:
                reopen = yield from self._stream_refresh(timing)
                for b, r in reopen:
                    banks = pch.targets("ACT", b)
                    t = max(self._next_free, timing.earliest("ACT", banks))
                    yield self._wait_until(t)
                    issue(timing, "ACT", b, banks, r, 0, None, t)
                clock = env.now // period
            if note is not None:
                roles, self._program_name = note
                pch.units.set_roles(list(roles))
            banks = pch.targets(cmd, bank)
            t = timing.earliest(cmd, banks)
            if t < self._next_free:
                t = self._next_free
            if t - clock >= STREAM_LAG_CYCLES:
                yield self._wait_until(t)
                clock = env.now // period
            issue(timing, cmd, bank, banks, row, col, data, t)
        if self.last_cycle >= 0:
            yield self._wait_until(self.last_cycle)

    def _stream_refresh(self, timing: TimingChecker | SetTimingChecker) -> Any:
        """:meth:`_do_refresh` with the stream's checker."""
        pch = self.pch
        reopen: list[tuple[int, int]] = []
        if pch.mode == "SB":
            reopen = [(b, r) for b, r in enumerate(pch.open) if r >= 0]
        else:
            for parity in (0, 1):
                r = pch.open[parity]
                if r >= 0:
                    reopen.append((parity, r))
        if any(r >= 0 for r in pch.open):
            banks = pch.targets("PREA", 0)
            t = max(self._next_free, timing.earliest("PREA", banks))
            yield self._wait_until(t)
            self._stream_issue(timing, "PREA", 0, banks, 0, 0, None, t)
        banks = pch.targets("REF", 0)
        t = max(self._next_free, timing.earliest("REF", banks))
        yield self._wait_until(t)
        self._stream_issue(timing, "REF", 0, banks, 0, 0, None, t)
        self.next_refresh += self.std.timing.nREFI
        return reopen

    def _stream_issue(
        self, timing: TimingChecker | SetTimingChecker, cmd: str, bank: int,
        banks: tuple[int, ...], row: int, col: int, data: Any, cycle: int,
    ) -> None:  # fmt: skip
        """:meth:`_issue` for a stream: the banks already known, the stream's checker."""
        timing.issue(cmd, banks, cycle)
        pch = self.pch
        if cmd == "RD" or cmd == "WR":
            trig = pch.mode == "AB-PIM" and pch.open[bank] != pch.row_conf
            pch.apply(cmd, bank, row, col, data)
            if trig:
                if pch.units.last_role.startswith("shift"):
                    # each command is charged the cycles since the command before it
                    self.shift_cycles += cycle - (self.last_cycle if self.last_cycle > 0 else 0)
            else:
                self.host_bytes += self.std.org.column_bytes
            self._hits[bank] += 1
            self.bus_busy_cycles += self.std.timing.nBL
            done = cycle + self._done_after[cmd]
            if done > self.end_cycle:
                self.end_cycle = done
        else:
            trig = False
            pch.apply(cmd, bank, row, col, data)
            if cmd == "ACT":
                for b in banks:
                    self._hits[b] = 0
            if cycle + 1 > self.end_cycle:
                self.end_cycle = cycle + 1
        counts = self.counts
        counts[cmd] = counts.get(cmd, 0) + 1
        if self.first_cycle < 0:
            self.first_cycle = cycle
        self.last_cycle = cycle
        self._next_free = cycle + 1
        if self.record:
            self.trace_log.append(Issued(cycle, cmd, banks, row, col))
        if self._tracing:
            self._trace(cmd, banks, row, col, cycle, trig)

    # -- the request scheduler -------------------------------------------------------------------
    def _next_command(self, req: Request) -> str:
        open_row = self.pch.open[req.bank]
        if open_row == req.row:
            return "WR" if req.is_write else "RD"
        return "PRE" if open_row >= 0 else "ACT"

    def _run_requests(self) -> Any:
        yield from self._requests()
        self.finish_trace()

    def _source_iter(self) -> Iterator[Request]:
        if self.source is not None:
            yield from self.source
        else:  # stable: keeps the given order among equal arrivals
            yield from sorted(self.requests, key=lambda r: r.arrival)

    def _complete(self, req: Request, cycle: int) -> None:
        lat = cycle - req.arrival
        self.latency_sum_cycles += lat
        self.latency_hist[lat] = self.latency_hist.get(lat, 0) + 1
        self.completed += 1

    def _requests(self) -> Any:
        pch, checker, t_ = self.pch, self.checker, self.std.timing
        source = self._source_iter()
        nxt: Request | None = next(source, None)
        reads: list[Request] = []  # the scheduling window of reads, oldest first
        writes: list[Request] = []  # the write queue, oldest first
        counter = 0
        draining = False
        due_hits: list[Request] | None = None
        cap, wq_depth = self.row_hit_cap, self.write_queue_depth
        high, low = self.write_high_watermark, self.write_low_watermark
        while nxt is not None or reads or writes:
            now = max(self._next_free, self.env.now // self.domain.period_ticks)
            # admission, in arrival order: a request whose queue is full blocks those behind it
            while nxt is not None and nxt.arrival <= now:
                if nxt.is_write and wq_depth > 0:
                    if len(writes) >= wq_depth:
                        break
                    writes.append(nxt)
                else:
                    if len(reads) >= self.queue_depth:
                        break
                    reads.append(nxt)
                nxt.seq = counter
                counter += 1
                nxt = next(source, None)
            if not reads and not writes:
                if nxt is not None:
                    yield self._wait_until(nxt.arrival)
                continue
            # refresh, when due, first lets the hits of the open rows queued at that moment go
            # (no new ACT, no PRE): a row opened for a request is not closed unused by it
            refreshing = self._refresh_due(now)
            if refreshing:
                if due_hits is None:
                    due_hits = [r for q in (reads, writes) for r in q if pch.open[r.bank] == r.row]
                due_hits = [r for r in due_hits if r.done < 0]
                if not due_hits:
                    due_hits = None
                    yield from self._do_refresh()
                    continue
            # write drain: writes go when their queue reaches the high watermark (until it is
            # down to the low one) or when no read waits, otherwise reads; and in both modes the
            # other queue's row hits (a row opened for a request is used before it is closed)
            if wq_depth > 0:
                if not draining and (len(writes) >= high or not reads):
                    draining = True
                elif draining and reads and len(writes) <= low:
                    draining = False
                serve, other = (writes, reads) if draining else (reads, writes)
                window = serve + [r for r in other if pch.open[r.bank] == r.row]
            else:
                window = reads
            if due_hits is not None:
                window = due_hits
            if self.scheduler == "fcfs":
                window = [min(window, key=lambda r: r.seq)]
            # per bank: the oldest queued request (of either queue) that hits its open row
            popen = pch.open
            oldest_hit: dict[int, int] = {}
            for q in (reads, writes):
                for r in q:  # oldest first: the first hit of a bank is its oldest in q
                    b = r.bank
                    if popen[b] == r.row and r.seq < oldest_hit.get(b, r.seq + 1):
                        oldest_hit[b] = r.seq
            # per bank, within the window: the oldest miss, read hit and write hit. Requests of
            # a bank needing the same command are ready at the same cycle, so the oldest of
            # each kind stands for all of them (the rules below only ever favour the older).
            miss: dict[int, Request] = {}
            rd_hit: dict[int, Request] = {}
            wr_hit: dict[int, Request] = {}
            for r in window:
                b = r.bank
                d = (wr_hit if r.is_write else rd_hit) if popen[b] == r.row else miss
                cur = d.get(b)
                if cur is None or r.seq < cur.seq:
                    d[b] = r
            # Candidates: (class, age, command, bank, request); the lowest ready one goes.
            # Class 0: a row hit; 1: closed-page precharge; 2: the rest. A PRE never closes a row
            # an older queued request needs unless the row has served its cap of hits since its
            # ACT; a bank that has, serves no younger hit while an older miss waits.
            hits = self._hits
            cands: list[tuple[int, int, str, int, Request | None]] = []
            for b, r in miss.items():
                if popen[b] < 0:
                    cands.append((2, r.seq, "ACT", b, r))
                elif not (oldest_hit.get(b, r.seq) < r.seq and (cap == 0 or hits[b] < cap)):
                    cands.append((2, r.seq, "PRE", b, r))
            for d, cmd in ((rd_hit, "RD"), (wr_hit, "WR")):
                for b, r in d.items():
                    if cap and hits[b] >= cap and b in miss and miss[b].seq < r.seq:
                        continue
                    cands.append((0, r.seq, cmd, b, r))
            if self.page_policy == "closed":
                for b, o in enumerate(popen):
                    if o >= 0 and b not in oldest_hit:
                        cands.append((1, b, "PRE", b, None))
            best = None
            soonest = -1
            times = []
            for cand in cands:
                t = checker.earliest1(cand[2], cand[3])
                if t < now:
                    t = now
                times.append(t)
                if soonest < 0 or t < soonest:
                    soonest = t
                if t == now and (best is None or cand[:2] < best[:2]):
                    best = cand
            if best is None:
                wake = soonest if soonest >= 0 else now + 1
                # an arrival wakes it when its queue has room (a full queue frees an entry only
                # at a command, which is a wake of its own); so does a refresh falling due
                other = wake + 1
                if nxt is not None and (
                    len(writes) < wq_depth
                    if nxt.is_write and wq_depth > 0
                    else len(reads) < self.queue_depth
                ):
                    other = max(nxt.arrival, now + 1)
                if self.refresh == "all-bank" and due_hits is None and self.next_refresh > now:
                    other = min(other, self.next_refresh)
                if soonest < 0 or other <= soonest or due_hits is not None:
                    yield self._wait_until(min(wake, other))
                    continue
                # Nothing can change before ``soonest``: no arrival is admitted, no refresh falls
                # due, no command issues, so the decision there is the one these candidates
                # give. Take it without rebuilding them (the same command at the same cycle).
                now = soonest
                for cand, t in zip(cands, times, strict=True):
                    if t == now and (best is None or cand[:2] < best[:2]):
                        best = cand
            _, _, cmd, bank, req = best
            if now * self.domain.period_ticks > self.env.now:  # already there: no kernel event
                yield self._wait_until(now)
            if req is None:
                self._issue("PRE", bank, 0, 0, None, now)
                continue
            out = self._issue(cmd, bank, req.row, req.col, req.data, now)
            if not req.first:
                req.first = cmd
                if cmd == "ACT":
                    self.row_misses += 1
                elif cmd == "PRE":
                    self.row_conflicts += 1
                else:
                    self.row_hits += 1
            if cmd in ("RD", "WR"):
                req.done = now + (t_.nCL if cmd == "RD" else t_.nCWL) + t_.nBL
                req.value = out
                self._complete(req, req.done)
                (writes if req.is_write and wq_depth > 0 else reads).remove(req)


def latency_cycles(controllers: Iterable[Controller]) -> dict[str, float]:
    """Request latency (arrival to the data's last beat on the bus) over ``controllers``:
    ``mean``, ``p50`` and ``p99`` in cycles (nearest rank: the smallest latency at least that
    share of the requests did not exceed); zeros when no request completed."""
    hist: dict[int, int] = {}
    total = n = 0
    for c in controllers:
        total += c.latency_sum_cycles
        n += c.completed
        for lat, k in c.latency_hist.items():
            hist[lat] = hist.get(lat, 0) + k
    out = {"mean": total / n if n else 0.0, "p50": 0.0, "p99": 0.0}
    if not n:
        return out
    for name, q in (("p50", 0.50), ("p99", 0.99)):
        rank = max(1, math.ceil(q * n))
        seen = 0
        for lat in sorted(hist):
            seen += hist[lat]
            if seen >= rank:
                out[name] = float(lat)
                break
    return out
