"""Golden outputs: every built-in scenario's metrics, exactly as recorded in tests/golden/.

A change that moves any cycle count or result of a built-in scenario fails here. When the
change is intended (a fix, a new mechanism), regenerate the files and explain the difference in
the commit message:

    python tests/test_golden.py          # rewrites tests/golden/<scenario>.json
    git diff tests/golden/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from runner import registry, scenario

GOLDEN = Path(__file__).parent / "golden"
NOISY = {"wall_s", "kernel_events", "trace", "config"}  # host-dependent or inputs: not compared


def metrics(name: str) -> dict[str, Any]:
    sc = scenario.find(name)
    out = scenario.run_scenario(sc, scenario.resolve_params(sc, []))
    return {k: v for k, v in out.as_json().items() if k not in NOISY}


def normalised(data: dict[str, Any]) -> dict[str, Any]:
    """What JSON would give back (tuples become lists, numpy scalars plain numbers)."""
    return json.loads(json.dumps(data, default=lambda o: o.item()))


def test_every_builtin_scenario_has_a_golden_file():
    recorded = sorted(p.stem for p in GOLDEN.glob("*.json"))
    assert recorded == scenario.builtin_names()


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_builtin_scenario_matches_its_golden_metrics(name):
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    assert normalised(metrics(name)) == want


if __name__ == "__main__":
    registry.load_all()
    GOLDEN.mkdir(exist_ok=True)
    for name in scenario.builtin_names():
        path = GOLDEN / f"{name}.json"
        path.write_text(json.dumps(normalised(metrics(name)), indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}", file=sys.stderr)
