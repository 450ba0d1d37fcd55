"""Sub-runs: simulations run inside another's run go through the parent's ``sub_runs``
(:class:`simcore.sim.SubRuns`; the runner's :class:`runner.subrun.RunnerSubRuns`), so they get
the budget check, the deadline, interrupt handling, stall reports and progress of a top-level
run."""

from __future__ import annotations

from typing import Any

import pytest
from kernel_harness import Dst, Src

from runner import scenario, subrun
from runner.progress import RunHooks
from runner.subrun import RunnerSubRuns
from simcore import Component, Simulation
from simcore.errors import BuildError, SimulationStalled
from simcore.sim import Progress, RunResult, SubRuns
from workloads.kernel.linkchain import LinkChainParams


def chain(sim: Simulation, items: int, sink_items: int | None = None) -> Dst:
    """src -> channel -> dst moving ``items``; the sink expects ``sink_items`` (a stall when
    more than are sent)."""
    dom = sim.domain("clk", 1_000_000_000)
    top = Component(sim, "top", domain=dom)
    log: list = []
    n = items if sink_items is None else sink_items
    src = Src(top, "src", list(range(items)), [0] * items, log)
    dst = Dst(top, "dst", n, [0] * n, log)
    sim.connect(src.out, dst.inp, latency_cycles=2, capacity=3)
    return dst


class Recorder(RunHooks):
    def __init__(self) -> None:
        super().__init__(after_s=0.0, every_s=0.0)
        self.calls: list[tuple[str, str]] = []

    def update(self, sim: Simulation, wall: float, events: int, limit: int | None) -> None:
        self.calls.append(("update", ""))

    def sub_update(
        self, label: str, sim: Simulation, wall: float, events: int, limit: int | None
    ) -> None:
        self.calls.append(("sub_update", label))

    def end_sub_run(self, label: str, sim: Simulation, result: RunResult) -> None:
        self.calls.append(("end_sub_run", f"{label}:{result.status}:{sim.cycles()}"))


def test_a_sub_run_returns_the_build_and_the_result_and_counts():
    parent = Simulation(seed=5)
    dst, result = parent.sub_runs.run("chain", lambda sim: chain(sim, 10))
    assert result.status == "completed" and dst.got == list(range(10))
    assert (parent.sub_runs.count, parent.sub_runs.events) == (1, result.events)


def test_a_sub_run_has_the_parents_seed_and_livelock_setting_unless_told():
    parent = Simulation(seed=5, livelock_cycles=123)
    seen: list[tuple[int, int]] = []

    def build(sim: Simulation) -> None:
        seen.append((sim.seed, sim.livelock_cycles))
        chain(sim, 1)

    parent.sub_runs.run("a", build)
    parent.sub_runs.run("b", build, seed=9)
    assert seen == [(5, 123), (9, 123)]


def test_a_stalled_sub_run_stops_the_run_naming_the_sub_run():
    parent = Simulation()
    with pytest.raises(SimulationStalled, match=r"sub-run 'short chain' stalled at cycle") as exc:
        parent.sub_runs.run("short chain", lambda sim: chain(sim, 2, sink_items=3))
    assert any("dst" in line for line in exc.value.blocked)


class Interrupting(Component):
    def start(self) -> None:
        self.process(self._run(), "interrupt")

    def _run(self) -> Any:
        yield self.env.timeout(1)
        raise KeyboardInterrupt


def test_an_interrupted_sub_run_interrupts_the_run():
    def build(sim: Simulation) -> None:
        Interrupting(sim, "x", domain=sim.domain("clk", 1_000_000_000))

    with pytest.raises(KeyboardInterrupt):
        Simulation().sub_runs.run("x", build)


class Deadline(Progress):
    class Passed(Exception):
        pass

    def update(self, sim: Simulation, wall: float, events: int, limit: int | None) -> None:
        raise self.Passed


@pytest.mark.parametrize("runs", [SubRuns, RunnerSubRuns])
def test_the_parents_deadline_ends_a_sub_run(runs):
    """A sweep point's time limit is a progress hook that raises: it reaches sub-runs (the
    kernel calls the hook between batches of 20,000 events: 30,000 items make several)."""
    parent = Simulation(progress=Deadline())
    parent.sub_runs = runs(parent) if runs is SubRuns else runs(parent, parent.progress)
    with pytest.raises(Deadline.Passed):
        parent.sub_runs.run("long", lambda sim: chain(sim, 30_000))


def test_the_runner_tells_the_progress_display_of_sub_runs():
    hooks = Recorder()
    parent = Simulation(progress=hooks)
    parent.sub_runs = RunnerSubRuns(parent, hooks)
    parent.sub_runs.run("long", lambda sim: chain(sim, 30_000))
    parent.sub_runs.run("short", lambda sim: chain(sim, 3))
    kinds = [c for c, _ in hooks.calls]
    assert "update" not in kinds  # a sub-run's updates are not the top-level run's
    assert kinds.count("sub_update") >= 1 and all(
        label == "long" for c, label in hooks.calls if c == "sub_update"
    )
    ends = [label for c, label in hooks.calls if c == "end_sub_run"]
    assert [e.split(":")[:2] for e in ends] == [["long", "completed"], ["short", "completed"]]


def test_sub_runs_of_sub_runs_keep_the_runners_hooks():
    hooks = Recorder()
    parent = Simulation(progress=hooks)
    parent.sub_runs = RunnerSubRuns(parent, hooks)

    def outer(sim: Simulation) -> None:
        assert isinstance(sim.sub_runs, RunnerSubRuns)
        sim.sub_runs.run("inner", lambda s: chain(s, 2))
        chain(sim, 1)

    parent.sub_runs.run("outer", outer)
    assert [label.split(":")[0] for c, label in hooks.calls if c == "end_sub_run"] == [
        "inner",
        "outer",
    ]


def test_the_budget_refuses_a_sub_run_that_cannot_fit(monkeypatch):
    parent = Simulation()
    parent.sub_runs = RunnerSubRuns(parent)
    monkeypatch.setattr("runner.budget.available_bytes", lambda: 1_000_000_000)
    built: list[int] = []
    with pytest.raises(BuildError, match=r"sub-run 'huge' would need about 2.0 GB .* 1.0 GB"):
        parent.sub_runs.run("huge", lambda sim: built.append(1), footprint_bytes=2_000_000_000)
    assert built == []  # refused before anything was built
    parent.sub_runs.run("fits", lambda sim: chain(sim, 1), footprint_bytes=100_000_000)


def test_run_kind_as_a_sub_run_gives_the_kinds_own_metrics():
    p = LinkChainParams(items=50, stages=2)
    parent = Simulation()
    parent.sub_runs = RunnerSubRuns(parent)
    assert subrun.run_kind(parent, "link-chain", p) == scenario.run_kind("link-chain", p)
    assert parent.sub_runs.count == 1


def test_run_scenario_gives_every_run_the_runners_sub_runs(monkeypatch):
    seen: list[SubRuns] = []
    real = scenario.Simulation

    class Spy(real):  # type: ignore[misc,valid-type]
        def run(self, **kw: Any) -> RunResult:
            seen.append(self.sub_runs)
            return super().run(**kw)

    monkeypatch.setattr(scenario, "Simulation", Spy)
    sc = scenario.find("link-chain")
    scenario.run_scenario(sc, scenario.resolve_params(sc, ["items=5"]))
    assert len(seen) == 1 and isinstance(seen[0], RunnerSubRuns)
