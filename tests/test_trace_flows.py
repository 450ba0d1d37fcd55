"""Wafer traces carry causality, so the critical path of a run is whole.

Flows link a task to the operations it starts, a send to the receives of its stream and to the
tasks its completion wakes, a receive to the tasks it wakes. The critical path of `trace
summary` then walks across PEs and accounts for (nearly) the whole run, in both fidelities; and
every receive has its send.
"""

from __future__ import annotations

import json

import pytest

from app.cli import main
from traces.layout import prepass

#: (scenario, overrides, the largest share of the path between its slices). Between slices
#: the path is in flight on the fabric (ops-level traces have no per-hop slices) or waiting:
#: ws-matmul's rings pass wavelets hop by hop, so up to a sixth of its path is in flight.
CASES = [
    ("wse-bcast", ["pes=12"], 0.02),
    ("wse-bcast", ["pes=6", "wafer.fidelity=reference"], 0.02),
    ("summa", ["p=3", "mt=4"], 0.02),
    ("summa", ["p=3", "mt=2", "overlap=true"], 0.06),
    ("ws-matmul", [], 0.2),
    ("ws-matmul", ["flavour=wgrad"], 0.3),
]


@pytest.mark.parametrize(
    ("name", "sets", "between"), CASES, ids=[f"{n}:{' '.join(s)}" for n, s, _ in CASES]
)
@pytest.mark.parametrize("level", ["ops", "detail"])
def test_critical_path_is_whole(capsys, tmp_path, name, sets, between, level):
    path = str(tmp_path / "t.arrows")
    argv = ["run", name, "--quiet", "--json", "--trace", path, "--trace-level", level]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["trace", "summary", path, "--json"]) == 0
    cp = json.loads(capsys.readouterr().out)["critical_path"]
    assert cp["via_flows"] > 0
    assert cp["start_ticks"] <= 0.02 * cp["end_ticks"], "the path does not reach the start"
    attributed = sum(r["ticks"] for r in cp["share"])
    assert attributed + cp["waiting_ticks"] == cp["length_ticks"]
    assert cp["waiting_ticks"] <= between * cp["length_ticks"], cp["waiting_ticks"]
    assert prepass(path).flows.orphan_receives == 0
