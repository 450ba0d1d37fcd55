"""A slice of a TPU pod, assembled: its parameters and its build (the chips' ICI network).

A TPU run is built in two clock domains: ``ici`` (the links; ``ici.clock_hz``, 1 GHz by default,
so a link cycle is a nanosecond) and ``tpu`` (the TensorCores' clock, derived per generation in
:mod:`tpu.chips`). :func:`build_slice` makes the pod's top component in the ``ici`` domain, the
:class:`tpu.topology.Slice` of the parameters and its :class:`tpu.network.IciNetwork`; the
workloads (``workloads/tpu/``) put chips and collectives on it. :class:`SliceParams` is the base
of every TPU workload kind's parameters (a :class:`simcore.config.ScenarioParams`, so it has the
seed). What the network did is read back with :func:`link_utilisation`; what it will be made of,
before building, with :func:`network_components`.
"""

from __future__ import annotations

import dataclasses

from simcore.component import Component
from simcore.config import ScenarioParams, param, section
from simcore.errors import ConfigError
from simcore.sim import Simulation
from tpu.chips import CHIPS, ChipSpec, chip
from tpu.config import IciConfig
from tpu.network import IciNetwork
from tpu.topology import Slice, parse_shape

#: What ``topology``, a workload's ``axes`` and a chip's coordinates may be (``wafersim params``;
#: the checks in :mod:`tpu.topology` say the same, with the slice's own sizes).
SHAPE_ALLOWED = (
    "X x Y (v3, v5e, v6e) or X x Y x Z (v4p, v5p), each axis 1 .. the pod's on it, e.g. 4x4 or "
    "4x4x8"
)
AXES_ALLOWED = "the slice's axes (x, y, z; s: across slices), each at most once, e.g. x or xy"
COORD_ALLOWED = "a chip of the slice: one index per axis, 0 .. its size - 1, e.g. 0,0 or 0,0,0"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceParams(ScenarioParams):
    """A slice of a TPU pod: generation, shape, links."""

    chip: str = param("v5e", "TPU generation", allowed=", ".join(CHIPS))
    topology: str = param(
        "4x4", "slice shape: chips along each axis of the torus", allowed=SHAPE_ALLOWED
    )
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
    """The axes of ``topo`` named by ``text`` (``x``, ``xy``, ``s``...), each at most once; a
    bad name is a :class:`ConfigError` on the parameter ``key``."""
    if not text:
        raise ConfigError(key, text, "names no axis", allowed=AXES_ALLOWED)
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


def link_utilisation(net: IciNetwork, end_ticks: int) -> float:
    """Mean busy fraction of the link directions that carried traffic, over the run."""
    used = net.used_links()
    if not used or end_ticks <= 0:
        return 0.0
    return sum(lk.busy_ticks for lk in used) / (len(used) * end_ticks)


def network_components(topo: Slice) -> int:
    """Components :class:`IciNetwork` makes for ``topo``: itself, one per link direction, and the
    shared DCN stages (a chip's PCIe out and in, a host's NIC out and in) the DCN hops use.
    Counted without making the links: along an axis of ``n > 1`` chips each line of chips has
    ``2 (n - 1)`` link directions, and two more if it wraps (an axis of 2 that wraps has one link
    pair); between slices every chip sends and receives over DCN, so every chip has both PCIe
    stages and every host both NIC stages."""
    links = 0
    for n, wrap in zip(topo.shape, topo.wrap, strict=True):
        if n > 1:
            links += topo.chips // n * (2 * (n - 1) + (2 if wrap and n > 2 else 0))
    stages = 0
    if topo.dcn_axis:
        hosts = {topo.host_of(c) for c in topo.coords}
        stages = 2 * topo.chips + 2 * len(hosts)
    return 1 + links + stages
