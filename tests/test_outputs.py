"""No command loses data: one test per class of defect, each over every output of the CLI.

- An output equal to one of the command's inputs, or to another of its outputs, is refused
  before anything runs (the input is untouched).
- Every output is written whole or not at all: a write that fails part-way (here a real
  ``EFBIG`` from a file-size limit, as a full disk would give ``ENOSPC``) leaves the file the
  user named exactly as it was, no temporary file, and a one-line error (exit 2).
- A full standard output is an error message, not a traceback.
- ``kill`` ends a run as Ctrl-C does: the trace is complete and in place.

The table :data:`OUTPUTS` names every output option of the parser; a new one fails
:func:`test_every_output_option_is_covered` until it is added here.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from app import cli
from traces.reader import read_trace
from traces.writer import TraceWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTINEL = b"precious bytes the user had before\n"

#: (command words, output option) for every option of the CLI that names a file it writes.
OUTPUTS = {
    (("run",), "--trace"),
    (("run",), "--perfetto"),
    (("trace", "export"), "--output"),
    (("plot", "mesh"), "--output"),
    (("plot", "timeline"), "--output"),
    (("plot", "links"), "--output"),
    (("plot", "heatmap"), "--output"),
    (("plot", "roofline"), "--output"),
    (("plot", "banks"), "--output"),
    (("plot", "validate"), "--output"),
    (("plot", "sweep"), "--output"),
    (("plot", "jitq-breakdown"), "--output"),
    (("sweep",), "--output"),
}
#: Outputs the two tests below do not drive, and why they are safe: both write through
#: runner/outputs.py (plot sweep in cmd_plot beside the other plots; the sweep table in
#: sweep.write_table), and need a Dask cluster to produce their input; plot jitq-breakdown
#: writes in cmd_plot beside the other plots too, and runs eight jitq simulations.
COVERED_BY_THE_SAME_PATH = {
    (("plot", "sweep"), "--output"),
    (("plot", "jitq-breakdown"), "--output"),
    (("sweep",), "--output"),
}
#: Option names (dests) that are files a command writes.
OUTPUT_DESTS = {"trace", "perfetto", "output"}


def _walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*words, name))
        elif action.dest in OUTPUT_DESTS:
            yield words, action.option_strings[-1]


def test_every_output_option_is_covered():
    assert set(_walk(cli._parser())) == OUTPUTS


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("outputs") / "t.arrows")
    assert cli.main(["run", "wse-bcast", "--quiet", "--json", "--trace", path,
                     "--trace-level", "detail"]) == 0  # fmt: skip
    return path


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _collisions(trace: str, tmp) -> list[list[str]]:
    """For each output option, argv that aims it at an input or at another output."""
    scen = tmp / "mine.toml"
    scen.write_text('kind = "wse-fmac"\nelements = 8\n')
    link = str(tmp / "link.arrows")
    os.link(trace, link)  # the same file under another name
    png = str(tmp / "trace.png")  # a trace named like a plot
    os.link(trace, png)
    table = str(tmp / "mine.parquet")  # the scenario named like a sweep table
    os.link(scen, table)
    return [
        ["run", "wse-fmac", "--trace", trace, "--perfetto", trace],
        ["run", "wse-fmac", "--perfetto", trace],  # the Arrow trace defaults to next to it
        ["run", str(scen), "--trace", str(scen)],
        ["run", str(scen), "--perfetto", str(scen).replace(".toml", ".pftrace"),
         "--trace", str(scen)],
        ["trace", "export", trace, "--to", "json", "-o", trace],
        ["trace", "export", trace, "--to", "perfetto", "-o", link],
        ["plot", "mesh", png, "-o", png],
        ["plot", "timeline", trace, "-o", png],
        ["plot", "links", png, "-o", png],
        ["plot", "heatmap", png, "-o", png],
        ["plot", "roofline", trace, "-o", png],
        ["plot", "banks", png, "-o", png],
        ["plot", "sweep", png, "--x", "a", "--y", "b", "-o", png],
        ["sweep", str(scen), "--grid", "elements=4,8", "-o", table],
    ]  # fmt: skip


def test_no_output_may_be_an_input_or_another_output(capsys, trace, tmp_path):
    argvs = _collisions(trace, tmp_path)  # plot validate reads no file: nothing to collide
    before = {p: _read(p) for p in (trace, str(tmp_path / "mine.toml"))}
    for argv in argvs:
        code = cli.main(argv)
        _, err = capsys.readouterr()
        assert code == 2, argv
        assert err.startswith("wafersim: error: ") and err.count("\n") == 1, err
        assert "give" in err and "another path" in err, err
        for path, data in before.items():
            assert _read(path) == data, f"{argv} changed {path}"


_DRIVER = """
import json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (MAXBYTES, MAXBYTES))
from app.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    results.append(code)
    print("\\n@@", code, file=sys.stderr, flush=True)
print(json.dumps(results))
"""


def test_a_failed_write_leaves_the_named_file_as_it_was(trace, tmp_path):
    """Each output fails part-way (a real EFBIG: file-size limit below its size)."""
    out = tmp_path / "out"
    out.mkdir()
    targets = {
        "trace": out / "run.arrows",
        "perfetto": out / "run.pftrace",
        "export": out / "e.pftrace",
        "json": out / "e.json",
        "mesh": out / "mesh.png",
        "timeline": out / "timeline.png",
        "links": out / "links.png",
        "heatmap": out / "heatmap.png",
        "roofline": out / "roofline.png",
        "banks": out / "banks.png",
        "validate": out / "validate.png",
        "sweep": out / "s.parquet",
        "plot sweep": out / "sweep.png",
    }
    for path in targets.values():
        path.write_bytes(SENTINEL)
    table = tmp_path / "table.parquet"  # a sweep table to plot, written before the limit
    assert cli.main(["sweep", "link-chain", "--grid", "items=10,20,40", "--workers", "1",
                     "--quiet", "-o", str(table)]) == 0  # fmt: skip
    # traces the roofline and the bank states can draw, written before the limit
    kernel, dram = str(tmp_path / "summa.arrows"), str(tmp_path / "jitq.arrows")
    for argv in (
        ["run", "summa", "--set", "p=2", "--set", "mt=4", "--trace", kernel],
        ["run", "jitq", "--set", "rows=16", "--set", "cols=64", "--trace", dram],
    ):
        assert cli.main([*argv, "--quiet", "--trace-level", "detail"]) == 0
    # The --perfetto case writes its trace fine (ops level, small) and fails on the export.
    small = str(tmp_path / "small.arrows")
    argvs = [
        ["run", "wse-bcast", "--quiet", "--trace", str(targets["trace"]),
         "--trace-level", "detail"],
        ["run", "wse-bcast", "--quiet", "--trace", small, "--trace-level", "summary",
         "--perfetto", str(targets["perfetto"])],
        ["trace", "export", trace, "--to", "perfetto", "-o", str(targets["export"])],
        ["trace", "export", trace, "--to", "json", "-o", str(targets["json"])],
        ["plot", "mesh", trace, "-o", str(targets["mesh"])],
        ["plot", "timeline", trace, "-o", str(targets["timeline"])],
        ["plot", "links", trace, "-o", str(targets["links"])],
        ["plot", "heatmap", trace, "-o", str(targets["heatmap"])],
        ["plot", "roofline", kernel, "-o", str(targets["roofline"])],
        ["plot", "banks", dram, "-o", str(targets["banks"])],
        ["plot", "validate", "wse-fmac", "-o", str(targets["validate"])],
        ["sweep", "link-chain", "--grid", "items=10,20", "--workers", "1", "--quiet", "--overwrite",
         "-o", str(targets["sweep"])],
        ["plot", "sweep", str(table), "--x", "items", "--y", "cycles",
         "-o", str(targets["plot sweep"])],
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER.replace("MAXBYTES", "3000"), json.dumps(argvs)],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    messages = proc.stderr.split("\n@@")
    for argv, code, msg in zip(argvs, codes, messages, strict=False):
        assert code == 2, (argv, msg)
        assert "Traceback" not in msg and "File too large" in msg, (argv, msg)
    for name, path in targets.items():
        assert path.read_bytes() == SENTINEL, f"{name}: the named file was changed"
    left = [f for f in os.listdir(out) if ".partial-" in f]
    assert not left, f"temporary files left behind: {left}"


def test_a_full_standard_output_is_a_message(monkeypatch, capsys):
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        code = cli.main(["run", "wse-fmac", "--quiet", "--json"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == "wafersim: error: cannot write standard output: No space left on device\n"


def test_a_full_disk_during_a_run_removes_its_trace(tmp_path, capsys):
    """ENOSPC itself, from a real device: the trace's error replaces the run's, nothing left."""
    code = cli.main(["run", "wse-bcast", "--quiet", "--trace", "/dev/full"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == (
        "wafersim: error: cannot write trace '/dev/full': No space left on device; free some "
        "space or write elsewhere\n"
    )


def test_a_device_output_is_written_not_replaced(capsys):
    assert cli.main(["run", "wse-fmac", "--quiet", "--json", "--trace", "/dev/null"]) == 0
    assert not os.path.isfile("/dev/null")


def test_kill_ends_a_run_like_ctrl_c(tmp_path):
    path = tmp_path / "t.arrows"
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", "link-chain", "--set", "items=10000000",
         "--trace", str(path), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(".partial-" in f for f in os.listdir(tmp_path)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"trace so far kept in {path}" in err
    assert read_trace(path).status == "interrupted"
    assert os.listdir(tmp_path) == ["t.arrows"]


def test_a_cut_off_trace_exports_what_is_readable(tmp_path, capsys):
    path = tmp_path / "cut.arrows"
    with TraceWriter(path, level=2, header={"scenario": "x", "tick_hz": 1000}, batch_rows=10) as w:
        for i in range(100):
            w.emit(i, 1, i, 1, "d", "a/b", "task", "t")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # the last batch is cut
    code = cli.main(["trace", "export", str(path), "--to", "json", "-o", str(tmp_path / "o.json")])
    out, err = capsys.readouterr()
    assert code == 0
    assert err.startswith(f"wafersim: warning: trace '{path}' is truncated after 9 complete")
    assert "90 events ->" in out
    assert len(json.loads((tmp_path / "o.json").read_text())) > 90
    with TraceWriter(path, level=2, header={"scenario": "x", "tick_hz": 1000}) as w:
        for i in range(100):
            w.emit(i, 1, i, 1, "d", "a/b", "task", "t")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # its one batch is cut: nothing readable
    code = cli.main(["trace", "export", str(path), "--to", "json", "-o", str(tmp_path / "p.json")])
    _, err = capsys.readouterr()
    assert code == 2 and err.rstrip().endswith("nothing readable to export")
    assert not (tmp_path / "p.json").exists()


GPT_PE = ["--set", "model=custom", "--set", "layers=2", "--set", "hidden=16", "--set",
          "sequence=8", "--set", "vocab=32", "--set", "heads=2", "--set", "batch=1", "--set",
          "systems=2", "--set", "steps=1", "--set", "fidelity=pe"]  # fmt: skip


def interrupt_pe_level_run(tmp_path, sig: int, after_s: float) -> None:
    """Signal ``sig`` to a gpt-ws run at fidelity pe (nested PE-level sub-runs) ``after_s``
    seconds after its trace opened: exit 130, the trace so far kept and readable."""
    path = tmp_path / "g.arrows"
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", "gpt-ws", *GPT_PE, "--trace", str(path),
         "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path),
        # a shell running the tests in the background ignores SIGINT, and its children inherit
        # that: give the run Ctrl-C back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not any(".partial-" in f for f in os.listdir(tmp_path)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(after_s)
    assert proc.poll() is None, "the run ended before the signal: wait less"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err == f"wafersim: interrupted; trace so far kept in {path}\n"
    assert read_trace(path).status == "interrupted"
    assert os.listdir(tmp_path) == ["g.arrows"]


def test_ctrl_c_during_a_pe_level_run(tmp_path):
    interrupt_pe_level_run(tmp_path, signal.SIGINT, 2.0)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("after_s", [0.2, 1.0, 5.0])
def test_signals_during_a_pe_level_run(tmp_path, sig, after_s):
    interrupt_pe_level_run(tmp_path, sig, after_s)
