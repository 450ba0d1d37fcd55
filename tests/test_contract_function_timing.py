"""The function/timing contract (tests/contracts/function_timing.py), checked on every subject.

Each property runs on cases Hypothesis draws from the subject; a bounded number of examples keeps
the default tier fast. The harness's own checks are tested too: a made-up unit broken in each
way in turn must fail the check that guards against it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.contracts.function_timing import (
    Run,
    check_cost_ignores_data,
    check_fast_path_is_general_path,
    check_function_is_execution,
)
from tests.contracts.pe_tensor import PeTensorSubject
from tests.contracts.pim_unit import PimUnitSubject

#: The units under the contract (the TPU's MXU joins here).
SUBJECTS = [PeTensorSubject(), PimUnitSubject()]

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
