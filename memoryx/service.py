"""MemoryX as a component: tiers, a streaming reader, an I/O port and the optimizer, as processes.

Recipe: processes and channels (transaction level), in MemoryX's own clock domain. One
transaction is one chunk of the execution plan (:mod:`memoryx.plan`).

- **Tiers** (:class:`Server`): DRAM and flash are each one FIFO bandwidth server
  (``*_bytes_per_s``); a tensor lives in one tier (:func:`memoryx.store.place`). The reader's
  streaming reads and the updater's read-modify-writes queue for the same tier.
- **Reader** walks the plan in order. Before a chunk of step s+1 it waits for the updates of step
  s it depends on (``Entry.needs``: the same rows of W in the forward pass, so layer 1's new
  weights stream while the backward pass still runs). It reads the chunk from its tier and puts it
  into the prefetch buffer, a channel of ``prefetch_chunks`` slots to the I/O port: the reader
  runs ahead of the link by that many chunks.
- **I/O port** serialises each chunk at ``io_bits_per_s`` onto the output link (latency lives on
  the link the workload connects).
- **Updater** takes gradient chunks in plan order from the input link and updates the dense FP32
  copy: the tier carries the optimizer's bytes per parameter and the update ALUs (one FIFO
  server of ``update_flops_per_s``) its flops, concurrently, so the update is whichever is
  slower; then it marks the chunk's update key ready. With data (``functional``), it runs the
  real optimizer (:mod:`memoryx.store`) and refreshes the FP16 CSR copy.

Left out: separate read and write bandwidths of a tier, the host network inside MemoryX.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import simpy

from memoryx.plan import Chunk, Entry
from memoryx.store import CsrTensor, DenseTensor, Optimizer, Placement, update_rows
from simcore.clock import ClockDomain
from simcore.component import Component
from simcore.config import param
from simcore.sim import Simulation
from simcore.tracing import TraceLevel

TB = 10**12


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryXConfig:
    """One MemoryX service (defaults: docs/cluster/hardware.md)."""

    clock_hz: int = param(1_000_000_000, "MemoryX's clock (its servers count its cycles)", min=1)
    dram_bytes: int = param(4 * TB, "DRAM capacity, bytes (the smallest MemoryX: 4 TB)", min=0)
    flash_bytes: int = param(12 * TB, "flash capacity, bytes (up to 2.4 PB with DRAM)", min=0)
    dram_bytes_per_s: float = param(
        600e9, "DRAM bandwidth, bytes/s (unknown; >= one CS-2's I/O)", min=1
    )
    flash_bytes_per_s: float = param(
        150e9, "flash bandwidth, bytes/s (unknown; >= one CS-2's I/O)", min=1
    )
    io_bits_per_s: float = param(1.2e12, "I/O port to SwarmX, bits/s (one CS-2's 1.2 Tb/s)", min=1)
    update_flops_per_s: float = param(
        1.5e14, "optimizer ALUs, FLOP/s (about 1,000x the I/O bandwidth in bytes/s)", min=1
    )
    prefetch_chunks: int = param(
        4, "chunks the reader may run ahead of the I/O port (prefetch buffer slots)", min=1
    )
    optimizer: str = param("sgd", "optimizer run on the dense copy", choices=("sgd", "adam"))
    lr: float = param(0.01, "learning rate", min=0.0)
    beta1: float = param(0.9, "Adam's first-moment decay", min=0.0, max=1.0)
    beta2: float = param(0.999, "Adam's second-moment decay", min=0.0, max=1.0)
    eps: float = param(1e-8, "Adam's epsilon", min=0.0)
    regrow_threshold: float = param(
        0.0,
        "0: request gradients on the weights' mask only; > 0: request all, and let a zero "
        "weight regrow when its |gradient| exceeds this",
        min=0.0,
    )

    def opt(self) -> Optimizer:
        return Optimizer(
            name=self.optimizer, lr=self.lr, beta1=self.beta1, beta2=self.beta2, eps=self.eps
        )

    def bytes_per_update(self) -> int:
        """Tier bytes an update moves per parameter: SGD reads w, g and writes w; Adam reads
        w, g, m, v and writes w, m, v; both wrote g on arrival and write the FP16 value."""
        return {"sgd": 12, "adam": 28}[self.optimizer] + 4 + 2


class Server:
    """A FIFO server of ``rate_per_s`` units per second in a clock domain: a request of
    ``amount`` units arriving at ``now`` starts when the server is free (at a clock edge) and
    holds it ``ceil(amount · f / rate)`` cycles. ``busy_ticks`` sums the time held."""

    def __init__(self, name: str, domain: ClockDomain, rate_per_s: float) -> None:
        self.name = name
        self.domain = domain
        self.rate = rate_per_s
        self.free = 0
        self.busy_ticks = 0
        self.amount = 0

    def cycles(self, amount: float) -> int:
        return math.ceil(amount * self.domain.freq_hz / self.rate) if amount > 0 else 0

    def reserve(self, now: int, amount: float) -> tuple[int, int]:
        """Queue a request; returns its (start, end) in ticks."""
        start = max(self.domain.next_edge(now), self.free)
        dur = self.domain.ticks(self.cycles(amount))
        self.free = start + dur
        self.busy_ticks += dur
        self.amount += int(amount)
        return start, start + dur


@dataclasses.dataclass
class TensorData:
    """The real copies of one tensor (functional runs)."""

    dense: DenseTensor
    csr: CsrTensor


class MemoryX(Component):
    """The MemoryX service: ``weights`` (out) streams the plan's chunks; ``grads`` (in) takes the
    wafers' reduced gradients. ``data`` holds the real tensors, or is empty (size only)."""

    def __init__(
        self,
        sim: Simulation,
        name: str,
        cfg: MemoryXConfig,
        plan: Sequence[Entry],
        placement: Placement,
        data: dict[str, TensorData] | None = None,
    ) -> None:
        super().__init__(sim, name, domain=sim.domain(name, cfg.clock_hz))
        self.cfg = cfg
        self.plan = list(plan)
        self.placement = placement
        self.data = data or {}
        self.opt = cfg.opt()
        self.tiers = {
            "dram": Server("dram", self.domain, cfg.dram_bytes_per_s),
            "flash": Server("flash", self.domain, cfg.flash_bytes_per_s),
        }
        self.alu = Server("alu", self.domain, cfg.update_flops_per_s)
        self.io = Server("io", self.domain, cfg.io_bits_per_s / 8)
        self._ready: dict[tuple[int, str, int], simpy.Event] = {}
        self.reader = _Reader(self)
        self.port = _IoPort(self)
        self.updater = _Updater(self)
        sim.connect(
            self.reader.ports["out"],
            self.port.ports["in"],
            latency_cycles=0,
            capacity=cfg.prefetch_chunks,
            name=f"{name}/prefetch",
        )
        self.weights = self.port.ports["out"]
        self.grads = self.updater.ports["in"]
        self.updates_done = 0
        self.last_update_end = 0
        self.update_ends: dict[int, int] = {}  # step -> tick its last update ended

    def ready(self, step: int, key: tuple[str, int]) -> simpy.Event:
        """The event of ``key``'s update in ``step`` (created on first use)."""
        k = (step, *key)
        ev = self._ready.get(k)
        if ev is None:
            ev = self._ready[k] = self.env.event()
        return ev

    def tier(self, tensor: str) -> Server:
        return self.tiers[self.placement.tier_of.get(tensor, "dram")]

    def progress_count(self) -> int:
        return self.reader.stats["chunks"] + self.port.stats["chunks"] + self.updates_done


class _Reader(Component):
    def __init__(self, mx: MemoryX) -> None:
        super().__init__(mx, "reader")
        self.flow_code = len(self.sim.components)  # its ordinal: unique, deterministic
        self.mx = mx
        self.out_port("out")

    def start(self) -> None:
        self.process(self._run(), "read")

    def _payload(self, e: Entry) -> Any:
        t = self.mx.data.get(e.tensor)
        if t is None:
            return None
        out = {"rows": t.csr.dense_rows(e.order, e.lo, e.hi) if e.weights else None}
        if e.returns_gradient:
            out["request"] = t.dense.request[e.glo : e.ghi].copy()
        return out

    def _run(self) -> Any:
        mx, out = self.mx, self.ports["out"]
        ops = self.sim.trace_level >= TraceLevel.OPS
        for e in mx.plan:
            for key in e.needs:
                ev = mx.ready(e.step - 1, key)
                if not ev.processed:
                    yield ev
            now = self.env.now
            start, end = mx.tier(e.tensor).reserve(now, e.stream_bytes if e.tensor else 0)
            if end > now:
                yield self.env.timeout(end - now)
            chunk = Chunk(e, e.stream_bytes, self._payload(e))
            if ops and end > start:
                chunk = chunk.sent_by(self.flow_code)
                self.trace("memoryx", f"read {e.tensor}", start, end - start,
                           flow_out=chunk.flow, **_args(e))  # fmt: skip
            yield out.put(chunk)
            self.stats["chunks"] += 1


class _IoPort(Component):
    def __init__(self, mx: MemoryX) -> None:
        super().__init__(mx, "io")
        self.flow_code = len(self.sim.components)  # its ordinal: unique, deterministic
        self.mx = mx
        self.in_port("in")
        self.out_port("out")

    def start(self) -> None:
        self.process(self._run(), "send")

    def _run(self) -> Any:
        inp, out, io = self.ports["in"], self.ports["out"], self.mx.io
        ops = self.sim.trace_level >= TraceLevel.OPS
        for _ in range(len(self.mx.plan)):
            chunk = yield inp.get()
            start, end = io.reserve(self.env.now, chunk.nbytes)
            yield self.env.timeout(end - self.env.now)
            sent = chunk.sent_by(self.flow_code)
            if ops:
                e = chunk.entry
                self.trace(
                    "stream", f"{e.pass_} {e.tensor or e.work}", start, end - start,
                    flow_in=chunk.flow, flow_out=sent.flow, **_args(e),
                )  # fmt: skip
            yield out.put(sent)
            self.stats["chunks"] += 1
            self.stats["bytes"] += chunk.nbytes


class _Updater(Component):
    def __init__(self, mx: MemoryX) -> None:
        super().__init__(mx, "updater")
        self.mx = mx
        self.in_port("in")
        self.expected = [e for e in mx.plan if e.returns_gradient]
        self.last_of: dict[tuple[int, str], int] = {}
        for e in self.expected:
            self.last_of[(e.step, e.tensor)] = e.index

    def start(self) -> None:
        self.process(self._run(), "update")

    def pending(self) -> str | None:
        left = len(self.expected) - self.mx.updates_done
        return f"{left} gradient chunk(s) not yet received and applied" if left else None

    def _run(self) -> Any:
        mx, inp = self.mx, self.ports["in"]
        cfg = mx.cfg
        ops = self.sim.trace_level >= TraceLevel.OPS
        for e in self.expected:
            chunk = yield inp.get()
            got = chunk.entry
            if got.index != e.index:
                raise RuntimeError(f"gradient of plan entry {got.index} came for {e.index}")
            now = self.env.now
            t0, t_mem = mx.tier(e.tensor).reserve(now, e.params * cfg.bytes_per_update())
            t1, t_alu = mx.alu.reserve(now, e.params * mx.opt.flops_per_param)
            end = max(t_mem, t_alu)
            yield self.env.timeout(end - now)
            self._apply(e, chunk.payload)
            if ops:
                self.trace(
                    "update",
                    f"update {e.tensor}",
                    min(t0, t1),
                    end - min(t0, t1),
                    flow_in=chunk.flow,
                    bound="memory" if t_mem >= t_alu else "compute",
                    **_args(e),
                )
            mx.updates_done += 1
            mx.last_update_end = self.env.now
            mx.update_ends[e.step] = self.env.now
            mx.ready(e.step, e.key).succeed()  # type: ignore[arg-type]

    def _apply(self, e: Entry, grad: Any) -> None:
        t = self.mx.data.get(e.tensor)
        if t is None or grad is None:
            return
        rows = slice(e.glo, e.ghi)
        t.dense.g[rows] = np.asarray(grad, np.float32)
        update_rows(t.dense, rows, self.mx.opt, e.step + 1)
        if self.last_of[(e.step, e.tensor)] == e.index:
            if self.mx.cfg.regrow_threshold > 0:
                t.dense.regrow(self.mx.cfg.regrow_threshold)
            t.csr.rebuild(t.dense.w, t.dense.mask)
        else:
            t.csr.refresh_rows(t.dense.w, e.glo, e.ghi)


def _args(e: Entry) -> dict[str, Any]:
    return {"step": e.step, "pass": e.pass_, "lo": e.lo, "hi": e.hi, "bytes": e.stream_bytes}
