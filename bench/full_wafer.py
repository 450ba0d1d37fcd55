"""The full WSE-2 array (750 x 994 PEs) in one run: build time, run time, peak memory.

``python bench/wafer_bench.py --full-wafer [--point NAME] [--array WxH] [--build-only]`` runs
one point per process (so that ``ru_maxrss`` is that point's peak):

- ``spmv-poisson2d``: ``spmv`` on the 2-D Poisson stencil of a 64 x 64 grid (4,096 rows: every
  PE holds a block of 5 rows and 6 columns of A at 750 x 994);
- ``spmv-powerlaw``: ``spmv`` on a 3,976-row power-law matrix (``powerlaw``, 4 non-zeros per row
  on average);
- ``gemv``: ``gemv`` on a dense 3,976 x 3,000 matrix (a 4 x 4 block on every PE).

``--array WxH`` runs the same point on a smaller array with the same block per PE (the
matrix shrinks with the array), which is how the full array is extrapolated before it is run:
bytes per PE and build and run seconds per PE carry over. Each point reports the build (CPU
and wall seconds), one product's run (CPU and wall seconds, simulated cycles, PE-cycles per
CPU second), and the peak resident memory (``ru_maxrss``) against the kind's footprint
estimate; the build's figures are printed as soon as it is built, and a run longer than a
minute prints a progress line (simulated cycles so far) to stderr every minute. A point whose
estimate is above ``--max-gb`` (default 15: the full array's points estimate 14.0 to 14.1 GB)
or does not fit the memory available (:mod:`runner.budget`) is refused before it is built,
unless ``--no-estimate-check``. The estimates are held above the peaks measured here at
128 x 128, 256 x 256 and the full array (tests/test_full_array.py).
"""

from __future__ import annotations

import math
import os
import resource
import sys
import time
from typing import Any

from runner import budget, registry, scenario
from simcore.errors import BuildError
from simcore.sim import Progress, Simulation
from wafer.system import MAX_HEIGHT, MAX_WIDTH

#: name -> (kind, its parameters at an array of px x py PEs: the full array's block per PE).
POINTS = ("spmv-poisson2d", "spmv-powerlaw", "gemv")


def point_sets(name: str, px: int, py: int) -> tuple[str, list[str]]:
    """The kind and ``--set`` overrides of point ``name`` on a px x py array."""
    if name == "spmv-poisson2d":
        side = math.isqrt(4 * py - 1) + 1  # 64 x 64 = 4,096 rows at py = 994 (blocks of 5 rows)
        return "spmv", ["matrix=poisson2d", f"n={side * side}", "iterations=1"]
    if name == "spmv-powerlaw":
        n = 4 * max(px, py)  # 3,976 rows at py = 994
        return "spmv", ["matrix=powerlaw", f"n={n}", "degree=4", "iterations=1"]
    if name == "gemv":
        return "gemv", [f"m={4 * py}", f"n={4 * px}"]
    raise SystemExit(f"unknown point {name!r}; one of {', '.join(POINTS)}")


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(
    name: str, px: int, py: int, run: bool = True, max_gb: float = 15.0, trust: bool = False
) -> dict[str, Any]:
    kind, sets = point_sets(name, px, py)
    registry.declare_all()
    sc = scenario.find(kind)
    params = scenario.resolve_params(sc, [*sets, f"px={px}", f"py={py}"])
    est = sc.kind.footprint(params).bytes if sc.kind.footprint else 0
    if trust:
        pass  # --no-estimate-check: a projection from smaller arrays says it fits
    elif est > max_gb * 1e9:
        raise SystemExit(
            f"{name} on {px}x{py} PEs would need about {est / 1e9:.1f} GB (the kind's footprint "
            f"estimate), above --max-gb {max_gb:g}: not built (raise --max-gb on a machine "
            "that has the memory to spare)"
        )
    try:
        if not trust:
            budget.check_fits(sc.kind, params)
    except BuildError as err:
        raise SystemExit(f"{name} on {px}x{py} PEs: {err}") from None
    base = peak_rss()
    c0, w0 = time.process_time(), time.perf_counter()
    sim = Simulation(seed=params.seed, progress=Progress(after_s=60.0, every_s=60.0))  # stderr
    handle = sc.kind.build(sim, params)
    sim.check()
    out: dict[str, Any] = {
        "point": name, "array": f"{px}x{py}", "pes": px * py, "sets": " ".join(sets),
        "build_cpu_s": time.process_time() - c0, "build_wall_s": time.perf_counter() - w0,
        "estimate_bytes": est,
    }  # fmt: skip
    # The build's figures at once (a full array's run may be stopped before it ends)
    built = peak_rss()
    print(
        f"{name} on {px}x{py} PEs: built in {out['build_cpu_s']:.1f} s CPU, "
        f"{out['build_wall_s']:.1f} s wall; peak memory so far {built / 1e9:.2f} GB "
        f"({(built - base) / (px * py):,.0f} B per PE)",
        flush=True,
    )
    if run:
        c1 = time.process_time()
        result = sim.run()
        out["run_cpu_s"] = time.process_time() - c1
        out["run_wall_s"] = result.wall_s
        out["status"] = result.status
        metrics = sc.kind.metrics(sim, params, handle, result)
        out["cycles"] = metrics["cycles"]
        out["correct"] = metrics["correct"]
        out["pe_cycles_per_cpu_s"] = px * py * metrics["cycles"] / out["run_cpu_s"]
    out["peak_rss_bytes"] = peak_rss()
    out["bytes_per_pe"] = (out["peak_rss_bytes"] - base) / (px * py)
    return out


def report(m: dict[str, Any]) -> str:
    lines = [
        f"{m['point']} on {m['array']} PEs ({m['pes']:,}; {m['sets']}):",
        f"  build {m['build_cpu_s']:.1f} s CPU, {m['build_wall_s']:.1f} s wall "
        f"({1e3 * m['build_cpu_s'] / m['pes']:.3f} ms CPU per PE)",
    ]
    if "run_cpu_s" in m:
        lines.append(
            f"  run one product: {m['cycles']:,} cycles, {m['run_cpu_s']:.1f} s CPU, "
            f"{m['run_wall_s']:.1f} s wall, {m['pe_cycles_per_cpu_s']:,.0f} PE-cycles per CPU "
            f"second, correct {m['correct']} ({m['status']})"
        )
    lines.append(
        f"  peak memory (ru_maxrss) {m['peak_rss_bytes'] / 1e9:.2f} GB, "
        f"{m['bytes_per_pe']:,.0f} B per PE over the interpreter's; footprint estimate "
        f"{m['estimate_bytes'] / 1e9:.2f} GB"
    )
    return "\n".join(lines)


def main(
    point: str, array: str, build_only: bool, max_gb: float = 15.0, trust: bool = False
) -> None:
    try:
        px, py = (int(v) for v in array.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--array {array!r}: give WxH, e.g. 750x994") from None
    if not (1 <= px <= MAX_WIDTH and 1 <= py <= MAX_HEIGHT):
        raise SystemExit(f"--array {array}: the usable array is at most {MAX_WIDTH}x{MAX_HEIGHT}")
    print(report(measure(point, px, py, not build_only, max_gb, trust)), flush=True)
    # Out at once: freeing a full array's objects one by one took the interpreter minutes after
    # the report (2026-11-26); nothing is left to write.
    sys.stderr.flush()
    os._exit(0)
