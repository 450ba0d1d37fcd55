"""``link-chain``: a source, a chain of channels with relays, and a rate-limited sink.

The smallest end-to-end exercise of the kernel: items (real float64 values drawn from the
source's seeded stream) cross ``stages`` channels, each with the same latency, width, capacity and
same-cycle rule, and a sink takes one item every ``sink_interval_cycles`` cycles. Back-pressure
from the sink or from a link's credit loop throttles the whole chain; nothing is dropped, and the
sink's checksum must equal the source's (``correct``).

The analytical model beside it (never used for timing): the first item needs ``stages x latency``
cycles; after that the chain delivers at the slowest rate of

- a link's credit loop: ``capacity / (latency + 1)`` items per cycle (``capacity / max(latency, 1)``
  for a pipe link, unlimited for a bypass pipe link), capped by ``items_per_cycle``;
- the sink: ``1 / sink_interval_cycles``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np

from runner import registry
from simcore.component import Component
from simcore.config import param
from simcore.sim import RunResult, Simulation
from simcore.tracing import TraceLevel


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinkChainParams(registry.ScenarioParams):
    stages: int = param(4, "number of channels in the chain", min=1, max=256)
    items: int = param(1000, "items the source sends", min=1, max=10_000_000)
    latency_cycles: int = param(2, "latency of each channel", min=0, max=10_000)
    capacity: int = param(4, "slots (credits) of each channel", min=1, max=4096)
    items_per_cycle: int = param(1, "items each channel accepts per cycle", min=1, max=64)
    pipe: bool = param(False, "a slot freed in a cycle is reusable in the same cycle")
    sink_interval_cycles: int = param(
        1, "the sink takes one item every N cycles", min=1, max=10_000
    )
    clock_hz: int = param(1_000_000_000, "clock of the whole chain", min=1, max=10**12)


class Source(Component):
    def __init__(self, parent: Any, name: str, *, items: int, domain: Any) -> None:
        super().__init__(parent, name, domain=domain)
        self.out = self.out_port("out")
        self.items = items
        self.checksum = 0.0

    def start(self) -> None:
        self.process(self._run(), "send")

    def _run(self) -> Any:
        values = self.rng.standard_normal(self.items)
        self.checksum = float(np.sum(values))
        detail = self.sim.trace_level >= TraceLevel.DETAIL
        for i, v in enumerate(values.tolist()):
            t0 = self.env.now
            yield self.out.put(v)
            self.stats["sent"] += 1
            if detail:
                self.trace("wavelet", "send", t0, self.env.now - t0, flow_out=i, index=i)


class Relay(Component):
    def __init__(self, parent: Any, name: str) -> None:
        super().__init__(parent, name)
        self.inp = self.in_port("in")
        self.out = self.out_port("out")

    def start(self) -> None:
        self.process(self._run(), "forward", daemon=True)

    def _run(self) -> Any:
        inp, out = self.inp, self.out
        while True:
            item = yield inp.get()
            yield out.put(item)
            self.stats["forwarded"] += 1


class Sink(Component):
    def __init__(self, parent: Any, name: str, *, items: int, interval_cycles: int) -> None:
        super().__init__(parent, name)
        self.inp = self.in_port("in")
        self.items = items
        self.interval_cycles = interval_cycles
        self.first_cycle = -1
        self.last_cycle = -1
        self.checksum = 0.0

    def start(self) -> None:
        self.process(self._run(), "receive")

    def _run(self) -> Any:
        gap = self.domain.ticks(self.interval_cycles)
        detail = self.sim.trace_level >= TraceLevel.DETAIL
        total = 0.0
        for i in range(self.items):
            t0 = self.env.now
            total += yield self.inp.get()
            now = self.env.now
            if self.first_cycle < 0:
                self.first_cycle = self.cycle
            if detail:
                self.trace("wavelet", "receive", t0, now - t0, flow_in=i, index=i)
            self.stats["received"] += 1
            if i + 1 < self.items:
                yield self.env.timeout(gap)
        self.last_cycle = self.cycle
        self.checksum = total
        if self.sim.trace_level >= TraceLevel.SUMMARY:
            self.trace("run", "sink_done", self.env.now, 0, phase="instant", items=self.items)

    def pending(self) -> str | None:
        left = self.items - self.stats["received"]
        return f"{left} item(s) not yet received" if left else None


@dataclasses.dataclass
class Chain:
    source: Source
    sink: Sink
    channels: list


def build(sim: Simulation, p: LinkChainParams) -> Chain:
    dom = sim.domain("chain", p.clock_hz)
    top = Component(sim, "chain", domain=dom)
    source = Source(top, "source", items=p.items, domain=dom)
    sink = Sink(top, "sink", items=p.items, interval_cycles=p.sink_interval_cycles)
    hops = [source] + [Relay(top, f"relay[{i}]") for i in range(p.stages - 1)] + [sink]
    channels = [
        sim.connect(
            a.ports["out"],
            b.ports["in"],
            latency_cycles=p.latency_cycles,
            capacity=p.capacity,
            items_per_cycle=p.items_per_cycle,
            pipe=p.pipe,
            name=f"chain/link[{i}]",
        )
        for i, (a, b) in enumerate(itertools.pairwise(hops))
    ]
    return Chain(source, sink, channels)


def metrics(sim: Simulation, p: LinkChainParams, chain: Chain, result: RunResult) -> dict:
    cycles = chain.sink.last_cycle + 1
    span = chain.sink.last_cycle - chain.sink.first_cycle
    m = model(p)
    return {
        "time_s": cycles / p.clock_hz,
        "cycles": cycles,
        "first_item_cycles": chain.sink.first_cycle,
        "throughput_items_per_cycle": (p.items - 1) / span if span > 0 else float(p.items),
        "blocked_puts": sum(c.blocked_puts for c in chain.channels),
        "received_items": chain.sink.stats["received"],
        "correct": math.isclose(chain.source.checksum, chain.sink.checksum, abs_tol=1e-9),
        "model_time_s": m["time_s"],
        "model_cycles": m["cycles"],
        "model_error_pct": 100.0 * (cycles - m["cycles"]) / m["cycles"],
    }


def link_rate(p: LinkChainParams) -> float:
    """Sustained items per cycle through one link of the chain (credit loop and width)."""
    if p.pipe:
        loop = p.capacity / p.latency_cycles if p.latency_cycles else math.inf
    else:
        loop = p.capacity / (p.latency_cycles + 1)
    return min(float(p.items_per_cycle), loop)


def model(p: LinkChainParams) -> dict:
    rate = min(link_rate(p), 1.0 / p.sink_interval_cycles)
    first = p.stages * p.latency_cycles
    cycles = first + (p.items - 1) / rate + 1
    return {
        "time_s": cycles / p.clock_hz,
        "cycles": cycles,
        "first_item_cycles": first,
        "throughput_items_per_cycle": rate,
    }


VALIDATION_POINTS = (
    dict(stages=4, latency_cycles=2, capacity=2),  # credit-loop bound: 2/3
    dict(stages=4, latency_cycles=2, capacity=8),  # full rate
    dict(stages=8, latency_cycles=1, capacity=4, pipe=True),
    dict(stages=3, latency_cycles=3, capacity=8, items_per_cycle=2),  # width 2
    dict(stages=6, latency_cycles=4, capacity=16, sink_interval_cycles=3),  # sink bound
    dict(stages=2, latency_cycles=0, capacity=1),  # bypass, 1 slot
)


def _validate(runner: registry.Runner) -> list[registry.ValidationRow]:
    params = [LinkChainParams(items=2000, **point) for point in VALIDATION_POINTS]
    runs = runner("link-chain", params)
    rows = []
    for point, m in zip(VALIDATION_POINTS, runs, strict=True):
        label = " ".join(f"{k}={v}" for k, v in point.items())
        rows.append(
            registry.ValidationRow(
                "link-chain", label, m["cycles"], m["model_cycles"], unit="cycles"
            )
        )
    return rows


def footprint(p: LinkChainParams) -> registry.Footprint:
    """The chain, a source, ``stages - 1`` relays and a sink (about 5 kB each with their
    channels) and the source's ``items`` values (float64, and their list while sent)."""
    return registry.Footprint(p.stages + 2, 5_000 * (p.stages + 2) + 40 * p.items, "items")


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="link-chain",
            summary="source -> chain of channels -> rate-limited sink (kernel exercise)",
            params=LinkChainParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="link-chain",
            summary="channel chain cycles vs the credit-loop/sink-rate model",
            run=_validate,
            tolerance=1.0,
            origin=__name__,
        )
    )
