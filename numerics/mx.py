"""The MX9 / MX6 / MX4 reference quantizer and dequantizer (bit-exact numpy).

Shared-microexponent formats: a block of 16 elements has one 8-bit shared exponent, one 1-bit
microexponent per pair of elements, and per element a sign and ``m`` magnitude bits (m = 7, 4, 2:
9, 6 and 4 bits per element). From BF16 (or FP32) inputs, per block::

    E_i   = biased exponent field of x_i (0 for zeros and subnormals, which are flushed to zero)
    E_max = max_i E_i                                      the shared exponent (8 bits, biased)
    mu_j  = 1 if max(E_2j, E_2j+1) < E_max else 0           the pair's microexponent
    s_j   = 2^(E_max - 127 - mu_j - (m - 1))                the pair's LSB weight
    q_i   = round_half_to_even(x_i / s_j), |q_i| saturated to 2^m - 1
    x_hat = q_i * s_j

This is ``e_max = floor(log2 max |x_i|)`` of the spec with the exponent kept biased, so a block
of zeros has E_max = 0. The arithmetic (a division by a power of two, numpy's ``rint``) is done
in float64, where it is exact: the reference is written from the definition, not from the PIM
kernel's integer shifts, so comparing them tests the kernel.

Policies (the same in the PIM kernel, :mod:`pim.jitq`, which is checked against this reference):

- **zeros** quantize to magnitude 0 and keep their sign bit (-0 stays -0);
- **subnormal** BF16 and FP32 inputs are flushed to (signed) zero before anything else;
- **saturation**: a magnitude that rounds to 2^m (only possible at the top of the block's
  range) is clamped to 2^m - 1;
- **the sign** of a code is always the input's sign bit, also when the magnitude rounds to 0;
- **NaN and Inf** have no encoding in these formats: the reference refuses them
  (``ValueError``). Master weights are finite; the kernel, which does no special-casing, would
  treat exponent 255 as an ordinary exponent.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from numerics.floats import bf16_values

#: Magnitude bits per format.
MANTISSA_BITS = {"mx9": 7, "mx6": 4, "mx4": 2}
BLOCK = 16
PAIR = 2


def bits_per_element(fmt: str) -> float:
    """Storage cost: sign + m magnitude bits + 8/16 shared-exponent + 1/2 microexponent bits."""
    return 1 + MANTISSA_BITS[fmt] + 8 / BLOCK + 1 / PAIR


@dataclasses.dataclass(frozen=True)
class MxBlocks:
    """Quantized blocks: ``shared_exp`` (n,) biased, ``micro`` (n, 8) 0/1, ``sign`` (n, 16)
    0/1 and ``mag`` (n, 16) magnitudes in 0 .. 2^m - 1."""

    fmt: str
    shared_exp: np.ndarray
    micro: np.ndarray
    sign: np.ndarray
    mag: np.ndarray

    def scale_exp(self) -> np.ndarray:
        """(n, 16): each element's biased scale exponent E_max - mu of its pair."""
        es = self.shared_exp[:, None].astype(np.int64) - self.micro.astype(np.int64)
        return np.repeat(es, PAIR, axis=1)


def quantize_blocks(bits: np.ndarray, fmt: str) -> MxBlocks:
    """Quantize bit patterns shaped (n, 16), one block per row: BF16 (uint16) or FP32
    (uint32) master weights."""
    m = MANTISSA_BITS[fmt]
    bits = np.asarray(bits)
    fp32 = bits.dtype == np.uint32
    bits = bits.reshape(-1, BLOCK) if fp32 else bits.astype(np.uint16).reshape(-1, BLOCK)
    exp = ((bits >> (23 if fp32 else 7)) & 0xFF).astype(np.int64)
    if np.any(exp == 0xFF):
        raise ValueError("MX has no encoding for NaN or Inf: the input holds one")
    sign = (bits >> (31 if fp32 else 15)).astype(np.int64)
    normal = exp > 0
    as_float = bits.view(np.float32) if fp32 else bf16_values(bits)
    values = np.where(normal, as_float.astype(np.float64), 0.0)
    e = np.where(normal, exp, 0)
    e_max = e.max(axis=1)
    pair_max = e.reshape(-1, BLOCK // PAIR, PAIR).max(axis=2)
    micro = (pair_max < e_max[:, None]).astype(np.int64)
    scale = (e_max[:, None] - 127 - micro - (m - 1)).astype(np.float64)
    s = np.repeat(np.exp2(scale), PAIR, axis=1)
    q = np.abs(np.rint(values / s))
    mag = np.minimum(q, 2**m - 1).astype(np.int64)
    return MxBlocks(fmt, e_max.astype(np.uint8), micro.astype(np.uint8), sign, mag)


def dequantize_blocks(blocks: MxBlocks) -> np.ndarray:
    """(n, 16) float64 values x_hat = (-1)^sign * mag * s_j."""
    m = MANTISSA_BITS[blocks.fmt]
    s = np.exp2(blocks.scale_exp().astype(np.float64) - 127 - (m - 1))
    return np.where(blocks.sign == 1, -1.0, 1.0) * blocks.mag * s


def _blocks_of(mat: np.ndarray, direction: str) -> np.ndarray:
    """(rows, cols) -> (n, 16) blocks along rows (``row``) or down columns (``col``)."""
    r, c = mat.shape
    if direction == "row":
        return mat.reshape(r, c // BLOCK, BLOCK).reshape(-1, BLOCK)
    return mat.reshape(r // BLOCK, BLOCK, c).transpose(0, 2, 1).reshape(-1, BLOCK)


def _from_blocks(blocks: np.ndarray, shape: tuple[int, int], direction: str) -> np.ndarray:
    r, c = shape
    if direction == "row":
        return blocks.reshape(r, c)
    return blocks.reshape(r // BLOCK, c, BLOCK).transpose(0, 2, 1).reshape(r, c)


def quantize_matrix(bits: np.ndarray, fmt: str, direction: str) -> MxBlocks:
    """Quantize a BF16 (uint16) or FP32 (uint32) matrix along its rows or down its columns."""
    return quantize_blocks(_blocks_of(np.asarray(bits), direction), fmt)


def lanes(blocks: MxBlocks, shape: tuple[int, int], direction: str) -> tuple[np.ndarray, ...]:
    """The element-wise view the PIM kernel writes, as two matrices of ``shape``:
    ``codes`` (uint16: sign << 15 | magnitude) and ``scale`` (uint16: E_max - mu)."""
    codes = (blocks.sign.astype(np.uint16) << 15) | blocks.mag.astype(np.uint16)
    scale = blocks.scale_exp().astype(np.uint16)
    return _from_blocks(codes, shape, direction), _from_blocks(scale, shape, direction)


def from_lanes(codes: np.ndarray, scale: np.ndarray, fmt: str, direction: str) -> MxBlocks:
    """Rebuild the blocks from the kernel's element-wise view (inverse of :func:`lanes`)."""
    c = _blocks_of(np.asarray(codes, np.uint16), direction).astype(np.int64)
    es = _blocks_of(np.asarray(scale, np.uint16), direction).astype(np.int64)
    pair_es = es.reshape(-1, BLOCK // PAIR, PAIR)
    if np.any(pair_es[:, :, 0] != pair_es[:, :, 1]):
        raise ValueError("the two elements of a pair have different scale exponents")
    e_max = pair_es[:, :, 0].max(axis=1)
    micro = e_max[:, None] - pair_es[:, :, 0]
    return MxBlocks(fmt, e_max.astype(np.uint8), micro.astype(np.uint8), c >> 15, c & 0x7FFF)


def pack(blocks: MxBlocks) -> bytes:
    """The storage layout: per block, the 8-bit shared exponent, the 8 microexponent bits, then
    16 elements of (sign, m magnitude bits), MSB first: 9, 6 or 4 bits per element."""
    m = MANTISSA_BITS[blocks.fmt]
    n = blocks.shared_exp.shape[0]
    exp_bits = np.unpackbits(blocks.shared_exp.reshape(n, 1), axis=1)
    micro_bits = blocks.micro.astype(np.uint8)
    shifts = np.arange(m - 1, -1, -1)
    mag_bits = ((blocks.mag[:, :, None] >> shifts) & 1).astype(np.uint8)
    elem = np.concatenate([blocks.sign[:, :, None].astype(np.uint8), mag_bits], axis=2)
    row = np.concatenate([exp_bits, micro_bits, elem.reshape(n, -1)], axis=1)
    return np.packbits(row.reshape(-1)).tobytes()
