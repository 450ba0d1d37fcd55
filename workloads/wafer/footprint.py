"""How big a wafer build is, estimated from a scenario's parameters before building.

A built PE (router, compute engine, task table, SRAM model and their Python objects) takes about
:data:`PE_BYTES` of host memory before its data; the data a program places in SRAM comes on top
(the SRAM arena maps only the pages touched). The host also keeps the scenario's inputs and,
after the run, the reference result that checks the simulated one. Measured with ``tracemalloc``
over the build (``python bench/footprint_bench.py``): summa P = 16 and 32, Mt = 14, 32 kB per
PE; Mt = 48, 80 kB (with 46 kB of data); ws-matmul on 32 x 32 PEs, 17 kB; wse-bcast on 256 PEs,
14 kB.
"""

from __future__ import annotations

from runner import registry

#: Host memory of one built PE without its data (bytes; the largest measured, rounded up).
PE_BYTES = 35_000
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
