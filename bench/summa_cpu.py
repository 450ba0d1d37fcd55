"""SUMMA: CPU seconds and Python calls of ``run_kind("summa", ...)``, the figures to compare when
the wavelet-exact path changes.

Wall time on the shared 2-core machine moves by 30 % or more from one run to the next, so this
prints process CPU time (``time.process_time`` around the run) and, with ``--calls``, the number
of Python calls the run makes under ``cProfile`` (deterministic: the firm figure for "fewer
steps"; the profiler's own times are not printed). Each point also prints the cycles and their
split, which a speed change must leave alone (``tests/test_summa_exact.py`` checks that bit for
bit at small points).

With ``--digest`` it prints, instead, the digest ``tests/test_summa_exact.py`` pins (cycles, split,
SHA-256 of every PE's marks and C bytes, the engine's counters) and the CPU seconds: to hold a
speed change to the previous version at points too large for the tests.

With ``--steady-clock`` the run loop's wall clock reads 0 and numpy's BLAS runs one thread, so
that instruction counts repeat (why: ``bench/steady.py``); use it whenever instructions are
counted:
``PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null
python bench/summa_cpu.py --steady-clock 16,8``.

Run: ``PYTHONPATH=<source> python bench/summa_cpu.py [--calls | --digest] [--steady-clock]
P,MT [P,MT ...]`` (default 16,8).
To compare two versions, run it alternately on snapshots of both (``git archive <rev> | tar -x
-C <dir>``), from outside the worktree so the snapshot is what is imported.
"""

from __future__ import annotations

import sys

import steady  # (bench/, beside this file)

if "--steady-clock" in sys.argv:  # (before numpy loads its BLAS)
    steady.one_blas_thread()

import argparse
import cProfile
import json
import pstats
import time

from runner.scenario import run_kind
from workloads.wafer import summa


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="*", default=["16,8"], help="P,MT pairs")
    ap.add_argument("--calls", action="store_true", help="count Python calls (cProfile)")
    ap.add_argument("--digest", action="store_true", help="print the exactness tests' digest")
    ap.add_argument(
        "--steady-clock",
        action="store_true",
        help="the run loop's wall clock reads 0 (for valgrind)",
    )
    args = ap.parse_args()
    if args.steady_clock:
        steady.steady_clock()
    for point in args.points:
        p, mt = (int(v) for v in point.split(","))
        if args.digest:
            from tests.test_summa_exact import digest  # (the source tree's own tests)

            t0 = time.process_time()
            got = digest((p, mt, False, "fast"))
            print(f"P={p} Mt={mt} {json.dumps(got)} cpu {time.process_time() - t0:.2f} s")
            continue
        params = summa.SummaParams(p=p, mt=mt)
        prof = cProfile.Profile() if args.calls else None
        t0 = time.process_time()
        if prof is not None:
            prof.enable()
        m = run_kind("summa", params)
        if prof is not None:
            prof.disable()
        cpu = time.process_time() - t0
        split = (m["compute_cycles"], m["comm_cycles"], m["control_cycles"])
        line = f"P={p:<3} Mt={mt:<3} cycles {m['cycles']:>9,} split {split} correct {m['correct']}"
        if prof is not None:
            line += f"  calls {pstats.Stats(prof).total_calls:>12,}"
        else:
            line += f"  cpu {cpu:8.2f} s"
        print(line, flush=True)


if __name__ == "__main__":
    main()
