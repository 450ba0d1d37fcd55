"""The wafer model end to end: real data moves and computes, errors are clear, stalls explained."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric.routes import RouteError
from pe.memory import SramOverflowError
from pe.program import Layout
from runner import registry
from runner.scenario import Scenario, run_scenario
from simcore import Simulation
from simcore.errors import BuildError, SimulationStalled
from wafer.collectives import Collectives
from wafer.system import Wafer, WaferConfig
from workloads.wafer import wse
from workloads.wafer.calibration import t_bcast_reference, t_fmac_reference

FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def bcast_wafer(width: int, height: int, root: int, n: int, axis: str = "x", seed: int = 0):
    """Every row (axis x) or column (axis y) broadcasts its own vector from ``root``."""
    rng = np.random.default_rng(seed)
    lines = width if axis == "y" else height
    data = {i: rng.standard_normal(n).astype(np.float32) for i in range(lines)}
    bufs = {}

    def code(pe):
        coll = Collectives(pe)
        line, pos = (pe.y, pe.x) if axis == "x" else (pe.x, pe.y)
        buf = pe.array("buf", data[line] if pos == root else np.zeros(n, np.float32))
        bufs[(pe.x, pe.y)] = buf

        @pe.local_task(id=10)
        def main(t):
            t.mark("start")
            getattr(coll, axis).broadcast(t, root, buf, 11)

        @pe.local_task(id=11)
        def done(t):
            t.mark("end")

        pe.start(main)

    layout = Layout(width, height)
    layout.set_rectangle_code(code)
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(), layout)
    result = sim.run()
    return sim, wafer, result, data, bufs


@FAST
@given(
    width=st.integers(2, 6),
    height=st.integers(1, 3),
    n=st.integers(1, 40),
    root=st.integers(0, 5),
    axis=st.sampled_from(["x", "y"]),
    seed=st.integers(0, 1000),
)
def test_broadcast_delivers_root_data_everywhere(width, height, n, root, axis, seed):
    if axis == "y":
        width, height = height, width
    size = width if axis == "x" else height
    root %= size
    _, wafer, result, data, bufs = bcast_wafer(width, height, root, n, axis, seed)
    assert result.status == "completed", result.report
    for (x, y), buf in bufs.items():
        line = y if axis == "x" else x
        np.testing.assert_array_equal(buf.read(wafer.ce(x, y).sram), data[line])


@FAST
@given(n=st.integers(2, 7), length=st.integers(1, 30), seed=st.integers(0, 1000))
def test_chain_reduce_sums_the_row(n, length, seed):
    rng = np.random.default_rng(seed)
    vecs = {x: rng.standard_normal(length).astype(np.float32) for x in range(n)}
    bufs = {}

    def code(pe):
        coll = Collectives(pe)
        bufs[pe.x] = buf = pe.array("buf", vecs[pe.x])

        @pe.local_task(id=10)
        def main(t):
            coll.x.reduce_fadds(t, 0, buf, 11)

        @pe.local_task(id=11)
        def done(t):
            t.mark("end")

        pe.start(main)

    layout = Layout(n, 1)
    layout.set_rectangle_code(code)
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(), layout)
    result = sim.run()
    assert result.status == "completed", result.report
    # The chain adds from the far end towards the root, in FP32, in that order.
    expected = vecs[n - 1].copy()
    for x in range(n - 2, -1, -1):
        expected = (vecs[x] + expected).astype(np.float32)
    np.testing.assert_array_equal(bufs[0].read(wafer.ce(0, 0).sram), expected)
    assert all("end" in wafer.ce(x, 0).marks for x in range(n))


def test_fmac_calibration_every_length():
    kind = registry.KINDS["wse-fmac"]
    for i in [*range(1, 130), 200, 511, 1000, 1500, 2047, 2048]:
        m = run_scenario(Scenario("wse-fmac", "", kind, "", {}), wse.FmacParams(elements=i)).metrics
        assert abs(m["cycles"] - t_fmac_reference(i)) <= 2
        assert m["correct"]


@pytest.mark.parametrize(("pes", "elements"), [(4, 1), (16, 256), (16, 2048), (64, 64)])
def test_broadcast_calibration_points(pes, elements):
    kind = registry.KINDS["wse-bcast"]
    m = run_scenario(
        Scenario("wse-bcast", "", kind, "", {}), wse.BcastParams(elements=elements, pes=pes)
    ).metrics
    assert m["correct"]
    assert abs(m["cycles"] - t_bcast_reference(elements)) / t_bcast_reference(elements) < 0.08


def test_broadcast_time_grows_with_words_and_distance():
    spans = [bcast_wafer(8, 1, 0, n)[1].span_cycles() for n in (10, 100, 1000)]
    assert spans[0] < spans[1] < spans[2]
    near = bcast_wafer(4, 1, 0, 100)[1].span_cycles()
    far = bcast_wafer(32, 1, 0, 100)[1].span_cycles()
    assert far - near == 28  # one cycle per extra hop


def test_waiting_on_a_colour_nobody_sends_is_a_diagnosed_stall():
    def code(pe):
        buf = pe.zeros("buf", 8)
        rx = pe.fabin(colour=5, length=8, queue=2)
        pe.route(5, rx=["W"], tx=["RAMP"])

        @pe.local_task(id=10)
        def main(t):
            t.mov32(buf, rx, async_=True, activate=11)

        @pe.local_task(id=11)
        def done(t):
            t.mark("end")

        pe.start(main)

    layout = Layout(2, 1)
    layout.set_tile_code(1, 0, code)
    layout.set_colour_config(0, 0, 5, rx=["RAMP"], tx=["E"])
    sim = Simulation()
    Wafer(sim, WaferConfig(), layout)
    result = sim.run()
    assert result.status == "stalled"
    assert result.report == [
        "wafer/pe[1,0]: async mov32 on microthread 2 (input queue 2 -> memory): "
        "0 of 8 element(s) done; waiting for colour 5 on input queue 2 (0/4 wavelets); "
        "this router's colour 5: rx={W} tx={RAMP}"
    ]


def build(layout):
    sim = Simulation()
    Wafer(sim, WaferConfig(), layout)
    sim.check()


def test_route_errors_name_pes_and_colour():
    layout = Layout(3, 1)
    layout.set_colour_config(0, 0, 4, rx=["RAMP"], tx=["E"])
    layout.set_colour_config(1, 0, 4, rx=["N"], tx=["RAMP"])
    with pytest.raises(RouteError) as err:
        build(layout)
    assert str(err.value) == (
        "colour 4: pe[0,0] sends E to pe[1,0], which does not accept from W (it has "
        "rx={N} tx={RAMP}); add W to its rx or remove E from pe[0,0]'s tx"
    )
    layout = Layout(3, 1)
    layout.set_colour_config(2, 0, 7, rx=["RAMP"], tx=["E"])
    with pytest.raises(RouteError) as err:
        build(layout)
    assert str(err.value) == (
        "colour 7: pe[2,0] sends E off the edge of the 3x1 mesh (position 0: rx={RAMP} tx={E})"
    )


def test_route_loop_and_double_arrival_are_rejected():
    layout = Layout(2, 2)
    layout.set_colour_config(0, 0, 1, rx=["RAMP", "S"], tx=["E"])
    layout.set_colour_config(1, 0, 1, rx=["W"], tx=["S"])
    layout.set_colour_config(1, 1, 1, rx=["N"], tx=["W"])
    layout.set_colour_config(0, 1, 1, rx=["E"], tx=["N"])
    with pytest.raises(RouteError) as err:
        build(layout)
    assert str(err.value) == (
        "colour 1: the route from pe[0,0] loops (pe[0,0] -> pe[1,0] -> pe[1,1] -> pe[0,1]); "
        "a colour's routes must form a tree"
    )
    layout = Layout(2, 2)
    layout.set_colour_config(0, 0, 2, rx=["RAMP"], tx=["E", "S"])
    layout.set_colour_config(1, 0, 2, rx=["W"], tx=["S"])
    layout.set_colour_config(0, 1, 2, rx=["N"], tx=["E"])
    layout.set_colour_config(1, 1, 2, rx=["N", "W"], tx=["RAMP"])
    with pytest.raises(RouteError) as err:
        build(layout)
    assert str(err.value) == (
        "colour 2: wavelets from pe[0,0] reach pe[1,1] from both pe[0,1] and pe[1,0]; several "
        "rx are only safe when wavelets never arrive from two sides at once (use another colour "
        "for one of the paths)"
    )


def test_sram_overflow_is_clear():
    def code(pe):
        pe.zeros("big", 12_000)

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    with pytest.raises(SramOverflowError) as err:
        build(layout)
    assert str(err.value) == (
        "PE wafer/pe[0,0]: SRAM overflow allocating 'big' (48,000 B): 50,048 B needed (code "
        "2,048 B + data 48,000 B) but the PE has 49,152 B (48 kB); already used: 2,048 B (code "
        "2,048 B); reduce the buffer sizes or the tile size"
    )


def test_task_binding_errors():
    def code(pe):
        @pe.local_task(id=5)
        def a(t):
            pass

        @pe.local_task(id=5)
        def b(t):
            pass

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    with pytest.raises(BuildError) as err:
        build(layout)
    assert str(err.value) == (
        "wafer/pe[0,0]: task id 5 is bound twice ('a' and 'b'); give one of them another id"
    )


def test_same_seed_same_marks():
    a = bcast_wafer(6, 2, 1, 50, seed=3)[1]
    b = bcast_wafer(6, 2, 1, 50, seed=3)[1]
    assert [p.ce.marks for p in a.pes.values()] == [p.ce.marks for p in b.pes.values()]


@pytest.mark.parametrize("fidelity", ["reference", "fast"])
def test_counter_filters_scatter_a_broadcast(fidelity):
    """Root 0 streams 12 words; PE k (k = 1..3) keeps every third word starting at k - 1."""
    n, words = 4, 12
    data = np.arange(100, 100 + words, dtype=np.float32)
    bufs = {}

    def code(pe):
        if pe.x == 0:
            src = pe.array("src", data)
            out = pe.fabout(colour=3, length=words, queue=2)
            pe.route(3, rx=["RAMP"], tx=["E"])

            @pe.local_task(id=10)
            def send(t):
                t.mov32(out, src, async_=True)

            pe.start(send)
            return
        bufs[pe.x] = buf = pe.zeros("buf", words // 3)
        rx = pe.fabin(colour=3, length=words // 3, queue=2)
        pe.route(3, rx=["W"], tx=["RAMP"] + (["E"] if pe.x < n - 1 else []))
        pe.filter(3, "counter", period=3, index=pe.x - 1)

        @pe.local_task(id=10)
        def recv(t):
            t.mov32(buf, rx, async_=True)

        pe.start(recv)

    layout = Layout(n, 1)
    layout.set_rectangle_code(code)
    sim = Simulation()
    wafer = Wafer(sim, WaferConfig(fidelity=fidelity), layout)
    assert sim.run().status == "completed"
    for x in range(1, n):
        np.testing.assert_array_equal(bufs[x].read(wafer.ce(x, 0).sram), data[x - 1 :: 3])


def test_too_many_filters_is_an_error():
    def code(pe):
        for c in range(7):
            pe.route(c, rx=["RAMP"], tx=["RAMP"])
            pe.filter(c, "range", lo=0, hi=3)

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    with pytest.raises(BuildError) as err:
        build(layout)
    assert str(err.value) == (
        "wafer/pe[0,0]: 7 wavelet filters on colours [0, 1, 2, 3, 4, 5, 6], but a PE has 6 "
        "(fabric.filters_per_pe)"
    )


def test_edge_port_on_an_inner_side_is_rejected():
    layout = Layout(2, 1)
    layout.add_edge_input(0, 0, "E", 1, [1.0])
    with pytest.raises(BuildError) as err:
        build(layout)
    assert str(err.value) == (
        "edge port at pe[0,0] side E: that side is not on the edge of the mesh "
        "(a neighbour PE is there)"
    )


def test_edge_input_carries_control_wavelets_to_control_tasks():
    from fabric.wavelet import Wavelet

    seen = []

    def code(pe):
        pe.route(2, rx=["W"], tx=["RAMP"])

        @pe.data_task(colour=2, queue=1)
        def weight(t, value):
            seen.append(("data", value, t.now))

        @pe.control_task(id=40, priority="high")  # high: runs before the data queued behind it
        def psum(t):
            seen.append(("psum", None, t.now))

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    psum = Wavelet(ctrl=True, task_id=40)
    layout.add_edge_input(0, 0, "W", 2, [1.5, 2.5, psum, 3.5, psum, psum])
    sim = Simulation()
    Wafer(sim, WaferConfig(), layout)
    assert sim.run().status == "completed"
    # Control wavelets wait their turn behind the data, and each one triggers one run.
    assert [(k, v) for k, v, _ in seen] == [
        ("data", 1.5), ("data", 2.5), ("psum", None), ("data", 3.5), ("psum", None),
        ("psum", None),
    ]  # fmt: skip


def test_accumulators_in_the_software_cache():
    data = np.arange(8, dtype=np.float32)
    got = {}

    def code(pe):
        src = pe.array("src", data)
        acc = pe.cache_zeros("acc", 8)

        @pe.local_task(id=10)
        def main(t):
            t.fadds(acc, acc, src)
            t.fadds(acc, acc, src)
            got["acc"] = pe.read(acc)

        pe.start(main)
        with pytest.raises(BuildError) as err:
            pe.cache_zeros("too_big", 100)
        assert str(err.value) == (
            "PE wafer/pe[0,0]: cache overflow allocating 'too_big' (400 B): 432 B needed (data "
            "432 B) but the cache has 256 B; already used: 32 B ('acc' 32 B); keep fewer "
            "accumulators in the cache or move some to SRAM"
        )

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    sim = Simulation()
    Wafer(sim, WaferConfig(), layout)
    assert sim.run().status == "completed"
    np.testing.assert_array_equal(got["acc"], 2 * data)


def row_of(code, width: int):
    """A 1-row wafer running ``code`` on every PE: (simulation, wafer), built, not yet run."""
    layout = Layout(width, 1)
    layout.set_rectangle_code(code)
    sim = Simulation()
    return sim, Wafer(sim, WaferConfig(), layout)


@pytest.mark.parametrize("rx_after", ["W", "N"])
def test_a_colour_in_teardown_holds_wavelets_from_any_side_until_it_is_rerouted(rx_after):
    """A PE may be reconfigured after its neighbour has started sending (the collectives do
    this whenever PEs reach a collective at different times): the wavelets wait in the router
    while the colour is in teardown, and must come from an accepted side when it leaves."""
    data = np.arange(1, 5, dtype=np.float32)
    got = {}

    def code(pe):
        pe.route(3, rx=[], tx=[], teardown=True)
        buf = pe.array("buf", data) if pe.x == 0 else pe.zeros("buf", 4)

        @pe.local_task(id=10)
        def main(t):
            if pe.x == 0:
                t.set_route(3, rx=["RAMP"], tx=["E"])
                t.exit_teardown(3)
                t.mov32(pe.fabout(3, 4, 2), buf, async_=True)
            else:
                for _ in range(8):  # busy long after the wavelets have arrived
                    t.fmacs(buf, buf, buf, 0.0)
                t.set_route(3, rx=[rx_after], tx=["RAMP"])
                t.exit_teardown(3)
                t.mov32(buf, pe.fabin(3, 4, 2), async_=True, activate=11)

        @pe.local_task(id=11)
        def done(t):
            got["data"] = pe.read(buf)

        pe.start(main)

    sim, _ = row_of(code, 2)
    if rx_after == "W":
        assert sim.run().status == "completed"
        np.testing.assert_array_equal(got["data"], data)
    else:
        with pytest.raises(RouteError) as err:
            sim.run()
        assert str(err.value) == (
            "colour 3: pe[1,0] left teardown holding 2 wavelet(s) from W, which it does not "
            "accept (rx={N} tx={RAMP})"
        )


def test_async_operations_read_and_write_the_software_cache():
    """A stream sent from a cache tensor, added to a cache tensor on the way, lands in one."""
    data = np.arange(1, 7, dtype=np.float32)
    got = {}

    def code(pe):
        x = pe.x
        acc = pe.cache_zeros("acc", 6)
        src = pe.array("src", data * (x + 1))
        if x < 2:
            pe.route(4 + x, rx=["RAMP"], tx=["E"])
        if x > 0:
            pe.route(3 + x, rx=["W"], tx=["RAMP"])

        @pe.local_task(id=10)
        def main(t):
            if x < 2:  # acc = 2 (x + 1) · data in the cache; SRAM holds (x + 1) · data
                t.fadds(acc, acc, src)
                t.fadds(acc, acc, src)
            if x == 0:
                t.mov32(pe.fabout(4, 6, 2), acc, async_=True)
            elif x == 1:
                t.fadds(pe.fabout(5, 6, 2), pe.fabin(4, 6, 3), acc, async_=True)
            else:
                t.mov32(acc, pe.fabin(5, 6, 3), async_=True, activate=11)

        @pe.local_task(id=11)
        def done(t):
            got["acc"] = pe.read(acc)

        pe.start(main)

    sim, _ = row_of(code, 3)
    assert sim.run().status == "completed"
    np.testing.assert_array_equal(got["acc"], 6 * data)  # PE 0's 2x plus PE 1's 4x


def three_broadcasts(keep: bool) -> int:
    """Three broadcasts from one root along a row of 4; checks the data, returns the cycles."""
    n, width, root = 16, 4, 1
    rng = np.random.default_rng(3)
    vectors = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    got = {}

    def code(pe):
        coll = Collectives(pe, y_colours=None)
        bufs = [pe.array(f"v{i}", v) if pe.x == root else pe.zeros(f"v{i}", n)
                for i, v in enumerate(vectors)]  # fmt: skip
        state = {"i": 0}

        @pe.local_task(id=10)
        def step(t):
            i = state["i"]
            if i == 0:
                t.mark("start")
            if i == len(vectors):
                t.mark("end")
                got[pe.x] = [pe.read(b) for b in bufs]
                return
            state["i"] += 1
            coll.x.broadcast(t, root, bufs[i], 10, keep_routes=keep)

        pe.start(step)

    sim, wafer = row_of(code, width)
    assert sim.run().status == "completed"
    for x in range(width):
        for v, g in zip(vectors, got[x], strict=True):
            np.testing.assert_array_equal(g, v)
    return wafer.span_cycles()


def test_repeated_broadcast_from_one_root_can_keep_its_routes():
    """With keep_routes the second and third broadcasts skip the 9 router writes of clearing
    the filters, resetting the switches and writing rx and tx; the data is the same."""
    saved = three_broadcasts(False) - three_broadcasts(True)
    assert saved == 2 * 9 * WaferConfig().ce.route_write_cycles


def spin_layout(stop_after: int | None = None) -> Layout:
    """PE (0,0) re-activates a task forever, waiting for a flag nobody sets (PE (1,0) idles).
    With ``stop_after`` it gives up after that many runs (a long wait that does end)."""
    runs = {"n": 0}

    def code(pe):
        @pe.local_task(id=10)
        def poll(t):
            runs["n"] += 1
            if stop_after is None or runs["n"] < stop_after:
                t.activate(10)

        if pe.x == 0:
            pe.start(poll)

    layout = Layout(2, 1)
    layout.set_rectangle_code(code)
    return layout


def test_a_task_spinning_without_progress_is_a_diagnosed_livelock():
    sim = Simulation(livelock_cycles=50_000)
    Wafer(sim, WaferConfig(), spin_layout())
    result = sim.run()
    assert result.status == "livelock"
    head, *who = result.report
    assert head.startswith("no progress for ") and "livelock_cycles = 50,000" in head
    assert len(who) == 1 and who[0].startswith("wafer/pe[0,0]: ")
    assert who[0].endswith("runs in the last batch, the last: task 'poll' (id 10)")
    # off: the same program ends only at a time limit
    sim = Simulation(livelock_cycles=0)
    Wafer(sim, WaferConfig(), spin_layout())
    assert sim.run(until_ticks=200_000).status == "limit"


def test_a_long_wait_that_ends_is_no_livelock():
    sim = Simulation(livelock_cycles=1_000_000)
    Wafer(sim, WaferConfig(), spin_layout(stop_after=100_000))  # ~400,000 cycles of polling
    assert sim.run().status == "completed"


def test_cli_reports_a_livelock_and_keeps_the_trace(tmp_path, capsys):
    from app.cli import main
    from runner import scenario
    from traces.reader import read_trace

    kind = registry.WorkloadKind(
        name="spin", summary="a task polls forever", params=registry.ScenarioParams,
        build=lambda sim, p: Wafer(sim, WaferConfig(), spin_layout()),
        metrics=lambda *a: {},
    )  # fmt: skip
    sc = scenario.Scenario("spin", "<test>", kind, "", {})
    trace = tmp_path / "spin.arrows"
    with pytest.raises(SimulationStalled) as err:
        scenario.run_scenario(
            sc, registry.ScenarioParams(), trace_path=str(trace), livelock_cycles=20_000
        )
    assert str(err.value) == (
        "scenario 'spin' livelocked at cycle 80,000:\n"
        "  no progress for 80,000 cycles (since cycle 0; limit livelock_cycles = 20,000): nothing "
        "computed or moved, but events keep coming\n"
        "  wafer/pe[0,0]: 10,000 runs in the last batch, the last: task 'poll' (id 10)\n"
        "(raise --livelock-cycles if the program really works that long without computing or "
        "moving data)"
    )
    end = read_trace(str(trace)).table.to_pylist()[-1]
    assert end["name"] == "end" and end["args_str"] and ("status", "livelock") in end["args_str"]
    assert main(["run", "wse-fmac", "--livelock-cycles", "0", "--json"]) == 0
    capsys.readouterr()


def test_more_switch_positions_than_a_router_has_is_an_error():
    def code(pe):
        pe.route(3, rx=["RAMP"], tx=["E"], positions=[(["RAMP"], ["W"])] * 4)

    layout = Layout(2, 1)
    layout.set_tile_code(0, 0, code)
    with pytest.raises(RouteError) as err:
        build(layout)
    assert str(err.value) == (
        "wafer/pe[0,0]: colour 3 has 5 switch positions, but a router has 4 per colour "
        "(fabric.switch_positions); use fewer positions or another colour"
    )


def test_the_timestamp_counter_wraps_at_its_width():
    seen = []

    def code(pe):
        @pe.local_task(id=10)
        def main(t):
            t.now += 1000
            seen.append(t.timestamp())

        pe.start(main)

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    sim = Simulation()
    cfg = WaferConfig()
    Wafer(sim, dataclasses.replace(cfg, pe=dataclasses.replace(cfg.pe, timestamp_bits=8)), layout)
    sim.run()
    assert seen == [(1000 + 3 + 1) % 256]
