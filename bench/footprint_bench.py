"""Host memory of a build, measured, against the kinds' footprint estimates.

For a few scenarios: build (no run) under ``tracemalloc`` and print the components built, the
memory they hold, bytes per component and the kind's :class:`registry.Footprint` estimate.
The per-PE figure is where ``workloads/wafer/footprint.py``'s ``PE_BYTES`` comes from.

    python bench/footprint_bench.py
"""

from __future__ import annotations

import gc
import time
import tracemalloc

from runner import registry, scenario
from simcore.sim import Simulation

POINTS = (
    ("summa", ["p=16"]),
    ("summa", ["p=32"]),
    ("summa", ["p=32", "mt=48"]),
    ("ws-matmul", ["px=32", "py=32", "rows=256", "cols=256", "tokens=256"]),
    ("wse-bcast", ["pes=256"]),
    ("link-chain", ["stages=256"]),
)


def measure(name: str, sets: list[str]) -> str:
    sc = scenario.find(name)
    params = scenario.resolve_params(sc, sets)
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    sim = Simulation(seed=params.seed)
    sc.kind.build(sim, params)
    sim.check()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    wall = time.perf_counter() - t0
    n = len(sim.components)
    est = sc.kind.footprint(params) if sc.kind.footprint else None
    estimate = f"estimate {est.bytes / 1e6:,.1f} MB at the peak" if est else "no estimate"
    return (
        f"{name} {' '.join(sets)}: {n:,} components, {held / 1e6:,.1f} MB built "
        f"({held / n:,.0f} B each) in {wall:.2f} s (traced); {estimate}"
    )


if __name__ == "__main__":
    registry.load_all()
    for name, sets in POINTS:
        print(measure(name, sets), flush=True)
