"""SUMMA: CPU seconds with the lock-step phase and on the wavelet path, per point: where the
phase pays (``workloads.wafer.summa.LOCKSTEP_MIN_RATE`` and ``LOCKSTEP_MIN_WORDS`` gate it in
the 'fast' fidelity).

Each point runs twice each way, alternating, in the fidelities 'lockstep-array' (the phase
whatever the gate says) and 'express' (no phase); it prints the gate's rate, the stream's words,
the smaller CPU time of each way and their ratio, and checks that both gave the same cycles.

Run: ``PYTHONPATH=. python bench/summa_gate.py P,MT [P,MT ...]`` (default: the points of
docs/wafer/performance.md, "Where the lock-step phase pays").
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from runner.scenario import run_kind
from workloads.wafer import summa

POINTS = ["4,8", "4,14", "8,2", "8,4", "8,8", "12,2", "12,4", "16,1", "16,2", "16,4", "24,1",
          "32,1"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="*", default=POINTS, help="P,MT pairs")
    args = ap.parse_args()
    for point in args.points:
        p, mt = (int(v) for v in point.split(","))
        params = summa.SummaParams(p=p, mt=mt)
        cpu: dict[bool, list[float]] = {True: [], False: []}
        cycles = set()
        for phase in (True, False, True, False):
            fidelity = "lockstep-array" if phase else "express"
            wafer = dataclasses.replace(params.wafer, fidelity=fidelity)
            t0 = time.process_time()
            cycles.add(run_kind("summa", dataclasses.replace(params, wafer=wafer))["cycles"])
            cpu[phase].append(time.process_time() - t0)
        if len(cycles) != 1:
            raise SystemExit(f"P={p} Mt={mt}: the two paths gave different cycles {cycles}")
        on, off = min(cpu[True]), min(cpu[False])
        print(
            f"P={p:<3} Mt={mt:<3} rate {summa.lockstep_rate(params):6.1f} words {mt * mt:4d}  "
            f"phase {on:7.2f} s  wavelet path {off:7.2f} s  ratio {on / off:5.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
