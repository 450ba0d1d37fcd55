"""The command line: every command, and every error path with its exact message and exit code."""

from __future__ import annotations

import dataclasses
import json

import pytest

from app.cli import main
from runner import registry, scenario


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    assert any(line.startswith("link-chain ") for line in out.splitlines())
    assert "[link-chain]" in out


def test_params(capsys):
    code, out, _ = run(capsys, "params", "link-chain")
    assert code == 0
    assert "stages" in out and "number of channels in the chain" in out


def test_run_json(capsys, tmp_path):
    code, out, _ = run(capsys, "run", "link-chain", "--set", "items=100", "--json", "--quiet")
    assert code == 0
    data = json.loads(out)
    assert data["status"] == "completed"
    assert data["cycles"] == 100 + 4 * 2
    assert data["correct"] is True
    assert data["seed"] == 1


def test_run_human_with_trace_and_summary(capsys, tmp_path):
    path = str(tmp_path / "t.arrows")
    code, out, _ = run(capsys, "run", "link-chain", "--trace", path, "--trace-level", "detail")
    assert code == 0
    assert "cycles" in out and f"trace {path} (level detail)" in out
    code, out, _ = run(capsys, "trace", "summary", path)
    assert code == 0
    assert "status: completed" in out
    code, out, _ = run(capsys, "trace", "summary", path, "--json")
    assert json.loads(out)["categories"]["wavelet"] == 2000


def test_model(capsys):
    code, out, _ = run(capsys, "model", "link-chain", "--set", "items=100", "--json")
    assert code == 0
    assert json.loads(out)["cycles"] == 108


def test_validate_json(capsys):
    code, out, _ = run(capsys, "validate", "link-chain", "--json")
    assert code == 0
    [case] = json.loads(out)
    assert case["passed"] and case["max_error_pct"] < 1.0 and case["criterion"] == "max_pct"
    assert {r["unit"] for r in case["rows"]} == {"cycles"}


def test_validate_names_the_unit_in_its_header(capsys):
    code, out, _ = run(capsys, "validate", "link-chain")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("case "))
    assert header.split()[2:] == [
        "simulated", "(cycles)", "model", "(cycles)", "reference", "(cycles)", "error", "%"
    ]  # fmt: skip


def test_validate_names_each_rows_unit_when_they_differ(capsys):
    from app.cli import _print_case

    case = registry.ValidationCase(name="mixed", summary="", run=lambda r: [], tolerance=5.0)
    rows = [
        registry.ValidationRow("mixed", "a step", 2.0, 2.0, unit="s"),
        registry.ValidationRow("mixed", "a link", 3e9, 3e9, unit="bits/s"),
    ]
    _print_case(case, rows, 0.0, 0.0, 0.0, True, header=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[2:] == ["simulated", "model", "reference", "error", "%", "unit"]
    assert lines[2].split()[-2:] == ["0.00", "s"] and lines[3].split()[-2:] == ["0.00", "bits/s"]


def test_a_validation_row_names_its_unit():
    with pytest.raises(TypeError, match="unit"):
        registry.ValidationRow("c", "p", 1.0, 1.0)  # type: ignore[call-arg]
    with pytest.raises(ValueError) as err:
        registry.ValidationRow("c", "p", 1.0, 1.0, unit="")
    assert str(err.value) == "validation row 'c: p' names no unit"


def test_scenario_file_by_path(capsys, tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('kind = "link-chain"\ndescription = "mine"\nitems = 10\n')
    code, out, _ = run(capsys, "run", str(f), "--json", "--quiet")
    assert code == 0 and json.loads(out)["scenario"] == "mine"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "link-chian"],
            "unknown scenario 'link-chian'; did you mean 'link-chain'? built-in scenarios: "
            "{scenarios} (or give a path to a .toml file)",
        ),
        (
            ["run", "link-chain", "--set", "stagse=3"],
            "config key 'stagse': unknown key; allowed: seed, stages, items, latency_cycles, "
            "capacity, items_per_cycle, pipe, sink_interval_cycles, clock_hz; "
            "did you mean 'stages'?",
        ),
        (
            ["run", "link-chain", "--set", "stages=0"],
            "config key 'stages' = 0: out of range; allowed: 1 .. 256; change stages",
        ),
        (
            ["run", "link-chain", "--set", "stages=abc"],
            "config key 'stages' = 'abc': expected an integer; set it with --set stages=<value>",
        ),
        (
            ["run", "link-chain", "--set", "stages"],
            "config key 'stages': an override must look like KEY=VALUE; e.g. --set elements=64",
        ),
        (
            ["model", "link-chain", "--set", "pipe=maybe"],
            "config key 'pipe' = 'maybe': expected true or false; set it with --set pipe=<value>",
        ),
        (
            ["validate", "nope"],
            "unknown validation case(s): nope; known cases: {cases}",
        ),
        (
            ["trace", "summary", "/nonexistent/t.arrows"],
            "trace file '/nonexistent/t.arrows' does not exist",
        ),
        (
            ["run", "link-chain", "--trace", "/proc/wafersim/t.arrows"],
            "cannot write trace '/proc/wafersim/t.arrows': No such file or directory",
        ),
        (
            ["run", "wse-fmac", "--set", "wafer.pe.sram_bytes=1000"],
            "config key 'wafer.pe.sram_bytes' = 1000: must equal wafer.pe.sram_banks x "
            "wafer.pe.bank_bytes = 8 x 6144 = 49152; change wafer.pe.bank_bytes or "
            "wafer.pe.sram_banks to match",
        ),
        (
            ["run", "/nonexistent/x.toml"],
            "scenario file '/nonexistent/x.toml' does not exist",
        ),
    ],
)
def test_user_errors(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    message = message.replace("{cases}", ", ".join(sorted(registry.CASES)))
    message = message.replace("{scenarios}", ", ".join(scenario.builtin_names()))
    assert err == f"wafersim: error: {message}\n"
    assert "Traceback" not in err and out == ""


def test_bad_scenario_files(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("kind = \n")
    code, _, err = run(capsys, "run", str(bad))
    assert code == 2 and err.startswith(f"wafersim: error: scenario file '{bad}' is not valid TOML")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('kind = "warp-drive"\n')
    code, _, err = run(capsys, "run", str(unknown))
    assert code == 2
    assert err == (
        f"wafersim: error: scenario '{unknown}': kind = 'warp-drive' is not a known workload "
        f"kind; known kinds: {', '.join(sorted(registry.KINDS))}\n"
    )


def test_corrupt_trace(capsys, tmp_path):
    junk = tmp_path / "junk.arrows"
    junk.write_bytes(b"\x00garbage" * 40)
    code, _, err = run(capsys, "trace", "summary", str(junk))
    assert code == 2
    assert err.startswith(f"wafersim: error: '{junk}' is not a readable wafersim trace")


def test_internal_error_exit_code(capsys, monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("kaboom")

    kind = registry.KINDS["link-chain"]
    monkeypatch.setitem(registry.KINDS, "link-chain", dataclasses.replace(kind, metrics=boom))
    code, _, err = run(capsys, "run", "link-chain", "--quiet")
    assert code == 1
    assert "RuntimeError: kaboom" in err
    assert err.rstrip().endswith("internal error (a bug in wafersim; please report it)")


def test_usage_error_is_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run"])
    assert exc.value.code == 2
