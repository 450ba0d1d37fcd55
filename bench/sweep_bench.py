"""Sweep engine benchmark: ``validate summa`` on 1 and 2 Dask workers, and the engine's own cost
per point on 1,000 tiny points.

1. ``validate summa``: the per-point wall times first (one ``wafersim sweep`` of the case's 11
   points on one worker), which bound the best speed-up any point-parallel engine can give
   (total / longest point); then ``wafersim validate summa`` in this order: in-process (no
   Dask), ``--workers 1``, ``--workers 2``, ``--workers 1``, ``--workers 2``, each a fresh
   process, timed from outside (cluster start and stop included).
2. Overhead: a sweep of 1,000 link-chain points of one item each (``--grid seed=0..999``), on
   1 and 2 workers; per point, (sweep wall x workers - sum of the points' own wall times) / 1000:
   what submitting, scheduling, shipping the result back, journalling and the table cost.

The machine's load (``/proc/loadavg``) and its busiest other processes are printed before and
after, and each ``validate`` run's CPU seconds (its own and its workers') beside its wall time:
CPU / wall is how many cores the run actually got. On a machine shared with other work (and
Linux's autogroup scheduling, which shares the CPU between sessions, not processes), two workers
cannot be faster than the cores the session is given.

Run: ``python bench/sweep_bench.py [--skip-validate] [--skip-overhead] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeps import engine, grid  # noqa: E402 - after the path is set
from workloads.wafer.summa import VALIDATE_POINTS  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
CLI = [sys.executable, "-m", "app.cli"]


def machine() -> str:
    load = Path("/proc/loadavg").read_text().split()[:3]
    ps = subprocess.run(
        ["ps", "-eo", "pcpu,etime,args", "--sort=-pcpu"], capture_output=True, text=True
    ).stdout.splitlines()
    busy = [line[:110] for line in ps[1:] if float(line.split()[0]) >= 5.0]
    return f"load average {' '.join(load)}; processes over 5 % CPU:\n    " + "\n    ".join(
        busy[:8] or ["(none)"]
    )


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds of ``cmd``, and the CPU seconds it and its worker processes used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def validate_summa(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "summa.parquet")
        ps = ",".join(str(p) for p, _ in VALIDATE_POINTS)
        mts = ",".join(str(mt) for _, mt in VALIDATE_POINTS)
        cmd = [*CLI, "sweep", "summa", "--zip", f"p={ps}", "--zip", f"mt={mts}"]
        subprocess.run([*cmd, "--workers", "1", "--quiet", "-o", out], env=ENV, check=True)
        table = pq.read_table(out)
    walls = table.column("wall_s").to_pylist()
    total, longest = sum(walls), max(walls)
    print("per-point wall (1 worker):")
    for row in table.select(["p", "mt", "wall_s"]).to_pylist():
        print(f"    P={row['p']:<3} Mt={row['mt']:<3} {row['wall_s']:6.2f} s")
    print(
        f"  sum {total:.2f} s, longest {longest:.2f} s: at most {total / longest:.2f}x on any "
        "number of workers (the longest point runs on one)"
    )
    runs: dict[str, list[tuple[float, float]]] = {"serial": [], "1": [], "2": []}
    runs["serial"].append(timed([*CLI, "validate", "summa"]))
    for _ in range(repeats):
        for n in ("1", "2"):
            runs[n].append(timed([*CLI, "validate", "summa", "--workers", n]))
    for name, times in runs.items():
        label = "in-process" if name == "serial" else f"--workers {name}"
        print(
            f"validate summa {label:<12} "
            + ", ".join(f"{w:.2f} s (CPU {c:.1f} s, {c / w:.2f} cores)" for w, c in times),
            flush=True,
        )
    one, two = min(w for w, _ in runs["1"]), min(w for w, _ in runs["2"])
    print(f"  speed-up 2 workers vs 1 (best wall of each): {one / two:.2f}x")


def overhead(points: int) -> None:
    seeds = ",".join(map(str, range(points)))
    sw = grid.load("link-chain", grid=[f"seed={seeds}"], overrides=["items=1", "stages=1"])
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp, engine.connect(workers=workers) as client:
            out = os.path.join(tmp, "tiny.parquet")
            client.run(engine.registry.load_all)  # imports done before timing
            outcome = engine.run_sweep(client, sw, out)
            table = pq.read_table(out)
        own = pc.sum(table.column("wall_s")).as_py()
        per_point = (outcome.wall_s * workers - own) / points
        print(
            f"{points} tiny points on {workers} worker(s): sweep {outcome.wall_s:.2f} s, points' "
            f"own wall {own:.2f} s in all; overhead {1e3 * per_point:.2f} ms per point "
            f"({outcome.counts})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-validate", action="store_true")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--points", type=int, default=1000)
    args = ap.parse_args()
    print(f"cores {engine.default_workers()}; before: {machine()}", flush=True)
    if not args.skip_validate:
        validate_summa(args.repeats)
    if not args.skip_overhead:
        overhead(args.points)
    print(f"after: {machine()}")


if __name__ == "__main__":
    main()
