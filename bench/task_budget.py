"""What a task may cost: each wafer kind's tasks against the CPU its target speed allows.

Every general-path wafer program runs its PEs' tasks one at a time, each a Python call with its
dispatch, context and end event. This bench puts the count of those tasks beside two figures:

- per point of ``kinds_bench.py`` (and the row-broadcast bench of ``wafer_bench.py``): the tasks
  the run ran (every compute engine's ``tasks_run``), its PE-cycles and CPU seconds, the CPU it
  spent per task (everything: routers, wavelets, the scheduler, divided by the tasks), and the
  **budget**: the CPU per task that the target speed (PE-cycles per CPU second) leaves,
  ``PEs x cycles / target / tasks``;
- the **floor**: the CPU per task of the cheapest program there is, every PE running a chain of
  local tasks that do nothing but activate the next one (``--floor``): what the kernel's
  dispatch, context, call and end cost with no router, wavelet or data in the way.

Where a point's budget is below the floor, no trimming of the routers, wavelets or data makes
the target: the tasks themselves, one Python call each, take more. Targets (issue 25): 10 M
PE-cycles per CPU second for the general-path kinds, 50 M for the row-broadcast bench, and
SUMMA P=64 Mt=8 in 20 s of CPU (the ``summa`` point at N=64 is that run).

Run: ``python bench/task_budget.py [--sizes 16 64] [--only P ...] [--floor-side 64]
[--floor-tasks 64]``. Each point runs in a process of its own, like ``kinds_bench.py``, and is
timed with ``time.process_time`` around the build and the run. The machine is shared: the CPU
seconds move with its load, the task counts do not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from kinds_bench import POINTS, pes_of  # (bench/, beside this file)
from kinds_bench import child as kinds_child

#: The target speeds of issue 25, PE-cycles per CPU second.
TARGET = 10e6
TARGET_ROW_BENCH = 50e6
#: The row-broadcast bench's point (``wafer_bench.row_broadcasts``: every row broadcasts 1,024
#: words from each root in turn), run here beside the kinds.
ROW_BENCH = "row-bench"


def count_tasks() -> list:
    """Keep every compute engine made from now on (this process only), so its ``tasks_run``
    can be summed after the run."""
    from pe.ce import ComputeEngine

    made: list = []
    init = ComputeEngine.__init__

    def keeping(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    ComputeEngine.__init__ = keeping
    return made


def child_point(name: str, n: int) -> None:
    """Print the point's figures as ``kinds_bench.py``'s child does (metrics, CPU seconds),
    then a line with the tasks its compute engines ran."""
    made = count_tasks()
    if name == ROW_BENCH:
        from wafer_bench import row_broadcasts

        from wafer.system import WaferConfig

        t0 = time.process_time()
        sim, wafer = row_broadcasts(n, 1024, WaferConfig())
        result = sim.run()
        cpu = time.process_time() - t0
        assert result.status == "completed", result.report
        metrics = {"cycles": wafer.span_cycles(), "correct": True, "config": {"pes": n * n}}
        print(json.dumps({"metrics": metrics, "cpu_s": cpu}))
    else:
        scenario_name, sets_of = POINTS[name]
        kinds_child(scenario_name, json.dumps(sets_of(n)))
    print(json.dumps({"tasks": sum(ce.tasks_run for ce in made)}))


def child_floor(side: int, chain: int) -> dict:
    """Every PE of a side x side array runs ``chain`` tasks, each activating the next."""
    made = count_tasks()
    from pe.program import Layout
    from simcore import Simulation
    from wafer.system import Wafer, WaferConfig

    def code(pe) -> None:
        left = {"n": chain}

        @pe.local_task(id=10)
        def ping(t) -> None:
            left["n"] -= 1
            if left["n"]:
                t.activate(11)

        @pe.local_task(id=11)
        def pong(t) -> None:
            left["n"] -= 1
            if left["n"]:
                t.activate(10)

        pe.start(ping)

    layout = Layout(side, side)
    layout.set_rectangle_code(code)
    sim = Simulation()
    Wafer(sim, WaferConfig(), layout)
    t0 = time.process_time()
    result = sim.run()
    cpu = time.process_time() - t0
    assert result.status == "completed", result.report
    tasks = sum(ce.tasks_run for ce in made)
    assert tasks == side * side * chain, tasks
    return {"cpu_s": cpu, "tasks": tasks}


def run_child(*args: str) -> dict:
    """The child's last JSON lines, merged (a point prints two, the floor one)."""
    cmd = [sys.executable, __file__, "--child", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr.strip()}")
    lines = out.stdout.strip().splitlines()
    got: dict = {}
    for line in lines[-2 if args[0] != "floor" else -1 :]:
        got.update(json.loads(line))
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16])
    names = [*POINTS, ROW_BENCH]
    ap.add_argument("--only", nargs="+", choices=names, default=None)
    ap.add_argument("--floor-side", type=int, default=64, help="the floor's array side")
    ap.add_argument("--floor-tasks", type=int, default=64, help="tasks per PE in the floor")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        what, *rest = args.child
        if what == "floor":
            print(json.dumps(child_floor(*map(int, rest))))
        else:
            child_point(what, int(rest[0]))
        return

    floor = run_child("floor", str(args.floor_side), str(args.floor_tasks))
    floor_us = floor["cpu_s"] / floor["tasks"] * 1e6
    print(f"floor: {floor['tasks']:,} tasks that only activate the next, "
          f"{args.floor_side}x{args.floor_side} PEs: {floor['cpu_s']:.2f} CPU s, "
          f"{floor_us:.2f} us per task")  # fmt: skip
    print(f"{'point':<20} {'N':>3} {'PEs':>6} {'cycles':>9} {'tasks':>10} {'CPU s':>8} "
          f"{'us/task':>8} {'budget us':>9} {'x floor':>7} correct")  # fmt: skip
    for n in args.sizes:
        for name in args.only or names:
            got = run_child(name, str(n))
            m = got["metrics"]
            got.update(pes=pes_of(m), cycles=m["cycles"], correct=m.get("correct"))
            target = TARGET_ROW_BENCH if name == ROW_BENCH else TARGET
            pe_cycles = got["pes"] * got["cycles"]
            if name == "summa" and n == 64:
                budget_s = min(pe_cycles / target, 20.0)  # (and P=64 Mt=8 in 20 s)
            else:
                budget_s = pe_cycles / target
            tasks = max(got["tasks"], 1)
            us = got["cpu_s"] / tasks * 1e6
            budget_us = budget_s / tasks * 1e6
            print(f"{name:<20} {n:>3} {got['pes']:>6} {got['cycles']:>9,} {got['tasks']:>10,} "
                  f"{got['cpu_s']:>8.2f} {us:>8.2f} {budget_us:>9.2f} "
                  f"{budget_us / floor_us:>7.2f} {got['correct']}", flush=True)  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
