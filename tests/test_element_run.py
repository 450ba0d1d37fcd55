"""A task's run of one-element instructions (``TaskContext.element_run``,
``TensorUnit.execute_run``) against the reference: the same instructions issued one by one
through ``t.op`` with the same scalar-work debt between them. SRAM bytes, the task's cycles,
the instruction counters and the ops-level trace must be the same, on random blocks of random
operand forms, values (FP32 edge values, NaNs and infinities included, which the fast path
hands to the per-instruction path) and debts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pe.dsd import MemDsd
from pe.program import Layout
from simcore import Simulation
from simcore.errors import BuildError
from simcore.tracing import ListTracer, TraceLevel
from wafer.system import Wafer, WaferConfig

WORDS = 6  # per buffer: small, so that offsets collide and runs read what they wrote

_EDGE = [0.0, -0.0, 1.0, -1.5, 3.4028234663852886e38, -3.4028234663852886e38, 1e-45,
         -1e-45, 1.1754943508222875e-38, float("inf"), float("-inf"), float("nan"), 2.0**100,
         0.1]  # fmt: skip
_F32 = st.one_of(
    st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.sampled_from(_EDGE),
).map(lambda v: float(np.float32(v)))
_SCALAR = st.one_of(
    st.floats(-1e6, 1e6),
    st.integers(-(10**6), 10**6).map(lambda i: i / 7),  # (doubles that FP32 must round)
    st.sampled_from([*_EDGE, 1e39, -1e300]),
    st.integers(-3, 3),
)


def _program(
    op: str, plan: dict, mode: str, fast_path: bool, vector_min: int = 8, traced: bool = True
) -> dict:
    """Run the plan's instructions in one task of a 1 x 1 wafer, by ``mode`` ('op': one
    ``t.op`` each, the reference; 'run': one ``t.element_run``); what they leave."""
    got: dict = {}

    def code(pe):
        bufs = [pe.array(f"b{i}", np.array(v, np.float32)) for i, v in enumerate(plan["bufs"])]
        # (a descriptor moved to its second word: offsets are from the descriptor's offset)
        bufs = [b.with_offset(1).with_length(WORDS - 1) for b in bufs]

        def operand(form):
            kind, val = form
            return (bufs[val[0]], val[1]) if kind == "mem" else val

        @pe.local_task(id=10)
        def task(t):
            t.mark("start")
            dst = operand(plan["dst"])
            # (the destination again as a source: the same tuple, or an equal one)
            same = plan.get("same_object", True)
            srcs = [dst if f is plan["dst"] and same else operand(f) for f in plan["srcs"]]
            after, before, befores = plan["after"], plan["before"], plan["befores"]
            debt = plan["debt"]
            n = len(dst[1])
            if mode == "run":
                debt = t.element_run(
                    op, dst, *srcs, after=after, before=before, befores=befores, debt=debt
                )
            else:
                for k in range(n):
                    for _ in range(befores[k]):
                        debt += before
                    ops = [
                        s[0].with_length(1).with_offset(s[1][k]) if type(s) is tuple
                        else s[k] if type(s) is list
                        else s
                        for s in srcs
                    ]  # fmt: skip
                    t.op(op, dst[0].with_length(1).with_offset(dst[1][k]), *ops)
                    debt += after
                    whole = int(debt)
                    t.now += whole
                    debt -= whole
            got["debt"] = debt
            t.now += math.ceil(debt)
            t.mark("end")

        pe.start(task)

    layout = Layout(1, 1)
    layout.set_rectangle_code(code)
    tracer = ListTracer(TraceLevel.OPS if traced else TraceLevel.OFF)
    sim = Simulation(tracer=tracer)
    wafer = Wafer(sim, WaferConfig(), layout)
    wafer.tensor_unit.fast_path = fast_path
    wafer.tensor_unit.run_vector_min = vector_min
    with np.errstate(all="ignore"):
        result = sim.run()
    assert result.status == "completed", result.report
    ce = wafer.ce(0, 0)
    got.update(
        sram=ce.sram.data.tobytes(), marks=dict(ce.marks), instructions=ce.instructions,
        fast=wafer.tensor_unit.fast_instructions, busy=ce.busy_cycles,
        trace=[e for e in tracer.events if e.get("category") == "instr"],
    )  # fmt: skip
    return got


_OPS = {"fmacs": 3, "fadds": 2, "fsubs": 2, "fmuls": 2, "fmaxs": 2, "fmovs": 1}


@st.composite
def _plans(draw, op: str) -> dict:
    n = draw(st.integers(0, 12))
    offs = st.lists(st.integers(0, WORDS - 2), min_size=n, max_size=n)
    scalar_srcs = {"fmacs": (1, 2), "fmovs": (0,)}.get(op, (0, 1))
    bufs = [draw(st.lists(_F32, min_size=WORDS, max_size=WORDS)) for _ in range(3)]
    dst = ("mem", (draw(st.integers(0, 2)), draw(offs)))
    srcs: list = []
    if op == "fmacs" and draw(st.booleans()):  # spmv's form: y[i] += x[c] * a, a per non-zero
        srcs = [dst, ("mem", (draw(st.integers(0, 2)), draw(offs))),
                ("scalar", draw(st.lists(st.one_of(st.floats(-1e6, 1e6), _SCALAR),
                                         min_size=n, max_size=n)))]  # fmt: skip
    for i in range(len(srcs), _OPS[op]):
        choice = draw(st.sampled_from(["dst", "mem", "list", "const"]))
        if choice == "dst":  # the destination again (an accumulator): the same offsets
            srcs.append(dst)
        elif choice == "mem" or i not in scalar_srcs:
            srcs.append(("mem", (draw(st.integers(0, 2)), draw(offs))))
        elif choice == "list":
            srcs.append(("scalar", draw(st.lists(_SCALAR, min_size=n, max_size=n))))
        else:
            srcs.append(("scalar", draw(_SCALAR)))
    frac = st.sampled_from([0.0, 0.25, 0.3, 1.0, 1.7, 2.0, 4.0])
    return {
        "bufs": bufs, "dst": dst, "srcs": srcs, "after": draw(frac), "before": draw(frac),
        "befores": draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
        "debt": draw(st.sampled_from([0.0, 0.5, 3.0])), "same_object": draw(st.booleans()),
    }  # fmt: skip


def _same(a: dict, b: dict) -> None:
    assert a["sram"] == b["sram"]
    for key in ("marks", "instructions", "fast", "busy", "trace"):
        assert a[key] == b[key], key
    assert a["debt"] == b["debt"] or (math.isnan(a["debt"]) and math.isnan(b["debt"]))


@pytest.mark.parametrize("op", sorted(_OPS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_run_is_its_instructions_one_by_one(op: str, data) -> None:
    plan = data.draw(_plans(op))
    fast_path = data.draw(st.sampled_from([True, True, False]))
    vector_min = data.draw(st.sampled_from([1, 8]))  # (short runs' products in one multiply too)
    traced = data.draw(st.booleans())  # (untraced: the debt's whole-cycle sum)
    _same(
        _program(op, plan, "run", fast_path, vector_min, traced),
        _program(op, plan, "op", fast_path, vector_min, traced),
    )


def test_spmv_like_runs_take_the_fast_path_and_non_finite_values_the_reference():
    """The fast path counts its instructions; a NaN met in the run goes the reference's way
    (the same bytes) and the rest of the run stays fast."""
    plan = {
        "bufs": [[1.0, 2.0, float("nan"), 4.0, 5.0, 6.0], [0.5] * WORDS, [0.0] * WORDS],
        "dst": ("mem", (1, [0, 0, 1, 2, 2])),
        "srcs": [("mem", (1, [0, 0, 1, 2, 2])), ("mem", (0, [0, 3, 1, 2, 4])),
                 ("scalar", [0.5, 1.5, 2.5, 3.5, 4.5])],
        "after": 2.0, "before": 4.0, "befores": [1, 0, 1, 1, 0], "debt": 0.0,
    }  # fmt: skip
    run = _program("fmacs", plan, "run", True)
    ref = _program("fmacs", plan, "op", True)
    _same(run, ref)
    assert run["instructions"] == 5 and run["fast"] == 5  # (the NaN's numpy form is fast too)
    assert len(run["trace"]) == 5


def test_a_run_refuses_operands_it_cannot_take():
    from pe import isa
    from pe.config import PeConfig
    from pe.memory import Sram

    cfg = PeConfig()
    unit, sram = isa.TensorUnit(cfg), Sram(cfg, owner="t")
    buf = sram.alloc_array("y", "f32", 4)
    y = MemDsd.vector(buf.base, "f32", 4)
    with pytest.raises(isa.OperandError, match="src1 has 1 entries but dst has 2 offsets"):
        unit.execute_run("fadds", sram, (y, [0, 1]), ((y, [0, 1]), [1.0]))
    with pytest.raises(isa.OperandError, match="dst must be"):
        unit.execute_run("fadds", sram, y, ((y, [0]), 1.0))
    with pytest.raises(isa.OperandError, match="src0 is a DSD"):
        unit.execute_run("fadds", sram, (y, [0]), (y, 1.0))
    assert isinstance(isa.OperandError("x"), BuildError)
