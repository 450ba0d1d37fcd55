"""Feedback on long work: builds, runs and validation points (on stderr, never on stdout).

* :class:`RunProgress` is the progress hook of ``wafersim run``. While a large model is built it
  shows components built of the footprint's estimate (a bar with rate and ETA); while it runs,
  simulated cycles (of the run's main clock) of the end the kind's analytical model predicts
  (its ``run_time_s`` where it models a run of several steps, else its ``time_s``), so the
  fraction and ETA are estimates (marked ``~``), and events per second. Nothing shows for work
  under two seconds. Simulations nested in the run (sub-runs: a CS-2's PE-level products) show
  as lines: the current sub-run's cycles, and how many have ended, with where the run that holds
  them is of its model's end; sub-runs the metrics start once the run is over (gpt-ws's
  one-system reference) say so instead.
* :class:`PointProgress` is the ``on_point`` callback of a validation's runner
  (:class:`registry.PointDone`): a line per finished point (its parameters that differ from the
  kind's defaults, its result, its time) and a bar over the points of the case.

On a terminal the bars are drawn by tqdm (a widely used, maintained progress-bar library: rate,
ETA, terminal width and redraws handled); when stderr is a file or a pipe, plain lines are
printed every few seconds instead, so logs stay readable.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from runner import registry
from runner.progress import RunHooks
from simcore import config as cfg
from simcore.clock import Ticks
from simcore.sim import RunResult, Simulation

if TYPE_CHECKING:
    from tqdm import tqdm


def _bar(**options: Any) -> tqdm:
    """A tqdm progress bar (imported when a terminal first shows one)."""
    from tqdm import tqdm

    return tqdm(**options)


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:
        return False


class RunProgress(RunHooks):
    """Build and run progress of one scenario (see the module docstring)."""

    def __init__(self, stream: TextIO | None = None, *, after_s: float = 2.0, every_s: float = 2.0):
        super().__init__(stream, after_s=after_s, every_s=every_s)
        self.tty = _is_tty(self.stream)
        self.expected_s: float | None = None
        self._bar: tqdm | None = None
        self._build_total = 0
        self._build_t0 = 0.0
        self._build_last = 0.0
        self._run_t0 = time.perf_counter()
        self._sub_last = 0.0
        self._outer: Simulation | None = None
        self._outer_ended = False
        self.sub_runs = 0

    # -- build -------------------------------------------------------------------------------------
    def start_build(self, sim: Simulation, kind: registry.WorkloadKind, params: Any) -> None:
        """Follow the build of ``kind`` (components of its footprint) and note the model's
        predicted end of the run (seconds) for its ETA."""
        self._outer = sim
        if kind.model is not None:
            try:
                modelled = kind.model(params)
                end = float(modelled.get("run_time_s") or modelled.get("time_s") or 0)
            except (ArithmeticError, ValueError, KeyError):
                end = 0.0
            self.expected_s = end if math.isfinite(end) and end > 0 else None
        if kind.footprint is None:
            return
        self._build_total = kind.footprint(params).components
        self._build_t0 = self._build_last = time.perf_counter()
        sim.on_build = self._built

    def _built(self, n: int) -> None:
        if n & 63:
            return  # look at the clock every 64 components
        now = time.perf_counter()
        if now - self._build_t0 < self.after_s:
            return
        if self.tty:
            if self._bar is None:
                self._bar = _bar(total=self._build_total, desc="[wafersim] building",
                                 unit="comp", file=self.stream, dynamic_ncols=True)  # fmt: skip
            self._bar.update(n - self._bar.n)
        elif now - self._build_last >= self.every_s:
            self._build_last = now
            frac = n / self._build_total if self._build_total else 0.0
            eta = (now - self._build_t0) * (1 - frac) / frac if frac else math.inf
            print(
                f"[wafersim] building: {n:,} of ~{self._build_total:,} components "
                f"({100 * frac:.0f}%) | ETA {eta:.0f} s", file=self.stream, flush=True,
            )  # fmt: skip
            self.printed = True

    def end_build(self, sim: Simulation) -> None:
        sim.on_build = None
        self._close()
        self._run_t0 = time.perf_counter()

    def end_run(self, sim: Simulation, result: RunResult) -> None:
        if sim is self._outer:
            self._outer_ended = True

    # -- sub-runs (simulations inside the run: a CS-2's PE-level products, a study's points) ---
    def sub_update(
        self, label: str, sim: Simulation, wall: float, events: int, limit: int | None
    ) -> None:
        cycle = sim.main_domain.cycle_at(Ticks(sim.env.now))
        rate = events / wall if wall > 0 else 0.0
        what = f"t = {cycle:,} {sim.main_domain.name} cycles | {rate:,.0f} events/s"
        self._sub_line(f"sub-run {self.sub_runs + 1} ({label}): {what}")

    def end_sub_run(self, label: str, sim: Simulation, result: RunResult) -> None:
        self.sub_runs += 1
        cycles = sim.main_domain.cycle_at(Ticks(result.end_ticks))
        self._sub_line(f"{self.sub_runs:,} sub-runs done (last: {label}, {cycles:,} cycles)")

    def _sub_line(self, text: str) -> None:
        now = time.perf_counter()
        if now - self._run_t0 < self.after_s or now - self._sub_last < self.every_s:
            return
        self._sub_last = now
        line = f"[wafersim] {text}{self._outer_share(now)}"
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)
        self.printed = True

    def _outer_share(self, now: float) -> str:
        """Where the run that holds the sub-runs is, of the end its model predicts, with an ETA
        (the sub-runs are its work: its simulated time advances as they end)."""
        if self._outer_ended:
            return " | run over, computing its metrics"  # sub-runs of the metrics: no ETA known
        if self._outer is None or not self.expected_s:
            return ""
        domain = self._outer.main_domain
        total = self.expected_s * domain.freq_hz
        frac = min(domain.cycle_at(Ticks(self._outer.env.now)) / total, 0.99)
        if frac <= 0:
            return f" | run at ~0% of the model's {total:,.0f} {domain.name} cycles"
        eta = (now - self._run_t0) * (1 - frac) / frac
        return f" | run at ~{100 * frac:.0f}% of the model's end | ETA ~{eta:.0f} s"

    # -- run ---------------------------------------------------------------------------------------
    def update(self, sim: Simulation, wall: float, events: int, limit: int | None) -> None:
        if limit or not self.expected_s:
            super().update(sim, wall, events, limit)  # a known end, or none at all
            return
        if wall < self.after_s:
            return
        cycle = sim.main_domain.cycle_at(Ticks(sim.env.now))
        total = self.expected_s * sim.main_domain.freq_hz
        if self.tty:
            if self._bar is None:
                self._bar = _bar(total=int(total), desc="[wafersim] ~cycles (model)",
                                 unit="cyc", unit_scale=True, file=self.stream,
                                 dynamic_ncols=True)  # fmt: skip
            self._bar.set_postfix_str(f"{events / wall:,.0f} events/s", refresh=False)
            self._bar.update(min(cycle, int(total)) - self._bar.n)
            return
        if wall - self._last < self.every_s:
            return
        self._last = wall
        frac = min(cycle / total, 0.99)
        eta = wall * (1 - frac) / frac if frac > 0 else math.inf
        print(f"[wafersim] t = {cycle:,} {sim.main_domain.name} cycles | ~{100 * frac:.0f}% of "
              f"the model's {total:,.0f} | ETA ~{eta:.0f} s | {events / wall:,.0f} events/s",
              file=self.stream, flush=True)  # fmt: skip
        self.printed = True

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        """End any bar (called once the run is over)."""
        self._close()


def describe_point(params: registry.ScenarioParams) -> str:
    """``key=value`` for each parameter that differs from its kind's default."""
    flat = cfg.flatten(cfg.to_dict(params))
    defaults = cfg.flatten(cfg.to_dict(type(params)()))
    return " ".join(f"{k}={v}" for k, v in flat.items() if defaults.get(k) != v) or "defaults"


class PointProgress:
    """``on_point`` callback of a validation runner: a line per point, a bar per case."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.tty = _is_tty(self.stream)
        self.case = ""
        self._bar: tqdm | None = None

    def start_case(self, name: str) -> None:
        self.close()
        self.case = name

    def __call__(self, done: registry.PointDone) -> None:
        if self.quiet:
            return
        cycles, time_s = done.metrics.get("cycles"), done.metrics.get("time_s")
        if isinstance(cycles, int | float):
            what = f"{cycles:,.0f} cycles"
        elif isinstance(time_s, int | float):
            what = f"{time_s:.4g} s"
        else:
            what = "done"
        line = (
            f"[validate {self.case}] point {done.index + 1}/{done.total} "
            f"({done.kind} {describe_point(done.params)}): {what} in {done.wall_s:.1f} s"
        )
        if self.tty:
            if self._bar is None or self._bar.total != done.total:
                self.close()
                self._bar = _bar(total=done.total, desc=f"[validate {self.case}]", unit="pt",
                                 file=self.stream, dynamic_ncols=True, leave=False)  # fmt: skip
            self._bar.write(line, file=self.stream)
            self._bar.update(1)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
