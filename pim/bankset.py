"""The constraint table enforced per *set of banks*: the timing of a command stream in few steps.

A command stream (:meth:`pim.controller.Controller.submit_stream`) sends nearly every command
to one of a few fixed sets of banks: in the all-bank modes a command to bank b goes to the eight
banks of b's parity, PREA and REF to all sixteen, and only the mode changes go to one bank.
:class:`pim.timing.TimingChecker` keeps, per bank and per bank group, the cycle each command was
last issued there, so a command to eight banks reads and writes eight banks' tables.
:class:`SetTimingChecker` keeps instead, per set of banks a command has gone to, the cycle each
command last went to exactly that set (``own``). Commands are issued in cycle order (one a cycle
on the command bus), so the last cycle of command X at a bank is the largest ``own[T][X]`` over
the sets T holding that bank, and the bound a rule at bank level puts on a command to set S is
the largest over the sets T that share a bank with S (at bank-group level: a bank group). A
record is one store; a bound reads (rules x sets sharing a bank) entries, with the sets known
in advance. It answers exactly what :class:`pim.timing.TimingChecker` answers from the same
table (tests/test_pim_bankset.py compares them command by command on the JIT-Q streams and on
random streams); a command issued before its bound is a
:class:`pim.timing.TimingViolation` naming the rule, as there.
"""

from __future__ import annotations

from pim.standard import COMMANDS, Standard
from pim.timing import NEVER, TimingChecker, TimingViolation

_INDEX = {c: i for i, c in enumerate(COMMANDS)}


class SetTimingChecker:
    """Earliest legal cycles and violation checks for one pseudo-channel, kept per bank set."""

    def __init__(self, std: Standard, name: str = "pch") -> None:
        self.name = name
        self._rules = TimingChecker(std, name).rules  # next -> level -> (prev, cycles, w, name)
        self._faw = TimingChecker(std, name).faw
        self._bpg = std.org.banks_per_group
        self.last_pch = [NEVER] * len(COMMANDS)
        self.acts: list[int] = []  # the pseudo-channel's last four ACT cycles, oldest first
        self._sets: dict[tuple[int, ...], int] = {}  # bank set -> its number
        self._banks: list[tuple[int, ...]] = []
        self._own: list[list[int]] = []  # per set: last cycle of each command sent to it
        self._terms: dict[tuple[str, int], list[tuple[list[int], int, int]]] = {}
        self._last = NEVER
        self._memo: tuple[str, tuple[int, ...], int] | None = None  # until the next record

    def _set(self, banks: tuple[int, ...]) -> int:
        s = self._sets.get(banks)
        if s is None:
            s = self._sets[banks] = len(self._banks)
            self._banks.append(tuple(banks))
            self._own.append([NEVER] * len(COMMANDS))
            self._terms.clear()  # the sets sharing a bank or a group changed
        return s

    def _terms_of(self, cmd: str, s: int) -> list[tuple[list[int], int, int]]:
        """(table, command index, cycles) whose sum bounds ``cmd`` to set ``s``: the
        pseudo-channel's rules once, the bank-group and bank rules once per set sharing a
        group or a bank with ``s`` (the largest cycles of a duplicate kept)."""
        rules = self._rules[cmd]
        banks = set(self._banks[s])
        groups = {b // self._bpg for b in banks}
        best: dict[tuple[int, int], int] = {}
        for prev, cyc, _w, _n in rules["pch"]:
            key = (-1, prev)
            best[key] = max(best.get(key, NEVER), cyc)
        for t, other in enumerate(self._banks):
            if groups & {b // self._bpg for b in other}:
                for prev, cyc, _w, _n in rules["bankgroup"]:
                    best[(t, prev)] = max(best.get((t, prev), NEVER), cyc)
            if banks & set(other):
                for prev, cyc, _w, _n in rules["bank"]:
                    best[(t, prev)] = max(best.get((t, prev), NEVER), cyc)
        return [
            (self.last_pch if t < 0 else self._own[t], prev, cyc)
            for (t, prev), cyc in sorted(best.items())
        ]

    def earliest(self, cmd: str, banks: tuple[int, ...]) -> int:
        """The first cycle at which ``cmd`` to ``banks`` obeys every constraint."""
        memo = self._memo
        if memo is not None and memo[0] == cmd and memo[1] == banks:
            return memo[2]
        s = self._sets.get(banks)
        if s is None:
            s = self._set(banks)
        terms = self._terms.get((cmd, s))
        if terms is None:
            terms = self._terms[(cmd, s)] = self._terms_of(cmd, s)
        best = NEVER
        for table, prev, cyc in terms:
            t = table[prev] + cyc
            if t > best:
                best = t
        if cmd == "ACT" and len(self.acts) >= 4:
            t = self.acts[-4] + self._faw
            if t > best:
                best = t
        self._memo = (cmd, banks, best)
        return best

    def issue(self, cmd: str, banks: tuple[int, ...], cycle: int) -> None:
        """Check and record ``cmd`` to ``banks`` at ``cycle``; too early (or before the last
        command recorded) is a TimingViolation."""
        t = self.earliest(cmd, banks)
        if cycle < t or cycle < self._last:
            raise TimingViolation(
                f"{self.name}: {cmd} to bank(s) {list(banks)} at cycle {cycle} violates "
                f"{self._why(cmd, banks, cycle)} (earliest legal cycle {max(t, self._last)}); "
                f"issue it at cycle {max(t, self._last)} or later"
            )
        self.record(cmd, banks, cycle)

    def record(self, cmd: str, banks: tuple[int, ...], cycle: int) -> None:
        """Note that ``cmd`` went to ``banks`` at ``cycle`` (in cycle order)."""
        i = _INDEX[cmd]
        self._memo = None
        s = self._sets.get(banks)
        self._own[self._set(banks) if s is None else s][i] = cycle
        self.last_pch[i] = cycle
        self._last = cycle
        if cmd == "ACT":
            self.acts.append(cycle)
            if len(self.acts) > 4:
                del self.acts[0]

    def _why(self, cmd: str, banks: tuple[int, ...], cycle: int) -> str:
        """The rule a command at ``cycle`` breaks (named only on a violation)."""
        if cycle < self._last:
            return f"the order of the command bus (last command at cycle {self._last})"
        rules = self._rules[cmd]
        last = {(-1, r[0]): self.last_pch[r[0]] for r in rules["pch"]}
        best, why = NEVER, "no constraint"
        for prev, cyc, _w, pname in rules["pch"]:
            if last[(-1, prev)] + cyc > best:
                best, why = last[(-1, prev)] + cyc, f"pch: {pname} -> {cmd} >= {cyc} cycles"
        if cmd == "ACT" and len(self.acts) >= 4 and self.acts[-4] + self._faw > best:
            best, why = self.acts[-4] + self._faw, f"pch: tFAW (4 ACT in {self._faw}) cycles"
        for level, shares in (
            ("bankgroup", lambda o: {b // self._bpg for b in o} & {b // self._bpg for b in banks}),
            ("bank", lambda o: set(o) & set(banks)),
        ):
            for t, other in enumerate(self._banks):
                if not shares(other):
                    continue
                for prev, cyc, _w, pname in rules[level]:
                    if self._own[t][prev] + cyc > best:
                        best = self._own[t][prev] + cyc
                        why = f"{level}: {pname} -> {cmd} >= {cyc} cycles"
        return why
