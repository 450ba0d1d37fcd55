"""simcore: the small kernel every wafersim model stands on, built around SimPy.

What it provides, and nothing more: integer time with clock domains (:mod:`simcore.clock`),
hierarchical components with ports, stats and seeded random streams (:mod:`simcore.component`),
channels that own latency, width and bounded buffering with lossless back-pressure
(:mod:`simcore.channel`), the build -> check -> run life cycle with stall diagnosis, Ctrl-C handling
and progress (:mod:`simcore.sim`), frozen dataclass configuration (:mod:`simcore.config`), the
tracing protocol (:mod:`simcore.tracing`) and user-facing errors (:mod:`simcore.errors`).

Fidelity: exact. Time is an integer tick; every domain's cycle is a whole number of ticks; channel
same-cycle behaviour is specified and independent of process order.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simcore.channel import Channel
    from simcore.clock import ClockDomain, TimeBase
    from simcore.component import Component, Port
    from simcore.errors import (
        BuildError,
        ConfigError,
        ScenarioError,
        SimulationStalled,
        TraceError,
        WafersimError,
    )
    from simcore.sim import Progress, RunResult, Simulation
    from simcore.tracing import ListTracer, NullTracer, TraceLevel

#: The module each name of the package's API comes from. Importing ``simcore`` (which
#: ``import simcore.errors`` does first) loads none of them: a name is imported on first use
#: (``from simcore import Simulation``, ``simcore.Channel``), so a command that needs only the
#: errors or the configuration does not load SimPy and numpy (docs/cli.md, "Start time").
_API = {
    "BuildError": "simcore.errors",
    "Channel": "simcore.channel",
    "ClockDomain": "simcore.clock",
    "Component": "simcore.component",
    "ConfigError": "simcore.errors",
    "ListTracer": "simcore.tracing",
    "NullTracer": "simcore.tracing",
    "Port": "simcore.component",
    "Progress": "simcore.sim",
    "RunResult": "simcore.sim",
    "ScenarioError": "simcore.errors",
    "Simulation": "simcore.sim",
    "SimulationStalled": "simcore.errors",
    "TimeBase": "simcore.clock",
    "TraceError": "simcore.errors",
    "TraceLevel": "simcore.tracing",
    "WafersimError": "simcore.errors",
}


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'simcore' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "BuildError",
    "Channel",
    "ClockDomain",
    "Component",
    "ConfigError",
    "ListTracer",
    "NullTracer",
    "Port",
    "Progress",
    "RunResult",
    "ScenarioError",
    "Simulation",
    "SimulationStalled",
    "TimeBase",
    "TraceError",
    "TraceLevel",
    "WafersimError",
]
