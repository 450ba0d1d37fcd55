"""The flow fidelity's symmetric fast path (docs/tpu/design.md#symmetry): a collective alone on
a torus, invariant under translations, run with one representative chip per class
(``Collective(symmetry=True)``, ``tpu-collective``'s ``symmetry=auto``) gives the unreduced
run's results exactly: every chip's finishing tick equals its representative's, tick for tick;
the end, the flows, the packets and every link's bytes, packets and busy time are the same.
Checked on small tori for every op, with and without wraparound, on 1 to 3 axes, with axes
outside the collective (collapsed) and across slices over DCN (host blocks)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from runner import scenario
from simcore import Component, Simulation
from simcore import config as cfg
from tpu.chips import CHIPS
from tpu.collectives import Collective, Group
from tpu.config import IciConfig
from tpu.network import IciNetwork
from tpu.slice import link_utilisation, network_components
from tpu.topology import Slice, Translations
from workloads.tpu.collective import CollectiveParams

OPS = ["allgather", "reducescatter", "allreduce", "alltoall"]


def build(chip, shape, slices=1, fidelity="flow"):
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    net = IciNetwork(top, Slice(CHIPS[chip], shape, slices=slices), IciConfig(fidelity=fidelity))
    sim.check()
    return sim, net


def run(chip, shape, op, axes, nbytes, symmetry, slices=1, **kw):
    sim, net = build(chip, shape, slices)
    coll = Collective(net, op, axes, nbytes, 4, symmetry=symmetry, **kw)
    coll.start()
    sim.run()
    return coll, net


def size(shape, axes, op, nbytes):
    n = math.prod(shape[a] for a in axes)
    unit = 4 * n * (n if op == "alltoall" else 1)
    return -(-nbytes // unit) * unit


# (chip, ICI shape, slices, axes, translations expected: chips per class)
CASES = [
    ("v5e", (16, 1), 1, (0,), 16),  # a ring
    ("v5e", (8, 1), 1, (0,), 1),  # a line: no translation, the full engine
    ("v5e", (16, 4), 1, (0, 1), 16),  # a ring and a line
    ("v5p", (4, 4, 4), 1, (0, 1, 2), 64),  # three rings
    ("v5p", (4, 8, 4), 1, (0, 2), 128),  # y outside the collective: collapsed
    ("v5p", (2, 2, 2), 1, (0, 1, 2), 1),  # no wraparound
    ("v5e", (4, 4), 4, (0, 1, 2), 4),  # 4 slices over DCN: s wraps, x and y lines
    ("v5e", (4, 4), 3, (0,), 6),  # DCN only: x, y shift by whole host blocks (4 x 2)
]
A2A_SIZE = {  # AllToAll shifts by 2 on an even ring (its tie goes by parity)
    ("v5e", (16, 1), 1): 8,
    ("v5e", (16, 4), 1): 8,
    ("v5p", (4, 4, 4), 1): 8,
    ("v5p", (4, 8, 4), 1): 32,
    ("v5e", (4, 4), 4): 2,
}


def _id(case) -> str:
    (chip, shape, slices, axes, _), op, nbytes = case
    return f"{chip}-{'x'.join(map(str, shape))}-s{slices}-{len(axes)}ax-{op}-{nbytes}"


@pytest.mark.parametrize("case", list(itertools.product(CASES, OPS, [1000, 1 << 20])), ids=_id)
def test_one_chip_per_class_gives_every_chip_its_time(case):
    """At 1 kB (a packet or less per message: latency-bound, many events on the same tick) and
    1 MiB (bandwidth-bound)."""
    (chip, shape, slices, axes, per_class), op, target = case
    full_shape = ((slices,) if slices > 1 else ()) + shape
    nbytes = size(full_shape, axes, op, target)
    a, na = run(chip, shape, op, axes, nbytes, False, slices)
    b, nb = run(chip, shape, op, axes, nbytes, True, slices)
    assert a.sym is None
    expect = A2A_SIZE.get((chip, shape, slices), per_class) if op == "alltoall" else per_class
    if expect == 1:
        assert b.sym is None and nb.multiplicity == 1
    else:
        assert b.sym is not None and b.sym.size == nb.multiplicity == expect
        assert len(b.done_ticks) == na.topo.chips // expect
    sym = b.sym or Translations(na.topo.shape, na.topo.shape)
    # every chip finishes on the tick its representative does, the end included
    assert len(a.done_ticks) == na.topo.chips
    for c, t in a.done_ticks.items():
        assert b.done_ticks[sym.rep(c)] == t, c
    assert a.end_ticks == b.end_ticks
    assert a.flows == b.flows and a.hops == b.hops
    assert na.sent_packets() == nb.sent_packets()
    assert link_utilisation(na, a.end_ticks) == link_utilisation(nb, b.end_ticks)
    # every link that carried anything carried what its translate from the representative
    # carried (links off the collective's axes carry nothing at either; the packet totals
    # above agree, so the folded run has nothing elsewhere)
    for (s, d), lk in na.links.items():
        if not lk.packets:
            continue
        folded = nb.links[sym.fold(s, d)]
        assert (lk.bytes, lk.packets, lk.busy_ticks) == (
            folded.bytes, folded.packets, folded.busy_ticks,
        ), (s, d)  # fmt: skip


@pytest.mark.parametrize("op", ["allgather", "allreduce"])
def test_symmetric_fast_path_with_the_other_algorithms(op):
    """The one-way ring and the axis-by-axis schedule are translation-invariant too."""
    for kw in ({"ring": "unidirectional"}, {"schedule": "axis-by-axis"}):
        nbytes = size((4, 4, 4), (0, 1, 2), op, 4 << 20)
        a, _ = run("v5p", (4, 4, 4), op, (0, 1, 2), nbytes, False, **kw)
        b, _ = run("v5p", (4, 4, 4), op, (0, 1, 2), nbytes, True, **kw)
        assert b.sym is not None
        assert a.end_ticks == b.end_ticks
        assert all(b.done_ticks[b.sym.rep(c)] == t for c, t in a.done_ticks.items())


def test_the_fast_path_stays_off_where_it_would_not_be_exact():
    """Packets (the dateline's virtual channels are not translation-invariant), real shards
    (each chip's own data), a network already carrying flows: every chip runs."""

    def started(net, **kw):
        coll = Collective(net, "allgather", (0,), 1 << 10, 4, symmetry=True, **kw)
        coll.start()
        return coll

    _, net = build("v5e", (16, 1), fidelity="packet")
    assert started(net).sym is None
    _, net = build("v5e", (16, 1))
    inputs = {c: np.zeros(16, np.float32) for c in net.topo.coords}
    assert started(net, inputs=inputs).sym is None
    _, net = build("v5e", (16, 1))
    first = started(net)
    assert first.sym is not None and net.multiplicity == 16
    assert started(net).sym is None


def test_translations_fold_links_onto_the_representatives():
    t = Translations((4, 6, 3), (2, 1, 0))
    assert t.size == 2 * 6 * 3 and len(t.reps) == 2
    assert t.rep((3, 5, 2)) == (1, 0, 0) and t.offset((3, 5, 2)) == (2, 5, 2)
    assert t.fold((3, 5, 2), (3, 0, 2)) == ((1, 0, 0), (1, 1, 0))  # y's wraparound
    assert t.fold((2, 1, 1), (1, 1, 1)) == ((0, 0, 0), (3, 0, 0))
    none = Translations((4, 4), (4, 4))
    assert none.size == 1 and len(none.reps) == 16


def test_group_shift_moves_ranks_with_the_chips():
    topo = Slice(CHIPS["v5p"], (4, 4, 4))
    g = Group(topo, (0, 2), (0, 1, 0))
    keys = g.shift(np.arange(16), (1, 1, 0), (2, 1, 3))
    for r, k in enumerate(keys):
        x, z = g.digits(r)
        assert g.digits(int(k)) == ((x + 1) % 4, (z + 3) % 4)


def test_the_kind_gives_the_same_figures_with_and_without_symmetry():
    """``tpu-collective``'s ``symmetry``: auto (one chip per class) and off (every chip) give
    the same metrics, every one of them."""
    out = []
    for sym in ("auto", "off"):
        p = cfg.load(
            CollectiveParams,
            dict(chip="v5e", topology="16x16", axes="xy", op="allreduce", bytes=1 << 22,
                 payload="size", symmetry=sym, ici={"fidelity": "flow"}),
        )  # fmt: skip
        out.append(scenario.run_kind("tpu-collective", p))
    assert out[0] == out[1]
    assert out[0]["flows"] > 0 and out[0]["sent_packets"] > 0


def test_a_traced_run_shows_every_chip(tmp_path):
    """Tracing turns the fast path off: the trace has every chip's phases and every link's
    messages, and the same end as the untraced (folded) run."""
    from traces import read_trace

    sc = scenario.find("tpu-collective")
    sets = ["chip=v5e", "topology=16x1", "axes=x", "op=allreduce", "bytes=65536",
            "payload=size", "ici.fidelity=flow"]  # fmt: skip
    params = scenario.resolve_params(sc, sets)
    traced = scenario.run_scenario(
        sc, params, trace_path=str(tmp_path / "t.arrows"), trace_level=scenario.TraceLevel.OPS
    )
    plain = scenario.run_scenario(sc, params)
    table = read_trace(tmp_path / "t.arrows").table
    comps = set(table["component"].cast("string").to_pylist())
    assert {f"pod/chip[{x},0]" for x in range(16)} <= comps
    assert {f"pod/ici/link[{x},0>{(x + 1) % 16},0]" for x in range(16)} <= comps
    assert traced.metrics["time_s"] == plain.metrics["time_s"]


def test_edges_and_component_count_without_building():
    for chip, shape, slices in [("v5e", (16, 4), 1), ("v5p", (2, 4, 4), 1), ("v5e", (4, 2), 3),
                                ("v5e", (2, 16), 1), ("v5p", (4, 2, 1), 2)]:  # fmt: skip
        topo = Slice(CHIPS[chip], shape, slices=slices)
        edges = topo.edges()
        pairs = [(e.src, e.dst) for e in edges]
        assert pairs == sorted(set(pairs))  # sorted, each direction once
        want = {
            (c, n)
            for c in topo.coords
            for a in range(len(topo.shape))
            for sgn in (1, -1)
            if (n := topo.neighbour(c, a, sgn)) is not None
        }
        assert set(pairs) == want
        for e in edges:
            assert e.wrap == (not 0 <= e.src[e.axis] + e.sign < topo.shape[e.axis])
            assert topo.neighbour(e.src, e.axis, e.sign) == e.dst
        sim, _ = build(chip, shape, slices)
        assert network_components(topo) == len(sim.components) - 1  # less the pod
