"""Tensor instructions: function against numpy, timing per case, and the FP32 FMAC calibration."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pe import isa
from pe.config import PeConfig
from pe.dsd import DTYPES, MemDsd
from pe.memory import Cache, Sram
from simcore.errors import BuildError

CFG = PeConfig()
UNIT = isa.TensorUnit(CFG)
OWNER = "wafer/pe[1,2]"
F32, F16 = np.float32, np.float16


def reference(op: str, dst_dtype: str, *v: np.ndarray) -> np.ndarray:
    """The instruction semantics written out independently of ``pe.isa``."""
    with np.errstate(all="ignore"):
        if op in ("fmacs", "fmach"):
            return v[0] + np.multiply(v[1], v[2], dtype=v[0].dtype)
        if op == "fmachs":
            return v[0] + v[1].astype(F32) * v[2].astype(F32)
        binary = {
            "fadds": np.add, "faddh": np.add, "fsubs": np.subtract, "fmuls": np.multiply,
            "fmulh": np.multiply, "fmaxs": np.maximum,
        }  # fmt: skip
        if op in binary:
            return binary[op](v[0], v[1])
        if op in ("add16", "add32"):
            wide = v[0].astype(np.int64) + v[1].astype(np.int64)
            return (wide % 2 ** (8 * v[0].itemsize)).astype(v[0].dtype.str.replace("i", "u"))
        if op == "fnegs":
            return -v[0]
        return v[0].view(DTYPES[dst_dtype]) if v[0].ndim else v[0].astype(DTYPES[dst_dtype])


def random_values(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    if dtype.startswith("f"):
        return (rng.standard_normal(n) * 4).astype(DTYPES[dtype])
    info = np.iinfo(DTYPES[dtype])
    return rng.integers(info.min, info.max, n, endpoint=True, dtype=DTYPES[dtype])


# --------------------------------------------------------------------------- function


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(sorted(isa.OPS)),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
    layout=st.lists(st.sampled_from(["F", "C", "padded", "reversed", "cache"]), min_size=4,
                    max_size=4),
    scalars=st.lists(st.booleans(), min_size=3, max_size=3),
    alias=st.booleans(),
    dtype_pick=st.integers(0, 2),
    seed=st.integers(0, 2**32 - 1),
)  # fmt: skip
def test_execute_matches_numpy(
    op: str,
    shape: tuple[int, ...],
    layout: list[str],
    scalars: list[bool],
    alias: bool,
    dtype_pick: int,
    seed: int,
) -> None:
    spec = isa.OPS[op]
    rng = np.random.default_rng(seed)
    sram, cache = Sram(CFG, OWNER), Cache(CFG, OWNER)
    dst_dtype = spec.dst_dtypes[dtype_pick % len(spec.dst_dtypes)]
    n = int(np.prod(shape))

    def tensor(name: str, dtype: str, how: str) -> tuple[MemDsd, np.ndarray]:
        store = cache if how == "cache" and n * 4 <= cache.free_bytes else sram
        how = "F" if store is sram and how == "cache" else how
        pad = 2 if how == "padded" else 0
        full = (shape[0] + pad, *shape[1:])
        d = store.alloc_array(name, dtype, full, order="C" if how == "C" else "F")
        if how == "padded":
            d = dataclasses.replace(d, shape=shape, offset=1)
        if how == "reversed":
            d = dataclasses.replace(d, strides=(-d.strides[0], *d.strides[1:]),
                                    offset=shape[0] - 1)  # fmt: skip
        vals = random_values(rng, dtype, d.length)
        d.write(store, vals)
        return d, vals

    dst, _ = tensor("dst", dst_dtype, layout[0])
    srcs: list[MemDsd | float | np.ndarray] = []
    refs: list[np.ndarray] = []
    for i, allowed in enumerate(spec.src_dtypes):
        dtype = dst_dtype if spec.same_dtype or spec.raw_move else allowed[0]
        if i == 0 and alias and spec.n_srcs > 1 and dtype == dst_dtype:
            srcs.append(dst)
            refs.append(dst.read(cache if dst.space == "cache" else sram))
        elif scalars[i] and i in spec.scalar_srcs:
            value = random_values(rng, dtype, 1)[0]
            srcs.append(value.item())
            refs.append(np.asarray(value))
        else:
            d, vals = tensor(f"src{i}", dtype, layout[i + 1])
            srcs.append(d)
            refs.append(vals)
    before = (sram.data.copy(), cache.data.copy())
    cycles = UNIT.execute(op, sram, dst, tuple(srcs), cache=cache)
    dst_store = cache if dst.space == "cache" else sram
    expect = np.broadcast_to(reference(op, dst_dtype, *refs), (n,)).astype(DTYPES[dst_dtype])
    got = dst.read(dst_store)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), expect.view(f"u{got.itemsize}"))
    # Nothing but the destination changed.
    mask = np.ones(dst_store.nbytes, dtype=bool)
    for a in dst.addresses():
        mask[a : a + dst.itemsize] = False
    old = before[0] if dst_store is sram else before[1]
    assert np.array_equal(dst_store.data[mask], old[mask])
    assert cycles >= CFG.dsd_setup_cycles + CFG.pipeline_stages + -(-n // 4)


def test_fp16_ops_round_in_fp16_and_fmachs_accumulates_in_fp32() -> None:
    acc16 = np.array([2048.0], F16)
    # 2048 + 1 is not representable in FP16 (spacing 2 there), so fmach drops it ...
    assert isa.apply("fmach", acc16, np.array([1.0], F16), 1.0).tolist() == [2048.0]
    # ... while fmachs keeps it in its FP32 accumulator.
    assert isa.apply("fmachs", np.array([2048.0], F32), np.array([1.0], F16), 1.0).tolist() == [
        2049.0
    ]
    out = isa.apply("fmacs", np.array([1.0], F32), np.array([3.0], F32), 0.1)
    assert out.dtype == F32 and out[0] == F32(1.0) + F32(F32(3.0) * F32(0.1))
    assert isa.apply("faddh", np.array([60000.0], F16), 60000.0)[0] == np.inf
    assert isa.apply("add16", np.array([32767], np.int16), 1).tolist() == [-32768]
    assert isa.apply("add32", np.array([2**32 - 1], np.uint32), 2).tolist() == [1]


def test_raw_moves_copy_bits() -> None:
    sram = Sram(CFG, OWNER)
    src = sram.alloc_array("f", "f32", 2)
    dst = sram.alloc_array("i", "i32", 2)
    src.write(sram, [1.0, -2.0])
    UNIT.execute("mov32", sram, dst, (src,))
    assert dst.read(sram).tolist() == np.array([1.0, -2.0], F32).view(np.int32).tolist()
    UNIT.execute("mov32", sram, dst, (7,))
    assert dst.read(sram).tolist() == [7, 7]


@pytest.mark.parametrize(
    ("op", "srcs", "message"),
    [
        (
            "fmacs",
            ("C", "H", 1.0),
            "fmacs: src1 DSD 'H' (f16, shape (4,), strides (1,)) has element type f16, the op "
            "needs f32",
        ),
        (
            "fmacs",
            ("C", "S", 1.0),
            "fmacs: src1 DSD 'S' (f32, shape (3,), strides (1,)) has 3 elements but dst DSD 'C' "
            "(f32, shape (4,), strides (1,)) has 4; give both the same length",
        ),
        ("fmacs", (1.0, "C", 1.0), "fmacs: src0 must be a tensor, got the scalar 1.0"),
        ("fmacs", ("C", "C"), "fmacs: takes 3 source operands, got 2"),
        ("fnop", ("C",), "unknown tensor instruction 'fnop'; known: " + ", ".join(isa.OPS)),
        (
            "add16",
            ("I", "U"),
            "add16: dst DSD 'C' (f32, shape (4,), strides (1,)) has element type f32, the op "
            "needs i16 or u16",
        ),
    ],
)
def test_operand_errors(op: str, srcs: tuple, message: str) -> None:
    sram = Sram(CFG, OWNER)
    bufs = {
        "C": sram.alloc_array("C", "f32", 4),
        "H": sram.alloc_array("H", "f16", 4),
        "S": sram.alloc_array("S", "f32", 3),
        "I": sram.alloc_array("I", "i16", 4),
        "U": sram.alloc_array("U", "u16", 4),
    }
    with pytest.raises(isa.OperandError) as err:
        UNIT.execute(op, sram, bufs["C"], tuple(bufs.get(s, s) for s in srcs))
    assert str(err.value) == message
    assert isinstance(err.value, BuildError)


def test_a_raw_move_scalar_must_fit_the_destination() -> None:
    sram = Sram(CFG, OWNER)
    u = sram.alloc_array("U", "u16", 2)
    for value in (-1, 2.5, 65536, float("nan")):
        with pytest.raises(isa.OperandError) as err:
            UNIT.execute("mov16", sram, u, (value,))
        assert str(err.value) == (
            f"mov16: the scalar {value!r} does not fit dst's type u16; give an integer in "
            "0 .. 65535"
        )
    UNIT.execute("mov16", sram, u, (65535.0,))
    assert u.read(sram).tolist() == [65535, 65535]
    h = sram.alloc_array("H", "f16", 2)
    UNIT.execute("mov16", sram, h, (1e6,))  # converted as IEEE does: too large is infinite
    assert h.read(sram).tolist() == [np.inf, np.inf]


def test_integer_adds_need_one_type() -> None:
    sram = Sram(CFG, OWNER)
    i, u = sram.alloc_array("I", "i16", 4), sram.alloc_array("U", "u16", 4)
    with pytest.raises(isa.OperandError) as err:
        UNIT.execute("add16", sram, i, (i, u))
    assert str(err.value) == "add16: operands have element types i16, u16; they must match"


# --------------------------------------------------------------------------- timing


def vec(addr: int, dtype: str = "f32", n: int = 8, stride: int = 1, space: str = "sram") -> MemDsd:
    return MemDsd.vector(addr, dtype, n, stride, space=space)


C0, A_CONFLICT, A_FREE, A_SAME_GROUP = vec(0), vec(0x100), vec(0x104), vec(0x108)
# Start banks: 0x000 -> 0, 0x100 -> 0, 0x104 -> 2, 0x108 -> 4 (group 0 again: 4 mod 4 == 0).

COST_CASES = [
    # (case, op, dst, srcs, config overrides, cycles = 10 + beats)
    ("fadds conflict", "fadds", C0, (C0, A_CONFLICT), {}, 10 + 4 * 2),
    ("fadds free", "fadds", C0, (C0, A_FREE), {}, 10 + 4),
    ("fadds other bank same group", "fadds", C0, (C0, A_SAME_GROUP), {}, 10 + 4 * 2),
    ("fadds scalar", "fadds", C0, (C0, None), {}, 10 + 4),
    ("fadds penalty 3", "fadds", C0, (C0, A_CONFLICT), {"bank_conflict_penalty_cycles": 3},
     10 + 4 * 4),
    ("faddh width 4", "faddh", vec(0, "f16"), (vec(0, "f16"), vec(0x102, "f16")), {}, 10 + 2),
    # Stride 2 drops to width 1; start groups i%4 vs (1+2i)%4 collide at i = 3 and 7.
    ("faddh strided", "faddh", vec(0, "f16"), (vec(0, "f16"), vec(0x102, "f16", stride=2)), {},
     10 + 8 + 2),
    ("fmacs conflict hidden", "fmacs", C0, (C0, A_CONFLICT, None), {}, 10 + 8 * 2),
    ("fmacs free", "fmacs", C0, (C0, A_FREE, None), {}, 10 + 8 * 2),
    ("fmacs II 1 conflict", "fmacs", C0, (C0, A_CONFLICT, None),
     {"fp32_fmac_cycles_per_element": 1}, 10 + 8 * 2),
    ("fmacs II 1 free", "fmacs", C0, (C0, A_FREE, None), {"fp32_fmac_cycles_per_element": 1},
     10 + 8),
    # Three reads need two read cycles; the first pair conflicting adds one more.
    ("fmacs 3 reads", "fmacs", C0, (C0, A_FREE, vec(0x200)), {}, 10 + 8 * 2),
    ("fmacs 3 reads conflict", "fmacs", C0, (C0, A_CONFLICT, vec(0x200)), {}, 10 + 8 * 3),
    ("fmovs from cache", "fmovs", C0, (vec(0, space="cache"),), {}, 10 + 4),
    ("fadds cache acc", "fadds", vec(0, space="cache"), (vec(0, space="cache"), A_CONFLICT), {},
     10 + 4),
    ("fmachs", "fmachs", C0, (C0, vec(0x102, "f16"), None), {}, 10 + 4),
    # FP16 src1 advances 4 B per beat, FP32 src0 8 B: start groups (0,0), (0,2), (0,0), (0,2).
    ("fmachs conflict", "fmachs", C0, (C0, vec(0x100, "f16"), None), {}, 10 + 4 + 2),
    ("fadds length 7", "fadds", vec(0, n=7), (vec(0, n=7), vec(0x104, n=7)), {}, 10 + 4),
    ("fadds setup 15", "fadds", C0, (C0, A_FREE), {"dsd_setup_cycles": 15}, 21 + 4),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "dst", "srcs", "overrides", "cycles"),
    [c[1:] for c in COST_CASES],
    ids=[c[0] for c in COST_CASES],
)
def test_cost_per_case(op: str, dst: MemDsd, srcs: tuple, overrides: dict, cycles: int) -> None:
    cfg = dataclasses.replace(CFG, **overrides)
    assert isa.cost_cycles(op, dst.length, cfg, dst=dst, srcs=srcs) == cycles


def test_beat_table_for_a_strided_read() -> None:
    beats = isa.beat_cycles(
        "faddh", 8, CFG, dst=vec(0, "f16"), srcs=(vec(0, "f16"), vec(0x102, "f16", stride=2))
    )
    assert beats.tolist() == [1, 1, 1, 2, 1, 1, 1, 2]


def test_cost_rejects_mismatched_lengths() -> None:
    with pytest.raises(isa.OperandError) as err:
        isa.cost_cycles("fadds", 8, CFG, dst=vec(0), srcs=(vec(0, n=4), None))
    assert str(err.value) == (
        "fadds: src0 DSD at 0x0 (f32, shape (4,), strides (1,)) has 4 elements, the instruction 8"
    )


# --------------------------------------------------------------------------- calibration


def fmac_costs(placement_bytes: int) -> np.ndarray:
    """cost_cycles of fmacs C = C + A * s over I = 1..2048, C and A separate buffers."""
    sram = Sram(CFG, OWNER)
    c = sram.alloc_array("C", "f32", 2048)
    sram.alloc("gap", placement_bytes)
    a = sram.alloc_array("A", "f32", 2048)
    return np.array(
        [
            isa.cost_cycles(
                "fmacs",
                n,
                CFG,
                dst=c.with_length(n),
                srcs=(c.with_length(n), a.with_length(n), None),
            )
            for n in range(1, 2049)
        ]
    )


@pytest.mark.parametrize("placement_bytes", [4, 8], ids=["banks-free", "banks-conflicting"])
def test_fmac_calibration(placement_bytes: int) -> None:
    sizes = np.arange(1, 2049)
    costs = fmac_costs(placement_bytes)
    assert np.abs(costs - (2 * sizes + 10)).max() <= 2
    # Peak = one element per fp32_fmac_cycles_per_element cycles.
    efficiency = sizes / costs * CFG.fp32_fmac_cycles_per_element
    assert efficiency[127:].min() >= 0.95  # >= 128 elements: within ~5 % of peak
    assert 0.85 <= efficiency[43] <= 0.92  # 44 elements: ~10 % below peak


def test_fmac_constant_comes_from_setup_and_pipeline_fill() -> None:
    d = vec(0, n=1)
    base = isa.cost_cycles("fmacs", 1, CFG, dst=d, srcs=(d, vec(0x104, n=1), None))
    assert base == CFG.dsd_setup_cycles + CFG.pipeline_stages + CFG.fp32_fmac_cycles_per_element
    slower = dataclasses.replace(CFG, pipeline_stages=8, dsd_setup_cycles=5)
    assert isa.cost_cycles("fmacs", 1, slower, dst=d, srcs=(d, vec(0x104, n=1), None)) == 15


# --------------------------------------------------------------------------- element order


def _sequential_reference(op: str, view: np.ndarray, d: np.ndarray, srcs: list) -> None:
    """Element i reads its sources after element i-1 was written (the streaming datapath)."""
    for i in range(len(d)):
        v = [s if np.isscalar(s) else view[s[i]] for s in srcs]
        v = [np.float32(x) for x in v]
        with np.errstate(all="ignore"):
            if op == "fmacs":
                view[d[i]] = v[0] + np.float32(v[1] * v[2])
            else:
                view[d[i]] = v[0] + v[1]


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 10_000), start=st.floats(-4, 4, width=32))
def test_stride_zero_accumulator_computes_a_dot_product_in_order(n, seed, start) -> None:
    sram = Sram(PeConfig(), owner=OWNER)
    rng = np.random.default_rng(seed)
    a = sram.alloc_array("a", "f32", n)
    b = sram.alloc_array("b", "f32", n)
    word = sram.alloc_array("acc", "f32", 1)
    a.write(sram, rng.standard_normal(n).astype(F32))
    b.write(sram, rng.standard_normal(n).astype(F32))
    word.write(sram, F32(start))
    acc = MemDsd(word.base, "f32", (n,), (0,), name="acc")
    cost = isa.TensorUnit(PeConfig()).execute("fmacs", sram, acc, (acc, a, b))
    want = F32(start)
    for x, y in zip(a.read(sram), b.read(sram), strict=True):
        want = F32(want + F32(x * y))
    assert word.read(sram)[0] == want  # bit for bit: rounded at every step, in order
    assert cost == isa.cost_cycles("fmacs", n, PeConfig(), dst=acc, srcs=(acc, a, b))
    np.testing.assert_allclose(want, start + a.read(sram) @ b.read(sram), rtol=1e-4, atol=1e-4)


@settings(max_examples=80, deadline=None)
@given(
    op=st.sampled_from(["fmacs", "fadds"]),
    n=st.integers(2, 24),
    shift=st.integers(-5, 5),
    scalar=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_dst_overlapping_a_source_at_a_shift_runs_element_by_element(
    op: str, n: int, shift: int, scalar: bool, seed: int
) -> None:
    """E.g. fadds(x[1:], x[:-1], 1) turns x into a running count, on the fast and general paths."""
    rng = np.random.default_rng(seed)
    init = rng.standard_normal(n + 10).astype(F32)
    other = rng.standard_normal(n).astype(F32)
    results = []
    for fast in (True, False):
        sram = Sram(PeConfig(), owner=OWNER)
        buf = sram.alloc_array("buf", "f32", n + 10)
        o = sram.alloc_array("o", "f32", n)
        buf.write(sram, init)
        o.write(sram, other)
        dst = buf.with_offset(5).with_length(n)
        src = buf.with_offset(5 + shift).with_length(n)
        srcs = (src, o, 0.5 if scalar else o) if op == "fmacs" else (src, 0.5 if scalar else o)
        unit = isa.TensorUnit(PeConfig(), fast_path=fast)
        unit.execute(op, sram, dst, srcs)
        # An overlap at a shift leaves the fast path; the same operand (shift 0) keeps it.
        assert unit.fast_instructions == (fast and (shift == 0 or abs(shift) >= n))
        results.append(buf.read(sram))
    view = init.copy()
    d = np.arange(5, 5 + n)
    tail = [np.arange(n + 10, 2 * n + 10) if not np.isscalar(s) else s for s in srcs[1:]]
    ref = np.concatenate((view, other))
    _sequential_reference(op, ref, d, [d + shift, *tail])
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], ref[: n + 10])
