"""One pseudo-channel's state and what each command does to it: banks, row buffers, modes, PIM.

This is the *function* of the DRAM: which rows are open, what bytes the banks hold, which mode
the pseudo-channel is in and what the PIM units compute. It knows no timing (that is
:mod:`pim.timing`, enforced by the controller before a command reaches :meth:`PseudoChannel.apply`).
It checks each command's *prerequisites* (a RD needs its row open, an ACT a closed bank) and
raises :class:`ProtocolError` naming the command and the state when one is missing.

Banks hold real data: row ``r`` of every bank of the pseudo-channel is one numpy array
(banks, columns, 16) of uint16 lanes, made when first touched, so the even banks' open row at
column ``c`` is one slice, read by all eight PIM units at once.

Modes (the public HBM-PIM design): **SB** (single bank: a command goes to its bank), **AB**
(all bank: a command to bank b goes to every bank of b's parity; PREA and REF always go to all
banks), **AB-PIM** (as AB, and a RD or WR to a data row is a *trigger*: every PIM unit runs the
next CRF instruction with the even and odd banks' words at the commanded column). Entered by
command sequences to reserved rows at the top of each bank:

- SB -> AB: ACT then PRE to row ``rows - 1`` (ABMR); AB -> SB: ACT then PRE to ``rows - 2``;
- the register row ``rows - 3`` (CONF), opened with ACT in AB or AB-PIM mode, maps registers on
  columns: CRF entries 0-7, 8-15, 16-23, 24-31 on columns 0-3 (little-endian 32-bit words),
  the 16 SRF scalars on column 4, GRF_A[0..7] on 8-15, GRF_B[0..7] on 16-23, and PIM_OP_MODE on
  column 31 (first byte 1: enter AB-PIM, program counter reset; 0: back to AB). A WR to CONF is
  a register write, never a trigger; its 32-byte payload is broadcast to every unit.
"""

from __future__ import annotations

import functools
from itertools import repeat
from typing import NamedTuple

import numpy as np

from pim.isa import (
    CRF_ENTRIES,
    LANES,
    SHIFT_COUNTER,
    Instr,
    IsaError,
    decode,
    encode,
    evaluate,
)  # fmt: skip
from pim.standard import Standard
from simcore.errors import WafersimError

COL_CRF = (0, 1, 2, 3)
COL_SRF = 4
COL_GRF_A = 8
COL_GRF_B = 16
COL_OP_MODE = 31


class ProtocolError(WafersimError):
    """A command whose prerequisite state is missing (a RD to a closed bank, an ACT to an open
    one, a trigger after EXIT, ...)."""


class PimUnits:
    """The PIM units of one pseudo-channel (one per even/odd bank pair) and their shared CRF.

    The execution of :mod:`pim.isa`'s function: each trigger runs the instruction at the
    program counter in every unit at once; JUMP and EXIT cost no trigger. ``decode_once``
    (the fast path) decodes each CRF word when it is written instead of at every trigger.
    """

    def __init__(self, units: int, *, decode_once: bool = True) -> None:
        self.units = units
        self.decode_once = decode_once
        self.grf = np.zeros((units, 16, LANES), np.uint16)  # GRF_A 0-7, GRF_B 8-15
        self.srf = np.zeros(16, np.uint16)  # SRF_M 0-7, SRF_A 8-15 (broadcast: same in all)
        self._srf_lanes: list[np.ndarray | None] = [None] * 16
        self._zeros = np.zeros((units, LANES), np.uint16)
        self._zeros.flags.writeable = False  # the old value of a bank or SRF destination
        self.counter = np.zeros((units, LANES), np.int16)
        self.a_out = np.zeros((units, LANES), np.uint16)
        self.m_out = np.zeros((units, LANES), np.uint16)
        self.crf = [0] * CRF_ENTRIES
        self._decoded: list[Instr] = [decode(0)] * CRF_ENTRIES
        self._operands: list[Operands] = [operands(decode(0))] * CRF_ENTRIES
        self._plain = [True] * CRF_ENTRIES  # decoded entries that are neither JUMP nor EXIT
        self.pc = 0
        self.loops: dict[int, int] = {}
        self.done = False
        self.triggers = 0
        self.by_op: dict[str, int] = {}
        self.by_role: dict[str, int] = {}
        self.roles: list[str] = [""] * CRF_ENTRIES
        self.last_role = ""  # the role of the instruction the last trigger ran
        # control_run's memo per program (the CRF's words and roles: a JIT-Q phase's program is
        # written again for every batch of groups): (state, triggers, is_write, open parities)
        # -> what they do; the current program's, found again after the CRF or roles change
        self._programs: dict[tuple, dict[tuple, _RunControl | None]] = {}
        self._runs: dict[tuple, _RunControl | None] | None = None

    def write_crf(self, first: int, words: list[int]) -> None:
        self._runs = None
        for k, w in enumerate(words):
            self.crf[first + k] = w
            if self.decode_once:
                self._decoded[first + k] = decode(w)
                self._operands[first + k] = operands(self._decoded[first + k])
                self._plain[first + k] = self._decoded[first + k].op not in ("JUMP", "EXIT")

    def set_roles(self, roles: list[str]) -> None:
        """The roles (compiler metadata) of the CRF entries, for the counts by role."""
        self._runs = None
        self.roles = roles + [""] * (CRF_ENTRIES - len(roles))

    def write_srf(self, lanes: np.ndarray) -> None:
        self.srf[:] = lanes
        self._srf_lanes = [None] * 16

    def reset_pc(self) -> None:
        self.pc, self.loops, self.done = 0, {}, False

    def _instr(self, pc: int) -> Instr:
        return self._decoded[pc] if self.decode_once else decode(self.crf[pc])

    def _advance(self) -> Instr | None:
        """Follow zero-cycle JUMPs and EXIT to the next instruction a trigger runs."""
        while True:
            if self.pc >= CRF_ENTRIES:
                raise ProtocolError("PIM program ran past CRF entry 31 without EXIT")
            ins = self._instr(self.pc)
            if ins.op == "EXIT":
                self.done = True
                return None
            if ins.op != "JUMP":
                return ins
            left = self.loops.get(self.pc, ins.count)
            if left > 0:
                self.loops[self.pc] = left - 1
                self.pc -= ins.offset
                if self.pc < 0:
                    raise ProtocolError(f"JUMP at CRF entry {self.pc + ins.offset} goes before 0")
            else:
                self.loops.pop(self.pc, None)
                self.pc += 1

    def _read(self, opd: tuple[str, int], even: np.ndarray | None, odd: np.ndarray | None):
        kind, idx = opd
        if kind == "GRF_A":
            return self.grf[:, idx]
        if kind == "GRF_B":
            return self.grf[:, 8 + idx]
        if kind in ("SRF_M", "SRF_A"):
            k = idx if kind == "SRF_M" else 8 + idx
            lanes = self._srf_lanes[k]
            if lanes is None:  # a scalar broadcast to every lane, until the SRF is written
                lanes = self._srf_lanes[k] = np.broadcast_to(self.srf[k], (self.units, LANES))
            return lanes
        if kind == "EVEN_BANK":
            if even is None:
                raise ProtocolError("PIM operand EVEN_BANK but the even banks have no open row")
            return even
        if kind == "ODD_BANK":
            if odd is None:
                raise ProtocolError("PIM operand ODD_BANK but the odd banks have no open row")
            return odd
        return self.a_out if kind == "A_OUT" else self.m_out

    def control(self, is_write: bool, even_open: bool, odd_open: bool) -> tuple[int, Instr]:
        """The control part of a trigger: the next instruction (the program counter moves past
        it and any JUMP or EXIT after it), its checks and counts; returns its CRF entry and the
        instruction, whose lane function :meth:`execute` runs (now, or with a batch later)."""
        fast = self.decode_once
        pc = self.pc
        if fast and pc < CRF_ENTRIES and self._plain[pc]:
            ins = self._decoded[pc]  # what _advance would return (no JUMP or EXIT to follow)
        else:
            adv = self._advance()
            if adv is None:
                raise ProtocolError("PIM trigger after the program's EXIT (write PIM_OP_MODE = 0)")
            ins, pc = adv, self.pc
        info = self._operands[pc] if fast else operands(ins)
        for kind in info.bank_reads:
            if kind == "EVEN_BANK" and not even_open:
                raise ProtocolError("PIM operand EVEN_BANK but the even banks have no open row")
            if kind == "ODD_BANK" and not odd_open:
                raise ProtocolError("PIM operand ODD_BANK but the odd banks have no open row")
        if info.bank_write >= 0 and not is_write:
            raise ProtocolError(
                f"CRF entry {self.pc} ({ins}) writes a bank: trigger it with a WR, not a RD"
            )
        self.triggers += 1
        by_op = self.by_op
        by_op[ins.op] = by_op.get(ins.op, 0) + 1
        role = self.last_role = self.roles[pc]
        if role:
            self.by_role[role] = self.by_role.get(role, 0) + 1
        self.pc = nxt = pc + 1
        if not (fast and nxt < CRF_ENTRIES and self._plain[nxt]):
            self._advance()  # JUMP and EXIT take no trigger: the program ends with its last one
        if info.srf_write:
            raise ProtocolError(f"CRF entry {pc} ({ins}): SRF is not a PIM destination")
        return pc, ins

    def control_run(
        self, n: int, is_write: bool, even_open: bool, odd_open: bool
    ) -> tuple[list[int], int] | None:
        """:meth:`control` of ``n`` triggers in a row (the same command, the same open rows):
        the CRF entries they run and how many of them have a shift-related role; the program
        counter, loop counts, counts and ``last_role`` end as ``n`` calls leave them. ``None``
        (and nothing changed) when one of them would raise (a trigger after EXIT, an operand
        without its open row, a bank write from a RD): the caller then triggers them one at a
        time, which raises at the right one. What a run does depends only on the state it
        starts from, so it is kept until the CRF or the roles change (a program's loops repeat
        the same runs). Needs ``decode_once``."""
        runs = self._runs
        if runs is None:
            program = (tuple(self.crf), tuple(self.roles))
            runs = self._programs.get(program)
            if runs is None:
                if len(self._programs) >= RUN_MEMO_PROGRAMS:
                    self._programs.clear()
                runs = self._programs[program] = {}
            self._runs = runs
        key = (self.pc, tuple(self.loops.items()), self.done, n, is_write, even_open, odd_open)
        run = runs.get(key)
        if run is None:
            if key in runs:
                return None
            if len(runs) >= RUN_MEMO_ENTRIES:
                runs.clear()
            run = runs[key] = self._plan_run(n, is_write, even_open, odd_open)
            if run is None:
                return None
        self.pc, self.loops, self.done = run.pc, dict(run.loops), run.done
        self.triggers += n
        by_op, by_role = self.by_op, self.by_role
        for op, k in run.by_op:
            by_op[op] = by_op.get(op, 0) + k
        for role, k in run.by_role:
            by_role[role] = by_role.get(role, 0) + k
        self.last_role = run.last_role
        return run.pcs, run.shifts

    def _plan_run(self, n: int, is_write: bool, even_open: bool, odd_open: bool):
        """What ``n`` calls of :meth:`control` do from the current state (which it leaves as
        it found it); ``None`` if one raises."""
        saved = (self.pc, dict(self.loops), self.done, self.triggers, self.by_op, self.by_role,
                 self.last_role)  # fmt: skip
        self.by_op, self.by_role = {}, {}
        pcs: list[int] = []
        shifts = 0
        try:
            for _ in range(n):
                pc, _ins = self.control(is_write, even_open, odd_open)
                info = self._operands[pc]
                if (
                    not info.inert
                    and info.bank_write >= 0
                    and not (odd_open if info.bank_write else even_open)
                ):  # PseudoChannel._trigger's check
                    return None
                pcs.append(pc)
                shifts += self.last_role.startswith("shift")
            return _RunControl(
                pcs, shifts, self.pc, tuple(self.loops.items()), self.done,
                tuple(self.by_op.items()), tuple(self.by_role.items()), self.last_role,
            )  # fmt: skip
        except ProtocolError:
            return None
        finally:
            (self.pc, self.loops, self.done, self.triggers, self.by_op, self.by_role,
             self.last_role) = saved  # fmt: skip

    def execute(
        self, ins: Instr, even: np.ndarray | None, odd: np.ndarray | None
    ) -> tuple[str, np.ndarray] | None:
        """The lane function of one instruction in every unit (``even``/``odd``: (units, 16)
        words at the commanded column); returns (bank type, words) when it writes a bank."""
        s0 = self._read(ins.src0, even, odd) if ins.op != "NOP" else None
        two = ins.op in ("ADD", "MUL", "MAC", "MAD", "CMP", "MAX") or (
            ins.op == "BSHIFT" and ins.lanes == 1
        )
        s1 = self._read(ins.src1, even, odd) if two else s0
        kind, idx = ins.dst
        bank_dst = kind in ("EVEN_BANK", "ODD_BANK")
        if bank_dst or kind in ("SRF_M", "SRF_A"):
            old = self._zeros
        else:
            old = self._read(ins.dst, even, odd)
        addend = np.broadcast_to(self.srf[8 + idx], old.shape) if ins.op == "MAD" else None
        try:
            result, self.counter = evaluate(ins, s0, s1, old, self.counter, addend)
        except IsaError as err:
            raise ProtocolError(str(err)) from None
        if ins.op == "NOP" or (ins.op == "MOV" and ins.to_counter):
            return None
        if ins.op in ("ADD", "MAC", "MAD"):
            self.a_out = result
        elif ins.op == "MUL":
            self.m_out = result
        if bank_dst:
            return kind, result
        if kind == "GRF_A":
            self.grf[:, idx] = result
        elif kind == "GRF_B":
            self.grf[:, 8 + idx] = result
        return None

    def trigger(
        self, is_write: bool, even: np.ndarray | None, odd: np.ndarray | None
    ) -> tuple[str, np.ndarray] | None:
        """Run the next instruction in every unit; ``even``/``odd`` are (units, 16) words at
        the commanded column. Returns (bank type, words) when it writes a bank."""
        _, ins = self.control(is_write, even is not None, odd is not None)
        return self.execute(ins, even, odd)


#: Runs kept per program by :meth:`PimUnits.control_run` before it starts afresh (a JIT-Q
#: phase's program has a few hundred distinct ones), and programs kept.
RUN_MEMO_ENTRIES = 4096
RUN_MEMO_PROGRAMS = 64


class _RunControl(NamedTuple):
    """What :meth:`PimUnits.control_run` does for one starting state."""

    pcs: list[int]
    shifts: int
    pc: int
    loops: tuple[tuple[int, int], ...]
    done: bool
    by_op: tuple[tuple[str, int], ...]
    by_role: tuple[tuple[str, int], ...]
    last_role: str


class Operands(NamedTuple):
    """What an instruction reads and writes, for the batches of :meth:`PseudoChannel.flush`:
    registers as ``g0``-``g15`` (GRF_A, GRF_B), ``a`` (A_OUT), ``m`` (M_OUT), ``s`` (the
    shift counters); banks by operand type and by parity written (-1: none)."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]
    bank_reads: tuple[str, ...]
    bank_write: int
    srf_write: bool
    inert: bool  # NOP, MOV to S: no register or bank takes its result


def _register(opd: tuple[str, int]) -> str | None:
    kind, idx = opd
    if kind in ("GRF_A", "GRF_B"):
        return f"g{idx + (8 if kind == 'GRF_B' else 0)}"
    return {"A_OUT": "a", "M_OUT": "m"}.get(kind)


@functools.lru_cache(maxsize=1024)
def operands(ins: Instr) -> Operands:
    """The reads and writes of ``ins`` as :meth:`PimUnits.execute` does them."""
    op = ins.op
    srcs = [] if op == "NOP" else [ins.src0]
    if op in ("ADD", "MUL", "MAC", "MAD", "CMP", "MAX") or (op == "BSHIFT" and ins.lanes == 1):
        srcs.append(ins.src1)
    if op == "MAC":
        srcs.append(ins.dst)
    reads = [r for r in map(_register, srcs) if r]
    bank_reads = tuple(k for k, _ in srcs if k in ("EVEN_BANK", "ODD_BANK"))
    counted = op == "BSHIFT" and ins.lanes == SHIFT_COUNTER
    if counted:
        reads.append("s")
    writes: list[str] = []
    inert = op == "NOP" or (op == "MOV" and ins.to_counter)
    if (op == "MOV" and ins.to_counter) or counted:
        writes.append("s")
    if not inert:
        writes += {"ADD": ["a"], "MAC": ["a"], "MAD": ["a"], "MUL": ["m"]}.get(op, [])
        if ins.dst[0] in ("GRF_A", "GRF_B"):
            writes.append(_register(ins.dst) or "")
    bank_write = ("EVEN_BANK", "ODD_BANK").index(ins.dst[0]) if ins.dst[0] in (
        "EVEN_BANK", "ODD_BANK") else -1  # fmt: skip
    srf_write = not inert and ins.dst[0] in ("SRF_M", "SRF_A")
    return Operands(tuple(reads), tuple(writes), bank_reads, bank_write, srf_write, inert)


class PseudoChannel:
    """Banks, row buffers, mode and PIM units of one pseudo-channel; :meth:`apply` runs a
    command that the timing checker has already let through."""

    def __init__(
        self, std: Standard, name: str = "pch", *, decode_once: bool = True,
        store_data: bool = True, batch: bool = True,
    ) -> None:  # fmt: skip
        self.std = std
        self.batch = batch  # triggers' lane functions run in batches (see flush); False: each now
        self._pending: list[tuple[int, int, int, int]] = []  # CRF entry, even row, odd row, col
        self.store_data = store_data  # False: rows, modes and PIM state only (a RD returns None)
        self.name = name
        org = std.org
        self.nbanks = org.banks
        self.ncols = org.columns
        self.words_per_col = org.column_bytes // 2
        self.row_abmr, self.row_sbmr, self.row_conf = org.rows - 1, org.rows - 2, org.rows - 3
        self.data_rows = org.rows - 3
        self.open = [-1] * org.banks
        self.open_before = [-1] * org.banks  # the row a bank had open before its last PRE
        self._parity_rows: tuple[int, int] | None = None  # open row per parity (cache)
        self.mode = "SB"
        self.rows: dict[int, np.ndarray] = {}
        self.units = PimUnits(org.banks // 2, decode_once=decode_once)
        self._parity = (tuple(range(0, org.banks, 2)), tuple(range(1, org.banks, 2)))
        self._all = tuple(range(org.banks))

    # -- storage ---------------------------------------------------------------------------------
    def row(self, r: int) -> np.ndarray:
        """Row ``r`` of every bank: (banks, columns, 16) uint16, zero when first touched (the
        triggers waiting for a batch run first)."""
        if self._pending:
            self.flush()
        return self._row(r)

    def _row(self, r: int) -> np.ndarray:
        arr = self.rows.get(r)
        if arr is None:
            arr = self.rows[r] = np.zeros((self.nbanks, self.ncols, LANES), np.uint16)
        return arr

    def targets(self, cmd: str, bank: int) -> tuple[int, ...]:
        """The banks a command to ``bank`` acts on in the current mode."""
        if cmd in ("PREA", "REF"):
            return self._all
        if self.mode == "SB":
            return (bank,)
        return self._parity[bank % 2]

    # -- commands --------------------------------------------------------------------------------
    def apply(
        self, cmd: str, bank: int, row: int = 0, col: int = 0, data: np.ndarray | None = None
    ) -> np.ndarray | None:
        """Run one command; a RD in SB/AB mode returns the 16 lanes it reads."""
        if cmd == "RD" or cmd == "WR":
            return self._column(cmd, bank, col, data)
        banks = self.targets(cmd, bank)
        if cmd == "ACT":
            busy = [b for b in banks if self.open[b] >= 0]
            if busy:
                raise ProtocolError(
                    f"{self.name}: ACT row {row} to bank {busy[0]}, which has row "
                    f"{self.open[busy[0]]} open (precharge it first)"
                )
            if not 0 <= row < self.std.org.rows:
                raise ProtocolError(f"{self.name}: ACT to row {row}, beyond the bank's rows")
            for b in banks:
                self.open[b] = row
            self._parity_rows = None
            if row == self.row_abmr and self.mode == "SB":
                self.mode = "AB"
            elif row == self.row_sbmr and self.mode == "AB":
                self.mode = "SB"
            return None
        if cmd in ("PRE", "PREA"):
            for b in banks:
                self.open_before[b] = self.open[b]
                self.open[b] = -1
            self._parity_rows = None
            return None
        if cmd == "REF":
            opened = [b for b in banks if self.open[b] >= 0]
            if opened:
                raise ProtocolError(f"{self.name}: REF with bank {opened[0]} open")
            return None
        raise ProtocolError(f"{self.name}: unknown command {cmd!r}")

    def _column(self, cmd: str, bank: int, col: int, data: np.ndarray | None) -> np.ndarray | None:
        """A RD or WR: a PIM trigger, a register write, or a host access."""
        r = self.open[bank]
        if r < 0:
            raise ProtocolError(f"{self.name}: {cmd} to bank {bank}, which has no open row")
        if not 0 <= col < self.ncols:
            raise ProtocolError(f"{self.name}: {cmd} to column {col}, beyond the row")
        if r != self.row_conf and self.mode == "AB-PIM":
            return self._trigger(cmd == "WR", col)
        if self._pending:
            self.flush()
        if r == self.row_conf:
            if cmd == "WR":
                self._write_register(col, data)
            return None
        if not self.store_data:
            return None
        if cmd == "RD":
            return self._row(r)[bank, col].copy()
        if data is None:
            raise ProtocolError(f"{self.name}: WR without data")
        arr = self._row(r)
        for b in self.targets(cmd, bank):
            arr[b, col] = data
        return None

    def _open_row_of(self, parity: int) -> int:
        rows = {self.open[b] for b in self._parity[parity]}
        if len(rows) != 1:
            return -1
        return rows.pop()

    def _trigger(self, is_write: bool, col: int) -> None:
        if self._parity_rows is None:
            self._parity_rows = (self._open_row_of(0), self._open_row_of(1))
        re, ro = self._parity_rows
        units = self.units
        if not self.batch:
            even = self._row(re)[0::2, col] if re >= 0 else None
            odd = self._row(ro)[1::2, col] if ro >= 0 else None
            self._store(units.trigger(is_write, even, odd), re, ro, col)
            return None
        pc, ins = units.control(is_write, re >= 0, ro >= 0)
        info = units._operands[pc] if units.decode_once else operands(ins)
        if not info.inert and info.bank_write >= 0 and (ro if info.bank_write else re) < 0:
            kind = ("EVEN_BANK", "ODD_BANK")[info.bank_write]
            raise ProtocolError(f"{self.name}: PIM writes {kind} but it has no open row")
        self._pending.append((pc, re, ro, col))
        if units.done:
            self.flush()
        return None

    def trigger_run(self, is_write: bool, bank: int, cols: list[int]) -> int | None:
        """Triggers by ``len(cols)`` RDs (or WRs) to ``bank`` at ``cols``, in AB-PIM mode with a
        data row open there: what as many :meth:`apply` calls do (their control now, their lane
        functions with the next batch). Returns how many ran a shift-related instruction, or
        ``None``, with nothing done, when they cannot go as a run (a column out of range, the
        batches or ``decode_once`` off, or one of them would raise): then apply them one at a
        time."""
        units = self.units
        if not (self.batch and units.decode_once and self.mode == "AB-PIM"):
            return None
        r = self.open[bank]
        if r < 0 or r == self.row_conf or min(cols) < 0 or max(cols) >= self.ncols:
            return None
        if self._parity_rows is None:
            self._parity_rows = (self._open_row_of(0), self._open_row_of(1))
        re, ro = self._parity_rows
        run = units.control_run(len(cols), is_write, re >= 0, ro >= 0)
        if run is None:
            return None
        pcs, shifts = run
        self._pending.extend(zip(pcs, repeat(re), repeat(ro), cols))
        if units.done:
            self.flush()
        return shifts

    def _store(self, out: tuple[str, np.ndarray] | None, re: int, ro: int, col: int) -> None:
        if out is not None:
            kind, words = out
            r = re if kind == "EVEN_BANK" else ro
            if r < 0:
                raise ProtocolError(f"{self.name}: PIM writes {kind} but it has no open row")
            self._row(r)[(0 if kind == "EVEN_BANK" else 1) :: 2, col] = words

    def flush(self) -> None:
        """Run the lane functions of the triggers issued since the last flush (they were
        checked and counted when issued). When they are K repetitions of one sequence of CRF
        entries (a loop over groups or words) and no repetition reads what another writes
        (no register read before it is written in the sequence and written in it; no bank
        word written by one repetition and touched by another), each instruction runs once
        for the K repetitions at once, on (K, units, 16) arrays: the same values as one at a
        time, in order (tests/test_pim_batch.py compares them). Otherwise one at a time."""
        pend, self._pending = self._pending, []
        if not pend:
            return
        units = self.units
        arr = np.array(pend, np.int64)
        # rows come into being in the order the triggers touched them (as one at a time)
        touched = arr[:, 1:3].ravel()
        touched = touched[touched >= 0]
        uniq, first = np.unique(touched, return_index=True)
        for r in uniq[np.argsort(first)].tolist():
            self._row(r)
        n = len(pend)
        pcs = arr[:, 0]
        for size in range(1, n // 2 + 1):
            if n % size or not np.array_equal(pcs.reshape(-1, size), np.broadcast_to(
                    pcs[:size], (n // size, size))):  # fmt: skip
                continue
            body = [units._instr(int(pc)) for pc in pcs[:size]]
            if _independent(body) and self._disjoint(arr, body):
                self._run_batch(arr, body, uniq)
                return
        for pc, re, ro, col in pend:
            even = self._row(re)[0::2, col] if re >= 0 else None
            odd = self._row(ro)[1::2, col] if ro >= 0 else None
            self._store(units.execute(units._instr(pc), even, odd), re, ro, col)

    def _accesses(self, arr: np.ndarray, body: list[Instr]) -> tuple[np.ndarray, np.ndarray]:
        """Bank words each step of the K repetitions reads or writes: (K, accesses) keys
        (row, column, parity) and whether each is a write."""
        k = len(arr) // len(body)
        rows = arr[:, 1:3].reshape(k, len(body), 2)
        cols = arr[:, 3].reshape(k, len(body))
        keys, writes = [], []
        for s, ins in enumerate(body):
            info = operands(ins)
            used = [(("EVEN_BANK", "ODD_BANK").index(b), False) for b in info.bank_reads]
            if not info.inert and info.bank_write >= 0:
                used.append((info.bank_write, True))
            for parity, w in used:
                keys.append((rows[:, s, parity] * self.ncols + cols[:, s]) * 2 + parity)
                writes.append(w)
        if not keys:
            return np.zeros((k, 0), np.int64), np.zeros(0, bool)
        return np.stack(keys, axis=1), np.array(writes)

    def _disjoint(self, arr: np.ndarray, body: list[Instr]) -> bool:
        """No bank word written by one repetition is read or written by another."""
        keys, writes = self._accesses(arr, body)
        if not writes.any():
            return True
        k = keys.shape[0]
        rep = np.broadcast_to(np.arange(k)[:, None], keys.shape).ravel()
        wr = np.broadcast_to(writes[None, :], keys.shape).ravel()
        flat = keys.ravel()
        order = np.lexsort((rep, flat))
        flat, rep, wr = flat[order], rep[order], wr[order]
        start = np.flatnonzero(np.r_[True, flat[1:] != flat[:-1]])
        end = np.r_[start[1:], len(flat)] - 1
        shared = rep[start] != rep[end]
        written = np.maximum.reduceat(wr.astype(np.int8), start) > 0
        return not bool((shared & written).any())

    def _run_batch(self, arr: np.ndarray, body: list[Instr], uniq: np.ndarray) -> None:
        """Each instruction of ``body`` once for the K repetitions (see :meth:`flush`)."""
        units = self.units
        k = len(arr) // len(body)
        shape = (k, units.units, LANES)
        window = np.stack([self.rows[r] for r in uniq.tolist()])
        local = np.searchsorted(uniq, np.maximum(arr[:, 1:3], 0)).reshape(k, len(body), 2)
        cols = arr[:, 3].reshape(k, len(body))
        grf = np.repeat(units.grf[None], k, axis=0)
        regs = {"a": np.repeat(units.a_out[None], k, 0), "m": np.repeat(units.m_out[None], k, 0)}
        counter = np.repeat(units.counter[None], k, axis=0)
        zeros = np.zeros(shape, np.uint16)

        def read(opd: tuple[str, int], s: int) -> np.ndarray:
            kind, idx = opd
            if kind == "GRF_A":
                return grf[:, :, idx]
            if kind == "GRF_B":
                return grf[:, :, 8 + idx]
            if kind in ("SRF_M", "SRF_A"):
                return np.broadcast_to(units.srf[idx if kind == "SRF_M" else 8 + idx], shape)
            if kind == "EVEN_BANK":
                return window[local[:, s, 0], 0::2, cols[:, s]]
            if kind == "ODD_BANK":
                return window[local[:, s, 1], 1::2, cols[:, s]]
            return regs["a" if kind == "A_OUT" else "m"]

        for s, ins in enumerate(body):
            op = ins.op
            s0 = read(ins.src0, s) if op != "NOP" else zeros
            two = op in ("ADD", "MUL", "MAC", "MAD", "CMP", "MAX") or (
                op == "BSHIFT" and ins.lanes == 1
            )
            s1 = read(ins.src1, s) if two else s0
            kind, idx = ins.dst
            bank = kind in ("EVEN_BANK", "ODD_BANK")
            old = zeros if bank or kind in ("SRF_M", "SRF_A") else read(ins.dst, s)
            addend = np.broadcast_to(units.srf[8 + idx], shape) if op == "MAD" else None
            try:
                result, counter = evaluate(ins, s0, s1, old, counter, addend)
            except IsaError as err:
                raise ProtocolError(str(err)) from None
            if op == "NOP" or (op == "MOV" and ins.to_counter):
                continue
            if op in ("ADD", "MAC", "MAD"):
                regs["a"] = result
            elif op == "MUL":
                regs["m"] = result
            if bank:
                p = 0 if kind == "EVEN_BANK" else 1
                window[local[:, s, p], p::2, cols[:, s]] = result
            elif kind == "GRF_A":
                grf[:, :, idx] = result
            elif kind == "GRF_B":
                grf[:, :, 8 + idx] = result
        units.grf[:] = grf[-1]
        units.a_out, units.m_out = regs["a"][-1].copy(), regs["m"][-1].copy()
        units.counter = counter[-1].astype(np.int16)
        for j, r in enumerate(uniq.tolist()):
            self.rows[r][:] = window[j]

    def _write_register(self, col: int, data: np.ndarray | None) -> None:
        if data is None:
            raise ProtocolError(f"{self.name}: register write without data")
        lanes = np.asarray(data, np.uint16)
        u = self.units
        if col in COL_CRF:
            words = lanes.view(np.uint32).tolist()
            u.write_crf(col * 8, [int(w) for w in words])
        elif col == COL_SRF:
            u.write_srf(lanes)
        elif COL_GRF_A <= col < COL_GRF_A + 8:
            u.grf[:, col - COL_GRF_A] = lanes
        elif COL_GRF_B <= col < COL_GRF_B + 8:
            u.grf[:, 8 + col - COL_GRF_B] = lanes
        elif col == COL_OP_MODE:
            if int(lanes[0]) & 0xFF:
                if self.mode == "SB":
                    raise ProtocolError(f"{self.name}: PIM_OP_MODE = 1 in SB mode (enter AB first)")
                self.mode = "AB-PIM"
                u.reset_pc()
            elif self.mode == "AB-PIM":
                self.mode = "AB"
        else:
            raise ProtocolError(f"{self.name}: column {col} of the register row maps no register")


def _independent(body: list[Instr]) -> bool:
    """No register of the sequence ``body`` is read before it is written there and written
    there too (each repetition starts from the registers as they were before the first)."""
    live_in: set[str] = set()
    written: set[str] = set()
    for ins in body:
        info = operands(ins)
        live_in.update(r for r in info.reads if r not in written)
        written.update(info.writes)
    return not (live_in & written)


def crf_payload(program: list[Instr]) -> list[tuple[int, np.ndarray]]:
    """The (column, 16 lanes) register writes that load ``program`` into the CRF."""
    if len(program) > CRF_ENTRIES:
        raise IsaError(
            f"a CRF program of {len(program)} entries does not fit the {CRF_ENTRIES}-entry CRF; "
            "split it into phases or loop with JUMP"
        )
    words = [encode(i) for i in program]
    out = []
    for col in range((len(words) + 7) // 8):
        chunk = words[col * 8 : col * 8 + 8]
        chunk += [0] * (8 - len(chunk))
        out.append((COL_CRF[col], np.array(chunk, np.uint32).view(np.uint16)))
    return out
