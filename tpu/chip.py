"""A TPU chip: HBM, VMEM and the MXUs of its TensorCore(s), with a matmul pipeline between them.

What is modelled, in the chip's own clock domain (``tpu``, the derived TensorCore clock):

- :class:`Hbm`: the chip's HBM as a first-come first-served server at the generation's
  bandwidth (reads and writes share it), plus a fixed access latency;
- :class:`Vmem`: the on-chip scratchpad as a byte budget; a tile occupies VMEM from the moment
  its copy starts until the MXUs are done with it, so a full VMEM stalls the copies;
- :class:`Mxu`: the systolic arrays. The mechanism is the spec's: one MXU takes
  ``bf16[8, d] x bf16[d, d] -> f32[8, d]`` every 8 cycles; a tile product ``[m, k] x [k, n]``
  is ``ceil(m/8)·ceil(k/d)·ceil(n/d)`` such passes, spread over the chip's MXUs (all cores);
  a partial pass costs a whole one (padding, a real effect on small shapes). Its *function*
  is numpy: bf16 inputs, float32 accumulation (:func:`mxu_function`), apart from its timing
  (:meth:`Mxu.cycles`);
- the pipeline: a :class:`Dma` process walks a matmul's tile schedule, starting the HBM -> VMEM
  copy of each tile (several copies in flight: the HBM queue serves them back to back) and
  handing the tile to the :class:`TensorCore` over a channel; the core waits for the copy to
  land, multiplies and
  accumulates, frees the tile's VMEM, and writes each finished output tile back to HBM without
  waiting. Copies therefore overlap compute, and a matmul's time comes out compute-bound or
  memory-bound by mechanism (the roofline is emergent; ``validate tpu`` checks it).

Tile schedule of ``C[M, N] = A[M, K]·B[K, N]`` (A: activations, B: weights): A is split into row
blocks of ``tm`` rows that fit in half the VMEM, each loaded once (its columns arrive with the
first column of B tiles) and kept while every tile of B streams past it (``tk x tn`` tiles, k
fastest); an output tile ``[tm, tn]`` (float32) is written back after its last k tile. B is
read once per row block of A: once when A fits, which is the case the roofline formula assumes.

``payload=size``: jobs carry shapes only; the same tiles, copies and passes run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import simpy

from simcore.component import Component
from simcore.errors import BuildError
from simcore.tracing import TraceLevel
from tpu.chips import ChipSpec

BF16 = 2
F32 = 4


def mxu_function(a: np.ndarray, b: np.ndarray, acc: np.ndarray | None) -> np.ndarray:
    """The MXU's result: bf16 values (held in float32) multiplied with float32 accumulation."""
    out = np.matmul(a, b, dtype=np.float32)
    return out if acc is None else acc + out


@dataclasses.dataclass
class Job:
    """One matmul: shapes, data (None for size only), and what the pipeline fills in."""

    m: int
    k: int
    n: int
    a: np.ndarray | None = None
    b: np.ndarray | None = None
    name: str = "matmul"
    done: simpy.Event | None = None
    out: np.ndarray | None = None
    start_ticks: int = -1
    end_ticks: int = -1
    writes_left: int = 0
    computed: bool = False


class Hbm(Component):
    """HBM: one FIFO server at ``bytes_per_s``; ``transfer`` returns the event of its end."""

    def __init__(self, parent: Component, spec: ChipSpec, latency_cycles: int) -> None:
        super().__init__(parent, "hbm")
        self.bytes_per_s = spec.hbm_bytes_per_s
        self.latency_cycles = latency_cycles
        self.free_at = 0
        self.busy_ticks = 0
        self.bytes = 0

    def transfer(self, nbytes: int, what: str) -> simpy.Event:
        env = self.env
        dom = self.domain
        now = env.now
        start = max(now, self.free_at)
        cycles = -(-nbytes * dom.freq_hz // int(self.bytes_per_s))
        end = start + dom.ticks(cycles)
        self.free_at = end
        self.busy_ticks += end - start
        self.bytes += nbytes
        if self.sim.trace_level >= TraceLevel.DETAIL:
            self.trace("hbm", what, start, end - start, bytes=nbytes)
        return env.timeout(end - now + dom.ticks(self.latency_cycles))


class Vmem(Component):
    """VMEM as a byte budget: ``alloc`` waits for room, ``free`` gives it back."""

    def __init__(self, parent: Component, capacity_bytes: int) -> None:
        super().__init__(parent, "vmem")
        self.capacity_bytes = capacity_bytes
        env: Any = self.sim.env
        self.pool = simpy.Container(env, capacity=capacity_bytes, init=capacity_bytes)

    def alloc(self, nbytes: int) -> simpy.Event:
        if nbytes > self.capacity_bytes:
            raise BuildError(
                f"{self.path}: a tile of {nbytes:,} bytes cannot fit in {self.capacity_bytes:,} "
                "bytes of VMEM (use smaller tiles)"
            )
        return self.pool.get(nbytes)

    def free(self, nbytes: int) -> None:
        self.pool.put(nbytes)


class Mxu(Component):
    """The chip's MXUs (all cores): passes of ``[8, d] x [d, d]``, 8 cycles each per MXU."""

    PASS_CYCLES = 8
    PASS_ROWS = 8

    def __init__(self, parent: Component, spec: ChipSpec) -> None:
        super().__init__(parent, "mxu")
        self.dim = spec.mxu_dim
        self.units = spec.mxus_per_core * spec.cores
        self.busy_ticks = 0
        self.flops = 0

    def passes(self, m: int, k: int, n: int) -> int:
        d = self.dim
        return -(-m // self.PASS_ROWS) * -(-k // d) * -(-n // d)

    def cycles(self, m: int, k: int, n: int) -> int:
        """Cycles of a ``[m, k] x [k, n]`` tile product on all MXUs (timing; data-free)."""
        return -(-self.passes(m, k, n) // self.units) * self.PASS_CYCLES


class Dma(Component):
    """Walks each job's tile schedule: HBM -> VMEM copies, tiles handed to the core in order."""

    def __init__(self, parent: Component, chip: TensorChip) -> None:
        super().__init__(parent, "dma")
        self.chip = chip
        self.out = self.out_port("tiles")
        env: Any = self.sim.env
        self.jobs = simpy.Store(env)

    def start(self) -> None:
        self.process(self._run(), "copy", daemon=True)

    def _run(self) -> Any:
        chip = self.chip
        hbm, vmem = chip.hbm, chip.vmem
        while True:
            job: Job = yield self.jobs.get()
            job.start_ticks = self.env.now
            tm, tk, tn = chip.tiles(job)
            for i0 in range(0, job.m, tm):
                rows = min(tm, job.m - i0)
                a = None if job.a is None else job.a[i0 : i0 + rows]
                cols = list(range(0, job.n, tn))
                for jn, j0 in enumerate(cols):
                    width = min(tn, job.n - j0)
                    for k0 in range(0, job.k, tk):
                        depth = min(tk, job.k - k0)
                        # the first column block also brings A's columns k0..k0+depth, which
                        # stay in VMEM for the row block's other column blocks
                        a_bytes = rows * depth * BF16 if jn == 0 else 0
                        nbytes = depth * width * BF16 + a_bytes
                        yield vmem.alloc(nbytes)
                        arrived = hbm.transfer(nbytes, "A+B" if a_bytes else "B")
                        b = None if job.b is None else job.b[k0 : k0 + depth, j0 : j0 + width]
                        last_k = k0 + depth >= job.k
                        last = last_k and jn == len(cols) - 1
                        yield self.out.put(
                            (job, i0, rows, j0, width, k0, depth, a, b, last_k, last, arrived)
                        )


class TensorCore(Component):
    """Multiplies tiles as they arrive; accumulates in float32; writes finished tiles back."""

    def __init__(self, parent: Component, chip: TensorChip) -> None:
        super().__init__(parent, "core")
        self.chip = chip
        self.inp = self.in_port("tiles")
        self.tiles_done = 0

    def start(self) -> None:
        self.process(self._run(), "compute", daemon=True)

    def _run(self) -> Any:
        chip = self.chip
        mxu, vmem, hbm = chip.mxu, chip.vmem, chip.hbm
        acc: np.ndarray | None = None
        trace = self.sim.trace_level >= TraceLevel.OPS
        while True:
            job, i0, rows, j0, width, k0, depth, a, b, last_k, last, arrived = yield self.inp.get()
            if not arrived.processed:
                yield arrived  # the copy is still on its way from HBM
            if k0 == 0:
                yield vmem.alloc(rows * width * F32)  # the output tile's accumulator
                acc = None
            cyc = mxu.cycles(rows, depth, width)
            t0 = self.env.now
            yield self.env.timeout(self.domain.ticks(cyc))
            mxu.busy_ticks += self.env.now - t0
            mxu.flops += 2 * rows * depth * width
            if trace:
                self.trace("mxu", job.name, t0, self.env.now - t0, m=rows, k=depth, n=width)
            if a is not None and b is not None:
                acc = mxu_function(a[:, k0 : k0 + depth], b, acc)
            vmem.free(depth * width * BF16)
            self.tiles_done += 1
            if last_k:
                if acc is not None:
                    if job.out is None:
                        job.out = np.empty((job.m, job.n), np.float32)
                    job.out[i0 : i0 + rows, j0 : j0 + width] = acc
                out_bytes = rows * width * F32
                job.writes_left += 1
                ev = hbm.transfer(out_bytes, "C")
                ev.callbacks.append(lambda _e, j=job, nb=out_bytes: self._written(j, nb))
            if last:
                vmem.free(rows * job.k * BF16)  # the row block of A
                if i0 + rows >= job.m:
                    job.computed = True

    def _written(self, job: Job, nbytes: int) -> None:
        self.chip.vmem.free(nbytes)
        job.writes_left -= 1
        if job.computed and job.writes_left == 0 and job.done is not None:
            job.end_ticks = self.env.now
            job.done.succeed(job)

    def progress_count(self) -> int:
        return self.tiles_done


class TensorChip(Component):
    """One TPU chip in its own ``tpu`` clock domain: HBM, VMEM, MXUs, DMA -> core pipeline.

    ``matmul(job)`` queues a job and returns the event that fires when its last output tile is
    in HBM. ``tile_k`` and ``tile_n`` set B's tiles; A's row block is as tall as half the VMEM
    allows (all of A when it fits).
    """

    def __init__(
        self,
        parent: Any,
        name: str,
        spec: ChipSpec,
        *,
        tile_k: int = 512,
        tile_n: int = 512,
        hbm_latency_cycles: int = 500,
    ) -> None:
        sim = parent.sim if isinstance(parent, Component) else parent
        super().__init__(parent, name, domain=sim.domain("tpu", spec.clock_hz))
        self.spec = spec
        self.tile_k = tile_k
        self.tile_n = tile_n
        self.hbm = Hbm(self, spec, hbm_latency_cycles)
        self.vmem = Vmem(self, spec.vmem_bytes)
        self.mxu = Mxu(self, spec)
        self.dma = Dma(self, self)
        self.core = TensorCore(self, self)
        # tiles in flight between the copy engine and the core (copies run ahead of compute)
        self.sim.connect(self.dma.out, self.core.inp, latency_cycles=0, capacity=4)

    def tiles(self, job: Job) -> tuple[int, int, int]:
        tk, tn = min(self.tile_k, job.k), min(self.tile_n, job.n)
        budget = self.vmem.capacity_bytes // 2
        tm = job.m
        if tm * job.k * BF16 > budget:
            tm = max(8, (budget // (job.k * BF16)) // 8 * 8)
        return tm, tk, tn

    def matmul(self, job: Job) -> simpy.Event:
        job.done = self.env.event()
        self.dma.jobs.put(job)
        return job.done
