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

Requests take one of two paths (``request_path``, the config's ``hbm.request_path``):
``event``, the reference (:meth:`Controller._requests`: a kernel event per command, every bound
asked of the checker), or ``bulk`` (:meth:`Controller._requests_bulk`: the same decisions at the
same cycles, several commands per kernel event, the checker's table held as next-allowed
cycles); tests/test_pim_request_paths.py compares them command by command.

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
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from pim.bankset import SetTimingChecker
from pim.device import ProtocolError, PseudoChannel
from pim.standard import COMMANDS
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


@dataclasses.dataclass(slots=True)
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

#: The bulk request path (:meth:`Controller._requests_bulk`) returns to the kernel after this
#: many cycles of its own: the run's progress hooks and livelock watch see it advance, and
#: controllers fed from one streamed trace stay within this many cycles of each other (what
#: the trace reader holds for the others stays small).
BULK_BLOCK_CYCLES = 1024

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
        request_path: str = "event",
        traces_alone: bool = False,
        stream_timing: str = "bank-sets",
        stream_path: str = "runs",
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
        self.request_path = request_path  # "bulk": _requests_bulk when eligible; "event"
        self.traces_alone = traces_alone  # the only controller whose commands a run traces
        # the checker of a command stream: per bank set (pim.bankset, the same answers in
        # fewer steps) or the generic per-bank one (pim.timing)
        self.stream_timing = stream_timing
        # a command stream's repeated triggers decided a run at a time ("runs", with the
        # bank-set checker; :meth:`_stream_run`) or each on its own ("command", the reference)
        self.stream_path = stream_path
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
        t_ = self.std.timing  # RD/WR: cycles from the command to its last beat
        self._done_after = {"RD": t_.nCL + t_.nBL, "WR": t_.nCWL + t_.nBL}
        self._tracing = False  # the run records traces (OPS or more): set at start

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
        self._tracing = self.sim.trace_level >= TraceLevel.OPS
        if self.stream:
            self.process(self._run_stream(), "stream")
        elif self.requests or self.source is not None:
            self.process(self._run_requests(), "requests")

    # -- issuing ---------------------------------------------------------------------------------
    def _wait_until(self, cycle: int) -> Any:
        delay = cycle * self.domain.period_ticks - self.env.now
        return self.env.timeout(delay if delay > 0 else 0)

    def _issue(self, cmd: str, bank: int, row: int, col: int, data: Any, cycle: int) -> Any:
        """Issue ``cmd`` at ``cycle`` (the request path and refresh): :meth:`_issue_banks` with
        the banks it targets and the controller's checker; returns what a RD reads."""
        banks = self.pch.targets(cmd, bank)
        return self._issue_banks(self.checker, cmd, bank, banks, row, col, data, cycle)

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

    def _rows_to_reopen(self) -> list[tuple[int, int]]:
        """The rows a refresh closes and the controller reopens after it, as (bank, row): each
        open bank's in SB mode, one per bank parity in the all-bank modes."""
        pch = self.pch
        if pch.mode == "SB":
            return [(b, r) for b, r in enumerate(pch.open) if r >= 0]
        return [(parity, pch.open[parity]) for parity in (0, 1) if pch.open[parity] >= 0]

    def _do_refresh(self) -> Any:
        """PREA (if a bank is open), REF; returns the rows to reopen as (bank, row)."""
        pch = self.pch
        reopen = self._rows_to_reopen()
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
        issue = self._issue_banks
        refresh = self.refresh == "all-bank"
        clock = env.now // period  # the kernel's cycle: it moves only at a yield
        stream = self.stream
        end = len(stream)
        runs = (
            self.stream_path == "runs"
            and isinstance(timing, SetTimingChecker)
            and not self._tracing
        )
        i = 0
        while i < end:
            cmd, bank, row, col, data, note = stream[i]
            i += 1
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
            if runs and (cmd == "RD" or cmd == "WR") and i < end:
                nxt = stream[i]
                if nxt[0] == cmd and nxt[1] == bank and nxt[5] is None:
                    i, clock = yield from self._stream_run(timing, i, bank, banks, clock)
        if self.last_cycle >= 0:
            yield self._wait_until(self.last_cycle)

    def _stream_run(
        self, timing: SetTimingChecker, i: int, bank: int, banks: tuple[int, ...], clock: int
    ) -> Any:
        """The commands from ``stream[i]`` on that repeat the one just issued (the same RD or WR
        to the same bank, no program note), decided at once when it was a PIM trigger; returns
        (the index of the next command to issue, the kernel's cycle). Their timing is the
        checker's: once a command is recorded at t, the next same command is bound by
        ``max(fixed, t + gap)`` (:meth:`SetTimingChecker.repeat`, nothing else being recorded in
        between), so with the command bus's one a cycle the run goes every ``max(gap, 1)``
        cycles from the first. The run is cut where :meth:`_stream` would refresh before a
        command; the kernel is woken where it would be (every ``STREAM_LAG_CYCLES``); the
        units' control runs as ``len(run)`` triggers (:meth:`PseudoChannel.trigger_run`). A
        run that cannot go so (not a trigger, a command that would raise) is left to the
        one-at-a-time loop, which then issues it exactly as before."""
        stream = self.stream
        cmd = stream[i][0]
        j, end = i + 1, len(stream)
        while j < end:
            c = stream[j]
            if c[0] != cmd or c[1] != bank or c[5] is not None:
                break
            j += 1
        t = self.last_cycle  # the run's first command, just issued
        fixed, gap = timing.repeat(cmd, banks)
        step = gap if gap > 1 else 1
        m = j - i
        if self.refresh == "all-bank":
            # _stream refreshes before the k-th command after t (k >= 1) once
            # max(_next_free, clock) = max(t + (k - 1) * step + 1, clock) >= next_refresh
            due = self.next_refresh
            if clock >= due:
                return i, clock
            m = min(m, (due - 2 - t) // step + 1)  # 0 if t + 1 >= due
        if m < 1 or fixed > t:
            return i, clock
        cols = [c[3] for c in stream[i : i + m]]
        shifts = self.pch.trigger_run(cmd == "WR", bank, cols)
        if shifts is None:
            return i, clock
        first = t + step
        last = t + m * step
        timing.issue_run(cmd, banks, first, step, m)
        self.shift_cycles += shifts * step  # each charged the cycles since the one before
        self._hits[bank] += m
        self.bus_busy_cycles += m * self.std.timing.nBL
        done = last + self._done_after[cmd]
        if done > self.end_cycle:
            self.end_cycle = done
        counts = self.counts
        counts[cmd] = counts.get(cmd, 0) + m
        self.last_cycle = last
        self._next_free = last + 1
        if self.record:
            self.trace_log.extend(
                Issued(first + k * step, cmd, banks, c[2], c[3])
                for k, c in enumerate(stream[i : i + m])
            )
        # wake the kernel where the one-at-a-time loop would: before the first command that is
        # STREAM_LAG_CYCLES or more past the kernel's cycle
        env, period = self.env, self.domain.period_ticks
        k = 1
        while True:
            lag = STREAM_LAG_CYCLES + clock - t
            k = max(k, -(-lag // step))  # the first k with t + k * step - clock >= the lag
            if k > m:
                break
            yield self._wait_until(t + k * step)
            clock = env.now // period
            k += 1
        return i + m, clock

    def _stream_refresh(self, timing: TimingChecker | SetTimingChecker) -> Any:
        """:meth:`_do_refresh` with the stream's checker."""
        pch = self.pch
        reopen = self._rows_to_reopen()
        if any(r >= 0 for r in pch.open):
            banks = pch.targets("PREA", 0)
            t = max(self._next_free, timing.earliest("PREA", banks))
            yield self._wait_until(t)
            self._issue_banks(timing, "PREA", 0, banks, 0, 0, None, t)
        banks = pch.targets("REF", 0)
        t = max(self._next_free, timing.earliest("REF", banks))
        yield self._wait_until(t)
        self._issue_banks(timing, "REF", 0, banks, 0, 0, None, t)
        self.next_refresh += self.std.timing.nREFI
        return reopen

    def _issue_banks(
        self, timing: TimingChecker | SetTimingChecker, cmd: str, bank: int,
        banks: tuple[int, ...], row: int, col: int, data: Any, cycle: int,
    ) -> Any:  # fmt: skip
        """Check and record ``cmd`` to ``banks`` at ``cycle`` on ``timing``, apply it to the
        pseudo-channel, and keep the counts, cycles, command log and trace; returns what the
        pseudo-channel gives back (a RD's data). A stream passes its own checker."""
        timing.issue(cmd, banks, cycle)
        pch = self.pch
        if cmd == "RD" or cmd == "WR":
            trig = pch.mode == "AB-PIM" and pch.open[bank] != pch.row_conf
            out = pch.apply(cmd, bank, row, col, data)
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
            out = pch.apply(cmd, bank, row, col, data)
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
        return out

    # -- the request scheduler -------------------------------------------------------------------
    def _next_command(self, req: Request) -> str:
        open_row = self.pch.open[req.bank]
        if open_row == req.row:
            return "WR" if req.is_write else "RD"
        return "PRE" if open_row >= 0 else "ACT"

    def _run_requests(self) -> Any:
        if self._bulk_eligible():
            yield from self._requests_bulk()
        else:
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

    def _requests(self, state: tuple | None = None) -> Any:
        """The reference request path: one decision per loop, a kernel event per command.
        ``state``: where the bulk path (:meth:`_requests_bulk`) hands over (the source, the
        next request, both queues oldest first, the admission counter, the drain mode and the
        refresh's pending hits)."""
        pch, checker, t_ = self.pch, self.checker, self.std.timing
        reads: list[Request]  # the scheduling window of reads, oldest first
        writes: list[Request]  # the write queue, oldest first
        due_hits: list[Request] | None
        if state is None:
            source = self._source_iter()
            nxt: Request | None = next(source, None)
            reads, writes, counter, draining, due_hits = [], [], 0, False, None
        else:
            source, nxt, reads, writes, counter, draining, due_hits = state
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
            popen = pch.open
            oldest_hit, miss, rd_hit, wr_hit = _by_bank((reads, writes), window, popen)
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

    # -- the request scheduler, decided in bulk --------------------------------------------------
    def _bulk_eligible(self) -> bool:
        """The bulk path runs when configured, the pseudo-channel is in SB mode (host requests:
        a command goes to its bank) and, when the run traces, this controller is the stack's
        only one (its trace events then come in the same order; several controllers' events
        interleave by kernel time, which only the reference reproduces)."""
        if self.request_path != "bulk" or self.pch.mode != "SB":
            return False
        return self.sim.trace_level < TraceLevel.OPS or self.traces_alone

    def _requests_bulk(self) -> Any:
        """:meth:`_requests`, the same decisions at the same cycles, decided in a tight loop.

        Nothing outside the controller touches its pseudo-channel and its requests come from
        its own source, so the process advances its own cycle (``kt``: where the reference's
        kernel clock would be) and returns to the kernel only every ``BULK_BLOCK_CYCLES``
        cycles (progress hooks, the livelock watch, and other controllers sharing a streamed
        trace keep pace) and at the end. The timing state is the checker's table kept as
        next-allowed cycles per level instance (:meth:`TimingChecker.next_allowed`, raised on
        each issue along :meth:`TimingChecker.successors`); the candidates of each bank (its
        oldest serve-queue miss, oldest read hit and write hit, the closed-page precharge) are
        kept per bank and rebuilt only when that bank changes (a command to it, a request
        admitted or completed, the drain mode flipping, a refresh). ``fcfs`` and the window of
        a pending refresh build the candidates as the reference does. A request to a row that
        is not a data row (a mode-register row), a bank or a column outside the organisation
        hands the run over to the reference, state and all. ACT, PRE, RD and WR are applied
        to the device inline, as :meth:`PseudoChannel.apply` does in SB mode (its open-row
        cache for PIM triggers is left alone: a trigger needs AB-PIM mode, reached only by
        ACTs through ``apply``, each of which drops it)."""
        pch, checker, t_, org = self.pch, self.checker, self.std.timing, self.std.org
        period = self.domain.period_ticks
        NC = len(COMMANDS)
        ACT, PRE, PREA, RD, WR, REF = (COMMANDS.index(c) for c in
                                       ("ACT", "PRE", "PREA", "RD", "WR", "REF"))  # fmt: skip
        nb, bpg, ncols, data_rows = org.banks, org.banks_per_group, org.columns, pch.data_rows
        nBL, nCL, nCWL, colbytes = t_.nBL, t_.nCL, t_.nCWL, org.column_bytes
        succ = checker.successors()
        # The loop raises only the bounds of the commands it decides (ACT, PRE, RD, WR); PREA
        # and REF (refresh, every bank) ask the checker, whose record it keeps.
        sp, sg, sbk = (
            [tuple((z, cyc) for z, cyc in row if z not in (PREA, REF)) for row in level]
            for level in succ
        )
        pn, bgf, bn = checker.next_allowed()
        # per command and bank: every bound an issue there raises, as (list, index, cycles)
        upd = [
            [
                tuple((pn, z, cyc) for z, cyc in sp[y])
                + tuple((bgf, (b // bpg) * NC + z, cyc) for z, cyc in sg[y])
                + tuple((bn[b], z, cyc) for z, cyc in sbk[y])
                for b in range(nb)
            ]
            for y in range(NC)
        ]
        lp, lg, lb, acts, faw = (checker.last_pch, checker.last_bg, checker.last_bank,
                                 checker.acts, checker.faw)  # fmt: skip
        lgb = [lg[b // bpg] for b in range(nb)]  # each bank's group's last-issue list
        popen, open_before, rows_of, store = pch.open, pch.open_before, pch.rows, pch.store_data
        hits, counts = self._hits, self.counts
        record, log = self.record, self.trace_log
        trace_ops = self.sim.trace_level >= TraceLevel.OPS
        cap, wq_depth, qd = self.row_hit_cap, self.write_queue_depth, self.queue_depth
        high, low = self.write_high_watermark, self.write_low_watermark
        fcfs = self.scheduler == "fcfs"
        closed = self.page_policy == "closed"
        refresh_all = self.refresh == "all-bank"
        unified = wq_depth <= 0
        hist = self.latency_hist
        K1, K2 = 1 << 40, 2 << 40  # candidate keys: class << 40 | age (or bank)
        INF = 1 << 62
        rdwr = (RD, WR)

        source = self._source_iter()
        nxt: Request | None = next(source, None)
        reads: dict[int, Request] = {}  # seq -> request, oldest first (insertion order)
        writes: dict[int, Request] = {}
        qb: list[dict[int, Request]] = [{} for _ in range(nb)]  # per bank, both queues
        # Candidates: (bank bound, key, command, bank-group slot, bank, request), every bank's
        # in one list sorted by the bank bound (a lower bound of when each can go: a scan
        # stops at the first that can neither be ready nor the soonest); and per bank its own,
        # with what they were built from (its serve-queue miss, read hit, write hit).
        cl: list[tuple] = []
        bc: list[list[tuple]] = [[] for _ in range(nb)]
        bsum: list[tuple] = [(None, None, None)] * nb
        dirty: list[int] = []  # banks whose candidates are to be rebuilt before a decision
        blocked = False  # the next request's queue was full (no completion since)
        # a request was admitted or completed since the drain check (the check changes nothing
        # twice in a row when the low watermark is below the high one, as configs require)
        queues_moved = True
        drain_every = not low < high
        counter = 0
        draining = False
        due_hits: list[Request] | None = None
        kt = self.env.now // period
        nf, end, first, last = self._next_free, self.end_cycle, self.first_cycle, self.last_cycle
        next_refresh = self.next_refresh
        refresh_at = next_refresh if refresh_all else INF
        lat_sum = completed = busy = host = n_hit = n_miss = n_conf = 0
        yield_at = kt + BULK_BLOCK_CYCLES

        def generic(window: list[Request]) -> list[tuple]:
            """The reference's candidates over ``window`` (fcfs, a refresh's pending hits)."""
            if fcfs:
                window = [min(window, key=lambda r: r.seq)]
            oldest_hit, miss, rd_hit, wr_hit = _by_bank(
                (reads.values(), writes.values()), window, popen
            )
            out: list[tuple] = []
            for b, r in miss.items():
                base = (b // bpg) * NC
                if popen[b] < 0:
                    out.append((bn[b][ACT], K2 + r.seq, ACT, base + ACT, b, r))
                elif not (oldest_hit.get(b, r.seq) < r.seq and (cap == 0 or hits[b] < cap)):
                    out.append((bn[b][PRE], K2 + r.seq, PRE, base + PRE, b, r))
            for d, c in ((rd_hit, RD), (wr_hit, WR)):
                for b, r in d.items():
                    if cap and hits[b] >= cap and b in miss and miss[b].seq < r.seq:
                        continue
                    out.append((bn[b][c], r.seq, c, (b // bpg) * NC + c, b, r))
            if closed:
                for b, o in enumerate(popen):
                    if o >= 0 and b not in oldest_hit:
                        out.append((bn[b][PRE], K1 + b, PRE, (b // bpg) * NC + PRE, b, None))
            out.sort()
            return out

        handover = nxt is not None and not (
            0 <= nxt.row < data_rows and 0 <= nxt.bank < nb and 0 <= nxt.col < ncols
        )
        while nxt is not None or reads or writes:
            if kt >= yield_at or handover:
                self._bulk_flush(
                    nf,
                    end,
                    first,
                    last,
                    next_refresh,
                    (lat_sum, completed, busy, host, n_hit, n_miss, n_conf),
                )
                lat_sum = completed = busy = host = n_hit = n_miss = n_conf = 0
                yield self._wait_until(kt)
                yield_at = kt + BULK_BLOCK_CYCLES
                if handover:
                    checker.forget()
                    state = (source, nxt, list(reads.values()), list(writes.values()), counter,
                             draining, due_hits)  # fmt: skip
                    yield from self._requests(state)
                    return
            now = nf if nf > kt else kt
            # admission, in arrival order: a request whose queue is full blocks those behind it
            while not blocked and nxt is not None and nxt.arrival <= now:
                if nxt.is_write and not unified:
                    if len(writes) >= wq_depth:
                        blocked = True  # until a request completes
                        break
                    writes[counter] = nxt
                else:
                    if len(reads) >= qd:
                        blocked = True
                        break
                    reads[counter] = nxt
                nxt.seq = counter
                b = nxt.bank
                qb[b][counter] = nxt
                # the youngest request changes its bank's candidates only where it is the first
                # of its kind (serve-queue miss, read hit, write hit)
                if b not in dirty:
                    m0, rh0, wh0 = bsum[b]
                    if nxt.row == popen[b]:
                        if (wh0 if nxt.is_write else rh0) is None:
                            dirty.append(b)
                    elif m0 is None and (unified or nxt.is_write == draining):
                        dirty.append(b)
                counter += 1
                queues_moved = True
                nxt = next(source, None)
                if nxt is not None and not (
                    0 <= nxt.row < data_rows and 0 <= nxt.bank < nb and 0 <= nxt.col < ncols
                ):
                    handover = True
                    break
            if handover:
                continue
            if not reads and not writes:
                if nxt is not None and nxt.arrival > kt:
                    kt = nxt.arrival
                continue
            if now >= refresh_at:  # next_refresh, or never (refresh "none")
                if due_hits is None:
                    due_hits = [r for q in (reads, writes) for r in q.values()
                                if popen[r.bank] == r.row]  # fmt: skip
                due_hits = [r for r in due_hits if r.done < 0]
                if not due_hits:
                    due_hits = None
                    for y in (PREA, REF):
                        if y == PREA and not any(o >= 0 for o in popen):
                            continue
                        checker.forget()
                        t = checker.earliest(COMMANDS[y], pch.targets(COMMANDS[y], 0))
                        if t < nf:
                            t = nf
                        if t > kt:
                            kt = t
                        self._bulk_issue_all(y, t, succ, pn, bgf, bn)
                        if first < 0:
                            first = t
                        last, nf = t, t + 1
                        if t + 1 > end:
                            end = t + 1
                    next_refresh += t_.nREFI
                    refresh_at = next_refresh
                    dirty = list(range(nb))
                    continue
            if queues_moved and not unified:  # (the drain mode follows the queues' lengths)
                queues_moved = drain_every
                flip = False
                if not draining and (len(writes) >= high or not reads):
                    draining = flip = True
                elif draining and reads and len(writes) <= low:
                    draining, flip = False, True
                if flip:
                    dirty = list(range(nb))
            # the candidates of every bank that changed since the last decision, rebuilt
            for b in dirty:
                o = popen[b]
                rh = wh = m = None
                for r in qb[b].values():
                    if r.row == o:
                        if r.is_write:
                            if wh is None:
                                wh = r
                        elif rh is None:
                            rh = r
                    elif m is None and (unified or r.is_write == draining):
                        m = r
                bl = bn[b]
                base = (b // bpg) * NC
                out: list[tuple] = []
                if m is not None:
                    ms = m.seq
                    if o < 0:
                        out.append((bl[ACT], K2 + ms, ACT, base + ACT, b, m))
                    else:
                        oh = INF
                        if rh is not None:
                            oh = rh.seq
                        if wh is not None and wh.seq < oh:
                            oh = wh.seq
                        if not (oh < ms and (cap == 0 or hits[b] < cap)):
                            out.append((bl[PRE], K2 + ms, PRE, base + PRE, b, m))
                if rh is not None or wh is not None:
                    capped = cap and hits[b] >= cap and m is not None
                    if rh is not None and not (capped and m.seq < rh.seq):  # type: ignore[union-attr]
                        out.append((bl[RD], rh.seq, RD, base + RD, b, rh))
                    if wh is not None and not (capped and m.seq < wh.seq):  # type: ignore[union-attr]
                        out.append((bl[WR], wh.seq, WR, base + WR, b, wh))
                elif closed and o >= 0:
                    out.append((bl[PRE], K1 + b, PRE, base + PRE, b, None))
                for c in bc[b]:  # (bound, key) is unique: comparisons stop before the request
                    del cl[bisect_left(cl, c)]
                for c in out:
                    insort(cl, c)
                bc[b] = out
                bsum[b] = (m, rh, wh)
            dirty.clear()
            if due_hits is not None or fcfs:
                if due_hits is not None:
                    window = due_hits
                elif unified:
                    window = list(reads.values())
                else:
                    serve, other = (writes, reads) if draining else (reads, writes)
                    window = list(serve.values()) + [
                        r for r in other.values() if popen[r.bank] == r.row
                    ]
                cands = generic(window)
            else:
                cands = cl
            best = sc = None
            bkey = skey = soon = INF
            for c in cands:
                t, key, y, k, _b, _r = c
                if t > soon:  # (soon > now once set) neither ready nor the soonest: stop here
                    break
                v = pn[y]
                if v > t:
                    t = v
                v = bgf[k]
                if v > t:
                    t = v
                if t <= now:
                    if key < bkey:
                        bkey, best = key, c
                    # once one is ready, the soonest is not needed: the scan stops at the
                    # first whose bank bound is past now (it cannot be ready)
                    soon = now
                elif t < soon:
                    soon, skey, sc = t, key, c
                elif t == soon and key < skey:
                    skey, sc = key, c
            if best is None:
                wake = soon if sc is not None else now + 1
                # an arrival wakes it when its queue has room; so does a refresh falling due
                other_t = wake + 1
                if nxt is not None and (
                    len(writes) < wq_depth if nxt.is_write and not unified else len(reads) < qd
                ):
                    other_t = nxt.arrival if nxt.arrival > now + 1 else now + 1
                if refresh_all and due_hits is None and now < next_refresh < other_t:
                    other_t = next_refresh
                if sc is None or other_t <= soon or due_hits is not None:
                    w = wake if wake < other_t else other_t
                    if w > kt:
                        kt = w
                    continue
                now, best = soon, sc
            if now > kt:
                kt = now
            _t, _key, y, k, b, req = best
            # the timing table, as next-allowed cycles, and the checker's record
            for arr, z, cyc in upd[y][b]:
                v = now + cyc
                if v > arr[z]:
                    arr[z] = v
            lp[y] = now
            lgb[b][y] = now
            lb[b][y] = now
            if req is None:
                row = col = 0
            else:
                row, col = req.row, req.col
            cmd = COMMANDS[y]
            counts[cmd] = counts.get(cmd, 0) + 1
            out = None
            if y == ACT:
                acts.append(now)
                if len(acts) > 4:
                    del acts[0]
                if len(acts) >= 4:
                    v = acts[-4] + faw
                    if v > pn[ACT]:
                        pn[ACT] = v
                popen[b] = row
                hits[b] = 0
                if now + 1 > end:
                    end = now + 1
            elif y == PRE:
                open_before[b] = popen[b]
                popen[b] = -1
                if now + 1 > end:
                    end = now + 1
            else:  # RD / WR: the data
                hits[b] += 1
                busy += nBL
                host += colbytes
                done = now + (nCL if y == RD else nCWL) + nBL
                if done > end:
                    end = done
                if store:
                    arr = rows_of.get(row)
                    if arr is None:
                        arr = pch.row(row)
                    if y == RD:
                        out = arr[b, col].copy()
                    else:
                        if req.data is None:
                            raise ProtocolError(f"{pch.name}: WR without data")
                        arr[b, col] = req.data
            if first < 0:
                first = now
            last, nf = now, now + 1
            if record:
                log.append(Issued(now, cmd, (b,), row, col))
            if trace_ops:
                self._trace(cmd, (b,), row, col, now, False)
            if req is not None:
                if not req.first:
                    req.first = cmd
                    if y == ACT:
                        n_miss += 1
                    elif y == PRE:
                        n_conf += 1
                    else:
                        n_hit += 1
                if y in rdwr:
                    req.done = done
                    req.value = out
                    lat = done - req.arrival
                    lat_sum += lat
                    hist[lat] = hist.get(lat, 0) + 1
                    completed += 1
                    s = req.seq
                    blocked = False
                    queues_moved = True
                    if req.is_write and not unified:
                        del writes[s]
                    else:
                        del reads[s]
                    del qb[b][s]
            dirty.append(b)
        self._bulk_flush(
            nf,
            end,
            first,
            last,
            next_refresh,
            (lat_sum, completed, busy, host, n_hit, n_miss, n_conf),
        )
        checker.forget()
        if kt * period > self.env.now:
            yield self._wait_until(kt)

    def _bulk_flush(
        self, nf: int, end: int, first: int, last: int, next_refresh: int, sums: tuple
    ) -> None:
        """Write the bulk path's cycles back, and add its sums since the last flush."""
        self._next_free, self.end_cycle = nf, end
        self.first_cycle, self.last_cycle = first, last
        self.next_refresh = next_refresh
        lat_sum, completed, busy, host, n_hit, n_miss, n_conf = sums
        self.latency_sum_cycles += lat_sum
        self.completed += completed
        self.bus_busy_cycles += busy
        self.host_bytes += host
        self.row_hits += n_hit
        self.row_misses += n_miss
        self.row_conflicts += n_conf

    def _bulk_issue_all(
        self, y: int, cycle: int, succ: tuple, pn: list[int], bgf: list[int], bn: list[list[int]]
    ) -> None:
        """Issue PREA or REF (every bank) on the bulk path: the next-allowed cycles, the
        checker's record, the device, the counts, the command log and the trace; the caller
        keeps the cycles (first, last, next free, end)."""
        sp, sg, sbk = succ
        nc = len(COMMANDS)
        cmd = COMMANDS[y]
        banks = self.pch.targets(cmd, 0)
        checker = self.checker
        for z, cyc in sp[y]:
            pn[z] = max(pn[z], cycle + cyc)
        checker.last_pch[y] = cycle
        groups = sorted({b // self.std.org.banks_per_group for b in banks})
        for g in groups:
            for z, cyc in sg[y]:
                bgf[g * nc + z] = max(bgf[g * nc + z], cycle + cyc)
            checker.last_bg[g][y] = cycle
        for b in banks:
            for z, cyc in sbk[y]:
                bn[b][z] = max(bn[b][z], cycle + cyc)
            checker.last_bank[b][y] = cycle
        self.pch.apply(cmd, 0)
        self.counts[cmd] = self.counts.get(cmd, 0) + 1
        if self.record:
            self.trace_log.append(Issued(cycle, cmd, banks, 0, 0))
        if self.sim.trace_level >= TraceLevel.OPS:
            self._trace(cmd, banks, 0, 0, cycle, False)


def _by_bank(
    queues: Iterable[Iterable[Request]], window: Iterable[Request], popen: list[int]
) -> tuple[dict[int, int], dict[int, Request], dict[int, Request], dict[int, Request]]:
    """What both request paths decide from, per bank: the age (``seq``) of the oldest queued
    request of ``queues`` that hits its open row, and within ``window`` the oldest miss, read hit
    and write hit. Requests of a bank needing the same command are ready at the same cycle, so
    the oldest of each kind stands for all of them (the rules only ever favour the older)."""
    oldest_hit: dict[int, int] = {}
    for q in queues:
        for r in q:
            b = r.bank
            if popen[b] == r.row and r.seq < oldest_hit.get(b, r.seq + 1):
                oldest_hit[b] = r.seq
    miss: dict[int, Request] = {}
    rd_hit: dict[int, Request] = {}
    wr_hit: dict[int, Request] = {}
    for r in window:
        b = r.bank
        d = (wr_hit if r.is_write else rd_hit) if popen[b] == r.row else miss
        cur = d.get(b)
        if cur is None or r.seq < cur.seq:
            d[b] = r
    return oldest_hit, miss, rd_hit, wr_hit


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
