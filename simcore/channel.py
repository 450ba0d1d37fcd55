"""Channels: links that own latency, width and bounded buffering with back-pressure.

Latency lives on the link, not on the components (the SST habit). A channel is clocked in the
domain of its sender and has three parameters:

``latency_cycles`` (L >= 0)
    An item accepted in cycle ``t`` becomes visible to the receiver in cycle ``t + L``.
    ``L = 0`` is a *bypass* channel: the receiver can take the item in the same cycle.
``items_per_cycle`` (W >= 1)
    At most W items are accepted per cycle; further puts wait for the next cycle.
``capacity`` (C >= 1)
    Slots shared by items in flight and items waiting at the receiver: credit-based, lossless
    flow control. A put with no free slot waits (back-pressure); nothing is ever dropped.

and one same-cycle rule, ``pipe``:

``pipe=False`` (default, a registered credit return)
    A slot freed by a get in cycle ``t`` can be reused by a put from cycle ``t + 1``.
    One stream through the channel sustains ``min(W, C / (L + 1))`` items per cycle.
``pipe=True`` (the PyMTL pipe-queue rule)
    A slot freed by a get in cycle ``t`` can be reused by a put in the same cycle ``t``, whichever
    of the two the kernel happens to run first. One stream sustains ``min(W, C / max(L, 1))``.

These rules are independent of the order in which same-cycle processes run: a put issued before
the get in the same cycle is granted when the get frees the slot (pipe) or at the next edge
(registered). Waiting puts and gets are served first-come first-served.

Cost: a put or get that can complete at once schedules one event; an arrival timer is armed only
while a receiver is actually waiting.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import simpy

from simcore.errors import BuildError

if TYPE_CHECKING:
    from simcore.clock import ClockDomain
    from simcore.sim import Simulation


class ChannelPut(simpy.Event):
    """Fires when the channel has accepted ``item``."""

    __slots__ = ("channel", "item")

    def __init__(self, channel: Channel, item: Any) -> None:
        super().__init__(channel.env)  # type: ignore[arg-type]  # SimPy's env, typed KernelEnv
        self.channel = channel
        self.item = item


class ChannelGet(simpy.Event):
    """Fires with the next item once one has arrived."""

    __slots__ = ("channel",)

    def __init__(self, channel: Channel) -> None:
        super().__init__(channel.env)  # type: ignore[arg-type]  # SimPy's env, typed KernelEnv
        self.channel = channel


class Channel:
    """A point-to-point link with latency, width and capacity. See the module docstring."""

    def __init__(
        self,
        sim: Simulation,
        name: str,
        *,
        domain: ClockDomain,
        latency_cycles: int,
        capacity: int,
        items_per_cycle: int = 1,
        pipe: bool = False,
    ) -> None:
        for key, value, lo in (
            ("latency_cycles", latency_cycles, 0),
            ("capacity", capacity, 1),
            ("items_per_cycle", items_per_cycle, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise BuildError(
                    f"channel '{name}': {key} must be an integer >= {lo}, got {value!r}"
                )
        self.sim = sim
        self.env = sim.env
        self.name = name
        self.domain = domain
        self.latency_cycles = latency_cycles
        self.capacity = capacity
        self.items_per_cycle = items_per_cycle
        self.pipe = pipe
        self.src: Any = None
        self.dst: Any = None
        self.items = 0  # items accepted so far
        self.blocked_puts = 0  # puts that found every slot taken (congestion; not width waits)
        self._period = 0
        self._latency = 0
        self._arrived: deque[Any] = deque()
        self._flight: deque[tuple[int, Any]] = deque()
        self._occupied = 0
        self._getters: deque[ChannelGet] = deque()
        self._putters: deque[ChannelPut] = deque()
        self._cycle_start = -1
        self._accepted = 0
        self._freed_start = -1
        self._freed = 0
        self._arrival_armed = False
        self._wake_at = -1
        self._serving = False

    def freeze(self) -> None:
        """Fix tick-valued timing once the time base is known (called by the simulation)."""
        self._period = self.domain.period_ticks
        self._latency = self.latency_cycles * self._period

    # -- state queries -------------------------------------------------------------------------
    @property
    def occupancy(self) -> int:
        """Slots in use: items in flight plus items waiting at the receiver."""
        return self._occupied

    def describe(self) -> str:
        return (
            f"channel '{self.name}' ({self._occupied}/{self.capacity} slots used, "
            f"{len(self._flight)} in flight, {len(self._arrived)} ready, "
            f"{len(self._putters)} waiting put(s), {len(self._getters)} waiting get(s))"
        )

    # -- sender side ---------------------------------------------------------------------------
    def put(self, item: Any) -> ChannelPut:
        ev = ChannelPut(self, item)
        if not self._putters and self._accept(item):
            ev.succeed()
        else:
            if self._full():
                self.blocked_puts += 1
            self._putters.append(ev)
            self._plan_wake()
        return ev

    def _accept(self, item: Any) -> bool:
        now = self.env._now
        start = now - now % self._period
        if start != self._cycle_start:
            self._cycle_start = start
            self._accepted = 0
        if self._accepted >= self.items_per_cycle:
            return False
        held = self._freed if self._freed_start == start else 0
        if self._occupied + held >= self.capacity:
            return False
        self._accepted += 1
        self._occupied += 1
        self.items += 1
        if self._latency == 0:
            self._arrived.append(item)
            if self._getters:
                self._serve_getters()
        else:
            self._flight.append((now + self._latency, item))
            if self._getters and not self._arrival_armed:
                self._arm_arrival()
        return True

    def _full(self) -> bool:
        """No slot free for a put now (items in flight or waiting, plus slots freed this cycle
        that a registered channel cannot reuse yet): the back-pressure ``blocked_puts`` counts.
        A put that waits only for the next cycle's width is not congestion."""
        now = self.env._now
        start = now - now % self._period
        held = self._freed if self._freed_start == start else 0
        return self._occupied + held >= self.capacity

    def _serve_putters(self, _event: Any = None) -> None:
        if _event is not None:
            self._wake_at = -1
        if self._serving:
            return  # re-entered via accept -> get -> release; the outer loop carries on
        self._serving = True
        putters = self._putters
        try:
            while putters and self._accept(putters[0].item):
                putters.popleft().succeed()
        finally:
            self._serving = False
        if putters:
            self._plan_wake()

    def _plan_wake(self) -> None:
        """Waiting puts retry at the next edge if this cycle's width or held slots block them;
        if the channel is simply full they wait for a get instead."""
        now = self.env._now
        start = now - now % self._period
        held = self._freed if self._freed_start == start else 0
        width_spent = self._cycle_start == start and self._accepted >= self.items_per_cycle
        if not (width_spent or held):
            return
        at = start + self._period
        if self._wake_at == at:
            return
        self._wake_at = at
        self.env.timeout(at - now).callbacks.append(self._serve_putters)

    # -- receiver side -------------------------------------------------------------------------
    def get(self) -> ChannelGet:
        ev = ChannelGet(self)
        if not self._getters:
            self._collect()
            if self._arrived:
                ev.succeed(self._arrived.popleft())
                self._release()
                return ev
        self._getters.append(ev)
        if self._flight and not self._arrival_armed:
            self._arm_arrival()
        return ev

    def _collect(self) -> None:
        now = self.env._now
        flight = self._flight
        while flight and flight[0][0] <= now:
            self._arrived.append(flight.popleft()[1])

    def _arm_arrival(self) -> None:
        self._arrival_armed = True
        delay = self._flight[0][0] - self.env._now
        self.env.timeout(delay).callbacks.append(self._on_arrival)

    def _on_arrival(self, _event: Any) -> None:
        self._arrival_armed = False
        self._collect()
        self._serve_getters()
        if self._getters and self._flight and not self._arrival_armed:
            self._arm_arrival()

    def _serve_getters(self) -> None:
        getters, arrived = self._getters, self._arrived
        while getters and arrived:
            getters.popleft().succeed(arrived.popleft())
            self._release()

    def _release(self) -> None:
        self._occupied -= 1
        if self.pipe:
            if self._putters:
                self._serve_putters()
            return
        now = self.env._now
        start = now - now % self._period
        if self._freed_start != start:
            self._freed_start = start
            self._freed = 0
        self._freed += 1
        if self._putters:
            self._plan_wake()

    def __repr__(self) -> str:
        return f"<Channel {self.name} L={self.latency_cycles} C={self.capacity}>"
