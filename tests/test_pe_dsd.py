"""Data structure descriptors: iteration order, gather/scatter, validation, fabric DSDs, FIFOs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pe.config import PeConfig
from pe.dsd import DTYPES, FabInDsd, FabOutDsd, FifoDsd, MemDsd
from pe.memory import Cache, Sram
from simcore.errors import BuildError

CFG = PeConfig()
OWNER = "wafer/pe[0,0]"


def reference_indices(d: MemDsd) -> list[int]:
    """Element offsets by explicit loops: first dimension fastest."""
    out = []
    for idx in itertools.product(*(range(n) for n in reversed(d.shape))):
        i = tuple(reversed(idx))
        out.append(d.offset + sum(k * s for k, s in zip(i, d.strides, strict=True)))
    return out


def test_iteration_order_is_first_dimension_fastest() -> None:
    d = MemDsd(100, "f32", (2, 3), (1, 4))
    assert d.length == 6
    assert d.addresses().tolist() == [100, 104, 116, 120, 132, 136]
    assert d.addresses().dtype == np.int64
    assert d.span() == (100, 139)


def test_offset_length_and_density() -> None:
    d = MemDsd.vector(8, "f16", 5, name="x")
    assert d.with_offset(3).addresses().tolist() == [14, 16, 18, 20, 22]
    assert d.with_offset(3).with_offset(-1).offset == 2
    assert d.with_length(2).addresses().tolist() == [8, 10]
    assert d.is_dense and not MemDsd.vector(0, "f16", 5, 2).is_dense
    assert MemDsd(0, "f32", (4, 1, 3), (1, 99, 4)).is_dense
    assert not MemDsd(0, "f32", (4, 3), (1, 5)).is_dense
    with pytest.raises(BuildError) as err:
        MemDsd(0, "f32", (2, 2), (1, 2), name="m").with_length(3)
    assert str(err.value) == (
        "DSD 'm' (f32, shape (2, 2), strides (1, 2)): with_length applies to 1-D descriptors; "
        "this one has 2 dimensions, build a new one instead"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"base": 0, "dtype": "f32", "shape": (3, 0), "strides": (1, 3), "name": "C"},
            "DSD 'C' (f32, shape (3, 0), strides (1, 3)): shape (3, 0) has length 0 in some "
            "dimension; every dimension needs at least one element",
        ),
        (
            {"base": 0, "dtype": "f64", "shape": (3,), "strides": (1,), "name": "C"},
            "DSD 'C' (f64, shape (3,), strides (1,)): element type 'f64' is not one of f32, f16, "
            "i16, u16, i32, u32",
        ),
        (
            {"base": 2, "dtype": "f32", "shape": (3,), "strides": (1,)},
            "DSD at 0x2 (f32, shape (3,), strides (1,)): base address 0x2 is not a non-negative "
            "multiple of the 4-byte element size",
        ),
        (
            {"base": 0, "dtype": "f32", "shape": (1, 1, 1, 1, 1), "strides": (1, 1, 1, 1, 1)},
            "DSD at 0x0 (f32, shape (1, 1, 1, 1, 1), strides (1, 1, 1, 1, 1)): 5 dimensions; a "
            "DSD has 1 to 4",
        ),
        (
            {"base": 0, "dtype": "f32", "shape": (2, 2), "strides": (1,)},
            "DSD at 0x0 (f32, shape (2, 2), strides (1,)): shape (2, 2) has 2 dimensions but "
            "strides (1,) has 1; give one stride per dimension",
        ),
    ],
)
def test_bad_descriptors(kwargs: dict, message: str) -> None:
    with pytest.raises(BuildError) as err:
        MemDsd(**kwargs)
    assert str(err.value) == message


def test_descriptor_outside_sram() -> None:
    sram = Sram(CFG, OWNER)
    d = MemDsd.vector(49140, "f32", 4, name="C")
    with pytest.raises(BuildError) as err:
        d.read(sram)
    assert str(err.value) == (
        "PE wafer/pe[0,0]: DSD 'C' (f32, shape (4,), strides (1,)) with offset 0 touches "
        "addresses 0xbff4..0xc003, outside the SRAM (0x0..0xbfff); fix its base, shape, "
        "strides or offset"
    )
    with pytest.raises(BuildError) as err:
        MemDsd.vector(0, "f32", 4, name="C").with_offset(-1).write(sram, 0.0)
    assert str(err.value) == (
        "PE wafer/pe[0,0]: DSD 'C' (f32, shape (4,), strides (1,)) with offset -1 touches "
        "addresses -0x4..0xb, outside the SRAM (0x0..0xbfff); fix its base, shape, strides or "
        "offset"
    )


@st.composite
def mem_dsds(draw: st.DrawFn) -> MemDsd:
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    strides = tuple(draw(st.integers(-6, 9)) for _ in range(ndim))
    d = MemDsd(0, dtype, shape, strides)
    lo, _ = d.span()
    base = draw(st.integers(0, 64)) * 8 - min(lo, 0)  # lo is a multiple of the element size
    return MemDsd(base, dtype, shape, strides, draw(st.integers(0, 3)))


@settings(max_examples=150, deadline=None)
@given(d=mem_dsds(), seed=st.integers(0, 2**32 - 1), in_cache=st.booleans())
def test_gather_scatter_round_trip(d: MemDsd, seed: int, in_cache: bool) -> None:
    store = Cache(CFG, OWNER) if in_cache else Sram(CFG, OWNER)
    if d.span()[1] >= store.nbytes:
        return
    rng = np.random.default_rng(seed)
    store.data[:] = rng.integers(0, 256, store.nbytes, dtype=np.uint8)
    typed = store.data.view(DTYPES[d.dtype])
    ref = [d.base // d.itemsize + k for k in reference_indices(d)]
    bits = f"u{d.itemsize}"  # compare bit patterns: random bytes include NaNs
    assert d.read(store).view(bits).tolist() == typed[ref].view(bits).tolist()
    assert d.addresses().tolist() == [r * d.itemsize for r in ref]
    before = store.data.copy()
    # Scatter a fresh pattern, then read it back; duplicates (stride 0) keep the last value.
    values = np.arange(1, d.length + 1).astype(DTYPES[d.dtype])
    d.write(store, values)
    expect = {}
    for k, v in zip(ref, values, strict=True):
        expect[k] = v
    assert [typed[k] for k in expect] == list(expect.values())
    untouched = np.ones(store.nbytes, dtype=bool)
    for k in expect:
        untouched[k * d.itemsize : (k + 1) * d.itemsize] = False
    assert np.array_equal(store.data[untouched], before[untouched])
    # Writing back what was read restores the bytes.
    if len(set(ref)) == len(ref):
        d.write(store, before.view(DTYPES[d.dtype])[ref])
        assert np.array_equal(store.data, before)


def test_write_checks_the_value_count() -> None:
    sram = Sram(CFG, OWNER)
    with pytest.raises(BuildError) as err:
        MemDsd.vector(0, "f32", 4, name="C").write(sram, np.zeros(3))
    assert str(err.value) == (
        "PE wafer/pe[0,0]: writing 3 values into DSD 'C' (f32, shape (4,), strides (1,)), which "
        "has 4 elements"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: FabInDsd(24, 10, 0),
            "fabric input DSD (colour 24, queue 0, f32): colour 24 out of range; allowed 0 .. 23",
        ),
        (
            lambda: FabInDsd(3, 10, 8),
            "fabric input DSD (colour 3, queue 8, f32): queue 8 out of range; allowed 0 .. 7",
        ),
        (
            lambda: FabOutDsd(3, 10, 6),
            "fabric output DSD (colour 3, queue 6, f32): queue 6 out of range; allowed 0 .. 5",
        ),
        (
            lambda: FabOutDsd(3, 0, 1, "f16"),
            "fabric output DSD (colour 3, queue 1, f16): length 0; a fabric stream needs at "
            "least 1 element",
        ),
        (
            lambda: FabInDsd(3, 1, 1, "bf16"),
            "fabric input DSD (colour 3, queue 1, bf16): element type 'bf16' is not one of f32, "
            "f16, i16, u16, i32, u32",
        ),
        (
            lambda: FabInDsd(-1, 1, 1),
            "fabric input DSD (colour -1, queue 1, f32): colour -1 out of range; allowed 0 .. 23",
        ),
    ],
)
def test_fabric_descriptor_validation(make, message: str) -> None:
    with pytest.raises(BuildError) as err:
        make()
    assert str(err.value) == message


def test_fabric_descriptors_are_values() -> None:
    a = FabOutDsd(5, 32, 2, control=True)
    assert a == FabOutDsd(5, 32, 2, "f32", True) and a.length == 32
    FabInDsd(7, 4, 7).check(colours=24, input_queues=8)
    with pytest.raises(BuildError) as err:
        FabInDsd(7, 4, 0).check(colours=4, input_queues=8)
    assert str(err.value) == (
        "fabric input DSD (colour 7, queue 0, f32): colour out of range; allowed 0 .. 3"
    )


def test_fifo_push_pop_wraps_around() -> None:
    sram = Sram(CFG, OWNER)
    fifo = FifoDsd(sram.alloc("q", 16), 4, "f32", name="q")
    fifo.push(sram, np.array([1.0, 2.0, 3.0]))
    assert fifo.pop(sram, 2).tolist() == [1.0, 2.0]
    fifo.push(sram, [4.0, 5.0, 6.0])
    assert (fifo.count, fifo.free) == (4, 0)
    assert sram.view(0, "f32", 4).tolist() == [5.0, 6.0, 3.0, 4.0]  # real data, wrapped
    assert fifo.pop(sram, 4).tolist() == [3.0, 4.0, 5.0, 6.0]
    fifo.push(sram, 7.0)
    assert fifo.pop(sram, 1).tolist() == [7.0]


def test_fifo_overflow_and_underflow() -> None:
    sram = Sram(CFG, OWNER)
    fifo = FifoDsd(64, 4, "f16", name="q")
    fifo.push(sram, np.ones(3))
    with pytest.raises(BuildError) as err:
        fifo.push(sram, np.ones(2))
    assert str(err.value) == (
        "PE wafer/pe[0,0]: FIFO 'q' (f16, capacity 4) overflow: pushing 2 elements but it holds "
        "3 and has room for 1; pop first or enlarge it"
    )
    with pytest.raises(BuildError) as err:
        fifo.pop(sram, 5)
    assert str(err.value) == (
        "PE wafer/pe[0,0]: FIFO 'q' (f16, capacity 4) underflow: popping 5 elements but it "
        "holds 3; wait for more pushes"
    )
    with pytest.raises(BuildError) as err:
        FifoDsd(0, 0, "f32")
    assert str(err.value) == "FIFO at 0x0 (f32, capacity 0): capacity 0; needs at least 1 element"
