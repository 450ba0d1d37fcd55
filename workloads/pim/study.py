"""``jitq-study``: can HBM-PIM quantize the next transformer block while the GPU runs this one?

The JIT-Q study's question, for one model or all (``model = all``), per MX format:

- **GPU time of block i**: the GEMMs of one transformer layer on one GPU (tensor parallel
  ``tp``, micro-batch ``batch``, sequence ``seq``), each by the spec's roofline:
  max(2MNK / peak FLOP/s, (M·K + K·N) MX_n bytes / (90 % of HBM bandwidth)); element-wise
  work is fused (free). Forward: QKV, scores, context, projection, FC1, FC2; backward: twice
  each (data and weight gradients).
- **PIM time to quantize block i+1**: the layer's weights on this GPU (12 H² / tp) at the
  quantization rate of the GPU's HBM stacks. The rate is *measured*, not modelled: the
  command-level ``jitq`` simulation of one pseudo-channel (every pseudo-channel gets the same
  broadcast stream) on a calibration tensor large enough that no unit pads, elements per
  second per stack, times the stacks. The GPU here is the study's MI210 (4 stacks); the PIM
  stacks are the study's HBM3-PIM preset (the spec's pairing).
- **slack** (``slack_ratio``) = GPU time / PIM time per phase (fwd, bwd) and direction (row,
  col); > 1: PIM keeps up. ``min_slack_ratio`` and ``mean_slack_ratio`` over the four.
- **capacity savings**: the share of a GPU's memory freed by holding one temporary MX copy of
  the next layer (row and column) instead of both MX copies of every layer. Setup: BF16 master
  weights and BF16 Adam moments (6 B per parameter), two MX_n weight copies, activations with
  selective recomputation (34·s·b·H / tp bytes at 16 bits per layer, Korthikanti et al.: the
  7·s·b·H GEMM inputs in MX_n, the rest in FP8), embeddings left out. ``memory_used_pct``
  sets that footprint (both copies) against ``gpu.memory_bytes`` and ``fits_memory`` says whether
  it fits (the savings are a share, so they do not depend on the device's size).
- **throughput loss**: while PIM runs, the CUs that issue its commands (one per two HBM
  channels: 16 of 104) do not compute; the GEMMs of that overlap run at 88/104 of peak.

Model shapes are in docs/pim/hardware.md (the spec's table for the future models; public
configurations for the others, with the tensor/pipeline parallelism chosen there).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from numerics import mx
from pim import jitq as kernel
from runner import budget, registry, subrun
from simcore.component import Component
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from simcore.tracing import TraceLevel
from workloads.pim import jitq as jitq_workload
from workloads.pim.jitq import JitqParams


@dataclasses.dataclass(frozen=True)
class Model:
    layers: int
    hidden: int
    heads: int
    seq: int
    batch: int
    tp: int
    pp: int


#: (L, H, heads, seq, micro-batch, TP, PP): the spec's table for future-*; public configs else.
MODELS = {
    "bert-345m": Model(24, 1024, 16, 512, 8, 1, 1),
    "gpt2-1.5b": Model(48, 1600, 25, 1024, 4, 1, 1),
    "megatron-8.3b": Model(72, 3072, 32, 1024, 4, 8, 1),
    "t-nlg-17b": Model(78, 4256, 28, 1024, 4, 8, 2),
    "gpt3-175b": Model(96, 12288, 96, 2048, 1, 8, 16),
    "mt-nlg-530b": Model(105, 20480, 128, 2048, 1, 8, 35),
    "palm-540b": Model(118, 18432, 48, 2048, 1, 8, 32),
    "future-1t": Model(80, 32768, 128, 4096, 1, 128, 2),
    "future-10t": Model(200, 65536, 128, 8192, 1, 128, 8),
    "future-100t": Model(500, 131072, 128, 16384, 1, 128, 32),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuConfig:
    compute_units: int = param(104, "compute units (MI210)", min=1)
    peak_flops: float = param(181e12, "FP16/BF16 matrix peak, FLOP/s (MI210)", min=1.0)
    hbm_bytes_per_s: float = param(1638.4e9, "HBM bandwidth, bytes/s (4 stacks HBM2E)", min=1.0)
    hbm_efficiency: float = param(0.9, "share of HBM bandwidth GEMM input reads reach", min=0.01)
    hbm_stacks: int = param(4, "HBM stacks (each with PIM in the study)", min=1)
    channels_per_stack: int = param(8, "HBM channels per stack", min=1)
    channels_per_cu: int = param(2, "HBM channels whose PIM commands one CU can issue", min=1)
    memory_bytes: float = param(64 * 2**30, "device memory, bytes", min=1.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyParams(registry.ScenarioParams):
    model: str = param("gpt3-175b", "model, or all", choices=(*MODELS, "all"))
    format: str = param("mx6", "MX format", choices=kernel.FORMATS)
    placement: str = param("opt", "PIM data placement", choices=kernel.PLACEMENTS)
    calibration_rows: int = param(
        1024,
        "rows of the tensor whose simulated quantization gives the PIM rate",
        min=256,
        multiple_of=16,
    )
    gpu: GpuConfig = section(GpuConfig, "the GPU (AMD MI210)")

    def check(self) -> None:
        """The calibration runs (``jitq`` sub-runs of ``calibration_rows`` rows) are checked
        now, their errors naming ``calibration_rows`` rather than the sub-run's ``rows``."""
        for direction in ("row", "col"):
            p = calibration_params(self.format, self.placement, direction, self.calibration_rows)
            try:
                p.check()
            except ConfigError as err:
                if err.key != "rows":
                    raise
                raise ConfigError(
                    "calibration_rows", self.calibration_rows,
                    err.problem.replace("the tensor", "the calibration tensor"),
                    allowed=err.allowed, hint="change calibration_rows",
                ) from None  # fmt: skip
            fp = jitq_workload.footprint(p)
            free = budget.available_bytes()
            if free is not None and fp.bytes > budget.USABLE * free:
                kind = registry.KINDS["jitq"]
                best = budget.largest_fitting(kind, p, int(budget.USABLE * free))
                raise ConfigError(
                    "calibration_rows", self.calibration_rows,
                    f"the calibration run would need about {budget.gb(fp.bytes)} of memory but "
                    f"{budget.gb(free)} is available",
                    allowed=f"256 .. {best:,}" if best else None,
                    hint="lower calibration_rows, or free memory",
                )  # fmt: skip


# -- GPU roofline --------------------------------------------------------------------------------
def gemms(m: Model, phase: str) -> list[tuple[int, int, int]]:
    """(M, N, K) of one layer's GEMMs on one GPU; backward doubles each (dgrad, wgrad)."""
    t, h, tp = m.seq * m.batch, m.hidden, m.tp
    heads = max(1, m.heads // tp)
    dh = h // m.heads
    fwd = [
        (t, 3 * h // tp, h),  # QKV
        *[(m.seq, m.seq, dh)] * (heads * m.batch),  # scores, per head
        *[(m.seq, dh, m.seq)] * (heads * m.batch),  # context, per head
        (t, h, h // tp),  # projection
        (t, 4 * h // tp, h),  # FC1
        (t, h, 4 * h // tp),  # FC2
    ]
    return fwd if phase == "fwd" else fwd + fwd


def gemm_time(mnk: tuple[int, int, int], fmt: str, gpu: GpuConfig, share: float = 1.0) -> float:
    """Roofline: max(compute at ``share`` of peak, inputs at 90 % of HBM bandwidth)."""
    m_, n, k = mnk
    byte = mx.bits_per_element(fmt) / 8
    compute = 2.0 * m_ * n * k / (gpu.peak_flops * share)
    memory = (m_ * k + k * n) * byte / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency)
    return max(compute, memory)


def layer_time(m: Model, phase: str, fmt: str, gpu: GpuConfig, share: float = 1.0) -> float:
    # identical GEMMs (the per-head ones) are timed once and multiplied
    counts: dict[tuple[int, int, int], int] = {}
    for g in gemms(m, phase):
        counts[g] = counts.get(g, 0) + 1
    return sum(n * gemm_time(g, fmt, gpu, share) for g, n in counts.items())


# -- PIM rate, measured by simulation -------------------------------------------------------------
#: Measured rates by (format, placement, direction, rows): a rate is simulated once a process.
_RATES: dict[tuple[str, str, str, int], float] = {}


def calibration_params(fmt: str, placement: str, direction: str, rows: int) -> JitqParams:
    """The parameters of the ``jitq`` run that calibrates :func:`pim_rate`."""
    return JitqParams(
        format=fmt, placement=placement, direction=direction, rows=rows, cols=1024,
        batch_groups=16,
    )  # fmt: skip


def pim_rate(sim: Simulation, fmt: str, placement: str, direction: str, rows: int) -> float:
    """Elements per second one HBM-PIM stack quantizes (command-level simulation of one pCH,
    a ``jitq`` run as a sub-run of ``sim`` the first time these arguments are asked for)."""
    key = (fmt, placement, direction, rows)
    if key not in _RATES:
        p = calibration_params(fmt, placement, direction, rows)
        m = subrun.run_kind(sim, "jitq", p)
        if not m["correct"]:
            raise RuntimeError(f"jitq calibration {fmt} {placement} {direction}: wrong bits")
        _RATES[key] = m["elements_per_s"]
    return _RATES[key]


def study(sim: Simulation, name: str, p: StudyParams) -> dict[str, Any]:
    m, gpu = MODELS[name], p.gpu
    weights = 12 * m.hidden**2 // m.tp
    slack, pim_s, gpu_s = {}, {}, {}
    for phase in ("fwd", "bwd"):
        gpu_s[phase] = layer_time(m, phase, p.format, gpu)
        for direction in ("row", "col"):
            rate = (
                pim_rate(sim, p.format, p.placement, direction, p.calibration_rows) * gpu.hbm_stacks
            )
            pim_s[f"{phase}/{direction}"] = weights / rate
            slack[f"{phase}/{direction}"] = gpu_s[phase] / pim_s[f"{phase}/{direction}"]
    # capacity: per GPU, the layers of its pipeline stage
    layers = -(-m.layers // m.pp)
    params = layers * weights
    byte = mx.bits_per_element(p.format) / 8
    act = layers * (7 * byte + 10 * 1.0) * m.seq * m.batch * m.hidden / m.tp
    all_copies = params * (6 + 2 * byte) + act
    jit = params * 6 + 2 * weights * byte + act
    # throughput: the reserved CUs' share of compute is lost while PIM runs
    reserved = gpu.hbm_stacks * gpu.channels_per_stack / gpu.channels_per_cu
    share = 1 - reserved / gpu.compute_units
    loss_t = 0.0
    for phase, direction in (("fwd", "row"), ("bwd", "col")):
        t = gpu_s[phase]
        overlap = min(pim_s[f"{phase}/{direction}"], t)
        slowed = layer_time(m, phase, p.format, gpu, share)
        loss_t += overlap / t * (slowed - t)
    return {
        "slack_ratio": slack,
        "min_slack_ratio": min(slack.values()),
        "mean_slack_ratio": sum(slack.values()) / len(slack),
        "gpu_layer_s": gpu_s,
        "pim_quantize_s": pim_s,
        "weights_per_gpu_layer": weights,
        "capacity_savings_pct": 100.0 * (all_copies - jit) / all_copies,
        "memory_per_gpu_gib": all_copies / 2**30,
        "memory_used_pct": 100.0 * all_copies / gpu.memory_bytes,
        "fits_memory": all_copies <= gpu.memory_bytes,
        "freed_gib": (all_copies - jit) / 2**30,
        "throughput_loss_pct": 100.0 * loss_t / (gpu_s["fwd"] + gpu_s["bwd"]),
        "reserved_cu_count": reserved,
    }


#: A slice of the study's plan: (track, name, start, length), times in nanoseconds.
PlanSlice = tuple[str, str, int, int]


def plan(sim: Simulation, p: StudyParams) -> tuple[list[PlanSlice], int]:
    """The study's execution plan for one model: the GPU's GEMMs of layer i (one slice each,
    category ``gemm``, on the ``gpu`` track) beside the PIM quantization of layer i + 1
    (``pim``), forward then backward, for two layers, in whole nanoseconds; and its end (the
    run's ``time_s``). The study's figures are computed, not read from it: it is what
    ``run --trace`` shows."""
    m = MODELS[p.model]
    names = ["qkv", "attention", "proj", "fc1", "fc2"]
    slices: list[PlanSlice] = []
    now = 0
    for layer in range(2):
        for phase, direction in (("fwd", "row"), ("bwd", "col")):
            t0 = now
            rate = pim_rate(sim, p.format, p.placement, direction, p.calibration_rows)
            pim_ns = round(12 * m.hidden**2 / m.tp / (rate * p.gpu.hbm_stacks) * 1e9)
            slices.append(("pim", f"quantize layer {layer + 1} ({direction})", t0, pim_ns))
            for name, g in zip(names, _grouped(m, phase), strict=True):
                ns = round(sum(gemm_time(x, p.format, p.gpu) for x in g) * 1e9)
                slices.append(("gemm", f"{phase} {name} layer {layer}", now, ns))
                now += ns
            now = max(now, t0 + pim_ns)
    return slices, now


class Timeline(Component):
    """The study's plan (:func:`plan`) walked in time for traces, on the ``gpu`` and ``pim``
    tracks of the ``study`` domain (nanoseconds); nothing is measured from it."""

    def __init__(self, sim: Simulation, p: StudyParams) -> None:
        super().__init__(sim, "study", domain=sim.domain("study", 1_000_000_000))
        self.p = p
        self.gpu = Component(self, "gpu")
        self.pim = Component(self, "pim")

    def start(self) -> None:
        if self.p.model != "all" and self.sim.trace_level >= TraceLevel.OPS:
            self.process(self._walk(), "plan")

    def _walk(self) -> Any:
        slices, end = plan(self.sim, self.p)
        ticks = self.domain.ticks
        for category, name, start, ns in slices:
            if ticks(start) > self.env.now:
                yield self.env.timeout(ticks(start) - self.env.now)
            track = self.pim if category == "pim" else self.gpu
            track.trace(category, name, self.env.now, ticks(ns))
        yield self.env.timeout(ticks(end) - self.env.now)


def _grouped(m: Model, phase: str) -> list[list[tuple[int, int, int]]]:
    """A layer's GEMMs in five groups (QKV, attention, projection, FC1, FC2)."""
    g = gemms(m, "fwd")
    attn = len(g) - 4
    groups = [[g[0]], g[1 : 1 + attn], [g[-3]], [g[-2]], [g[-1]]]
    return groups if phase == "fwd" else [x + x for x in groups]


def build(sim: Simulation, p: StudyParams) -> Timeline:
    """The study's simulations are the calibration runs of :func:`pim_rate`; the run itself
    only walks the plan for traces (:class:`Timeline`)."""
    return Timeline(sim, p)


def metrics(sim: Simulation, p: StudyParams, handle: Timeline, result: RunResult) -> dict[str, Any]:
    if p.model != "all":
        return {
            "time_s": plan(sim, p)[1] * 1e-9, "model": p.model, "format": p.format,
            **study(sim, p.model, p),
            "correct": None,  # the study carries no data (its calibration runs check theirs)
        }  # fmt: skip
    rows = {name: study(sim, name, p) for name in MODELS}
    keys = ("min_slack_ratio", "mean_slack_ratio", "capacity_savings_pct", "throughput_loss_pct")
    return {
        "time_s": 0.0,  # no plan: a table of models
        "format": p.format,
        "summary_table": [{"model": n, **{k: r[k] for k in keys}} for n, r in rows.items()],
        "per_model_table": rows,
        "correct": None,
    }


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="jitq-study",
            summary="JIT-Q study: slack, capacity savings and throughput loss per LLM (MI210)",
            params=StudyParams,
            build=build,
            metrics=metrics,
            origin=__name__,
            footprint=footprint,
        )
    )


def footprint(p: StudyParams) -> registry.Footprint:
    """The timeline (itself, its GPU and PIM tracks); the calibration runs are simulations of
    their own, one pseudo-channel each, made and dropped one after another; the tables' few
    kilobytes."""
    return registry.Footprint(3, 1 << 20, "")
