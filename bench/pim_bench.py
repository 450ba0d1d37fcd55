"""JIT-Q at the issue's sizes: a BF16 matrix quantized command by command, and the study table.

    .venv/bin/python bench/pim_bench.py [--rows 4096] [--cols 4096] [--format mx6] [--study]
    .venv/bin/python bench/pim_bench.py --hbm-read 65536   # random reads only: commands/CPU s
    .venv/bin/python bench/pim_bench.py --hbm-read 65536 --request-path event  # the reference

Each placement and direction runs the ``jitq`` kind at one-pseudo-channel fidelity (every
pseudo-channel gets the same broadcast stream; docs/pim/design.md, "Two fidelities"): the wall time
of the whole run (building, loading the banks, simulating, reading back and checking every bit
against the reference), the simulated time, and the commands the simulated controller issued per
wall second, and the CPU seconds the process used (the one-core figure on a shared machine).
Targets (issue 24): under 5 CPU s per run for 4096 x 4096 MX6; at least 150,000 commands per CPU
second on 65,536 random reads (``--hbm-read``); the ``jitq-study`` table over all models under
30 s. Figures: docs/pim/performance.md; the journal: bench/notes/pim-requests.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    from runner import registry
    from runner.scenario import run_kind
    from workloads.pim.jitq import JitqParams
    from workloads.pim.study import StudyParams

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--format", default="mx6")
    ap.add_argument("--study", action="store_true", help="also time the jitq-study table")
    ap.add_argument(
        "--hbm-read",
        type=int,
        default=0,
        metavar="N",
        help="only time N random reads on one pseudo-channel (commands per CPU s)",
    )
    ap.add_argument(
        "--request-path",
        default="bulk",
        choices=("bulk", "event"),
        help="with --hbm-read: the controller's request path (hbm.request_path)",
    )
    args = ap.parse_args()
    registry.load_all()
    if args.hbm_read:
        hbm_read(args.hbm_read, args.request_path)
        return
    print(f"{'placement':<15} {'dir':<4} {'wall s':>7} {'cpu s':>6} {'sim us':>9} {'commands':>9} "
          f"{'cmd/cpu s':>9} {'ACT':>6} {'shift':>7} {'shift us':>8} correct")  # fmt: skip
    from pim.jitq import PLACEMENTS

    for placement in PLACEMENTS:
        for direction in ("row", "col"):
            p = JitqParams(rows=args.rows, cols=args.cols, format=args.format,
                           placement=placement, direction=direction)  # fmt: skip
            t0, c0 = time.perf_counter(), time.process_time()
            m = run_kind("jitq", p)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            per = m["commands_per_pch"]
            n = sum(per[k] for k in ("ACT", "PRE", "PREA", "RD", "WR", "REF"))
            print(f"{placement:<15} {direction:<4} {wall:7.1f} {cpu:6.1f} {m['time_s'] * 1e6:9.1f} "
                  f"{n:9,} {n / cpu:9,.0f} {per['ACT']:6,} {per['shift_related']['total']:7,} "
                  f"{m['shift_time_s'] * 1e6:8.1f} {m['correct']}", flush=True)  # fmt: skip
    if args.study:
        t0, c0 = time.perf_counter(), time.process_time()
        run_kind("jitq-study", StudyParams(model="all", format=args.format))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"jitq-study model=all: {wall:.1f} s wall, {cpu:.1f} s cpu")


def hbm_read(n: int, request_path: str = "bulk") -> None:
    """Random reads through one controller: DRAM commands per CPU second of the run (the
    simulation only: building the requests and the banks' bytes is not counted)."""
    from pim.stack import HbmConfig
    from simcore import Simulation
    from workloads.pim.hbmread import HbmReadParams, build

    sim = Simulation()
    cfg = HbmConfig(request_path=request_path)
    run = build(sim, HbmReadParams(pattern="random", requests=n, hbm=cfg))
    t0, c0 = time.perf_counter(), time.process_time()
    sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ctl = run.stack.controllers[0]
    cmds = sum(ctl.counts.values())
    print(f"hbm-read random {n} ({request_path}): {cmds:,} commands, {ctl.end_cycle:,} cycles, "
          f"{wall:.1f} s wall, {cpu:.2f} s cpu, {cmds / cpu:,.0f} commands per CPU s")  # fmt: skip


if __name__ == "__main__":
    main()
