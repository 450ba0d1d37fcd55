"""What every TPU workload kind shares besides the slice (:mod:`tpu.slice`): element sizes, test
data, metrics in seconds, the build's footprint.

Metrics in seconds come from the time base (exact fractions), whatever domain counted them.
"""

from __future__ import annotations

import numpy as np

from runner import registry
from simcore.sim import Simulation
from tpu.slice import SliceParams, network_components

DTYPES = {"bf16": 2, "f32": 4}
#: payload=real holds every chip's arrays in this process: above this many bytes of float32
#: values in total, use payload=size.
REAL_LIMIT_BYTES = 1 << 31


def small_ints(rng: np.random.Generator, n: int) -> np.ndarray:
    """Test data: integers in -2..2 as float32, exact in bf16 and in every float32 sum here."""
    return rng.integers(-2, 3, size=n).astype(np.float32)


def seconds(sim: Simulation, ticks: int) -> float:
    return float(sim.timebase.to_seconds(ticks))  # type: ignore[arg-type]


#: Host memory of one built component (a link, a chip's HBM, VMEM, MXU, DMA or core: the
#: Python objects and their SimPy queues; bytes, rounded up from a tracemalloc of the builds).
COMPONENT_BYTES = 4_000


def footprint(
    p: SliceParams, chip_components: int, data_bytes: int, size_key: str
) -> registry.Footprint:
    """A slice build: the pod, its network, ``chip_components`` per chip, one workload
    component (the collective, transfer or program), and ``data_bytes`` of arrays."""
    topo = p.slice()
    n = 1 + network_components(topo) + chip_components * topo.chips + 1
    return registry.Footprint(n, n * COMPONENT_BYTES + data_bytes, size_key)
