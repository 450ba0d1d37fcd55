"""SUMMA benchmark: wall time of ``wafersim run summa`` at a few sizes, and the largest P in 60 s.

Each point runs in its own process (``wafersim run summa --json``) under a wall-time limit, so a
point too slow for the limit is reported as such instead of holding the benchmark. Printed per
point: wall seconds, simulated cycles, the number of fmacs instructions the program issues
(P³·Mt²: P steps x P² PEs x Mt² columns) and wall microseconds per fmacs, which is where the time
goes (each fmacs is one call into :func:`pe.isa.execute`).

Run: ``python bench/summa_bench.py [--limit S] [--points P,MT ...] [--search] [--search-mt MT]``.
``--search`` looks for the largest P whose run takes under ``--search-limit`` seconds (60) at
``--search-mt`` (1): doubling from 4, then bisection. It may take several minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

WAFERSIM = str(Path(sys.executable).parent / "wafersim")
DEFAULT_POINTS = ("4,14", "32,16", "64,8")


def run_point(p: int, mt: int, limit_s: float) -> dict | None:
    """Run one point; its metrics plus ``wall_total_s``, or None when it exceeds ``limit_s``."""
    cmd = [WAFERSIM, "run", "summa", "--set", f"p={p}", "--set", f"mt={mt}", "--json"]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, check=True)
    except subprocess.TimeoutExpired:
        return None
    data = json.loads(out.stdout)
    data["wall_total_s"] = time.perf_counter() - t0
    return data


def describe(p: int, mt: int, data: dict | None, limit_s: float) -> str:
    fmacs = p**3 * mt**2
    head = f"P={p:<4} Mt={mt:<3} fmacs={fmacs:>12,}"
    if data is None:
        return f"{head}  over the {limit_s:g} s limit"
    return (
        f"{head}  wall {data['wall_s']:8.2f} s (process {data['wall_total_s']:.2f} s)  "
        f"cycles {data['cycles']:>12,}  {1e6 * data['wall_s'] / fmacs:7.1f} us/fmacs  "
        f"correct {data['correct']}"
    )


def search(mt: int, limit_s: float) -> int:
    """The largest P (>= 2) whose run finishes within ``limit_s``; 0 if even P = 2 does not."""
    good, bad = 0, 0
    p = 4
    while bad == 0:
        data = run_point(p, mt, limit_s)
        print("  " + describe(p, mt, data, limit_s), flush=True)
        if data is None:
            bad = p
        else:
            good = p
            p *= 2
            if p > 750:
                return good
    while bad - good > 1:
        p = (good + bad) // 2
        data = run_point(p, mt, limit_s)
        print("  " + describe(p, mt, data, limit_s), flush=True)
        good, bad = (p, bad) if data is not None else (good, p)
    return good


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="*", default=list(DEFAULT_POINTS), help="P,MT pairs")
    ap.add_argument("--limit", type=float, default=600.0, help="wall limit per point, seconds")
    ap.add_argument("--search", action="store_true", help="find the largest P under the limit")
    ap.add_argument("--search-mt", type=int, default=1, help="Mt of the search")
    ap.add_argument("--search-limit", type=float, default=60.0, help="the search's limit, s")
    args = ap.parse_args()
    for text in args.points:
        p, mt = (int(v) for v in text.split(","))
        print(describe(p, mt, run_point(p, mt, args.limit), args.limit), flush=True)
    if args.search:
        print(f"largest P under {args.search_limit:g} s at Mt={args.search_mt}:", flush=True)
        best = search(args.search_mt, args.search_limit)
        print(f"largest P: {best}")


if __name__ == "__main__":
    main()
