"""TPU slices and ICI links: wraparound rules per generation, shapes rejected with the rule
named, routes, and the links' per-packet timing (serialisation, hop latency, cut-through over
hops, credits and back-pressure, sharing a link) in exact ticks, against the idle path's formula."""

from __future__ import annotations

import itertools
import math

import pytest

from simcore import Component, ConfigError, Simulation
from tpu.chips import CHIPS
from tpu.config import IciConfig
from tpu.network import Flow, IciNetwork, packet_count
from tpu.topology import Slice


def topo(chip: str, *shape: int) -> Slice:
    return Slice(CHIPS[chip], shape)


@pytest.mark.parametrize(
    ("chip", "shape", "wrap"),
    [
        ("v5e", (16, 16), (True, True)),
        ("v5e", (8, 16), (False, True)),
        ("v5e", (4, 4), (False, False)),
        ("v6e", (16, 4), (True, False)),
        ("v3", (32, 32), (True, True)),
        ("v5p", (4, 4, 4), (True, True, True)),
        ("v5p", (4, 4, 8), (True, True, True)),
        ("v4p", (2, 2, 2), (False, False, False)),
        ("v5p", (2, 2, 1), (False, False, False)),
        ("v5p", (4, 4, 2), (False, False, False)),
    ],
)
def test_wraparound_rules(chip, shape, wrap):
    assert topo(chip, *shape).wrap == wrap


def test_the_graph_has_one_edge_per_link_direction():
    t = topo("v5e", 16, 16)
    assert t.graph.number_of_edges() == 16 * 16 * 4
    assert t.graph.edges[(15, 3), (0, 3)] == {"axis": 0, "sign": 1, "wrap": True}
    line = topo("v5e", 4, 4)
    assert line.graph.number_of_edges() == 2 * (3 * 4) * 2  # 12 links per axis, two ways
    assert line.neighbour((3, 0), 0, 1) is None
    ring2 = topo("v5p", 4, 4, 4)
    assert ring2.graph.out_degree((0, 0, 0)) == 6


@pytest.mark.parametrize(
    ("chip", "shape", "message"),
    [
        ("v5e", (4, 4, 4), "config key 'topology' = '4x4x4': v5e slices are 2-D (v5e's ICI is a "
         "2-D torus with 4 neighbours per chip); allowed: 2 axes up to 16x16"),
        ("v5p", (4, 4), "config key 'topology' = '4x4': v5p slices are 3-D (v5p's ICI is a 3-D "
         "torus with 6 neighbours per chip); allowed: 3 axes up to 16x20x28"),
        ("v5e", (32, 4), "config key 'topology' = '32x4': axis x has 32 chips but a v5e pod has "
         "16 on it; allowed: 1 .. 16 on axis x (pod 16x16)"),
        ("v5e", (4, 0), "config key 'topology' = '4x0': every axis needs at least one chip; "
         "allowed: >= 1 per axis"),
    ],
)  # fmt: skip
def test_impossible_shapes_name_the_rule(chip, shape, message):
    with pytest.raises(ConfigError) as err:
        topo(chip, *shape)
    assert str(err.value) == message


def test_dimension_order_route_takes_the_short_way_round():
    t = topo("v5e", 16, 16)
    assert t.route((0, 0), (2, 14)) == [(0, 0), (1, 0), (2, 0), (2, 15), (2, 14)]
    line = topo("v5e", 4, 4)
    assert line.route((3, 3), (0, 0)) == [(3, 3), (2, 3), (1, 3), (0, 3), (0, 2), (0, 1), (0, 0)]


def test_minimal_paths_leave_by_different_ports_first():
    t = topo("v5e", 16, 16)
    paths = t.minimal_paths((0, 0), (8, 8))
    assert len(paths) == 8
    first = paths[:4]
    assert sorted(p[1] for p in first) == [(0, 1), (0, 15), (1, 0), (15, 0)]
    links = [set(itertools.pairwise(p)) for p in first]
    assert all(not (a & b) for i, a in enumerate(links) for b in links[i + 1 :])


def test_packet_count():
    assert [packet_count(n, 4) for n in (0, 3, 4, 8, 10)] == [1, 1, 1, 2, 3]


def make_net(chip="v5e", shape=(4, 4), **ici):
    """A 1 GHz ICI on a v5e 4x4 line by default; 4.5e10 B/s: 45 bytes per ns."""
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    cfg = IciConfig(**{"hop_latency_ns": 1000, "packet_bytes": 4500, **ici})
    net = IciNetwork(top, topo(chip, *shape), cfg)
    sim.check()  # freeze the time base: flows may start before the run
    return sim, net


def test_one_hop_packets_serialise_back_to_back_then_wait_the_latency():
    sim, net = make_net()
    seen = []

    def visit(flow, pkt):
        seen.append((pkt.index, sim.env.now))
        return True

    flow = Flow(net, [(0, 0), (1, 0)], 10_000, visit=visit)
    flow.start()
    sim.run()
    # packets 4500, 4500, 1000 B: 100, 100, 22.2 ns of serialisation (the rounding carried:
    # 10000 B end at ceil(222.2) = 223 ns), each tail a hop latency later
    assert seen == [(0, 1100), (1, 1200), (2, 1223)]
    assert (flow.first_arrival, flow.last_arrival) == (1100, 1223)
    link = net.link((0, 0), (1, 0))
    assert (link.busy_ticks, link.bytes, link.packets) == (223, 10_000, 3)


def test_packets_cut_through_chips():
    """A packet's head moves on after the hop latency: chips on the way see heads at
    h x 1000 + i x 100 ns; the tails reach the end at 3 x 1000 + (i + 1) x 100 ns."""
    sim, net = make_net()
    arrivals = []

    def visit(flow, pkt):
        arrivals.append((pkt.hop, pkt.index, sim.env.now))
        return True

    flow = Flow(net, [(0, 0), (1, 0), (2, 0), (3, 0)], 9000, visit=visit)
    flow.start()
    sim.run()
    assert arrivals == [
        (1, 0, 1000), (1, 1, 1100), (2, 0, 2000), (2, 1, 2100), (3, 0, 3100), (3, 1, 3200),
    ]  # fmt: skip


@pytest.mark.parametrize("chip", ["v3", "v4p", "v5p", "v5e", "v6e"])
@pytest.mark.parametrize("nbytes", [1000, 4096, 1_000_000, 17_000_000])
def test_an_idle_path_follows_its_formula(chip, nbytes):
    """First byte after hops x latency + one packet's serialisation; the whole message after
    hops x latency + its serialisation (to within the cycle of rounding), at the default packet
    and buffer sizes on every generation (the buffer covers the credit round trip)."""
    shape = (4, 4, 4) if chip in ("v4p", "v5p") else (4, 4)
    sim, net = make_net(chip, shape, packet_bytes=IciConfig().packet_bytes)
    path = [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (3, 2)]
    if len(shape) == 3:
        path = [(*c, 0) for c in path] + [(3, 2, 1)]
    flow = Flow(net, path, nbytes)
    flow.start()
    sim.run()
    w = CHIPS[chip].ici_oneway_bytes_per_s
    hops = len(path) - 1
    packet = min(nbytes, IciConfig().packet_bytes)
    assert flow.first_arrival == hops * 1000 + math.ceil(packet * 1e9 / w)
    assert flow.last_arrival == hops * 1000 + math.ceil(nbytes * 1e9 / w)


def test_flows_sharing_a_link_take_turns_packet_by_packet():
    sim, net = make_net()
    a = Flow(net, [(0, 0), (1, 0), (2, 0)], 4500)
    b = Flow(net, [(1, 0), (2, 0)], 4500)
    a.start()
    b.start()
    sim.run()
    assert b.last_arrival == 1100  # b was first on link 1->2
    assert a.last_arrival == 2000 + 100  # a's head reached chip 1 at 1000: link 1->2 was free
    c_sim, c_net = make_net()
    x = Flow(c_net, [(0, 0), (1, 0)], 45_000)
    y = Flow(c_net, [(0, 0), (1, 0)], 45_000)
    x.start()
    y.start()
    c_sim.run()
    # ten packets each; x's first is on the link before y asks, then they alternate
    # (x x y x y ... y): x's last leaves at 1800 ns, y's at 2000 ns
    assert (x.last_arrival, y.last_arrival) == (2800, 3000)


def test_one_credit_stalls_the_link_for_the_round_trip():
    """A one-packet buffer: each packet waits for the credit of the one before, which returns
    a hop latency after that packet's tail entered the far chip's HBM (100 + 2 x 1000 ns)."""
    sim, net = make_net(buffer_bytes=4500)
    f = Flow(net, [(0, 0), (1, 0)], 13_500)
    f.start()
    sim.run()
    assert f.last_arrival == 2 * 2100 + 1100


def test_congestion_backs_up_towards_the_source():
    """Flow a crosses 0->1->2; flow b shares 1->2. With a two-packet buffer at chip 1, a's
    packets can only leave chip 0 as fast as they leave chip 1 (half of 1->2): the heads reach
    chip 1 later than on an uncontended link; with a large buffer they do not."""
    heads = {}
    for buffer in (9000, 1 << 20):
        sim, net = make_net(buffer_bytes=buffer)
        seen = []

        def visit(flow, pkt, seen=seen, sim=sim):
            if pkt.hop == 1:
                seen.append(sim.env.now)
            return True

        a = Flow(net, [(0, 0), (1, 0), (2, 0)], 20 * 4500, visit=visit)
        b = Flow(net, [(1, 0), (2, 0)], 20 * 4500)
        a.start()
        b.start()
        sim.run()
        heads[buffer] = seen[-1]
    assert heads[1 << 20] == 1000 + 19 * 100
    assert heads[9000] > 1000 + 19 * 100 + 500


@pytest.mark.parametrize("packet", [256, 1024, 4096, 16384, 65536])
def test_packet_size_changes_a_transfer_only_by_packet_rounding(packet):
    """Over 3 hops, 1 MB: the whole message takes 3 x latency + its serialisation, whatever
    the packet size; the first byte one packet's serialisation more than the path latency."""
    sim, net = make_net(packet_bytes=packet, buffer_bytes=1 << 20)
    f = Flow(net, [(0, 0), (1, 0), (2, 0), (3, 0)], 1_000_000)
    f.start()
    sim.run()
    assert f.last_arrival == 3000 + math.ceil(1_000_000 / 45)
    assert f.first_arrival == 3000 + math.ceil(packet / 45)


def test_port_paths_leave_by_every_port_towards_the_destination():
    t = topo("v5e", 4, 4)
    paths = t.port_paths((0, 0), (3, 3))
    assert [p[1] for p in paths] == [(1, 0), (0, 1)]
    assert [p[1] for p in t.port_paths((0, 0), (3, 0))] == [(1, 0)]
    w = topo("v5e", 16, 16)
    assert sorted(p[1] for p in w.port_paths((0, 0), (8, 8))) == [(0, 1), (0, 15), (1, 0), (15, 0)]
