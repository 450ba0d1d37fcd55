"""The contract of a unit whose function and timing are separate, as a reusable harness.

Such a unit (the PE's tensor instructions first; the TPU's MXU and the PIM unit follow the same
pattern) has three pieces: a *function* that computes the numerical result with numpy from
operand values, a *timing* that gives the cycles from mechanisms and the operands' description,
and an *execution* that does both on the simulated memories, through a fast path where one
exists. The contract binds them with three properties, each a check below:

(a) :func:`check_function_is_execution`: the result an execution leaves is, bit for bit, what
    the function alone computes from the same operand values;
(b) :func:`check_cost_ignores_data`: the cycles of an execution are what the timing gives from
    the case alone, whatever the data (random values, then NaNs, infinities, signed zeros,
    subnormals and extremes);
(c) :func:`check_fast_path_is_general_path`: with the fast path switched off, the result, every
    byte the unit may write and the cycles are identical; and the fast path runs exactly the
    cases the unit says it takes, so the comparison is never vacuous.

A unit joins by describing itself as a :class:`Subject` (for example tests/contracts/pe_tensor.py)
and being added to ``SUBJECTS`` in tests/test_contract_function_timing.py, which runs the three
checks on cases drawn by Hypothesis.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import numpy as np
from hypothesis import strategies as st


@dataclasses.dataclass(frozen=True)
class Run:
    """What one timed execution produced.

    ``result`` is the operation's result as the unit left it (e.g. the destination's elements
    read back, in order); ``memory`` every byte the unit may write, after the run; ``fast``
    whether the fast path ran it.
    """

    result: np.ndarray
    cycles: int
    memory: bytes
    fast: bool


class Subject(Protocol):
    """A unit under the contract.

    A *case* is everything about one operation except its data: the operation, shapes, types,
    layouts, placement in memory, configuration. Cases are drawn by Hypothesis; data comes from a
    seeded generator, so that one case can run with several data sets.
    """

    name: str

    def cases(self) -> st.SearchStrategy[Any]:
        """Cases to check (every operation, type, layout and operand kind the unit allows)."""
        ...

    def values(self, case: Any, rng: np.random.Generator, *, specials: bool) -> Any:
        """Operand data for ``case``; ``specials`` mixes in IEEE specials and extreme values."""
        ...

    def function(self, case: Any, values: Any) -> np.ndarray:
        """The result computed by the function alone: no memories, no timing."""
        ...

    def cost(self, case: Any) -> int:
        """The cycles given by the timing alone, from the case (no data)."""
        ...

    def execute(self, case: Any, values: Any, *, fast_path: bool) -> Run:
        """Run the timed execution on fresh memories holding ``values``."""
        ...

    def fast_path_applies(self, case: Any) -> bool:
        """Whether the unit's fast path takes ``case`` when it is switched on."""
        ...


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """``got`` and ``want`` hold the same bits (signed zeros and infinities included), except
    that any NaN matches any NaN: which payload and sign a NaN result carries when two NaNs meet
    (or an invalid operation meets a NaN) is up to numpy's loops and the host's SIMD units, which
    pick operands in different orders for in-place and out-of-place calls. The models do not
    specify NaN payloads (docs/wafer/pe-isa.md, "IEEE specials"); every other bit is specified."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.itemsize == want.itemsize, (
        f"{what}: {got.itemsize}-byte elements, expected {want.itemsize}-byte"
    )
    bits = f"u{got.itemsize}"
    g, w = got.view(bits).reshape(-1), want.view(bits).reshape(-1)
    differ = g != w
    if got.dtype.kind == "f" and want.dtype.kind == "f":
        differ &= ~(np.isnan(got.reshape(-1)) & np.isnan(want.reshape(-1)))
    diff = np.flatnonzero(differ)
    assert not diff.size, (
        f"{what}: {diff.size} of {g.size} elements differ; first at {diff[0]}: "
        f"{got.reshape(-1)[diff[0]]!r} (bits {g[diff[0]]:#x}), expected "
        f"{want.reshape(-1)[diff[0]]!r} (bits {w[diff[0]]:#x})"
    )


def same_memory(a: bytes, b: bytes) -> bool:
    """The same bytes, or bytes that differ only in NaNs (float32 or float16 words that are NaN
    on both sides; see :func:`assert_same_bits`)."""
    if a == b:
        return True
    if len(a) != len(b):
        return False
    for dtype in (np.float32, np.float16):
        size = np.dtype(dtype).itemsize
        if len(a) % size:
            continue
        x, y = np.frombuffer(a, dtype), np.frombuffer(b, dtype)
        differ = x.view(f"u{size}") != y.view(f"u{size}")
        if not (differ & ~(np.isnan(x) & np.isnan(y))).any():
            return True
    return False


def check_function_is_execution(subject: Subject, case: Any, seed: int, specials: bool) -> None:
    """(a) The timed execution's result is the function's, bit for bit."""
    values = subject.values(case, np.random.default_rng(seed), specials=specials)
    run = subject.execute(case, values, fast_path=True)
    want = subject.function(case, values)
    assert_same_bits(run.result, want, f"{subject.name}: execution against function, {case}")


def check_cost_ignores_data(subject: Subject, case: Any, seed: int) -> None:
    """(b) Two data sets, the second full of specials: both cost what the timing gives."""
    rng = np.random.default_rng(seed)
    cycles = [
        subject.execute(case, subject.values(case, rng, specials=specials), fast_path=True).cycles
        for specials in (False, True)
    ]
    want = subject.cost(case)
    assert cycles == [want, want], (
        f"{subject.name}: cycles {cycles} with random and special data, the timing gives "
        f"{want}, {case}"
    )


def check_fast_path_is_general_path(subject: Subject, case: Any, seed: int, specials: bool) -> None:
    """(c) Fast path on and off: same result bits, same memory, same cycles."""
    values = subject.values(case, np.random.default_rng(seed), specials=specials)
    fast = subject.execute(case, values, fast_path=True)
    general = subject.execute(case, values, fast_path=False)
    expected = subject.fast_path_applies(case)
    assert fast.fast == expected, (
        f"{subject.name}: the fast path {'did not run' if expected else 'ran'} {case}"
    )
    assert not general.fast, f"{subject.name}: the fast path ran while switched off, {case}"
    assert_same_bits(fast.result, general.result, f"{subject.name}: fast against general, {case}")
    assert same_memory(fast.memory, general.memory), f"{subject.name}: memories differ after {case}"
    assert fast.cycles == general.cycles, (
        f"{subject.name}: {fast.cycles} cycles on the fast path, {general.cycles} on the "
        f"general path, {case}"
    )
