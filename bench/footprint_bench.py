"""Host memory of a build, measured, against the kinds' footprint estimates.

For a few scenarios: build (no run) under ``tracemalloc`` and print the components built, the
memory they hold, bytes per component and the kind's :class:`registry.Footprint` estimate.
Then an idle wafer (no program) and the full-array kinds (``spmv``, ``gemv``) built and run,
per PE at the peak (Python objects plus the SRAM bytes of the packed buffers): where
``workloads/wafer/footprint.py``'s ``IDLE_PE_BYTES`` and the kinds' ``PROGRAM_BYTES`` come from.

    python bench/footprint_bench.py
"""

from __future__ import annotations

import gc
import time
import tracemalloc

from pe.program import Layout
from runner import registry, scenario
from simcore.sim import Simulation
from wafer.system import Wafer, WaferConfig
from workloads.wafer import footprint

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


def idle(side: int) -> str:
    gc.collect()
    tracemalloc.start()
    wafer = Wafer(Simulation(), WaferConfig(), Layout(side, side))
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (
        f"idle wafer {side} x {side}: {held / len(wafer.pes):,.0f} B per PE "
        f"(estimate {footprint.IDLE_PE_BYTES:,})"
    )


#: (kind, parameters) built and run: bytes per PE at the peak against the estimate.
RUN_POINTS = (
    ("spmv", ["matrix=poisson2d", "n=4096", "px=32", "py=32", "iterations=1"]),
    ("spmv", ["matrix=powerlaw", "n=4096", "degree=4", "px=32", "py=32", "iterations=1"]),
    ("gemv", ["m=128", "n=128", "px=32", "py=32"]),
)


def peak_per_pe(name: str, sets: list[str]) -> str:
    sc = scenario.find(name)
    params = scenario.resolve_params(sc, sets)
    warm = scenario.resolve_params(sc, ["px=2", "py=2"])  # (imports and caches: not counted)
    peak = footprint.measured_peak(name, params, warm)
    pes = params.px * params.py
    est = sc.kind.footprint(params).bytes - footprint.BUILD_BYTES
    return (
        f"{name} {' '.join(sets)}: {peak / pes:,.0f} B per PE at the peak (with the host's "
        f"inputs); estimate without the build's fixed part {est / pes:,.0f}"
    )


if __name__ == "__main__":
    registry.load_all()
    for name, sets in POINTS:
        print(measure(name, sets), flush=True)
    for side in (64, 128):
        print(idle(side), flush=True)
    for name, sets in RUN_POINTS:
        print(peak_per_pe(name, sets), flush=True)
