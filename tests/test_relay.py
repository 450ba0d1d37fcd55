"""Relay chains (fabric/relay.py): the chain schedule against the wavelet path, its tail form,
and the kinds whose row reductions move as relays giving the reference's answer bit for bit.
(The random programs are in tests/test_conformance.py, ``chain_reductions``.)"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fabric.engine as fabric_engine
import pe.ce as ce_module
from fabric.config import FabricConfig
from fabric.relay import PAST, chain_schedule
from simcore import config as cfg
from simcore.sim import Simulation
from workloads.wafer import gemv, spmv

KINDS = {
    "spmv-poisson2d": (spmv, spmv.SpmvParams, {"matrix": "poisson2d", "n": 256, "px": 8, "py": 8}),
    "spmv-powerlaw": (
        spmv, spmv.SpmvParams,
        {"matrix": "laplacian", "graph": "barabasi_albert", "n": 512, "px": 8, "py": 8},
    ),
    "gemv": (gemv, gemv.GemvParams, {"m": 128, "n": 128, "px": 8, "py": 8}),
}  # fmt: skip


def run_kind(name: str, fidelity: str) -> tuple[dict, str, Any]:
    """(metrics, every PE's SRAM digest, the fabric engine) of one run of a kind."""
    mod, params, kw = KINDS[name]
    p = cfg.load(params, {**kw, "wafer": {"fidelity": fidelity}})
    sim = Simulation(seed=p.seed)
    h = mod.build(sim, p)
    sim.check()
    m = mod.metrics(sim, p, h, sim.run())
    pes = sorted(h.wafer.pes.items())
    digest = hashlib.sha256(b"".join(pe.sram.data.tobytes() for _, pe in pes)).hexdigest()
    return m, digest, h.wafer.engine


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_kinds_row_reductions_move_as_relays_with_the_references_answer(name):
    ref, ref_sram, _ = run_kind(name, "reference")
    fast, fast_sram, engine = run_kind(name, "fast")
    assert fast["cycles"] == ref["cycles"]
    assert fast["correct"] and ref["correct"]
    assert fast_sram == ref_sram
    # every row's chain is a relay, and together they moved every element of every position
    kw = KINDS[name][2]
    assert engine.relay_streams == kw["py"]
    length = (kw["m"] if name == "gemv" else kw["n"]) // kw["py"]
    assert engine.relay_elements == kw["px"] * kw["py"] * length


def record_chains(name: str) -> tuple[dict, dict]:
    """The wavelet path's issue cycle of every element of every row reduction's operation
    (by PE), and what the chain schedule needs to know of each (gate, width, down credits,
    the cycles its colours leave teardown)."""
    seen: dict[tuple[int, int], dict[str, Any]] = {}
    last_write: dict[tuple[tuple[int, int], int], int] = {}
    mp = pytest.MonkeyPatch()
    write_config = fabric_engine.Router.write_config
    write_route = fabric_engine.Router.write_route
    start_op = ce_module.ComputeEngine.start_op
    begin = ce_module.ComputeEngine._begin
    advance = ce_module.ComputeEngine._advance

    def write(self: Any, t: int, colour: int, change: Any) -> None:
        last_write[(self.xy, colour)] = t
        write_config(self, t, colour, change)

    def write_set_up(self: Any, colour: int, t1: int, t2: int, t3: int, positions: Any) -> None:
        last_write[(self.xy, colour)] = t3  # (the last of its three writes)
        write_route(self, colour, t1, t2, t3, positions)

    def start(self: Any, op: Any, at: int) -> None:
        start_op(self, op, at)
        colour_in = self.colour_of_queue.get(op.fab_in) if op.fab_in is not None else None
        if op.name in ("fadds", "mov32") and {op.out_colour, colour_in} & {0, 1}:
            seen.setdefault(self.xy, {
                "op": op, "times": [], "width": op.width,
                "down": self.down_credits(colour_in) if colour_in is not None else 0,
                "in": last_write.get((self.xy, colour_in), -1),
                "out": last_write.get((self.xy, op.out_colour), -1),
            })  # fmt: skip

    def began(self: Any, op: Any) -> None:
        mine = seen.get(self.xy)
        if mine is not None and mine["op"] is op:
            now = self.engine.now_cycle()
            held = self.running is not None and self.hold_from <= now < self.busy_until
            mine["gate"] = self.busy_until if held else now
        begin(self, op)

    def step(self: Any, op: Any, t: int) -> None:
        mine = seen.get(self.xy)
        if mine is not None and mine["op"] is op and not (op.in_queue and op.in_queue[0].ctrl):
            mine["times"].append(t)
        advance(self, op, t)

    mp.setattr(fabric_engine.Router, "write_config", write)
    mp.setattr(fabric_engine.Router, "write_route", write_set_up)
    mp.setattr(ce_module.ComputeEngine, "start_op", start)
    mp.setattr(ce_module.ComputeEngine, "_begin", began)
    mp.setattr(ce_module.ComputeEngine, "_advance", step)
    try:
        m, _, _ = run_kind(name, "reference")
    finally:
        mp.undo()
    return m, seen


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_chain_schedule_is_the_wavelet_paths(name):
    """Every element's issue cycle on every PE of every row reduction, as the wavelet path
    moved it, is the chain schedule's, from each operation's gate and the routes' write
    cycles alone."""
    _, seen = record_chains(name)
    px, py = KINDS[name][2]["px"], KINDS[name][2]["py"]
    for y in range(py):
        chain = [seen[(x, y)] for x in range(px - 1, -1, -1)]  # (the root is column 0)
        n = len(chain[0]["times"])
        sched = chain_schedule(
            n, [c["gate"] for c in chain], [c["width"] for c in chain],
            [c["down"] for c in chain], FabricConfig(),
            out_ready=[c["out"] for c in chain], down_ready=[c["in"] for c in chain],
        )  # fmt: skip
        assert sched.issue == [c["times"] for c in chain], y
        assert sched.counts == [len(set(c["times"])) for c in chain]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    st.integers(1, 70), st.integers(2, 7), st.data(),
    st.sampled_from([FabricConfig(), FabricConfig(ramp_credits=1, router_buffer_wavelets=1)]),
)  # fmt: skip
def test_the_tail_form_keeps_the_full_schedules_end(n, m, data, fabric):
    """What a commit schedules from (``tail_only``: a ring as long as a credit loop) is the
    end of the full schedule, and the issue-cycle counts are the same."""
    gates = data.draw(st.lists(st.integers(0, 300), min_size=m, max_size=m))
    widths = data.draw(st.lists(st.integers(1, 4), min_size=m, max_size=m))
    downs = data.draw(st.lists(st.integers(1, 5), min_size=m, max_size=m))
    full = chain_schedule(n, gates, widths, downs, fabric)
    tail = chain_schedule(n, gates, widths, downs, fabric, tail_only=True)
    assert full.counts == tail.counts
    for a, b in ((full.issue, tail.issue), (full.out, tail.out), (full.down, tail.down)):
        for x, y in zip(a, b, strict=True):
            assert x[len(x) - len(y) :] == y
            assert PAST not in x
    # (and one element per cycle and port, in order, on every router)
    for x in full.out[:-1] + full.down[1:]:
        assert np.all(np.diff(x) >= 1)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 90), st.integers(2, 7), st.data())
def test_the_steady_loop_is_the_general_one(n, m, data):
    """``chain_schedule``'s loop for the elements past every position's moved ones and a
    credit loop (``_steady_loop``: the general loop's always-true tests left out, the far end
    and the root out of the positions' loop) gives the general loop's every cycle and count:
    random fabrics, gates, widths, credits, teardown exits, floors, take-over states and
    tasks' holds, in both forms."""
    draw = data.draw
    one = st.integers(1, 3)
    fabric = FabricConfig(
        hop_latency_cycles=draw(one), hop_credit_latency_cycles=draw(st.integers(1, 2)),
        router_buffer_wavelets=draw(st.integers(1, 4)), ramp_latency_cycles=draw(one),
        ramp_credit_latency_cycles=draw(st.integers(1, 9)), ramp_credits=draw(st.integers(1, 8)),
    )  # fmt: skip
    ints = st.integers(0, 300)
    gates = draw(st.lists(ints, min_size=m, max_size=m))
    widths = draw(st.lists(st.integers(1, 4), min_size=m, max_size=m))
    room = st.integers(1, fabric.ramp_credits)
    downs = [0, *draw(st.lists(room, min_size=m - 1, max_size=m - 1))]
    kw: dict[str, Any] = {"floor": draw(st.sampled_from([PAST, 0, 50]))}
    exits = st.lists(st.sampled_from([-1, -1, 40, 200]), min_size=m, max_size=m)
    if draw(st.booleans()):
        kw["out_ready"], kw["down_ready"] = draw(exits), draw(exits)
    if draw(st.booleans()):  # a chain taken over: each position behind the one before
        issued, sent, taken = [draw(st.integers(0, n // 2))], [], [0]
        for j in range(m):
            if j:
                issued.append(draw(st.integers(0, taken[j])))
            sent.append(draw(st.integers(0, issued[j])))
            if j < m - 1:
                taken.append(draw(st.integers(0, sent[j])))
        kw.update(issued=issued, sent=sent, taken=taken, floor=0)
    if draw(st.booleans()):
        holds = {}
        for j in draw(st.sets(st.integers(0, m - 1), max_size=m)):
            t, spans = draw(ints), []
            for _ in range(draw(st.integers(1, 3))):
                end = t + draw(st.integers(0, 20))
                spans.append((t, end))
                t = end + draw(st.integers(1, 40))
            holds[j] = spans
        kw["holds"] = holds
    for tail in (False, True):
        fast = chain_schedule(n, gates, widths, downs, fabric, tail_only=tail, **kw)
        ref = chain_schedule(n, gates, widths, downs, fabric, tail_only=tail, general=True, **kw)
        assert (fast.issue, fast.out, fast.down, fast.counts) == (
            ref.issue, ref.out, ref.down, ref.counts
        )  # fmt: skip


def test_an_ops_level_trace_keeps_the_chain_on_the_wavelet_path(tmp_path):
    """With slices traced, relays decline (their completions would come first in their cycle
    and move the order of a cycle's slices and the flow ids): a traced run's trace is the
    wavelet path's, byte for byte, and an untraced run of the same program relays."""
    from runner import scenario

    sc = scenario.find("spmv")
    params = scenario.resolve_params(sc, ["matrix=poisson2d", "n=256", "px=8", "py=8"])
    seen = []
    mp = pytest.MonkeyPatch()
    commit = ce_module.ComputeEngine.commit_relay
    mp.setattr(ce_module.ComputeEngine, "commit_relay",
               lambda self, *a: (seen.append(self.xy), commit(self, *a)))  # fmt: skip
    try:
        scenario.run_scenario(sc, params, trace_path=str(tmp_path / "t.arrow"))
        assert seen == []
        scenario.run_scenario(sc, params)
        assert len(seen) >= 64  # (every row's reduction, each iteration)
    finally:
        mp.undo()
