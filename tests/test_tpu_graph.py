"""The op-graph executor (tpu/graph.py): each class of op runs on the mechanism it names (a
matmul on the chip's pipeline, a collective on the ICI as tpu.collectives runs it alone),
dependencies order ops, independent compute and communication overlap, arbitrary groups run
as rings, and a bad graph is refused naming the op."""

from __future__ import annotations

import pytest

from simcore import Component, Simulation
from tpu.chip import Job, TensorChip
from tpu.chips import CHIPS
from tpu.collectives import Collective
from tpu.config import IciConfig
from tpu.graph import Graph, GraphError, GraphRun, Op, device_coord, match_axes
from tpu.network import IciNetwork
from tpu.topology import Slice

ALL8 = (tuple(range(8)),)


def run(ops, shape=(2, 4), devices=8):
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    topo = Slice(CHIPS["v5e"], shape)
    net = IciNetwork(top, topo, IciConfig())
    chips = {c: TensorChip(top, f"chip[{c}]", topo.spec) for c in topo.coords}
    g = GraphRun(top, topo, net, chips, Graph.spmd(ops, devices))
    sim.run()
    return g.report()


def alone_matmul(m, k, n):
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    chip = TensorChip(top, "chip", CHIPS["v5e"])
    sim.domain("tpu", CHIPS["v5e"].clock_hz)
    job = Job(m, k, n)

    def go():
        yield chip.matmul(job)

    top.process(go(), "go")
    sim.run()
    return job.end_ticks - job.start_ticks


def alone_collective(op, axes, nbytes, item=4):
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    topo = Slice(CHIPS["v5e"], (2, 4))
    net = IciNetwork(top, topo, IciConfig())
    for c in topo.coords:  # the same build as run(): chips change no ICI timing
        TensorChip(top, f"chip[{c}]", topo.spec)
    sim.check()
    coll = Collective(net, op, axes, nbytes, item)
    coll.start()
    sim.run()
    return coll.end_ticks


def test_a_matmul_op_takes_the_chips_pipeline_time():
    r = run([Op(name="dot", cls="compute", matmul=(512, 1024, 256))])
    assert r["end"] == r["compute"] == alone_matmul(512, 1024, 256)
    assert r["bound"] == "compute" and r["comm"] == 0


@pytest.mark.parametrize(
    ("kind", "groups", "axes"),
    [("allreduce", ALL8, (0, 1)), ("allgather", ((0, 1, 2, 3), (4, 5, 6, 7)), (1,)),
     ("reducescatter", ((0, 4), (1, 5), (2, 6), (3, 7)), (0,))],
)  # fmt: skip
def test_axis_groups_run_as_the_slice_collective(kind, groups, axes):
    assert match_axes(Slice(CHIPS["v5e"], (2, 4)), groups) == axes
    r = run([Op(name="c", cls="collective", kind=kind, bytes=1 << 20, groups=groups)])
    assert r["end"] == r["comm"] == alone_collective(kind, axes, 1 << 20)
    assert r["bound"] == "communication"


def test_devices_are_row_major_over_the_slice():
    topo = Slice(CHIPS["v5e"], (2, 4))
    assert [device_coord(topo, d) for d in (0, 1, 3, 4, 7)] == [
        (0, 0), (0, 1), (0, 3), (1, 0), (1, 3)]  # fmt: skip


def test_dependencies_serialise_and_independent_ops_overlap():
    dot = Op(name="dot", cls="compute", matmul=(2048, 2048, 2048))
    ar = Op(name="ar", cls="collective", kind="allreduce", bytes=1 << 22, groups=ALL8)
    apart = run([dot, ar])
    chained = run([dot, dataclass_replace(ar, deps=(0,))])
    assert apart["end"] == max(apart["compute"], apart["comm"])
    assert chained["end"] == chained["compute"] + chained["comm"]
    assert apart["overlap"] == min(apart["compute"], apart["comm"])
    assert chained["overlap"] == 0
    table = {row[1]: row for row in chained["table"]}
    assert table["ar"][4] == table["dot"][5]  # the collective starts when the matmul ends


def dataclass_replace(op, **kw):
    import dataclasses

    return dataclasses.replace(op, **kw)


def test_an_arbitrary_group_runs_as_a_ring_and_more_bytes_take_longer():
    groups = ((0, 5), (1, 4), (2, 7), (3, 6))  # no axis of a 2x4 slice groups these
    assert match_axes(Slice(CHIPS["v5e"], (2, 4)), groups) is None
    small = run([Op(name="ag", cls="collective", kind="allgather", bytes=1 << 20, groups=groups)])
    big = run([Op(name="ag", cls="collective", kind="allgather", bytes=1 << 22, groups=groups)])
    assert 0 < small["end"] < big["end"]
    ar = run([Op(name="ar", cls="collective", kind="allreduce", bytes=1 << 22, groups=groups)])
    assert ar["end"] > big["end"]  # all-reduce: twice the ring steps of an all-gather


def test_permute_send_recv_and_memory_ops_run():
    pairs = tuple((i, (i + 1) % 8) for i in range(8))
    r = run([
        Op(name="perm", cls="collective", kind="collective-permute", bytes=1 << 20, pairs=pairs),
        Op(name="mem", cls="memory", bytes=1 << 24),
        Op(name="flops", cls="compute", flops=10**9, bytes=1 << 20, deps=(1,)),
    ])  # fmt: skip
    assert r["comm"] > 0 and r["memory"] > 0 and r["compute"] > 0
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    topo = Slice(CHIPS["v5e"], (2, 4))
    net = IciNetwork(top, topo, IciConfig())
    chips = {c: TensorChip(top, f"chip[{c}]", topo.spec) for c in topo.coords}
    send = [Op(name="s", cls="send", bytes=1 << 20, peer=7, key="t")]
    recv = [Op(name="r", cls="recv", bytes=1 << 20, peer=0, key="t")]
    g = GraphRun(top, topo, net, chips, Graph(8, {0: send, 7: recv}))
    sim.run()
    assert g.spans[0][0][1] == g.spans[7][0][1] > 0


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([Op(name="x", cls="gpu", where="f:3")], "f:3: op x: class 'gpu' is not one of"),
        ([Op(name="x", cls="memory", deps=(0,))], "op x: dependency 0 is not an earlier op"),
        ([Op(name="x", cls="collective", kind="allreduce", bytes=4, groups=((0, 9),))],
         "op x: device 9 is not one of 0..7"),
    ],
)  # fmt: skip
def test_bad_graphs_are_refused_naming_the_op(ops, message):
    with pytest.raises(GraphError, match=message):
        Graph.spmd(ops, 8).check(8)
    with pytest.raises(GraphError, match="runs on 9 devices but the slice has 8 chips"):
        Graph.spmd([], 9).check(8)


def test_per_device_programs_meet_at_a_collective_by_key():
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    topo = Slice(CHIPS["v5e"], (2, 2))
    net = IciNetwork(top, topo, IciConfig())
    chips = {c: TensorChip(top, f"chip[{c}]", topo.spec) for c in topo.coords}
    groups = ((0, 1, 2, 3),)
    programs = {}
    for d in range(4):  # device d computes d+1 matmuls, then all-reduces under one key
        ops = [Op(name=f"mm{i}", cls="compute", matmul=(512, 512, 512)) for i in range(d + 1)]
        ops.append(Op(name=f"rank{d}-ar", cls="collective", kind="allreduce", bytes=1 << 20,
                      groups=groups, key="ar0", deps=(d,)))  # fmt: skip
        programs[d] = ops
    g = GraphRun(top, topo, net, chips, Graph(4, programs))
    sim.run()
    starts = [g.spans[d][d + 1][0] for d in range(4)]
    ends = {g.spans[d][d + 1][1] for d in range(4)}
    assert starts == sorted(starts) and starts[0] < starts[3]  # each joins when its work is done
    assert len(ends) == 1 and ends.pop() > starts[3]  # one instance: it ends once, for all
    assert len(g.instances) == 1


def test_the_shared_model_schedules_each_device_and_prices_every_class():
    from workloads.tpu import opgraph
    from workloads.tpu.collective import time_over

    topo = Slice(CHIPS["v5e"], (2, 4))
    ici = IciConfig()
    ar = Op(name="ar", cls="collective", kind="allreduce", bytes=1 << 22, groups=ALL8)
    assert opgraph.op_time(ar, 0, topo, ici) == time_over(topo, (0, 1), "allreduce", 1 << 22,
                                                          ici)["time_s"]  # fmt: skip
    dot = Op(name="dot", cls="compute", matmul=(2048, 2048, 2048))
    both = opgraph.model(Graph.spmd([dot, ar], 8), topo, ici)
    chained = opgraph.model(Graph.spmd([dot, dataclass_replace(ar, deps=(0,))], 8), topo, ici)
    assert both["time_s"] == max(both["compute_s"], both["comm_s"])
    assert chained["time_s"] == pytest.approx(chained["compute_s"] + chained["comm_s"])
    send = Op(name="s", cls="send", bytes=1 << 20, peer=7, key="t")
    recv = Op(name="r", cls="recv", bytes=1 << 20, peer=0, key="t")
    m = opgraph.model(Graph(8, {0: [send], 7: [recv]}), topo, ici)
    hops = 4  # (0,0) -> (1,3): one hop on x, three on y
    assert m["time_s"] == pytest.approx((1 << 20) / 4.5e10 + hops * 1e-6)


def test_a_collective_one_device_never_reaches_stalls_and_says_which():
    sim = Simulation()
    top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
    topo = Slice(CHIPS["v5e"], (2, 2))
    net = IciNetwork(top, topo, IciConfig())
    chips = {c: TensorChip(top, f"chip[{c}]", topo.spec) for c in topo.coords}
    ar = Op(name="ar", cls="collective", kind="allreduce", bytes=4096, groups=((0, 1, 2, 3),))
    g = GraphRun(top, topo, net, chips, Graph(4, {0: [ar], 1: [ar], 2: [ar], 3: []}))
    result = sim.run()
    assert result.status != "completed"
    assert g.pending() == (
        "3 device stream(s) unfinished; waiting: collective:ar (3 device(s) joined)"
    )


def test_ready_issue_runs_a_later_ready_op_before_a_blocked_one():
    ar = Op(name="ar", cls="collective", kind="allreduce", bytes=1 << 22, groups=ALL8)
    blocked = Op(name="after-ar", cls="memory", bytes=1 << 20, deps=(0,))
    free = Op(name="dot", cls="compute", matmul=(2048, 2048, 2048))
    ops = [ar, blocked, free]
    sims = {}
    for issue in ("in-order", "ready"):
        sim = Simulation()
        top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
        topo = Slice(CHIPS["v5e"], (2, 4))
        net = IciNetwork(top, topo, IciConfig())
        chips = {c: TensorChip(top, f"chip[{c}]", topo.spec) for c in topo.coords}
        g = GraphRun(top, topo, net, chips, Graph.spmd(ops, 8), issue=issue)
        sim.run()
        sims[issue] = g.report()
    order = {k: [row[1] for row in sorted(r["table"], key=lambda row: row[4])]
             for k, r in sims.items()}  # fmt: skip
    assert order["in-order"][1:] == ["after-ar", "dot"]  # the dot waits behind the blocked op
    assert order["ready"][1:] == ["dot", "after-ar"]  # the ready dot goes first
    assert sims["ready"]["end"] < sims["in-order"]["end"]
    assert sims["ready"]["overlap"] > 0 == sims["in-order"]["overlap"]
