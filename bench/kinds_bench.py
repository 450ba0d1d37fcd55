"""PE-cycles per CPU second of every wafer kind: the general path's speed, point by point.

Each point is one ``wafersim run KIND --set ... --json --quiet`` in a process of its own; its
CPU seconds (user + system, from the operating system's accounting of the child: imports,
build and run, as the command costs a user) and the run's ``cycles`` metric give PE-cycles per
CPU second = PEs x cycles / CPU seconds (PEs: ``px x py``, ``p x p`` for SUMMA, ``pes`` for the
one-row kinds). The cycles and ``correct`` are printed too: a speed change must leave them
alone (the conformance suite and the digests hold that bit for bit; this is the figure to
compare).

Run: ``python bench/kinds_bench.py [--sizes 16 64] [--only spmv-poisson ...] [--list]``.
The machine is shared: compare CPU seconds, within one session.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

#: name -> (scenario, overrides at side N); N is the mesh side (16 or 64).
POINTS: dict[str, tuple[str, object]] = {
    "spmv-poisson": (
        "spmv",
        lambda n: {"matrix": "poisson2d", "n": (4 * n) ** 2, "px": n, "py": n, "iterations": 1},
    ),
    "spmv-powerlaw": (
        "spmv",
        lambda n: {
            "matrix": "laplacian",
            "graph": "barabasi_albert",
            "n": 64 * n,
            "px": n,
            "py": n,
            "iterations": 1,
        },
    ),
    "ws-matmul-fwd": (
        "ws-matmul",
        lambda n: {"flavour": "fwd", "rows": 2 * n, "cols": 2 * n, "tokens": n, "px": n, "py": n},
    ),
    "ws-matmul-bwd": (
        "ws-matmul",
        lambda n: {"flavour": "bwd", "rows": 2 * n, "cols": 2 * n, "tokens": n, "px": n, "py": n},
    ),
    "ws-matmul-wgrad": (
        "ws-matmul",
        lambda n: {"flavour": "wgrad", "rows": 2 * n, "cols": 2 * n, "tokens": n, "px": n, "py": n},
    ),
    "summa-overlap": ("summa", lambda n: {"p": n, "mt": 2, "overlap": "true"}),
    "summa": ("summa", lambda n: {"p": n, "mt": 8}),
    "wse-bcast": ("wse-bcast", lambda n: {"pes": n, "elements": 1024}),  # one row of N PEs
    "wse-fmac": ("wse-fmac", lambda n: {}),
}


def pes_of(metrics: dict) -> int:
    cfg = metrics["config"]
    if "px" in cfg:
        return int(cfg["px"]) * int(cfg["py"])
    if "p" in cfg:
        return int(cfg["p"]) ** 2
    return int(metrics.get("pes", cfg.get("pes", 1)))


def run_point(scenario: str, sets: dict) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "app.cli", "run", scenario, "--json", "--quiet"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out.stdout), cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16])
    ap.add_argument("--only", nargs="+", choices=sorted(POINTS), default=None)
    ap.add_argument("--list", action="store_true", help="print the points' commands and stop")
    args = ap.parse_args()
    names = args.only or list(POINTS)
    print(f"{'point':<16} {'N':>3} {'PEs':>6} {'cycles':>10} {'CPU s':>8} {'run s':>8} "
          f"{'M PE-cyc/CPU s':>14} correct")  # fmt: skip
    for n in args.sizes:
        for name in names:
            scenario, sets_of = POINTS[name]
            sets = sets_of(n)  # type: ignore[operator]
            if args.list:
                flags = " ".join(f"--set {k}={v}" for k, v in sets.items())
                print(f"wafersim run {scenario} {flags}")
                continue
            t0 = time.perf_counter()
            m, cpu = run_point(scenario, sets)
            wall = time.perf_counter() - t0
            pes = pes_of(m)
            rate = pes * m["cycles"] / cpu / 1e6
            print(f"{name:<16} {n:>3} {pes:>6} {m['cycles']:>10,} {cpu:>8.2f} {m['wall_s']:>8.2f} "
                  f"{rate:>14.2f} {m.get('correct')}  (wall {wall:.1f} s)", flush=True)  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
