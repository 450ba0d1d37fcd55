"""Will a build fit in memory? Checked from the parameters alone, before anything is built.

Each workload kind may estimate its footprint (:class:`registry.Footprint`: components, bytes
at the peak, the parameter that sets the size). :func:`check_fits` compares the estimate with the
memory the machine has available (``MemAvailable`` of ``/proc/meminfo``, else the free physical
pages) and refuses a build that would not fit, naming the estimate, what is available and the
largest value of the size parameter that fits, instead of building for minutes and then being
killed by the kernel's out-of-memory handler.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import tracemalloc
from typing import Any

from runner import registry
from simcore.errors import BuildError

#: Share of the available memory a build may plan to use (the rest: the interpreter, the OS).
USABLE = 0.9


def available_bytes() -> int | None:
    """Memory available to a new allocation now, or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gb(n: float) -> str:
    """``n`` bytes, readable: ``1.5 GB``, ``300 MB``."""
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.0f} MB"


def largest_fitting(kind: registry.WorkloadKind, params: Any, limit: int) -> int | None:
    """The largest value of the footprint's ``size_key`` (others fixed) whose estimate is
    within ``limit`` bytes, or None if even its smallest allowed value does not fit."""
    assert kind.footprint is not None
    key = kind.footprint(params).size_key
    field = next(f for f in dataclasses.fields(params) if f.name == key)
    lo = int(field.metadata.get("min") or 1)
    hi = int(getattr(params, key))

    def fits(v: int) -> bool:
        assert kind.footprint is not None
        return kind.footprint(dataclasses.replace(params, **{key: v})).bytes <= limit

    if not fits(lo):
        return None
    while lo < hi:  # the estimate grows with the size: bisect
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def check_bytes(what: str, needed: int, available: int | None = None) -> None:
    """Raise :class:`BuildError` if ``what``, estimated at ``needed`` bytes at its peak, would not
    fit in the memory available (a sub-run's budget check)."""
    free = available_bytes() if available is None else available
    if free is None or needed <= USABLE * free:
        return
    raise BuildError(
        f"{what} would need about {gb(needed)} of memory but {gb(free)} is available: "
        "lower the sizes of the run, or free memory"
    )


def check_fits(kind: registry.WorkloadKind, params: Any, available: int | None = None) -> None:
    """Raise :class:`BuildError` if ``kind`` built with ``params`` would not fit in memory."""
    if kind.footprint is None:
        return
    fp = kind.footprint(params)
    free = available_bytes() if available is None else available
    if free is None or fp.bytes <= USABLE * free:
        return
    limit = int(USABLE * free)
    msg = (
        f"{kind.name} would need about {gb(fp.bytes)} of memory ({fp.components:,} components) "
        f"but {gb(free)} is available"
    )
    if fp.size_key:
        best = largest_fitting(kind, params, limit)
        value = getattr(params, fp.size_key)
        if best is not None:
            msg += (
                f"; the largest {fp.size_key} that fits is {best:,} (config key "
                f"'{fp.size_key}' = {value:,}): lower {fp.size_key}"
            )
        else:
            msg += f"; lower the sizes (config key '{fp.size_key}' = {value:,} and others)"
    raise BuildError(msg + ", or free memory")


def traced_peak(kind: registry.WorkloadKind, params: Any, warm: Any) -> tuple[int, Any]:
    """Python objects at the peak of building, checking and running ``kind`` with ``params``
    (``tracemalloc``), and the built handle: how a kind's footprint estimate is measured
    (tests/test_full_array.py, bench/footprint_bench.py). A run with ``warm`` (a small
    version of the same) comes first, so that the modules and caches it makes are not
    counted. Memory the kind maps itself (a wafer's SRAM arena) is not traced: the caller
    adds it from the handle."""
    from simcore.sim import Simulation  # (here: the CLI's start imports this module, not simpy)

    small = Simulation(seed=warm.seed)
    kind.build(small, warm)
    small.run()
    gc.collect()
    tracemalloc.start()
    try:
        sim = Simulation(seed=params.seed)
        handle = kind.build(sim, params)
        sim.check()
        sim.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, handle
