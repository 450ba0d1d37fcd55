"""The PIM unit's instruction set: 32-bit encoding and the numpy function of each instruction.

A PIM unit (one per even/odd bank pair) has a 256-bit SIMD ALU of 16 lanes x 16 bits, eight
GRF_A and eight GRF_B vector registers, 16 scalar SRF registers (SRF_M = 0..7, SRF_A = 8..15),
and executes instructions from the pseudo-channel's 32-entry CRF, one per trigger. This module
is the *function*: :func:`evaluate` computes an instruction's result from operand values, with
no timing and no memories. The execution (triggers, CRF, program counter, banks) is
:class:`pim.device.PimUnits`.

Encoding (one 32-bit word; the shipped opcodes and operand types are the public HBM-PIM
ones, the extension fields are this model's)::

    [31:28] opcode   NOP 0, ADD 1, MUL 2, MAC 3, MAD 4, MOV 8, FILL 9, JUMP 14, EXIT 15
                     extensions in reserved codes: CMP 5, MAX 6, BSHIFT 7, LSHIFT 10
    [27:25] dst type  A_OUT 0, M_OUT 1, EVEN_BANK 2, ODD_BANK 3, GRF_A 4, GRF_B 5, SRF_M 6, SRF_A 7
    [24:22] src0 type [21:19] src1 type
    [18:16] dst idx   [15:13] src0 idx  [12:10] src1 idx
    [9]     INT: integer lanes (ADD/MUL wrap modulo 2^16) instead of FP16
    [8]     RELU (MOV, FILL)
    [7:0]   extension field:
              BSHIFT: [7] right (1) / left (0); [6:5] lanes: 0 all, 1 where src1 != 0,
                      2 where the shift counter S > 0 (which then decrements: the "opt" ALU)
              LSHIFT: [2:0] log2 of the lane distance d; [4:3] mode: 0 butterfly (lane i
                      takes lane i XOR d), 1 down (lane i takes lane i + d, the top d lanes
                      get 0), 2 up (lane i takes lane i - d, the bottom d lanes get 0)
              MOV:    [7] destination is the shift counter S (the "opt" ALU)
    JUMP:   [26:16] repeat count, [4:0] offset back (entries); zero-cycle
    EXIT:   no fields; ends the program

Semantics: FP16 operations (ADD, MUL, MAC dst += src0*src1 rounded twice, MAD dst = src0*src1 +
SRF_A[dst idx]) round to nearest even (numpy float16). The extensions are integer operations on
the lanes as int16: CMP gives 0xFFFF where src0 > src1 else 0, MAX the larger, BSHIFT a one-bit
logical shift, LSHIFT a butterfly exchange or a zero-filling shift of the lanes by d (no
cross-lane arithmetic exists). Scalars
(SRF_M, SRF_A) are broadcast to every lane.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simcore.errors import WafersimError

OPCODES = {
    "NOP": 0, "ADD": 1, "MUL": 2, "MAC": 3, "MAD": 4, "CMP": 5, "MAX": 6, "BSHIFT": 7,
    "MOV": 8, "FILL": 9, "LSHIFT": 10, "JUMP": 14, "EXIT": 15,
}  # fmt: skip
OPNAMES = {v: k for k, v in OPCODES.items()}
OPERANDS = {
    "A_OUT": 0, "M_OUT": 1, "EVEN_BANK": 2, "ODD_BANK": 3, "GRF_A": 4, "GRF_B": 5, "SRF_M": 6,
    "SRF_A": 7,
}  # fmt: skip
OPERAND_NAMES = {v: k for k, v in OPERANDS.items()}
SHIPPED = ("NOP", "ADD", "MUL", "MAC", "MAD", "MOV", "FILL", "JUMP", "EXIT")
EXTENSIONS = ("CMP", "MAX", "BSHIFT", "LSHIFT")
LANES = 16
CRF_ENTRIES = 32
#: Lane-mode field of BSHIFT.
SHIFT_ALL, SHIFT_MASKED, SHIFT_COUNTER = 0, 1, 2
#: Mode field of LSHIFT.
LANE_XOR, LANE_DOWN, LANE_UP = 0, 1, 2


class IsaError(WafersimError):
    """An instruction cannot be encoded, decoded or run (bad field, bad operand)."""


@dataclasses.dataclass(frozen=True)
class Instr:
    """One instruction. Operands are (type name, index). ``role`` is compiler metadata (which
    part of a kernel it belongs to, for command counts); it is not encoded."""

    op: str
    dst: tuple[str, int] = ("A_OUT", 0)
    src0: tuple[str, int] = ("A_OUT", 0)
    src1: tuple[str, int] = ("A_OUT", 0)
    integer: bool = False
    relu: bool = False
    right: bool = True
    lanes: int = SHIFT_ALL
    distance: int = 1
    lane_mode: int = LANE_XOR
    to_counter: bool = False
    count: int = 0
    offset: int = 0
    role: str = dataclasses.field(default="", compare=False)

    def encode(self) -> int:
        return encode(self)

    def __str__(self) -> str:
        if self.op == "JUMP":
            return f"JUMP -{self.offset} x{self.count}"
        if self.op in ("EXIT", "NOP"):
            return self.op
        parts = [self.op + (".i" if self.integer else "")]
        fmt = lambda o: f"{o[0]}[{o[1]}]"  # noqa: E731
        parts.append("S" if self.to_counter else fmt(self.dst))
        parts.append(fmt(self.src0))
        if self.op in ("ADD", "MUL", "MAC", "MAD", "CMP", "MAX") or (
            self.op == "BSHIFT" and self.lanes == SHIFT_MASKED
        ):
            parts.append(fmt(self.src1))
        if self.op == "BSHIFT":
            parts.append(("R", "L")[not self.right] + ("", " mask", " S")[self.lanes])
        if self.op == "LSHIFT":
            parts.append(("xor ", "down ", "up ")[self.lane_mode] + str(self.distance))
        return " ".join(parts)


def _field(name: str, value: int, bits: int) -> int:
    if not 0 <= value < (1 << bits):
        raise IsaError(f"instruction field {name} = {value} does not fit in {bits} bits")
    return value


def encode(i: Instr) -> int:
    """The 32-bit word of an instruction (see the module docstring)."""
    op = OPCODES.get(i.op)
    if op is None:
        raise IsaError(f"unknown PIM opcode {i.op!r}; known: {', '.join(OPCODES)}")
    word = op << 28
    if i.op == "JUMP":
        return word | _field("count", i.count, 11) << 16 | _field("offset", i.offset, 5)
    if i.op == "EXIT":
        return word
    for shift, (kind, idx), name in (
        (25, i.dst, "dst"),
        (22, i.src0, "src0"),
        (19, i.src1, "src1"),
    ):
        if kind not in OPERANDS:
            raise IsaError(
                f"unknown operand type {kind!r} for {name}; known: {', '.join(OPERANDS)}"
            )
        word |= OPERANDS[kind] << shift
        word |= _field(f"{name} index", idx, 3) << (shift - 9)
    word |= int(i.integer) << 9 | int(i.relu) << 8
    if i.op == "BSHIFT":
        word |= int(i.right) << 7 | _field("lanes", i.lanes, 2) << 5
    elif i.op == "LSHIFT":
        if i.distance not in (1, 2, 4, 8):
            raise IsaError(f"LSHIFT distance {i.distance} is not 1, 2, 4 or 8")
        if i.lane_mode not in (LANE_XOR, LANE_DOWN, LANE_UP):
            raise IsaError(f"LSHIFT mode {i.lane_mode} is not 0 (xor), 1 (down) or 2 (up)")
        word |= i.distance.bit_length() - 1 | i.lane_mode << 3
    elif i.op == "MOV":
        word |= int(i.to_counter) << 7
    return word


def decode(word: int) -> Instr:
    """The instruction a 32-bit word holds (inverse of :func:`encode`)."""
    op = OPNAMES.get(word >> 28)
    if op is None:
        raise IsaError(f"CRF word {word:#010x}: reserved opcode {word >> 28}")
    if op == "JUMP":
        return Instr("JUMP", count=(word >> 16) & 0x7FF, offset=word & 0x1F)
    if op == "EXIT":
        return Instr("EXIT")
    opd = lambda s: (OPERAND_NAMES[(word >> s) & 7], (word >> (s - 9)) & 7)  # noqa: E731
    kw: dict = dict(dst=opd(25), src0=opd(22), src1=opd(19))
    kw["integer"] = bool(word >> 9 & 1)
    kw["relu"] = bool(word >> 8 & 1)
    if op == "BSHIFT":
        kw["right"], kw["lanes"] = bool(word >> 7 & 1), (word >> 5) & 3
    elif op == "LSHIFT":
        kw["distance"] = 1 << (word & 7)
        kw["lane_mode"] = (word >> 3) & 3
    elif op == "MOV":
        kw["to_counter"] = bool(word >> 7 & 1)
    return Instr(op, **kw)


def _f16(x: np.ndarray) -> np.ndarray:
    return x.view(np.float16)


def _s16(x: np.ndarray) -> np.ndarray:
    return x.view(np.int16)


def evaluate(
    i: Instr,
    src0: np.ndarray,
    src1: np.ndarray,
    dst: np.ndarray,
    counter: np.ndarray,
    addend: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The function of one instruction on uint16 lanes (any leading shape, 16 lanes last).

    ``dst`` is the destination's old value (MAC accumulates into it), ``counter`` the shift
    counters S, ``addend`` MAD's SRF_A scalar. Returns (result, new counters).
    """
    if i.integer or i.op not in _FLOAT_OPS:  # integer lanes raise no floating-point flags
        return _evaluate(i, src0, src1, dst, counter, addend)
    with np.errstate(all="ignore"):  # FP16 overflow to Inf is the hardware's result, not an error
        return _evaluate(i, src0, src1, dst, counter, addend)


#: Opcodes with FP16 arithmetic (without the INT flag): the only ones that can overflow.
_FLOAT_OPS = frozenset(("ADD", "MUL", "MAC", "MAD"))


def _evaluate(
    i: Instr,
    src0: np.ndarray,
    src1: np.ndarray,
    dst: np.ndarray,
    counter: np.ndarray,
    addend: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    op = i.op
    if op == "ADD":
        if i.integer:  # uint16 arrays wrap modulo 2^16
            return src0 + src1, counter
        return (_f16(src0) + _f16(src1)).view(np.uint16), counter
    if op == "MUL":
        if i.integer:
            return src0 * src1, counter
        return (_f16(src0) * _f16(src1)).view(np.uint16), counter
    if op == "MAC":
        return (_f16(dst) + _f16(src0) * _f16(src1)).view(np.uint16), counter
    if op == "MAD":
        add = addend if addend is not None else np.zeros_like(src0)
        return (_f16(src0) * _f16(src1) + _f16(add)).view(np.uint16), counter
    if op in ("MOV", "FILL"):
        if i.relu:
            return np.where(_s16(src0) < 0, np.uint16(0), src0).astype(np.uint16), counter
        if i.to_counter:
            return dst, _s16(src0).astype(np.int16)
        return src0.copy(), counter
    if op == "CMP":
        return np.where(_s16(src0) > _s16(src1), np.uint16(0xFFFF), np.uint16(0)), counter
    if op == "MAX":
        return np.maximum(_s16(src0), _s16(src1)).view(np.uint16), counter
    if op == "BSHIFT":
        shifted = (src0 >> 1) if i.right else (src0 << 1).astype(np.uint16)
        if i.lanes == SHIFT_ALL:
            return shifted, counter
        if i.lanes == SHIFT_MASKED:
            return np.where(src1 != 0, shifted, src0), counter
        live = counter > 0
        return np.where(live, shifted, src0), np.where(live, counter - 1, counter).astype(np.int16)
    if op == "LSHIFT":
        d = i.distance
        if i.lane_mode == LANE_XOR:
            return src0[..., np.arange(LANES) ^ d], counter
        out = np.zeros_like(src0)
        if i.lane_mode == LANE_DOWN:
            out[..., : LANES - d] = src0[..., d:]
        else:
            out[..., d:] = src0[..., : LANES - d]
        return out, counter
    if op == "NOP":
        return dst, counter
    raise IsaError(f"{op} has no lane function (JUMP and EXIT act on the program counter)")
