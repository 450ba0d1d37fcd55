"""The kernel: clock domains, components and ports, check phase, run control, stalls."""

from __future__ import annotations

from fractions import Fraction

import pytest

from simcore import BuildError, Component, ListTracer, Simulation
from simcore.clock import TimeBase


def test_time_base_is_lcm_of_domains():
    tb = TimeBase()
    wafer = tb.domain("wafer", 850_000_000)
    net = tb.domain("ns", 1_000_000_000)
    hbm = tb.domain("hbm", 1_200_000_000)
    tb.freeze()
    assert tb.tick_hz % 850_000_000 == 0
    assert tb.tick_hz % 1_000_000_000 == 0
    assert tb.tick_hz % 1_200_000_000 == 0
    assert wafer.period_ticks * wafer.freq_hz == tb.tick_hz
    # No drift: a million wafer cycles is exactly a million / 850 MHz.
    assert tb.to_seconds(wafer.ticks(10**6)) == Fraction(10**6, 850_000_000)
    # Conversions between domains are exact integer arithmetic.
    t = wafer.ticks(850)  # 1 us
    assert net.cycle_at(t) == 1000
    assert hbm.cycle_at(t) == 1200
    assert wafer.next_edge(t + 1) == wafer.ticks(851)
    assert wafer.next_edge(t) == t


def test_single_domain_tick_is_the_cycle():
    tb = TimeBase()
    d = tb.domain("wafer", 850_000_000)
    tb.freeze()
    assert d.period_ticks == 1


def test_domain_redefinition_is_an_error():
    tb = TimeBase()
    tb.domain("wafer", 850_000_000)
    with pytest.raises(BuildError) as err:
        tb.domain("wafer", 1_100_000_000)
    assert str(err.value) == (
        "clock domain 'wafer' is already defined at 850000000 Hz; cannot redefine it at "
        "1100000000 Hz (use another domain name)"
    )


def test_bad_frequency():
    with pytest.raises(BuildError) as err:
        TimeBase().domain("x", 8.5)
    assert (
        str(err.value) == "clock domain 'x': freq_hz must be a positive whole number of Hz, got 8.5"
    )


def test_paths_and_rng_streams_are_per_component():
    sim = Simulation(seed=3)
    dom = sim.domain("clk", 10)
    wafer = Component(sim, "wafer", domain=dom)
    pe = Component(wafer, "pe[3,4]")
    router = Component(pe, "router")
    assert router.path == "wafer/pe[3,4]/router"
    assert router.domain is dom
    assert sim.find("wafer/pe[3,4]").children == [router]
    a = router.rng.integers(0, 2**32, 4).tolist()
    sim2 = Simulation(seed=3)
    d2 = sim2.domain("clk", 10)
    r2 = Component(Component(Component(sim2, "wafer", domain=d2), "pe[3,4]"), "router")
    assert r2.rng.integers(0, 2**32, 4).tolist() == a
    assert pe.rng.integers(0, 2**32, 4).tolist() != a


def test_unconnected_ports_are_rejected_at_check():
    sim = Simulation()
    dom = sim.domain("clk", 10)
    c = Component(sim, "c", domain=dom)
    c.in_port("data")
    c.out_port("spare", optional=True)
    with pytest.raises(BuildError) as err:
        sim.check()
    assert str(err.value) == (
        "1 unconnected port(s): c.data (connect them, or create them with optional=True)"
    )


def test_double_connection_and_direction_errors():
    sim = Simulation()
    dom = sim.domain("clk", 10)
    a, b, c = (Component(sim, n, domain=dom) for n in "abc")
    out, inp, inp2 = a.out_port("o"), b.in_port("i"), c.in_port("i")
    sim.connect(out, inp, latency_cycles=1, capacity=1)
    with pytest.raises(BuildError) as err:
        sim.connect(out, inp2, latency_cycles=1, capacity=1)
    assert str(err.value) == (
        "cannot connect a.o -> c.i: a.o is already connected to channel 'a.o->b.i'"
    )
    with pytest.raises(BuildError) as err:
        sim.connect(inp2, inp, latency_cycles=1, capacity=1)
    assert str(err.value) == "cannot connect c.i -> b.i: c.i is an in port"


def test_duplicate_names_and_late_components():
    sim = Simulation()
    dom = sim.domain("clk", 10)
    Component(sim, "x", domain=dom)
    with pytest.raises(BuildError) as err:
        Component(sim, "x", domain=dom)
    assert str(err.value) == "two components are named 'x'"
    sim.check()
    with pytest.raises(BuildError) as err:
        Component(sim, "y", domain=dom)
    assert str(err.value) == "component 'y' created after the build phase"


class Waiter(Component):
    """Waits for one item that nobody sends."""

    def __init__(self, parent, name, **kw):
        super().__init__(parent, name, **kw)
        self.inp = self.in_port("in")

    def start(self):
        self.process(self._run(), "wait-for-data")

    def _run(self):
        yield self.inp.get()

    def pending(self):
        return "expects 1 item"


class Idle(Component):
    def __init__(self, parent, name, **kw):
        super().__init__(parent, name, **kw)
        self.out = self.out_port("out")


def test_stall_report_names_the_blocked_process_and_channel():
    sim = Simulation()
    dom = sim.domain("clk", 10)
    idle = Idle(sim, "idle", domain=dom)
    waiter = Waiter(sim, "waiter", domain=dom)
    sim.connect(idle.out, waiter.inp, latency_cycles=1, capacity=2, name="idle->waiter")
    result = sim.run()
    assert result.status == "stalled"
    assert result.report == [
        "waiter: 'wait-for-data' is waiting to receive from channel 'idle->waiter' "
        "(0/2 slots used, 0 in flight, 0 ready, 0 waiting put(s), 1 waiting get(s))",
        "waiter: expects 1 item",
    ]


class Ticker(Component):
    def start(self):
        self.process(self._run(), "tick")

    def _run(self):
        while True:
            yield self.env.timeout(self.domain.ticks(1))
            self.stats["ticks"] += 1
            if self.stats["ticks"] == 500 and self.sim.trace_level:
                raise KeyboardInterrupt


def test_run_stops_at_limit():
    sim = Simulation()
    dom = sim.domain("clk", 10)
    t = Ticker(sim, "t", domain=dom)
    result = sim.run(until_ticks=100)
    assert result.status == "limit"
    assert result.end_ticks == 100
    assert t.stats["ticks"] == 99  # the tick due at exactly 100 is not run


def test_ctrl_c_ends_the_run_cleanly():
    sim = Simulation(tracer=ListTracer())
    dom = sim.domain("clk", 10)
    Ticker(sim, "t", domain=dom)
    result = sim.run()
    assert result.status == "interrupted"
    assert sim.cycles() == 500


def test_progress_line_reports_cycles_rate_and_eta():
    import io

    from simcore import Progress

    stream = io.StringIO()
    sim = Simulation(progress=Progress(stream, after_s=0.0, every_s=0.0))
    dom = sim.domain("clk", 10)
    Component(sim, "t", domain=dom)
    sim.check()
    sim.env.run(until=250)
    sim.progress.update(sim, wall=2.0, events=1000, limit=1000)
    line = stream.getvalue().strip()
    assert line == "[wafersim] t = 250 clk cycles | 500 events/s | 25% | ETA 6 s"
