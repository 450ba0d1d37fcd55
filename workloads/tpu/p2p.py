"""``tpu-p2p``: one transfer between two chips of a slice, routed over the torus.

The message (real numpy data, or byte counts with ``payload=size``) is split evenly, by default
(``paths = 0``), over one minimal path through each of the source's ports that leads towards the
destination (a chip's DMA engines drive a transfer through every useful port: see
docs/tpu/hardware.md); ``paths = 1`` keeps the dimension-order route (x, then y, then z; the
shorter way round on a wrapped axis); ``paths = n`` splits it over up to ``n`` minimal paths,
those leaving the source by different ports first. Each part is a :class:`tpu.network.Flow`:
packets cut through the chips on the way.

Metrics: ``time_s`` when the last byte arrives, ``first_byte_s`` when the first packet does,
``hops`` of the longest path used, ``paths`` used, ``correct`` (received bytes equal sent).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from runner import registry
from simcore.clock import Ticks
from simcore.component import Component
from simcore.config import param
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from simcore.tracing import TraceLevel
from tpu.network import Flow, IciNetwork, Packet
from tpu.slice import COORD_ALLOWED, SliceParams, build_slice, link_utilisation
from tpu.topology import Coord, Slice
from workloads.tpu import models
from workloads.tpu.common import footprint as common_footprint
from workloads.tpu.common import seconds


@dataclasses.dataclass(frozen=True, kw_only=True)
class P2pParams(SliceParams):
    src: str = param("0,0", "source chip coordinates", allowed=COORD_ALLOWED)
    dst: str = param(
        "3,3", "destination chip coordinates", allowed=COORD_ALLOWED + "; not the source"
    )
    bytes: int = param(17_000_000, "message size", min=1)
    paths: int = param(
        0,
        "0: split over one minimal path through each of the source's ports that leads towards "
        "the destination (as DMA engines do); 1: the dimension-order route only; n: split over "
        "up to n minimal paths",
        min=0, max=64,
    )  # fmt: skip
    payload: str = param(
        "real", "real: numpy bytes move; size: byte counts only, same timing",
        choices=("real", "size"),
    )  # fmt: skip

    def check(self) -> None:
        topo = self.slice()
        src = topo.parse_coord(self.src, "src")
        dst = topo.parse_coord(self.dst, "dst")
        if src == dst:
            raise ConfigError(
                "dst", self.dst, "is the source chip", allowed="any other chip of the slice"
            )
        if self.bytes > topo.spec.hbm_bytes:
            raise ConfigError(
                "bytes", self.bytes,
                f"larger than a {topo.spec.name} chip's HBM ({topo.spec.hbm_bytes:,} bytes)",
                allowed=f"1 .. {topo.spec.hbm_bytes:,}",
            )  # fmt: skip


def chosen_paths(p: P2pParams, topo: Slice) -> list[list[Coord]]:
    src, dst = topo.parse_coord(p.src, "src"), topo.parse_coord(p.dst, "dst")
    if p.paths == 0:
        return topo.port_paths(src, dst)
    if p.paths == 1:
        return [topo.route(src, dst)]
    return topo.minimal_paths(src, dst)[: p.paths]


class Transfer(Component):
    """Starts the parts of the message at time 0; gathers what arrives at the destination.

    The parts' flows are made when the run starts, not at build: a flow reads the trace level
    when it is made, and the runner opens the trace after the build (so, made at build, an
    ``ops`` or ``detail`` trace would hold none of the transfer's packets or messages)."""

    def __init__(self, parent: Component, net: IciNetwork, paths: list, p: P2pParams) -> None:
        super().__init__(parent, "transfer")
        self.net = net
        self.paths = paths
        self.nbytes = p.bytes
        self.data = None
        if p.payload == "real":
            self.data = self.rng.integers(0, 256, size=p.bytes, dtype=np.uint8)
            self.received = np.zeros(p.bytes, np.uint8)
        self.flows: list[Flow] = []

    def _land(self, flow: Flow, ch: Packet) -> bool:
        if ch.data is not None and ch.hop == flow.hops:
            lo = flow.tag + ch.lo
            self.received[lo : lo + len(ch.data)] = ch.data
        return True

    def start(self) -> None:
        cuts = [i * self.nbytes // len(self.paths) for i in range(len(self.paths) + 1)]
        for i, path in enumerate(self.paths):
            lo, hi = cuts[i], cuts[i + 1]
            part = None if self.data is None else self.data[lo:hi]
            flow = Flow(
                self.net, path, hi - lo, data=part, itemsize=1, visit=self._land,
                done=self._part_done, name="p2p", tag=lo,
            )  # fmt: skip
            self.flows.append(flow)
        self.start_ticks = self.env.now
        for f in self.flows:
            f.start()

    def _part_done(self, flow: Flow) -> None:
        """One slice per part on the transfer's track (``ops`` and finer): from the start to its
        last byte at the destination; its packets' and per-hop messages' records are the
        links' (``ici`` at ``detail``, ``ici_msg`` at ``ops``)."""
        if self.sim.trace_level >= TraceLevel.OPS:
            i = self.flows.index(flow)
            self.trace(
                "p2p", f"part {i}", self.start_ticks, self.env.now - self.start_ticks,
                bytes=flow.nbytes, hops=flow.hops, packets=flow.npackets, flow=flow.id,
                route=">".join(",".join(map(str, c)) for c in flow.path),
            )  # fmt: skip

    def pending(self) -> str | None:
        if not self.flows:
            return "the transfer has not started"
        left = sum(f.npackets - f.arrived for f in self.flows)
        return f"{left} packet(s) not yet at the destination" if left else None


@dataclasses.dataclass
class Handle:
    topo: Slice
    net: IciNetwork
    transfer: Transfer


def build(sim: Simulation, p: P2pParams) -> Handle:
    top, topo, net = build_slice(sim, p)
    return Handle(topo, net, Transfer(top, net, chosen_paths(p, topo), p))


def metrics(sim: Simulation, p: P2pParams, h: Handle, result: RunResult) -> dict[str, Any]:
    flows = h.transfer.flows
    last = max(f.last_arrival for f in flows)
    first = min(f.first_arrival for f in flows if f.first_arrival >= 0)
    correct = None
    if h.transfer.data is not None:
        correct = bool(np.array_equal(h.transfer.received, h.transfer.data))
    m = model(p)
    t = seconds(sim, last)
    return {
        "time_s": t,
        "cycles": h.net.domain.cycle_at(Ticks(last)),  # of the ICI links' clock
        "first_byte_s": seconds(sim, first),
        "hops": max(f.hops for f in flows),
        "paths": len(flows),
        "correct": correct,
        "route": " | ".join(">".join(",".join(map(str, c)) for c in f.path) for f in flows),
        "link_utilisation": link_utilisation(h.net, last),
        "model_time_s": m["time_s"],
        "model_first_byte_s": m["first_byte_s"],
        "model_error_pct": 100.0 * (t - m["time_s"]) / m["time_s"],
    }


def model(p: P2pParams) -> dict[str, Any]:
    topo = p.slice()
    paths = chosen_paths(p, topo)
    dcn = max(sum(a[0] != b[0] for a, b in itertools.pairwise(x)) for x in paths)
    return models.p2p_time(
        p.bytes, max(len(x) - 1 for x in paths), len(paths), topo.spec,
        hop_latency_s=p.ici.hop_latency_ns * 1e-9, packet_bytes=p.ici.packet_bytes,
        link_bytes_per_s=p.ici.link_bytes_per_s, dcn_hops=dcn if topo.dcn_axis else 0,
        pcie_bytes_per_s=p.ici.pcie_bytes_per_s, dcn_bytes_per_s=p.ici.dcn_bytes_per_s,
        dcn_latency_s=p.ici.dcn_latency_ns * 1e-9,
    )  # fmt: skip


def footprint(p: P2pParams) -> registry.Footprint:
    """The network and, with a real payload, the message at the source, in flight and at the
    destination."""
    return common_footprint(p, 0, 3 * p.bytes if p.payload == "real" else 0, "bytes")


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-p2p",
            summary="one transfer between two chips of a TPU slice, routed over the torus",
            params=P2pParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
