"""Integer simulated time and clock domains.

The kernel keeps one integer clock, the *tick*. Every component lives in a clock domain with an
integer frequency in Hz; when the simulation is frozen the tick frequency is fixed to the least
common multiple of all domain frequencies, so that every domain's period is an exact whole number
of ticks. Cycle counts inside a domain are therefore exact integers, conversions between domains
go through ticks with integer arithmetic, and nothing ever accumulates floating-point drift.

With a single domain (the usual wafer run) the tick *is* the cycle: period 1.

Conversions are explicit:

- ``domain.ticks(cycles)``: cycles of this domain -> ticks (exact).
- ``domain.cycle_at(ticks)``: the cycle a tick falls in (floor).
- ``domain.next_edge(ticks)``: the first clock edge at or after a tick (ceil), in ticks.
- ``timebase.to_seconds(ticks)``: a ``Fraction`` of seconds (exact); ``to_ns`` is the float view
  for printing and plotting only.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NewType, Protocol

from simcore.errors import BuildError

if TYPE_CHECKING:
    import simpy

#: Kernel time: the common tick of all domains (SimPy's clock). A type checker keeps it apart
#: from :data:`Cycles`; at run time both are plain ``int`` (``NewType`` costs nothing in
#: annotations; calling it is an identity function, so hot paths only annotate).
Ticks = NewType("Ticks", int)
#: A count or an index of cycles of one clock domain. Convert with :meth:`ClockDomain.ticks`
#: and :meth:`ClockDomain.cycle_at`; never mix with :data:`Ticks`.
Cycles = NewType("Cycles", int)


class KernelEnv(Protocol):
    """The SimPy environment as wafersim uses it: its clock only ever holds whole ticks.

    SimPy types time as ``int | float``; the kernel puts only Python ints in it, so the
    simulation hands its environment out under this type (a cast made once, nothing per call).
    """

    _now: int
    _queue: list[tuple[int, int, int, Any]]  # (time, priority, insertion id, event)
    _eid: Iterator[int]  # insertion ids

    @property
    def now(self) -> int: ...

    def timeout(self, delay: int, value: Any = None) -> simpy.Timeout: ...

    def event(self) -> simpy.Event: ...

    def process(self, generator: Generator[Any, Any, Any]) -> simpy.Process: ...

    def schedule(self, event: simpy.Event, priority: Any, delay: int = 0) -> None: ...

    def step(self) -> None: ...

    def peek(self) -> float: ...


class ClockDomain:
    """A named clock with an integer frequency. Its period in ticks is known once frozen."""

    __slots__ = ("freq_hz", "name", "period_ticks")

    def __init__(self, name: str, freq_hz: int) -> None:
        if isinstance(freq_hz, bool) or not isinstance(freq_hz, int) or freq_hz <= 0:
            raise BuildError(
                f"clock domain '{name}': freq_hz must be a positive whole number of Hz, "
                f"got {freq_hz!r}"
            )
        self.name = name
        self.freq_hz = freq_hz
        self.period_ticks = 0  # set by TimeBase.freeze

    def ticks(self, cycles: Cycles) -> Ticks:
        """Length of ``cycles`` cycles of this domain, in ticks."""
        return Ticks(cycles * self.period_ticks)

    def cycle_at(self, ticks: Ticks) -> Cycles:
        """The cycle of this domain during which tick ``ticks`` falls."""
        return Cycles(ticks // self.period_ticks)

    def next_edge(self, ticks: Ticks) -> Ticks:
        """The first clock edge of this domain at or after ``ticks``, in ticks."""
        p = self.period_ticks
        return Ticks(-(-ticks // p) * p)

    def __repr__(self) -> str:
        return f"ClockDomain({self.name!r}, {self.freq_hz} Hz, period={self.period_ticks} ticks)"


class TimeBase:
    """The set of clock domains of one simulation and the tick that serves them all."""

    def __init__(self) -> None:
        self.domains: dict[str, ClockDomain] = {}
        self.tick_hz = 0

    @property
    def frozen(self) -> bool:
        return self.tick_hz > 0

    def domain(self, name: str, freq_hz: int) -> ClockDomain:
        """Return the domain ``name``, creating it; a second call must agree on the frequency."""
        existing = self.domains.get(name)
        if existing is not None:
            if existing.freq_hz != freq_hz:
                raise BuildError(
                    f"clock domain '{name}' is already defined at {existing.freq_hz} Hz; "
                    f"cannot redefine it at {freq_hz} Hz (use another domain name)"
                )
            return existing
        if self.frozen:
            raise BuildError(f"clock domain '{name}' added after the simulation was frozen")
        dom = ClockDomain(name, freq_hz)
        self.domains[name] = dom
        return dom

    def freeze(self) -> None:
        """Fix the tick as the LCM of all domain frequencies; give every domain its period."""
        if not self.domains:
            raise BuildError("no clock domain defined: a simulation needs at least one")
        self.tick_hz = math.lcm(*(d.freq_hz for d in self.domains.values()))
        for d in self.domains.values():
            d.period_ticks = self.tick_hz // d.freq_hz

    def to_seconds(self, ticks: Ticks) -> Fraction:
        return Fraction(ticks, self.tick_hz)

    def to_ns(self, ticks: Ticks) -> float:
        return ticks * 1e9 / self.tick_hz

    def describe(self) -> dict[str, int]:
        """Domain name -> frequency in Hz, for trace headers."""
        return {name: d.freq_hz for name, d in sorted(self.domains.items())}
