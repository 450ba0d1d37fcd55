"""How big a wafer build is, estimated from a scenario's parameters before building.

A built PE (router, compute engine, task table, SRAM model and their Python objects) takes about
:data:`PE_BYTES` of host memory before its data; the data a program places in SRAM is stored as
numpy arrays on top. The host also keeps the scenario's inputs and, after the run, the reference
result that checks the simulated one. Measured with ``tracemalloc`` over the build
(``python bench/footprint_bench.py``): summa P = 32 (1,024 PEs) Mt = 14, 85 kB per PE; Mt = 48,
133 kB per PE (46 kB of it data); ws-matmul on 32 x 32 PEs, 72 kB; wse-bcast on 256 PEs, 70 kB.
"""

from __future__ import annotations

from workloads import registry

#: Host memory of one built PE without its data (bytes; the largest measured, rounded up).
PE_BYTES = 90_000
WORD_BYTES = 4


def wafer(
    pes: int, data_bytes_per_pe: int, host_bytes: int, size_key: str, edge_ports: int = 0
) -> registry.Footprint:
    """A wafer build of ``pes`` PEs (one component each, plus the wafer and its edge ports)."""
    return registry.Footprint(
        components=pes + 1 + edge_ports,
        bytes=pes * (PE_BYTES + data_bytes_per_pe) + host_bytes,
        size_key=size_key,
    )
