"""The stream's checker per bank set answers what the generic per-bank checker answers."""

from __future__ import annotations

import numpy as np
import pytest

from pim import jitq
from pim.bankset import SetTimingChecker
from pim.stack import HbmConfig
from pim.standard import COMMANDS
from pim.timing import TimingChecker, TimingViolation
from simcore import Simulation
from workloads.pim.jitq import JitqParams, build


def trace(p: JitqParams, stream_timing: str) -> list:
    sim = Simulation()
    run = build(sim, p)
    ctl = run.stack.controllers[0]
    ctl.stream_timing = stream_timing
    ctl.record = True
    sim.run()
    return ctl.trace_log


@pytest.mark.parametrize("placement", jitq.PLACEMENTS)
@pytest.mark.parametrize("direction", jitq.DIRECTIONS)
def test_jitq_streams_issue_at_the_same_cycles(placement, direction):
    p = JitqParams(rows=64, cols=32, placement=placement, direction=direction)
    assert trace(p, "bank-sets") == trace(p, "generic")


def test_random_commands_get_the_same_bounds():
    std = HbmConfig().standard()
    banks = std.org.banks
    sets = [(b,) for b in range(banks)] + [
        tuple(range(0, banks, 2)), tuple(range(1, banks, 2)), tuple(range(banks)),
        tuple(range(0, banks, 4)), (3, 4),
    ]  # fmt: skip
    rng = np.random.default_rng(7)
    generic, fast = TimingChecker(std), SetTimingChecker(std)
    cycle = 0
    for _ in range(5000):
        cmd = COMMANDS[rng.integers(len(COMMANDS))]
        bs = sets[rng.integers(len(sets))]
        t = fast.earliest(cmd, bs)
        assert t == generic.earliest(cmd, bs)
        cycle = max(cycle + 1, t + int(rng.integers(0, 3)) * int(rng.integers(0, 2)))
        fast.issue(cmd, bs, cycle)
        generic.issue(cmd, bs, cycle)


def test_a_command_before_its_bound_names_the_rule():
    std = HbmConfig().standard()
    fast = SetTimingChecker(std, "pch0")
    evens = tuple(range(0, 16, 2))
    fast.issue("ACT", evens, 0)
    with pytest.raises(TimingViolation) as err:
        fast.issue("RD", evens, 1)
    t = std.timing.nRCD
    assert str(err.value) == (
        f"pch0: RD to bank(s) {list(evens)} at cycle 1 violates bank: ACT -> RD >= {t} cycles "
        f"(earliest legal cycle {t}); issue it at cycle {t} or later"
    )
    with pytest.raises(TimingViolation, match="the order of the command bus"):
        fast.issue("RD", evens, -5)
