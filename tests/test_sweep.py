"""Sweeps on Dask: points, the table, failures, resume after a kill, 1 vs 2 workers, validate.

The clusters are real local Dask clusters of worker processes, started once for the module;
the points are small link-chain runs (tens of milliseconds each).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kernel_harness import Dst, Src

from app.cli import main
from runner import registry, scenario
from simcore import Component, Simulation
from simcore.errors import BuildError, ConfigError, ScenarioError, WafersimError
from sweeps import engine, grid, tables
from sweeps.journal import Journal
from workloads.kernel.linkchain import LinkChainParams

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def client2():
    if engine.workers_allowed()[0] < 2:  # --workers is bounded by the cores and memory
        pytest.skip(f"two workers need two cores and memory: {engine.workers_allowed()[1]}")
    with engine.connect(workers=2) as client:
        yield client


@pytest.fixture(scope="module")
def client1():
    """One worker, a thread of this process: it starts at once, and its process has run other
    things first, unlike the two fresh worker processes of ``client2``."""
    with engine.connect(workers=1, processes=False) as client:
        yield client


def grid_sweep(tmp_path: Path, *, extra: str = "") -> str:
    """A sweep file: stages x (items, sink interval zipped), a point with an invalid value."""
    path = tmp_path / "chain.toml"
    path.write_text(
        'scenario = "link-chain"\n'
        "[set]\nseed = 3\n"
        "[grid]\nstages = [1, 3]\n"
        "[[zip]]\nitems = [50, 200, 400]\nsink_interval_cycles = [1, 2, 0]\n" + extra
    )
    return str(path)


def measured_dropped(table) -> Any:
    return table.drop_columns(list(grid.MEASURED))


# -- the sweep's points, without a cluster ---------------------------------------------------------
def test_values_of_an_axis():
    assert grid.parse_values("p=4,8,16") == ("p", [4, 8, 16])
    assert grid.parse_values("flavour=fwd,bwd") == ("flavour", ["fwd", "bwd"])
    assert grid.parse_values("x=1.5, true") == ("x", [1.5, True])
    assert grid.parse_values("pair=[1,2],[3,4]") == ("pair", [[1, 2], [3, 4]])
    with pytest.raises(ConfigError) as err:
        grid.parse_values("p")
    assert str(err.value) == (
        "config key 'p': an axis must look like KEY=V1,V2,...; e.g. --grid p=4,8,16"
    )


def test_crossed_and_zipped_axes_in_order(tmp_path):
    sw = grid.load(grid_sweep(tmp_path), grid=["pipe=false,true"])
    assert sw.keys == ["stages", "items", "sink_interval_cycles", "pipe"]
    combos = list(sw.combinations())
    assert len(combos) == 2 * 3 * 2
    assert combos[:3] == [
        {"stages": 1, "items": 50, "sink_interval_cycles": 1, "pipe": False},
        {"stages": 1, "items": 50, "sink_interval_cycles": 1, "pipe": True},
        {"stages": 1, "items": 200, "sink_interval_cycles": 2, "pipe": False},
    ]
    points = sw.points()
    assert [p.index for p in points] == list(range(12))
    assert all(p.params.seed == 3 for p in points if p.params is not None)
    bad = [p for p in points if p.params is None]  # sink_interval_cycles = 0
    assert len(bad) == 4 and bad[0].error.startswith(
        "config key 'sink_interval_cycles' = 0: out of range; allowed: 1 .. 10000"
    )
    # --set wins over the file's [set]; the hash follows the full configuration
    again = grid.load(grid_sweep(tmp_path), grid=["pipe=false,true"], overrides=["seed=4"])
    assert again.points()[0].params.seed == 4
    assert again.points()[0].config_hash != points[0].config_hash
    assert grid.load(grid_sweep(tmp_path)).points()[0].config_hash == points[0].config_hash


def test_a_key_the_scenario_lacks_is_an_error_of_the_sweep(tmp_path):
    with pytest.raises(ConfigError) as err:
        grid.load("link-chain", grid=["stagse=1,2"]).points()
    assert str(err.value) == (
        "config key 'stagse': unknown key; allowed: seed, stages, items, latency_cycles, "
        "capacity, items_per_cycle, pipe, sink_interval_cycles, clock_hz; did you mean 'stages'?"
    )
    with pytest.raises(ScenarioError) as err:
        grid.load("link-chain", zip_=["stages=1,2", "items=5"])
    assert str(err.value) == (
        "--zip: zipped lists must have the same length (stages has 2, items has 1)"
    )
    with pytest.raises(ScenarioError) as err:
        grid.load("link-chain", grid=["stages=1,2", "stages=3"])
    assert str(err.value) == "sweep key(s) stages on more than one axis; keep one"


# -- one point, in this process --------------------------------------------------------------------
class _Waiter(Component):
    """Waits for a flag nobody sets, one cycle at a time: a livelock (progress stays 0)."""

    def start(self) -> None:
        self.process(self._run(), "poll")

    def _run(self) -> Any:
        while True:
            yield self.env.timeout(self.domain.ticks(1))

    def progress_count(self) -> int:
        return 0


def _stall(sim: Simulation, p: Any) -> None:
    dom = sim.domain("clk", 1_000_000_000)
    top = Component(sim, "top", domain=dom)
    src = Src(top, "src", [1], [0], [])
    dst = Dst(top, "dst", 2, [0, 0], [])  # waits for a second item never sent
    sim.connect(src.out, dst.inp, latency_cycles=1, capacity=1)


def _livelock(sim: Simulation, p: Any) -> None:
    _Waiter(sim, "waiter", domain=sim.domain("clk", 1_000_000_000))


def _bug(sim: Simulation, p: Any) -> None:
    raise ZeroDivisionError("a bug in a workload")


@pytest.mark.parametrize(
    ("build", "status", "error_start"),
    [
        (_stall, "stalled", "scenario 'test' stalled at cycle "),
        (_livelock, "livelock", "scenario 'test' livelocked at cycle 39,999:"),
        (_bug, "failed", "Traceback (most recent call last):"),
    ],
)
def test_a_failing_point_is_an_outcome_not_an_exception(monkeypatch, build, status, error_start):
    kind = registry.WorkloadKind("test", "", registry.ScenarioParams, build, lambda *a: {})
    monkeypatch.setitem(registry.KINDS, "test", kind)
    out = engine.run_point(
        "test", registry.ScenarioParams(), scenario_name="test", livelock_cycles=1000
    )
    assert out["status"] == status and out["metrics"] == {}
    assert out["error"].startswith(error_start)
    if status == "failed":
        assert out["error"].endswith("ZeroDivisionError: a bug in a workload\n")
    assert out["wall_s"] > 0 and out["peak_rss_bytes"] > 10_000_000


def test_a_point_past_its_time_limit_times_out_and_keeps_its_trace(tmp_path):
    trace = tmp_path / "t.arrows"
    out = engine.run_point(
        "link-chain", LinkChainParams(items=100_000), scenario_name="link-chain",
        trace_path=str(trace), trace_level="summary", time_limit_s=0.01,
    )  # fmt: skip
    assert out["status"] == "timeout"
    assert out["error"] == "still running after the time limit of 0.01 s"
    assert out["trace"] == str(trace) and trace.exists()


def test_a_point_stuck_while_building_is_stopped_at_its_limit(monkeypatch):
    def build(sim, p):
        while True:  # pure Python, never reaching the run loop's time checks
            pass

    kind = registry.WorkloadKind("test", "", registry.ScenarioParams, build, lambda *a: {})
    monkeypatch.setitem(registry.KINDS, "test", kind)
    t0 = time.perf_counter()
    out = engine.run_point(
        "test", registry.ScenarioParams(), scenario_name="test", time_limit_s=0.05,
        backstop_grace_s=0.05,
    )  # fmt: skip
    assert (out["status"], out["error"]) == (
        "timeout", "still running after the time limit of 0.05 s"
    )  # fmt: skip
    assert 0.1 <= time.perf_counter() - t0 < 5
    # a point that ends before its limit leaves nothing armed behind it
    out = engine.run_point(
        "link-chain", LinkChainParams(items=10), scenario_name="link-chain",
        time_limit_s=0.2, backstop_grace_s=0.0,
    )  # fmt: skip
    assert out["status"] == "completed"
    time.sleep(0.3)


# -- on a cluster ----------------------------------------------------------------------------------
def test_a_sweep_on_two_workers(client2, tmp_path):
    sw = grid.load(grid_sweep(tmp_path))
    out = str(tmp_path / "t.parquet")
    outcome = engine.run_sweep(client2, sw, out, traces=str(tmp_path / "traces"))
    assert (outcome.points, outcome.ran, outcome.skipped, outcome.workers) == (6, 4, 0, 2)
    assert outcome.counts == {"completed": 4, "invalid": 2}
    assert not os.path.exists(out + ".journal.jsonl")
    table = pq.read_table(out)
    assert table.column_names[:5] == ["point", "stages", "items", "sink_interval_cycles", "status"]
    assert table.column_names[-6:] == [
        "wall_s", "peak_rss_bytes", "attempts", "config_hash", "config", "trace"
    ]  # fmt: skip
    rows = table.to_pylist()
    assert [r["status"] for r in rows] == ["completed", "completed", "invalid"] * 2
    for r, p in zip(rows, sw.points(), strict=True):
        assert (r["stages"], r["items"]) == (p.values["stages"], p.values["items"])
        assert r["config_hash"] == p.config_hash
        if r["status"] != "completed":
            assert r["error"].startswith("config key 'sink_interval_cycles' = 0: out of range")
            assert r["cycles"] is None and r["attempts"] == 0 and r["trace"] is None
            continue
        # the metrics are the simulation's, as a run in this process gives them
        serial = scenario.run_kind("link-chain", p.params)
        assert {k: r[k] for k in serial} == serial
        assert r["error"] is None and r["attempts"] == 1 and r["wall_s"] > 0
        assert json.loads(r["config"])["items"] == r["items"]
        assert os.path.exists(r["trace"])
        assert r["trace"].endswith(f"-{r['config_hash'][:12]}.arrows")
    # the table's own record of its metrics: resume reads results back from it exactly
    again = engine.run_sweep(client2, sw, out)
    assert (again.ran, again.skipped) == (0, 6)
    assert measured_dropped(pq.read_table(out)).equals(measured_dropped(table))


def test_the_same_table_with_one_and_two_workers(client1, client2, tmp_path):
    sw = grid.load("link-chain", grid=["stages=1,2,4", "items=30,300"], overrides=["seed=1"])
    tables = []
    for client, name in ((client1, "one"), (client2, "two")):
        out = str(tmp_path / f"{name}.parquet")
        engine.run_sweep(client, sw, out)
        tables.append(pq.read_table(out))
    one, two = tables
    assert one.num_rows == 6 and set(one.column("status").to_pylist()) == {"completed"}
    assert measured_dropped(one).equals(measured_dropped(two))
    assert one.schema.metadata == two.schema.metadata


def test_failed_points_are_recorded_retried_and_the_sweep_goes_on(client2, tmp_path):
    # (the limit is wall time: 1 s keeps the 20- and 30-item points, a few milliseconds each,
    # well inside it on a loaded host, where 0.01 s once timed them out; the middle point
    # takes tens of seconds)
    sw = grid.load("link-chain", grid=["items=20,1000000,30"])
    out = str(tmp_path / "t.parquet")
    outcome = engine.run_sweep(client2, sw, out, time_limit_s=1.0, retries=1)
    assert outcome.counts == {"completed": 2, "timeout": 1}
    rows = pq.read_table(out).to_pylist()
    assert [(r["status"], r["attempts"]) for r in rows] == [
        ("completed", 1), ("timeout", 2), ("completed", 1),
    ]  # fmt: skip
    assert rows[1]["error"] == "still running after the time limit of 1 s"
    assert rows[1]["received_items"] is None and rows[0]["received_items"] == 20
    # a timeout is not final: a resume runs that point again
    outcome = engine.run_sweep(client2, sw, out, time_limit_s=1.0)
    assert (outcome.ran, outcome.skipped) == (1, 2)


def test_the_same_configuration_twice_runs_once(client1, tmp_path):
    sw = grid.load("link-chain", grid=["items=5,5,6"], overrides=["seed=0"])
    outcome = engine.run_sweep(client1, sw, str(tmp_path / "d.parquet"))
    assert (outcome.points, outcome.ran) == (3, 2)
    rows = pq.read_table(str(tmp_path / "d.parquet")).to_pylist()
    assert [r["point"] for r in rows] == [0, 1, 2]
    assert {k: v for k, v in rows[0].items() if k != "point"} == {
        k: v for k, v in rows[1].items() if k != "point"
    }


def test_a_point_that_kills_its_worker_is_found_and_recorded(client1, tmp_path, monkeypatch):
    """A task that ends in an error (as when its worker dies: KilledWorker) is a crash. Tiny
    points travel several to a task; the points of a crashed task run again one per task, so
    that only the culprit is recorded as crashed."""
    real = engine.run_chunk

    def dies_at_13(kind, items, **options):
        if any(params.items == 13 for params, _ in items):
            raise RuntimeError("the worker died")
        return real(kind, items, **options)

    monkeypatch.setattr(engine, "run_chunk", dies_at_13)
    sw = grid.load("link-chain", grid=["items=" + ",".join(map(str, range(1, 31)))])
    out = str(tmp_path / "c.parquet")
    outcome = engine.run_sweep(client1, sw, out, retries=1)
    assert outcome.counts == {"completed": 29, "crashed": 1}
    rows = pq.read_table(out).to_pylist()
    assert [
        (r["items"], r["error"], r["attempts"]) for r in rows if r["status"] != "completed"
    ] == [(13, "RuntimeError: the worker died", 2)]


def test_resume_after_the_sweep_is_killed(client2, tmp_path):
    """A ``wafersim sweep`` process is killed (SIGKILL) part-way: a second run reuses the
    journal's points and ends with the table a sweep without a kill gives."""
    # points of a quarter of a second or more run one per task: results arrive one by one
    axes = ["stages=1,2", "items=8000,8001"]
    out = tmp_path / "k.parquet"
    journal = Path(str(out) + ".journal.jsonl")
    cmd = [sys.executable, "-m", "app.cli", "sweep", "link-chain", "--quiet",
           "--scheduler", client2.scheduler.address, "-o", str(out)]  # fmt: skip
    for g in axes:
        cmd += ["--grid", g]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_text().count("\n") >= 1:
            break
        time.sleep(0.01)
    assert proc.poll() is None, proc.stderr.read().decode()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not out.exists()
    kept = len(Journal(str(out)).read())
    assert 1 <= kept < 4
    sw = grid.load("link-chain", grid=axes)
    outcome = engine.run_sweep(client2, sw, str(out))
    assert (outcome.points, outcome.ran, outcome.skipped) == (4, 4 - kept, kept)
    fresh = tmp_path / "fresh.parquet"
    engine.run_sweep(client2, sw, str(fresh))
    assert measured_dropped(pq.read_table(out)).equals(measured_dropped(pq.read_table(fresh)))


def test_validate_with_workers_gives_the_serial_rows(client2):
    (case,) = registry.find_cases(["wse-bcast"])
    assert case.run(engine.DaskRunner(client2)) == case.run(scenario.run_points)


def test_a_validation_point_that_fails_raises_its_error_in_the_client(client1, monkeypatch):
    def build(sim, p):
        raise BuildError("the wafer is too small for this program")

    kind = registry.WorkloadKind("test", "", registry.ScenarioParams, build, lambda *a: {})
    monkeypatch.setitem(registry.KINDS, "test", kind)  # client1's worker is a thread of ours
    with pytest.raises(WafersimError) as err:
        engine.DaskRunner(client1)("test", [registry.ScenarioParams(seed=s) for s in range(3)])
    assert str(err.value) == "the wafer is too small for this program"


# -- the command line ------------------------------------------------------------------------------
def test_sweep_and_plot_sweep_commands(client2, tmp_path, capsys):
    out = str(tmp_path / "s.parquet")
    argv = ["sweep", "link-chain", "--grid", "stages=1,2", "--grid", "items=10,20,40",
            "--scheduler", client2.scheduler.address, "-o", out, "--quiet", "--json"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["points"], summary["ran"], summary["counts"]) == (6, 6, {"completed": 6})
    png = str(tmp_path / "p.png")
    plot = ["plot", "sweep", out, "--x", "items", "--y", "cycles", "--hue", "stages", "-o", png]
    assert main([*plot, "--logx", "--logy"]) == 0
    assert capsys.readouterr().out == f"wrote {png}\n" and os.path.getsize(png) > 10_000
    assert main(["plot", "sweep", out, "--x", "item", "--y", "cycles", "-o", png]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"wafersim: error: --x item: no such column in '{out}'; did you mean 'items'? columns: "
    )


def test_cluster_options_are_checked(capsys):
    with pytest.raises(SystemExit) as exc:  # a checked type (app/argtypes.py)
        main(["sweep", "link-chain", "--workers", "0", "--quiet"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.endswith(
        "wafersim sweep: error: argument --workers: 0 is too small; give a number >= 1\n"
    )
    assert main(["validate", "link-chain", "--workers", "2", "--scheduler", "tcp://x:1"]) == 2
    assert capsys.readouterr().err == (
        "wafersim: error: --workers and --scheduler exclude each other: --workers sizes a local "
        "cluster, a running cluster at --scheduler has the workers it has\n"
    )


def test_a_sweep_table_that_is_not_one_is_a_clear_error(tmp_path):
    with pytest.raises(WafersimError) as err:
        tables.read_table(str(tmp_path / "none.parquet"))
    assert str(err.value) == (
        f"sweep table '{tmp_path / 'none.parquet'}' does not exist (write one with wafersim sweep)"
    )


# -- docs/sweeps.md ------------------------------------------------------------------------------
DOC = ROOT / "docs" / "sweeps.md"


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_docs_sweep_file_is_a_sweep(tmp_path):
    (text,) = doc_blocks("toml")
    path = tmp_path / "grid.toml"
    path.write_text(text)
    sw = grid.load(str(path))
    assert sw.output == "out/summa-grid.parquet" and sw.fixed == (("wafer.fidelity", "fast"),)
    assert sw.keys == ["p", "mt", "seed", "wafer.fabric.hop_latency_cycles", "wafer.clock_hz"]
    points = sw.points()
    assert len(points) == 3 * 3 * 2 and all(p.params is not None for p in points)
    assert (points[-1].params.p, points[-1].params.mt, points[-1].params.seed) == (16, 4, 3)
    assert points[-1].params.wafer.clock_hz == 1_100_000_000


def test_the_docs_reading_examples_run(client1, tmp_path, monkeypatch, capsys):
    blocks = doc_blocks("python")
    text = "\n".join(blocks)
    assert "import duckdb" in text and "import polars" in text and "pyarrow.parquet" in text
    monkeypatch.chdir(tmp_path)
    sw = grid.load("summa", grid=["p=2,4", "mt=1,4,64"])
    engine.run_sweep(client1, sw, "out/sweep.parquet")
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC}:python block {i}", "exec"), {})
        assert capsys.readouterr().out.strip()


# -- resource guards and outputs (issue 27) --------------------------------------------------------
def test_workers_are_bounded_by_cores_and_memory(monkeypatch):
    monkeypatch.setattr(engine, "default_workers", lambda: 8)
    gb = 1_000_000_000
    assert engine.workers_allowed(0, available=100 * gb)[0] == 8  # cores
    # 0.9 x 2 GB over 200 MB + 400 MB per worker: 3
    assert engine.workers_allowed(400_000_000, available=2 * gb)[0] == 3
    assert engine.check_workers(None, 400_000_000, available=2 * gb) == 3
    assert engine.check_workers(2, 400_000_000, available=2 * gb) == 2
    with pytest.raises(WafersimError) as err:
        engine.check_workers(1000, 400_000_000, available=2 * gb)
    assert str(err.value) == (
        "--workers 1000 is more than this machine can run at once (8 cores, 2.0 GB of memory "
        "available at about 0.6 GB per worker): the largest allowed is 3; give --workers 3 or "
        "fewer, or run on a cluster with --scheduler"
    )
    assert engine.workers_allowed(100 * gb, available=2 * gb)[0] == 1  # never below one


def test_too_many_workers_are_refused_before_a_cluster_starts(capsys, tmp_path):
    out = str(tmp_path / "c.parquet")
    assert main(["sweep", "summa", "--grid", "p=4,8", "--workers", "1000", "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wafersim: error: --workers 1000 is more than this machine can run")
    assert not os.path.exists(out)
    with pytest.raises(WafersimError, match="--workers 1000 is more than"), engine.connect(1000):
        pass


def _sweep(capsys, tmp_path, *args):
    out = str(tmp_path / "c.parquet")
    argv = ["sweep", "link-chain", "--quiet", "--workers", "1", "-o", out, *args]
    code = main(argv)
    return code, capsys.readouterr().err


def test_an_existing_table_needs_resume_or_overwrite(capsys, tmp_path):
    out = tmp_path / "c.parquet"
    assert _sweep(capsys, tmp_path, "--grid", "items=10,20,40")[0] == 0
    rows = pq.read_table(out).num_rows
    code, err = _sweep(capsys, tmp_path, "--grid", "items=10,20")
    assert code == 2 and err == (
        f"wafersim: error: sweep table '{out}' exists (from an earlier sweep): give --resume to "
        "continue that sweep (the same grid: its results are kept, the rest run), --overwrite to "
        "replace it, or another -o\n"
    )
    code, err = _sweep(capsys, tmp_path, "--grid", "items=10,20", "--resume")
    assert code == 2 and err == (
        f"wafersim: error: sweep table '{out}' holds 1 result(s) of points not in this sweep "
        "(another grid, other --set values or another wafersim version); --resume continues the "
        "same sweep only: give --overwrite to replace it, or another -o\n"
    )
    assert pq.read_table(out).num_rows == rows == 3  # nothing lost
    code, err = _sweep(capsys, tmp_path, "--grid", "items=10,20", "--resume", "--overwrite")
    assert code == 2 and "--resume and --overwrite exclude each other" in err
    assert _sweep(capsys, tmp_path, "--grid", "items=10,20,40,80", "--resume")[0] == 0
    assert pq.read_table(out).num_rows == 4
    assert _sweep(capsys, tmp_path, "--grid", "items=10", "--overwrite")[0] == 0
    assert pq.read_table(out).num_rows == 1
    (tmp_path / "c.parquet").write_text("not a table")
    code, err = _sweep(capsys, tmp_path, "--grid", "items=10", "--resume")
    assert code == 2 and err == (
        f"wafersim: error: '{out}' is not a wafersim sweep table, so --resume cannot continue "
        "it: give --overwrite to replace it, or another -o\n"
    )


@pytest.mark.parametrize(
    ("traces", "message"),
    [
        ("{out}", "--traces '{out}' is also the table (-o): give --traces a folder of its own"),
        ("/dev/full", "--traces '/dev/full' exists and is not a directory; give a folder (made "
         "if missing)"),
        ("{tmp}/file", "--traces '{tmp}/file' exists and is not a directory; give a folder "
         "(made if missing)"),
    ],
)  # fmt: skip
def test_every_output_of_a_sweep_is_checked_before_it_runs(capsys, tmp_path, traces, message):
    out = str(tmp_path / "c.parquet")
    (tmp_path / "file").write_text("keep")
    fmt = {"out": out, "tmp": str(tmp_path)}
    code, err = _sweep(capsys, tmp_path, "--grid", "items=10", "--traces", traces.format(**fmt))
    assert code == 2 and err == f"wafersim: error: {message.format(**fmt)}\n"
    assert not os.path.exists(out) and (tmp_path / "file").read_text() == "keep"


def test_a_sweep_never_writes_over_its_inputs(capsys, tmp_path):
    mtx = tmp_path / "m.parquet"  # a matrix under a table's name
    mtx.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\n2 2 2.0\n")
    argv = ["sweep", "spmv", "--quiet", "--set", f"matrix={mtx}", "--set", "iterations=1",
            "--set", "py=1", "--grid", "px=1,2"]  # fmt: skip
    assert main([*argv, "--traces", str(mtx), "-o", str(tmp_path / "o.parquet")]) == 2
    assert capsys.readouterr().err == (
        f"wafersim: error: --traces '{mtx}' is also the input of matrix (point 0): give "
        "--traces a folder of its own\n"
    )
    os.link(mtx, tmp_path / "hard.parquet")
    assert main([*argv, "-o", str(tmp_path / "hard.parquet")]) == 2
    assert capsys.readouterr().err == (
        f"wafersim: error: the table (-o) '{tmp_path / 'hard.parquet'}' is the input of matrix "
        f"(point 0) '{mtx}': writing it would destroy the input; give the table (-o) another "
        "path\n"
    )
    assert mtx.read_text().startswith("%%MatrixMarket")


@pytest.mark.parametrize("text", ["items=4,,8", "items=4,8,", "items=,4"])
def test_an_empty_value_in_an_axis_is_refused(text):
    with pytest.raises(ConfigError) as err:
        grid.parse_values(text)
    assert str(err.value) == (
        f"config key 'items' = '{text[6:]}': an empty value in the list (two commas in a row, or "
        "one at an end); e.g. --grid items=4,8,16"
    )


def test_set_of_a_swept_key_is_refused():
    with pytest.raises(ScenarioError) as err:
        grid.load("link-chain", grid=["items=4,8"], overrides=["items=2"])
    assert str(err.value) == (
        "--set items=2: key 'items' is also swept (an axis of the sweep); keep one: the axis "
        "sets it at every point"
    )


def test_a_non_decimal_literal_in_an_axis_is_kept_as_typed():
    assert grid.parse_values("items=0x10,32") == ("items", ["0x10", 32])
