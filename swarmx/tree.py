"""SwarmX's topology: a bidirectional tree of broadcast-reduce nodes, as a networkx graph.

The tree is built bottom up: the CS-2 systems are the leaves; nodes of fan-out ``fanout`` take
up to that many children each, level after level, until one root node remains, which MemoryX
feeds. A physical node (a *box*) runs one 1:4 broadcast-reduce (fan-out 4) or a pair of 1:2
ones (fan-out 2, two logical nodes per box). So for N systems there are about N/(f-1) logical
nodes (linear in N) and ceil(log_f N) levels (the MemoryX <-> CS-2 latency grows with log N).

Graph: nodes are ``"memoryx"``, ``"node[l,i]"`` (level l from the leaves, index i) and
``"cs2[k]"``; a directed edge parent -> child for every link (the up direction is the reverse).
Nodes carry ``kind`` (memoryx, node, cs2) and ``level``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

FANOUT = {"1:4": 4, "2x1:2": 2}


def build_tree(systems: int, mode: str = "1:4") -> nx.DiGraph:
    """The tree for ``systems`` CS-2s (>= 1) with nodes in ``mode`` (``1:4`` or ``2x1:2``)."""
    import networkx as nx  # building a tree needs it; describing a kind's parameters does not

    fanout = FANOUT[mode]
    g = nx.DiGraph()
    level: list[str] = []
    for k in range(systems):
        name = f"cs2[{k}]"
        g.add_node(name, kind="cs2", level=0)
        level.append(name)
    depth = 0
    while depth == 0 or len(level) > 1:
        depth += 1
        parents = []
        for i in range(math.ceil(len(level) / fanout)):
            name = f"node[{depth},{i}]"
            g.add_node(name, kind="node", level=depth)
            for child in level[i * fanout : (i + 1) * fanout]:
                g.add_edge(name, child)
            parents.append(name)
        level = parents
    g.add_node("memoryx", kind="memoryx", level=depth + 1)
    g.add_edge("memoryx", level[0])
    return g


def nodes(g: nx.DiGraph) -> list[str]:
    """The broadcast-reduce nodes, root first, level by level (deterministic order)."""
    names = [n for n, d in g.nodes(data=True) if d["kind"] == "node"]
    return sorted(names, key=lambda n: (-g.nodes[n]["level"], int(n.split(",")[1][:-1])))


def boxes(g: nx.DiGraph, mode: str) -> int:
    """Physical nodes: one per logical node in 1:4 mode, one per two in 2x1:2 mode."""
    logical = len(nodes(g))
    return logical if mode == "1:4" else math.ceil(logical / 2)


def hops(g: nx.DiGraph) -> int:
    """Links between MemoryX and a CS-2 (the same for every CS-2)."""
    import networkx as nx

    return nx.shortest_path_length(g, "memoryx", "cs2[0]")
