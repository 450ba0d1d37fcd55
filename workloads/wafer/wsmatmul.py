"""The ``ws-matmul`` workload kind: weight-streamed sparse matmuls on the wafer, three flavours.

One kind, one scenario, one validation case for the three products of a sparse layer's training
step; ``flavour`` picks the lowering: fwd and bwd stream W's non-zeros in from the edge
(:mod:`.wsfwd`), wgrad streams W's mask and sends the gradients out (:mod:`.wsgrad`). What the
flavours share (parameters, seeded data, common metrics) is :mod:`.wscommon`; this module only
dispatches on ``flavour`` and holds the validation sweep. See docs/wafer/ws-matmul.md.
"""

from __future__ import annotations

from typing import Any

from runner import registry
from simcore.sim import RunResult, Simulation
from wafer.programs import wsfwd, wsgrad
from wafer.programs.wscommon import FLAVOURS, WsMatmulParams
from workloads.wafer import calibration, wsmodel
from workloads.wafer.footprint import wafer as wafer_footprint


def build(sim: Simulation, p: WsMatmulParams) -> wsfwd.WsRun | wsgrad.GradRun:
    return wsgrad.build(sim, p) if p.flavour == "wgrad" else wsfwd.build(sim, p)


def metrics(
    sim: Simulation, p: WsMatmulParams, run: wsfwd.WsRun | wsgrad.GradRun, result: RunResult
) -> dict[str, Any]:
    modelled = model(p)
    if isinstance(run, wsgrad.GradRun):
        out = wsgrad.metrics(run, modelled["cycles"])
    else:
        out = wsfwd.metrics(p, run, modelled["cycles"])
    cycles = out["cycles"]
    out["model_time_s"] = modelled["time_s"]
    out["model_error_pct"] = 100.0 * (cycles - modelled["cycles"]) / modelled["cycles"]
    return out


def footprint(p: WsMatmulParams) -> registry.Footprint:
    """px·py PEs holding their activations and accumulators; the host keeps X0, W, its mask
    and dX1 (FP32, the mask float64 while drawn) and the float64 reference of the result."""
    host = 4 * (p.tokens * p.cols + p.rows * p.cols + p.tokens * p.rows)
    host += 8 * (p.rows * p.cols + p.tokens * max(p.rows, p.cols) + p.rows * p.cols)
    ports = 2 * p.px if p.flavour == "wgrad" else p.px  # one per column (wgrad: in and out)
    return wafer_footprint(p.px * p.py, 4 * p.pe_words()[0], host, "px", ports)


def model(p: WsMatmulParams) -> dict[str, Any]:
    """The flavour's row-pipelined model (:func:`.wsmodel.fwd_model` or
    :func:`.wsmodel.wgrad_model`) and its time at the wafer's clock."""
    out = wsmodel.wgrad_model(p) if p.flavour == "wgrad" else wsmodel.fwd_model(p)
    return {"time_s": out["cycles"] / p.wafer.clock_hz, **out}


# -- validation ----------------------------------------------------------------------------------
#: (rows, cols, tokens, px, py, density) points: a density sweep, then other shapes; each runs
#: in every flavour.
SWEEP = (
    *((32, 32, 32, 4, 2, d) for d in (0.1, 0.25, 0.5, 1.0)),
    (16, 16, 16, 2, 2, 0.5),
    (24, 48, 16, 4, 1, 0.25),
    (32, 32, 64, 4, 4, 0.5),
    (64, 64, 64, 8, 4, 0.1),
)


def validate(
    runner: registry.Runner, flavours: tuple[str, ...] = FLAVOURS
) -> list[registry.ValidationRow]:
    points = [(flavour, *shape) for flavour in flavours for shape in SWEEP]
    runs = runner(
        "ws-matmul",
        [
            WsMatmulParams(flavour=f, rows=h1, cols=h0, tokens=bs, px=px, py=py, density=d)
            for f, h1, h0, bs, px, py, d in points
        ],
    )
    rows = []
    for (flavour, h1, h0, bs, px, py, d), m in zip(points, runs, strict=True):
        point = f"{flavour} H1={h1} H0={h0} BS={bs} {px}x{py} D={d} nnz={m['nnz']}"
        rows.append(
            registry.ValidationRow(
                "ws-matmul", point, m["cycles"], m["model_cycles"], unit="cycles"
            )
        )
    return rows


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="ws-matmul",
            summary="weight-streamed sparse matmul: fwd, bwd (non-zeros of W streamed from the "
            "edge) and wgrad (W's mask streamed, gradients out)",
            params=WsMatmulParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="ws-matmul",
            summary="ws-matmul cycles vs the row-pipelined models, fwd, bwd and wgrad "
            "(density and shape sweep)",
            run=validate,
            tolerance=10.0,
            criterion="mape",
            origin=__name__,
            source=calibration.STUDY,
        )
    )
