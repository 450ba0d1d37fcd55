"""What every TPU workload kind shares: the slice parameters, building a slice, test data, bf16.

A TPU run is built in two clock domains: ``ici`` (the links; ``ici.clock_hz``, 1 GHz by default,
so a link cycle is a nanosecond) and ``tpu`` (the TensorCores' clock, derived per generation in
:mod:`tpu.chips`). Every time is converted through its domain; metrics in seconds come from the
time base (exact fractions).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from runner import registry
from simcore.component import Component
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import Simulation
from tpu.chips import ChipSpec, chip
from tpu.config import IciConfig
from tpu.network import IciNetwork
from tpu.topology import Slice, parse_shape

DTYPES = {"bf16": 2, "f32": 4}
#: payload=real holds every chip's arrays in this process: above this many bytes of float32
#: values in total, use payload=size.
REAL_LIMIT_BYTES = 1 << 31


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceParams(registry.ScenarioParams):
    """A slice of a TPU pod: generation, shape, links."""

    chip: str = param("v5e", "TPU generation: v3, v4p, v5p, v5e, v6e")
    topology: str = param("4x4", "slice shape, X x Y (2-D chips) or X x Y x Z (v4p, v5p)")
    slices: int = param(
        1, "slices joined over DCN; above 1 the chips gain a leading axis 's'", min=1, max=64
    )
    ici: IciConfig = section(IciConfig, "the ICI links (and DCN between slices)")

    @property
    def spec(self) -> ChipSpec:
        return chip(self.chip)

    @property
    def shape(self) -> tuple[int, ...]:
        return parse_shape(self.topology)

    def slice(self) -> Slice:
        return Slice(self.spec, self.shape, slices=self.slices)

    def check(self) -> None:
        self.slice()


def parse_axes(topo: Slice, text: str, key: str = "axes") -> tuple[int, ...]:
    if not text:
        raise ConfigError(key, text, "names no axis", allowed="x, y, z or a combination, e.g. xy")
    axes = tuple(topo.axis_index(a, key) for a in text)
    if len(set(axes)) != len(axes):
        raise ConfigError(key, text, "names an axis twice", allowed="each axis at most once")
    return axes


def build_slice(sim: Simulation, p: SliceParams) -> tuple[Component, Slice, IciNetwork]:
    """The pod's top component (``ici`` domain), the slice and its network."""
    dom = sim.domain("ici", p.ici.clock_hz)
    top = Component(sim, "pod", domain=dom)
    topo = p.slice()
    return top, topo, IciNetwork(top, topo, p.ici)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), returned as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded & np.uint32(0xFFFF0000)).view(np.float32)


def small_ints(rng: np.random.Generator, n: int) -> np.ndarray:
    """Test data: integers in -2..2 as float32, exact in bf16 and in every float32 sum here."""
    return rng.integers(-2, 3, size=n).astype(np.float32)


def seconds(sim: Simulation, ticks: int) -> float:
    return float(sim.timebase.to_seconds(ticks))  # type: ignore[arg-type]


def link_utilisation(net: IciNetwork, end_ticks: int) -> float:
    """Mean busy fraction of the link directions that carried traffic, over the run."""
    used = net.used_links()
    if not used or end_ticks <= 0:
        return 0.0
    return sum(lk.busy_ticks for lk in used) / (len(used) * end_ticks)


#: Host memory of one built component (a link, a chip's HBM, VMEM, MXU, DMA or core: the
#: Python objects and their SimPy queues; bytes, rounded up from a tracemalloc of the builds).
COMPONENT_BYTES = 4_000


def network_components(topo: Slice) -> int:
    """Components :class:`IciNetwork` makes for ``topo``: itself, one per link direction, and the
    shared DCN stages (a chip's PCIe out and in, a host's NIC out and in) the DCN hops use."""
    edges = list(topo.edges())
    stages = set()
    for e in edges:
        if topo.is_dcn(e.axis):
            stages |= {("pcie-out", e.src), ("nic-out", topo.host_of(e.src)),
                       ("nic-in", topo.host_of(e.dst)), ("pcie-in", e.dst)}  # fmt: skip
    return 1 + len(edges) + len(stages)


def footprint(
    p: SliceParams, chip_components: int, data_bytes: int, size_key: str
) -> registry.Footprint:
    """A slice build: the pod, its network, ``chip_components`` per chip, one workload
    component (the collective, transfer or program), and ``data_bytes`` of arrays."""
    topo = p.slice()
    n = 1 + network_components(topo) + chip_components * topo.chips + 1
    return registry.Footprint(n, n * COMPONENT_BYTES + data_bytes, size_key)
