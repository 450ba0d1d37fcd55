"""The PIM units (:mod:`pim.device`, :mod:`pim.isa`) as a subject of the function/timing contract.

A case is one instruction with its operands (GRF_A/GRF_B registers, SRF scalars, the even or
odd bank's word) and destination (a register, the shift counter, or a bank word written by a
WR trigger). The execution is the real thing: a command stream through a pseudo-channel's
controller enters AB-PIM mode, programs the CRF with [instruction, NOP, EXIT], and triggers
twice with the RD or WR the instruction needs; the result is read back from the eight units'
registers or banks. Its cost is the cycles between the two triggers (the PIM issue rate, from
the constraint table). The function is :func:`pim.isa.evaluate` on the operand values. The fast
path decodes CRF words once when written instead of at every trigger.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from numerics.floats import fp16_bits
from pim import isa
from pim.controller import Command
from pim.device import COL_GRF_A, COL_GRF_B, COL_OP_MODE, COL_SRF, crf_payload
from pim.isa import Instr
from pim.stack import HbmConfig, HbmStack
from simcore import Simulation
from tests.contracts.function_timing import Run

OPS = ("ADD", "MUL", "MAC", "MAD", "MOV", "FILL", "CMP", "MAX", "BSHIFT", "LSHIFT")
SOURCES = ("GRF_A", "GRF_B", "SRF_M", "SRF_A", "EVEN_BANK", "ODD_BANK")
ROW_E, ROW_O, COL = 5, 9, 3
UNITS = 8


@dataclasses.dataclass(frozen=True)
class PimCase:
    instr: Instr

    @property
    def bank_src(self) -> str | None:
        kinds = {self.instr.src0[0], self.instr.src1[0]}
        return next((k for k in ("EVEN_BANK", "ODD_BANK") if k in kinds), None)

    @property
    def writes_bank(self) -> bool:
        return self.instr.dst[0] in ("EVEN_BANK", "ODD_BANK")

    def __str__(self) -> str:
        return f"PIM instruction {self.instr}"


@st.composite
def _cases(draw: st.DrawFn) -> PimCase:
    op = draw(st.sampled_from(OPS))
    reg = st.tuples(st.sampled_from(("GRF_A", "GRF_B")), st.integers(0, 7))
    src = st.tuples(st.sampled_from(SOURCES), st.integers(0, 7))
    src0, src1 = draw(src), draw(src)
    if src0[0].endswith("BANK") and src1[0].endswith("BANK"):
        src1 = draw(reg)  # one bank word per trigger
    bank_src = next((s[0] for s in (src0, src1) if s[0].endswith("BANK")), None)
    dsts = [reg]
    if bank_src != "ODD_BANK":
        dsts.append(st.just(("ODD_BANK", 0)))
    if bank_src != "EVEN_BANK":
        dsts.append(st.just(("EVEN_BANK", 0)))
    dst = draw(st.one_of(*dsts))
    kw: dict = {"integer": draw(st.booleans()) and op in ("ADD", "MUL")}
    kw["relu"] = draw(st.booleans()) and op in ("MOV", "FILL")
    if op == "BSHIFT":
        kw["right"], kw["lanes"] = draw(st.booleans()), draw(st.integers(0, 2))
    if op == "LSHIFT":
        kw["distance"] = draw(st.sampled_from((1, 2, 4, 8)))
    if op == "MOV" and not kw["relu"] and draw(st.booleans()):
        kw["to_counter"] = True
        dst = draw(reg)
    return PimCase(Instr(op, dst=dst, src0=src0, src1=src1, **kw))


SPECIAL = np.array(
    [0x7E00, 0xFE00, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001, 0x7BFF, 0xFBFF, 0xFFFF, 0x03FF],
    np.uint16,
)  # NaNs, infinities, signed zeros, subnormals, FP16 extremes, -1 as int16


@dataclasses.dataclass
class Values:
    grf: np.ndarray  # (units, 16, 16)
    srf: np.ndarray  # (16,)
    even: np.ndarray  # (units, 16)
    odd: np.ndarray
    counter: np.ndarray  # (units, 16) int16


class PimUnitSubject:
    name = "pim-unit"

    def cases(self) -> st.SearchStrategy[PimCase]:
        return _cases()

    def values(self, case: PimCase, rng: np.random.Generator, *, specials: bool) -> Values:
        def draw(shape):
            x = fp16_bits(rng.standard_normal(shape))
            if specials:
                mask = rng.random(shape) < 0.4
                x[mask] = rng.choice(SPECIAL, mask.sum())
            return x

        counter = rng.integers(-2, 4, (UNITS, 16)).astype(np.int16)
        return Values(draw((UNITS, 16, 16)), draw(16), draw((UNITS, 16)), draw((UNITS, 16)),
                      counter)  # fmt: skip

    def _operand(self, opd, v: Values) -> np.ndarray:
        kind, idx = opd
        return {
            "GRF_A": lambda: v.grf[:, idx],
            "GRF_B": lambda: v.grf[:, 8 + idx],
            "SRF_M": lambda: np.broadcast_to(v.srf[idx], (UNITS, 16)),
            "SRF_A": lambda: np.broadcast_to(v.srf[8 + idx], (UNITS, 16)),
            "EVEN_BANK": lambda: v.even,
            "ODD_BANK": lambda: v.odd,
        }[kind]()

    def function(self, case: PimCase, v: Values) -> np.ndarray:
        i = case.instr
        s0, s1 = self._operand(i.src0, v), self._operand(i.src1, v)
        old = np.zeros((UNITS, 16), np.uint16) if case.writes_bank else self._operand(i.dst, v)
        addend = np.broadcast_to(v.srf[8 + i.dst[1]], (UNITS, 16))
        result, counter = isa.evaluate(i, s0, s1, old, v.counter.copy(), addend)
        return counter.view(np.uint16) if i.to_counter else result

    def cost(self, case: PimCase) -> int:
        return HbmConfig().standard().timing.nCCD_L

    def execute(self, case: PimCase, v: Values, *, fast_path: bool) -> Run:
        sim = Simulation()
        stack = HbmStack(sim, HbmConfig(refresh="none"), pchs=1, record=True)
        pch = stack.pchs[0]
        pch.units.decode_once = fast_path
        pch.row(ROW_E)[0::2, COL] = v.even
        pch.row(ROW_O)[1::2, COL] = v.odd
        pch.units.counter[:] = v.counter
        conf = pch.row_conf
        s = [Command("ACT", 0, pch.row_abmr), Command("PRE", 0), Command("ACT", 0, conf)]
        s += [Command("WR", 0, conf, col, d)
              for col, d in crf_payload([case.instr, Instr("NOP"), Instr("EXIT")])]  # fmt: skip
        s.append(Command("WR", 0, conf, COL_SRF, v.srf))
        for r in range(8):
            s.append(Command("WR", 0, conf, COL_GRF_A + r, v.grf[0, r]))
            s.append(Command("WR", 0, conf, COL_GRF_B + r, v.grf[0, 8 + r]))
        mode = np.zeros(16, np.uint16)
        mode[0] = 1
        s += [Command("WR", 0, conf, COL_OP_MODE, mode), Command("PRE", 0)]
        s += [Command("ACT", 0, ROW_E), Command("ACT", 1, ROW_O)]
        trig = "WR" if case.writes_bank else "RD"
        bank = 1 if case.bank_src == "ODD_BANK" or case.instr.dst[0] == "ODD_BANK" else 0
        row = ROW_O if bank else ROW_E
        s += [Command(trig, bank, row, COL), Command(trig, bank, row, COL)]
        stack.controllers[0].submit_stream(s)
        orig = pch._write_register

        def write_register(col, data):
            """The register write broadcasts unit 0's values; each unit then gets its own (in
            hardware, a MOV from its banks), so the eight units' lanes all differ."""
            orig(col, data)
            if COL_GRF_A <= col < COL_GRF_B + 8:
                r = col - COL_GRF_A if col < COL_GRF_B else 8 + col - COL_GRF_B
                pch.units.grf[:, r] = v.grf[:, r]

        pch._write_register = write_register  # type: ignore[method-assign]
        sim.run()
        log = [e for e in stack.controllers[0].trace_log if e.cmd == trig]
        cycles = log[-1].cycle - log[-2].cycle
        i = case.instr
        if case.writes_bank:
            parity = 0 if i.dst[0] == "EVEN_BANK" else 1
            result = pch.row(ROW_E if parity == 0 else ROW_O)[parity::2, COL].copy()
        elif i.to_counter:
            result = pch.units.counter.view(np.uint16).copy()
        else:
            r = i.dst[1] + (8 if i.dst[0] == "GRF_B" else 0)
            result = pch.units.grf[:, r].copy()
        memory = b"".join(a.tobytes() for a in pch.rows.values()) + pch.units.grf.tobytes()
        return Run(result, cycles, memory, fast_path)

    def fast_path_applies(self, case: PimCase) -> bool:
        return True
