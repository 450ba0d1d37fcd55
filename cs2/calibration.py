"""The CS-2's wafer-level compute model, calibrated on the cycle-level ``ws-matmul`` programs.

At wafer level a CS-2 does not run PE programs: it holds each streamed chunk for the time this
model gives. The model follows the structure of the weight-streaming lowering
(:mod:`wafer.programs.wsfwd`, :mod:`wafer.programs.wsgrad`), row by row of the streamed
matrix: a PE column works ``n`` weights of the row (n = non-zeros of the row in the column's
features), each an FMAC (or dot product) over the PE's ``bt`` tokens, while the previous row's
reduction runs along the PE row (ring) or down the column (chain); a row costs whichever is
slower, and the array's width and height add a fill once per streamed block (the rings and
chains of consecutive rows pipeline, so they cost latency, not throughput)::

    cycles = rows · max(n · (a · bt + b),  c · bt + f)  +  e · px + g · py

with one set of six constants per product: ``fwd`` (also ``bwd``, the same program on W^T) and
``wgrad``. The constants are fitted (:func:`fit`, least squares on the relative error) to
cycle-level runs of ``ws-matmul`` on small PE arrays (:data:`POINTS`; ``bench/cluster_bench.py
calibrate`` re-runs the fit); their defaults below are that fit's result, and
``tests/test_cluster.py`` checks the model against fresh cycle-level runs (the error is stated
in docs/cluster/guide.md).

Mapping a layer onto the wafer: the array is cut into k = W // px tiles of px x py PEs side by
side (py = min(H, ceil(T / k)): no PE row without a token); each tile holds a different slice
of the tokens (bt = ceil(T / (k·py)) per PE) and the weight stream is multicast to all tiles.
The tile width px is chosen per matmul to minimise the time (:func:`best_mapping`).

Work without streamed weights (attention and its backward, the loss, GELU, GELU', residual adds)
costs what :mod:`cs2.sidecal` gives: models of the PE programs of
:mod:`cs2.pekernels` on the whole array, with constants fitted to PE-level runs
(``side``). The embedding's gather and scatter keep a documented cost, ``vector_cycles_per_op``
per element spread over every PE.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from cs2.sidecal import SideCostConfig
from simcore.config import param, section

#: Candidate tile widths (PE columns per tile).
TILE_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 375, 750)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RowCost:
    """One product's row-cost constants (cycles): see the module docstring."""

    a: float
    b: float
    c: float
    e: float
    g: float
    f: float

    def row_cycles(self, n: float, bt: float) -> float:
        """Cycles per streamed row (steady state)."""
        return max(n * (self.a * bt + self.b), self.c * bt + self.f)

    def fill_cycles(self, px: int, py: int) -> float:
        """Cycles a streamed block adds for the array's width and height."""
        return self.e * px + self.g * py

    def cycles(self, rows: int, n: float, bt: float, px: int, py: int) -> float:
        return rows * self.row_cycles(n, bt) + self.fill_cycles(px, py)

    def as_tuple(self) -> tuple[float, ...]:
        return (self.a, self.b, self.c, self.e, self.g, self.f)


#: Fitted on POINTS (``bench/cluster_bench.py calibrate``, with the PE model's shared datapath):
#: MAPE 12.1 % over the 19 fwd runs, worst on sparse rows (-33 %: the model takes a column's
#: mean non-zeros per row, the run waits for the fullest column; +30 % on the widest array).
#: The ring's cost per PE column fits to 0: the rings of consecutive rows pipeline.
FWD = RowCost(a=2.435, b=15.355, c=4.257, e=0.0, g=47.602, f=43.295)
#: MAPE 3.4 % over the 19 wgrad runs (worst -20 %).
WGRAD = RowCost(a=2.201, b=20.212, c=3.089, e=89.991, g=17.508, f=142.438)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cs2ComputeConfig:
    """The wafer-level compute model's parameters (units in the names)."""

    pe_columns: int = param(750, "PE columns the compiler uses (the SDK's 750)", min=1, max=750)
    pe_rows: int = param(994, "PE rows the compiler uses (the SDK's 994)", min=1, max=994)
    vector_cycles_per_op: float = param(
        2.0,
        "cycles per element of the embedding's gather and scatter: the FP32 SIMD rate of "
        "fmacs (T_fmac slope), documented cost",
        min=0.0,
    )
    activation_bytes: int = param(
        2, "bytes per stored activation (FP16) for the wafer's SRAM check", min=1
    )
    side: SideCostConfig = section(
        SideCostConfig, "attention, loss and epilogues: costs fitted to their PE programs"
    )

    @property
    def pes(self) -> int:
        return self.pe_columns * self.pe_rows


def best_mapping(
    cost: RowCost, cfg: Cs2ComputeConfig, rows: int, width: int, tokens: int, density: float
) -> tuple[float, int, int]:
    """(cycles, tile width px, tokens per PE bt) minimising the time to stream ``rows`` rows of
    ``width`` entries at ``density`` over ``tokens`` tokens."""
    best: tuple[float, int, int] | None = None
    for px in TILE_WIDTHS:
        if px > cfg.pe_columns or px > width:
            continue
        k = cfg.pe_columns // px
        py = min(cfg.pe_rows, math.ceil(tokens / k))  # no PE row without a token
        bt = math.ceil(tokens / (k * py))
        cyc = cost.cycles(rows, density * width / px, bt, px, py)
        if best is None or cyc < best[0]:
            best = (cyc, px, bt)
    if best is None:
        raise ValueError("no tile width fits")
    return best


def matmul_cycles(
    cost: RowCost, cfg: Cs2ComputeConfig, rows: int, width: int, tokens: int, density: float
) -> float:
    """Cycles to stream ``rows`` rows of ``width`` entries at ``density`` over ``tokens``."""
    return best_mapping(cost, cfg, rows, width, tokens, density)[0]


def elementwise_cycles(cfg: Cs2ComputeConfig, elements: float, ops: float) -> float:
    """Element-wise work spread over every PE."""
    return elements * ops * cfg.vector_cycles_per_op / cfg.pes


# -- calibration ---------------------------------------------------------------------------------
#: (rows, cols, tokens, px, py, density) of the cycle-level calibration runs, each in fwd and
#: wgrad: FMAC-bound (dense, few columns) and reduction-bound (sparse, wide) rows, bt 2..16.
POINTS = (
    (16, 16, 16, 2, 2, 1.0),
    (32, 32, 32, 2, 2, 1.0),
    (32, 32, 64, 4, 4, 1.0),
    (32, 32, 32, 4, 2, 0.5),
    (32, 32, 32, 4, 2, 0.25),
    (64, 64, 32, 8, 4, 0.25),
    (64, 64, 64, 8, 4, 0.1),
    (32, 64, 16, 8, 8, 1.0),
    (64, 32, 16, 8, 8, 0.5),
    (32, 32, 64, 2, 4, 0.5),
    (48, 48, 48, 4, 4, 1.0),
    (64, 64, 64, 8, 8, 0.25),
    (32, 64, 8, 32, 1, 0.25),
    (64, 128, 8, 64, 1, 0.1),
    (32, 128, 16, 32, 2, 0.1),
    (128, 256, 8, 128, 1, 0.05),
    (32, 32, 128, 4, 2, 0.1),
    (32, 32, 64, 2, 16, 0.5),
    (32, 32, 128, 4, 32, 0.5),
)


def model_cycles(
    cost: RowCost, rows: int, cols: int, tokens: int, px: int, py: int, nnz: int
) -> float:
    """The row model on one px x py array (no tiling): what the fit compares with a run."""
    return cost.cycles(rows, nnz / rows / px, tokens / py, px, py)


def fit(
    points: Sequence[tuple[int, int, int, int, int, float]],
    runs: Sequence[dict[str, Any]],
    start: RowCost,
) -> tuple[RowCost, float]:
    """Least-squares fit of the six constants to measured cycles (relative error), by
    coordinate search from ``start`` (no dependency beyond numpy). Returns (constants, MAPE %)."""
    data = [(p, r["cycles"], r["nnz"]) for p, r in zip(points, runs, strict=True)]

    def err(x: np.ndarray) -> float:
        cost = RowCost(**dict(zip("abcegf", x, strict=True)))
        rel = [
            (model_cycles(cost, p[0], p[1], p[2], p[3], p[4], nnz) - cyc) / cyc
            for p, cyc, nnz in data
        ]
        return float(np.mean(np.square(rel)))

    x = np.array(start.as_tuple(), float)
    step = np.maximum(np.abs(x) * 0.25, 0.5)
    best = err(x)
    for _ in range(400):
        moved = False
        for i in range(len(x)):
            for sign in (1.0, -1.0):
                y = x.copy()
                y[i] = max(0.0, y[i] + sign * step[i])
                e = err(y)
                if e < best:
                    x, best, moved = y, e, True
        if not moved:
            step /= 2
            if step.max() < 1e-3:
                break
    cost = RowCost(**dict(zip("abcegf", (round(float(v), 3) for v in x), strict=True)))
    mape = 100 * float(
        np.mean(
            [
                abs(model_cycles(cost, p[0], p[1], p[2], p[3], p[4], nnz) - cyc) / cyc
                for p, cyc, nnz in data
            ]
        )
    )
    return cost, mape
