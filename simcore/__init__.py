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
