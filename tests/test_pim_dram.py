"""The HBM model at DRAM-command level: the constraint table, the controller, bandwidth.

The issued commands are checked by an independent checker written here from the standard's
tables alone (every pair of commands against every table row, the tFAW window by counting), not
by the model's :class:`pim.timing.TimingChecker`: a bug in either shows as a disagreement.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from pim.controller import Command, Request
from pim.device import ProtocolError, PseudoChannel
from pim.stack import HbmConfig, HbmStack
from pim.standard import PRESETS, Standard, constraints, hbm3_study
from pim.timing import TimingChecker, TimingViolation
from simcore import Simulation
from workloads.pim.jitq import JitqParams, build


def independent_check(std, log) -> int:
    """Assert every constraint of ``std``'s table on a command trace; returns pairs checked."""
    bpg = std.org.banks_per_group
    horizon = max(r.cycles for r in std.table)
    checked = 0
    acts = [e.cycle for e in log if e.cmd == "ACT"]
    for k in range(4, len(acts)):
        faw = next(r.cycles for r in std.table if r.window == 4)
        assert acts[k] - acts[k - 4] >= faw, f"5 ACTs within tFAW at cycles {acts[k - 4 : k + 1]}"
    cycles = [e.cycle for e in log]
    assert cycles == sorted(cycles) and len(set(cycles)) == len(cycles), "one command a cycle"
    for j, b in enumerate(log):
        i = j - 1
        while i >= 0 and b.cycle - log[i].cycle < horizon:
            a = log[i]
            for row in std.table:
                if row.window > 1 or row.prev != a.cmd or row.next != b.cmd:
                    continue
                if row.level == "bank":
                    shared = set(a.banks) & set(b.banks)
                elif row.level == "bankgroup":
                    shared = {x // bpg for x in a.banks} & {x // bpg for x in b.banks}
                else:
                    shared = {0}
                if shared:
                    checked += 1
                    assert b.cycle - a.cycle >= row.cycles, (
                        f"{a} then {b}: {row.level} {row.prev} -> {row.next} needs {row.cycles}"
                    )
            i -= 1
    return checked


def _address(org, a: int) -> tuple[int, int, int]:
    """Host address map: bank group interleaved first, then column, bank, row."""
    g = a % org.bankgroups
    a //= org.bankgroups
    col = a % org.columns
    a //= org.columns
    b = a % org.banks_per_group
    a //= org.banks_per_group
    return g * org.banks_per_group + b, a % 4096, col


def _read_run(pattern: str, n: int, cfg: HbmConfig = HbmConfig()):  # noqa: B008
    sim = Simulation()
    stack = HbmStack(sim, cfg, pchs=1, record=True)
    org = stack.std.org
    rng = np.random.default_rng(3)
    pch = stack.pchs[0]
    reqs = []
    for i in range(n):
        a = i if pattern == "stream" else int(rng.integers(0, 1 << 24))
        bank, row, col = _address(org, a)
        pch.row(row)[bank, col] = rng.integers(0, 1 << 16, 16, dtype=np.uint16)
        reqs.append(Request(False, bank, row, col))
    expect = [pch.row(r.row)[r.bank, r.col].copy() for r in reqs]
    stack.controllers[0].submit(reqs)
    assert sim.run().status == "completed"
    assert all(np.array_equal(r.value, e) for r, e in zip(reqs, expect, strict=True))
    return stack, reqs


def test_streaming_reads_reach_the_peak_less_refresh_and_row_switches():
    stack, reqs = _read_run("stream", 3072)
    t = stack.std.timing
    ctl = stack.controllers[0]
    # a stream moves one burst every nBL cycles, but for refreshes (PREA, tRFC, reopening)
    # and the rows it opens (mostly hidden behind other bank groups' bursts)
    busy = ctl.end_cycle - ctl.counts.get("REF", 0) * (t.nRP + t.nRFC + t.nRCD)
    frac = len(reqs) * t.nBL / busy
    assert 0.95 < frac <= 1.0, frac
    assert ctl.bus_busy_cycles == len(reqs) * t.nBL
    assert independent_check(stack.std, ctl.trace_log) > 5_000


def test_random_reads_pay_a_row_miss_each_at_the_activation_rate():
    stack, reqs = _read_run("random", 1024)
    t, org = stack.std.timing, stack.std.org
    ctl = stack.controllers[0]
    assert ctl.counts["ACT"] >= 0.95 * len(reqs)  # nearly every access misses its row
    # one ACT per access, limited by tRRD, tFAW / 4 and tRC / banks: the row-miss cost
    per_access = max(t.nRRD_S, t.nFAW / 4, t.nRC / org.banks)
    expected = len(reqs) * per_access / (1 - t.nRFC / t.nREFI)
    assert abs(ctl.end_cycle - expected) / expected < 0.08, (ctl.end_cycle, expected)
    independent_check(stack.std, ctl.trace_log)


@pytest.mark.parametrize(
    "cfg",
    [
        HbmConfig(scheduler="fcfs"),
        HbmConfig(page_policy="closed"),
        HbmConfig(refresh="none", preset="hbm2-2.4"),
    ],
    ids=["fcfs", "closed", "hbm2-norefresh"],
)
def test_every_policy_obeys_the_table(cfg):
    stack, _ = _read_run("random", 600, cfg)
    independent_check(stack.std, stack.controllers[0].trace_log)
    stack, _ = _read_run("stream", 600, cfg)
    independent_check(stack.std, stack.controllers[0].trace_log)


def test_fr_fcfs_beats_fcfs_on_mixed_rows():
    def run(sched):
        sim = Simulation()
        stack = HbmStack(sim, HbmConfig(scheduler=sched, refresh="none"), pchs=1)
        reqs = [Request(False, 0, (i % 2) * 7, i % 32) for i in range(256)]
        stack.controllers[0].submit(reqs)
        sim.run()
        return stack.controllers[0]

    fr, fc = run("fr-fcfs"), run("fcfs")
    assert fr.counts["ACT"] < fc.counts["ACT"] and fr.end_cycle < fc.end_cycle


def test_jitq_stream_obeys_the_table():
    p = JitqParams(rows=32, cols=32, placement="tiled", direction="col")
    sim = Simulation()
    run = build(sim, p)
    run.stack.controllers[0].record = True
    sim.run()
    log = run.stack.controllers[0].trace_log
    assert independent_check(run.stack.std, log) > 1000
    assert {e.cmd for e in log} == {"ACT", "PRE", "PREA", "RD", "WR", "REF"}


def test_a_command_issued_too_early_by_hand_is_a_timing_violation():
    std = hbm3_study()
    chk = TimingChecker(std, "hbm/pch[0]")
    chk.issue("ACT", (3,), 100)
    with pytest.raises(TimingViolation) as err:
        chk.issue("RD", (3,), 110)
    assert str(err.value) == (
        "hbm/pch[0]: RD to bank(s) [3] at cycle 110 violates bank 3: ACT -> RD >= 17 cycles "
        "(earliest legal cycle 117); issue it at cycle 117 or later"
    )
    chk.issue("RD", (3,), 117)
    # tFAW binds where 4 x tRRD < tFAW: a standard with tRRD = 2 (the table is data)
    t = dataclasses.replace(std.timing, nRRD_S=2, nRRD_L=2)
    chk = TimingChecker(Standard("fast-rrd", std.org, t, constraints(t)), "x")
    for b, c in ((0, 0), (4, 2), (8, 4), (12, 6)):
        chk.issue("ACT", (b,), c)
    with pytest.raises(TimingViolation) as err:
        chk.issue("ACT", (1,), 8)
    assert str(err.value) == (
        "x: ACT to bank(s) [1] at cycle 8 violates pch: tFAW (4 ACT in 18) cycles (earliest "
        "legal cycle 18); issue it at cycle 18 or later"
    )


def test_protocol_errors_name_the_state():
    pch = PseudoChannel(hbm3_study(), "hbm/pch[0]")
    with pytest.raises(ProtocolError) as err:
        pch.apply("RD", 2, 0, 0)
    assert str(err.value) == "hbm/pch[0]: RD to bank 2, which has no open row"
    pch.apply("ACT", 2, 5)
    with pytest.raises(ProtocolError) as err:
        pch.apply("ACT", 2, 6)
    assert str(err.value) == (
        "hbm/pch[0]: ACT row 6 to bank 2, which has row 5 open (precharge it first)"
    )


def test_refresh_every_trefi():
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(), pchs=1, record=True)
    t = stack.std.timing
    stack.controllers[0].submit([Request(False, 0, 0, i % 32, arrival=i * 40) for i in range(600)])
    sim.run()
    refs = [e.cycle for e in stack.controllers[0].trace_log if e.cmd == "REF"]
    assert len(refs) == 600 * 40 // t.nREFI
    assert all(t.nREFI <= b - a < t.nREFI + t.nRFC for a, b in itertools.pairwise(refs))


def test_presets_have_the_studys_figures():
    s = PRESETS["hbm3-4.8"]()
    assert s.peak_bytes_per_s == 614.4e9
    assert s.org.pchs * s.org.banks == 512 and s.org.pchs * s.org.banks // 2 == 256
    assert (s.timing.nRP, s.timing.nCCD_L, s.timing.nRAS) == (18, 4, 40)  # 15, 3.33, 33 ns


def test_a_stream_command_is_issued_in_order():
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(refresh="none"), pchs=1, record=True)
    ctl = stack.controllers[0]
    ctl.submit_stream([Command("ACT", 0, 1), Command("RD", 0, 1, 3), Command("PRE", 0)])
    sim.run()
    t = stack.std.timing
    assert [(e.cycle, e.cmd) for e in ctl.trace_log] == [
        (0, "ACT"), (t.nRCD, "RD"), (t.nRAS, "PRE"),
    ]  # fmt: skip
