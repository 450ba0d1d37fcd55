"""Components: the named, hierarchical parts of a simulated system.

A component has a name, a parent, a clock domain (inherited unless given), a ``stats`` counter,
typed and directed ports, and its own seeded random stream. Its path (``wafer/pe[3,4]/router``)
names it in traces, stall reports and errors. Components are built and wired during the build
phase; :meth:`check` hooks run when the simulation is checked; :meth:`start` hooks launch their
processes when the run begins.
"""

from __future__ import annotations

import collections
import zlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np

from simcore.errors import BuildError

if TYPE_CHECKING:
    import simpy

    from simcore.channel import Channel
    from simcore.clock import ClockDomain, KernelEnv
    from simcore.sim import Simulation


class Port:
    """One end of a channel, owned by a component: ``in`` ports receive, ``out`` ports send."""

    __slots__ = ("channel", "direction", "name", "optional", "owner")

    def __init__(self, owner: Component, name: str, direction: str, *, optional: bool) -> None:
        self.owner = owner
        self.name = name
        self.direction = direction
        self.optional = optional
        self.channel: Channel | None = None

    @property
    def path(self) -> str:
        return f"{self.owner.path}.{self.name}"

    def put(self, item: Any) -> simpy.Event:
        """Send ``item`` (out ports); the event fires when the channel accepts it."""
        return self.channel.put(item)  # type: ignore[union-attr]

    def get(self) -> simpy.Event:
        """Receive the next item (in ports); the event's value is the item."""
        return self.channel.get()  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"<{self.direction} port {self.path}>"


class Component:
    """A named part of the system.

    Subclasses add ports in ``__init__`` and launch processes in ``start``.
    """

    sim: Simulation
    parent: Component | None
    path: str
    domain: ClockDomain

    def __init__(
        self, parent: Component | Simulation, name: str, *, domain: ClockDomain | None = None
    ) -> None:
        if isinstance(parent, Component):
            self.sim = parent.sim
            self.parent = parent
            self.path = f"{parent.path}/{name}"
        else:
            self.sim = parent
            self.parent = None
            self.path = name
        if domain is None:
            if self.parent is None:
                raise BuildError(f"component '{self.path}' needs a clock domain (domain=...)")
            domain = self.parent.domain
        self.name = name
        self.domain = domain
        self.stats: collections.Counter[str] = collections.Counter()
        self.children: list[Component] = []
        self.ports: dict[str, Port] = {}
        self._rng: np.random.Generator | None = None
        if self.parent is not None:
            self.parent.children.append(self)
        self.sim.add_component(self)

    @property
    def env(self) -> KernelEnv:
        return self.sim.env

    def in_port(self, name: str, *, optional: bool = False) -> Port:
        return self._port(name, "in", optional)

    def out_port(self, name: str, *, optional: bool = False) -> Port:
        return self._port(name, "out", optional)

    def _port(self, name: str, direction: str, optional: bool) -> Port:
        if name in self.ports:
            raise BuildError(f"component '{self.path}' already has a port named '{name}'")
        port = Port(self, name, direction, optional=optional)
        self.ports[name] = port
        return port

    @property
    def rng(self) -> np.random.Generator:
        """This component's random stream: fixed by the run's seed and the component's path."""
        if self._rng is None:
            self._rng = np.random.default_rng([self.sim.seed, zlib.crc32(self.path.encode())])
        return self._rng

    @property
    def cycle(self) -> int:
        """The current cycle of this component's clock domain."""
        return self.sim.env.now // self.domain.period_ticks

    def process(
        self, gen: Generator[Any, Any, Any], name: str, *, daemon: bool = False
    ) -> simpy.Process:
        """Start a process owned by this component. A daemon is a service loop that may idle
        forever; a non-daemon still waiting when nothing else can happen is reported as stalled."""
        return self.sim.start_process(self, gen, name, daemon)

    def trace(
        self,
        category: str,
        name: str,
        start_ticks: int,
        dur_ticks: int = 0,
        *,
        phase: str = "slice",
        value: float | None = None,
        flow_out: int | None = None,
        flow_in: int | None = None,
        **args: Any,
    ) -> None:
        """Record one event. Callers check ``self.sim.trace_level`` first on hot paths."""
        p = self.domain.period_ticks
        self.sim.tracer.emit(
            start_ticks, dur_ticks, start_ticks // p, dur_ticks // p, self.domain.name, self.path,
            category, name, phase, value, flow_out, flow_in, args,
        )  # fmt: skip

    def check(self) -> None:
        """Build-time validation hook: raise :class:`BuildError` naming what is wrong."""

    def start(self) -> None:
        """Run-start hook: launch this component's processes."""

    def pending(self) -> str | list[str] | None:
        """If this component holds unfinished work, say what it is waiting for (stall reports):
        a line, or several."""
        return None

    def progress_count(self) -> int | None:
        """A count that grows whenever this component does useful work (computes or moves
        data); None if it keeps none. The run's livelock watchdog sums them."""
        return None

    def activity(self) -> dict[str, tuple[int, str]]:
        """What keeps running here without progress, for livelock reports: per sub-part path,
        (a count that grows with each run, e.g. tasks run; what ran last)."""
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path}>"
