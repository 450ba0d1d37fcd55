"""The progress hooks of a run, as the runner calls them; drawing them is the application's job
(``app/progress.py`` draws bars and lines on a terminal).

The kernel calls :meth:`RunHooks.update` between chunks of events (:class:`simcore.sim.Progress`);
the runner calls the build hooks around a scenario's build, :meth:`RunHooks.end_run` when its
simulation ends (before its metrics), the sub-run hooks around each
simulation nested in the run (:mod:`runner.subrun`) and :meth:`RunHooks.close` when the run is
over. Every hook here does nothing: a subclass overrides what it shows.
"""

from __future__ import annotations

from typing import Any

from simcore.sim import Progress, RunResult, Simulation


class RunHooks(Progress):
    """The hooks a run calls besides the kernel's ``update`` (all no-ops here)."""

    def start_build(self, sim: Simulation, kind: Any, params: Any) -> None:
        """A scenario of ``kind`` (a :class:`runner.registry.WorkloadKind`) starts building."""

    def end_build(self, sim: Simulation) -> None:
        """The build is over (checked); the run starts."""

    def end_run(self, sim: Simulation, result: RunResult) -> None:
        """The top-level simulation has ended (``result``); its metrics are computed next, which
        may start sub-runs of their own (gpt-ws's one-system reference)."""

    def sub_update(
        self, label: str, sim: Simulation, wall: float, events: int, limit: int | None
    ) -> None:
        """The kernel's ``update`` from inside the sub-run ``label`` (its own simulation)."""

    def end_sub_run(self, label: str, sim: Simulation, result: RunResult) -> None:
        """The sub-run ``label`` has ended."""

    def close(self) -> None:
        """The run is over."""
