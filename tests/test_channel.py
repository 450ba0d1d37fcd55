"""Cycle-exact behaviour of channels: latency, width, credits, pipe vs registered release."""

from __future__ import annotations

import pytest
from kernel_harness import run_pair, table

from simcore import BuildError, Component, Simulation


@pytest.mark.parametrize("sink_first", [False, True])
@pytest.mark.parametrize(
    ("latency", "capacity", "width", "pipe", "accept", "recv"),
    [
        # L=1, 2 credits, registered release: full rate.
        (1, 2, 1, False, [0, 1, 2, 3], [1, 2, 3, 4]),
        # L=1, 1 credit, registered release: the credit loop halves the rate.
        (1, 1, 1, False, [0, 2, 4, 6], [1, 3, 5, 7]),
        # The same with the pipe rule: the freed slot is reused in the same cycle.
        (1, 1, 1, True, [0, 1, 2, 3], [1, 2, 3, 4]),
        # Bypass (L=0): the receiver takes the item in the cycle it is sent.
        (0, 1, 1, False, [0, 1, 2, 3], [0, 1, 2, 3]),
        # Bypass pipe with width 2: two items per cycle end to end.
        (0, 1, 2, True, [0, 0, 1, 1], [0, 0, 1, 1]),
        # Width 2, 4 credits, L=1: two per cycle.
        (1, 4, 2, False, [0, 0, 1, 1], [1, 1, 2, 2]),
        # L=3, 2 credits: 2 items per 4-cycle credit loop.
        (3, 2, 1, False, [0, 1, 4, 5], [3, 4, 7, 8]),
    ],
)
def test_cycle_tables(latency, capacity, width, pipe, accept, recv, sink_first):
    log, _, _ = run_pair(
        latency=latency, capacity=capacity, width=width, pipe=pipe, sink_first=sink_first
    )
    assert table(log, "accept") == accept
    assert table(log, "recv") == recv


def test_back_pressure_from_slow_sink():
    # The sink takes an item at cycles 5, 10, 15, 20: the source stalls on credits.
    log, _, (_, _, chan) = run_pair(latency=1, capacity=2, dst_gaps=[5, 5, 5, 5])
    assert table(log, "recv") == [5, 10, 15, 20]
    # Items 0 and 1 fill both credits; each later item waits for the slot freed the cycle before.
    assert table(log, "accept") == [0, 1, 6, 11]
    # Items 2 and 3 find both slots taken (congestion); item 1 waited only for the width.
    assert chan.blocked_puts == 2


def test_back_pressure_pipe_reuses_slot_same_cycle():
    log, _, _ = run_pair(latency=1, capacity=2, pipe=True, dst_gaps=[5, 5, 5, 5])
    assert table(log, "accept") == [0, 1, 5, 10]


def test_items_arrive_in_order_and_intact():
    _, _, (_, dst, chan) = run_pair(latency=2, capacity=3, items=50, dst_gaps=[0, 3] * 25)
    assert dst.got == list(range(50))
    assert chan.items == 50
    assert chan.occupancy == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"latency_cycles": -1, "capacity": 1}, "latency_cycles must be an integer >= 0, got -1"),
        ({"latency_cycles": 1, "capacity": 0}, "capacity must be an integer >= 1, got 0"),
        (
            {"latency_cycles": 1, "capacity": 1, "items_per_cycle": 1.5},
            "items_per_cycle must be an integer >= 1, got 1.5",
        ),
    ],
)
def test_bad_channel_parameters(kwargs, message):
    sim = Simulation()
    dom = sim.domain("clk", 100)
    a = Component(sim, "a", domain=dom)
    b = Component(sim, "b", domain=dom)
    with pytest.raises(BuildError) as err:
        sim.connect(a.out_port("o"), b.in_port("i"), **kwargs)
    assert str(err.value) == f"channel 'a.o->b.i': {message}"
