"""Wafer-level cost of the work without streamed weights, fitted to its PE-level programs.

At wafer fidelity a CS-2 does not run :mod:`cs2.pekernels`; it takes, for each
program, a time that follows the program's mapping and structure, with constants fitted
(:func:`fit`, non-negative least squares on the relative error) to PE-level runs on small
sub-arrays (:data:`POINTS`; ``bench/cluster_bench.py calibrate`` re-runs the fit and prints the
error per run; tests/test_cluster_pe.py checks fresh runs). The features are what the busiest PE
does:

- element-wise epilogues (``add``, ``gelu``, ``gelu-grad``): n = ceil(E / PEs) elements a PE,
  ``cycles = fixed + per_element · n`` (the kernel's instructions each cost a setup and a
  pipeline fill, then stream n elements);
- ``attention`` and ``attention-grad``: pairs on PE rows (R = ceil(pairs / rows) a row), queries
  on columns (Q = ceil(S / columns) a PE, the busiest column's rows attending to K keys in all,
  K = max over columns of the sum of i + 1 over its queries i): ``cycles = R·Q·(row + row_dh·dh)
  + R·K·(key + key_dh·dh) + newton·steps(S) + fixed`` (steps: the Newton steps of the softmax
  sums' reciprocal), and backward ``+ reduce_word·R·2·dh·S + reduce_pe·(columns - 1)`` for the
  chain reduction of dK and dV along the row;
- ``loss``: r = ceil(T / PEs) token rows a PE over V logits: ``cycles = row·r + element·r·V +
  newton·steps(V) + fixed``.

The fitted constants are the defaults of :class:`SideCostConfig` (``cs2.compute.side.*``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from cs2.pekernels import PeSideWork, newton_steps
from simcore.config import param
from simcore.sim import Simulation, SubRuns
from wafer.system import WaferConfig

EW_KINDS = ("add", "gelu", "gelu-grad")
KINDS = (*EW_KINDS, "attention", "attention-grad", "loss")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SideCostConfig:
    """Fitted cycle costs of the PE programs without streamed weights (see the module doc)."""

    add_fixed_cycles: float = param(11.0, "residual add: cycles per run", min=0.0)
    add_cycles_per_element: float = param(1.0, "residual add: cycles per element a PE", min=0.0)
    gelu_fixed_cycles: float = param(771.0, "GELU: cycles per run", min=0.0)
    gelu_cycles_per_element: float = param(60.0, "GELU: cycles per element a PE", min=0.0)
    gelu_grad_fixed_cycles: float = param(851.0, "GELU' product: cycles per run", min=0.0)
    gelu_grad_cycles_per_element: float = param(
        67.0, "GELU' product: cycles per element a PE", min=0.0
    )
    attention_row_cycles: float = param(318.273, "attention: cycles per query row", min=0.0)
    attention_row_cycles_per_dh: float = param(
        22.991, "attention: cycles per query row and head dimension", min=0.0
    )
    attention_key_cycles: float = param(23.612, "attention: cycles per key of a row", min=0.0)
    attention_key_cycles_per_dh: float = param(
        4.253, "attention: cycles per key and head dimension", min=0.0
    )
    attention_newton_cycles: float = param(
        30.857, "attention: cycles per Newton step of the row sums' reciprocal", min=0.0
    )
    attention_fixed_cycles: float = param(0.0, "attention: cycles per run", min=0.0)
    attention_grad_row_cycles: float = param(33.996, "attention backward: cycles per row", min=0.0)
    attention_grad_row_cycles_per_dh: float = param(
        41.581, "attention backward: cycles per row and head dimension", min=0.0
    )
    attention_grad_key_cycles: float = param(
        6.423, "attention backward: cycles per key of a row", min=0.0
    )
    attention_grad_key_cycles_per_dh: float = param(
        7.653, "attention backward: cycles per key and head dimension", min=0.0
    )
    attention_grad_fixed_cycles: float = param(
        243.297, "attention backward: cycles per run", min=0.0
    )
    attention_grad_reduce_cycles_per_word: float = param(
        2.256, "attention backward: cycles per dK/dV word reduced along a PE row", min=0.0
    )
    attention_grad_reduce_cycles_per_pe: float = param(
        7.188, "attention backward: cycles per PE column of the reduction chain", min=0.0
    )
    loss_row_cycles: float = param(422.63, "loss: cycles per token row a PE", min=0.0)
    loss_cycles_per_element: float = param(22.409, "loss: cycles per logit a PE", min=0.0)
    loss_newton_cycles: float = param(
        0.0, "loss: cycles per Newton step of the row sums' reciprocal", min=0.0
    )
    loss_fixed_cycles: float = param(157.651, "loss: cycles per run", min=0.0)


#: Constant names of each kind, in the order of :func:`features`.
NAMES: dict[str, tuple[str, ...]] = {
    "add": ("add_fixed_cycles", "add_cycles_per_element"),
    "gelu": ("gelu_fixed_cycles", "gelu_cycles_per_element"),
    "gelu-grad": ("gelu_grad_fixed_cycles", "gelu_grad_cycles_per_element"),
    "attention": (
        "attention_row_cycles",
        "attention_row_cycles_per_dh",
        "attention_key_cycles",
        "attention_key_cycles_per_dh",
        "attention_newton_cycles",
        "attention_fixed_cycles",
    ),
    "attention-grad": (
        "attention_grad_row_cycles",
        "attention_grad_row_cycles_per_dh",
        "attention_grad_key_cycles",
        "attention_grad_key_cycles_per_dh",
        "attention_grad_fixed_cycles",
        "attention_grad_reduce_cycles_per_word",
        "attention_grad_reduce_cycles_per_pe",
    ),
    "loss": (
        "loss_row_cycles",
        "loss_cycles_per_element",
        "loss_newton_cycles",
        "loss_fixed_cycles",
    ),
}


@functools.lru_cache(maxsize=4096)
def busiest_keys(s: int, px: int) -> tuple[int, int]:
    """(queries, keys) of the busiest PE column when query i of S goes to column i mod px:
    the most query rows a column holds, and the most keys its rows attend to in all (a loop
    over the columns, asked for the same few shapes by every chunk: cached)."""
    rows = math.ceil(s / px)
    keys = 0
    for x in range(min(px, s)):
        c = math.ceil((s - x) / px)
        keys = max(keys, c * (x + 1) + px * c * (c - 1) // 2)
    return rows, keys


def features(kind: str, dims: tuple[int, ...]) -> list[float]:
    """The busiest PE's counts for ``kind`` (see the module doc). ``dims``: element-wise
    (elements, columns, rows); attention (pairs, S, dh, columns, rows); loss (tokens, V,
    columns, rows)."""
    if kind in EW_KINDS:
        e, px, py = dims
        return [1.0, float(math.ceil(e / (px * py)))]
    if kind in ("attention", "attention-grad"):
        pairs, s, dh, px, py = dims
        r = math.ceil(pairs / py)
        q, k = busiest_keys(s, px)
        if kind == "attention":
            return [r * q, r * q * dh, r * k, r * k * dh, newton_steps(1.0, float(s)), 1.0]
        words = r * 2 * dh * s if px > 1 else 0
        return [r * q, r * q * dh, r * k, r * k * dh, 1.0, words, px - 1]
    tokens, v, px, py = dims
    r = math.ceil(tokens / (px * py))
    return [r, r * v, newton_steps(1.0, float(v)), 1.0]


def cycles(c: SideCostConfig, kind: str, dims: tuple[int, ...]) -> float:
    """The fitted cost of one program run."""
    return float(
        sum(getattr(c, n) * f for n, f in zip(NAMES[kind], features(kind, dims), strict=True))
    )


# -- measuring and fitting ----------------------------------------------------------------------
#: (kind, dims) of the PE-level runs the defaults were fitted to: a few PEs to 8x8, dh 2..8, S
#: 4..16, a pair per row or several.
POINTS: tuple[tuple[str, tuple[int, ...]], ...] = (
    *((k, (e, px, py)) for k in EW_KINDS for e, px, py in (
        (64, 2, 2), (256, 2, 2), (512, 8, 8), (1024, 4, 4), (96, 4, 2), (2048, 8, 8))),
    *((k, d) for k in ("attention", "attention-grad") for d in (
        (2, 4, 4, 2, 2), (2, 8, 8, 8, 8), (4, 8, 4, 4, 2), (6, 16, 4, 4, 2), (2, 16, 8, 8, 2),
        (4, 8, 2, 2, 4), (8, 4, 4, 4, 1), (3, 12, 6, 1, 3))),
    ("loss", (8, 16, 2, 2)),
    ("loss", (8, 32, 8, 8)),
    ("loss", (16, 32, 2, 2)),
    ("loss", (32, 16, 4, 2)),
    ("loss", (16, 64, 4, 4)),
    ("loss", (24, 50, 2, 3)),
)  # fmt: skip


def measure(kind: str, dims: tuple[int, ...], wafer: WaferConfig | None = None) -> int:
    """Cycles of one PE-level run of ``kind`` on seeded random data of ``dims``."""
    wafer = wafer or WaferConfig()
    rng = np.random.default_rng([17, *dims])
    if kind in EW_KINDS:
        e, px, py = dims
        side = PeSideWork(px, py, wafer, SubRuns(Simulation()))
        args = [
            rng.standard_normal(e).astype(np.float32) for _ in range(1 if kind == "gelu" else 2)
        ]
        return side.elementwise(kind, *args)[1]
    if kind in ("attention", "attention-grad"):
        pairs, s, dh, px, py = dims
        side = PeSideWork(px, py, wafer, SubRuns(Simulation()))
        qkv = rng.standard_normal((pairs * s, 3 * dh)).astype(np.float32)
        a, p, cyc = side.attention(qkv, pairs, 1)
        if kind == "attention":
            return cyc
        return side.attention_grad(
            rng.standard_normal(a.shape).astype(np.float32), qkv, p, pairs, 1
        )[1]
    tokens, v, px, py = dims
    logits = rng.standard_normal((tokens, v)).astype(np.float32)
    return PeSideWork(px, py, wafer, SubRuns(Simulation())).loss(
        logits, rng.integers(0, v, tokens), tokens
    )[2]


def fit(
    points: Sequence[tuple[str, tuple[int, ...]]], runs: Sequence[int]
) -> tuple[dict[str, float], dict[str, float]]:
    """Non-negative least squares of each kind's constants on the relative error; returns
    (constants by name, MAPE % by kind)."""
    from scipy.optimize import nnls  # fitting only: a run or a model needs none of scipy

    out: dict[str, float] = {}
    mape: dict[str, float] = {}
    for kind in KINDS:
        rows = [(features(k, d), r) for (k, d), r in zip(points, runs, strict=True) if k == kind]
        if not rows:
            continue
        a = np.array([[f / r for f in feats] for feats, r in rows])
        x, _ = nnls(a, np.ones(len(rows)))
        out.update({n: round(float(v), 3) for n, v in zip(NAMES[kind], x, strict=True)})
        rel = [abs(sum(out[n] * f for n, f in zip(NAMES[kind], feats, strict=True)) - r) / r
               for feats, r in rows]  # fmt: skip
        mape[kind] = 100 * float(np.mean(rel))
    return out, mape
