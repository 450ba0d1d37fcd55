"""Contract: every model keeps its own cycles. Each built-in scenario, run with another clock
domain in the same simulation (idle, or ticking all along; an integer or a non-integer frequency
ratio; declared before or after the scenario's own), gives exactly the metrics it gives alone."""

from __future__ import annotations

from typing import Any

import pytest

from runner import scenario
from simcore import Component, Simulation

NOISY = {"wall_s", "kernel_events", "trace"}


class Ticker(Component):
    """Wakes up every cycle of its own domain for ``cycles`` cycles, doing nothing else: its
    events interleave with the scenario's at shared instants."""

    def __init__(self, sim: Simulation, freq_hz: int, cycles: int) -> None:
        super().__init__(sim, "ticker", domain=sim.domain("ticker", freq_hz))
        self.cycles = cycles

    def start(self) -> None:
        if self.cycles:
            self.process(self._tick(), "tick", daemon=True)

    def _tick(self) -> Any:
        for _ in range(self.cycles):
            yield self.env.timeout(self.domain.ticks(1))


def run(name: str, extra: tuple[str, int, int] | None = None) -> dict[str, Any]:
    """Metrics of scenario ``name``; ``extra`` = (where, freq_hz or 'x<ratio>', ticking cycles)."""
    sc = scenario.find(name)
    params = scenario.resolve_params(sc, [])
    sim = Simulation(seed=params.seed)
    if extra is not None and extra[0] == "first":
        Ticker(sim, extra[1], extra[2])
    handle = sc.kind.build(sim, params)
    if extra is not None and extra[0] == "after":
        Ticker(sim, extra[1], extra[2])
    result = sim.run()
    assert result.status == "completed", result.report
    metrics = sc.kind.metrics(sim, params, handle, result)
    return {k: v for k, v in metrics.items() if k not in NOISY}


def own_hz(name: str) -> int:
    sim = Simulation()
    sc = scenario.find(name)
    sc.kind.build(sim, scenario.resolve_params(sc, []))
    return sim.main_domain.freq_hz


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_other_clock_domains_change_no_metric(name):
    alone = run(name)
    hz = own_hz(name)
    variants = [
        ("after", 2 * hz, 0),  # idle, integer ratio
        ("after", 1_200_000_000, 0),  # idle, non-integer ratio (850 MHz: 24/17; 1 GHz: 6/5)
        ("after", 999_999_937, 2_000),  # a prime frequency, ticking: a huge common tick
        ("first", 1_200_000_000, 500),  # declared first: it is the run's main domain
    ]
    for extra in variants:
        assert run(name, extra) == alone, extra
