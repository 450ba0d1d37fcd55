"""SwarmX: the tree (nodes linear, depth logarithmic in N), a node's broadcast timing and its
sum-reduction of real FP32 gradients."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryx.plan import Chunk, Entry
from simcore import Component, Simulation
from swarmx.node import BroadcastReduceNode, SwarmXConfig, reduce_payloads
from swarmx.tree import boxes, build_tree, hops, nodes
from workloads.cluster.model import tree_shape


@pytest.mark.parametrize("mode", ["1:4", "2x1:2"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16, 17, 64, 100])
def test_tree_reaches_every_system_through_equal_depth(n, mode):
    g = build_tree(n, mode)
    assert nx.is_arborescence(g)
    leaves = [v for v in g if g.nodes[v]["kind"] == "cs2"]
    assert len(leaves) == n
    depths = {nx.shortest_path_length(g, "memoryx", leaf) for leaf in leaves}
    f = 4 if mode == "1:4" else 2
    assert depths == {hops(g)} == {1 + max(1, math.ceil(math.log(n, f) - 1e-9))}
    assert (len(nodes(g)), hops(g)) == tree_shape(n, mode)
    assert all(g.out_degree(v) <= f for v in nodes(g))


def test_nodes_grow_linearly_and_depth_logarithmically():
    counts = [len(nodes(build_tree(n))) for n in (4, 16, 64, 256)]
    assert counts == [1, 5, 21, 85]  # about N/3 for 1:4 nodes
    assert [hops(build_tree(n)) for n in (4, 16, 64, 256)] == [2, 3, 4, 5]
    g = build_tree(64, "2x1:2")
    assert len(nodes(g)) == 63 and boxes(g, "2x1:2") == 32


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 6), n=st.integers(1, 50), seed=st.integers(0, 2**16))
def test_reduction_is_the_fp32_sum_of_the_shards(k, n, seed):
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal(n).astype(np.float32) for _ in range(k)]
    want = parts[0].copy()
    for p in parts[1:]:
        want = want + p
    assert np.array_equal(reduce_payloads(parts), want)
    assert reduce_payloads([*parts, None]) is None


class End(Component):
    """Sends ``out`` (first, if ``send_first``) and receives ``n_in`` chunks, with times."""

    def __init__(self, parent, name, n_in, out, send_first=False):
        super().__init__(parent, name)
        self.in_port("in")
        self.out_port("out")
        self.n_in, self.out, self.send_first, self.got = n_in, out, send_first, []

    def start(self):
        self.process(self._run(), "run")

    def _run(self):
        if self.send_first:
            for c in self.out:
                yield self.ports["out"].put(c)
        for _ in range(self.n_in):
            chunk = yield self.ports["in"].get()
            self.got.append((self.env.now, chunk))
        if not self.send_first:
            for c in self.out:
                yield self.ports["out"].put(c)


def test_node_broadcasts_at_line_rate_and_reduces_children():
    cfg = SwarmXConfig(lanes=1, interface_bits_per_s=8e9)  # 1 B per cycle per port
    sim = Simulation()
    top = Component(sim, "top", domain=sim.domain("swarmx", cfg.clock_hz))
    e = Entry(0, 0, "bwd", "w", "bwd", 0, 1, 100, grad_bytes=50, key=("w", 0))
    shards = [np.full(3, i + 1, np.float32) for i in range(3)]
    src = End(top, "src", 1, [Chunk(e, 100)], send_first=True)
    kids = [End(top, f"kid{i}", 1, [Chunk(e, 50, shards[i])]) for i in range(3)]
    node = BroadcastReduceNode(top, "node", cfg, 3, chunks=1, gradients=1)
    sim.connect(src.ports["out"], node.ports["down_in"], latency_cycles=5, capacity=1)
    sim.connect(node.ports["up_out"], src.ports["in"], latency_cycles=5, capacity=1)
    for i, kid in enumerate(kids):
        sim.connect(node.ports[f"down_out[{i}]"], kid.ports["in"], latency_cycles=7, capacity=1)
        sim.connect(kid.ports["out"], node.ports[f"up_in[{i}]"], latency_cycles=7, capacity=1)
    assert sim.run().status == "completed"
    # the chunk reaches the node at 5, is serialised on every child port for 100 cycles, +7
    assert [k.got[0][0] for k in kids] == [112, 112, 112]
    # gradients: the kids send on receipt (112), all in at 119, 50 cycles up, +5
    when, reduced = src.got[0]
    assert when == 174
    assert np.array_equal(reduced.payload, np.full(3, 6, np.float32))
    assert [i.busy_ticks for i in node.interfaces()] == [100, 100, 100, 50]
