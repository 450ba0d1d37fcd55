"""A SwarmX broadcast-reduce node as a component: broadcast down, sum-reduce up.

Recipe: processes and channels (transaction level, one transaction per plan chunk), in SwarmX's
clock domain. Each port of a node is a bundle of ``lanes`` network interfaces of
``interface_bits_per_s`` (100 Gb/s): an :class:`Interface`, a FIFO serialiser the node holds for
``ceil(bytes · 8 · f / (lanes · rate))`` cycles per chunk it sends. Latency (cable, switch)
lives on the links the workload connects.

- **Broadcast** (down): a chunk from the parent is sent on every child port; the child
  interfaces serialise concurrently, and the chunk goes on when all have (one copy to each
  child; the slowest child's back-pressure holds the stream, as a broadcast must).
- **Reduce** (up): for each gradient chunk, one from every child (in plan order), summed
  element by element in FP32 (real data: the reduced gradient *is* the sum of the shards), then
  serialised up. The node's adders run at line rate (spec: one add per element per child), so
  the reduction adds no time beyond the interfaces.

Store and forward at chunk granularity: a chunk crosses a node once it has fully arrived. With
chunks much smaller than a layer this is what makes the MemoryX <-> CS-2 latency grow with the
tree's depth (log N).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from simcore.clock import ClockDomain
from simcore.component import Component
from simcore.config import param
from simcore.tracing import TraceLevel


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwarmXConfig:
    """The SwarmX fabric (defaults: docs/cluster/hardware.md)."""

    clock_hz: int = param(1_000_000_000, "SwarmX's clock", min=1)
    interface_bits_per_s: float = param(100e9, "one network interface, bits/s (100 Gb/s)", min=1)
    lanes: int = param(
        12, "interfaces per port: 12 x 100 Gb/s carries one CS-2's 1.2 Tb/s", min=1, max=64
    )
    mode: str = param(
        "1:4", "node mode: one 1:4 broadcast-reduce or a pair of 1:2", choices=("1:4", "2x1:2")
    )
    link_buffer_chunks: int = param(
        2, "chunks a link holds, in flight and waiting (credit-based flow control)", min=1
    )
    link_latency_cycles: int = param(
        500, "latency of one link (cable, PHY, switch), SwarmX cycles (unknown: 0.5 us)", min=0
    )

    @property
    def port_bits_per_s(self) -> float:
        return self.lanes * self.interface_bits_per_s


class Interface:
    """A FIFO serialiser of ``bits_per_s`` in a clock domain; ``busy_ticks`` sums its use."""

    def __init__(self, name: str, domain: ClockDomain, bits_per_s: float) -> None:
        self.name = name
        self.domain = domain
        self.bytes_per_s = bits_per_s / 8
        self.free = 0
        self.busy_ticks = 0
        self.bytes = 0

    def reserve(self, now: int, nbytes: int) -> tuple[int, int]:
        """Queue ``nbytes`` at ``now``; returns the (start, end) ticks of its serialisation."""
        start = max(self.domain.next_edge(now), self.free)
        cycles = math.ceil(nbytes * self.domain.freq_hz / self.bytes_per_s) if nbytes else 0
        dur = self.domain.ticks(cycles)
        self.free = start + dur
        self.busy_ticks += dur
        self.bytes += nbytes
        return start, start + dur


def reduce_payloads(payloads: list[Any]) -> Any:
    """The element-wise FP32 sum of the children's gradient payloads (None in size-only runs)."""
    if any(p is None for p in payloads):
        return None
    total = np.asarray(payloads[0], np.float32).copy()
    for p in payloads[1:]:
        total += np.asarray(p, np.float32)
    return total


class BroadcastReduceNode(Component):
    """Ports: ``down_in``, ``up_out`` (parent side); ``down_out[i]``, ``up_in[i]`` per child.

    ``chunks``: how many chunks the plan streams; ``gradients``: how many gradient chunks come
    back (from each child)."""

    def __init__(
        self,
        parent: Any,
        name: str,
        cfg: SwarmXConfig,
        children: int,
        chunks: int,
        gradients: int,
    ) -> None:
        super().__init__(parent, name)
        self.cfg = cfg
        self.children = children
        self.chunks = chunks
        self.gradients = gradients
        self.in_port("down_in")
        self.out_port("up_out")
        for i in range(children):
            self.out_port(f"down_out[{i}]")
            self.in_port(f"up_in[{i}]")
        rate = cfg.port_bits_per_s
        self.down = [
            Interface(f"{self.path}/down[{i}]", self.domain, rate) for i in range(children)
        ]
        self.up = Interface(f"{self.path}/up", self.domain, rate)
        self.reduced = 0
        self.flow_code = len(self.sim.components)  # its ordinal: unique, deterministic

    def interfaces(self) -> list[Interface]:
        return [*self.down, self.up]

    def start(self) -> None:
        self.process(self._broadcast(), "broadcast")
        if self.gradients:
            self.process(self._reduce(), "reduce")

    def progress_count(self) -> int:
        return self.stats["broadcast"] + self.reduced

    def _broadcast(self) -> Any:
        inp = self.ports["down_in"]
        outs = [self.ports[f"down_out[{i}]"] for i in range(self.children)]
        ops = self.sim.trace_level >= TraceLevel.OPS
        for _ in range(self.chunks):
            chunk = yield inp.get()
            now = self.env.now
            spans = [iface.reserve(now, chunk.nbytes) for iface in self.down]
            end = max(e for _, e in spans)
            yield self.env.timeout(end - now)
            sent = chunk.sent_by(self.flow_code)
            if ops:
                self.trace(
                    "swarmx",
                    "broadcast",
                    spans[0][0],
                    end - spans[0][0],
                    flow_in=chunk.flow,
                    flow_out=sent.flow,
                    bytes=chunk.nbytes,
                    entry=chunk.entry.index,
                )
                self._link_counter("down_link_bytes", spans[0][0], end, chunk.nbytes)
            for out in outs:
                yield out.put(sent)
            self.stats["broadcast"] += 1

    def _reduce(self) -> Any:
        ins = [self.ports[f"up_in[{i}]"] for i in range(self.children)]
        out = self.ports["up_out"]
        ops = self.sim.trace_level >= TraceLevel.OPS
        for _ in range(self.gradients):
            parts = []
            for inp in ins:
                parts.append((yield inp.get()))
            first = parts[0]
            if any(p.entry.index != first.entry.index for p in parts):
                raise RuntimeError(f"{self.path}: children sent different gradient chunks")
            chunk = dataclasses.replace(first, payload=reduce_payloads([p.payload for p in parts]))
            start, end = self.up.reserve(self.env.now, chunk.nbytes)
            yield self.env.timeout(end - self.env.now)
            sent = chunk.sent_by(self.flow_code, back=True)
            if ops:
                # a slice ends one flow: the first child's (the others arrive the same way)
                self.trace(
                    "swarmx",
                    "reduce",
                    start,
                    end - start,
                    flow_in=first.flow,
                    flow_out=sent.flow,
                    bytes=chunk.nbytes,
                    entry=chunk.entry.index,
                    children=self.children,
                )
                self._link_counter("up_link_bytes", start, end, chunk.nbytes)
            yield out.put(sent)
            self.reduced += 1

    def _link_counter(self, name: str, start: int, end: int, nbytes: int) -> None:
        """Bytes on a link while a chunk crosses it (``nbytes`` from start to end, then 0)."""
        self.trace("link", name, start, phase="counter", value=float(nbytes))
        self.trace("link", name, end, phase="counter", value=0.0)

    def pending(self) -> str | None:
        left = self.gradients - self.reduced
        return f"{left} gradient chunk(s) not yet reduced" if left and self.gradients else None
