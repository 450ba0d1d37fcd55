"""``tpu-matmul``: C = A[I, J]·B[J, K] on a slice under the four sharding cases, overlapped.

Every chip of the slice is a :class:`tpu.chip.TensorChip` (HBM -> VMEM -> MXU pipeline) on the
slice's ICI network; X is the mesh axis (or axes) of ``axes``, N the chips along it. The cases
(J is the contracting dimension):

- ``none``: A[I, J]·B[J, K] -> C[I, K] on every chip; no communication;
- ``noncontracting``: A[I_X, J]·B[J, K] -> C[I_X, K]: each chip its rows; no communication;
- ``contracting``: A[I, J_X]·B[J_X, K] -> partial sums C[I, K]{U_X}, then an AllReduce over X.
  Overlap: C's columns are cut into ``blocks``; the AllReduce of block b (float32 partial sums)
  runs while block b+1 is computed;
- ``both``: A[I_X, J]·B[J, K_X] -> C[I, K_X] needs all of A: an AllGather of A over X. Overlap:
  the gather is cut into ``blocks`` collectives run one after the other, while each chip
  multiplies its own rows of A; then it multiplies each gathered block as soon as that block is
  in.

Results (``payload=real``): small integers in bf16, so float32 sums are exact and ``correct``
compares with numpy bit for bit. ``time_s`` is when the last chip has its C (and, for
``contracting``, when the last AllReduce ends). The model beside it: each chip's roofline plus the
collective's formula, overlapped block by block.
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
from tpu.chip import F32, Job, TensorChip
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

CASES = ("none", "noncontracting", "contracting", "both")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatmulParams(SliceParams):
    i: int = param(1024, "rows of A and C (I)", min=8)
    j: int = param(2048, "contracting dimension (J)", min=8)
    k: int = param(2048, "columns of B and C (K)", min=8)
    sharding: str = param("contracting", "which dimensions are sharded over X", choices=CASES)
    axes: str = param("x", "the mesh axis (or axes) X", allowed=AXES_ALLOWED)
    blocks: int = param(4, "pieces the collective is cut into, to overlap it with compute", min=1)
    tile_k: int = param(512, "rows of each B tile copied HBM -> VMEM", min=8)
    tile_n: int = param(512, "columns of each B tile", min=8)
    payload: str = param(
        "real", "real: numpy arrays; size: shapes only, same timing", choices=("real", "size")
    )

    def check(self) -> None:
        topo = self.slice()
        axes = parse_axes(topo, self.axes)
        n = math.prod(topo.shape[a] for a in axes)
        dims = {"none": (), "noncontracting": ("i",), "contracting": ("j",), "both": ("i", "k")}
        for key in dims[self.sharding]:
            v = getattr(self, key)
            if v % n:
                raise ConfigError(
                    key, v, f"does not shard evenly over the {n} chips of axes '{self.axes}'",
                    allowed=f"a multiple of {n}",
                )  # fmt: skip
        col = {"contracting": self.k, "both": self.i // n}.get(self.sharding)
        if col is not None and col % self.blocks:
            key = "k" if self.sharding == "contracting" else "i"
            raise ConfigError(
                "blocks", self.blocks,
                f"does not divide the {col} {'columns' if key == 'k' else 'rows per chip'} "
                f"that are communicated in blocks ({key} = {getattr(self, key)}, sharding = "
                f"{self.sharding!r})",
                allowed=f"a divisor of {col}",
            )  # fmt: skip
        hbm = topo.spec.hbm_bytes
        need = 2 * (self.i * self.j + self.j * self.k) + F32 * self.i * self.k
        if need > hbm:
            raise ConfigError(
                "i", self.i,
                f"A, B and C need {need:,} bytes but a {topo.spec.name} chip has {hbm:,} bytes "
                "of HBM",
                allowed="smaller i, j, k",
            )  # fmt: skip
        if self.payload == "real" and topo.chips * need > REAL_LIMIT_BYTES:
            raise ConfigError(
                "payload", self.payload, "arrays too large to hold in this process",
                allowed=f"real up to {REAL_LIMIT_BYTES:,} bytes over all chips",
                hint="use --set payload=size (same timing, no data)",
            )  # fmt: skip


class Program(Component):
    """Each chip's schedule of matmuls and collective joins, as one process per chip."""

    def __init__(self, parent: Component, run: MatmulRun) -> None:
        super().__init__(parent, "program")
        self.run = run
        self.left = run.topo.chips

    def start(self) -> None:
        for c in self.run.topo.coords:
            self.process(self._chip(c), f"chip[{','.join(map(str, c))}]")
        if self.run.gathers:
            self.run.gathers[0].start()  # the next block's gather starts when this one ends

    def _chip(self, c: Coord) -> Any:
        r = self.run
        p, chip = r.p, r.chips[c]
        a, b = r.local_a.get(c), r.local_b.get(c)
        n = r.n
        if p.sharding in ("none", "noncontracting"):
            job = Job(a.shape[0] if a is not None else r.rows, p.j, p.k, a, b)
            yield chip.matmul(job)
            r.result[c] = job.out
        elif p.sharding == "contracting":
            w = p.k // p.blocks
            jl = p.j // n
            for blk in range(p.blocks):
                bb = None if b is None else b[:, blk * w : (blk + 1) * w]
                job = Job(p.i, jl, w, a, bb, name=f"block{blk}")
                yield chip.matmul(job)
                r.reduces[blk].join(c, None if job.out is None else job.out.ravel())
        else:  # both: own rows first, then each gathered block of A
            rows = p.i // n
            kl = p.k // n
            job = Job(rows, p.j, kl, a, b, name="own rows")
            yield chip.matmul(job)
            r.parts[c] = {("own", 0): job.out}
            rank = r.rank[c]
            sub = rows // p.blocks
            for blk, coll in enumerate(r.gathers):
                if coll.end_ticks < 0:
                    yield r.gather_done[blk]
                others = None
                if coll.real:
                    full = coll.outputs[c].reshape(n, sub, p.j)
                    others = np.concatenate([full[q] for q in range(n) if q != rank])
                job = Job((n - 1) * sub, p.j, kl, others, b, name=f"gathered{blk}")
                yield chip.matmul(job)
                r.parts[c][("blk", blk)] = job.out
        r.chip_end[c] = self.env.now
        self.left -= 1

    def pending(self) -> str | None:
        return f"{self.left} chip program(s) unfinished" if self.left else None


@dataclasses.dataclass
class MatmulRun:
    p: MatmulParams
    topo: Slice
    net: Any
    chips: dict[Coord, TensorChip]
    n: int
    rows: int
    rank: dict[Coord, int]
    a: np.ndarray | None
    b: np.ndarray | None
    local_a: dict[Coord, np.ndarray]
    local_b: dict[Coord, np.ndarray]
    reduces: list[Collective] = dataclasses.field(default_factory=list)
    gathers: list[Collective] = dataclasses.field(default_factory=list)
    gather_done: list[Any] = dataclasses.field(default_factory=list)
    result: dict[Coord, Any] = dataclasses.field(default_factory=dict)
    parts: dict[Coord, dict] = dataclasses.field(default_factory=dict)
    chip_end: dict[Coord, int] = dataclasses.field(default_factory=dict)


def build(sim: Simulation, p: MatmulParams) -> MatmulRun:
    top, topo, net = build_slice(sim, p)
    axes = parse_axes(topo, p.axes)
    chips = {
        c: TensorChip(top, f"chip[{','.join(map(str, c))}]", topo.spec, tile_k=p.tile_k,
                      tile_n=p.tile_n)
        for c in topo.coords
    }  # fmt: skip
    coll0 = Collective(net, "allgather", axes, 2 * math.prod(topo.shape[x] for x in axes), 2)
    n = coll0.n
    rank = {c: g.rank_of[c] for g in coll0.groups for c in g.chips}
    a = b = None
    local_a: dict[Coord, np.ndarray] = {}
    local_b: dict[Coord, np.ndarray] = {}
    if p.payload == "real":
        rng = np.random.default_rng(p.seed)
        a = small_ints(rng, p.i * p.j).reshape(p.i, p.j)
        b = small_ints(rng, p.j * p.k).reshape(p.j, p.k)
        for c in topo.coords:
            r = rank[c]
            if p.sharding == "none":
                local_a[c], local_b[c] = a, b
            elif p.sharding == "noncontracting":
                rows = p.i // n
                local_a[c], local_b[c] = a[r * rows : (r + 1) * rows], b
            elif p.sharding == "contracting":
                jl = p.j // n
                local_a[c], local_b[c] = a[:, r * jl : (r + 1) * jl], b[r * jl : (r + 1) * jl]
            else:
                rows, kl = p.i // n, p.k // n
                local_a[c] = a[r * rows : (r + 1) * rows]
                local_b[c] = b[:, r * kl : (r + 1) * kl]
    rows = p.i // n if p.sharding == "noncontracting" else p.i
    run = MatmulRun(p, topo, net, chips, n, rows, rank, a, b, local_a, local_b)
    if p.sharding == "contracting":
        w = p.k // p.blocks
        run.reduces = [
            Collective(net, "allreduce", axes, p.i * w * F32, F32) for _ in range(p.blocks)
        ]
    if p.sharding == "both":
        rows_chip = p.i // n
        sub = rows_chip // p.blocks
        for blk in range(p.blocks):
            inputs = None
            if p.payload == "real":
                inputs = {c: local_a[c][blk * sub : (blk + 1) * sub].ravel() for c in topo.coords}
            run.gathers.append(
                Collective(net, "allgather", axes, n * sub * p.j * 2, 2, inputs=inputs)
            )
            run.gather_done.append(sim.env.event())
        chain(run.gathers, run.gather_done)
    Program(top, run)
    return run


def chain(colls: list[Collective], events: list[Any]) -> None:
    """Each collective fires its event when done and starts the next one: blocks sent one after
    the other, so the first lands early (started together, their packets would share every link
    round-robin and all land at the end, leaving nothing to overlap)."""
    for i, (coll, ev) in enumerate(zip(colls, events, strict=True)):
        nxt = colls[i + 1] if i + 1 < len(colls) else None

        def done(_c: Collective, ev: Any = ev, nxt: Collective | None = nxt) -> None:
            ev.succeed()
            if nxt is not None:
                nxt.start()

        coll.on_done = done


def result_of(run: MatmulRun, c: Coord) -> np.ndarray | None:
    """Chip ``c``'s C (its shard, or all of C), assembled from what the run left."""
    p = run.p
    if p.sharding in ("none", "noncontracting"):
        return run.result.get(c)
    if p.sharding == "contracting":
        outs = [coll.outputs.get(c) for coll in run.reduces]
        if any(o is None for o in outs):
            return None
        w = p.k // p.blocks
        return np.concatenate([o.reshape(p.i, w) for o in outs], axis=1)  # type: ignore[union-attr]
    n, rank = run.n, run.rank[c]
    rows, sub = p.i // n, p.i // n // p.blocks
    kl = p.k // n
    parts = run.parts.get(c, {})
    if ("own", 0) not in parts or parts[("own", 0)] is None:
        return None
    out = np.empty((p.i, kl), np.float32)
    out[rank * rows : (rank + 1) * rows] = parts[("own", 0)]
    for blk in range(p.blocks):
        got = parts[("blk", blk)].reshape(n - 1, sub, kl)
        for i, q in enumerate(x for x in range(n) if x != rank):
            out[q * rows + blk * sub : q * rows + (blk + 1) * sub] = got[i]
    return out


def reference(run: MatmulRun, c: Coord) -> np.ndarray:
    p, a, b = run.p, run.a, run.b
    full = np.matmul(a, b, dtype=np.float32)  # type: ignore[arg-type]
    r = run.rank[c]
    if p.sharding == "noncontracting":
        rows = p.i // run.n
        return full[r * rows : (r + 1) * rows]
    if p.sharding == "both":
        kl = p.k // run.n
        return full[:, r * kl : (r + 1) * kl]
    return full


def metrics(sim: Simulation, p: MatmulParams, run: MatmulRun, result: RunResult) -> dict:
    ends = list(run.chip_end.values()) + [c.end_ticks for c in run.reduces + run.gathers]
    end = max(ends)
    t = seconds(sim, end)
    correct = None
    if p.payload == "real":
        full = np.matmul(run.a, run.b, dtype=np.float32)  # type: ignore[arg-type]
        correct = True
        for c in run.topo.coords:
            got = result_of(run, c)
            want = reference(run, c) if p.sharding != "none" else full
            correct = correct and got is not None and bool(np.array_equal(got, want))
    compute = max(seconds(sim, ch.mxu.busy_ticks) for ch in run.chips.values())
    m = model(p)
    flops = 2 * p.i * p.j * p.k
    return {
        "time_s": t,
        "correct": correct,
        "mxu_busy_s": compute,
        "compute_fraction": compute / t if t else 0.0,
        "tflops_per_chip": flops / (run.n if p.sharding != "none" else 1) / t / 1e12,
        "hbm_bytes_per_chip": max(ch.hbm.bytes for ch in run.chips.values()),
        "ici_link_utilisation": link_utilisation(run.net, end),
        "model_time_s": m["time_s"],
        "model_compute_s": m["compute_s"],
        "model_comm_s": m["comm_s"],
        "model_error_pct": 100.0 * (t - m["time_s"]) / m["time_s"],
    }


def model(p: MatmulParams) -> dict[str, Any]:
    """Per-chip roofline (MXU passes padded to the tiles) + the collective's formula (with its
    DCN phase between slices), overlapped over ``blocks`` pieces:
    T = max(compute, comm) + min(compute, comm) / blocks."""
    topo = p.slice()
    axes = parse_axes(topo, p.axes)
    n = math.prod(topo.shape[a] for a in axes)
    spec = topo.spec
    tiles = {"tile_k": p.tile_k, "tile_n": p.tile_n}
    comm = 0.0
    if p.sharding == "none":
        roof = models.matmul_roofline(p.i, p.j, p.k, spec, **tiles)
    elif p.sharding == "noncontracting":
        roof = models.matmul_roofline(p.i // n, p.j, p.k, spec, **tiles)
    elif p.sharding == "contracting":
        roof = models.matmul_roofline(p.i, p.j // n, p.k, spec, **tiles)
        comm = float(time_over(topo, axes, "allreduce", p.i * p.k * F32, p.ici)["time_s"])
    else:
        roof = models.matmul_roofline(p.i, p.j, p.k // n, spec, **tiles)
        comm = float(time_over(topo, axes, "allgather", p.i * p.j * 2, p.ici)["time_s"])
    compute = float(roof["time_s"])
    t = max(compute, comm) + min(compute, comm) / p.blocks if comm else compute
    return {
        "time_s": t,
        "compute_s": compute,
        "comm_s": comm,
        "bound": roof["bound"] if compute >= comm else "communication",
        "intensity_flops_per_byte": roof["intensity_flops_per_byte"],
        "critical_intensity_flops_per_byte": roof["critical_intensity_flops_per_byte"],
    }


def footprint(p: MatmulParams) -> registry.Footprint:
    """The network, six components per chip (the chip, HBM, VMEM, MXU, DMA, core) and, with real
    payloads, every chip's A, B and C as float32 (twice the bf16 bytes) and the reference."""
    need = 2 * (p.i * p.j + p.j * p.k) + F32 * p.i * p.k
    data = 2 * need * p.slice().chips if p.payload == "real" else 0
    return common_footprint(p, 6, data, "i")


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-matmul",
            summary="a sharded matmul on a TPU slice: chips' MXU pipelines and ICI collectives",
            params=MatmulParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
