"""Edge ports as components: another model, in its own clock domain, connects to the wafer's
edge with ``sim.connect``; back-pressure crosses the bridge both ways."""

from __future__ import annotations

import numpy as np
import pytest

from fabric.wavelet import Wavelet
from pe.program import Layout
from simcore import Component, Simulation
from simcore.errors import BuildError
from wafer.system import Wafer, WaferConfig

WAFER_HZ = 850_000_000


class Store(Component):
    """Sends ``items`` through its ``out`` port, recording the kernel time each was accepted."""

    def __init__(self, sim: Simulation, items: list, freq_hz: int) -> None:
        super().__init__(sim, "store", domain=sim.domain("store", freq_hz))
        self.out = self.out_port("out")
        self.items = items
        self.accepted: list[int] = []

    def start(self) -> None:
        self.process(self._send(), "send")

    def _send(self):
        for item in self.items:
            yield self.out.put(item)
            self.accepted.append(self.env.now)


class Sink(Component):
    """Takes one item every ``interval_cycles`` of its own clock."""

    def __init__(self, sim: Simulation, freq_hz: int, items: int, interval_cycles: int) -> None:
        super().__init__(sim, "sink", domain=sim.domain("sink", freq_hz))
        self.inp = self.in_port("in")
        self.items = items
        self.interval = interval_cycles
        self.got: list = []

    def start(self) -> None:
        self.process(self._take(), "take")

    def _take(self):
        for _ in range(self.items):
            self.got.append((yield self.inp.get()))
            yield self.env.timeout(self.domain.ticks(self.interval))


def row(n: int, words: int, *, preloaded=None, start_cycle: int = 1) -> tuple[Layout, dict]:
    """A row of ``n`` PEs: colour 6 enters from the west edge (``preloaded`` data, or through
    the edge's port), every PE keeps a copy and forwards it east, off the east edge."""
    bufs: dict = {}

    def code(pe):
        bufs[pe.x] = buf = pe.zeros("buf", words)
        rx = pe.fabin(colour=6, length=words, queue=0)
        pe.route(6, rx=["W"], tx=["RAMP", "E"])

        @pe.local_task(id=10)
        def recv(t):
            t.mov32(buf, rx, async_=True, activate=11)

        @pe.local_task(id=11)
        def done(t):
            t.mark("end")

        pe.start(recv)

    layout = Layout(n, 1)
    layout.set_rectangle_code(code)
    layout.add_edge_input(0, 0, "W", 6, preloaded, start_cycle=start_cycle)
    layout.add_edge_output(n - 1, 0, "E", 6)
    return layout, bufs


@pytest.mark.parametrize("fidelity", ["reference", "fast"])
def test_preloaded_stream_crosses_the_row_and_every_pe_keeps_a_copy(fidelity):
    n, words = 4, 40
    data = np.linspace(-1, 1, words).astype(np.float32)
    layout, bufs = row(n, words, preloaded=data, start_cycle=5)
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(fidelity=fidelity), layout)
    assert sim.run().status == "completed"
    for x in range(n):
        np.testing.assert_array_equal(bufs[x].read(wafer.ce(x, 0).sram), data)
    out = wafer.edge(n - 1, 0, "E")
    np.testing.assert_array_equal(out.data, data)
    assert out.cycles[0] == 5 + (n + 1)  # n + 1 links: edge -> PE 0 -> ... -> PE n-1 -> edge
    source = wafer.edge(0, 0, "W")
    # the receivers' ramp credit loops (5 per 8 cycles) pace the stream at 2.5 B/cycle; the
    # first wavelets fill the routers' buffers ahead of that, so a short stream runs a bit above
    assert 2.5 < source.bytes_per_cycle() < 2.7


@pytest.mark.parametrize("fidelity", ["reference", "fast"])
def test_a_store_in_another_domain_streams_through_the_wafer_into_a_slow_sink(fidelity):
    n, words = 3, 24
    data = np.arange(1, words + 1, dtype=np.float32) / 8
    sim = Simulation()
    layout, bufs = row(n, words)
    wafer = Wafer(sim, WaferConfig(fidelity=fidelity), layout)
    store = Store(sim, data.tolist(), 1_200_000_000)
    sink = Sink(sim, 100_000_000, words, 1)  # one item per 10 ns: far slower than the wafer
    sim.connect(store.out, wafer.edge(0, 0, "W").ports["in"], latency_cycles=3, capacity=4)
    sim.connect(wafer.edge(n - 1, 0, "E").ports["out"], sink.inp, latency_cycles=2, capacity=2)
    assert sim.run().status == "completed"
    for x in range(n):
        np.testing.assert_array_equal(bufs[x].read(wafer.ce(x, 0).sram), data)
    assert [w.data for w in sink.got] == data.tolist()
    assert all(not w.ctrl for w in sink.got)
    # The bridge: an item the channel delivers at tick T enters the wafer in the first wafer
    # cycle that starts after T (the store's first item is accepted at tick 0, arrives 3 store
    # cycles later).
    first_arrival = store.domain.ticks(3)
    source = wafer.edge(0, 0, "W")
    assert source.first_cycle == wafer.domain.cycle_at(first_arrival) + 1
    # Back-pressure: the sink takes an item every 10 ns, so the last one leaves the wafer no
    # earlier than (words - capacity - router buffers) sink periods after the first.
    out = wafer.edge(n - 1, 0, "E")
    span_ns = (out.cycles[-1] - out.cycles[0]) * 1e9 / WAFER_HZ
    assert span_ns >= 10 * (words - 2 - 2 - 1)
    assert out.unaccepted == 0


def test_edge_input_takes_control_wavelets_from_its_channel():
    seen = []

    def code(pe):
        pe.route(2, rx=["W"], tx=["RAMP"])

        @pe.data_task(colour=2, queue=1)
        def weight(t, value):
            seen.append(value)

        @pe.control_task(id=40, priority="high")
        def psum(t):
            seen.append("psum")

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    layout.add_edge_input(0, 0, "W", 2)
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(), layout)
    store = Store(sim, [1.5, Wavelet(ctrl=True, task_id=40), 2.5], 1_000_000_000)
    sim.connect(store.out, wafer.edge(0, 0, "W").ports["in"], latency_cycles=1, capacity=2)
    assert sim.run().status == "completed"
    assert seen == [1.5, "psum", 2.5]


def test_a_port_fed_edge_input_must_be_connected():
    layout, _ = row(2, 4)
    sim = Simulation()
    Wafer(sim, WaferConfig(), layout)
    with pytest.raises(BuildError) as err:
        sim.check()
    assert str(err.value) == (
        "1 unconnected port(s): wafer/edge[0,0,W].in (connect them, or create them with "
        "optional=True)"
    )


def test_preloaded_data_and_a_connected_port_are_refused():
    layout, _ = row(2, 4, preloaded=[1.0, 2.0, 3.0, 4.0])
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(), layout)
    store = Store(sim, [1.0], 1_000_000_000)
    sim.connect(store.out, wafer.edge(0, 0, "W").ports["in"], latency_cycles=1, capacity=1)
    with pytest.raises(BuildError) as err:
        sim.check()
    assert str(err.value) == (
        "wafer/edge[0,0,W]: has preloaded data and a connected 'in' port; feed it one way (drop "
        "the data from add_edge_input, or do not connect the port)"
    )


def test_a_stalled_bridge_is_named_in_the_stall_report():
    """The sink stops after 4 items: the output edge holds the rest back, and the report says
    which port is waiting on which channel."""
    layout, _ = row(2, 12)
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(), layout)
    store = Store(sim, list(range(12)), 1_000_000_000)
    sink = Sink(sim, 1_000_000_000, 4, 1)
    sim.connect(store.out, wafer.edge(0, 0, "W").ports["in"], latency_cycles=1, capacity=2)
    sim.connect(wafer.edge(1, 0, "E").ports["out"], sink.inp, latency_cycles=1, capacity=2)
    result = sim.run()
    assert result.status == "stalled"
    assert any(
        line.startswith("wafer/edge[1,0,E]: output on colour 6,") and "not yet accepted" in line
        for line in result.report
    ), result.report
