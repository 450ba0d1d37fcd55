"""The function/timing contract (tests/contracts/function_timing.py), checked on every subject.

Each property runs on cases Hypothesis draws from the subject; a bounded number of examples keeps
the default tier fast. The harness's own checks are tested too: a made-up unit broken in each
way in turn must fail the check that guards against it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.contracts.function_timing import (
    Run,
    assert_same_bits,
    check_cost_ignores_data,
    check_fast_path_is_general_path,
    check_function_is_execution,
    same_memory,
)
from tests.contracts.pe_tensor import PeTensorSubject
from tests.contracts.pim_unit import PimUnitSubject
from tests.contracts.tpu_mxu import MxuSubject

#: The units under the contract.
SUBJECTS = [PeTensorSubject(), PimUnitSubject(), MxuSubject()]

EXAMPLES = settings(max_examples=150, deadline=None)
SEEDS = st.integers(0, 2**32 - 1)


@pytest.mark.parametrize("subject", SUBJECTS, ids=lambda s: s.name)
@EXAMPLES
@given(data=st.data())
def test_function_is_execution(subject, data) -> None:
    case = data.draw(subject.cases(), label="case")
    seed, specials = data.draw(SEEDS, label="seed"), data.draw(st.booleans(), label="specials")
    check_function_is_execution(subject, case, seed, specials)


@pytest.mark.parametrize("subject", SUBJECTS, ids=lambda s: s.name)
@EXAMPLES
@given(data=st.data())
def test_cost_ignores_data(subject, data) -> None:
    check_cost_ignores_data(subject, data.draw(subject.cases(), label="case"), data.draw(SEEDS))


@pytest.mark.parametrize("subject", SUBJECTS, ids=lambda s: s.name)
@EXAMPLES
@given(data=st.data())
def test_fast_path_is_general_path(subject, data) -> None:
    case = data.draw(subject.cases(), label="case")
    seed, specials = data.draw(SEEDS, label="seed"), data.draw(st.booleans(), label="specials")
    check_fast_path_is_general_path(subject, case, seed, specials)


# --------------------------------------------------------------------------- the harness itself


@dataclasses.dataclass(frozen=True)
class Tripler:
    """A made-up unit: y = 3x in FP32 over n elements, n + 2 cycles, a fast path for n <= 8.

    ``broken`` names the one flaw it has: 'function' (execution computes 3.0000002 x), 'cost'
    (a NaN costs a cycle), 'fast' (the fast path divides by 1/3, which FP32 rounds), 'untaken'
    (the fast path never runs).
    """

    broken: str = ""
    name: str = "tripler"

    def cases(self) -> st.SearchStrategy[int]:
        return st.integers(1, 16)

    def values(self, case: int, rng: np.random.Generator, *, specials: bool) -> np.ndarray:
        x = rng.standard_normal(case).astype(np.float32)
        if specials:
            x[::2] = np.nan
        return x

    def function(self, case: int, values: np.ndarray) -> np.ndarray:
        return values * np.float32(3)

    def cost(self, case: int) -> int:
        return case + 2

    def execute(self, case: int, values: np.ndarray, *, fast_path: bool) -> Run:
        fast = fast_path and self.fast_path_applies(case) and self.broken != "untaken"
        factor = np.float32(3.0000002 if self.broken == "function" else 3)
        y = values / np.float32(1 / 3) if fast and self.broken == "fast" else values * factor
        cycles = case + 2 + (int(np.isnan(values).sum()) if self.broken == "cost" else 0)
        return Run(y, cycles, y.tobytes(), fast)

    def fast_path_applies(self, case: int) -> bool:
        return case <= 8


CHECKS = {
    "function": lambda s: check_function_is_execution(s, 5, seed=1, specials=False),
    "cost": lambda s: check_cost_ignores_data(s, 5, seed=1),
    "fast": lambda s: check_fast_path_is_general_path(s, 5, seed=1, specials=False),
    "untaken": lambda s: check_fast_path_is_general_path(s, 5, seed=1, specials=False),
}


@pytest.mark.parametrize("broken", CHECKS)
def test_each_check_catches_its_flaw(broken: str) -> None:
    for check in CHECKS.values():
        check(Tripler())  # a sound unit passes every check
    with pytest.raises(AssertionError, match="tripler"):
        CHECKS[broken](Tripler(broken))


def test_nan_payloads_are_not_compared_but_every_other_bit_is():
    quiet, default = np.array([0x7FE00001], np.uint32), np.array([0xFFC00000], np.uint32)
    assert_same_bits(quiet.view(np.float32), default.view(np.float32), "nan")
    assert same_memory(quiet.tobytes(), default.tobytes())
    plus, minus = np.array([0.0], np.float32), np.array([-0.0], np.float32)
    with pytest.raises(AssertionError, match="1 of 1 elements differ"):
        assert_same_bits(plus, minus, "zeros")
    assert not same_memory(plus.tobytes(), minus.tobytes())


# One element of an async operation (pe.isa.elementwise): the scalar form of the FP32
# arithmetic ops against apply on one-element arrays, bit for bit, NaNs included.
_EDGE = [0.0, -0.0, 1.0, -1.5, 1e-45, -1e-40, 1.17549435e-38, 3.4028234663852886e38,
         -3.4028234663852886e38, 3.4028235e38, 3.5e38, 1e300, float("inf"), float("-inf"),
         float("nan"), 0.1, 1 / 3, 16777217.0, 2.0**-149, 2.0**-150]  # fmt: skip
_SCALARS = st.one_of(
    st.sampled_from(_EDGE),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(width=32).map(np.float32),
    st.integers(-(2**60), 2**60),
)


@pytest.mark.parametrize("op", ["fadds", "fsubs", "fmuls", "fmacs", "fmaxs"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_one_element_fast_is_general(op: str, data) -> None:
    from pe import isa

    n = isa.OPS[op].n_srcs
    args = [data.draw(_SCALARS) for _ in range(n)]
    with np.errstate(all="ignore"):
        fast = isa.elementwise(op)(*args)
        slow = isa.elementwise(op, fast_path=False)(*args)
    assert type(fast) is type(slow) is np.float32
    assert np.asarray(fast).view(np.uint32) == np.asarray(slow).view(np.uint32), (args, fast, slow)


# One element of a synchronous instruction on the fast path (TensorUnit._execute_dense_f32
# computes it in scalar form): the same bits and cycles as the general path, on FP32 values
# drawn from the edge values above, with an alias (dst as a source) and a scalar operand.
_F32_EDGE = st.one_of(
    st.sampled_from([v for v in _EDGE if v != v or abs(v) <= 3.4028234663852886e38 or
                     abs(v) == float("inf")]).map(np.float32),
    st.floats(width=32).map(np.float32),
)  # fmt: skip
_SCALAR_FLOATS = st.one_of(st.sampled_from(_EDGE), st.floats(allow_nan=True))


def _dst_and_srcs(spec: Any, cells: list[Any], alias: bool, scalar: object) -> tuple[Any, tuple]:
    """An instruction's destination (the first cell) and sources: the destination again as the
    first source when ``alias`` (acc += ...), ``scalar`` in the last scalar slot when given."""
    dst = cells[0]
    srcs: list[object] = [dst if alias else cells[1], *cells[2 : spec.n_srcs + 1]]
    if scalar is not None:
        srcs[spec.scalar_srcs[-1]] = scalar
    return dst, tuple(srcs)


@pytest.mark.parametrize("op", ["fadds", "fsubs", "fmuls", "fmacs"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_one_element_instruction_fast_is_general(op: str, data) -> None:
    from pe import isa
    from pe.config import PeConfig
    from pe.dsd import MemDsd
    from pe.memory import Sram

    spec = isa.OPS[op]
    runs = []
    values = [data.draw(_F32_EDGE) for _ in range(spec.n_srcs + 1)]
    alias = data.draw(st.booleans())  # the destination is the first source too (acc += ...)
    scalar = data.draw(_SCALAR_FLOATS) if spec.scalar_srcs and data.draw(st.booleans()) else None
    for fast_path in (True, False):
        cfg = PeConfig()
        unit = isa.TensorUnit(cfg, fast_path=fast_path)
        sram = Sram(cfg, owner="contract")
        cells = []
        for i, v in enumerate(values):
            buf = sram.alloc_array(f"v{i}", "f32", 1)
            d = MemDsd.vector(buf.base, "f32", 1)
            d.write(sram, np.array([v], np.float32))
            cells.append(d)
        dst, srcs = _dst_and_srcs(spec, cells, alias, scalar)
        with np.errstate(all="ignore"):
            cycles = unit.execute(op, sram, dst, srcs)
        runs.append((dst.read(sram).copy(), sram.data.tobytes(), cycles))
        assert unit.fast_instructions == (1 if fast_path else 0)
    (fast_bits, fast_mem, fast_cycles), (slow_bits, slow_mem, slow_cycles) = runs
    assert_same_bits(fast_bits, slow_bits, f"{op} {values} alias={alias} scalar={scalar}")
    assert same_memory(fast_mem, slow_mem) and fast_cycles == slow_cycles


# One element of an async operation with a fabric input and an FP32 memory source, fused with
# the arithmetic (pe.isa.stream_element): the same bits as the general path's element.
@pytest.mark.parametrize("op", ["fadds", "fsubs", "fmuls"])
@pytest.mark.parametrize("fabric_first", [True, False])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_stream_element_is_general(op: str, fabric_first: bool, data) -> None:
    from pe import isa

    mem = np.array([data.draw(_F32_EDGE) for _ in range(3)], np.float32)
    k = data.draw(st.integers(0, 2))
    v = data.draw(_SCALARS)
    elem = isa.stream_element(op, mem, fabric_first)
    assert elem is not None
    with np.errstate(all="ignore"):
        fused = elem(v, k)
        args = (v, mem[k]) if fabric_first else (mem[k], v)
        slow = isa.elementwise(op, fast_path=False)(*args)
    assert type(fused) is type(slow) is np.float32
    assert_same_bits(np.array([fused]), np.array([slow]), f"{op} {args}")
    # An operation sending to the fabric takes the element as the float its wavelet carries.
    as_float = isa.stream_element(op, mem, fabric_first, as_float=True)
    assert as_float is not None
    with np.errstate(all="ignore"):
        got = as_float(v, k)
    assert type(got) is float
    assert_same_bits(np.array([got]), np.array([float(slow)]), f"{op} {args} as_float")


def test_stream_element_leaves_other_ops_and_sources_to_elementwise() -> None:
    from pe import isa

    f32 = np.zeros(3, np.float32)
    assert isa.stream_element("fmacs", f32, True) is None
    assert isa.stream_element("fmaxs", f32, True) is None
    assert isa.stream_element("fadds", np.zeros(3, np.float16), True) is None


# Operands in the software cache (wgrad's dot products: a one-word stride-0 accumulator in the
# cache, ``fmacs(p, p, x0[j], g)``; its partials zeroed by ``fmovs``) take the fast path too.
@pytest.mark.parametrize("op", ["fadds", "fsubs", "fmuls", "fmacs", "fmovs"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_cache_operands_fast_is_general(op: str, data) -> None:
    from pe import isa
    from pe.config import PeConfig
    from pe.dsd import MemDsd
    from pe.memory import Cache, Sram

    spec = isa.OPS[op]
    n = data.draw(st.sampled_from([1, 1, 3, 8]))
    places = [data.draw(st.sampled_from(["cache", "sram"])) for _ in range(spec.n_srcs + 1)]
    values = [[data.draw(_F32_EDGE) for _ in range(n)] for _ in places]
    alias = data.draw(st.booleans()) and spec.n_srcs > 0 and op != "fmovs"
    stride0 = n == 1 and data.draw(st.booleans())  # dst as a one-word stride-0 accumulator
    scalar = data.draw(_SCALAR_FLOATS) if spec.scalar_srcs and data.draw(st.booleans()) else None
    runs = []
    for fast_path in (True, False):
        cfg = PeConfig()
        unit = isa.TensorUnit(cfg, fast_path=fast_path)
        stores = {"sram": Sram(cfg, owner="contract"), "cache": Cache(cfg, owner="contract")}
        cells = []
        for i, (place, v) in enumerate(zip(places, values, strict=True)):
            store = stores[place]
            buf = store.alloc_array(f"v{i}", "f32", n)
            buf.write(store, np.array(v, np.float32))
            if i == 0 and stride0:
                buf = MemDsd(buf.base, "f32", (1,), (0,), name="acc", space=place)
            cells.append(buf)
        dst, srcs = _dst_and_srcs(spec, cells, alias, scalar)
        with np.errstate(all="ignore"):
            cycles = unit.execute(op, stores["sram"], dst, srcs, cache=stores["cache"])
        got = dst.read(stores[places[0]]).copy()
        runs.append((got, [s.data.tobytes() for s in stores.values()], cycles))
        assert unit.fast_instructions == (1 if fast_path else 0), (places, stride0)
    (fast_bits, fast_mem, fast_cycles), (slow_bits, slow_mem, slow_cycles) = runs
    where = f"{op} n={n} {places} alias={alias} stride0={stride0} scalar={scalar}"
    assert_same_bits(fast_bits, slow_bits, where)
    assert all(same_memory(a, b) for a, b in zip(fast_mem, slow_mem, strict=True)), where
    assert fast_cycles == slow_cycles, where
