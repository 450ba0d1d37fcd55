"""Validation cases of ``gpt-ws``: the simulation against the analytical models of :mod:`.model`.

- ``gpt-ws-requirements``: for the spec's five models, MemoryX's bytes and the interconnect
  bandwidth each way, measured on a simulated step (one system, size only) and scaled to a week
  of training, against the spec's formulas with the table's P; and 6·tokens·P with the
  structural P against the table's. The differences are the models' structure (untied head,
  no biases) and the plan's command bytes.
- ``gpt-ws-latency``: the wafers' exposed latency (time waiting for weights in a step) against
  the plan-walk model, across systems and link latencies; each row names the spec's
  latency-hiding terms (first layer's compute, MemoryX round trip).
- ``gpt-ws-scaling``: step time against N = 1..64 systems at a fixed per-system batch, and the
  SwarmX tree's node count and depth against their formulas.
"""

from __future__ import annotations

from simcore import config as cfg
from workloads import registry
from workloads.cluster import gpt
from workloads.cluster.gptws import GptWsParams
from workloads.cluster.model import requirements, step_model, tree_shape

REQUIREMENT_MODELS = tuple(gpt.MODELS)


def requirement_rows(runner: registry.Runner) -> list[registry.ValidationRow]:
    points = [GptWsParams(model=m, systems=1, steps=1) for m in REQUIREMENT_MODELS]
    runs = runner("gpt-ws", points)
    rows = []
    for name, m in zip(REQUIREMENT_MODELS, runs, strict=True):
        t = gpt.MODELS[name]
        req = requirements(name, t["params"], t["tokens"], t["batch_tokens"])
        scale = 8 * req["iterations"] / 604_800
        case = "gpt-ws-requirements"
        rows += [
            registry.ValidationRow(case, f"{name} memoryx_bytes", m["memoryx_bytes"],
                                   req["memoryx_bytes"]),
            registry.ValidationRow(case, f"{name} interconnect_bits_per_s in",
                                   m["memoryx_stream_bytes_per_step"] * scale,
                                   req["interconnect_bits_per_s"]),
            registry.ValidationRow(case, f"{name} interconnect_bits_per_s out",
                                   m["memoryx_gradient_bytes_per_step"] * scale,
                                   req["interconnect_bits_per_s"]),
            registry.ValidationRow(case, f"{name} train_flops", 6 * t["tokens"] * m["params"],
                                   req["train_flops"]),
        ]  # fmt: skip
    return rows


LATENCY_POINTS = (
    dict(model="gpt2-xl", systems=1),
    dict(model="gpt2-xl", systems=64),
    dict(model="gpt3-175b", systems=4),
    dict(model="gpt2-xl", systems=16, swarmx={"link_latency_cycles": 100_000_000}),
    dict(model="gpt2-xl", systems=16, swarmx={"link_latency_cycles": 1_000_000_000}),
    dict(model="custom", layers=4, hidden=1024, sequence=512, vocab=8192, batch=2, systems=16),
    dict(
        model="custom",
        layers=4,
        hidden=1024,
        sequence=512,
        vocab=8192,
        batch=2,
        systems=16,
        swarmx={"link_latency_cycles": 1_000_000},
    ),
)


def _params(point: dict) -> GptWsParams:
    return cfg.load(GptWsParams, point)


def latency_rows(runner: registry.Runner) -> list[registry.ValidationRow]:
    points = [_params(pt) for pt in LATENCY_POINTS]
    runs = runner("gpt-ws", points)
    rows = []
    for p, m in zip(points, runs, strict=True):
        mod = step_model(p)
        lat = p.swarmx.link_latency_cycles / p.swarmx.clock_hz
        extra = f" link {lat * 1e3:g} ms"
        label = (
            f"{p.model} N={p.systems}{extra}: hiding {1e3 * mod['first_layer_compute_s']:.1f}"
            f" ms vs round trip {1e3 * mod['round_trip_s']:.2f} ms: exposed ms"
        )
        rows.append(registry.ValidationRow("gpt-ws-latency", label,
                                           1e3 * m["exposed_latency_s"],
                                           1e3 * mod["exposed_latency_s"]))  # fmt: skip
    return rows


SCALING_SYSTEMS = (1, 2, 4, 8, 16, 32, 64)


def scaling_rows(runner: registry.Runner) -> list[registry.ValidationRow]:
    points = [GptWsParams(model="gpt2-xl", systems=n, batch=8) for n in SCALING_SYSTEMS]
    runs = runner("gpt-ws", points)
    rows = []
    for n, p, m in zip(SCALING_SYSTEMS, points, runs, strict=True):
        nodes, hops = tree_shape(n, p.swarmx.mode)
        case = "gpt-ws-scaling"
        rows += [
            registry.ValidationRow(case, f"gpt2-xl batch 8 N={n} step_time_s", m["step_time_s"],
                                   step_model(p)["step_time_s"]),
            registry.ValidationRow(case, f"N={n} swarmx_nodes", m["swarmx_nodes"], nodes),
            registry.ValidationRow(case, f"N={n} swarmx_hops", m["swarmx_hops"], hops),
        ]  # fmt: skip
    return rows


def register() -> None:
    registry.register_case(
        registry.ValidationCase(
            name="gpt-ws-requirements",
            summary="MemoryX bytes and interconnect bandwidth of a simulated step vs the spec's "
            "requirement formulas, five GPTs",
            run=requirement_rows,
            tolerance=10.0,
            origin=__name__,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="gpt-ws-latency",
            summary="wafers' exposed latency per step vs the plan-walk model (latency hiding)",
            run=latency_rows,
            tolerance=25.0,
            criterion="mape",
            origin=__name__,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="gpt-ws-scaling",
            summary="step time vs N = 1..64 CS-2s; SwarmX nodes (linear) and depth (log N)",
            run=scaling_rows,
            tolerance=2.0,
            origin=__name__,
        )
    )
