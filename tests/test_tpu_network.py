"""TPU slices and ICI links: wraparound rules per generation, shapes rejected with the rule
named, routes, and the links' per-chunk timing (serialisation, hop latency, pipelining over hops,
contention on a shared link) in exact ticks."""

from __future__ import annotations

import itertools

import pytest

from simcore import Component, ConfigError, Simulation
from tpu.chips import CHIPS
from tpu.config import IciConfig
from tpu.network import Flow, IciNetwork, chunk_sizes
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


def test_chunk_sizes():
    assert chunk_sizes(10, 4) == [4, 4, 2]
    assert chunk_sizes(8, 4) == [4, 4]
    assert chunk_sizes(3, 4) == [3]


def make_net(**ici):
    """A 1 GHz ICI on a v5e 4x4 line; 4.5e10 B/s: 45 bytes per ns."""
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    cfg = IciConfig(**{"hop_latency_ns": 1000, "chunk_bytes": 4500, **ici})
    net = IciNetwork(top, topo("v5e", 4, 4), cfg)
    sim.check()  # freeze the time base: flows may start before the run
    return sim, net


def test_one_hop_chunks_serialise_back_to_back_then_wait_the_latency():
    sim, net = make_net()
    seen = []

    def visit(flow, ch):
        seen.append((ch.index, sim.env.now))
        return True

    flow = Flow(net, [(0, 0), (1, 0)], 10_000, visit=visit)
    flow.start()
    sim.run()
    # chunks 4500, 4500, 1000 B: 100, 100, 23 ns of serialisation, then 1000 ns of latency
    assert seen == [(0, 1100), (1, 1200), (2, 1223)]
    assert (flow.first_arrival, flow.last_arrival) == (1100, 1223)
    link = net.link((0, 0), (1, 0))
    assert (link.busy_ticks, link.bytes, link.chunks) == (223, 10_000, 3)


def test_chunks_pipeline_across_hops():
    """Store and forward per chunk: the second chunk crosses hop 1 while the first crosses
    hop 2; three hops of 9000 B in 4500 B chunks end at 3 x (100 + 1000) + 100 ns."""
    sim, net = make_net()
    arrivals = []

    def visit(flow, ch):
        arrivals.append((ch.hop, ch.index, sim.env.now))
        return True

    flow = Flow(net, [(0, 0), (1, 0), (2, 0), (3, 0)], 9000, visit=visit)
    flow.start()
    sim.run()
    assert arrivals == [
        (1, 0, 1100), (1, 1, 1200), (2, 0, 2200), (2, 1, 2300), (3, 0, 3300), (3, 1, 3400),
    ]  # fmt: skip


def test_transfers_sharing_a_link_queue_behind_each_other():
    sim, net = make_net()
    a = Flow(net, [(0, 0), (1, 0), (2, 0)], 4500)
    b = Flow(net, [(1, 0), (2, 0)], 4500)
    a.start()
    b.start()
    sim.run()
    assert b.last_arrival == 1100  # b was first on link 1->2
    assert a.last_arrival == 1100 + 100 + 1000  # a's chunk reached chip 1 at 1100, link free
    c_sim, c_net = make_net()
    x = Flow(c_net, [(0, 0), (1, 0)], 4500)
    y = Flow(c_net, [(0, 0), (1, 0)], 4500)
    x.start()
    y.start()
    c_sim.run()
    assert (x.last_arrival, y.last_arrival) == (1100, 1200)


def test_chunk_size_trades_events_for_pipelining():
    """Smaller chunks pipeline better over several hops: 3 hops of 90 kB."""
    ends = {}
    for chunk in (90_000, 9000, 900):
        sim, net = make_net(chunk_bytes=chunk)
        f = Flow(net, [(0, 0), (1, 0), (2, 0), (3, 0)], 90_000)
        f.start()
        sim.run()
        ends[chunk] = f.last_arrival
    assert ends == {90_000: 3 * 3000, 9000: 3 * 1200 + 9 * 200, 900: 3 * 1020 + 99 * 20}
