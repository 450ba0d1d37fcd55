"""The constraint table enforced per *set of banks*: the timing of a command stream in few steps.

A command stream (:meth:`pim.controller.Controller.submit_stream`) sends nearly every command
to one of a few fixed sets of banks: in the all-bank modes a command to bank b goes to the eight
banks of b's parity, PREA and REF to all sixteen, and only the mode changes go to one bank.
:class:`pim.timing.TimingChecker` keeps, per bank and per bank group, the cycle each command was
last issued there, so a command to eight banks reads and writes eight banks' tables.
:class:`SetTimingChecker` keeps instead, per set of banks a command has gone to, the cycle each
command last went to exactly that set (``own``), and for each set S two aggregates: the last
cycle each command went to a set sharing a bank with S (``at_bank``) or a bank group
(``at_group``). Commands are issued in cycle order (one a cycle on the command bus), so the last
cycle of command X at any bank of S is ``at_bank[S][X]``: a record stores its cycle in the
aggregates of the few sets it shares a bank or a group with (the largest, as cycles only grow),
and a bound reads each rule of the table once. A set seen for the first time gets its
aggregates from ``own``. It answers exactly what :class:`pim.timing.TimingChecker` answers
from the same table (tests/test_pim_bankset.py compares them command by command on the JIT-Q
streams and on random streams); a command issued before its bound is a
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
        generic = TimingChecker(std, name)
        self._rules = generic.rules  # next -> level -> [(prev, cycles, window, prev name)]
        self._faw = generic.faw
        self._bpg = std.org.banks_per_group
        self.last_pch = [NEVER] * len(COMMANDS)
        self.acts: list[int] = []  # the pseudo-channel's last four ACT cycles, oldest first
        self._sets: dict[tuple[int, ...], int] = {}  # bank set -> its number
        self._banks: list[tuple[int, ...]] = []
        self._own: list[list[int]] = []  # per set: last cycle of each command sent to it
        self._at_bank: list[list[int]] = []  # per set: ... to a set sharing a bank with it
        self._at_group: list[list[int]] = []  # per set: ... to a set sharing a bank group
        self._touch: list[list[list[int]]] = []  # per set: the aggregates its records update
        self._terms: dict[tuple[str, int], list[tuple[list[int], int, int]]] = {}
        self._last = NEVER
        self._memo: tuple[str, tuple[int, ...], int] | None = None  # until the next record

    def _set(self, banks: tuple[int, ...]) -> int:
        s = self._sets.get(banks)
        if s is not None:
            return s
        s = self._sets[banks] = len(self._banks)
        self._banks.append(tuple(banks))
        self._own.append([NEVER] * len(COMMANDS))
        self._at_bank.append([NEVER] * len(COMMANDS))
        self._at_group.append([NEVER] * len(COMMANDS))
        groups = [{b // self._bpg for b in bs} for bs in self._banks]
        self._touch = [[] for _ in self._banks]
        for t, tb in enumerate(self._banks):
            for u, ub in enumerate(self._banks):
                if set(tb) & set(ub):
                    self._touch[t].append(self._at_bank[u])
                if groups[t] & groups[u]:
                    self._touch[t].append(self._at_group[u])
        mine = set(banks)
        for i in range(len(COMMANDS)):  # the new set's aggregates, from what each set got
            self._at_bank[s][i] = max(
                (own[i] for own, tb in zip(self._own, self._banks, strict=True) if mine & set(tb)),
            )  # fmt: skip
            self._at_group[s][i] = max(
                (own[i] for own, g in zip(self._own, groups, strict=True) if g & groups[s]),
            )  # fmt: skip
        return s

    def _terms_of(self, cmd: str, s: int) -> list[tuple[list[int], int, int]]:
        """(table, command index, cycles) whose sums bound ``cmd`` to set ``s``."""
        rules = self._rules[cmd]
        out = [(self.last_pch, prev, cyc) for prev, cyc, _w, _n in rules["pch"]]
        out += [(self._at_group[s], prev, cyc) for prev, cyc, _w, _n in rules["bankgroup"]]
        out += [(self._at_bank[s], prev, cyc) for prev, cyc, _w, _n in rules["bank"]]
        return out

    def _terms_for(self, cmd: str, banks: tuple[int, ...]) -> list[tuple[list[int], int, int]]:
        """The (table, previous command, cycles) terms that bound ``cmd`` to ``banks``."""
        s = self._sets.get(banks)
        if s is None:
            s = self._set(banks)
        terms = self._terms.get((cmd, s))
        if terms is None:
            terms = self._terms[(cmd, s)] = self._terms_of(cmd, s)
        return terms

    def earliest(self, cmd: str, banks: tuple[int, ...]) -> int:
        """The first cycle at which ``cmd`` to ``banks`` obeys every constraint."""
        memo = self._memo
        if memo is not None and memo[0] == cmd and memo[1] == banks:
            return memo[2]
        terms = self._terms_for(cmd, banks)
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

    def repeat(self, cmd: str, banks: tuple[int, ...]) -> tuple[int, int]:
        """The bound of ``cmd`` to ``banks`` split for a run of that same command: (``fixed``,
        ``gap``), where ``fixed`` is the bound of the rules whose previous command is another
        (and tFAW), which the run's own records leave as they are, and ``gap`` the largest
        cycles of the rules whose previous command is ``cmd`` itself (:data:`NEVER` if none).
        Once ``cmd`` to ``banks`` is recorded at cycle t, every such rule's table holds t at
        ``cmd`` (a record writes the set's own aggregates and the pseudo-channel's), so
        :meth:`earliest` of the next ``cmd`` to ``banks`` is ``max(fixed, t + gap)`` until
        another command is recorded (tests/test_pim_stream_runs.py)."""
        terms = self._terms_for(cmd, banks)
        i = _INDEX[cmd]
        fixed = gap = NEVER
        for table, prev, cyc in terms:
            if prev == i:
                if cyc > gap:
                    gap = cyc
            elif table[prev] + cyc > fixed:
                fixed = table[prev] + cyc
        if cmd == "ACT" and len(self.acts) >= 4:
            t = self.acts[-4] + self._faw
            if t > fixed:
                fixed = t
        return fixed, gap

    def issue_run(self, cmd: str, banks: tuple[int, ...], first: int, step: int, n: int) -> None:
        """Check and record ``n`` commands ``cmd`` to ``banks`` at ``first``, ``first + step``,
        ...: the first against :meth:`earliest`, the spacing against :meth:`repeat`'s gap and
        the command bus (one a cycle); only the last needs recording, as every table of the
        command holds the latest cycle. A run of ACTs is refused (tFAW counts each one)."""
        if cmd == "ACT":
            raise ValueError("issue_run: a run of ACTs is checked one at a time (tFAW)")
        if n > 1:
            gap = max(self.repeat(cmd, banks)[1], 1)
            if step < gap:
                raise TimingViolation(
                    f"{self.name}: {cmd} to bank(s) {list(banks)} every {step} cycles violates "
                    f"{cmd} -> {cmd} >= {gap} cycles; space them {gap} cycles apart or more"
                )
        self.issue(cmd, banks, first)
        if n > 1:
            self.record(cmd, banks, first + (n - 1) * step)

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
        if s is None:
            s = self._set(banks)
        self._own[s][i] = cycle
        for table in self._touch[s]:
            table[i] = cycle
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
        s = self._set(banks)
        rules = self._rules[cmd]
        best, why = NEVER, "no constraint"
        for level, table in (
            ("pch", self.last_pch), ("bankgroup", self._at_group[s]), ("bank", self._at_bank[s])
        ):  # fmt: skip
            for prev, cyc, _w, pname in rules[level]:
                if table[prev] + cyc > best:
                    best, why = table[prev] + cyc, f"{level}: {pname} -> {cmd} >= {cyc} cycles"
        if cmd == "ACT" and len(self.acts) >= 4 and self.acts[-4] + self._faw > best:
            why = f"pch: tFAW (4 ACT in {self._faw}) cycles"
        return why
