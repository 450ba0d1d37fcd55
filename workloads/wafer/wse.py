"""Wafer calibration scenarios: ``wse-fmac`` and ``wse-bcast``, measured like the SDK study.

Both read each PE's timestamp counter around the operation and report
``cycles = max(end) - min(start)`` over the PEs, as the study did (``time_s`` is those cycles at
the wafer's clock). The study's fit is each kind's model: ``model_cycles`` (and
``model_time_s``, ``model_error_pct``) beside the measurement.

``wse-fmac``: one PE runs ``@fmacs`` over ``elements`` consecutive FP32 values (C = C + A*b).
Reference: the study's T_fmac(I) = 2 I + 10 (within 2 cycles for I in 1..2048).

``wse-bcast``: a row of ``pes`` PEs broadcasts ``elements`` FP32 words from ``root`` with the
collectives library. Reference: T_bcast(I) = 1.6 I + 250 (MAPE 2.0 % for I in 1..4096).

Both check the data: the fmac result against numpy in FP32, every PE's broadcast buffer against
the root's. The two fits live in :mod:`workloads.wafer.calibration`, because the other wafer
models are built from them too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pe.program import Layout
from runner import registry
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from wafer.collectives import Collectives
from wafer.system import Wafer, WaferConfig
from workloads.wafer import calibration
from workloads.wafer.calibration import t_bcast_reference, t_fmac_reference
from workloads.wafer.footprint import wafer as wafer_footprint


# -- wse-fmac ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class FmacParams(registry.ScenarioParams):
    elements: int = param(64, "FP32 elements of the @fmacs (I)", min=1, max=4096)
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")


@dataclasses.dataclass
class FmacRun:
    wafer: Wafer
    expected: np.ndarray
    c: Any


def build_fmac(sim: Simulation, p: FmacParams) -> FmacRun:
    rng = np.random.default_rng([p.seed, 1])
    a = rng.standard_normal(p.elements).astype(np.float32)
    c0 = rng.standard_normal(p.elements).astype(np.float32)
    b = np.float32(rng.standard_normal())
    run = FmacRun(None, (c0 + a * b).astype(np.float32), None)  # type: ignore[arg-type]

    def code(pe: Any) -> None:
        c = pe.array("C", c0)
        a_dsd = pe.array("A", a)
        run.c = c

        @pe.local_task(id=10)
        def main(t: Any) -> None:
            t.mark("start")
            t.fmacs(c, c, a_dsd, float(b))
            t.mark("end")

        pe.start(main)

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    run.wafer = Wafer(sim, p.wafer, layout)
    return run


def metrics_fmac(sim: Simulation, p: FmacParams, run: FmacRun, result: RunResult) -> dict:
    got = run.c.read(run.wafer.ce(0, 0).sram)
    err = float(np.max(np.abs(got - run.expected)))
    cycles = run.wafer.span_cycles()
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "elements": p.elements,
        "max_abs_error": err,
        "correct": err == 0.0,
        **_modelled(cycles, model_fmac(p)),
    }


def model_fmac(p: FmacParams) -> dict[str, Any]:
    """The study's fit, T_fmac(I) = 2I + 10."""
    cycles = t_fmac_reference(p.elements)
    return {"time_s": cycles / p.wafer.clock_hz, "cycles": cycles}


def _modelled(cycles: int, model: dict[str, Any]) -> dict[str, Any]:
    """A run's model metrics: the model's time and cycles, and the run's error against them."""
    return {
        "model_time_s": model["time_s"],
        "model_cycles": model["cycles"],
        "model_error_pct": 100.0 * (cycles - model["cycles"]) / model["cycles"],
    }


# -- wse-bcast ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class BcastParams(registry.ScenarioParams):
    elements: int = param(1024, "FP32 words broadcast (I)", min=1, max=8192)
    pes: int = param(16, "PEs in the row (N)", min=2, max=750)
    root: int = param(
        -1, "x position of the broadcasting PE; -1 = the middle of the row (pes // 2)", min=-1
    )
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    def check(self) -> None:
        if self.root >= self.pes:
            raise ConfigError(
                "root", self.root, f"must be a PE of the row of pes = {self.pes}",
                allowed=f"-1 (the middle) .. {self.pes - 1}", hint="lower root or raise pes",
            )  # fmt: skip

    @property
    def root_x(self) -> int:
        return self.pes // 2 if self.root < 0 else self.root


@dataclasses.dataclass
class BcastRun:
    wafer: Wafer
    data: np.ndarray
    bufs: dict


def build_bcast(sim: Simulation, p: BcastParams) -> BcastRun:
    data = np.random.default_rng([p.seed, 2]).standard_normal(p.elements).astype(np.float32)
    run = BcastRun(None, data, {})  # type: ignore[arg-type]

    def code(pe: Any) -> None:
        coll = Collectives(pe)
        buf = pe.array("buf", data if pe.x == p.root_x else np.zeros(p.elements, np.float32))
        run.bufs[pe.x] = buf

        @pe.local_task(id=10)
        def main(t: Any) -> None:
            t.mark("start")
            coll.x.broadcast(t, p.root_x, buf, 11)

        @pe.local_task(id=11)
        def done(t: Any) -> None:
            t.mark("end")

        pe.start(main)

    layout = Layout(p.pes, 1)
    layout.set_rectangle_code(code)
    run.wafer = Wafer(sim, p.wafer, layout)
    return run


def metrics_bcast(sim: Simulation, p: BcastParams, run: BcastRun, result: RunResult) -> dict:
    correct = all(
        np.array_equal(run.bufs[x].read(run.wafer.ce(x, 0).sram), run.data) for x in range(p.pes)
    )
    cycles = run.wafer.span_cycles()
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "elements": p.elements,
        "pes": p.pes,
        "root": p.root_x,
        "correct": correct,
        **_modelled(cycles, model_bcast(p)),
    }


def model_bcast(p: BcastParams) -> dict[str, Any]:
    """The study's fit, T_bcast(I) = 1.6I + 250 (it does not depend on N)."""
    cycles = t_bcast_reference(p.elements)
    return {"time_s": cycles / p.wafer.clock_hz, "cycles": cycles}


# -- validation ----------------------------------------------------------------------------------
FMAC_SWEEP = (1, 2, 3, 4, 8, 16, 32, 44, 64, 100, 128, 256, 500, 512, 1000, 1024, 2000, 2048)
BCAST_ELEMENTS = (1, 4, 16, 64, 256, 512, 1024, 2048, 3072, 4096)
BCAST_PES = (4, 16, 64)


def validate_fmac(runner: registry.Runner) -> list[registry.ValidationRow]:
    runs = runner("wse-fmac", [FmacParams(elements=n) for n in FMAC_SWEEP])
    rows = []
    for n, m in zip(FMAC_SWEEP, runs, strict=True):
        ref = t_fmac_reference(n)
        rows.append(
            registry.ValidationRow("wse-fmac", f"I={n}", m["cycles"], ref, ref, unit="cycles")
        )
    return rows


def validate_bcast(runner: registry.Runner) -> list[registry.ValidationRow]:
    points = [(n, i) for n in BCAST_PES for i in BCAST_ELEMENTS]
    runs = runner("wse-bcast", [BcastParams(elements=i, pes=n) for n, i in points])
    rows = []
    for (n, i), m in zip(points, runs, strict=True):
        ref = t_bcast_reference(i)
        rows.append(
            registry.ValidationRow(
                "wse-bcast", f"N={n} I={i}", m["cycles"], ref, ref, unit="cycles"
            )
        )
    return rows


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="wse-fmac",
            summary="one PE: FP32 @fmacs over I elements, timed with the timestamp counter",
            params=FmacParams,
            build=build_fmac,
            metrics=metrics_fmac,
            model=model_fmac,
            origin=__name__,
            footprint=lambda p: wafer_footprint(1, 2 * 4 * p.elements, 3 * 4 * p.elements, ""),
        )
    )
    registry.register_kind(
        registry.WorkloadKind(
            name="wse-bcast",
            summary="a row of N PEs: broadcast I FP32 words with the collectives library",
            params=BcastParams,
            build=build_bcast,
            metrics=metrics_bcast,
            model=model_bcast,
            origin=__name__,
            footprint=lambda p: wafer_footprint(p.pes, 4 * p.elements, 4 * p.elements, "pes"),
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="wse-fmac",
            summary="@fmacs cycles vs the study's T_fmac(I) = 2I + 10",
            run=validate_fmac,
            tolerance=2.0,
            criterion="max_abs",
            origin=__name__,
            source=calibration.STUDY,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="wse-bcast",
            summary="row broadcast cycles vs the study's T_bcast(I) = 1.6I + 250",
            run=validate_bcast,
            tolerance=3.0,
            criterion="mape",
            origin=__name__,
            source=calibration.STUDY,
        )
    )
