"""``tpu-hlo``: an SPMD-partitioned HLO module (the text JAX prints) run on a TPU slice.

The module is read by :mod:`workloads.tpu.hlo` into the op graph of :mod:`tpu.graph` and run
there: dots and convolutions on each chip's HBM -> VMEM -> MXU pipeline, other fusions and
copies through HBM, collectives on the ICI with their replica groups, in the module's order
(or by dataflow, ``order=dataflow``). Device ``d`` is chip ``d`` of the slice in row-major
order; the module's devices (partitions x replicas) must be the slice's chips. Size only: no
values are computed.

Metrics: ``time_s``; the device that finished last's ``compute_s`` (MXU ops), ``memory_s``
(HBM ops), ``comm_s`` (collectives), ``overlap_pct`` (the share of its communication time
during which its compute stream was busy too), ``bound``; ``op_table``, a record per op
(name, class, where, start_s, end_s); the model's.

The model (:func:`model`): each op's roofline time (a matmul: the larger of its padded MXU
passes at the peak rate and its HBM traffic, :func:`workloads.tpu.models.matmul_roofline`; a
memory op: bytes / HBM bandwidth; a collective over axes: the spec's formula,
:func:`workloads.tpu.collective.time_over`; over other groups: a ring's steps, each its block's
serialisation plus the longest neighbour route's hop latencies; a permute: its longest pair), laid
on the same two in-order streams with the same dependencies, analytically.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

from runner import registry
from simcore import config as cfg
from simcore.config import file_param, param
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from tpu.chip import TensorChip
from tpu.graph import Graph, GraphRun, Op, device_coord, match_axes
from tpu.slice import SliceParams, build_slice, link_utilisation
from tpu.topology import Slice
from workloads.tpu import hlo as reader
from workloads.tpu import models
from workloads.tpu.collective import time_over
from workloads.tpu.common import footprint as common_footprint
from workloads.tpu.common import seconds

#: The module run when ``hlo`` is not set: the data-parallel MLP step of tests/data/hlo/.
DEMO = Path(__file__).with_name("hlo") / "mlp-dp.hlo.txt"


@dataclasses.dataclass(frozen=True, kw_only=True)
class HloParams(SliceParams):
    hlo: str = file_param(
        "",
        "the HLO text of an SPMD-partitioned module, as jax's compile().as_text() prints it "
        "(docs/workloads-from-outside.md); '' = the bundled demo, a data-parallel MLP step on 8 "
        "devices",
        names=("",),
        allowed="a path to an HLO text file, or '' for the bundled demo",
    )
    order: str = param(
        "module",
        "module: each op after the one before it (async -start/-done pairs overlap); "
        "dataflow: each op after the ops it reads",
        choices=reader.ORDERS,
    )
    tile_k: int = param(512, "rows of each weight tile copied HBM -> VMEM", min=8)
    tile_n: int = param(512, "columns of each weight tile", min=8)
    topology: str = param("2x4", "slice shape, X x Y (2-D chips) or X x Y x Z (v4p, v5p)")

    @property
    def path(self) -> str:
        return self.hlo or str(DEMO)

    def check(self) -> None:
        """The slice, then the file: it must read, and its devices must be the slice's chips."""
        super().check()
        load(self)


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, order: str) -> tuple[reader.Module, Graph]:
    mod = reader.read(path)
    return mod, reader.to_graph(mod, order)


def load(p: HloParams) -> tuple[reader.Module, Graph]:
    """The parsed module and its graph (cached while the file is unchanged)."""
    path = p.path
    try:
        mtime = Path(path).stat().st_mtime_ns
    except OSError as exc:
        raise ConfigError("hlo", path, f"cannot read it ({exc.strerror})") from None
    mod, graph = _load(path, mtime, p.order)
    reader.check_devices(mod, p.slice().chips, p.topology)
    return mod, graph


@dataclasses.dataclass
class HloRun:
    topo: Slice
    net: Any
    program: GraphRun
    module: reader.Module


def build(sim: Simulation, p: HloParams) -> HloRun:
    mod, graph = load(p)
    top, topo, net = build_slice(sim, p)
    chips = {
        c: TensorChip(top, f"chip[{','.join(map(str, c))}]", topo.spec, tile_k=p.tile_k,
                      tile_n=p.tile_n)
        for c in topo.coords
    }  # fmt: skip
    return HloRun(topo, net, GraphRun(top, topo, net, chips, graph), mod)


def metrics(sim: Simulation, p: HloParams, run: HloRun, result: RunResult) -> dict[str, Any]:
    rep = run.program.report()
    t = seconds(sim, rep["end"])
    ops = run.program.graph.programs.get(rep["device"], ())
    flops = sum(2 * math.prod(op.matmul) if op.matmul else op.flops for op in ops)
    table = [
        {"name": name, "class": cls, "where": where, "start_s": seconds(sim, s),
         "end_s": seconds(sim, e)}
        for _i, name, cls, where, s, e in rep["table"]
    ]  # fmt: skip
    comm = seconds(sim, rep["comm"])
    m = model(p)
    return {
        "time_s": t,
        "correct": None,
        "compute_s": seconds(sim, rep["compute"]),
        "memory_s": seconds(sim, rep["memory"]),
        "comm_s": comm,
        "overlap_pct": 100.0 * seconds(sim, rep["overlap"]) / comm if comm else 0.0,
        "bound": rep["bound"],
        "device_count": run.program.graph.devices,
        "op_count": len(ops),
        "flops": flops,
        "flops_utilisation": flops / (t * run.topo.spec.bf16_flops) if t else 0.0,
        "ici_link_utilisation": link_utilisation(run.net, rep["end"]),
        "op_table": table,
        "model_time_s": m["time_s"],
        "model_compute_s": m["compute_s"],
        "model_memory_s": m["memory_s"],
        "model_comm_s": m["comm_s"],
        "model_error_pct": 100.0 * (t - m["time_s"]) / m["time_s"] if m["time_s"] else 0.0,
    }


# -- the model -----------------------------------------------------------------------------------
def op_time(op: Op, topo: Slice, p: HloParams) -> float:
    """One op's roofline time (module docstring)."""
    spec = topo.spec
    if op.cls == "compute":
        if op.matmul is not None:
            m, k, n = op.matmul
            return float(
                models.matmul_roofline(m, k, n, spec, tile_k=p.tile_k, tile_n=p.tile_n)["time_s"]
            )
        d = spec.mxu_dim
        passes = -(-op.flops // (16 * d * d))
        units = spec.mxus_per_core * spec.cores
        mxu = -(-passes // units) * 8 / spec.clock_hz
        return max(mxu, op.bytes / spec.hbm_bytes_per_s)
    if op.cls == "memory":
        return op.bytes / spec.hbm_bytes_per_s
    w = p.ici.link_bytes_per_s or spec.ici_oneway_bytes_per_s
    lat = p.ici.hop_latency_ns * 1e-9
    coords = [device_coord(topo, d) for d in range(topo.chips)]

    def hops(a: int, b: int) -> int:
        return len(topo.route(coords[a], coords[b])) - 1

    if op.cls in ("send", "recv"):
        return op.bytes / w + lat * hops(0, op.peer) if op.cls == "send" else 0.0
    if op.kind == "collective-permute":
        return max((op.bytes / w + lat * hops(s, t) for s, t in op.pairs if s != t), default=0.0)
    groups = op.groups or (tuple(range(topo.chips)),)
    n = len(groups[0])
    if n <= 1 or op.bytes == 0:
        return 0.0
    axes = match_axes(topo, groups)
    if axes is not None:
        v = op.bytes * n if op.kind == "alltoall" else op.bytes
        return float(time_over(topo, axes, op.kind, v, p.ici)["time_s"])
    steps = {"allreduce": 2 * (n - 1)}.get(op.kind, n - 1)
    worst = max(hops(g[i], g[(i + 1) % len(g)]) for g in groups for i in range(len(g)))
    return steps * (op.bytes / n / w + lat * worst)


def schedule(ops: list[Op], times: list[float]) -> float:
    """The end of ``ops`` on two in-order streams with their dependencies (analytical)."""
    end = [0.0] * len(ops)
    free = {"compute": 0.0, "comm": 0.0}
    for i, op in enumerate(ops):
        start = max([free[op.stream], *(end[j] for j in op.deps)])
        end[i] = start + times[i]
        free[op.stream] = end[i]
    return max(end, default=0.0)


def model(p: HloParams) -> dict[str, Any]:
    """Every op at its roofline, scheduled like the simulation (module docstring)."""
    _mod, graph = load(p)
    topo = p.slice()
    ops = list(graph.programs.get(0, ()))
    times = [op_time(op, topo, p) for op in ops]
    by = {"compute": 0.0, "memory": 0.0, "comm": 0.0}
    for op, t in zip(ops, times, strict=True):
        by[op.cls if op.cls in ("compute", "memory") else "comm"] += t
    bound = max(by, key=lambda k: by[k])
    return {
        "time_s": schedule(ops, times),
        "compute_s": by["compute"],
        "memory_s": by["memory"],
        "comm_s": by["comm"],
        "bound": "communication" if bound == "comm" else bound,
    }


def footprint(p: HloParams) -> registry.Footprint:
    """The network and six components per chip; no arrays (size only)."""
    return common_footprint(p, 6, 0, "topology")


#: ``wafersim validate tpu-hlo``: the bundled modules, simulated against their scheduled roofline.
VALIDATION = (
    ("mlp-dp", {}), ("mlp-fsdp", {}), ("mlp-tp", {}), ("mlp-fsdp", {"order": "dataflow"}),
    ("async-dot", {}),
)  # fmt: skip
#: Why the small MLP's ops take longer than their rooflines: every HBM op pays the access
#: latency (500 TensorCore cycles, 0.33 us on v5e), a matmul its pipeline's fill and drain, a
#: collective its hop latencies on top of serialisation; at 1-20 us an op, that is 20-70 %.
VALIDATION_MAX_ERROR_PCT = 70.0


def _validate(runner: registry.Runner) -> list[registry.ValidationRow]:
    points = [load_point(name, extra) for name, extra in VALIDATION]
    rows = []
    for (name, extra), m in zip(VALIDATION, runner("tpu-hlo", points), strict=True):
        label = f"{name} v5e 2x4" + (f" order={extra['order']}" if extra else "")
        rows.append(registry.ValidationRow("tpu-hlo", label, m["time_s"], m["model_time_s"],
                                           unit="s"))  # fmt: skip
    return rows


def load_point(name: str, extra: dict[str, Any]) -> HloParams:
    """The parameters of a bundled module ``name`` (workloads/tpu/hlo/), with ``extra``."""
    return cfg.load(HloParams, {"hlo": str(DEMO.with_name(f"{name}.hlo.txt")), **extra})


def register() -> None:
    registry.register_case(
        registry.ValidationCase(
            name="tpu-hlo",
            summary="HLO modules from JAX (an MLP under DP, FSDP, TP) and a compute-bound "
            "matmul vs each op's roofline, scheduled",
            run=_validate,
            tolerance=VALIDATION_MAX_ERROR_PCT,
            criterion="max_pct",
            origin=__name__,
        )
    )
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-hlo",
            summary="an SPMD HLO module (as JAX prints it) on a TPU slice",
            params=HloParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
