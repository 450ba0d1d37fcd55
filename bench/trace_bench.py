"""What tracing costs: wall time of one scenario at trace level off, ops and detail.

    .venv/bin/python bench/trace_bench.py [--items N] [--repeat R] [--profile]

Runs ``link-chain`` with N items (default 200,000) at each level, best of R runs, and prints the
wall time, the number of trace events and the cost per event relative to ``off``. ``--profile``
also prints where a ``detail`` run spends its time (cProfile, top functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runner import scenario
from simcore.tracing import TraceLevel
from traces.reader import iter_batches


def run_once(items: int, level: TraceLevel, path: str) -> tuple[float, int]:
    sc = scenario.find("link-chain")
    params = scenario.resolve_params(sc, [f"items={items}"])
    t0 = time.perf_counter()
    scenario.run_scenario(sc, params, trace_path=path, trace_level=level)
    wall = time.perf_counter() - t0
    events = 0
    if level > TraceLevel.OFF:
        events = sum(b.num_rows for b in iter_batches(path))
    return wall, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.arrows")
        results = {}
        for level in (TraceLevel.OFF, TraceLevel.OPS, TraceLevel.DETAIL):
            runs = [run_once(args.items, level, path) for _ in range(args.repeat)]
            wall = min(r[0] for r in runs)
            size = os.path.getsize(path) if level > TraceLevel.OFF else 0
            results[level] = (wall, runs[0][1], size)
        base = results[TraceLevel.OFF][0]
        print(f"link-chain, items={args.items:,}, best of {args.repeat}")
        print(f"{'level':<8} {'wall s':>8} {'events':>10} {'file MB':>8} {'ns/event':>9}")
        for level, (wall, events, size) in results.items():
            per = f"{(wall - base) / events * 1e9:9.0f}" if events >= 1000 else f"{'-':>9}"
            print(f"{level.name.lower():<8} {wall:8.3f} {events:>10,} {size / 1e6:8.2f} {per}")
        if args.profile:
            sc = scenario.find("link-chain")
            params = scenario.resolve_params(sc, [f"items={args.items}"])
            prof = cProfile.Profile()
            prof.enable()
            scenario.run_scenario(sc, params, trace_path=path, trace_level=TraceLevel.DETAIL)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
