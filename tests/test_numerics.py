"""numerics: bf16 and fp16 rounding checked against references computed another way, and against
the implementations it replaced, bit for bit.

The references: for bf16, the two bf16 neighbours of each float32 compared in exact float64
arithmetic (ties to the even one); for fp16, Python's own IEEE half packing (``struct`` format
``e``, round half to even). The values: random bit patterns (every class of float32) and the edge
cases: ties both ways, the largest values below a rounding to infinity, subnormals and the
smallest normals, signed zeros, infinities and NaNs.
"""

from __future__ import annotations

import ast
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numerics.floats import (
    bf16_bits,
    bf16_values,
    fp16_bits,
    fp16_values,
    fp32_bits,
    round_bf16,
    round_fp16,
    to_fp16,
)

ROOT = Path(__file__).resolve().parent.parent

#: Edge cases as float32 bit patterns.
EDGES = np.array(
    [
        0x00000000, 0x80000000,  # signed zeros
        0x3F808000, 0x3F818000, 0xBF808000,  # exact ties: to even (down), to even (up), negative
        0x3F808001, 0x3F807FFF,  # just above and below a tie
        0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF,  # below and at the rounding to infinity
        0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x807FFFFF,  # subnormals, ties among them
        0x00800000, 0x007F8000,  # the smallest normal; a subnormal rounding up to it
        0x7F800000, 0xFF800000,  # infinities
        0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F808000, 0x7F80FFFF,  # NaNs
    ],
    np.uint32,
)  # fmt: skip


def random_patterns(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([EDGES, rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)])


def bf16_reference(u: int) -> int:
    """The bf16 bits nearest float32 bits ``u``, by comparing its two bf16 neighbours in float64
    (exact: both neighbours and the value are float32 numbers); -1 for a NaN."""
    x = float(np.uint32(u).view(np.float32))
    if x != x:
        return -1
    if x in (float("inf"), float("-inf")):
        return u >> 16
    low = u >> 16  # toward zero
    high = low + 1  # away from zero (the next pattern; may be infinity)
    lv = float((np.uint32(low << 16)).view(np.float32))
    hv = float((np.uint32(high << 16)).view(np.float32))
    if (high & 0x7FFF) == 0x7F80:  # the next pattern is infinity: it counts as one ulp further
        hv = lv + (lv - float((np.uint32((low - 1) << 16)).view(np.float32)))
    dl, dh = abs(x - lv), abs(hv - x)
    if dl < dh or (dl == dh and low % 2 == 0):
        return low
    return high


def test_bf16_matches_the_exact_reference_on_edges_and_random_patterns():
    u = random_patterns(20_000)
    got = bf16_bits(u.view(np.float32))
    for pattern, bits in zip(u.tolist(), got.tolist(), strict=True):
        want = bf16_reference(pattern)
        if want < 0:  # NaN: stays NaN, quiet, sign and top payload bits kept
            assert bits == (pattern >> 16) | 0x0040, hex(pattern)
        else:
            assert bits == want, hex(pattern)


def test_bf16_known_values():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -1.0, 3.4028235e38, 1e-45], np.float32)
    assert bf16_bits(x).tolist() == [0x3F80, 0x3F80, 0x3F82, 0xBF80, 0x7F80, 0x0000]
    assert bf16_bits(np.array([np.nan, -np.nan], np.float32)).tolist() == [0x7FC0, 0xFFC0]
    assert bf16_values(np.array([0x3F80, 0x7F80, 0x0001], np.uint16)).tolist() == [
        1.0, np.inf, float(np.uint32(0x00010000).view(np.float32))
    ]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.integers(0, (1 << 32) - 1))
def test_round_bf16_is_bf16_bits_held_in_float32(pattern):
    x = np.array([pattern], np.uint32).view(np.float32)
    r = round_bf16(x)
    assert r.dtype == np.float32 and int(r.view(np.uint32)[0]) & 0xFFFF == 0
    assert r.view(np.uint32)[0] >> 16 == bf16_bits(x)[0]
    if not np.isnan(x[0]):
        assert round_bf16(r).view(np.uint32)[0] == r.view(np.uint32)[0]  # idempotent


def test_shapes_are_kept_and_float64_goes_through_float32():
    assert bf16_bits(np.float32(1.5)).shape == ()
    assert round_bf16(np.zeros((2, 3, 4), np.float32)).shape == (2, 3, 4)
    x = np.array([1.0 + 2**-8 + 2**-30], np.float64)  # float32 first: the tie, then to even
    assert bf16_bits(x).tolist() == [0x3F80]
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    assert round_bf16(strided).tolist() == strided.tolist()
    assert fp32_bits(np.float32(1.0)).tolist() == 0x3F800000


# -- what numerics replaced (commit 2712fe6): the same bits on every value but NaNs --------------
def previous_tpu_to_bf16(x):  # workloads/tpu/common.py
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded & np.uint32(0xFFFF0000)).view(np.float32)


def previous_pim_to_bf16_bits(values):  # pim/mx.py
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def previous_contract_bf16(x):  # tests/contracts/tpu_mxu.py
    bits = np.asarray(x, np.float32).view(np.uint32)
    keep = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(
        0xFFFF0000
    )
    return np.where(np.isnan(x), x, keep.view(np.float32)).astype(np.float32)


def test_bf16_is_bit_identical_to_the_implementations_it_replaced():
    """Every non-NaN value rounds to the same bits as before (checked once over all 2^32
    patterns when numerics was made; here on the edges and random patterns). NaNs were the
    difference: the old carry turned some NaNs into infinities or zeros (0x7F808000 -> inf,
    0x7FFFFFFF -> -0); now every NaN stays a NaN."""
    u = random_patterns(200_000, seed=1)
    x = u.view(np.float32)
    ok = ~np.isnan(x)
    with np.errstate(over="ignore"):
        tpu = previous_tpu_to_bf16(x).view(np.uint32)
    assert np.array_equal(tpu[ok], round_bf16(x).view(np.uint32)[ok])
    assert np.array_equal(previous_pim_to_bf16_bits(x)[ok], bf16_bits(x)[ok])
    assert np.array_equal(
        previous_contract_bf16(x).view(np.uint32)[ok], round_bf16(x).view(np.uint32)[ok]
    )
    nan = np.array([0x7F808000, 0x7FFFFFFF], np.uint32).view(np.float32)
    assert previous_tpu_to_bf16(nan).tolist() == [np.inf, -0.0]
    assert np.all(np.isnan(round_bf16(nan)))


# -- fp16 --------------------------------------------------------------------------------------
def fp16_reference(x: float) -> int:
    """IEEE half bits of ``x`` rounded to nearest even, by Python's own packing."""
    if x != x:
        return -1
    try:
        return int.from_bytes(struct.pack("<e", x), "little")
    except OverflowError:  # struct refuses what rounds to infinity
        return 0x7C00 | (0x8000 if x < 0 else 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fp16_matches_pythons_half_packing(dtype):
    rng = np.random.default_rng(2)
    edges = [
        65504.0,
        65519.99,
        65520.0,
        2.0**-24,
        2.0**-25,
        2.0**-25 * 1.5,
        2.0**-14,
        -0.0,
        1.0 + 2**-11,
        1.0 + 3 * 2**-11,
    ]  # max, below/at overflow, subnormal ties, ties
    drawn = rng.standard_normal(5_000) * np.exp2(rng.integers(-30, 20, 5_000))
    with np.errstate(invalid="ignore"):  # signalling NaNs change precision
        x = np.concatenate([
            random_patterns(5_000, seed=3).view(np.float32).astype(dtype),
            drawn.astype(dtype), np.array(edges, dtype),
        ])  # fmt: skip
    bits = fp16_bits(x)
    for value, got in zip(x.tolist(), bits.tolist(), strict=True):
        want = fp16_reference(value)
        assert (got & 0x7FFF) > 0x7C00 if want < 0 else got == want, value
    assert np.array_equal(
        round_fp16(x).view(np.uint32), to_fp16(x).astype(np.float32).view(np.uint32)
    )
    assert to_fp16(x).dtype == np.float16 and round_fp16(x).dtype == np.float32
    assert np.array_equal(fp16_values(bits).view(np.uint16), bits)


# -- the package's place ---------------------------------------------------------------------------
def test_numerics_imports_only_numpy_and_the_standard_library():
    for path in sorted((ROOT / "numerics").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in ("numpy", "numerics") or top in sys.stdlib_module_names, (path, name)


#: What a copy of a rounding would write: the bf16 carry and mask, a float16 conversion.
COPIES = ("0x7FFF) +", "0x7FFF +", "0xFFFF0000", ".astype(np.float16)")


def test_no_package_rounds_on_its_own():
    """bf16 and fp16 rounding live in numerics only (the tests' references above aside)."""
    packages = ("simcore", "traces", "fabric", "pe", "memoryx", "swarmx", "tpu", "pim", "wafer",
                "cs2", "runner", "workloads", "sweeps", "app", "tests")  # fmt: skip
    found = []
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "test_numerics.py":
                continue
            text = path.read_text()
            found += [f"{path.relative_to(ROOT)}: {c}" for c in COPIES if c in text]
    assert found == []
