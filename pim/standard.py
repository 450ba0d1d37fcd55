"""The HBM memory standard as data: organisation, timing, and the constraint table.

Shaped the way DRAM simulators (Ramulator 2, DRAMsim3) describe a standard: nothing here is
code that decides anything. A :class:`Standard` holds

- an **organisation** (:class:`Organisation`): pseudo-channels per stack, bank groups per
  pseudo-channel, banks per group, rows per bank, bytes per row and per column access;
- a **timing table** (:class:`Timing`): nCL, nCWL, nBL, nRCD, nRP, nRAS, nRC, nCCD_S/L, nRRD_S/L,
  nFAW, nWR, nRTP, nWTR_S/L, nREFI, nRFC, in cycles of the command clock;
- a **constraint table** (:func:`constraints`): rows "at level L, after command X, command Y
  waits N cycles", plus one window row (at most 4 ACTs in any nFAW cycles). One generic checker
  (:mod:`pim.timing`) enforces the table; nothing else in the model knows a timing rule.

The PIM extensions need no new rows: mode changes are ACT/PRE/WR to reserved rows, and a PIM
trigger is an ordinary RD or WR column command applied to every bank of one parity (or all
banks), so the same rows govern it. Levels: ``pch`` (the pseudo-channel: shared command and data
bus), ``bankgroup``, ``bank``.

Presets (:data:`PRESETS`): ``hbm3-4.8`` is the JIT-Q study's stack (HBM3 geometry, 4.8 Gb/s per
pin, 614.4 GB/s, tRP 15 ns, tCCD_L 3.33 ns, tRAS 33 ns); ``hbm2-2.4`` is the public HBM2-PIM
(Aquabolt-XL) part. Every value and its source is in docs/pim/hardware.md.
"""

from __future__ import annotations

import dataclasses
import math

#: The DRAM commands. REF is an all-bank refresh; PREA closes every bank of the pseudo-channel.
COMMANDS = ("ACT", "PRE", "PREA", "RD", "WR", "REF")
#: Commands that address a column (move a 32-byte word over the bank I/O).
COLUMN_COMMANDS = ("RD", "WR")
LEVELS = ("pch", "bankgroup", "bank")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Organisation:
    """How one stack is built. A column access moves ``column_bytes`` (one PIM word)."""

    channels: int
    pch_per_channel: int
    bankgroups: int
    banks_per_group: int
    rows: int
    row_bytes: int
    column_bytes: int
    pch_bus_bits: int

    @property
    def pchs(self) -> int:
        return self.channels * self.pch_per_channel

    @property
    def banks(self) -> int:
        """Banks per pseudo-channel."""
        return self.bankgroups * self.banks_per_group

    @property
    def columns(self) -> int:
        """Column accesses (words) per row."""
        return self.row_bytes // self.column_bytes

    @property
    def stack_bytes(self) -> int:
        return self.pchs * self.banks * self.rows * self.row_bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    """Timing parameters in cycles of the command clock (``clock_hz``)."""

    clock_hz: int
    data_rate_gbps: float
    nBL: int
    nCL: int
    nCWL: int
    nRCD: int
    nRP: int
    nRAS: int
    nRC: int
    nCCD_S: int
    nCCD_L: int
    nRRD_S: int
    nRRD_L: int
    nFAW: int
    nWR: int
    nRTP: int
    nWTR_S: int
    nWTR_L: int
    nREFI: int
    nRFC: int

    @property
    def tck_ns(self) -> float:
        return 1e9 / self.clock_hz


@dataclasses.dataclass(frozen=True)
class Constraint:
    """At ``level``, command ``next`` waits ``cycles`` after command ``prev`` (``window`` > 1:
    after the ``window``-th most recent ``prev``, the tFAW rule)."""

    level: str
    prev: str
    next: str
    cycles: int
    window: int = 1


def constraints(t: Timing) -> tuple[Constraint, ...]:
    """The constraint table of an HBM pseudo-channel (JEDEC HBM2/HBM3 rules)."""
    read_to_write = t.nCL + t.nBL + 2 - t.nCWL
    c = Constraint
    rows = [
        # -- pseudo-channel: the shared command/data bus, activation power window, refresh
        c("pch", "RD", "RD", t.nCCD_S),
        c("pch", "WR", "WR", t.nCCD_S),
        c("pch", "RD", "WR", read_to_write),
        c("pch", "WR", "RD", t.nCWL + t.nBL + t.nWTR_S),
        c("pch", "ACT", "ACT", t.nRRD_S),
        c("pch", "ACT", "ACT", t.nFAW, window=4),
        c("pch", "ACT", "PREA", t.nRAS),
        c("pch", "RD", "PREA", t.nRTP),
        c("pch", "WR", "PREA", t.nCWL + t.nBL + t.nWR),
        c("pch", "PREA", "ACT", t.nRP),
        c("pch", "PREA", "REF", t.nRP),
        c("pch", "PRE", "REF", t.nRP),
        c("pch", "REF", "ACT", t.nRFC),
        c("pch", "REF", "REF", t.nRFC),
        c("pch", "REF", "PREA", t.nRFC),
        # -- bank group: the group's shared I/O
        c("bankgroup", "RD", "RD", t.nCCD_L),
        c("bankgroup", "WR", "WR", t.nCCD_L),
        c("bankgroup", "WR", "RD", t.nCWL + t.nBL + t.nWTR_L),
        c("bankgroup", "ACT", "ACT", t.nRRD_L),
        # -- bank: the row buffer
        c("bank", "ACT", "RD", t.nRCD),
        c("bank", "ACT", "WR", t.nRCD),
        c("bank", "ACT", "PRE", t.nRAS),
        c("bank", "ACT", "ACT", t.nRC),
        c("bank", "PRE", "ACT", t.nRP),
        c("bank", "RD", "PRE", t.nRTP),
        c("bank", "WR", "PRE", t.nCWL + t.nBL + t.nWR),
    ]
    return tuple(rows)


@dataclasses.dataclass(frozen=True)
class Standard:
    """One memory standard: organisation, timing and the constraint table built from it."""

    name: str
    org: Organisation
    timing: Timing
    table: tuple[Constraint, ...]

    @property
    def peak_bytes_per_s(self) -> float:
        """Data-bus peak of one stack: pins x rate."""
        pins = self.org.pchs * self.org.pch_bus_bits
        return pins * self.timing.data_rate_gbps * 1e9 / 8


def _cycles(ns: float, clock_hz: int) -> int:
    """Nanoseconds -> whole cycles, rounded up (a constraint is a minimum)."""
    return math.ceil(round(ns * clock_hz / 1e9, 6))


def hbm3_study() -> Standard:
    """The JIT-Q study's stack: HBM3 geometry, 4.8 Gb/s per pin (tCK 0.833 ns, 4 bits per pin
    per clock), 512 banks, 1 KiB rows; tRP, tCCD_L and tRAS from the study, the rest from the
    public HBM2 timing at the same clock (docs/pim/hardware.md)."""
    tck = 1_200_000_000  # Hz: tCK = 0.833 ns
    org = Organisation(
        channels=16, pch_per_channel=2, bankgroups=4, banks_per_group=4, rows=32768,
        row_bytes=1024, column_bytes=32, pch_bus_bits=32,
    )  # fmt: skip
    t = Timing(
        clock_hz=tck, data_rate_gbps=4.8, nBL=2, nCL=17, nCWL=7,
        nRCD=17, nRP=_cycles(15.0, tck), nRAS=_cycles(33.0, tck), nRC=_cycles(15.0 + 33.0, tck),
        nCCD_S=2, nCCD_L=_cycles(3.33, tck), nRRD_S=_cycles(4.0, tck), nRRD_L=_cycles(4.0, tck),
        nFAW=_cycles(15.0, tck), nWR=19, nRTP=6, nWTR_S=3, nWTR_L=8,
        nREFI=_cycles(3900.0, tck), nRFC=_cycles(350.0, tck),
    )  # fmt: skip
    return Standard("hbm3-4.8", org, t, constraints(t))


def hbm2_pim() -> Standard:
    """The public HBM2-PIM part at 2.4 Gb/s (tCK 0.833 ns): 8 channels x 2 pCH x 16 banks."""
    tck = 1_200_000_000
    org = Organisation(
        channels=8, pch_per_channel=2, bankgroups=4, banks_per_group=4, rows=16384,
        row_bytes=1024, column_bytes=32, pch_bus_bits=64,
    )  # fmt: skip
    t = Timing(
        clock_hz=tck, data_rate_gbps=2.4, nBL=2, nCL=17, nCWL=7, nRCD=17, nRP=17, nRAS=40,
        nRC=57, nCCD_S=2, nCCD_L=4, nRRD_S=5, nRRD_L=5, nFAW=18, nWR=19, nRTP=6, nWTR_S=3,
        nWTR_L=8, nREFI=_cycles(3900.0, tck), nRFC=_cycles(350.0, tck),
    )  # fmt: skip
    return Standard("hbm2-2.4", org, t, constraints(t))


PRESETS = {"hbm3-4.8": hbm3_study, "hbm2-2.4": hbm2_pim}
