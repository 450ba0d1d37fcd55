"""What the three flavours of ``ws-matmul`` share: the problem, its seeded data and the metrics.

A weight-streamed layer of a sparse network, X1 [BS][H1] = X0 [BS][H0] · W^T with W [H1][H0]
sparse (a seeded Bernoulli mask of density D), in the three products of a training step: fwd
(X1 = X0·W^T), bwd (dX0 = dX1·W) and wgrad (dW = dX1^T·X0 on W's mask). Here are the parameters
(one class for the three, ``flavour`` choosing), the seeded X0, W and dX1 every flavour draws
the same way, which PE column owns an output feature (outputs keep the inputs' layout: feature
blocks over the px columns, token blocks over the py rows), and the metrics every flavour
reports besides its own result check. The lowerings are :mod:`.wsfwd` (fwd, bwd) and
:mod:`.wsgrad` (wgrad); :mod:`.wsmatmul` registers the kind and dispatches on ``flavour``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from simcore.config import ScenarioParams, param, section
from simcore.errors import ConfigError
from wafer.system import MAX_HEIGHT, MAX_WIDTH, Wafer, WaferConfig

WORD_BYTES = 4
FLAVOURS = ("fwd", "bwd", "wgrad")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WsMatmulParams(ScenarioParams):
    flavour: str = param(
        "fwd",
        "which product: fwd (X1 = X0·W^T), bwd (dX0 = dX1·W) or wgrad (dW = dX1^T·X0 on W's mask)",
        choices=FLAVOURS,
    )
    rows: int = param(16, "output features H1 (rows of W)", min=1)
    cols: int = param(16, "input features H0 (columns of W)", min=1)
    tokens: int = param(16, "tokens BS (batch x sequence)", min=1)
    density: float = param(
        0.25, "fraction of non-zero weights (seeded Bernoulli mask)", min=0.0, max=1.0,
        min_open=True,
    )  # fmt: skip
    px: int = param(4, "PE columns; H0 and H1 are split over them", min=1, max=MAX_WIDTH)
    py: int = param(2, "PE rows; the tokens are split over them", min=1, max=MAX_HEIGHT)
    ring_priority: str = param(
        "medium",
        "microthread priority of the reductions' async streams (ring, chain, row broadcast): "
        "medium/high take issue cycles from the FMAC tasks, low waits for them (pe/ce.py)",
        choices=("high", "medium", "low"),
    )
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    def check(self) -> None:
        for name, n, parts, axis in (
            ("cols", self.cols, self.px, "px"),
            ("rows", self.rows, self.px, "px"),
            ("tokens", self.tokens, self.py, "py"),
        ):
            if n % parts:
                raise ConfigError(name, n, f"must be a multiple of {axis} = {parts}")
        words, what = self.pe_words()
        free = self.wafer.pe.sram_bytes - self.wafer.pe.code_bytes
        if words * WORD_BYTES > free:
            # Blame the size that puts the most on one PE (its share: size / PEs on its axis).
            share = {"cols": self.f0, "rows": self.f1, "tokens": self.bt}
            key = max(share, key=lambda k: share[k])
            axis = "py" if key == "tokens" else "px"
            raise ConfigError(
                key,
                getattr(self, key),
                f"a PE needs {words * WORD_BYTES:,} B for {what} ({key} / {axis} = "
                f"{share[key]:,} per PE) but has {free:,} B beside the code "
                "(wafer.pe.sram_bytes - wafer.pe.code_bytes)",
                hint=f"lower {key} (or the other sizes: rows, cols, tokens), or raise {axis}",
            )

    def pe_words(self) -> tuple[int, str]:
        """FP32 words of data a PE holds, and what they are."""
        f_in, f_out = (self.f0, self.f1) if self.flavour != "bwd" else (self.f1, self.f0)
        if self.flavour == "wgrad":
            return (self.f0 + self.f1 + 2) * self.bt + self.f0, (
                "X0, dX1, two gradient-row buffers and the partials"
            )
        return (f_in + f_out + 2) * self.bt, "the input and output activations and two accumulators"

    @property
    def f0(self) -> int:
        return self.cols // self.px

    @property
    def f1(self) -> int:
        return self.rows // self.px

    @property
    def bt(self) -> int:
        return self.tokens // self.py


def inputs(p: WsMatmulParams) -> tuple[np.ndarray, np.ndarray]:
    """The seeded activations X0 [BS][H0] and sparse weights W [H1][H0] (FP32)."""
    rng = np.random.default_rng([p.seed, 7])
    x0 = rng.standard_normal((p.tokens, p.cols)).astype(np.float32)
    w = rng.standard_normal((p.rows, p.cols)).astype(np.float32)
    mask = rng.random((p.rows, p.cols)) < p.density
    return x0, np.where(mask, w, np.float32(0)).astype(np.float32)


def activation_gradient(p: WsMatmulParams) -> np.ndarray:
    """The seeded dX1 [BS][H1] of the bwd and wgrad flavours (FP32)."""
    dx1 = np.random.default_rng([p.seed, 8]).standard_normal((p.tokens, p.rows))
    return dx1.astype(np.float32)


def owner(p: WsMatmulParams, r: int) -> int:
    """The PE column that stores output feature r (the outputs keep the inputs' layout)."""
    return r // p.f1


def run_metrics(
    p: WsMatmulParams, wafer: Wafer, ports: list, nnz: int, model_cycles: float
) -> dict[str, Any]:
    """What every flavour reports besides its result check: time and cycles, nnz, utilisation
    (FMAC or dot-product elements per PE-cycle against one FP32 ``fmacs`` element per cycle), the
    edge I/O through ``ports`` and ``model_cycles``, the flavour's model's prediction."""
    cycles = wafer.span_cycles()
    words = sum(port.words for port in ports)
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "nnz": nnz,
        "fmac_utilisation": nnz * p.tokens / (cycles * p.px * p.py) if cycles else 0.0,
        "edge_words": words,
        "edge_bytes_per_cycle": WORD_BYTES * words / cycles if cycles else 0.0,
        "max_edge_port_bytes_per_cycle": max(port.bytes_per_cycle() for port in ports),
        "model_cycles": float(model_cycles),
    }
