"""Sub-runs: the runner's way of running a simulation inside another's run.

A system that simulates parts of itself in simulations of their own (a CS-2 at PE fidelity, one
per streamed product) asks its simulation's :attr:`~simcore.sim.Simulation.sub_runs`; a kind
whose metrics come from runs of other kinds (the JIT-Q study, gpt-ws's one-system reference)
asks :func:`run_kind` or the same object. Every run the runner starts carries a
:class:`RunnerSubRuns`, so a nested run gets what the top-level run gets:

- **the memory budget**: a sub-run whose estimated peak (``footprint_bytes``, or the kind's
  footprint) does not fit in the memory available is refused with the budget's error;
- **the deadline**: the child's progress hook forwards to the parent's, so a sweep point's time
  limit ends a run that is inside a sub-run;
- **interrupts**: Ctrl-C inside a sub-run ends the whole run (``KeyboardInterrupt``), and the
  trace written so far is kept by the top-level run;
- **stalls**: a stalled or livelocked sub-run stops the run with a report naming the sub-run;
- **progress**: the display is told of each sub-run's updates and end
  (:class:`runner.progress.RunHooks`).
"""

from __future__ import annotations

from typing import Any

from runner import budget, registry
from runner.progress import RunHooks
from simcore.sim import Progress, RunResult, Simulation, SubRuns


class _Nested(Progress):
    """A sub-run's progress hook: forwards the kernel's updates to the top-level run's hook."""

    def __init__(self, top: Progress, label: str) -> None:
        super().__init__(after_s=0.0, every_s=0.0)
        self.top, self.label = top, label

    def update(self, sim: Simulation, wall: float, events: int, limit: int | None) -> None:
        if isinstance(self.top, RunHooks):
            self.top.sub_update(self.label, sim, wall, events, limit)
        else:
            self.top.update(sim, wall, events, limit)  # a deadline: it watches the wall clock


class RunnerSubRuns(SubRuns):
    """:class:`simcore.sim.SubRuns` with the budget check and the progress hooks (see the
    module docstring). ``top`` is the top-level run's progress hook (None: no display)."""

    def __init__(self, parent: Simulation, top: Progress | None = None) -> None:
        super().__init__(parent)
        self.top = top

    def for_child(self, child: Simulation) -> SubRuns:
        return RunnerSubRuns(child, self.top)

    def child_progress(self, label: str) -> Progress | None:
        return None if self.top is None else _Nested(self.top, label)

    def before(self, label: str, footprint_bytes: int | None) -> None:
        if footprint_bytes is not None:
            budget.check_bytes(f"sub-run '{label}'", footprint_bytes)

    def after(self, label: str, child: Simulation, result: RunResult) -> None:
        if isinstance(self.top, RunHooks):
            self.top.end_sub_run(label, child, result)


def run_kind(parent: Simulation, kind: str, params: Any) -> dict[str, Any]:
    """Run workload kind ``kind`` with ``params`` as a sub-run of ``parent`` and return its
    metrics (the kind's footprint, when it has one, is checked against the budget first)."""
    registry.load_all()
    k = registry.KINDS[kind]
    budget.check_fits(k, params)
    built: list[Simulation] = []

    def build(sim: Simulation) -> Any:
        built.append(sim)
        return k.build(sim, params)

    handle, result = parent.sub_runs.run(kind, build, seed=params.seed)
    return k.metrics(built[0], params, handle, result)
