"""numerics.mx, the MX9/MX6/MX4 reference quantizer: hand-worked blocks, policies, properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numerics import mx
from numerics.floats import bf16_bits, bf16_values

BLOCK_VALUES = [
    1.0, 1.96875,  # pair 0: E = 127 = E_max, mu 0, s = 2^-3 (MX6): 8, 15.75 -> 16 -> saturated 15
    0.25, -0.375,  # pair 1: E = 125 < 127, mu 1, s = 2^-4: 4, -6
    1.0625, 1.1875,  # pair 2: mu 0, s = 2^-3: 8.5 -> 8 (tie to even), 9.5 -> 10 (tie to even)
    0.0, -0.0,  # pair 3: zeros, mu 1, magnitudes 0, signs kept
    2.0**-130, 0.0,  # pair 4: a BF16 subnormal is flushed to zero
    0.0078125, 0.01171875,  # pair 5: 2^-7, 1.5 x 2^-7: mu 1, s = 2^-4 -> 0.125 -> 0, 0.1875 -> 0
    0.5, -0.5,  # pair 6: E = 126, mu 1, s = 2^-4: 8, -8
    0.0, 1.5,  # pair 7: mu 0, s = 2^-3: 0, 12
]  # fmt: skip


def test_a_hand_worked_mx6_block():
    bits = bf16_bits(np.array(BLOCK_VALUES, np.float32))
    q = mx.quantize_blocks(bits.reshape(1, 16), "mx6")
    assert q.shared_exp.tolist() == [127]
    assert q.micro.tolist() == [[0, 1, 0, 1, 1, 1, 1, 0]]
    assert q.mag.tolist() == [[8, 15, 4, 6, 8, 10, 0, 0, 0, 0, 0, 0, 8, 8, 0, 12]]
    assert q.sign.tolist() == [[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0]]
    back = mx.dequantize_blocks(q)[0]
    assert back[:6].tolist() == [1.0, 1.875, 0.25, -0.375, 1.0, 1.25]


def test_a_hand_worked_mx9_and_mx4_pair():
    bits = bf16_bits(np.array([1.0, 1.96875] + [0.0] * 14, np.float32)).reshape(1, 16)
    # MX9: m = 7, s = 2^-6: 64, 126; MX4: m = 2, s = 2^-1: 2, 3.94 -> 4 -> saturated 3
    assert mx.quantize_blocks(bits, "mx9").mag[0, :2].tolist() == [64, 126]
    assert mx.quantize_blocks(bits, "mx4").mag[0, :2].tolist() == [2, 3]


def test_bits_per_element_and_packing():
    assert [mx.bits_per_element(f) for f in ("mx9", "mx6", "mx4")] == [9, 6, 4]
    rng = np.random.default_rng(0)
    bits = bf16_bits(rng.standard_normal((4, 16)).astype(np.float32))
    for fmt in ("mx9", "mx6", "mx4"):
        assert len(mx.pack(mx.quantize_blocks(bits, fmt))) == 4 * 16 * mx.bits_per_element(fmt) / 8
    q = mx.quantize_blocks(bits, "mx6")
    first = np.unpackbits(np.frombuffer(mx.pack(q), np.uint8))[:16]
    assert int("".join(map(str, first[:8])), 2) == q.shared_exp[0]
    assert first[8:16].tolist() == q.micro[0].tolist()


def test_nan_and_inf_are_refused():
    bits = np.zeros((1, 16), np.uint16)
    bits[0, 3] = 0x7F80  # +Inf
    with pytest.raises(ValueError) as err:
        mx.quantize_blocks(bits, "mx6")
    assert str(err.value) == "MX has no encoding for NaN or Inf: the input holds one"


def test_bf16_rounding_is_to_nearest_even():
    x = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8)], np.float32)
    assert bf16_bits(x).tolist() == [0x3F80, 0x3F82, 0xBF80]


finite_bf16 = st.integers(0, 0xFFFF).filter(lambda b: (b >> 7) & 0xFF != 0xFF)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(finite_bf16, min_size=16, max_size=16),
    st.sampled_from(("mx9", "mx6", "mx4")),
)
def test_error_is_within_half_an_lsb_or_saturation(block, fmt):
    bits = np.array(block, np.uint16).reshape(1, 16)
    q = mx.quantize_blocks(bits, fmt)
    m = mx.MANTISSA_BITS[fmt]
    x = np.where((bits >> 7) & 0xFF > 0, bf16_values(bits).astype(np.float64), 0.0)[0]
    s = np.exp2(q.scale_exp()[0] - 127.0 - (m - 1))
    err = np.abs(mx.dequantize_blocks(q)[0] - x)
    top = np.abs(x) > (2**m - 1) * s
    assert np.all(err[~top] <= s[~top] / 2)
    assert np.all(q.mag[0][top] == 2**m - 1)
    assert np.all(q.mag <= 2**m - 1)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.sampled_from(("row", "col")))
def test_lanes_round_trip(tr, tc, direction):
    rng = np.random.default_rng(tr * 10 + tc)
    bits = bf16_bits(rng.standard_normal((16 * tr, 16 * tc)).astype(np.float32))
    q = mx.quantize_matrix(bits, "mx6", direction)
    codes, scale = mx.lanes(q, bits.shape, direction)
    back = mx.from_lanes(codes, scale, "mx6", direction)
    for a, b in zip(
        (q.shared_exp, q.micro, q.sign, q.mag),
        (back.shared_exp, back.micro, back.sign, back.mag),
        strict=True,
    ):
        assert np.array_equal(a, b)
