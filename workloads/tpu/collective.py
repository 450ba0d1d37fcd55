"""``tpu-collective``: one collective over axes of a TPU slice, moving real shards.

The workload layer: it draws each chip's input (``payload=real``: small integers, so every sum is
exact and the check against numpy is bit-for-bit), starts a :class:`tpu.collectives.Collective`
at time 0 and reads the time the last chip finishes. ``payload=size`` moves byte counts through
the same flows and links (for arrays too large to hold), with the same timing.

Metrics (NCCL's definitions): ``algbw_bytes_per_s`` = S / time with S = ``bytes`` (AllGather,
ReduceScatter, AllReduce) or ``bytes / N`` (AllToAll: what one rank sends);
``busbw_bytes_per_s`` = algbw x 2(N-1)/N for AllReduce, x (N-1)/N otherwise (N = chips in a
group).
``link_utilisation``: mean busy fraction of the link directions that carried traffic.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from runner import registry
from simcore.clock import Ticks
from simcore.component import Component
from simcore.config import param
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from tpu.collectives import OPS, RINGS, SCHEDULES, Collective
from tpu.network import IciNetwork
from tpu.slice import AXES_ALLOWED, SliceParams, build_slice, link_utilisation, parse_axes
from tpu.topology import Slice
from workloads.tpu import models
from workloads.tpu.common import (
    DTYPES,
    REAL_LIMIT_BYTES,
    seconds,
    small_ints,
)
from workloads.tpu.common import (
    footprint as common_footprint,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectiveParams(SliceParams):
    op: str = param("allgather", "the collective", choices=OPS)
    axes: str = param(
        "x",
        "axes it runs over: x, y, z or a combination such as xy",
        allowed=AXES_ALLOWED + ", spanning 2 or more chips",
    )
    bytes: int = param(33_554_432, "size V of the full (gathered) array per group", min=1)
    dtype: str = param("bf16", "element type (bytes counted at its size)", choices=tuple(DTYPES))
    ring: str = param("bidirectional", "ring algorithm on wrapped axes", choices=RINGS)
    schedule: str = param(
        "rotated",
        "several axes: rotated (the data in one part per axis, each part visiting the axes in a "
        "rotated order, so every axis is busy in every phase) or axis-by-axis (all the data "
        "one axis after the other: ASTRA-sim's hierarchical default)",
        choices=SCHEDULES,
    )  # fmt: skip
    payload: str = param(
        "real", "real: numpy arrays move; size: byte counts only, same timing",
        choices=("real", "size"),
    )  # fmt: skip
    symmetry: str = param(
        "auto",
        "auto: at ici.fidelity=flow with payload=size and no trace, run one representative chip "
        "per class of the translations the collective is invariant under (wrapped axes; exact, "
        "the same times and counts, docs/tpu/design.md#symmetry); off: every chip runs",
        choices=("auto", "off"),
    )  # fmt: skip

    def check(self) -> None:
        topo = self.slice()
        axes = parse_axes(topo, self.axes)
        n = 1
        for a in axes:
            n *= topo.shape[a]
        if n == 1:
            # Nothing crosses a link: the time would be 0 and algbw = S / 0 has no value (it
            # was reported as 0 bytes/s, which reads as a very slow collective).
            sizes = ", ".join(f"{topo.axis_names[a]}: {topo.shape[a]}" for a in axes)
            raise ConfigError(
                "axes", self.axes,
                f"spans 1 chip of the {self.topology} slice ({sizes}): a collective over one "
                "chip moves no bytes over the ICI, so it has no time or bandwidth to measure",
                allowed="axes spanning 2 or more chips",
                hint="use a larger topology (--set topology=2x2 or larger) or other axes",
            )  # fmt: skip
        item = DTYPES[self.dtype]
        unit = item * n * (n if self.op == "alltoall" else 1)
        if self.bytes % unit:
            what = f"{n} x {n} blocks" if self.op == "alltoall" else f"{n} shards"
            lo = (self.bytes // unit) * unit
            raise ConfigError(
                "bytes", self.bytes,
                f"does not divide into {what} of whole {self.dtype} elements "
                f"({unit} bytes each step; set by op, axes and dtype)",
                allowed=f"a multiple of {unit}, e.g. "
                + (f"{lo} or {lo + unit}" if lo else f"{unit}"),
            )  # fmt: skip
        per_chip = self.bytes // n if self.op == "alltoall" else self.bytes
        hbm = topo.spec.hbm_bytes
        if per_chip > hbm:
            raise ConfigError(
                "bytes", self.bytes,
                f"each chip would hold {per_chip:,} bytes but a {topo.spec.name} chip has "
                f"{hbm:,} bytes of HBM",
                allowed=f"at most {hbm:,} bytes per chip",
            )  # fmt: skip
        held = topo.chips * per_chip // item * 4
        if self.payload == "real" and held > REAL_LIMIT_BYTES:
            raise ConfigError(
                "payload", self.payload,
                f"real arrays on {topo.chips} chips need {held:,} bytes of host memory here "
                f"(limit {REAL_LIMIT_BYTES:,})",
                allowed="real up to that size, size for larger arrays",
                hint="use --set payload=size (same timing, no data)",
            )  # fmt: skip


class CollectiveRun(Component):
    """Starts the collective at time 0 and remembers when it finished."""

    def __init__(self, parent: Component, coll: Collective) -> None:
        super().__init__(parent, "collective")
        self.coll = coll
        self.done = False
        coll.on_done = self._done

    def start(self) -> None:
        self.coll.start()

    def _done(self, coll: Collective) -> None:
        self.done = True

    def pending(self) -> str | None:
        return None if self.done else f"{self.coll.op}: {self.coll.chips_left} chip part(s) left"


@dataclasses.dataclass
class Handle:
    topo: Slice
    net: IciNetwork
    coll: Collective
    run: CollectiveRun
    inputs: dict[Any, np.ndarray] | None


def inputs(p: CollectiveParams, topo: Slice) -> dict[Any, np.ndarray]:
    """Each chip's input, drawn from the scenario's seed."""
    rng = np.random.default_rng(p.seed)
    item = DTYPES[p.dtype]
    axes = parse_axes(topo, p.axes)
    n = 1
    for a in axes:
        n *= topo.shape[a]
    elems = p.bytes // item
    size = elems // n if p.op in ("allgather", "alltoall") else elems
    return {c: small_ints(rng, size) for c in topo.coords}


def build(sim: Simulation, p: CollectiveParams) -> Handle:
    top, topo, net = build_slice(sim, p)
    axes = parse_axes(topo, p.axes)
    data = inputs(p, topo) if p.payload == "real" else None
    coll = Collective(
        net, p.op, axes, p.bytes, DTYPES[p.dtype], ring=p.ring, schedule=p.schedule, inputs=data,
        symmetry=p.symmetry == "auto",
    )  # fmt: skip
    return Handle(topo, net, coll, CollectiveRun(top, coll), data)


def reference(p: CollectiveParams, h: Handle) -> dict[Any, np.ndarray]:
    """What numpy says each chip should end with."""
    out: dict[Any, np.ndarray] = {}
    assert h.inputs is not None
    for g in h.coll.groups:
        xs = [h.inputs[c] for c in g.chips]
        if p.op == "allgather":
            full = np.concatenate(xs)
            out.update({c: full for c in g.chips})
        elif p.op == "allreduce":
            total = np.sum(xs, axis=0, dtype=np.float32)
            out.update({c: total for c in g.chips})
        elif p.op == "reducescatter":
            total = np.sum(xs, axis=0, dtype=np.float32)
            for part, c in zip(np.split(total, g.n), g.chips, strict=True):
                out[c] = part
        else:  # alltoall: block j of rank i goes to rank j, as block i there
            blocks = np.stack([np.split(x, g.n) for x in xs])  # [src, dst, elems]
            for j, c in enumerate(g.chips):
                out[c] = np.concatenate(list(blocks[:, j]))
    return out


def check(p: CollectiveParams, h: Handle) -> bool:
    """Every chip's result equals numpy's (block by block: no chip's whole array is built)."""
    want = reference(p, h)
    coll = h.coll
    for c in h.topo.coords:
        if p.op == "alltoall":
            if not np.array_equal(coll.outputs.get(c), want[c]):
                return False
            continue
        off = 0
        for blk in coll.result_blocks(c):
            if not np.array_equal(blk, want[c][off : off + len(blk)]):
                return False
            off += len(blk)
        if off != len(want[c]):
            return False
    return True


def metrics(sim: Simulation, p: CollectiveParams, h: Handle, result: RunResult) -> dict:
    coll = h.coll
    t = seconds(sim, coll.end_ticks)
    n = coll.n
    size = p.bytes // n if p.op == "alltoall" else p.bytes
    algbw = size / t if t > 0 else 0.0
    factor = 2 * (n - 1) / n if p.op == "allreduce" else (n - 1) / n
    correct: bool | None = None
    if h.inputs is not None and coll.end_ticks >= 0:
        correct = check(p, h)
    m = model(p)
    return {
        "time_s": t,
        "cycles": h.net.domain.cycle_at(Ticks(coll.end_ticks)),  # of the ICI links' clock
        "hops": coll.hops,
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * factor,
        "link_utilisation": link_utilisation(h.net, coll.end_ticks),
        "correct": correct,
        "ranks": n,
        "groups": len(coll.groups),
        "wraparound": "".join(a for a, w in zip(h.topo.axis_names, h.topo.wrap, strict=True) if w)
        or "none",
        "flows": coll.flows,
        "sent_packets": h.net.sent_packets(),
        "model_time_s": m["time_s"],
        "model_bound": m["bound"],
        "model_error_pct": 100.0 * (t - m["time_s"]) / m["time_s"] if m["time_s"] else 0.0,
    }


def model(p: CollectiveParams) -> dict[str, Any]:
    """The spec's formula over the ICI axes, plus (between slices) the DCN phase's time."""
    topo = p.slice()
    return time_over(
        topo, parse_axes(topo, p.axes), p.op, p.bytes, p.ici, ring=p.ring, schedule=p.schedule
    )


def time_over(
    topo: Slice, axes: tuple[int, ...], op: str, nbytes: int, ici_cfg: Any,
    ring: str = "bidirectional", schedule: str = "rotated",
) -> dict[str, Any]:  # fmt: skip
    """The model of ``op`` on ``nbytes`` over ``axes`` of ``topo``: the spec's formula over the
    ICI axes, plus the DCN phase's time when an axis runs between slices (what the matmul and
    train-step models use for their collectives too). ``schedule="axis-by-axis"``: the sum of
    one-axis formulas, axis by axis, the data shrinking by each axis's size (hierarchical)."""
    ici = tuple(a for a in axes if not topo.is_dcn(a))
    if schedule == "axis-by-axis" and len(ici) > 1 and op != "alltoall":
        one = "allgather" if op == "allreduce" else op
        sums = {"time_s": 0.0, "latency_term_s": 0.0, "bandwidth_term_s": 0.0}
        size = float(nbytes)
        for a in ici:
            t = models.collective_time(
                one, int(size), (topo.shape[a],), (topo.wrap[a],), topo.spec,
                hop_latency_s=ici_cfg.hop_latency_ns * 1e-9, ring=ring,
                link_bytes_per_s=ici_cfg.link_bytes_per_s,
            )  # fmt: skip
            for k in sums:
                sums[k] += float(t[k]) * (2 if op == "allreduce" else 1)
            size /= topo.shape[a]
        lat, bw = sums["latency_term_s"], sums["bandwidth_term_s"]
        return {**sums, "bound": "latency" if lat >= bw else "bandwidth"}
    out = models.collective_time(
        op, nbytes, tuple(topo.shape[a] for a in ici), tuple(topo.wrap[a] for a in ici),
        topo.spec, hop_latency_s=ici_cfg.hop_latency_ns * 1e-9, ring=ring,
        link_bytes_per_s=ici_cfg.link_bytes_per_s,
    ) if ici else {"time_s": 0.0, "bound": "dcn"}  # fmt: skip
    if len(ici) < len(axes):
        hosts = {topo.host_of(c) for c in topo.coords}
        dcn = models.dcn_time(
            op, nbytes, math.prod(topo.shape[a] for a in ici), topo.slices,
            topo.chips // len(hosts), pcie_bytes_per_s=ici_cfg.pcie_bytes_per_s,
            dcn_bytes_per_s=ici_cfg.dcn_bytes_per_s, latency_s=ici_cfg.dcn_latency_ns * 1e-9,
        )  # fmt: skip
        out = {**out, "time_s": float(out["time_s"]) + dcn, "dcn_time_s": dcn}
        if dcn > float(out["time_s"]) / 2:
            out["bound"] = "dcn"
    return out


def footprint(p: CollectiveParams) -> registry.Footprint:
    """The network and, with real payloads, every chip's input, output and packet buffers
    (float32 values: 4 bytes per element)."""
    elems = p.bytes // DTYPES[p.dtype]
    data = 3 * 4 * elems * p.slice().chips if p.payload == "real" else 0
    return common_footprint(p, 0, data, "bytes")


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-collective",
            summary="a collective over axes of a TPU slice (ICI rings, packets, real shards)",
            params=CollectiveParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
