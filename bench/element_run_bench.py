"""A run of one-element ``fmacs`` in spmv's form (y[i] += x[c]·a): the tensor unit's run
(``TensorUnit.execute_run``) against one ``execute`` per instruction on fresh one-element
descriptors (the path ``TaskContext.op`` takes), per instruction, at a few run lengths.

Run: ``python bench/element_run_bench.py [--lengths 1 5 20 200] [--repeat 2000]``. Prints CPU
and wall microseconds per instruction for each form (the machine is shared: compare CPU
seconds, or count instructions with ``valgrind --tool=cachegrind --cache-sim=no`` around
``--only run`` / ``--only op`` at two ``--repeat`` values and take the difference).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pe import isa
from pe.config import PeConfig
from pe.dsd import MemDsd
from pe.memory import Sram

WORDS = 128


def setup(n: int) -> tuple:
    cfg = PeConfig()
    unit = isa.TensorUnit(cfg)
    sram = Sram(cfg, owner="bench")
    xb, yb = sram.alloc_array("x", "f32", WORDS), sram.alloc_array("y", "f32", WORDS)
    x, y = MemDsd.vector(xb.base, "f32", WORDS), MemDsd.vector(yb.base, "f32", WORDS)
    x.write(sram, np.random.default_rng(1).standard_normal(WORDS).astype(np.float32))
    rng = np.random.default_rng(2)
    rows = sorted(rng.integers(0, WORDS, n).tolist())
    cols = rng.integers(0, WORDS, n).tolist()
    vals = rng.standard_normal(n).astype(np.float32).tolist()
    return unit, sram, x, y, rows, cols, vals


def run_form(n: int, repeat: int) -> float:
    unit, sram, x, y, rows, cols, vals = setup(n)
    yr = (y, rows)
    unit.execute_run("fmacs", sram, yr, (yr, (x, cols), vals))  # (the form's costs, once)
    c0 = time.process_time()
    for _ in range(repeat):
        unit.execute_run("fmacs", sram, yr, (yr, (x, cols), vals))
    return c0


def op_form(n: int, repeat: int) -> float:
    unit, sram, x, y, rows, cols, vals = setup(n)
    y1, x1 = y.with_length(1), x.with_length(1)
    c0 = time.process_time()
    for _ in range(repeat):
        for k in range(n):
            d = y1.with_offset(rows[k])
            unit.execute("fmacs", sram, d, (d, x1.with_offset(cols[k]), vals[k]))
    return c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1, 5, 20, 200])
    ap.add_argument("--repeat", type=int, default=2000, help="runs per length")
    ap.add_argument("--only", choices=["run", "op"], help="one form (for valgrind)")
    args = ap.parse_args()
    forms = {"run": run_form, "op": op_form}
    if args.only:
        forms = {args.only: forms[args.only]}
    print(f"{'form':<5} {'n':>5} {'CPU us/instr':>13} {'wall us/instr':>14}")
    for n in args.lengths:
        for name, form in forms.items():
            w0 = time.perf_counter()
            c0 = form(n, args.repeat)  # (CPU from after the set-up; wall includes it)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            per = 1e6 / (n * args.repeat)
            print(f"{name:<5} {n:>5} {cpu * per:>13.2f} {wall * per:>14.2f}")


if __name__ == "__main__":
    main()
