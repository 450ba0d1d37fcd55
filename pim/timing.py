"""The one generic timing checker: it enforces a standard's constraint table, and nothing else.

A :class:`TimingChecker` belongs to one pseudo-channel. It remembers, per level instance (the
pseudo-channel, each bank group, each bank), the cycle each command was last issued there, and
the last four ACTs of the pseudo-channel (the tFAW window). :meth:`earliest` answers "when may
this command go at the soonest" as the maximum, over the table rows whose ``next`` is the
command and the level instances the command touches, of (last ``prev`` there) + cycles.
:meth:`record` notes an issued command; :meth:`issue` does both and raises
:class:`TimingViolation` for a command issued by hand too early.

A command touches one bank, or (all-bank modes, PREA, REF) several banks at once: it then counts
once at the pseudo-channel (one command on the bus, one activation in the tFAW window) and once
at every bank and bank group it touches.
"""

from __future__ import annotations

from collections.abc import Sequence

from pim.standard import COMMANDS, LEVELS, Standard
from simcore.errors import WafersimError

_INDEX = {c: i for i, c in enumerate(COMMANDS)}
NEVER = -(10**12)


class TimingViolation(WafersimError):
    """A command was issued before a timing constraint allowed it."""


class TimingChecker:
    """Earliest legal cycles and violation checks for one pseudo-channel."""

    def __init__(self, std: Standard, name: str = "pch") -> None:
        self.std = std
        self.name = name
        org = std.org
        self.banks_per_group = org.banks_per_group
        n = len(COMMANDS)
        self.last_pch = [NEVER] * n
        self.last_bg = [[NEVER] * n for _ in range(org.bankgroups)]
        self.last_bank = [[NEVER] * n for _ in range(org.banks)]
        self.acts: list[int] = []  # the pseudo-channel's recent ACT cycles, oldest first
        # Per next command: the rows that bind it, split by level, with prev as an index.
        self.rules: dict[str, dict[str, list[tuple[int, int, int, str]]]] = {
            c: {lvl: [] for lvl in ("pch", "bankgroup", "bank")} for c in COMMANDS
        }
        self.faw = 0
        self._memo: tuple | None = None  # the last bound computed, until the next record
        # earliest1's bounds per level, valid until a record at that level: cmd -> cycle
        self._pch_c: dict[str, int] = {}
        self._bg_c: list[dict[str, int]] = [{} for _ in range(org.bankgroups)]
        self._bank_c: list[dict[str, int]] = [{} for _ in range(org.banks)]
        for row in std.table:
            if row.window > 1:
                self.faw = row.cycles
                continue
            self.rules[row.next][row.level].append(
                (_INDEX[row.prev], row.cycles, row.window, row.prev)
            )

    def _bound(self, cmd: str, banks: Sequence[int]) -> int:
        """The earliest cycle; nothing changes it until :meth:`record`. (The number alone: the
        rule that sets it is only named, by :meth:`_compute`, when a command violates it.)"""
        memo = self._memo
        if memo is not None and memo[0] == cmd and memo[1] == banks:
            return memo[2]
        last_pch, bpg = self.last_pch, self.banks_per_group
        rules = self.rules[cmd]
        best = NEVER
        for prev, cyc, _w, _p in rules["pch"]:
            t = last_pch[prev] + cyc
            if t > best:
                best = t
        if cmd == "ACT" and len(self.acts) >= 4:
            t = self.acts[-4] + self.faw
            if t > best:
                best = t
        bgr = rules["bankgroup"]
        if bgr:
            last_bg = self.last_bg
            g0 = -1
            for b in banks:
                g = b // bpg
                if g == g0:
                    continue
                g0 = g
                last = last_bg[g]
                for prev, cyc, _w, _p in bgr:
                    t = last[prev] + cyc
                    if t > best:
                        best = t
        bkr = rules["bank"]
        if bkr:
            last_bank = self.last_bank
            for b in banks:
                last = last_bank[b]
                for prev, cyc, _w, _p in bkr:
                    t = last[prev] + cyc
                    if t > best:
                        best = t
        self._memo = (cmd, banks, best)
        return best

    def _compute(self, cmd: str, banks: Sequence[int]) -> tuple[int, str]:
        rules = self.rules[cmd]
        best, why = NEVER, "no constraint"
        for prev, cyc, _w, pname in rules["pch"]:
            t = self.last_pch[prev] + cyc
            if t > best:
                best, why = t, f"pch: {pname} -> {cmd} >= {cyc}"
        if cmd == "ACT" and len(self.acts) >= 4:
            t = self.acts[-4] + self.faw
            if t > best:
                best, why = t, f"pch: tFAW (4 ACT in {self.faw})"
        bgr = rules["bankgroup"]
        bkr = rules["bank"]
        if bgr:
            seen = set()
            for b in banks:
                g = b // self.banks_per_group
                if g in seen:
                    continue
                seen.add(g)
                last = self.last_bg[g]
                for prev, cyc, _w, pname in bgr:
                    t = last[prev] + cyc
                    if t > best:
                        best, why = t, f"bankgroup {g}: {pname} -> {cmd} >= {cyc}"
        if bkr:
            for b in banks:
                last = self.last_bank[b]
                for prev, cyc, _w, pname in bkr:
                    t = last[prev] + cyc
                    if t > best:
                        best, why = t, f"bank {b}: {pname} -> {cmd} >= {cyc}"
        return best, why

    def earliest1(self, cmd: str, bank: int) -> int:
        """:meth:`earliest` of a command to one bank, from per-level bounds kept until a
        command is recorded at that level (a record touches the pseudo-channel's bound, its
        bank group's and its banks'; the rest stay valid)."""
        pc = self._pch_c.get(cmd)
        if pc is None:
            pc = _bound(self.last_pch, self.rules[cmd]["pch"])
            if cmd == "ACT" and len(self.acts) >= 4:
                t = self.acts[-4] + self.faw
                if t > pc:
                    pc = t
            self._pch_c[cmd] = pc
        g = bank // self.banks_per_group
        gc = self._bg_c[g].get(cmd)
        if gc is None:
            gc = self._bg_c[g][cmd] = _bound(self.last_bg[g], self.rules[cmd]["bankgroup"])
        bc = self._bank_c[bank].get(cmd)
        if bc is None:
            bc = self._bank_c[bank][cmd] = _bound(self.last_bank[bank], self.rules[cmd]["bank"])
        if gc > pc:
            pc = gc
        return bc if bc > pc else pc

    def successors(self) -> tuple[tuple[tuple[tuple[int, int], ...], ...], ...]:
        """The table turned around, for an issuer that keeps next-allowed cycles instead of
        asking :meth:`earliest` (the controller's bulk request path): per level (``pch``,
        ``bankgroup``, ``bank``), per command index (:data:`pim.standard.COMMANDS`), the
        (next command index, cycles) pairs a command issued there constrains. The tFAW window
        is not in it (:attr:`faw`, over the last four ACTs in :attr:`acts`)."""
        out: dict[str, list[list[tuple[int, int]]]] = {
            lvl: [[] for _ in COMMANDS] for lvl in LEVELS
        }
        for nxt, levels in self.rules.items():
            j = _INDEX[nxt]
            for lvl, rows in levels.items():
                for prev, cyc, _w, _p in rows:
                    out[lvl][prev].append((j, cyc))
        return tuple(tuple(tuple(x) for x in out[lvl]) for lvl in LEVELS)

    def next_allowed(self) -> tuple[list[int], list[int], list[list[int]]]:
        """The first cycle each command may go, per level instance, given what was recorded:
        the pseudo-channel's (tFAW included in ACT's), the bank groups' as one flat list
        (``group * len(COMMANDS) + command``) and each bank's. ``earliest1(cmd, b)`` is the
        maximum of the three that apply; an issuer keeps them by raising each to
        ``cycle + cycles`` along :meth:`successors` (issue cycles only grow, so the latest
        ``prev`` is the binding one, as here)."""
        pn = [_bound(self.last_pch, self.rules[c]["pch"]) for c in COMMANDS]
        if len(self.acts) >= 4:
            pn[_INDEX["ACT"]] = max(pn[_INDEX["ACT"]], self.acts[-4] + self.faw)
        bgf = [_bound(last, self.rules[c]["bankgroup"]) for last in self.last_bg for c in COMMANDS]
        bn = [[_bound(last, self.rules[c]["bank"]) for c in COMMANDS] for last in self.last_bank]
        return pn, bgf, bn

    def forget(self) -> None:
        """Drop every cached bound: ``last_pch``, ``last_bg``, ``last_bank`` and ``acts`` were
        written directly (an issuer that records in bulk)."""
        self._memo = None
        self._pch_c.clear()
        for d in self._bg_c:
            d.clear()
        for d in self._bank_c:
            d.clear()

    def earliest(self, cmd: str, banks: Sequence[int]) -> int:
        """The first cycle at which ``cmd`` to ``banks`` obeys every constraint."""
        return self._bound(cmd, banks)

    def record(self, cmd: str, banks: Sequence[int], cycle: int) -> None:
        """Note that ``cmd`` went to ``banks`` at ``cycle``."""
        self._memo = None
        self._pch_c.clear()
        i = _INDEX[cmd]
        self.last_pch[i] = cycle
        seen = set()
        for b in banks:
            self.last_bank[b][i] = cycle
            self._bank_c[b].clear()
            g = b // self.banks_per_group
            if g not in seen:
                seen.add(g)
                self.last_bg[g][i] = cycle
                self._bg_c[g].clear()
        if cmd == "ACT":
            self.acts.append(cycle)
            if len(self.acts) > 4:
                del self.acts[0]

    def issue(self, cmd: str, banks: Sequence[int], cycle: int) -> None:
        """Check and record a command issued at ``cycle``; too early is a TimingViolation."""
        if cycle < self._bound(cmd, banks):
            t, why = self._compute(cmd, banks)
            raise TimingViolation(
                f"{self.name}: {cmd} to bank(s) {list(banks)} at cycle {cycle} violates {why} "
                f"cycles (earliest legal cycle {t}); issue it at cycle {t} or later"
            )
        self.record(cmd, banks, cycle)


def _bound(last: list[int], rules: list[tuple[int, int, int, str]]) -> int:
    """The first cycle the ``rules`` (previous command, minimum gap, ...) of one level allow,
    given ``last``, the level's last cycle of each command (:meth:`TimingChecker.earliest1`'s bound
    at the pseudo-channel, a bank group or a bank)."""
    best = NEVER
    for prev, cyc, _w, _p in rules:
        t = last[prev] + cyc
        if t > best:
            best = t
    return best
