"""``tpu-train-step``: one dense layer's training step, data parallel or FSDP, on a slice.

The layer is Y = X·W with W[D, F]; each chip holds ``batch`` rows of X[B, D] and of the output
gradient dY[B, F] (the per-chip batch; the global batch is ``batch`` x chips on ``axes``). A step
is three matmuls on every chip's HBM -> VMEM -> MXU pipeline, 6·B·D·F FLOPs:

- forward Y = X·W; backward dW = Xᵀ·dY and dX = dY·Wᵀ;

and the communication of the strategy, over ``axes`` (bf16 weights and gradients):

- ``dp`` (data parallel): every chip keeps all of W; dW is AllReduced. The AllReduce is cut into
  ``blocks`` column blocks, each started as soon as its dW block is computed, so it overlaps the
  rest of dW and dX;
- ``fsdp``: W is sharded over the chips (each holds F/N columns of every column block); it is
  AllGathered block by block before the forward pass (each block used as soon as it is in) and
  again before the backward pass, and dW is ReduceScattered block by block.

The step is compute-bound while the per-chip batch exceeds about C/W_ici (FLOP/s over
bidirectional ICI bandwidth; v5p: 4.59e14 / 1.8e11 ≈ 2550), divided by the number of axes used:
sweep ``batch`` to see the crossover (``model_critical_batch`` is the formula's value).
``payload=real`` (small layers) checks Y, dX and dW against numpy; ``payload=size`` (default)
runs the same schedule on shapes only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from runner import registry
from simcore.component import Component
from simcore.config import param
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from tpu.chip import Job, TensorChip
from tpu.collectives import Collective
from tpu.slice import AXES_ALLOWED, SliceParams, build_slice, link_utilisation, parse_axes
from tpu.topology import Coord, Slice
from workloads.tpu import models
from workloads.tpu.collective import time_over
from workloads.tpu.common import (
    REAL_LIMIT_BYTES,
    seconds,
    small_ints,
)
from workloads.tpu.common import (
    footprint as common_footprint,
)
from workloads.tpu.matmul import chain

BF16 = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainStepParams(SliceParams):
    strategy: str = param("dp", "dp: AllReduce dW; fsdp: shard W", choices=("dp", "fsdp"))
    batch: int = param(1024, "per-chip batch (rows of X on each chip)", min=8)
    d_model: int = param(4096, "input width D of the layer", min=8)
    d_ff: int = param(8192, "output width F of the layer (the MLP width)", min=8)
    axes: str = param(
        "x", "axes the batch (and, with fsdp, W) is sharded over", allowed=AXES_ALLOWED
    )
    blocks: int = param(4, "column blocks communicated one by one, to overlap with compute", min=1)
    tile_k: int = param(512, "rows of each B tile copied HBM -> VMEM", min=8)
    tile_n: int = param(512, "columns of each B tile", min=8)
    payload: str = param(
        "size", "real: numpy arrays (small layers); size: shapes only, same timing",
        choices=("real", "size"),
    )  # fmt: skip

    def check(self) -> None:
        topo = self.slice()
        axes = parse_axes(topo, self.axes)
        n = math.prod(topo.shape[a] for a in axes)
        unit = self.blocks * (n if self.strategy == "fsdp" else 1)
        if self.d_ff % unit:
            raise ConfigError(
                "d_ff", self.d_ff,
                f"does not split into {self.blocks} blocks"
                + (f" of {n} shards" if self.strategy == "fsdp" else ""),
                allowed=f"a multiple of {unit}",
            )  # fmt: skip
        b, d, f = self.batch, self.d_model, self.d_ff
        need = BF16 * (2 * d * f + b * d + 2 * b * f) + 4 * (b * f + b * d)
        fixed, per_row = BF16 * 2 * d * f, BF16 * (d + 2 * f) + 4 * (f + d)
        if need > topo.spec.hbm_bytes and fixed + per_row <= topo.spec.hbm_bytes:
            # the weights fit: the batch's activations are what does not
            raise ConfigError(
                "batch", b, f"the layer needs {need:,} bytes per chip but a {topo.spec.name} "
                f"chip has {topo.spec.hbm_bytes:,} bytes of HBM",
                allowed=f"1 .. {(topo.spec.hbm_bytes - fixed) // per_row:,}",
                hint="lower batch",
            )  # fmt: skip
        if need > topo.spec.hbm_bytes:
            raise ConfigError(
                "d_ff", f, f"the layer needs {need:,} bytes per chip but a {topo.spec.name} chip "
                f"has {topo.spec.hbm_bytes:,} bytes of HBM", allowed="a smaller layer or batch",
            )  # fmt: skip
        if self.payload == "real" and topo.chips * need * 2 > REAL_LIMIT_BYTES:
            raise ConfigError(
                "payload", self.payload, "arrays too large to hold in this process",
                allowed=f"real up to {REAL_LIMIT_BYTES:,} bytes over all chips",
                hint="use --set payload=size (same timing, no data)",
            )  # fmt: skip


@dataclasses.dataclass
class StepRun:
    p: TrainStepParams
    topo: Slice
    net: Any
    chips: dict[Coord, TensorChip]
    n: int
    rank: dict[Coord, int]
    w: np.ndarray | None = None
    x: dict[Coord, np.ndarray] = dataclasses.field(default_factory=dict)
    dy: dict[Coord, np.ndarray] = dataclasses.field(default_factory=dict)
    y: dict[Coord, np.ndarray] = dataclasses.field(default_factory=dict)
    dx: dict[Coord, np.ndarray] = dataclasses.field(default_factory=dict)
    grads: list[Collective] = dataclasses.field(default_factory=list)
    gathers: list[list[Collective]] = dataclasses.field(default_factory=list)  # [pass][block]
    gather_done: list[list[Any]] = dataclasses.field(default_factory=list)
    chip_end: dict[Coord, int] = dataclasses.field(default_factory=dict)
    work: dict[Coord, int] = dataclasses.field(default_factory=dict)  # ticks with a matmul on
    fsdp_shards: dict[Coord, dict[int, np.ndarray]] = dataclasses.field(default_factory=dict)


def _shard_cols(w_blk: np.ndarray, n: int) -> list[np.ndarray]:
    """Column block -> each rank's columns, as the flat shards an AllGather concatenates."""
    return [np.ascontiguousarray(s).ravel() for s in np.split(w_blk, n, axis=1)]


def _unshard(flat: np.ndarray, n: int, d: int) -> np.ndarray:
    """An AllGather's output (rank-major shards of [D, w]) -> the [D, n·w] column block."""
    return flat.reshape(n, d, -1).transpose(1, 0, 2).reshape(d, -1)


class StepProgram(Component):
    """Every chip's step as one process: matmuls in order, collectives joined as data is ready."""

    def __init__(self, parent: Component, run: StepRun) -> None:
        super().__init__(parent, "program")
        self.run = run
        self.left = run.topo.chips

    def start(self) -> None:
        for c in self.run.topo.coords:
            self.process(self._chip(c), f"chip[{','.join(map(str, c))}]")
        if self.run.gathers:
            self.run.gathers[0][0].start()  # FSDP: the forward pass's gathers, one by one

    def _weights(self, c: Coord, pss: int, blk: int) -> Any:
        """FSDP: wait for pass ``pss``'s gather of block ``blk``; the gathered block (or None)."""
        r = self.run
        coll = r.gathers[pss][blk]
        if coll.end_ticks < 0:
            yield r.gather_done[pss][blk]
        return _unshard(coll.outputs[c], r.n, r.p.d_model) if coll.real else None

    def _chip(self, c: Coord) -> Any:
        """Chip ``c``'s step: each matmul queued on the chip as soon as its operands are there
        (its copies then start while the one before computes, as a compiled program prefetches),
        its results taken in order; each dW block joins its collective the moment it is done."""
        r, p = self.run, self.run.p
        chip = r.chips[c]
        b, d, f, nb = p.batch, p.d_model, p.d_ff, p.blocks
        fb = f // nb
        x, dy = r.x.get(c), r.dy.get(c)
        real = x is not None
        jobs: list[Job] = []
        # forward: Y = X·W, block by block (FSDP: each block as soon as it is gathered)
        y = np.empty((b, f), np.float32) if real else None
        fwd = []
        for blk in range(nb):
            if p.strategy == "fsdp":
                w_blk = yield from self._weights(c, 0, blk)
            else:
                w_blk = None if r.w is None else r.w[:, blk * fb : (blk + 1) * fb]
            job = Job(b, d, fb, x, w_blk, name=f"fwd{blk}")
            fwd.append((blk, job, chip.matmul(job)))
            jobs.append(job)
        for blk, job, ev in fwd:
            if not ev.processed:
                yield ev
            if real:
                y[:, blk * fb : (blk + 1) * fb] = job.out  # type: ignore[index]
        r.y[c] = y  # type: ignore[assignment]
        if p.strategy == "fsdp":
            for blk, coll in enumerate(r.gathers[1]):
                coll.join(c, r.fsdp_shards[c][blk] if real else None)
        # backward: dW = Xᵀ·dY and dX = dY·Wᵀ, block by block; dW blocks leave at once
        dx = np.zeros((b, d), np.float32) if real else None
        xt = None if x is None else np.ascontiguousarray(x.T)
        bwd = []
        for blk in range(nb):
            cols = slice(blk * fb, (blk + 1) * fb)
            dyb = None if dy is None else np.ascontiguousarray(dy[:, cols])
            job = Job(d, b, fb, xt, dyb, name=f"dW{blk}")
            ev = chip.matmul(job)
            ev.callbacks.append(lambda _e, job=job, blk=blk: self._grad(c, blk, job))
            jobs.append(job)
            if p.strategy == "fsdp":
                w_blk = yield from self._weights(c, 1, blk)
            else:
                w_blk = None if r.w is None else r.w[:, cols]
            wt = None if w_blk is None else np.ascontiguousarray(w_blk.T)
            job = Job(b, fb, d, dyb, wt, name=f"dX{blk}")
            bwd.append((job, chip.matmul(job)))
            jobs.append(job)
        for job, ev in bwd:
            if not ev.processed:
                yield ev
            if real:
                dx += job.out  # type: ignore[operator]
        r.dx[c] = dx  # type: ignore[assignment]
        r.work[c] = _union((j.start_ticks, j.end_ticks) for j in jobs)
        r.chip_end[c] = self.env.now
        self.left -= 1

    def _grad(self, c: Coord, blk: int, job: Job) -> None:
        """dW block ``blk`` is in HBM: it joins its AllReduce (FSDP: ReduceScatter)."""
        r = self.run
        grad = None
        if job.out is not None and r.x.get(c) is not None:
            grad = job.out
            if r.p.strategy == "fsdp":  # rank-major shards of the block, for ReduceScatter
                grad = grad.reshape(r.p.d_model, r.n, -1).transpose(1, 0, 2)
            grad = np.ascontiguousarray(grad).ravel()
        r.grads[blk].join(c, grad)

    def pending(self) -> str | None:
        return f"{self.left} chip step(s) unfinished" if self.left else None


def build(sim: Simulation, p: TrainStepParams) -> StepRun:
    top, topo, net = build_slice(sim, p)
    axes = parse_axes(topo, p.axes)
    chips = {
        c: TensorChip(top, f"chip[{','.join(map(str, c))}]", topo.spec, tile_k=p.tile_k,
                      tile_n=p.tile_n)
        for c in topo.coords
    }  # fmt: skip
    probe = Collective(net, "allgather", axes, 2 * math.prod(topo.shape[a] for a in axes), 2)
    n = probe.n
    rank = {c: g.rank_of[c] for g in probe.groups for c in g.chips}
    run = StepRun(p, topo, net, chips, n, rank)
    d, f, nb = p.d_model, p.d_ff, p.blocks
    fb = f // nb
    real = p.payload == "real"
    if real:
        rng = np.random.default_rng(p.seed)
        run.w = small_ints(rng, d * f).reshape(d, f)
        for c in topo.coords:
            run.x[c] = small_ints(rng, p.batch * d).reshape(p.batch, d)
            run.dy[c] = small_ints(rng, p.batch * f).reshape(p.batch, f)
    op = "allreduce" if p.strategy == "dp" else "reducescatter"
    run.grads = [Collective(net, op, axes, d * fb * BF16, BF16) for _ in range(nb)]
    if p.strategy == "fsdp":
        shards: dict[Coord, dict[int, np.ndarray]] = {c: {} for c in topo.coords}
        for _pass in range(2):  # the forward and the backward gathers
            colls, evs = [], []
            for blk in range(nb):
                inputs = None
                if real:
                    pieces = _shard_cols(run.w[:, blk * fb : (blk + 1) * fb], n)  # type: ignore[index]
                    inputs = {c: pieces[rank[c]] for c in topo.coords}
                    for c in topo.coords:
                        shards[c][blk] = inputs[c]
                colls.append(Collective(net, "allgather", axes, d * fb * BF16, BF16, inputs=inputs))
                evs.append(sim.env.event())
            if not run.gathers:
                chain(colls, evs)  # the forward gathers run one after the other
            else:
                for coll, ev in zip(colls, evs, strict=True):
                    coll.on_done = lambda _c, e=ev: e.succeed()
            run.gathers.append(colls)
            run.gather_done.append(evs)
        run.fsdp_shards = shards
    StepProgram(top, run)
    return run


def check_real(run: StepRun) -> bool:
    p, w = run.p, run.w
    assert w is not None
    ok = True
    fb = p.d_ff // p.blocks
    group_of = {c: g for g in run.grads[0].groups for c in g.chips}
    sums = {
        g.chips[0]: sum(np.matmul(run.x[c].T, run.dy[c], dtype=np.float32) for c in g.chips)
        for g in run.grads[0].groups
    }
    for c in run.topo.coords:
        x, dy = run.x[c], run.dy[c]
        total = sums[group_of[c].chips[0]]
        ok &= np.array_equal(run.y[c], np.matmul(x, w, dtype=np.float32))
        ok &= np.array_equal(run.dx[c], np.matmul(dy, w.T, dtype=np.float32))
        for blk, coll in enumerate(run.grads):
            want = total[:, blk * fb : (blk + 1) * fb]  # type: ignore[index]
            got = coll.outputs[c]
            if p.strategy == "fsdp":
                r, w_cols = run.rank[c], fb // run.n
                want = want[:, r * w_cols : (r + 1) * w_cols].ravel()
            else:
                want = want.ravel()
            ok &= np.array_equal(got, want)
    return bool(ok)


def metrics(sim: Simulation, p: TrainStepParams, run: StepRun, result: RunResult) -> dict:
    colls = run.grads + [c for g in run.gathers for c in g]
    end = max([*run.chip_end.values(), *(c.end_ticks for c in colls)])
    t = seconds(sim, end)
    compute = max(seconds(sim, ch.mxu.busy_ticks) for ch in run.chips.values())
    work = seconds(sim, max(run.work.values()))
    comm = seconds(sim, _in_flight(colls))
    flops = 6 * p.batch * p.d_model * p.d_ff
    m = model(p)
    return {
        "time_s": t,
        "correct": check_real(run) if p.payload == "real" else None,
        "mxu_busy_s": compute,
        "compute_fraction": compute / t if t else 0.0,
        "flops_utilisation": flops / (t * run.topo.spec.bf16_flops),
        "global_batch": p.batch * run.n,
        "ici_link_utilisation": link_utilisation(run.net, end),
        "compute_s": work,
        "comm_s": comm,
        "bound": "compute" if work >= comm else "communication",
        "model_time_s": m["time_s"],
        "model_compute_s": m["compute_s"],
        "model_comm_s": m["comm_s"],
        "model_critical_batch": m["critical_batch"],
        "model_error_pct": 100.0 * (t - m["time_s"]) / m["time_s"],
    }


def _in_flight(colls: list[Collective]) -> int:
    """Ticks during which at least one of ``colls`` was in progress (the union of their
    intervals from the first chip joining to the last chip finishing)."""
    return _union((c.start_ticks, c.end_ticks) for c in colls if c.start_ticks >= 0)


def _union(intervals: Any) -> int:
    """Ticks covered by at least one of the ``(start, end)`` intervals."""
    spans = sorted(intervals)
    total, reach = 0, -1
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def model(p: TrainStepParams) -> dict[str, Any]:
    """Compute 6·B·D·F / C (as MXU passes: tiles padded to the MXU's size) against the
    strategy's collectives (the spec's formulas, with their DCN phase between slices): DP's
    AllReduce overlaps the backward pass (4·B·D·F), FSDP's two gathers and one scatter the whole
    step; cut into ``blocks``, one block of the shorter side stays exposed:
    T = max(compute, comm) + min(compute, comm) / blocks."""
    topo = p.slice()
    axes = parse_axes(topo, p.axes)
    spec = topo.spec
    v = p.d_model * p.d_ff * BF16
    b, d, f, tk, tn = p.batch, p.d_model, p.d_ff, p.tile_k, p.tile_n
    # Y = X·W, dW = Xᵀ·dY, dX = dY·Wᵀ: 6·B·D·F FLOPs, as MXU passes of the tiles, each block's
    # matmul at its roofline (the larger of its MXU time and its HBM traffic's time)
    fb = f // p.blocks
    step = p.blocks * sum(
        float(models.matmul_roofline(m, k, n, spec, tile_k=tk, tile_n=tn)["time_s"])
        for m, k, n in ((b, d, fb), (d, b, fb), (b, fb, d))
    )
    ag = float(time_over(topo, axes, "allgather", v, p.ici)["time_s"])
    nb = p.blocks
    if p.strategy == "dp":
        comm = 2 * ag
        bwd = 2 * step / 3
        t = step / 3 + max(bwd, comm) + min(bwd, comm) / nb
    else:
        comm = 3 * ag
        t = max(step, comm) + min(step, comm) / nb
    return {
        "time_s": t,
        "compute_s": step,
        "comm_s": comm,
        "critical_batch": models.dp_critical_batch(spec, len(axes)),
        "bound": "compute" if step >= comm else "communication",
    }


def footprint(p: TrainStepParams) -> registry.Footprint:
    """The network, six components per chip and, with real payloads, every chip's layer arrays
    (X, W, Y, dY, dW, dX) as float32 and their reference."""
    b, d, f = p.batch, p.d_model, p.d_ff
    need = BF16 * (2 * d * f + b * d + 2 * b * f) + 4 * (b * f + b * d)
    data = 2 * 2 * need * p.slice().chips if p.payload == "real" else 0
    return common_footprint(p, 6, data, "batch")


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-train-step",
            summary="one layer's data-parallel or FSDP training step on a TPU slice",
            params=TrainStepParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
