"""The PIM units' batches: a trigger sequence run K repetitions at a time gives what one
trigger at a time gives (banks, registers, counts, commands), and falls back when a repetition
reads what another writes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pim import jitq
from pim.controller import Command
from pim.device import COL_OP_MODE, COL_SRF, crf_payload
from pim.isa import LANE_DOWN, SHIFT_COUNTER, SHIFT_MASKED, Instr
from pim.stack import HbmConfig, HbmStack
from simcore import Simulation
from workloads.pim.jitq import JitqParams, build

ROW_E, ROW_O = 5, 9


def state(stack: HbmStack) -> tuple:
    pch, ctl = stack.pchs[0], stack.controllers[0]
    u = pch.units
    rows = [(r, a.tobytes()) for r, a in pch.rows.items()]  # creation order too
    regs = (u.grf.tobytes(), u.a_out.tobytes(), u.m_out.tobytes(), u.counter.tobytes())
    return rows, regs, u.triggers, u.by_op, u.by_role, ctl.counts, ctl.trace_log


def run_jitq(p: JitqParams, batch: bool) -> tuple:
    sim = Simulation()
    run = build(sim, p)
    run.stack.pchs[0].batch = batch
    run.stack.controllers[0].record = True
    sim.run()
    return state(run.stack)


@pytest.mark.parametrize("placement", jitq.PLACEMENTS)
@pytest.mark.parametrize("direction", jitq.DIRECTIONS)
@pytest.mark.parametrize("master", ("bf16", "fp32"))
def test_jitq_batches_leave_what_single_triggers_leave(placement, direction, master):
    p = JitqParams(rows=48, cols=32, placement=placement, direction=direction, master=master,
                   batch_groups=3)  # fmt: skip
    assert run_jitq(p, True) == run_jitq(p, False)


def program_run(program: list[Instr], cols: list[int], batch: bool, seed: int = 0) -> tuple:
    """Run ``program`` once over triggers at ``cols`` (even row 5, odd row 9 open), with random
    banks and registers."""
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(refresh="none"), pchs=1, record=True)
    pch = stack.pchs[0]
    pch.batch = batch
    rng = np.random.default_rng(seed)
    for r in (ROW_E, ROW_O):
        pch.row(r)[:] = rng.integers(0, 1 << 16, pch.row(r).shape, dtype=np.uint16)
    pch.units.grf[:] = rng.integers(0, 1 << 16, pch.units.grf.shape, dtype=np.uint16)
    conf = pch.row_conf
    s = [Command("ACT", 0, pch.row_abmr), Command("PRE", 0), Command("ACT", 0, conf)]
    s += [Command("WR", 0, conf, col, d) for col, d in crf_payload(program)]
    srf = rng.integers(0, 1 << 16, 16, dtype=np.uint16)
    srf[:4] = (0, 1, 3, 0xFFFF)
    s.append(Command("WR", 0, conf, COL_SRF, srf))
    mode = np.zeros(16, np.uint16)
    mode[0] = 1
    s += [Command("WR", 0, conf, COL_OP_MODE, mode), Command("PRE", 0)]
    s += [Command("ACT", 0, ROW_E), Command("ACT", 1, ROW_O)]
    dyn: list[Instr] = []
    pc, loops = 0, {}
    while program[pc].op != "EXIT":  # the dynamic sequence, to choose RD or WR triggers
        ins = program[pc]
        if ins.op == "JUMP":
            left = loops.get(pc, ins.count)
            if left > 0:
                loops[pc] = left - 1
                pc -= ins.offset
            else:
                loops.pop(pc, None)
                pc += 1
            continue
        dyn.append(ins)
        pc += 1
    for ins, col in zip(dyn, cols, strict=True):  # a bank destination needs a WR
        trig = "WR" if ins.dst[0] in ("EVEN_BANK", "ODD_BANK") else "RD"
        s.append(Command(trig, 0, ROW_E, col))
    stack.controllers[0].submit_stream(s)
    sim.run()
    return state(stack), len(dyn)


def test_a_register_carried_from_one_repetition_to_the_next_is_not_batched():
    """GRF_B[0] accumulates the even words of four columns: each repetition reads the last one's
    sum. Batched, every repetition would start from the same GRF_B[0]."""
    program = [
        Instr("ADD", ("GRF_B", 0), ("GRF_B", 0), ("EVEN_BANK", 0), integer=True),
        Instr("JUMP", count=3, offset=1),
        Instr("EXIT"),
    ]
    (got, n), (want, _) = program_run(program, [0, 1, 2, 3], True), program_run(
        program, [0, 1, 2, 3], False)  # fmt: skip
    assert n == 4 and got == want


def test_a_bank_word_written_by_one_repetition_and_read_by_the_next_is_not_batched():
    """Each repetition reads odd column 2, adds 1 and writes it back: +3 after three."""
    program = [
        Instr("MOV", ("GRF_A", 0), ("ODD_BANK", 0)),
        Instr("ADD", ("GRF_A", 0), ("GRF_A", 0), ("SRF_M", 1), integer=True),
        Instr("MOV", ("ODD_BANK", 0), ("GRF_A", 0)),
        Instr("JUMP", count=2, offset=3),
        Instr("EXIT"),
    ]
    cols = [2] * 9
    (got, _), (want, _) = program_run(program, cols, True), program_run(program, cols, False)
    assert got == want


OPS = st.sampled_from([
    dict(op="ADD", integer=True), dict(op="ADD"), dict(op="MUL", integer=True), dict(op="MAC"),
    dict(op="CMP"), dict(op="MAX"), dict(op="MOV"), dict(op="MOV", relu=True),
    dict(op="BSHIFT", right=True), dict(op="BSHIFT", right=False, lanes=SHIFT_MASKED),
    dict(op="BSHIFT", right=True, lanes=SHIFT_COUNTER), dict(op="MOV", to_counter=True),
    dict(op="LSHIFT", distance=2), dict(op="LSHIFT", distance=1, lane_mode=LANE_DOWN),
    dict(op="MAD"), dict(op="NOP"),
])  # fmt: skip
SRCS = st.sampled_from([("GRF_A", 0), ("GRF_A", 1), ("GRF_B", 0), ("SRF_M", 1), ("SRF_A", 0),
                        ("EVEN_BANK", 0), ("ODD_BANK", 0), ("A_OUT", 0), ("M_OUT", 0)])  # fmt: skip
DSTS = st.sampled_from([("GRF_A", 0), ("GRF_A", 1), ("GRF_B", 0), ("ODD_BANK", 0), ("A_OUT", 0)])


@st.composite
def looped_programs(draw):
    body = [
        Instr(dst=draw(DSTS), src0=draw(SRCS), src1=draw(SRCS), **draw(OPS))
        for _ in range(draw(st.integers(1, 5)))
    ]
    reps = draw(st.integers(2, 5))
    program = [*body, Instr("JUMP", count=reps - 1, offset=len(body)), Instr("EXIT")]
    cols = draw(st.lists(st.integers(0, 5), min_size=len(body), max_size=len(body)))
    per_rep = draw(st.booleans())  # each repetition its own columns (often independent)
    seq = [c + (4 * k if per_rep else 0) for k in range(reps) for c in cols]
    return program, seq, draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(looped_programs())
def test_random_looped_programs_batched_and_one_at_a_time_agree(case):
    program, cols, seed = case
    (got, _), (want, _) = program_run(program, cols, True, seed), program_run(
        program, cols, False, seed)  # fmt: skip
    assert got == want
