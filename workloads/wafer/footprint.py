"""How big a wafer build is, estimated from a scenario's parameters before building.

A PE's host memory has three parts:

- an idle PE (its router, compute engine, task table, SRAM model and their Python objects, no
  program): :data:`IDLE_PE_BYTES`. Everything an idle PE could need later is made on first use
  (SRAM pages, input-queue deques, route state), which keeps a full 750 x 994 array's idle PEs
  within a few gigabytes;
- its program: the tasks, descriptors, routes and collectives a kind's PE code makes, a kind's
  ``program_bytes`` (:data:`PROGRAM_BYTES` where a kind has not measured its own);
- its data: the SRAM arena packs a built PE's buffers one after another (several PEs share a
  page; :class:`pe.memory.SramArena`), so data costs its bytes rounded up to the arena's
  64-byte unit (:func:`data_host_bytes`).

The host also keeps the scenario's inputs and, after the run, the reference result that checks
the simulated one. A kind whose per-PE figures were measured as resident memory at scale (spmv
and gemv, up to the full 750 x 994 array) adds :data:`BUILD_BYTES`, what a build holds besides
its PEs. Measured with ``tracemalloc`` over the build, and as resident memory
(``python bench/footprint_bench.py``, which prints each kind's measured bytes per PE beside its
estimate; ``python bench/wafer_bench.py --full-wafer`` at 128 x 128, 256 x 256 and the full
array; tests/test_full_array.py holds the estimates above both).
"""

from __future__ import annotations

from typing import Any

from pe.memory import SramArena
from runner import budget, registry

#: Host memory of one idle built PE (bytes): 4.3 kB measured at 64 x 64 and 128 x 128
#: (``bench/footprint_bench.py``), rounded up.
IDLE_PE_BYTES = 5_000
#: A PE's program beyond an idle PE where a kind has not measured its own (the largest measured
#: before the split: summa's 32 kB per PE with its data), rounded up.
PROGRAM_BYTES = 30_000
#: The SRAM arena's unit: a built PE's buffers take a multiple of it.
PACK_BYTES = SramArena.PACK_ALIGN
WORD_BYTES = 4
#: Resident memory a large build holds besides its PEs (the simulation, the allocator's partly
#: used arenas, the build's caches): spmv's and gemv's peaks per PE fall with the array's size
#: (19.0 kB at 128 x 128, 17.5 kB at 256 x 256, 16.2 kB at 750 x 994, bench/wafer_bench.py
#: --full-wafer), which a fixed part of about 25 MB beside 17.1 kB per PE explains; rounded up.
BUILD_BYTES = 32_000_000


def data_host_bytes(data_bytes_per_pe: int) -> int:
    """Host memory of a PE's SRAM data: its buffers (from address 0 up), packed."""
    return -(-data_bytes_per_pe // PACK_BYTES) * PACK_BYTES


def per_pe(data_bytes_per_pe: int, program_bytes: int = PROGRAM_BYTES) -> int:
    """Host bytes of one PE running a program of ``program_bytes`` on that much SRAM data."""
    return IDLE_PE_BYTES + program_bytes + data_host_bytes(data_bytes_per_pe)


def wafer(
    pes: int,
    data_bytes_per_pe: int,
    host_bytes: int,
    size_key: str,
    edge_ports: int = 0,
    *,
    program_bytes: int = PROGRAM_BYTES,
    build_bytes: int = 0,
) -> registry.Footprint:
    """A wafer build of ``pes`` PEs (one component each, plus the wafer and its edge ports),
    each running a program of ``program_bytes`` of host objects on ``data_bytes_per_pe`` of
    SRAM data, beside ``build_bytes`` of the build's own (:data:`BUILD_BYTES` where the
    per-PE figures are resident memory measured at scale)."""
    return registry.Footprint(
        components=pes + 1 + edge_ports,
        bytes=pes * per_pe(data_bytes_per_pe, program_bytes) + host_bytes + build_bytes,
        size_key=size_key,
    )


def measured_peak(kind: str, params: Any, warm: Any) -> int:
    """Host bytes at the peak of a build and run of wafer kind ``kind`` (its handle has a
    ``wafer``): Python objects (:func:`runner.budget.traced_peak`, after a run of ``warm``)
    plus the SRAM bytes of the PEs' packed buffers (mapped memory, which tracemalloc does not
    see). What :func:`wafer`'s figures are measured with (tests/test_full_array.py,
    bench/footprint_bench.py)."""
    peak, handle = budget.traced_peak(registry.KINDS[kind], params, warm)
    pes = handle.wafer.pes.values()
    return peak + sum(data_host_bytes(pe.sram.used_bytes - pe.sram.code_bytes) for pe in pes)
