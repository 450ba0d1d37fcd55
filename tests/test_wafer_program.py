"""``wafer-program``: a user's kernel file run from the CLI (docs/workloads-from-outside.md).

The examples (examples/wafer/) run and match numpy; a file's parameters are listed and checked;
mistakes in a file (syntax, a missing function, a bad parameter, an exception in PE code) are
user errors (exit status 2) naming the file and the line; a run writes a trace; validate runs
the file's declared points; parameters pickle (sweeps send them to other processes).
"""

from __future__ import annotations

import json
import pickle
import textwrap
from pathlib import Path

import pytest

from app.cli import main
from simcore import config as cfg
from workloads.wafer import program

ROOT = Path(__file__).resolve().parent.parent
GEMV = str(ROOT / "examples" / "wafer" / "gemv.py")
STENCIL = str(ROOT / "examples" / "wafer" / "stencil.py")


def run_json(capsys, *argv):
    code = main(["run", "wafer-program", "--json", "--quiet", *argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def fails(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "argv",
    [
        (),  # the bundled demo
        ("--set", f"program={GEMV}", "--set", "m=24", "--set", "n=48", "--set", "pes=3"),
        ("--set", f"program={STENCIL}"),
        ("--set", f"program={STENCIL}", "--set", "px=3", "--set", "py=2", "--set", "steps=3"),
        ("--set", f"program={STENCIL}", "--set", "px=1", "--set", "py=1"),
    ],
)
def test_examples_run_and_match_numpy(capsys, argv):
    m = run_json(capsys, *argv)
    assert m["status"] == "completed"
    assert m["correct"] is True
    assert m["cycles"] > 0 and m["time_s"] == pytest.approx(m["cycles"] / 850e6)


def test_the_gemv_model_is_reported_beside_the_run(capsys):
    m = run_json(capsys, "--set", f"program={GEMV}")
    assert m["model_cycles"] == 16 * (2 * 32 + 10) + 1.6 * 32 + 250
    assert m["model_error_pct"] == pytest.approx(
        100 * (m["cycles"] - m["model_cycles"]) / m["model_cycles"]
    )


def test_params_lists_the_files_own_parameters(capsys):
    assert main(["params", "wafer-program", "--set", f"program={GEMV}", "--set", "m=8",
                 "--json"]) == 0  # fmt: skip
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["m"]["value"] == 8 and rows["m"]["source"] == "--set"
    assert rows["m"]["allowed"] == "1 .. 2048"
    assert rows["m"]["description"] == "rows of A and elements of y"
    assert rows["pes"]["value"] == 4 and rows["pes"]["source"] == "default"


def test_a_files_parameter_is_checked_like_any_other(capsys):
    err = fails(capsys, "run", "wafer-program", "--set", f"program={GEMV}", "--set", "m=0")
    assert "config key 'm' = 0: out of range; allowed: 1 .. 2048" in err
    err = fails(capsys, "run", "wafer-program", "--set", f"program={GEMV}", "--set", "q=1")
    assert "config key 'q'" in err and "unknown key" in err


def test_a_run_writes_a_trace_and_a_perfetto_file(capsys, tmp_path):
    trace, pf = tmp_path / "t.arrows", tmp_path / "t.pftrace"
    run_json(capsys, "--set", f"program={STENCIL}", "--trace", str(trace),
             "--perfetto", str(pf))  # fmt: skip
    assert trace.stat().st_size > 0 and pf.stat().st_size > 0
    assert main(["trace", "summary", str(trace), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["kind"] == "wafer-program" and summary["status"] == "completed"
    assert summary["busy"]  # the PEs' task slices are in it


def test_validate_runs_the_files_declared_points(capsys):
    assert main(["validate", "wafer-program", "--set", f"program={GEMV}", "--quiet",
                 "--json"]) == 0  # fmt: skip
    (case,) = json.loads(capsys.readouterr().out)
    assert case["case"] == "wafer-program" and case["passed"]
    assert case["rows"][0]["point"] == "m=16, n=32, pes=2"


def test_parameters_pickle_by_file_and_values():
    p = cfg.load(program.ProgramParams, {"program": GEMV, "m": 8})
    q = pickle.loads(pickle.dumps(p))
    assert q == p and q.m == 8 and type(q) is type(p)


def write(tmp_path, name, text, *more):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text) + "".join(line + "\n" for line in more))
    return str(path)


LAYOUT = """
    from pe.program import Layout
    from workloads.wafer.program import Param

    def layout(p, data):
        def code(pe):
            @pe.local_task(id=10)
            def main(t):
                t.mark("start")
                {body}
                t.mark("end")
            pe.start(main)
        lay = Layout(1, 1)
        lay.set_rectangle_code(code)
        return lay
"""


def test_a_syntax_error_names_file_and_line(capsys, tmp_path):
    path = write(tmp_path, "k.py", "x = 1\nPARAMS = {\n  'n': 3 +\n}\n")
    err = fails(capsys, "run", "wafer-program", "--set", f"program={path}")
    assert f"{path}:4: syntax error" in err or f"{path}:3: syntax error" in err


def test_a_missing_layout_is_named(capsys, tmp_path):
    path = write(tmp_path, "k.py", "PARAMS = {}\n")
    err = fails(capsys, "run", "wafer-program", "--set", f"program={path}")
    assert f"{path}: defines no function layout(p, data)" in err


def test_a_bad_declared_parameter_is_named(capsys, tmp_path):
    path = write(
        tmp_path, "k.py", LAYOUT.format(body="pass"), "PARAMS = {'n': Param(0, 'n', min=1)}"
    )
    err = fails(capsys, "params", "wafer-program", "--set", f"program={path}")
    assert f"{path}: PARAMS['n']: default 0 is outside min..max (1 .. None)" in err
    path = write(tmp_path, "k2.py", LAYOUT.format(body="pass"), "PARAMS = {'seed': Param(0, 's')}")
    err = fails(capsys, "run", "wafer-program", "--set", f"program={path}")
    assert "PARAMS['seed']: 'seed' is the kind's own" in err


def test_an_exception_in_pe_code_names_file_and_line(capsys, tmp_path):
    path = write(tmp_path, "k.py", LAYOUT.format(body="1 / 0"))
    err = fails(capsys, "run", "wafer-program", "--set", f"program={path}")
    assert f"{path}:10: task 'main' on PE (0,0) raised ZeroDivisionError: division by zero" in err


def test_an_exception_at_import_names_file_and_line(capsys, tmp_path):
    path = write(tmp_path, "k.py", "import numpy\nx = numpy.zeros(2)[5]\n")
    err = fails(capsys, "run", "wafer-program", "--set", f"program={path}")
    assert f"{path}:2: loading the kernel file raised IndexError" in err


def test_a_wafer_error_in_the_build_names_the_line(capsys, tmp_path):
    big = LAYOUT.replace("pe.start(main)", "pe.zeros('big', 100_000)")  # more than the SRAM
    path = write(tmp_path, "k.py", big.format(body="pass"))
    err = fails(capsys, "run", "wafer-program", "--set", f"program={path}")
    assert f"{path}:12: the PE code of PE (0,0): " in err and "SRAM overflow" in err


def test_a_missing_file_is_a_config_error(capsys, tmp_path):
    err = fails(capsys, "run", "wafer-program", "--set", f"program={tmp_path}/none.py")
    assert "config key 'program'" in err and "no such file" in err and "Python kernel file" in err
