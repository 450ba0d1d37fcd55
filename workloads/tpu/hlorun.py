"""``tpu-hlo``: an SPMD-partitioned HLO module (the text JAX prints) run on a TPU slice.

The module is read by :mod:`workloads.tpu.hlo` into the op graph of :mod:`tpu.graph` and run
there: dots and convolutions on each chip's HBM -> VMEM -> MXU pipeline, other fusions and
copies through HBM, collectives on the ICI with their replica groups, in the module's order
(or by dataflow, ``order=dataflow``). Device ``d`` is chip ``d`` of the slice in row-major
order; the module's devices (partitions x replicas) must be the slice's chips. Size only: no
values are computed.

Metrics and model: those of every op-graph kind (:mod:`workloads.tpu.opgraph`): ``time_s``; the
device that finished last's ``compute_s``, ``memory_s``, ``comm_s``, ``overlap_pct``, ``bound``;
``op_table``, a record per op (name, class, where, start_s, end_s); and the scheduled roofline.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from runner import registry
from simcore import config as cfg
from simcore.config import file_param, param
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from tpu.chip import TensorChip
from tpu.graph import Graph, GraphRun
from tpu.slice import SHAPE_ALLOWED, SliceParams, build_slice
from tpu.topology import Slice
from workloads.tpu import hlo as reader
from workloads.tpu import opgraph
from workloads.tpu.common import footprint as common_footprint

#: The module run when ``hlo`` is not set: the data-parallel MLP step of tests/data/hlo/.
DEMO = Path(__file__).with_name("hlo-modules") / "mlp-dp.hlo.txt"


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
        "dataflow: each op after the ops it reads, each stream taking its ready ops out of "
        "order",
        choices=reader.ORDERS,
    )
    tile_k: int = param(512, "rows of each weight tile copied HBM -> VMEM", min=8)
    tile_n: int = param(512, "columns of each weight tile", min=8)
    topology: str = param(
        "2x4", "slice shape: chips along each axis of the torus", allowed=SHAPE_ALLOWED
    )

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
    return HloRun(topo, net, GraphRun(top, topo, net, chips, graph, issue=issue(p)), mod)


def issue(p: HloParams) -> str:
    """``order=dataflow``: each stream takes the lowest-numbered ready op (out of order)."""
    return "ready" if p.order == "dataflow" else "in-order"


def metrics(sim: Simulation, p: HloParams, run: HloRun, result: RunResult) -> dict[str, Any]:
    out = opgraph.metrics(sim, run.program, run.net)
    return opgraph.with_model(out, model(p))


def model(p: HloParams) -> dict[str, Any]:
    """Every op at its roofline, scheduled like the simulation (:func:`opgraph.model`)."""
    _mod, graph = load(p)
    return opgraph.model(graph, p.slice(), p.ici, tile_k=p.tile_k, tile_n=p.tile_n, issue=issue(p))


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
    """The parameters of bundled module ``name`` (``workloads/tpu/hlo-modules/``) and ``extra``."""
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
