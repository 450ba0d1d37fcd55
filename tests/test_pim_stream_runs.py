"""A PIM stream's repeated triggers decided a run at a time (``hbm.stream_path = runs``) issue
the same commands at the same cycles, and leave the same state, as one at a time (``command``,
the reference): runs cut by a refresh, by another bank set, by a WR among RDs, runs of WR
triggers, a run that ends the stream, a run that would raise, and the JIT-Q streams."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pim import jitq
from pim.bankset import SetTimingChecker
from pim.controller import Command, Controller
from pim.device import COL_OP_MODE, COL_SRF, ProtocolError, PseudoChannel, crf_payload
from pim.isa import Instr
from pim.stack import HbmConfig
from pim.standard import COMMANDS, constraints
from pim.timing import TimingViolation
from simcore import Simulation
from simcore.component import Component
from workloads.pim.jitq import JitqParams, build

ROW_E, ROW_O = 5, 9


def state(sim_end: int, events: int, pch: PseudoChannel, ctl: Controller) -> dict:
    u = pch.units
    return {
        "log": ctl.trace_log,
        "rows": [(r, a.tobytes()) for r, a in pch.rows.items()],
        "regs": (u.grf.tobytes(), u.a_out.tobytes(), u.m_out.tobytes(), u.counter.tobytes()),
        "units": (u.pc, u.loops, u.done, u.triggers, u.by_op, u.by_role, u.last_role),
        "ctl": (
            ctl.counts,
            ctl.shift_cycles,
            ctl.bus_busy_cycles,
            ctl.host_bytes,
            ctl.first_cycle,
            ctl.last_cycle,
            ctl.end_cycle,
            ctl._next_free,
            ctl.next_refresh,
            ctl._hits,
        ),
        "kernel": (sim_end, events),
    }


def run_jitq(p: JitqParams, path: str) -> dict:
    sim = Simulation()
    run = build(sim, dataclasses.replace(p, hbm=dataclasses.replace(p.hbm, stream_path=path)))
    ctl = run.stack.controllers[0]
    assert ctl.stream_path == path
    ctl.record = True
    res = sim.run()
    return state(res.end_ticks, res.events, run.stack.pchs[0], ctl)


@pytest.mark.parametrize("placement", jitq.PLACEMENTS)
@pytest.mark.parametrize("direction", jitq.DIRECTIONS)
@pytest.mark.parametrize("master", ("bf16", "fp32"))
def test_jitq_streams_in_runs_are_the_streams_one_at_a_time(placement, direction, master):
    p = JitqParams(rows=64, cols=48, placement=placement, direction=direction, master=master,
                   batch_groups=3)  # fmt: skip
    runs = run_jitq(p, "runs")
    assert runs == run_jitq(p, "command")
    assert runs["ctl"][0]["REF"] > 0  # refreshes fell inside the stream


# -- hand-made streams ---------------------------------------------------------------------------
def controller(sim: Simulation, path: str, n_refi: int | None) -> tuple[PseudoChannel, Controller]:
    std = HbmConfig().standard()
    if n_refi is not None:  # refresh often, to cut runs at many places
        t = dataclasses.replace(std.timing, nREFI=n_refi)
        std = dataclasses.replace(std, timing=t, table=constraints(t))
    root = Component(sim, "hbm", domain=sim.domain("hbm", std.timing.clock_hz))
    pch = PseudoChannel(std, "hbm/pch[0]")
    ctl = Controller(root, "pch[0]", pch, record=True, stream_path=path)
    return pch, ctl


#: A program of RD triggers (reads of both parities into GRF_A[0], GRF_B[0]), then WR
#: triggers (GRF_A[0] into the odd bank), then RD triggers again, each loop of JUMPs.
def program(reads: int, writes: int, more: int) -> list[Instr]:
    return [
        Instr("ADD", ("GRF_A", 0), ("GRF_A", 0), ("EVEN_BANK", 0), integer=True),
        Instr("JUMP", count=reads - 1, offset=1),
        Instr("MOV", ("ODD_BANK", 0), ("GRF_A", 0)),
        Instr("JUMP", count=writes - 1, offset=1),
        Instr("MAX", ("GRF_B", 0), ("GRF_B", 0), ("ODD_BANK", 0)),
        Instr("JUMP", count=more - 1, offset=1),
        Instr("EXIT"),
    ]


def setup(pch: PseudoChannel, prog: list[Instr], seed: int) -> list[Command]:
    rng = np.random.default_rng(seed)
    for r in (ROW_E, ROW_O):
        pch.row(r)[:] = rng.integers(0, 1 << 12, pch.row(r).shape, dtype=np.uint16)
    conf = pch.row_conf
    s = [Command("ACT", 0, pch.row_abmr), Command("PRE", 0), Command("ACT", 0, conf)]
    roles = ["shift:ADD", "", "", "", "shift:MAX", "", ""]
    for i, (col, d) in enumerate(crf_payload(prog)):
        s.append(Command("WR", 0, conf, col, d, (roles, "test") if i == 0 else None))
    s.append(Command("WR", 0, conf, COL_SRF, np.zeros(16, np.uint16)))
    mode = np.zeros(16, np.uint16)
    mode[0] = 1
    s += [Command("WR", 0, conf, COL_OP_MODE, mode), Command("PRE", 0)]
    return [*s, Command("ACT", 0, ROW_E), Command("ACT", 1, ROW_O)]


def run_stream(
    segments: list[tuple[str, int, int]], prog: list[Instr], path: str, n_refi: int | None,
    seed: int = 0,
) -> dict:  # fmt: skip
    """``segments``: (RD or WR, bank, triggers) in order, the columns cycling."""
    sim = Simulation()
    pch, ctl = controller(sim, path, n_refi)
    s = setup(pch, prog, seed)
    k = 0
    for cmd, bank, n in segments:
        for _ in range(n):
            s.append(Command(cmd, bank, ROW_E if bank % 2 == 0 else ROW_O, (k * 7) % 32))
            k += 1
    ctl.submit_stream(s)
    res = sim.run()
    return state(res.end_ticks, res.events, pch, ctl)


#: RD runs split between the even and the odd bank sets, a WR run, RDs, the stream ending in a run.
SEGMENTS = [("RD", 0, 1100), ("RD", 1, 40), ("RD", 0, 360), ("WR", 1, 12), ("RD", 2, 1),
            ("RD", 0, 99), ("RD", 3, 100)]  # fmt: skip
PROGRAM = program(1500, 12, 200)


@pytest.mark.parametrize("n_refi", [None, 97, 250, 1001])
def test_hand_made_runs_cut_by_refresh_bank_sets_and_writes(n_refi):
    runs = run_stream(SEGMENTS, PROGRAM, "runs", n_refi)
    assert runs == run_stream(SEGMENTS, PROGRAM, "command", n_refi)
    assert runs["units"][2]  # the program ran to its EXIT
    assert runs["ctl"][0]["REF"] >= (1 if n_refi is None else 10)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["RD", "WR"]), st.integers(0, 3), st.integers(1, 90)),
             min_size=1, max_size=8),
    st.integers(60, 700),
)  # fmt: skip
def test_random_runs_with_refresh_are_the_commands_one_at_a_time(segments, n_refi):
    """Random RD/WR runs to random bank sets, and the program's own RD/WR order: where they
    disagree the stream raises, at the same command with the same message on both paths."""
    reads = sum(n for c, _b, n in segments[:2])
    prog = program(max(1, reads), 5, 300)
    got, want = [], []
    for path, out in (("runs", got), ("command", want)):
        try:
            out.append(run_stream(segments, prog, path, n_refi))
        except ProtocolError as err:
            out.append(str(err))
    assert got == want


def test_a_run_past_the_programs_exit_raises_where_one_at_a_time_does():
    segs = [("RD", 0, 1500), ("WR", 0, 12), ("RD", 0, 250)]  # 200 reads left in the program
    msgs = []
    for path in ("runs", "command"):
        with pytest.raises(ProtocolError) as err:
            run_stream(segs, PROGRAM, path, None)
        msgs.append(str(err.value))
    assert msgs[0] == msgs[1] and "after the program's EXIT" in msgs[0]


def test_host_reads_in_single_bank_mode_are_not_runs_and_unchanged():
    """Repeated RDs that are not triggers (single-bank mode, a data row) go one at a time."""
    outs = []
    for path in ("runs", "command"):
        sim = Simulation()
        pch, ctl = controller(sim, path, 300)
        s = [Command("ACT", 3, 7)] + [Command("RD", 3, 7, c % 32) for c in range(400)]
        s += [Command("WR", 3, 7, 5, np.arange(16, dtype=np.uint16))] * 30
        ctl.submit_stream(s)
        res = sim.run()
        outs.append(state(res.end_ticks, res.events, pch, ctl))
    assert outs[0] == outs[1]


# -- the checker's run bound ---------------------------------------------------------------------
def test_the_repeat_bound_is_the_next_earliest_after_a_record():
    std = HbmConfig().standard()
    sets = [(2,), tuple(range(0, 16, 2)), tuple(range(1, 16, 2)), tuple(range(16)), (3, 4)]
    rng = np.random.default_rng(3)
    chk = SetTimingChecker(std)
    cycle = 0
    for _ in range(3000):
        cmd = COMMANDS[rng.integers(len(COMMANDS))]
        bs = sets[rng.integers(len(sets))]
        cycle = max(cycle + 1, chk.earliest(cmd, bs) + int(rng.integers(0, 3)))
        fixed, gap = chk.repeat(cmd, bs)
        chk.issue(cmd, bs, cycle)
        assert chk.earliest(cmd, bs) == max(fixed, cycle + gap)


def test_issue_run_checks_its_first_command_and_its_spacing():
    std = HbmConfig().standard()
    evens = tuple(range(0, 16, 2))
    chk = SetTimingChecker(std, "pch0")
    chk.issue("ACT", evens, 0)
    t = std.timing.nRCD
    with pytest.raises(TimingViolation, match="bank: ACT -> RD"):
        chk.issue_run("RD", evens, t - 1, 4, 3)
    with pytest.raises(TimingViolation) as err:
        chk.issue_run("RD", evens, t, std.timing.nCCD_L - 1, 3)
    assert str(err.value) == (
        f"pch0: RD to bank(s) {list(evens)} every {std.timing.nCCD_L - 1} cycles violates RD -> "
        f"RD >= {std.timing.nCCD_L} cycles; space them {std.timing.nCCD_L} cycles apart or more"
    )
    chk.issue_run("RD", evens, t, std.timing.nCCD_L, 3)
    assert chk.earliest("RD", evens) == t + 3 * std.timing.nCCD_L
