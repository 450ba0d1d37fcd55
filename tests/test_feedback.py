"""Feedback on long work: validation progress through the runner, memory estimates that refuse
builds that cannot fit, build and run progress.

- A runner reports each finished point to its ``on_point`` callback; ``validate`` shows a line
  per point and prints each case's table as soon as the case ends.
- Every kind that estimates its footprint predicts exactly the components its build makes, and
  a build the estimate says will not fit is refused before building, naming the estimate, the
  memory available and the largest size that fits.
- The run progress line gives a fraction and an ETA from the model's predicted end, on a
  terminal as a bar and elsewhere as lines.
"""

from __future__ import annotations

import io
import json
import re

import pytest

from app import cli
from app.progress import PointProgress, RunProgress
from runner import budget, registry, scenario
from simcore import config as cfg
from simcore.errors import BuildError
from simcore.sim import Simulation


def test_the_runner_reports_each_point_as_it_finishes():
    seen = []
    runner = scenario.SequentialRunner(on_point=seen.append)
    kind = registry.KINDS["wse-fmac"]
    points = [kind.params(elements=n) for n in (4, 8, 16)]
    out = runner("wse-fmac", points)
    assert [d.index for d in seen] == [0, 1, 2] and {d.total for d in seen} == {3}
    assert [d.metrics for d in seen] == out
    assert [d.params for d in seen] == points and all(d.wall_s >= 0 for d in seen)


def test_validate_shows_points_and_each_case_as_it_ends(capsys, monkeypatch):
    events = []
    real = PointProgress.__call__

    def spy(self, done):
        events.append(("point", self.case, capsys.readouterr().out))
        real(self, done)

    monkeypatch.setattr(PointProgress, "__call__", spy)
    code = cli.main(["validate", "link-chain", "wse-fmac"])
    assert code == 0
    cases = [c for _, c, _ in events]
    assert cases.count("link-chain") == 6 and cases.count("wse-fmac") == 18
    # When the first wse-fmac point finished, link-chain's table had been printed.
    first = next(i for i, (_, c, _) in enumerate(events) if c == "wse-fmac")
    printed_before = "".join(out for _, _, out in events[: first + 1])
    assert "link-chain: MAPE" in printed_before and "wse-fmac: MAPE" not in printed_before


def test_validate_point_lines(capsys):
    assert cli.main(["validate", "link-chain"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 6
    assert lines[0].startswith("[validate link-chain] point 1/6 (link-chain items=2000 capacity=2)")
    assert "cycles in" in lines[0]
    assert "error % = (simulated - model) / model x 100" in out
    assert cli.main(["validate", "link-chain", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("name", "sets"),
    [(n, []) for n in scenario.builtin_names()]
    + [("ws-matmul", ["flavour=wgrad"]), ("ws-matmul", ["flavour=bwd", "px=2", "py=4"])],
)
def test_footprint_predicts_the_components_built(name, sets):
    sc = scenario.find(name)
    params = scenario.resolve_params(sc, sets)
    assert sc.kind.footprint is not None, f"kind {sc.kind.name} has no footprint estimate"
    fp = sc.kind.footprint(params)
    sim = Simulation(seed=params.seed)
    sc.kind.build(sim, params)
    assert fp.components == len(sim.components)
    assert fp.bytes > 0 and (fp.size_key == "" or hasattr(params, fp.size_key))


def test_a_build_that_cannot_fit_is_refused_before_building(capsys, monkeypatch):
    kind = registry.KINDS["summa"]
    params = kind.params(p=750)
    free = 24 * 10**9
    with pytest.raises(BuildError) as err:
        budget.check_fits(kind, params, available=free)
    best = budget.largest_fitting(kind, params, int(budget.USABLE * free))
    assert best is not None and 2 <= best < 750
    fits = kind.footprint(kind.params(p=best)).bytes
    too_big = kind.footprint(kind.params(p=best + 1)).bytes
    assert fits <= budget.USABLE * free < too_big
    assert str(err.value) == (
        f"summa would need about {kind.footprint(params).bytes / 1e9:,.1f} GB of memory "
        f"(562,501 components) but 24.0 GB is available; the largest p that fits is {best} "
        "(config key 'p' = 750): lower p, or free memory"
    )
    monkeypatch.setattr(budget, "available_bytes", lambda: 10**9)
    code = cli.main(["run", "summa", "--set", "p=750", "--quiet"])
    _, err_text = capsys.readouterr()
    assert code == 2 and err_text.startswith("wafersim: error: summa would need about")
    assert "1.0 GB is available; the largest p that fits is" in err_text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [False, True])
def test_run_progress_shows_fraction_and_eta(tty):
    stream = _Tty() if tty else io.StringIO()
    progress = RunProgress(stream, after_s=0.0, every_s=0.0)
    sc = scenario.find("link-chain-backpressure")
    params = scenario.resolve_params(sc, [])
    out = scenario.run_scenario(sc, params, progress=progress)
    assert out.result.status == "completed"
    text = stream.getvalue()
    if tty:
        assert "[wafersim] ~cycles (model)" in text and "%" in text and "events/s" in text
    else:
        assert "of the model's 15,022 | ETA ~" in text


def test_run_progress_aims_at_the_models_end_of_the_run():
    """gpt-ws models a step (``time_s``) and the run of several (``run_time_s``): the ETA aims
    at the run's end, in cycles of the run's main clock."""
    stream = io.StringIO()
    progress = RunProgress(stream, after_s=0.0, every_s=0.0)
    sc = scenario.find("gpt-ws")
    params = scenario.resolve_params(sc, [])
    modelled = sc.kind.model(params)
    out = scenario.run_scenario(sc, params, progress=progress)
    assert progress.expected_s == modelled["run_time_s"] > 1.5 * modelled["time_s"]
    assert out.metrics["run_time_s"] == pytest.approx(modelled["run_time_s"], rel=1e-3)
    assert "of the model's" in stream.getvalue()


def test_point_lines_give_cycles_or_seconds():
    stream = io.StringIO()
    points = PointProgress(stream)
    points.start_case("c")
    for metrics in ({"cycles": 1234, "time_s": 1.234e-6}, {"time_s": 2.5e-5}, {}):
        params = registry.KINDS["wse-fmac"].params()
        points(registry.PointDone("wse-fmac", 0, 1, params, metrics, 0.5))
    lines = stream.getvalue().splitlines()
    assert [line.split(": ")[-1] for line in lines] == [
        "1,234 cycles in 0.5 s", "2.5e-05 s in 0.5 s", "done in 0.5 s"
    ]  # fmt: skip


def test_build_progress(monkeypatch):
    stream = io.StringIO()
    progress = RunProgress(stream, after_s=0.0, every_s=0.0)
    sc = scenario.find("wse-bcast")
    params = scenario.resolve_params(sc, ["pes=200"])
    scenario.run_scenario(sc, params, progress=progress)
    assert "[wafersim] building: 192 of ~201 components (96%)" in stream.getvalue()


def test_json_stays_clean_with_progress(capsys):
    assert cli.main(["run", "link-chain", "--json"]) == 0
    json.loads(capsys.readouterr().out)


def _modelled_kinds() -> list[str]:
    registry.load_all()
    return sorted(name for name, kind in registry.KINDS.items() if kind.model is not None)


class _Kept(RunProgress):
    """A run's progress that keeps the simulation, to ask it for a line after the run."""

    def end_build(self, sim: Simulation) -> None:
        self.sim = sim
        super().end_build(sim)


@pytest.mark.parametrize("name", _modelled_kinds())
def test_every_modelled_kind_shows_a_fraction_and_an_eta(name):
    """Every kind with a model knows the end its model predicts and shows its simulated time as
    a fraction of it with an ETA (issue 27: gpt-ws and the TPU kinds showed neither; wafer runs
    at the lock-step fidelity showed nothing while the kernel waited for 20,000 events). The
    smallest points end in a few events, before the kernel's first look at progress, so the
    line is asked for once more at the run's end."""
    from tests.test_metric_names import POINTS

    kind = registry.KINDS[name]
    params = kind.params if not hasattr(kind.params, "for_data") else kind.params.for_data({})
    point = cfg.load(params, POINTS[name][0][0])
    stream = io.StringIO()
    progress = _Kept(stream, after_s=0.0, every_s=0.0)
    out = scenario.run_scenario(scenario.Scenario(name, "<test>", kind, "", {}), point,
                                progress=progress)  # fmt: skip
    assert out.result.status == "completed" and progress.expected_s, name
    progress.update(progress.sim, progress._last + 10.0, 1_000, None)
    line = stream.getvalue().splitlines()[-1]
    assert re.search(r"~\d+% of the model's [\d,]+ \| ETA ~\d+ s", line), (name, line)


def test_sub_runs_after_the_run_do_not_show_the_runs_eta():
    """gpt-ws's one-system reference runs while its metrics are computed, after its own
    simulation ended: its lines say the run is over instead of an ETA near 0 s at 99 %."""
    stream = io.StringIO()
    progress = RunProgress(stream, after_s=0.0, every_s=0.0)
    sc = scenario.find("gpt-ws")
    params = scenario.resolve_params(sc, [])
    scenario.run_scenario(sc, params, progress=progress)
    lines = [line for line in stream.getvalue().splitlines() if "one-system reference" in line]
    assert lines and all("run over, computing its metrics" in line for line in lines)
    assert not any("ETA" in line for line in lines)
