"""One metrics vocabulary for every workload kind (docs/cli.md, "Metric names").

:func:`test_every_kind_speaks_the_vocabulary` runs every registered kind at small parameters
(:data:`POINTS`: a kind without points fails) and checks its metrics and its model's output:

- ``time_s``, always: the simulated seconds of the run, or of the step where the kind simulates
  steps; ``cycles`` where the run has one clock (then ``time_s`` = ``cycles`` / its frequency);
- ``correct``, always: True or False where the run carries data and checks it, None where it
  carries none (a size-only payload, a run without data);
- where the kind has a model: ``model_time_s`` (the model's ``time_s``) and ``model_error_pct``
  (``(time_s - model_time_s) / model_time_s x 100``); ``model_cycles`` beside them where the
  model counts cycles; every other ``model_X`` metric is the model's ``X``;
- every other name carries its unit (:func:`unit_problem`).

Besides: ``kernel_events`` counts the kernel's events, whatever the output options; and
``blocked_puts`` counts congestion.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from runner import registry
from simcore import config as cfg
from simcore import sim as simmod
from simcore.sim import Simulation

#: The words a metric's name may end with: its unit. A name is ``[what_]unit`` (``time_s``,
#: ``edge_words``, ``peak_fraction``, or the unit alone: ``cycles``), or ``[what_]unit_per_<thing>``
#: (``tokens_per_s``, ``hbm_bytes_per_chip``, ``weights_per_gpu_layer``). A new unit is added
#: here, and to docs/cli.md, in the change that first uses it.
UNITS = {
    # time
    "s": "seconds (simulated; the host's only in wall_s)",
    "cycles": "clock cycles of the kind's clock (the one the name's component runs on)",
    # data
    "bytes": "bytes",
    "bits": "bits",
    "words": "the wafer's 32-bit words",
    "gib": "2^30 bytes",
    # work
    "flops": "floating-point operations, a count (a rate is flops_per_s or the units below)",
    "gflops": "10^9 floating-point operations per second",
    "tflops": "10^12 floating-point operations per second",
    "pflops": "10^15 floating-point operations per second",
    # dimensionless
    "pct": "percent",
    "fraction": "a share, 0..1",
    "utilisation": "a busy share of a resource's time, 0..1",
    "efficiency": "achieved over ideal, 0..1",
    "ratio": "a quotient of two quantities of one unit (any size)",
    # the data itself (numbers without a physical unit)
    "error": "an absolute difference of result values, in the data's own units",
    "change": "an absolute change of data values (a weight's update)",
    "loss": "a training loss (mean cross-entropy, nats)",
    # place
    "xy": "a PE's (x, y) position on the mesh",
}

#: Count nouns: a name ending with one counts those things (an int, or a float where a model
#: averages). ``<what>_count`` counts anything else.
COUNTS = {
    "items", "puts", "events", "runs", "entries", "parameters", "tokens", "weights", "batch",
    "iterations", "elements", "nnz", "rows", "cols", "blocks", "pes", "nodes", "boxes", "hops",
    "ranks", "groups", "flows", "chunks", "packets", "paths", "pchs", "commands", "activations",
    "refreshes", "triggers", "writes", "switches", "turnarounds", "count", "requests", "hits",
    "misses", "conflicts",
}  # fmt: skip

#: The name of a run's clock domain is not a hardware clock for these kinds: they report no
#: ``cycles``, with the reason.
NOT_A_CLOCK = {
    "jitq-study": "its one domain is the nanosecond time base its plan walk is traced in",
}

#: The user-kernel examples (wafer-program).
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: The project's Chakra trace sets (tpu-chakra).
CHAKRA = Path(__file__).resolve().parent / "data" / "chakra"
GROUPS = CHAKRA / "pipe.groups.json"

#: A tiny GPT for gpt-ws.
GPT = {"model": "custom", "layers": 1, "hidden": 16, "sequence": 8, "vocab": 32, "heads": 2,
       "batch": 1}  # fmt: skip
#: ... smaller, on the PEs of the cycle-level wafer.
PE = {"hidden": 8, "sequence": 4, "vocab": 16, "fidelity": "pe", "cs2": {"pe_px": 2, "pe_py": 2}}

#: Small points per kind (keys as in a scenario file) and whether each carries data to check.
POINTS: dict[str, list[tuple[dict[str, Any], bool]]] = {
    "link-chain": [({"items": 200}, True), ({"items": 100, "sink_interval_cycles": 3}, True)],
    "wse-fmac": [({"elements": 16}, True)],
    "wse-bcast": [({"elements": 64, "pes": 4}, True)],
    "summa": [({"p": 2, "mt": 2}, True), ({"p": 2, "mt": 2, "overlap": True}, True)],
    "ws-matmul": [
        ({"flavour": f, "rows": 8, "cols": 8, "tokens": 4, "px": 2, "py": 2}, True)
        for f in ("fwd", "bwd", "wgrad")
    ],
    "spmv": [
        ({"matrix": "poisson2d", "n": 16, "px": 2, "py": 2}, True),
        ({"matrix": "poisson2d", "n": 16, "px": 2, "py": 2, "iterations": 2}, True),
        ({"matrix": "powerlaw", "n": 64, "degree": 3, "px": 2, "py": 2}, True),
    ],
    "gemv": [({"m": 12, "n": 10, "px": 2, "py": 3}, True)],
    "gpt-ws": [
        ({**GPT, "steps": 1, "functional": True}, True),
        ({**GPT, "systems": 2}, False),
        ({**GPT, **PE, "steps": 1}, True),
    ],
    "wafer-program": [
        ({}, True),  # the bundled demo
        ({"program": str(EXAMPLES / "wafer" / "gemv.py"), "m": 8, "n": 8, "pes": 2}, True),
    ],
    "tpu-collective": [
        ({"topology": "2x2", "bytes": 4096, "op": "allreduce"}, True),
        ({"topology": "2x2", "bytes": 4096, "payload": "size", "slices": 2, "axes": "xs"}, False),
    ],
    "tpu-p2p": [({"topology": "2x2", "src": "0,0", "dst": "1,1", "bytes": 4096}, True)],
    "tpu-matmul": [
        ({"topology": "2x1", "i": 16, "j": 32, "k": 16, "tile_k": 16, "tile_n": 16}, True),
        (
            {"topology": "2x1", "i": 16, "j": 32, "k": 16, "sharding": "both", "payload": "size"},
            False,
        ),
    ],
    "tpu-train-step": [
        ({"topology": "2x1", "batch": 16, "d_model": 16, "d_ff": 32, "payload": "real"}, True),
        ({"topology": "2x1", "batch": 16, "d_model": 16, "d_ff": 32, "strategy": "fsdp"}, False),
    ],
    "tpu-chakra": [
        ({"et": str(CHAKRA / "mlp-dp.0.et"), "topology": "2x4"}, False),
        ({"et": str(CHAKRA / "pipe.0.et"), "topology": "2x4", "groups": str(GROUPS)}, False),
    ],
    "tpu-hlo": [
        ({}, False),  # the bundled data-parallel MLP step
        ({"hlo": "tests/data/hlo/mlp-tp.hlo.txt", "order": "dataflow"}, False),
    ],
    "hbm-read": [({"requests": 128}, True), ({"requests": 128, "pattern": "random"}, True)],
    "hbm-trace": [
        (
            {"trace": "workloads/pim/traces/mixed-1536.ramulator.trace", "format": "ramulator"},
            False,
        ),
        ({"trace": "workloads/pim/traces/mixed-1536.dramsim3.trace", "scope": "stacks"}, False),
    ],
    "jitq": [({"rows": 64, "cols": 64}, True)],
    "jitq-study": [({"calibration_rows": 256}, False), ({"model": "all"}, False)],
}

SNAKE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


def unit_problem(name: str, value: Any, echoes: set[str]) -> str | None:
    """What is wrong with metric ``name`` holding ``value`` (None: nothing). ``echoes`` are the
    kind's parameter names, which a metric may repeat (with the value the run used)."""
    if not SNAKE.fullmatch(name):
        return "is not lower snake_case"
    if value is None:
        return None if name == "correct" else "is None (only correct may be: no data)"
    if isinstance(value, str | bool):
        return None  # a label or a yes/no fact: no unit
    if name.endswith("_table"):  # records: a list of them, or label -> record
        records = value.values() if isinstance(value, dict) else value
        for record in records:
            for key, v in record.items():
                problem = unit_problem(key, v, echoes)
                if problem:
                    return f"holds a record whose '{key}' {problem}"
        return None
    if name in echoes:
        return None
    if not _numbers(value):
        return f"holds {value!r}: a number (or numbers by label), a label or a table"
    words = name.split("_")
    if words[-1] in UNITS or words[-1] in COUNTS:
        return None
    base = name.rpartition("_per_")[0].split("_")[-1]
    if base in UNITS or base in COUNTS:
        return None
    return "names no unit (docs/cli.md, 'Metric names')"


def _numbers(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, list | tuple):
        return all(_numbers(v) for v in value)
    if isinstance(value, dict):
        return all(_numbers(v) for v in value.values())
    return hasattr(value, "item") and _numbers(value.item())


def run(kind: registry.WorkloadKind, point: dict[str, Any]) -> tuple[dict[str, Any], Simulation]:
    params = cfg.load(kind.params, point)
    sim = Simulation(seed=params.seed)
    handle = kind.build(sim, params)
    sim.check()
    result = sim.run()
    assert result.status == "completed", result.report
    return kind.metrics(sim, params, handle, result), sim


registry.load_all()


@pytest.mark.parametrize("name", sorted(registry.KINDS))
def test_every_kind_speaks_the_vocabulary(name):
    kind = registry.KINDS[name]
    assert name in POINTS, f"{name}: give it small points in POINTS"
    echoes = {f.name for f in dataclasses.fields(kind.params)}
    for point, carries_data in POINTS[name]:
        where = f"{name} {point}"
        metrics, sim = run(kind, point)
        named = {k: v for k, v in metrics.items() if not k.startswith("model_")}
        problems = [f"'{k}' {p}" for k, v in named.items() if (p := unit_problem(k, v, echoes))]
        assert problems == [], where
        # time_s, always
        time_s = metrics.get("time_s")
        assert isinstance(time_s, float | int) and math.isfinite(time_s) and time_s >= 0, where
        # cycles where the run has one clock
        domains = sim.timebase.describe()
        if len(domains) == 1 and name not in NOT_A_CLOCK:
            (hz,) = domains.values()
            assert isinstance(metrics.get("cycles"), int), where
            assert time_s == pytest.approx(metrics["cycles"] / hz, rel=1e-12), where
        else:
            assert "cycles" not in metrics, where
        # correct, always: a verdict where data is carried
        assert "correct" in metrics, where
        assert metrics["correct"] is (True if carries_data else None), where
        # the model's figures
        modelled = {k[len("model_") :]: v for k, v in metrics.items() if k.startswith("model_")}
        if kind.model is None:
            assert modelled == {}, where
            continue
        model = kind.model(cfg.load(kind.params, point))
        problems = [f"model's '{k}' {p}" for k, v in model.items()
                    if (p := unit_problem(k, v, echoes))]  # fmt: skip
        assert problems == [], where
        assert "time_s" in model and {"time_s", "error_pct"} <= modelled.keys(), where
        if "cycles" in model:  # a cycle model: its cycles beside the run's
            assert "cycles" in metrics and "cycles" in modelled, where
        error = modelled.pop("error_pct")
        for key, value in modelled.items():
            assert value == model[key], f"{where}: model_{key}"
        want = 100.0 * (time_s - model["time_s"]) / model["time_s"] if model["time_s"] else 0.0
        assert error == pytest.approx(want, rel=1e-9, abs=1e-9), where


def test_the_vocabulary_refuses_names_without_units():
    echoes = {"elements"}
    good = {"time_s": 1.0, "cycles": 3, "correct": None, "tokens_per_s": 2.0,
            "weights_per_gpu_layer": 4, "memory_per_gpu_gib": 1.0, "gpu_layer_s": {"fwd": 1.0},
            "critical_pe_xy": [0, 1], "route": "0,0>1,0", "latency_hidden": True, "elements": 4,
            "summary_table": [{"model": "a", "min_slack_ratio": 1.0}], "hop_count": 2}  # fmt: skip
    assert {k: unit_problem(k, v, echoes) for k, v in good.items()} == dict.fromkeys(good)
    bad = {"algbw_Bps": 1.0, "step": 1.0, "slack": {"fwd": 1.0}, "mfu": 0.5, "checksum": 3,
           "seen": None, "pe": [0, 0], "rows_max": 3,
           "summary_table": [{"slack": 1.0}]}  # fmt: skip
    assert all(unit_problem(k, v, echoes) for k, v in bad.items())


# -- what two metrics mean -------------------------------------------------------------------------
def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["link-chain-backpressure", "wse-bcast"])
def test_kernel_events_do_not_depend_on_output_options(capsys, tmp_path, monkeypatch, name):
    quiet = run_json(capsys, "run", name, "--json", "--quiet")
    # A progress line that prints from the first batch on reads the event counter every batch.
    monkeypatch.setattr(simmod.Progress, "__init__", _eager)
    loud = run_json(capsys, "run", name, "--json")
    traced = run_json(capsys, "run", name, "--json", "--quiet", "--trace",
                      str(tmp_path / "t.arrows"), "--trace-level", "detail")  # fmt: skip
    assert "events" not in quiet
    assert quiet["kernel_events"] == loud["kernel_events"] == traced["kernel_events"] > 0
    assert main(["trace", "summary", str(tmp_path / "t.arrows"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "events" not in summary and summary["records"] > 0


def _eager(self, stream=None, *, after_s=0.0, every_s=0.0):
    import io

    self.stream, self.after_s, self.every_s, self._last, self.printed = io.StringIO(), 0, 0, 0, 0


def test_blocked_puts_means_congestion(capsys):
    free = run_json(capsys, "run", "link-chain", "--json", "--quiet")
    assert free["throughput_items_per_cycle"] == 1.0 and free["blocked_puts"] == 0
    slow = run_json(capsys, "run", "link-chain", "--json", "--quiet",
                    "--set", "sink_interval_cycles=3")  # fmt: skip
    assert slow["blocked_puts"] > 0
