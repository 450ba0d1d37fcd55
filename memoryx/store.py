"""MemoryX's weight store: capacity across tiers, the dense FP32 copy, the sparse CSR copy.

What is modelled (function, at full precision; the timing of reading and updating lives in
:mod:`memoryx.service`):

- **Capacity.** Every parameter costs :data:`BYTES_PER_PARAM` = 20 B: FP32 weight, FP32
  gradient, two FP32 Adam moments (16 B of dense copy) and the sparse working copy, an FP16
  value with a 16-bit column index (4 B). Tensors are placed tier by tier in plan order, DRAM
  first, then flash (:func:`place`); a model larger than both is a :class:`ConfigError` giving
  the bytes needed and available and the keys to raise.
- **Dense copy** (:class:`DenseTensor`): FP32 weight, gradient and Adam moments, where the
  optimizer runs (:func:`sgd`, :func:`adam`: real numpy arithmetic in FP32), then the weights'
  mask is applied and the values rounded FP32 -> FP16 for the sparse copy.
- **Sparse copy** (:class:`CsrTensor`): the non-zeros row by row (FP16 values) with 16-bit
  *delta-encoded* column indices: each index is the distance from the previous non-zero of its
  row (from column 0 for the first). A gap wider than 65,535 columns is bridged by explicit
  zero-valued fillers with delta 65,535, so any width is encodable. The transposed order (rows of
  W^T, what the backward pass streams) is a *view* of the same copy: a permutation of the value
  array plus its own delta indices, rebuilt whenever the mask changes (:meth:`CsrTensor.rebuild`).
- **Gradient-request masks**: in the backward pass MemoryX sends a mask (same format as the
  forward index stream) that says which gradients it wants back; by default the weights' mask,
  or a denser one so zero weights may regrow when their gradient exceeds a threshold
  (:meth:`DenseTensor.regrow`).

Left out: ECC, the layout of values in DRAM pages and flash blocks (a tier is one bandwidth).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from numerics.floats import to_fp16
from simcore.errors import ConfigError

#: Bytes MemoryX stores per parameter: FP32 weight, gradient, Adam m and v (16 B), FP16 sparse
#: value and 16-bit index (4 B).
BYTES_PER_PARAM = 20
#: Of which the dense FP32 copy (weight, gradient, two moments), touched by an update.
DENSE_BYTES_PER_PARAM = 16
#: Largest delta a 16-bit index holds.
MAX_DELTA = 0xFFFF


# -- capacity ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Placement:
    """Which tier holds each tensor, and the bytes used in each tier."""

    tier_of: dict[str, str]
    dram_used: int
    flash_used: int

    @property
    def total(self) -> int:
        return self.dram_used + self.flash_used


def place(
    tensors: Sequence[tuple[str, int]], dram_bytes: int, flash_bytes: int, *, prefix: str = ""
) -> Placement:
    """Place ``(name, parameters)`` in order: DRAM while a tensor fits, flash after.

    A tensor is never split between tiers. The model not fitting at all is a ConfigError naming
    the bytes needed (20 B per parameter) and available, and the keys to change.
    """
    need = sum(n for _, n in tensors) * BYTES_PER_PARAM
    have = dram_bytes + flash_bytes
    if need > have:
        params = need // BYTES_PER_PARAM
        raise ConfigError(
            f"{prefix}flash_bytes",
            flash_bytes,
            f"the model needs {need:,} B in MemoryX ({params:,} parameters x "
            f"{BYTES_PER_PARAM} B) but MemoryX holds {have:,} B ({prefix}dram_bytes = "
            f"{dram_bytes:,} + {prefix}flash_bytes = {flash_bytes:,})",
            hint=f"raise {prefix}flash_bytes or {prefix}dram_bytes to at least {need:,} B in "
            "total, or choose a smaller model",
        )
    tier_of: dict[str, str] = {}
    dram = flash = 0
    for name, n in tensors:
        size = n * BYTES_PER_PARAM
        if dram + size <= dram_bytes:
            tier_of[name] = "dram"
            dram += size
        else:
            tier_of[name] = "flash"
            flash += size
    if flash > flash_bytes:  # DRAM fragments: tensors are not split across tiers
        raise ConfigError(
            f"{prefix}flash_bytes",
            flash_bytes,
            f"whole tensors need {dram:,} B of DRAM and {flash:,} B of flash (tensors are not "
            "split between tiers)",
            hint=f"raise {prefix}flash_bytes to {flash:,} B",
        )
    return Placement(tier_of, dram, flash)


# -- CSR with 16-bit delta indices ---------------------------------------------------------------
def encode_row(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Delta-encode one row's ascending non-zero columns in 16 bits.

    Returns (deltas uint16, slot int64): ``slot[i]`` is the position in ``deltas`` of the i-th
    real non-zero (fillers, zero-valued, bridge gaps wider than :data:`MAX_DELTA`).
    """
    out: list[int] = []
    slot: list[int] = []
    prev = 0
    for col in columns.tolist():
        gap = col - prev
        while gap > MAX_DELTA:
            out.append(MAX_DELTA)
            gap -= MAX_DELTA
        slot.append(len(out))
        out.append(gap)
        prev = col
    return np.asarray(out, np.uint16), np.asarray(slot, np.int64)


def decode_row(deltas: np.ndarray) -> np.ndarray:
    """The columns of a row's entries (fillers included) from its 16-bit deltas."""
    return np.cumsum(deltas.astype(np.int64))


@dataclasses.dataclass
class CsrOrder:
    """One streaming order of a CSR copy: per row, its delta indices, and ``perm``, the index
    into the forward value array of each real entry (identity for the forward order)."""

    rowptr: np.ndarray  # entries (with fillers) before each row; len rows + 1
    realptr: np.ndarray  # real entries (no fillers) before each row; len rows + 1
    deltas: np.ndarray  # uint16, fillers included
    real: np.ndarray  # bool per entry: False for a filler
    perm: np.ndarray  # per real entry, its place in the forward value array

    def row_slice(self, lo: int, hi: int) -> slice:
        return slice(int(self.rowptr[lo]), int(self.rowptr[hi]))


def _order(mask: np.ndarray, perm_of: np.ndarray) -> CsrOrder:
    rows = mask.shape[0]
    rowptr = [0]
    realptr = np.concatenate([[0], np.cumsum(mask.sum(axis=1))]).astype(np.int64)
    deltas: list[np.ndarray] = []
    real: list[np.ndarray] = []
    perm: list[np.ndarray] = []
    for r in range(rows):
        cols = np.flatnonzero(mask[r])
        d, slot = encode_row(cols)
        flag = np.zeros(len(d), bool)
        flag[slot] = True
        deltas.append(d)
        real.append(flag)
        perm.append(perm_of[r, cols])
        rowptr.append(rowptr[-1] + len(d))
    cat = np.concatenate
    return CsrOrder(
        np.asarray(rowptr, np.int64),
        realptr,
        cat(deltas) if deltas else np.zeros(0, np.uint16),
        cat(real) if real else np.zeros(0, bool),
        cat(perm) if perm else np.zeros(0, np.int64),
    )


@dataclasses.dataclass
class CsrTensor:
    """The sparse working copy of W [rows][cols]: FP16 non-zeros, row-major, with 16-bit delta
    indices; the transposed order is a view (permutation + its own indices)."""

    shape: tuple[int, int]
    values: np.ndarray  # float16, forward (row-major) order of the non-zeros
    fwd: CsrOrder
    bwd: CsrOrder
    mask: np.ndarray

    @classmethod
    def build(cls, w: np.ndarray, mask: np.ndarray) -> CsrTensor:
        t = cls(w.shape, np.zeros(0, np.float16), None, None, mask)  # type: ignore[arg-type]
        t.rebuild(w, mask)
        return t

    def rebuild(self, w: np.ndarray, mask: np.ndarray) -> None:
        """New values (rounded FP32 -> FP16 under ``mask``); the index streams of both orders
        are re-encoded when the mask changed (MemoryX re-transposes the sparsity pattern)."""
        changed = self.fwd is None or not np.array_equal(mask, self.mask)
        self.mask = mask.copy()
        if changed:
            index = np.full(mask.shape, -1, np.int64)
            index[mask] = np.arange(int(mask.sum()))
            self.fwd = _order(mask, index)
            self.bwd = _order(mask.T, index.T)
        self.values = to_fp16(w[mask])

    def refresh_rows(self, w: np.ndarray, lo: int, hi: int) -> None:
        """New FP16 values for rows lo..hi of W, the mask unchanged (after their update)."""
        a, b = int(self.fwd.realptr[lo]), int(self.fwd.realptr[hi])
        self.values[a:b] = to_fp16(w[lo:hi][self.mask[lo:hi]])

    @property
    def nnz(self) -> int:
        return int(self.values.size)

    def stream(self, order: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows lo..hi of W (``fwd``) or of W^T (``bwd``) as streamed: (FP16 values, uint16
        delta indices), fillers included (value 0)."""
        o = self.fwd if order == "fwd" else self.bwd
        sl = o.row_slice(lo, hi)
        real = o.real[sl]
        vals = np.zeros(real.size, np.float16)
        vals[real] = self.values[o.perm[int(o.realptr[lo]) : int(o.realptr[hi])]]
        return vals, o.deltas[sl]

    def dense_rows(self, order: str, lo: int, hi: int) -> np.ndarray:
        """Decode :meth:`stream` back to dense FP32 rows: what the wafer reconstructs."""
        o = self.fwd if order == "fwd" else self.bwd
        width = self.shape[1] if order == "fwd" else self.shape[0]
        vals, deltas = self.stream(order, lo, hi)
        out = np.zeros((hi - lo, width), np.float32)
        for i, r in enumerate(range(lo, hi)):
            a, b = int(o.rowptr[r] - o.rowptr[lo]), int(o.rowptr[r + 1] - o.rowptr[lo])
            cols = decode_row(deltas[a:b])
            out[i, cols] += vals[a:b].astype(np.float32)
        return out

    def mask_stream(self, lo: int, hi: int, request: np.ndarray) -> np.ndarray:
        """A gradient request for rows lo..hi of W in the forward index format: the delta
        indices of ``request``'s set entries."""
        parts = [encode_row(np.flatnonzero(request[r]))[0] for r in range(lo, hi)]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


# -- the dense copy and the optimizers -----------------------------------------------------------
@dataclasses.dataclass
class DenseTensor:
    """FP32 weight, gradient and Adam moments of one tensor, its weights' mask and its gradient
    request mask; ``steps`` counts updates (Adam's bias correction)."""

    w: np.ndarray
    mask: np.ndarray
    request: np.ndarray
    g: np.ndarray = dataclasses.field(init=False)
    m: np.ndarray = dataclasses.field(init=False)
    v: np.ndarray = dataclasses.field(init=False)
    steps: int = 0

    def __post_init__(self) -> None:
        self.w = np.where(self.mask, self.w, 0).astype(np.float32)
        self.g = np.zeros_like(self.w)
        self.m = np.zeros_like(self.w)
        self.v = np.zeros_like(self.w)

    def regrow(self, threshold: float) -> None:
        """Let masked-out weights whose |gradient| exceeds ``threshold`` join the mask."""
        self.mask = self.mask | (np.abs(self.g) > threshold)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Optimizer:
    """An optimizer and its hyper-parameters; ``flops_per_param`` is its arithmetic per
    parameter (the update-throughput model's work), mask and FP16 rounding included."""

    name: str = "sgd"
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    @property
    def flops_per_param(self) -> int:
        # SGD: w -= lr*g (2); Adam: m, v (3 + 4), bias corrections (2), sqrt, add, divide,
        # scale, subtract (5): 14. Both: mask and FP16 rounding (2).
        return {"sgd": 2, "adam": 14}[self.name] + 2


def sgd(t: DenseTensor, rows: slice, lr: float) -> None:
    """w -= lr·g on rows ``rows`` (FP32), where a gradient was requested."""
    g = np.where(t.request[rows], t.g[rows], np.float32(0))
    t.w[rows] = t.w[rows] - np.float32(lr) * g


def adam(t: DenseTensor, rows: slice, opt: Optimizer, step: int) -> None:
    """Adam on rows ``rows`` (FP32 arithmetic), step ``step`` (1-based) for bias correction."""
    f = np.float32
    g = np.where(t.request[rows], t.g[rows], f(0))
    m = f(opt.beta1) * t.m[rows] + f(1 - opt.beta1) * g
    v = f(opt.beta2) * t.v[rows] + f(1 - opt.beta2) * g * g
    t.m[rows], t.v[rows] = m, v
    mhat = m / f(1 - opt.beta1**step)
    vhat = v / f(1 - opt.beta2**step)
    t.w[rows] = t.w[rows] - f(opt.lr) * mhat / (np.sqrt(vhat) + f(opt.eps))


def update_rows(t: DenseTensor, rows: slice, opt: Optimizer, step: int) -> None:
    """Apply ``opt`` to rows ``rows`` of ``t`` (step is 1-based), then its mask."""
    if opt.name == "sgd":
        sgd(t, rows, opt.lr)
    else:
        adam(t, rows, opt, step)
    t.w[rows] = np.where(t.mask[rows], t.w[rows], np.float32(0))
