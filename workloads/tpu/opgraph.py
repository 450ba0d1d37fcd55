"""What the kinds that run an op graph (:mod:`tpu.graph`) share: their metrics and their model.

``tpu-hlo`` (and a Chakra reader's kind) build a :class:`tpu.graph.GraphRun` from their file
and report the same keys: :func:`metrics` (``time_s``, the compute, memory and communication
time of the device that finished last, their overlap, the bound, the per-op table) and
:func:`model`, every op at its roofline laid on the same two in-order streams per device with
the same dependencies, analytically:

- a matmul: the larger of its padded MXU passes at the peak rate and its HBM traffic
  (:func:`workloads.tpu.models.matmul_roofline`); FLOPs without a shape: their MXU passes
  against their bytes from HBM; a memory op: bytes / HBM bandwidth;
- a collective whose groups are some of the slice's axes: the spec's formula
  (:func:`workloads.tpu.collective.time_over`); other groups: the ring's steps, each its block's
  serialisation plus the longest neighbour route's hop latencies; a permute or a send: its
  longest pair's serialisation plus hop latencies; a recv: nothing of its own (it waits).

Each device's program is scheduled on its own (collectives do not synchronise devices in the
model) and the model's time is the latest device's.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from simcore.sim import Simulation
from tpu.config import IciConfig
from tpu.graph import Graph, GraphRun, Op, device_coord, match_axes
from tpu.slice import link_utilisation
from tpu.topology import Slice
from workloads.tpu import models
from workloads.tpu.collective import time_over
from workloads.tpu.common import seconds


def metrics(sim: Simulation, program: GraphRun, net: Any) -> dict[str, Any]:
    """The run's metrics from :meth:`tpu.graph.GraphRun.report` (docs/workloads-from-outside.md)."""
    rep = program.report()
    t = seconds(sim, rep["end"])
    ops = program.graph.programs.get(rep["device"], ())
    flops = sum(2 * math.prod(op.matmul) if op.matmul else op.flops for op in ops)
    table = [
        {"name": name, "class": cls, "where": where, "start_s": seconds(sim, s),
         "end_s": seconds(sim, e)}
        for _i, name, cls, where, s, e in rep["table"]
    ]  # fmt: skip
    comm = seconds(sim, rep["comm"])
    return {
        "time_s": t,
        "correct": None,
        "compute_s": seconds(sim, rep["compute"]),
        "memory_s": seconds(sim, rep["memory"]),
        "comm_s": comm,
        "overlap_pct": 100.0 * seconds(sim, rep["overlap"]) / comm if comm else 0.0,
        "bound": rep["bound"],
        "device_count": program.graph.devices,
        "op_count": len(ops),
        "flops": flops,
        "flops_utilisation": flops / (t * program.topo.spec.bf16_flops) if t else 0.0,
        "ici_link_utilisation": link_utilisation(net, rep["end"]),
        "op_table": table,
    }


def with_model(out: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
    """``out`` with the model's keys (``model_X``) and ``model_error_pct``."""
    t = out["time_s"]
    return {
        **out,
        "model_time_s": m["time_s"],
        "model_compute_s": m["compute_s"],
        "model_memory_s": m["memory_s"],
        "model_comm_s": m["comm_s"],
        "model_error_pct": 100.0 * (t - m["time_s"]) / m["time_s"] if m["time_s"] else 0.0,
    }


def op_time(
    op: Op, device: int, topo: Slice, ici: IciConfig, *, tile_k: int = 512, tile_n: int = 512
) -> float:
    """One op's roofline time on ``device`` (module docstring)."""
    spec = topo.spec
    if op.cls == "compute":
        if op.matmul is not None:
            m, k, n = op.matmul
            roof = models.matmul_roofline(m, k, n, spec, tile_k=tile_k, tile_n=tile_n)
            return float(roof["time_s"])
        d = spec.mxu_dim
        passes = -(-op.flops // (16 * d * d))
        units = spec.mxus_per_core * spec.cores
        mxu = -(-passes // units) * 8 / spec.clock_hz
        return max(mxu, op.bytes / spec.hbm_bytes_per_s)
    if op.cls == "memory":
        return op.bytes / spec.hbm_bytes_per_s
    w = ici.link_bytes_per_s or spec.ici_oneway_bytes_per_s
    lat = ici.hop_latency_ns * 1e-9

    def hops(a: int, b: int) -> int:
        return len(topo.route(device_coord(topo, a), device_coord(topo, b))) - 1

    if op.cls == "recv":
        return 0.0
    if op.cls == "send":
        return op.bytes / w + lat * hops(device, op.peer)
    if op.kind == "collective-permute":
        return max((op.bytes / w + lat * hops(s, t) for s, t in op.pairs if s != t), default=0.0)
    groups = op.groups or (tuple(range(topo.chips)),)
    n = len(groups[0])
    if n <= 1 or op.bytes == 0:
        return 0.0
    axes = match_axes(topo, groups)
    if axes is not None:
        v = op.bytes * n if op.kind == "alltoall" else op.bytes
        return float(time_over(topo, axes, op.kind, v, ici)["time_s"])
    steps = {"allreduce": 2 * (n - 1)}.get(op.kind, n - 1)
    worst = max(hops(g[i], g[(i + 1) % len(g)]) for g in groups for i in range(len(g)))
    return steps * (op.bytes / n / w + lat * worst)


def schedule(ops: list[Op], times: list[float], issue: str = "in-order") -> float:
    """The end of ``ops`` on two streams with their dependencies (analytical), each stream
    taking its ops in program order (``in-order``) or, whenever it is free, the lowest-numbered
    op whose dependencies have ended (``ready``), as :class:`tpu.graph.GraphRun` does."""
    if issue == "in-order":
        end = [0.0] * len(ops)
        free = {"compute": 0.0, "comm": 0.0}
        for i, op in enumerate(ops):
            start = max([free[op.stream], *(end[j] for j in op.deps)])
            end[i] = start + times[i]
            free[op.stream] = end[i]
        return max(end, default=0.0)
    waiting = {s: [i for i, op in enumerate(ops) if op.stream == s] for s in ("compute", "comm")}
    busy = {"compute": False, "comm": False}
    done: set[int] = set()
    heap: list[tuple[float, int]] = []
    now, last = 0.0, 0.0
    while True:
        for s in ("compute", "comm"):
            if busy[s]:
                continue
            i = next((i for i in waiting[s] if all(j in done for j in ops[i].deps)), None)
            if i is not None:
                waiting[s].remove(i)
                busy[s] = True
                heapq.heappush(heap, (now + times[i], i))
        if not heap:
            return last
        now, i = heapq.heappop(heap)
        done.add(i)
        busy[ops[i].stream] = False
        last = max(last, now)


def model(
    graph: Graph, topo: Slice, ici: IciConfig, *, tile_k: int = 512, tile_n: int = 512,
    issue: str = "in-order",
) -> dict[str, Any]:  # fmt: skip
    """The latest device's scheduled roofline time, and its compute, memory and communication
    sums (an SPMD program is scheduled once: every device runs the same list)."""
    best: dict[str, Any] = {"time_s": 0.0, "compute_s": 0.0, "memory_s": 0.0, "comm_s": 0.0,
                            "bound": "compute"}  # fmt: skip
    done: set[int] = set()
    for d in range(graph.devices):
        ops = list(graph.programs.get(d, ()))
        if id(graph.programs.get(d)) in done:
            continue
        done.add(id(graph.programs.get(d)))
        times = [op_time(op, d, topo, ici, tile_k=tile_k, tile_n=tile_n) for op in ops]
        by = {"compute": 0.0, "memory": 0.0, "comm": 0.0}
        for op, t in zip(ops, times, strict=True):
            by[op.cls if op.cls in ("compute", "memory") else "comm"] += t
        end = schedule(ops, times, issue)
        if end >= best["time_s"]:
            bound = max(by, key=lambda k: by[k])
            best = {
                "time_s": end,
                "compute_s": by["compute"],
                "memory_s": by["memory"],
                "comm_s": by["comm"],
                "bound": "communication" if bound == "comm" else bound,
            }
    return best
