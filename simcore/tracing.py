"""The kernel's side of tracing: levels and the tracer protocol.

Components emit events through :meth:`simcore.component.Component.trace` after checking the run's
level, so a run with tracing off pays one integer comparison per would-be event. The Arrow writer
in :mod:`traces.writer` implements :class:`Tracer`; the kernel never imports it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Protocol


class TraceLevel(enum.IntEnum):
    """How much a run records. Each level includes the ones before it."""

    OFF = 0  # nothing: no file is written
    SUMMARY = 1  # run start/end, per-component totals, phase markers
    OPS = 2  # tasks and instructions
    DETAIL = 3  # wavelets, stalls, queue and link occupancy counters


LEVEL_NAMES = tuple(level.name.lower() for level in TraceLevel)


class Tracer(Protocol):
    level: int

    def emit(
        self,
        ts_ticks: int,
        dur_ticks: int,
        cycle: int,
        dur_cycles: int,
        domain: str,
        component: str,
        category: str,
        name: str,
        phase: str = "slice",
        value: float | None = None,
        flow_out: int | None = None,
        flow_in: int | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> None: ...

    def close(self) -> None: ...


class NullTracer:
    """Records nothing (level ``off``)."""

    level = 0

    def emit(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None


class ListTracer:
    """Keeps events in memory as dicts; for tests and small tools."""

    def __init__(self, level: int = TraceLevel.DETAIL) -> None:
        self.level = int(level)
        self.events: list[dict[str, Any]] = []

    def emit(
        self,
        ts_ticks: int,
        dur_ticks: int,
        cycle: int,
        dur_cycles: int,
        domain: str,
        component: str,
        category: str,
        name: str,
        phase: str = "slice",
        value: float | None = None,
        flow_out: int | None = None,
        flow_in: int | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        self.events.append(
            dict(ts_ticks=ts_ticks, dur_ticks=dur_ticks, cycle=cycle, dur_cycles=dur_cycles,
                 domain=domain, component=component, category=category, name=name, phase=phase,
                 value=value, flow_out=flow_out, flow_in=flow_in, args=dict(args or {}))
        )  # fmt: skip

    def close(self) -> None:
        return None
