"""``gpt-ws``: weight-streamed GPT training on N CS-2 systems fed by MemoryX through SwarmX.

Pure data parallelism: each CS-2 trains on its own ``batch`` sequences; its activations stay on
the wafer for the whole step. MemoryX walks the execution plan (:mod:`.plan`): it streams every
layer's weights down the SwarmX tree in the forward pass, transposed weights and gradient
requests in the backward pass; SwarmX broadcasts each chunk to all wafers and sum-reduces their
gradient chunks; MemoryX updates the dense FP32 copy chunk by chunk and streams the updated rows
in the next step. The parts are :mod:`memoryx.service`, :mod:`swarmx.node` (tree from
:mod:`swarmx.tree`) and :mod:`.cs2`; this module assembles them, reads the metrics and holds
the analytical models (:func:`model`, :mod:`.validation`), which never feed the simulation.

Size-only runs (the default; ``functional = false``) move byte counts through the same
mechanisms; ``functional = true`` carries real FP32/FP16 data (tiny models), and
``cs2.fidelity = "pe"`` computes the streamed products on the cycle-level wafer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from cs2 import gpt
from cs2.pekernels import PeSideWork, data_words
from cs2.plan import PlanConfig, build_plan
from cs2.system import Cs2, Cs2Config, Function, PeProducts
from memoryx.plan import Entry
from memoryx.service import MemoryX, MemoryXConfig, TensorData
from memoryx.store import (
    BYTES_PER_PARAM,
    CsrTensor,
    DenseTensor,
    Placement,
    place,
    update_rows,
)
from numerics.floats import round_fp16
from runner import registry
from simcore.component import Component
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from swarmx.node import BroadcastReduceNode, SwarmXConfig
from swarmx.tree import boxes, build_tree, hops, nodes
from workloads.cluster import model as cluster_model

MODEL_NAMES = (*gpt.MODELS, "custom")
SECONDS_PER_WEEK = 604_800
#: Largest model a functional (real-data) run accepts, parameters.
FUNCTIONAL_MAX_PARAMS = 20_000_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class GptWsParams(registry.ScenarioParams):
    model: str = param(
        "gpt3-175b", "the GPT: one of the spec's five, or custom", choices=MODEL_NAMES
    )
    layers: int = param(0, "decoder layers (0: the model's)", min=0, max=10_000)
    hidden: int = param(0, "custom model: hidden size H", min=0)
    sequence: int = param(0, "custom model: sequence length S", min=0)
    vocab: int = param(0, "custom model: vocabulary size V", min=0)
    heads: int = param(0, "custom model: attention heads (0: H/64, at least 1)", min=0)
    systems: int = param(1, "CS-2 systems (pure data parallel)", min=1, max=1024)
    batch: int = param(
        0,
        "sequences per system (0: the model's batch / systems, capped by the wafer's SRAM)",
        min=0,
    )
    sparsity: float = param(
        0.0, "fraction of zero weights in the decoder matrices", allowed="[0, 1)"
    )
    steps: int = param(
        2, "training steps simulated (step time: between the last two)", min=1, max=64
    )
    chunk_bytes: int = param(128 * 2**20, "forward stream bytes per plan chunk", min=1024)
    fidelity: str = param(
        "wafer",
        "CS-2 fidelity: wafer (calibrated model) or pe (cycle-level "
        "ws-matmul on a cs2.pe_px x cs2.pe_py sub-array)",
        choices=("wafer", "pe"),
    )
    functional: bool = param(False, "carry real data (tiny models; always on at fidelity pe)")
    memoryx: MemoryXConfig = section(MemoryXConfig, "the MemoryX service")
    swarmx: SwarmXConfig = section(SwarmXConfig, "the SwarmX fabric")
    cs2: Cs2Config = section(Cs2Config, "each CS-2 system")

    # -- derived ---------------------------------------------------------------------------------
    def shape(self) -> gpt.Shape:
        if self.model == "custom":
            h = self.hidden
            return gpt.Shape(
                self.layers, h, self.sequence, self.vocab, self.heads or max(1, h // 64)
            )
        m = gpt.MODELS[self.model]
        return gpt.Shape(
            self.layers or int(m["layers"]),
            int(m["hidden"]),
            int(m["sequence"]),
            int(m["vocab"]),
            int(m["heads"]),
        )

    def seqs(self) -> int:
        """Sequences per system."""
        if self.batch:
            return self.batch
        s = self.shape()
        per_seq = s.layers * s.sequence * s.hidden * self.cs2.compute.activation_bytes
        fit = max(1, self.cs2.sram_bytes // max(per_seq, 1))
        table = gpt.MODELS.get(self.model, {}).get("batch_tokens")
        want = math.ceil(table / s.sequence / self.systems) if table else 1
        return max(1, min(fit, want))

    @property
    def carries_data(self) -> bool:
        return self.functional or self.fidelity == "pe"

    def plan_config(self) -> PlanConfig:
        align = self.cs2.pe_px if self.fidelity == "pe" else 1
        return PlanConfig(
            self.steps,
            1.0 - self.sparsity,
            self.chunk_bytes,
            align,
            self.memoryx.regrow_threshold > 0,
        )

    def placement(self) -> Placement:
        s = self.shape()
        return place(
            [(n, r * c) for n, r, c in s.tensors()],
            self.memoryx.dram_bytes,
            self.memoryx.flash_bytes,
            prefix="memoryx.",
        )

    # -- checks ----------------------------------------------------------------------------------
    def check(self) -> None:
        if not 0.0 <= self.sparsity < 1.0:
            raise ConfigError(
                "sparsity",
                self.sparsity,
                "must be in [0, 1)",
                allowed="[0, 1)",
                hint="sparsity is the fraction of zero weights: 0 is dense, 0.9 "
                "keeps one weight in ten",
            )
        if self.model == "custom":
            for key in ("layers", "hidden", "sequence", "vocab"):
                if getattr(self, key) <= 0:
                    raise ConfigError(
                        key,
                        getattr(self, key),
                        "model = 'custom' needs it > 0",
                        hint="set layers, hidden, sequence and vocab",
                    )
        s = self.shape()
        if s.hidden % s.heads:
            raise ConfigError("heads", s.heads, f"must divide hidden = {s.hidden}")
        self.placement()
        seqs = self.seqs()
        need = seqs * s.layers * s.sequence * s.hidden * self.cs2.compute.activation_bytes
        if need > self.cs2.sram_bytes and self.batch == 0:
            # batch = 0 asks for the largest that fits: not even one sequence per system does
            raise ConfigError(
                "cs2.sram_bytes", self.cs2.sram_bytes,
                f"the stored activations of {seqs:,} sequence(s) need {need:,} B but a wafer "
                f"holds {self.cs2.sram_bytes:,} B",
                allowed=f"at least {need:,}",
                hint="raise cs2.sram_bytes, or lower layers, sequence or hidden",
            )  # fmt: skip
        if need > self.cs2.sram_bytes:
            raise ConfigError(
                "batch",
                self.batch,
                f"the stored activations need {need:,} B "
                f"but a wafer holds {self.cs2.sram_bytes:,} B (cs2.sram_bytes)",
                hint="lower batch (or 0 for the largest that fits)",
            )
        if self.carries_data and s.params > FUNCTIONAL_MAX_PARAMS:
            raise ConfigError(
                "functional" if self.fidelity == "wafer" else "fidelity",
                True if self.fidelity == "wafer" else self.fidelity,
                f"real data needs a tiny model: this one has {s.params:,} parameters, the "
                f"limit is {FUNCTIONAL_MAX_PARAMS:,}",
                hint="use model = 'custom' with small layers/hidden/sequence/vocab, or "
                "functional = false and fidelity = 'wafer' (size only)",
            )
        if self.fidelity == "pe":
            self._check_pe(s, seqs)

    def _check_pe(self, s: gpt.Shape, seqs: int) -> None:
        px, py = self.cs2.pe_px, self.cs2.pe_py
        tokens = seqs * s.sequence
        dims = sorted({d for _, r, c in s.tensors()[1:] for d in (r, c)})
        bad = [d for d in dims if d % px]
        if bad or tokens % py:
            raise ConfigError(
                "cs2.pe_px" if bad else "cs2.pe_py",
                px if bad else py,
                f"PE fidelity splits every matrix dimension over cs2.pe_px = {px} columns and "
                f"the {tokens} tokens per system over cs2.pe_py = {py} rows; "
                + (
                    f"dimension(s) {', '.join(map(str, bad))} do not divide"
                    if bad
                    else f"{tokens} tokens do not divide"
                ),
                hint="choose a sub-array whose sides divide them",
            )
        bt = tokens // py
        widest = max(max(r, c) for _, r, c in s.tensors()[1:])
        words = (2 * widest // px + 2) * bt + widest // px
        free = self.cs2.wafer.pe.sram_bytes - self.cs2.wafer.pe.code_bytes
        if words * 4 > free:
            raise ConfigError(
                "fidelity",
                "pe",
                f"the largest layer (width {widest}) needs {words * 4:,} B per PE on a "
                f"{px}x{py} sub-array but a PE has {free:,} B beside the code",
                hint="use a larger sub-array (cs2.pe_px, cs2.pe_py), a smaller model, or "
                "fidelity = 'wafer'",
            )
        # attention, loss and epilogues run on the same sub-array (pekernels)
        need = data_words(tokens, s.hidden, s.heads, s.sequence, s.vocab, px, py)
        kind, most = max(need.items(), key=lambda kv: kv[1])
        if most * 4 > free:
            raise ConfigError(
                "fidelity",
                "pe",
                f"the {kind} program needs {most * 4:,} B of data per PE on a {px}x{py} "
                f"sub-array but a PE has {free:,} B beside the code",
                hint="use a larger sub-array (cs2.pe_px, cs2.pe_py), a shorter sequence, a "
                "smaller model, or fidelity = 'wafer'",
            )


# -- build ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Cluster:
    p: GptWsParams
    shape: gpt.Shape
    plan: list[Entry]
    memx: MemoryX
    nodes: list[BroadcastReduceNode]
    systems: list[Cs2]
    tree: Any
    functions: list[Function | None]
    weights0: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    tokens: tuple[np.ndarray, np.ndarray] | None = None


def link_latency(p: GptWsParams, sender_hz: int) -> int:
    """One link's latency in the sender's cycles (the same time whoever sends)."""
    return round(p.swarmx.link_latency_cycles * sender_hz / p.swarmx.clock_hz)


def build(sim: Simulation, p: GptWsParams) -> Cluster:
    shape, seqs = p.shape(), p.seqs()
    plan = build_plan(shape, p.plan_config())
    grads = sum(1 for e in plan if e.returns_gradient)
    data: dict[str, TensorData] | None = None
    weights0 = tokens = None
    if p.carries_data:
        density = 1.0 - p.sparsity
        weights0 = gpt.init_weights(shape, density, p.seed)
        regrow = p.memoryx.regrow_threshold > 0
        data = {}
        for name, (w, mask) in weights0.items():
            request = np.ones_like(mask) if regrow else mask.copy()
            dense = DenseTensor(w.copy(), mask.copy(), request)
            data[name] = TensorData(dense, CsrTensor.build(dense.w, dense.mask))
        tokens = gpt.batch(shape, seqs * p.systems, p.seed)
    memx = MemoryX(sim, "memoryx", p.memoryx, plan, p.placement(), data)
    tree = build_tree(p.systems, p.swarmx.mode)
    sw = Component(sim, "swarmx", domain=sim.domain("swarmx", p.swarmx.clock_hz))
    names = nodes(tree)
    made = {
        n: BroadcastReduceNode(sw, n, p.swarmx, tree.out_degree(n), len(plan), grads) for n in names
    }
    top = Component(sim, "cs2", domain=sim.domain("cs2", p.cs2.clock_hz))
    systems, functions = [], []
    for k in range(p.systems):
        fn = pe = side = None
        if p.fidelity == "pe":
            pe = PeProducts(p.cs2.pe_px, p.cs2.pe_py, p.cs2.wafer, sim.sub_runs)
            side = PeSideWork(p.cs2.pe_px, p.cs2.pe_py, p.cs2.wafer, sim.sub_runs)
        if tokens is not None:
            ids, tgt = (a[k * seqs : (k + 1) * seqs] for a in tokens)
            fn = Function(shape, ids, tgt, seqs * p.systems * shape.sequence, pe, side)
        functions.append(fn)
        systems.append(
            Cs2(
                top,
                f"cs2[{k}]",
                p.cs2,
                shape=shape,
                seqs=seqs,
                entries=len(plan),
                gradients=grads,
                fidelity=p.fidelity,
                function=fn,
                pe=pe,
            )
        )
    hz = {"memoryx": p.memoryx.clock_hz, "swarmx": p.swarmx.clock_hz, "cs2": p.cs2.clock_hz}

    def down(name: str) -> Any:
        if name in made:
            return made[name].ports["down_in"]
        return systems[_index(name)].ports["weights"]

    for parent, child in sorted(tree.edges(), key=lambda e: (e[0], _order(e[1]))):
        if parent == "memoryx":
            sim.connect(
                memx.weights,
                down(child),
                latency_cycles=link_latency(p, hz["memoryx"]),
                capacity=p.swarmx.link_buffer_chunks,
                name=f"link/memoryx->{child}",
            )
            sim.connect(
                made[child].ports["up_out"],
                memx.grads,
                latency_cycles=link_latency(p, hz["swarmx"]),
                capacity=p.swarmx.link_buffer_chunks,
                name=f"link/{child}->memoryx",
            )
            continue
        i = sorted(tree.successors(parent), key=_order).index(child)
        node = made[parent]
        sim.connect(
            node.ports[f"down_out[{i}]"],
            down(child),
            latency_cycles=link_latency(p, hz["swarmx"]),
            capacity=p.swarmx.link_buffer_chunks,
            name=f"link/{parent}->{child}",
        )
        up = made[child].ports["up_out"] if child in made else systems[_index(child)].grads
        sender = hz["swarmx"] if child in made else hz["cs2"]
        sim.connect(
            up,
            node.ports[f"up_in[{i}]"],
            latency_cycles=link_latency(p, sender),
            capacity=p.swarmx.link_buffer_chunks,
            name=f"link/{child}->{parent}",
        )
    return Cluster(
        p, shape, plan, memx, [made[n] for n in names], systems, tree, functions, weights0, tokens
    )


def _index(name: str) -> int:
    return int(name[name.index("[") + 1 : -1])


def _order(name: str) -> tuple[int, ...]:
    inside = name[name.index("[") + 1 : -1]
    return tuple(int(v) for v in inside.split(","))


# -- metrics -------------------------------------------------------------------------------------
def step_window(sim: Simulation, c: Cluster) -> tuple[float, int]:
    """(step time in seconds, the step measured): between the last updates of the last two
    steps, or the whole run for one step."""
    ends = c.memx.update_ends
    last = c.p.steps - 1
    t = sim.timebase.to_seconds
    if last == 0:
        return float(t(ends[0])), 0
    return float(t(ends[last] - ends[last - 1])), last


def metrics(sim: Simulation, p: GptWsParams, c: Cluster, result: RunResult) -> dict[str, Any]:
    step_s, step = step_window(sim, c)
    shape, seqs = c.shape, p.seqs()
    tokens = seqs * shape.sequence
    t = sim.timebase.to_seconds
    cfg = p.cs2
    peak = cfg.compute.pes * cfg.clock_hz * 2
    done = c.systems[0].flops
    fwd_flops, bwd_flops = done.get((step, "fwd"), 0), done.get((step, "bwd"), 0)
    flops = fwd_flops + bwd_flops
    end = sim.env.now
    ifaces = [i for n in c.nodes for i in n.interfaces()]
    link_util = max((i.busy_ticks for i in ifaces), default=0) / end if end else 0.0
    exposed = [float(t(s.exposed.get(step, 0))) for s in c.systems]
    out: dict[str, Any] = {
        "model": p.model,
        "systems": p.systems,
        "batch": seqs,
        "parameters": shape.params,
        "time_s": step_s,
        "tokens_per_s": p.systems * tokens / step_s if step_s else 0.0,
        "wafer_utilisation": flops / (step_s * peak) if step_s else 0.0,
        "memoryx_bytes": shape.params * BYTES_PER_PARAM,
        "train_flops_per_step": flops,
        "forward_flops_per_step": fwd_flops,
        "swarmx_link_utilisation": link_util,
        "exposed_latency_s": sum(exposed) / len(exposed),
        "scaling_efficiency": 1.0,
        "swarmx_nodes": len(c.nodes),
        "swarmx_boxes": boxes(c.tree, p.swarmx.mode),
        "swarmx_hops": hops(c.tree),
        "first_chunk_latency_s": float(t(max(s.first_arrival for s in c.systems))),
        "memoryx_stream_bytes_per_step": sum(e.stream_bytes for e in c.plan if e.step == step),
        "memoryx_gradient_bytes_per_step": sum(
            e.grad_bytes for e in c.plan if e.step == step and e.returns_gradient
        ),
        "interconnect_bits_per_s": interconnect_bits_per_s(p, c, step),
        "plan_entries": len(c.plan),
        "run_time_s": float(t(end)),
        "correct": None,
    }
    modelled = cluster_model.step_model(p)["time_s"]
    out["model_time_s"] = modelled
    out["model_error_pct"] = 100.0 * (step_s - modelled) / modelled if modelled else 0.0
    if p.systems > 1:
        one = dataclasses.replace(p, systems=1, batch=seqs)
        alone = _run_alone(sim, one)
        out["scaling_efficiency"] = alone / step_s if step_s else 0.0
    if p.carries_data:
        out.update(functional_check(p, c))
    if p.fidelity == "pe":
        out["pe_runs"] = sum(s.pe.runs for s in c.systems if s.pe is not None)
        sides = [f.side.stats for f in c.functions if f is not None and f.side is not None]
        out["pe_side_runs"] = sum(st.runs for st in sides)
        kinds = sorted({k for st in sides for k in st.cycles})
        out["pe_side_cycles"] = {k: sum(st.cycles.get(k, 0) for st in sides) for k in kinds}
    return out


def interconnect_bits_per_s(p: GptWsParams, c: Cluster, step: int) -> float:
    """The simulated step's busier direction (weights in, gradients out), in bits per second
    over a week of training: iterations = the model's tokens / its batch (custom: 3·10^11
    tokens over this run's global batch)."""
    table = gpt.MODELS.get(p.model)
    global_tokens = p.systems * p.seqs() * c.shape.sequence
    iterations = table["tokens"] / table["batch_tokens"] if table else 3e11 / global_tokens
    down = sum(e.stream_bytes for e in c.plan if e.step == step)
    up = sum(e.grad_bytes for e in c.plan if e.step == step and e.returns_gradient)
    return max(down, up) * 8 * iterations / SECONDS_PER_WEEK


def _run_alone(sim: Simulation, p: GptWsParams) -> float:
    """The step time of ``p`` (one system) in a sub-run of ``sim``."""
    (child, c), _ = sim.sub_runs.run("one-system reference", lambda s: (s, build(s, p)))
    return step_window(child, c)[0]


#: Gradient noise the functional check allows, relative to a tensor's largest gradient: FP32
#: sums in another order, and at PE fidelity the software exp (relative error < 1e-5).
GRAD_NOISE = 1e-6


def functional_check(p: GptWsParams, c: Cluster) -> dict[str, Any]:
    """Loss, and for a one-step run the weights MemoryX holds after the step against
    :func:`reference_update` (numpy, whole batch at once).

    A weight may differ by 1e-4 of the largest weight change (+ 1e-7), and with Adam by what a
    gradient error of ``GRAD_NOISE`` x the tensor's largest gradient moves it: Adam's first
    step is lr·g/(|g| + eps), whose slope lr·eps/(|g| + eps)^2 is up to lr/eps = 10^6 at g = 0,
    so where a gradient is as small as FP32 noise the step's size is noise too (the other
    elements keep the tight bound; SGD's slope is lr, inside it)."""
    loss = sum(f.loss for f in c.functions if f is not None)
    out: dict[str, Any] = {"loss": loss}
    if p.steps != 1 or c.weights0 is None or c.tokens is None:
        return out
    ref_loss, ref, grads = reference_update(p, c.shape, c.weights0, *c.tokens)
    err = excess = scale = 0.0
    for name, w in ref.items():
        scale = max(scale, float(np.max(np.abs(w - c.weights0[name][0] * c.weights0[name][1]))))
    tight = 1e-4 * max(scale, 1e-6) + 1e-7
    opt = p.memoryx
    for name, w in ref.items():
        e = np.abs(c.memx.data[name].dense.w - w)
        err = max(err, float(e.max()))
        tol = np.full(e.shape, tight)
        if opt.optimizer == "adam":
            g = np.abs(grads[name])
            noise = GRAD_NOISE * float(g.max())
            tol += np.minimum(2 * opt.lr, opt.lr * opt.eps * noise / (g + opt.eps) ** 2)
        excess = max(excess, float(np.max(e - tol)))
    out["reference_loss"] = ref_loss
    out["max_weight_error"] = err
    out["max_weight_change"] = scale
    out["correct"] = bool(excess <= 0 and abs(loss - ref_loss) < 1e-4)
    return out


def reference_update(
    p: GptWsParams,
    shape: gpt.Shape,
    weights0: dict[str, tuple[np.ndarray, np.ndarray]],
    ids: np.ndarray,
    targets: np.ndarray,
) -> tuple[float, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One data-parallel step in plain numpy: the whole batch's gradient with the FP16 weights
    the wafers see, then the optimizer on the FP32 masters (:mod:`memoryx.store`). Returns the
    loss, the updated weights and the gradients."""
    regrow = p.memoryx.regrow_threshold > 0
    masters = {}
    seen = {}
    for name, (w, mask) in weights0.items():
        d = DenseTensor(w.copy(), mask.copy(), np.ones_like(mask) if regrow else mask.copy())
        masters[name] = d
        seen[name] = round_fp16(d.w)
    loss, grads = gpt.reference_step(shape, seen, ids, targets)
    opt = p.memoryx.opt()
    from_store = {}
    for name, d in masters.items():
        d.g[:] = grads[name]
        update_rows(d, slice(0, d.w.shape[0]), opt, 1)
        from_store[name] = d.w
    return loss, from_store, grads


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="gpt-ws",
            summary="weight-streamed GPT training: MemoryX -> SwarmX -> N CS-2 systems "
            "(data parallel), gradients reduced back and applied in MemoryX",
            params=GptWsParams,
            build=build,
            metrics=metrics,
            model=cluster_model.model,
            footprint=footprint,
            origin=__name__,
        )
    )


#: Host memory of one built component (MemoryX's parts, a SwarmX node, a CS-2 and its I/O:
#: Python objects, queues and its share of the plan), bytes: tracemalloc over the gpt-ws
#: scenario's build measured 59 kB each, rounded up.
COMPONENT_BYTES = 60_000
#: Host bytes per parameter when data is carried: FP32 weights, gradients and optimizer state,
#: the sparsity mask and the CSR copy MemoryX keeps (rounded up).
DATA_BYTES_PER_PARAM = 40


def footprint(p: GptWsParams) -> registry.Footprint:
    """MemoryX (itself, reader, I/O, updater), SwarmX (itself and its tree's nodes), the CS-2
    top and two components per system (the system, its I/O); real data when carried: the
    parameters' arrays and each system's stored activations."""
    tree_nodes, _ = cluster_model.tree_shape(p.systems, p.swarmx.mode)
    n = 4 + 1 + tree_nodes + 1 + 2 * p.systems
    data = 0
    if p.carries_data:
        s = p.shape()
        acts = p.systems * p.seqs() * s.layers * s.sequence * s.hidden * 4
        data = DATA_BYTES_PER_PARAM * s.params + acts
    return registry.Footprint(n, n * COMPONENT_BYTES + data, "systems")
