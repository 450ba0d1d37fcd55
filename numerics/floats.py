"""bfloat16 and fp16 rounding, and the bit patterns of bf16, fp16 and fp32 values.

**bfloat16** is float32's top half: sign, the same 8-bit exponent, 7 fraction bits. Rounding a
float32 to it adds ``0x7FFF`` plus the lowest kept bit to the 32-bit pattern and drops the low
half (round to nearest, ties to even on the kept bit). On bit patterns this is exact for every
class of value: normals and subnormals round like any other pattern (a subnormal may round up to
the smallest normal), the largest finite values round up to infinity as they should, infinities
stay infinities. Only NaNs need care: the carry could turn a NaN's payload into an infinity or
wrap it to zero, so a NaN keeps its sign and the top seven payload bits and is made quiet
(``0x7FC0`` for the default NaN). Inputs that are not float32 are first converted to float32 (as
numpy's ``astype`` does: round to nearest even), as the hardware takes float32 in.

**fp16** (IEEE binary16: 5-bit exponent, 10 fraction bits) rounding is numpy's conversion to
``float16``, which rounds to nearest even from the input's own precision (float32 or float64,
without a float32 detour), keeps subnormals, overflows to infinity and keeps NaNs. It is named
here so that every family that stores fp16 rounds through one place.
"""

from __future__ import annotations

import numpy as np


def fp32_bits(values: np.ndarray) -> np.ndarray:
    """float32 values (others converted) -> their bit patterns (uint32), same shape."""
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values (others converted to float32) -> the bit patterns (uint16) of the nearest
    bfloat16 values, ties to even; NaNs stay NaNs (quiet, sign and top payload bits kept)."""
    u = fp32_bits(values)
    shape = u.shape
    u = u.reshape(-1)
    # In uint32 the carry wraps only above 0xFFFF7FFF: NaN patterns (the largest non-NaN one,
    # -inf, is 0xFF800000), which are replaced below. 20x faster than widening to uint64.
    rounded = u + ((u >> 16) & 1)
    rounded += 0x7FFF
    rounded >>= 16
    out = rounded.astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return out.reshape(shape)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> their values as float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_bf16(values: np.ndarray) -> np.ndarray:
    """The nearest bfloat16 values (ties to even) of float32 ``values``, held in float32 (their
    low 16 bits zero): what a bf16 operand of a float32 computation is."""
    return bf16_values(bf16_bits(values))


def to_fp16(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to the nearest fp16 (ties to even), as a float16 array; what is too
    large becomes an infinity, silently (rounding is defined there: no warning)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values).astype(np.float16)


def round_fp16(values: np.ndarray) -> np.ndarray:
    """The nearest fp16 values (ties to even) of ``values``, held in float32 (exact)."""
    return to_fp16(values).astype(np.float32)


def fp16_bits(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to fp16 -> their bit patterns (uint16)."""
    return to_fp16(values).view(np.uint16)


def fp16_values(bits: np.ndarray) -> np.ndarray:
    """fp16 bit patterns (uint16) -> their values as float16 (exact)."""
    return np.asarray(bits, dtype=np.uint16).view(np.float16)
