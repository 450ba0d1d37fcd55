"""PE-cycles per CPU second of every wafer kind: the general path's speed, point by point.

Each point runs in a process of its own: the child imports the simulator, then times
``run_kind`` (build and run, no trace) with ``time.process_time``, so the figure leaves out
the interpreter's start and the imports (which are large where Python may not cache bytecode)
and is what a longer run pays per PE-cycle. PE-cycles per CPU second = PEs x cycles / CPU
seconds (PEs: ``px x py``, ``p x p`` for SUMMA, ``pes`` for the one-row kinds; cycles: the
run's ``cycles`` metric). The cycles and ``correct`` are printed too: a speed change must leave
them alone (the conformance suite and the digests hold that bit for bit).

The spmv points: ``spmv-poisson`` (the 2-D Poisson stencil, n = (2N)^2 rows), ``spmv-powerlaw``
(the Laplacian of a Barabási-Albert graph, the issue's large power-law matrix: n = (2N)^2 rows,
as many as the Poisson point's; until 2026-11-27 this name was the small one) and
``spmv-powerlaw-small`` (the same generator at n = 64N: one row per PE, the point the earlier
tables of docs/wafer/performance.md give as "spmv power law", kept so that row stays comparable).

Run: ``python bench/kinds_bench.py [--sizes 16 64] [--only spmv-poisson ...] [--list] [--ir]``.
The machine is shared: compare CPU seconds, within one session. ``--ir`` runs each child under
``valgrind --tool=cachegrind --cache-sim=no`` and prints the instructions it executed (``Ir``,
the whole child: the interpreter's start and the imports, about 1.6 G, included), the child
with a steady run-loop clock and one BLAS thread (``bench/steady.py``): the same figure at any
load, so small changes show where CPU seconds on a busy host cannot (about 40
times slower, so its CPU seconds and rates mean nothing; valgrind must be installed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import steady  # (bench/, beside this file)

#: name -> (scenario, overrides at side N); N is the mesh side (16 or 64).
POINTS: dict[str, tuple[str, object]] = {
    "spmv-poisson": (
        "spmv",
        lambda n: {"matrix": "poisson2d", "n": (2 * n) ** 2, "px": n, "py": n, "iterations": 1},
    ),
    # the "large" power-law matrix: as many rows as the Poisson point's
    "spmv-powerlaw": (
        "spmv",
        lambda n: {
            "matrix": "laplacian",
            "graph": "barabasi_albert",
            "n": (2 * n) ** 2,
            "px": n,
            "py": n,
            "iterations": 1,
        },
    ),
    # the former point (one row per PE and 64 rows a PE row: a short run whose build and
    # fixed costs weigh), kept so that the earlier tables' row stays comparable
    "spmv-powerlaw-small": (
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
    return int(cfg.get("pes", 1))


def run_point(scenario: str, sets: dict, *, ir: bool = False) -> tuple[dict, float, int | None]:
    """Metrics, CPU seconds of ``run_kind`` and, with ``ir``, the child's instructions."""
    cmd = [sys.executable, __file__, "--child", scenario, json.dumps(sets)]
    if ir:
        cmd += ["--steady"]
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
               "--cachegrind-out-file=/dev/null", *cmd]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr.strip()}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    refs = None
    if ir:
        line = next(x for x in out.stderr.splitlines() if "I   refs:" in x or "I refs:" in x)
        refs = int(line.split(":")[-1].replace(",", "").strip())
    return got["metrics"], got["cpu_s"], refs


def child(scenario_name: str, sets_json: str, *, steady_run: bool = False) -> None:
    """In the child: resolve the scenario with the overrides, time ``run_kind`` (with
    ``steady_run``, for counted instructions: ``bench/steady.py``)."""
    if steady_run:
        steady.one_blas_thread()
    from runner import scenario

    if steady_run:
        steady.steady_clock()

    sets = json.loads(sets_json)
    sc = scenario.find(scenario_name)
    params = scenario.resolve_params(sc, [f"{k}={v}" for k, v in sets.items()])
    t0 = time.process_time()
    metrics = scenario.run_kind(sc.kind.name, params)
    cpu = time.process_time() - t0
    keep = {k: metrics[k] for k in ("cycles", "correct") if k in metrics}
    keep["config"] = {
        k: v for k, v in dataclass_dict(params).items() if k in ("px", "py", "p", "pes")
    }
    print(json.dumps({"metrics": keep, "cpu_s": cpu}))


def dataclass_dict(params: object) -> dict:
    import dataclasses

    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16])
    ap.add_argument("--only", nargs="+", choices=sorted(POINTS), default=None)
    ap.add_argument("--list", action="store_true", help="print the points' commands and stop")
    ap.add_argument("--ir", action="store_true", help="count instructions under valgrind")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--steady", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child, steady_run=args.steady)
        return
    names = args.only or list(POINTS)
    print(f"{'point':<16} {'N':>3} {'PEs':>6} {'cycles':>10} {'CPU s':>8} "
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
            m, cpu, refs = run_point(scenario, sets, ir=args.ir)
            wall = time.perf_counter() - t0
            pes = pes_of(m)
            rate = pes * m["cycles"] / cpu / 1e6
            extra = f"  Ir {refs:,}" if refs is not None else ""
            print(f"{name:<16} {n:>3} {pes:>6} {m['cycles']:>10,} {cpu:>8.2f} "
                  f"{rate:>14.2f} {m.get('correct')}  (wall {wall:.1f} s){extra}",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
