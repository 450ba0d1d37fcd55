"""The simulator's speed paths change how fast it runs, never what it simulates.

- SUMMA's cycles and their split are pinned at small points, in both fidelities, so an
  optimisation that moves a cycle fails (values measured before the speed work, commit 90d8433;
  re-measured in issue 13, when the main thread started sharing the datapath with microthreads
  and router writes became posted, 10 cycles of CE work each landing 120 cycles later, which
  hides the second broadcast's set-up: -224..-671 cycles);
- the FP32 fast path keeps per-descriptor views and costs: a descriptor used with two memories or
  under two configurations (two tensor units) must still read the right bytes and cost what
  ``cost_cycles`` says;
- a run freezes the built model out of the garbage collector and restores the collector after;
- the wafer benchmark's pattern (row broadcasts in turn) is pinned in both fidelities at two
  trace levels: every PE's marks, counters and SRAM bytes, and every trace record in emission
  order (digests measured before the benchmark's speed work in issue 13).
"""

from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest

from pe import isa
from pe.config import PeConfig
from pe.memory import Sram
from runner.scenario import run_kind
from simcore.tracing import TraceLevel
from workloads.wafer import summa

# (p, mt, overlap, fidelity) -> (cycles, compute, comm, control, critical PE)
PINNED = {
    (2, 3, False, "fast"): (1032, 299, 722, 11, [1, 0]),
    (3, 5, False, "fast"): (2715, 1540, 1159, 16, [2, 0]),
    (3, 5, False, "reference"): (2715, 1540, 1159, 16, [2, 0]),
    (4, 4, False, "fast"): (2707, 1188, 1498, 21, [3, 0]),
    (4, 2, True, "fast"): (1466, 869, 576, 21, [3, 0]),
    (4, 2, True, "reference"): (1466, 869, 576, 21, [3, 0]),
}


@pytest.mark.parametrize(("point", "want"), PINNED.items(), ids=str)
def test_summa_cycles_are_pinned(point, want):
    p, mt, overlap, fidelity = point
    params = summa.SummaParams(p=p, mt=mt, overlap=overlap)
    params = dataclasses.replace(params, wafer=dataclasses.replace(params.wafer, fidelity=fidelity))
    m = run_kind("summa", params)
    got = (m["cycles"], m["compute_cycles"], m["comm_cycles"], m["control_cycles"])
    assert (*got, m["critical_pe_xy"]) == want
    assert m["correct"]


def test_fast_path_descriptor_shared_by_two_memories():
    cfg = PeConfig()
    rng = np.random.default_rng(7)
    srams = [Sram(cfg, owner=f"pe{i}") for i in range(4)]
    descs = [(s.alloc_array("c", "f32", 24), s.alloc_array("a", "f32", 24)) for s in srams]
    c, a = descs[0]  # every SRAM allocates alike: one pair of descriptors serves them all
    c_col, a_col = c.with_length(8).with_offset(8), a.with_length(8).with_offset(16)
    for s in srams:
        c.write(s, rng.standard_normal(24).astype(np.float32))
        a.write(s, rng.standard_normal(24).astype(np.float32))
    twins = [Sram(cfg, owner=f"twin{i}") for i in range(2)]
    for twin, s in zip(twins, srams[:2], strict=False):
        twin.alloc_array("c", "f32", 24)
        twin.alloc_array("a", "f32", 24)
        twin.data[:] = s.data
    unit, general = isa.TensorUnit(cfg), isa.TensorUnit(cfg, fast_path=False)
    # Alternate memories so the descriptor's kept view must follow the memory in use.
    for s, twin in ((srams[0], twins[0]), (srams[1], twins[1]), (srams[0], twins[0])):
        fast = unit.execute("fmacs", s, c_col, (c_col, a_col, 1.25))
        slow = general.execute("fmacs", twin, c_col, (c_col, a_col, 1.25))
        assert fast == slow
        assert s.data.tobytes() == twin.data.tobytes()
    assert unit.fast_instructions == 3
    assert srams[2].data.tobytes() != srams[0].data.tobytes()  # untouched memories differ


def test_fast_path_overflow_is_silent_and_the_error_state_restored():
    """The fast path sets numpy's FP error state to "ignore" around an instruction itself (not
    through ``np.errstate``): an overflow gives the general path's bits without a warning, and
    the caller's error state is back afterwards, also when the instruction declines midway."""
    import warnings

    cfg = PeConfig()
    sram, twin = Sram(cfg, owner="pe"), Sram(cfg, owner="twin")
    c, a = sram.alloc_array("c", "f32", 8), sram.alloc_array("a", "f32", 8)
    twin.alloc_array("c", "f32", 8)
    twin.alloc_array("a", "f32", 8)
    big = np.full(8, 3e38, np.float32)
    for s in (sram, twin):
        c.write(s, big)
        a.write(s, big)
    unit, general = isa.TensorUnit(cfg), isa.TensorUnit(cfg, fast_path=False)
    before = np.geterr()
    with np.errstate(over="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        raising = np.geterr()
        assert unit.execute("fmacs", sram, c, (c, a, 1e30)) == general.execute(
            "fmacs", twin, c, (c, a, 1e30)
        )
        assert np.geterr() == raising
        # a source of another length: the fast path declines after setting the state
        short = a.with_length(4)
        with pytest.raises(isa.OperandError):
            unit.execute("fmacs", sram, c, (c, short, 1.0))
        assert np.geterr() == raising
    assert np.geterr() == before
    assert unit.fast_instructions == 1
    assert sram.data.tobytes() == twin.data.tobytes()
    assert np.isinf(c.read(sram)).all()


def test_fast_path_cost_follows_the_unit():
    base = PeConfig()
    slow = dataclasses.replace(base, fp32_fmac_cycles_per_element=3, dsd_setup_cycles=7)
    sram = Sram(base, owner="pe")
    c, a = sram.alloc_array("c", "f32", 16), sram.alloc_array("a", "f32", 16)
    y, b = sram.alloc_array("y", "f32", 8), sram.alloc_array("b", "f32", 8)
    units = {cfg: isa.TensorUnit(cfg) for cfg in (base, slow)}
    # Alternate units so the descriptors' kept state must follow the unit (and config) in use.
    # The units meet the descriptors in different orders, so they number timing classes
    # differently: state one unit made must not be read with the other's numbers.
    runs = [(base, c, a), (slow, y, b), (slow, c, a), (base, y, b), (base, c, a), (slow, c, a)]
    for cfg, dst, src in runs:
        got = units[cfg].execute("fmacs", sram, dst, (dst, src, 0.5))
        assert got == isa.cost_cycles("fmacs", dst.length, cfg, dst=dst, srcs=(dst, src, None))
    assert units[slow].execute("fmacs", sram, c, (c, a, 0.5)) > units[base].execute(
        "fmacs", sram, c, (c, a, 0.5)
    )
    assert [u.fast_instructions for u in units.values()] == [4, 4]


def test_run_restores_the_collector():
    before = gc.get_threshold()
    m = run_kind("summa", summa.SummaParams(p=2, mt=2))
    assert m["correct"]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def _summa_c_and_marks(params):
    from simcore import Simulation

    sim = Simulation()
    run = summa.build(sim, params)
    sim.check()
    sim.run()
    c = {xy: d.read(run.wafer.ce(*xy).sram).tobytes() for xy, d in run.c.items()}
    marks = {xy: dict(pe.ce.marks) for xy, pe in run.wafer.pes.items()}
    instructions = sum(pe.ce.instructions for pe in run.wafer.pes.values())
    return c, marks, instructions


@pytest.mark.parametrize(
    "kw",
    [
        {"p": 3, "mt": 5},
        {"p": 2, "mt": 7, "overlap": True},
        {"p": 2, "mt": 6, "loop_overhead_cycles": 0.3},
        {"p": 3, "mt": 4, "loop_overhead_cycles": 1.7, "seed": 9},
    ],
    ids=str,
)
def test_batched_summa_loop_equals_one_instruction_at_a_time(kw, monkeypatch):
    """SUMMA's batched compute loop: every PE's C bytes, every timestamp mark and the
    instruction count equal those of one ``t.op("fmacs", ...)`` per (k, j)."""
    params = summa.SummaParams(**kw)
    batched = _summa_c_and_marks(params)
    monkeypatch.setattr(summa, "BATCHED_LOOP", False)
    assert _summa_c_and_marks(params) == batched


def _row_broadcast_run(width: int, words: int, rounds: int, fidelity: str, level: int):
    """The wafer benchmark's pattern (every row broadcasts from root 0, 1, ... in turn) with
    random data, run at a trace level; returns digests of its state and trace, and its span."""
    import hashlib

    from wafer_programs import chained_row_broadcasts

    from simcore import Simulation
    from simcore.tracing import ListTracer
    from wafer.system import WaferConfig

    tracer = ListTracer(level)
    sim = Simulation(tracer=tracer)
    build = chained_row_broadcasts(width, width, words, rounds, seed=width)
    wafer, _ = build(sim, WaferConfig(fidelity=fidelity))
    assert sim.run().status == "completed"
    e = wafer.engine
    state = [sim.env.now, wafer.sched.cycles_stepped, e.express_streams, e.fast_conflicts]
    for xy, pe in sorted(wafer.pes.items()):
        ce, r = pe.ce, pe.router
        state.append((xy, sorted(ce.marks.items()), ce.busy_cycles, ce.tasks_run,
                      ce.stolen_cycles, ce.ops_finished, r.forwarded, r.stall_cycles,
                      ce.sram.image()))  # fmt: skip

    def digest(obj) -> str:
        return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]

    return wafer.span_cycles("start0", f"end{rounds - 1}"), digest(state), digest(tracer.events)


# (fidelity, trace level) -> (span, state digest, trace digest) of 5 x 5 PEs broadcasting 100
# words 3 times per row, measured before the wafer-benchmark speed work (whose
# changes must move no cycle, mark, counter, SRAM byte or trace record, nor their order).
ROW_BROADCASTS = {
    ("fast", TraceLevel.OPS): (1211, "45091d8e1ecffaa1", "c35f7040a0ff86e5"),
    ("fast", TraceLevel.DETAIL): (1211, "45091d8e1ecffaa1", "293c60b582e97ce5"),
    ("reference", TraceLevel.OPS): (1211, "14fd7304a18ac5de", "11ae67ff7b861434"),
    ("reference", TraceLevel.DETAIL): (1211, "14fd7304a18ac5de", "fb02d208ddb9c08d"),
}


@pytest.mark.parametrize(("point", "want"), ROW_BROADCASTS.items(), ids=str)
def test_row_broadcasts_are_pinned(point, want):
    fidelity, level = point
    assert _row_broadcast_run(5, 100, 3, fidelity, level) == want


def _run_allocating(n: int) -> tuple[int, list[int], int]:
    """A bare run whose one process makes ``n`` new lists that outlive it; the young threshold
    seen inside it after they are made, each collection's generation from the run's start to
    just after its end (a collection the restored threshold sets off at the first allocation
    after the run is counted), and the young generation's count then."""
    from simcore import Simulation

    sim = Simulation()
    sim.domain("main", 1_000)
    seen: dict[str, int] = {}
    collections: list[int] = []
    kept: list[list[int]] = []

    def grow(env):
        gc.callbacks.append(record)  # (from inside the run: none of the build's collections)
        kept.extend([i] for i in range(n))
        seen["young"] = gc.get_threshold()[0]
        yield env.timeout(1)

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    sim.env.process(grow(sim.env))
    try:
        sim.run()
    finally:
        young_after = gc.get_count()[0]
        gc.callbacks.remove(record)
    assert len(kept) == n
    return seen["young"], collections, young_after


def test_the_young_threshold_follows_the_frozen_model_from_the_first_collection(monkeypatch):
    from simcore import sim as simmod

    counted: list[int] = []
    real_count = gc.get_freeze_count

    def counting() -> int:
        counted.append(real_count())
        return counted[-1]

    monkeypatch.setattr(gc, "get_freeze_count", counting)
    monkeypatch.setattr(simmod, "RUN_GC_YOUNG", 5_000)
    before = gc.get_threshold()
    # A small run never collects, so it never walks the frozen objects to count them.
    young, collections, _ = _run_allocating(1_000)
    assert (young, collections, counted) == (5_000, [], [])
    # A run past the threshold counts once, at its first collection, and scales the threshold
    # for the rest of the run (this process's frozen objects are far more than 5,000).
    young, collections, young_after = _run_allocating(40_000)
    assert len(counted) == 1 and counted[0] > 20_000
    assert young == simmod.RUN_GC_PER_MODEL_OBJECT * counted[0]
    assert collections == [0]
    # What the run kept went to the oldest generation with the model: the young generation is
    # empty, so the next allocation does not scan all of it.
    assert young_after < 100
    assert gc.get_threshold() == before
    assert real_count() == 0
