"""The PIM units: the ISA's encoding, the modes entered by command sequences, triggers, CRF."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numerics.floats import to_fp16
from pim import isa
from pim.controller import Command
from pim.device import COL_GRF_A, COL_OP_MODE, COL_SRF, ProtocolError, crf_payload
from pim.isa import Instr
from pim.stack import HbmConfig, HbmStack
from simcore import Simulation

OPERANDS = st.tuples(st.sampled_from(sorted(isa.OPERANDS)), st.integers(0, 7))


@st.composite
def instructions(draw) -> Instr:
    op = draw(st.sampled_from(sorted(isa.OPCODES)))
    if op == "JUMP":
        return Instr("JUMP", count=draw(st.integers(0, 2047)), offset=draw(st.integers(1, 31)))
    if op == "EXIT":
        return Instr("EXIT")
    kw = dict(dst=draw(OPERANDS), src0=draw(OPERANDS), src1=draw(OPERANDS))
    kw["integer"], kw["relu"] = draw(st.booleans()), draw(st.booleans())
    if op == "BSHIFT":
        kw["right"], kw["lanes"] = draw(st.booleans()), draw(st.integers(0, 2))
    if op == "LSHIFT":
        kw["distance"] = draw(st.sampled_from((1, 2, 4, 8)))
        kw["lane_mode"] = draw(st.integers(0, 2))
    if op == "MOV":
        kw["to_counter"] = draw(st.booleans())
    return Instr(op, **kw)


@settings(max_examples=300, deadline=None)
@given(instructions())
def test_encoding_round_trips(i):
    assert isa.decode(isa.encode(i)) == i
    assert 0 <= isa.encode(i) < 1 << 32


def test_shipped_opcodes_keep_their_public_numbers():
    assert [isa.OPCODES[o] for o in isa.SHIPPED] == [0, 1, 2, 3, 4, 8, 9, 14, 15]
    assert isa.encode(Instr("ADD", ("GRF_A", 1), ("EVEN_BANK", 0), ("SRF_A", 2))) == (
        1 << 28 | 4 << 25 | 2 << 22 | 7 << 19 | 1 << 16 | 0 << 13 | 2 << 10
    )


def test_a_crf_program_longer_than_32_entries_is_refused():
    with pytest.raises(isa.IsaError) as err:
        crf_payload([Instr("NOP")] * 33)
    assert str(err.value) == (
        "a CRF program of 33 entries does not fit the 32-entry CRF; split it into phases or "
        "loop with JUMP"
    )


def test_extension_functions_by_hand():
    x = np.array([[3, 0xFFFF, 0x8000, 7] + [0] * 12], np.uint16)
    y = np.array([[2, 1, 5, 7] + [0] * 12], np.uint16)
    c = np.zeros((1, 16), np.int16)
    cmp, _ = isa.evaluate(Instr("CMP"), x, y, x, c)
    assert cmp[0, :4].tolist() == [0xFFFF, 0, 0, 0]  # int16: 3 > 2; -1 > 1 no; -32768 no
    mx_, _ = isa.evaluate(Instr("MAX"), x, y, x, c)
    assert mx_[0, :4].tolist() == [3, 1, 5, 7]
    sh, _ = isa.evaluate(Instr("BSHIFT", right=True), x, y, x, c)
    assert sh[0, :4].tolist() == [1, 0x7FFF, 0x4000, 3]
    cnt = np.array([[2, 0, 1, 0] + [0] * 12], np.int16)
    sh, cnt2 = isa.evaluate(Instr("BSHIFT", lanes=isa.SHIFT_COUNTER), x, y, x, cnt)
    assert sh[0, :4].tolist() == [1, 0xFFFF, 0x4000, 7] and cnt2[0, :4].tolist() == [1, 0, 0, 0]
    lanes = np.arange(16, dtype=np.uint16)[None]
    sw, _ = isa.evaluate(Instr("LSHIFT", distance=4), lanes, lanes, lanes, c)
    assert sw[0].tolist() == [i ^ 4 for i in range(16)]
    dn, _ = isa.evaluate(
        Instr("LSHIFT", distance=1, lane_mode=isa.LANE_DOWN), lanes, lanes, lanes, c
    )
    assert dn[0].tolist() == [*range(1, 16), 0]
    up, _ = isa.evaluate(Instr("LSHIFT", distance=2, lane_mode=isa.LANE_UP), lanes, lanes, lanes, c)
    assert up[0].tolist() == [0, 0, *range(14)]
    add, _ = isa.evaluate(Instr("ADD", integer=True), x, y, x, c)
    assert add[0, :4].tolist() == [5, 0, 0x8005, 14]


def _program_stream(program: list[Instr], srf: np.ndarray, triggers: list[Command]):
    """SB -> AB, program CRF/SRF on the register row, AB-PIM, triggers, back to SB."""
    conf, abmr, sbmr = 16384 * 2 - 3, 16384 * 2 - 1, 16384 * 2 - 2
    mode1 = np.zeros(16, np.uint16)
    mode1[0] = 1
    s = [Command("ACT", 0, abmr), Command("PRE", 0), Command("ACT", 0, conf)]
    s += [Command("WR", 0, conf, col, data) for col, data in crf_payload(program)]
    s += [Command("WR", 0, conf, COL_SRF, srf), Command("WR", 0, conf, COL_OP_MODE, mode1)]
    s += [Command("PRE", 0), Command("ACT", 0, 5), Command("ACT", 1, 9)]
    s += triggers
    s += [Command("PRE", 0), Command("ACT", 0, conf)]
    s += [Command("WR", 0, conf, COL_OP_MODE, np.zeros(16, np.uint16))]
    s += [Command("PREA", 0), Command("ACT", 0, sbmr), Command("PREA", 0)]
    return s


def test_modes_registers_and_triggers_by_command_sequence():
    """out[odd bank, row 9, col c] = even[row 5, col c] * 2 + 1 (FP16), looped with JUMP."""
    program = [
        Instr("MUL", ("GRF_A", 0), ("EVEN_BANK", 0), ("SRF_M", 0)),
        Instr("ADD", ("GRF_B", 0), ("GRF_A", 0), ("SRF_A", 0)),
        Instr("MOV", ("ODD_BANK", 0), ("GRF_B", 0)),
        Instr("JUMP", count=3, offset=3),
        Instr("EXIT"),
    ]
    srf = np.zeros(16, np.uint16)
    srf[0], srf[8] = np.float16(2).view(np.uint16), np.float16(1).view(np.uint16)
    trig = []
    for c in range(4):
        trig += [Command("RD", 0, 5, c), Command("RD", 0, 5, c), Command("WR", 1, 9, c)]
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(refresh="none"), pchs=1, record=True)
    pch = stack.pchs[0]
    rng = np.random.default_rng(1)
    vals = to_fp16(rng.standard_normal((16, 4, 16)))
    pch.row(5)[:, :4] = vals.view(np.uint16)
    stack.controllers[0].submit_stream(_program_stream(program, srf, trig))
    sim.run()
    got = pch.row(9)[1::2, :4].view(np.float16)
    assert np.array_equal(got, vals[0::2] * np.float16(2) + np.float16(1))
    assert pch.mode == "SB" and pch.units.done and pch.units.triggers == 12
    log = stack.controllers[0].trace_log
    reads = [e.cycle for e in log if e.cmd == "RD"]
    t = stack.std.timing
    assert reads[1] - reads[0] == t.nCCD_L  # triggers at the PIM rate, tCCD_L apart
    assert not pch.row(9)[0::2].any()  # the even banks' row 9 was never opened


def test_a_bank_writing_instruction_needs_a_wr_trigger():
    program = [Instr("MOV", ("EVEN_BANK", 0), ("GRF_A", 0)), Instr("EXIT")]
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(refresh="none"), pchs=1)
    stack.controllers[0].submit_stream(
        _program_stream(program, np.zeros(16, np.uint16), [Command("RD", 0, 5, 0)])
    )
    with pytest.raises(ProtocolError) as err:
        sim.run()
    assert str(err.value) == (
        "CRF entry 0 (MOV EVEN_BANK[0] GRF_A[0]) writes a bank: trigger it with a WR, not a RD"
    )


def test_a_trigger_after_exit_is_an_error():
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(refresh="none"), pchs=1)
    trig = [Command("RD", 0, 5, 0), Command("RD", 0, 5, 1)]
    stack.controllers[0].submit_stream(
        _program_stream([Instr("NOP"), Instr("EXIT")], np.zeros(16, np.uint16), trig)
    )
    with pytest.raises(ProtocolError) as err:
        sim.run()
    assert str(err.value) == "PIM trigger after the program's EXIT (write PIM_OP_MODE = 0)"


def test_grf_written_by_all_bank_writes():
    sim = Simulation()
    stack = HbmStack(sim, HbmConfig(refresh="none"), pchs=1)
    data = np.arange(16, dtype=np.uint16)
    conf = stack.pchs[0].row_conf
    stack.controllers[0].submit_stream(
        [Command("ACT", 0, stack.pchs[0].row_abmr), Command("PRE", 0), Command("ACT", 0, conf),
         Command("WR", 0, conf, COL_GRF_A + 3, data), Command("PRE", 0)]
    )  # fmt: skip
    sim.run()
    assert np.array_equal(stack.pchs[0].units.grf[:, 3], np.tile(data, (8, 1)))
