"""SUMMA's contended broadcasts: every speed change must leave the simulation bit for bit alone.

The digests in ``tests/data/summa_exact.json`` were recorded with the engine before the
contended-stream speed work (commit 1941e1d): per point, the cycles and their split,
a SHA-256 of every PE's timestamp marks, of every PE's C bytes, and the engine's counters
(wavelets forwarded, instructions, operations finished, express streams, conflicts). A change to
the fabric engine or the compute engine that moves one cycle, one mark or one bit fails here.

The sweep covers P <= 8, Mt <= 8, overlap on and off, in the fast fidelity, and a few points in
the reference fidelity. The "fast" points run in the 'lockstep-array' fidelity, which is 'fast'
with the lock-step phase at every size ('fast' uses it only where it pays, and these points are
below that): SUMMA's broadcasts (which share every PE's ramp, so no express stream can carry
them) are moved by the phase (:mod:`wafer.lockstep`) unless overlap makes them medium priority;
each point also checks that the phase moved every wavelet where it claims to, and a few points
run in the 'express' fidelity (no phase) and the 'lockstep-scalar' one. The default tier runs a
subset; ``-m slow`` the whole sweep.

Regenerate (only when a change of *mechanism* is intended, and say so in the commit):
``PYTHONPATH=. python tests/test_summa_exact.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from simcore import Simulation
from workloads.wafer import summa

DATA = Path(__file__).parent / "data" / "summa_exact.json"

SWEEP = [
    (p, mt, overlap, "fast")
    for p in (2, 3, 4, 5, 8)
    for mt in (1, 2, 5, 8)
    for overlap in (False, True)
] + [(3, 5, False, "reference"), (4, 2, True, "reference"), (5, 3, False, "reference")]
QUICK = {(2, 5, False, "fast"), (3, 8, True, "fast"), (4, 2, False, "fast"), (5, 5, False, "fast"),
         (8, 1, True, "fast"), (3, 5, False, "reference")}  # fmt: skip


def _key(point: tuple) -> str:
    p, mt, overlap, fidelity = point
    return f"p={p} mt={mt} overlap={overlap} {fidelity}"


#: The fidelity a point's "fast" runs in (see the module docstring).
FAST = "lockstep-array"


def digest(point: tuple, phase: list | None = None, fidelity: str | None = None) -> dict:
    """What one run leaves behind, reduced to comparable values. ``phase``, if given, receives
    the lock-step phase's counters (phases, wavelets) and the wavelets forwarded. ``fidelity``
    runs the point in another fidelity than its own."""
    p, mt, overlap, own = point
    fidelity = fidelity or (FAST if own == "fast" else own)
    params = summa.SummaParams(p=p, mt=mt, overlap=overlap)
    params = dataclasses.replace(params, wafer=dataclasses.replace(params.wafer, fidelity=fidelity))
    sim = Simulation()
    run = summa.build(sim, params)
    sim.check()
    result = sim.run()
    assert result.status == "completed", result.report
    wafer = run.wafer
    marks = hashlib.sha256()
    c = hashlib.sha256()
    for xy in sorted(wafer.pes):
        marks.update(repr((xy, sorted(wafer.pes[xy].ce.marks.items()))).encode())
        c.update(run.c[xy].read(wafer.ce(*xy).sram).tobytes())
    m = summa.metrics(sim, params, run, result)
    ces = [pe.ce for pe in wafer.pes.values()]
    engine = wafer.engine
    if phase is not None:
        ls = engine.lockstep
        forwarded = sum(r.forwarded for r in engine.routers)
        phase.extend([ls.phases, ls.wavelets, forwarded] if ls else [0, 0, forwarded])
    return {
        "cycles": m["cycles"],
        "split": [m["compute_cycles"], m["comm_cycles"], m["control_cycles"]],
        "marks": marks.hexdigest(),
        "c": c.hexdigest(),
        "forwarded": sum(r.forwarded for r in engine.routers),
        "instructions": sum(ce.instructions for ce in ces),
        "ops_finished": sum(ce.ops_finished for ce in ces),
        "tasks_run": sum(ce.tasks_run for ce in ces),
        "stolen_cycles": sum(ce.stolen_cycles for ce in ces),
        "express": [engine.express_streams, engine.express_wavelets, engine.fast_conflicts],
    }


def _recorded() -> dict:
    return json.loads(DATA.read_text())


@pytest.mark.parametrize(
    "point",
    [pytest.param(pt, marks=() if pt in QUICK else pytest.mark.slow) for pt in SWEEP],
    ids=_key,
)
def test_summa_is_bit_for_bit_what_it_was(point):
    phase: list = []
    assert digest(point, phase) == _recorded()[_key(point)]
    p, _, overlap, fidelity = point
    phases, moved, forwarded = phase
    if fidelity == "fast" and not overlap:
        # The lock-step phase moved every wavelet of the run (one phase per step, or fewer
        # when steps' broadcasts touch and one phase runs through them).
        assert 1 <= phases <= p
        assert moved == forwarded > 0
    else:  # overlap's medium-priority streams, and the reference fidelity: wavelet by wavelet
        assert phases == moved == 0


LOCKSTEP_POINTS = [(2, 5, False, "fast"), (3, 8, False, "fast"), (4, 1, False, "fast"),
                   (5, 2, False, "fast")]  # fmt: skip


@pytest.mark.parametrize("point", LOCKSTEP_POINTS, ids=_key)
def test_wavelet_path_and_scalar_phase_agree(point):
    """The same points without the phase (the 'express' fidelity: every one of these wavelets
    through the engine, the reference the digests were recorded with) and with the phase's
    scalar form (the 'lockstep-scalar' fidelity: the rules written out per router and CE, which
    the array form follows) give the digests too."""
    want = _recorded()[_key(point)]
    phase: list = []
    assert digest(point, phase, "express") == want
    assert phase[:2] == [0, 0]
    phase = []
    assert digest(point, phase, "lockstep-scalar") == want
    assert phase[0] >= 1 and phase[1] == phase[2]


def test_credit_table_holds_every_home_credit_count():
    """The array form keeps credits in the smallest signed type that holds FabricConfig's cap
    on a port's credits; raising the cap widens the table instead of wrapping counts."""
    import dataclasses

    import numpy as np

    from fabric.config import FabricConfig
    from wafer import lockstep

    caps = {f.name: f.metadata["max"] for f in dataclasses.fields(FabricConfig)}
    cap = max(caps["router_buffer_wavelets"], caps["ramp_credits"])
    assert np.iinfo(lockstep.CREDIT_DTYPE).max >= cap
    for c, want in ((1, np.int8), (127, np.int8), (128, np.int16), (32768, np.int32)):
        assert lockstep.credit_dtype(c) == want


def test_quiet_cycles_skipped_change_nothing(monkeypatch):
    """The array form skips the cycles of a phase in which nothing can change (a step's
    set-up, waits for a task's hold or a credit): the same digest with the skipping off, and
    it did skip."""
    from wafer import lockstep

    point = (4, 8, False, "fast")
    seen: list = []
    real_init = lockstep.VectorPhase.__init__

    def keep(self, *a):
        real_init(self, *a)
        seen.append(self)

    monkeypatch.setattr(lockstep.VectorPhase, "__init__", keep)
    with_skips = digest(point)
    assert seen[-1].quiet_cycles > 0
    monkeypatch.setattr(lockstep.VectorPhase, "_quiet", lambda self, t: -1)
    assert digest(point) == with_skips == _recorded()[_key(point)]
    assert seen[-1].quiet_cycles == 0


if __name__ == "__main__":
    DATA.write_text(json.dumps({_key(pt): digest(pt) for pt in SWEEP}, indent=1) + "\n")
    print(f"wrote {DATA} ({len(SWEEP)} points)")


def test_the_phase_is_used_where_it_pays():
    """The 'fast' fidelity uses the array phase where the program says it pays."""
    assert summa.LOCKSTEP_MIN_RATE == 10.0
    points = {(4, 14): False, (8, 8): True, (32, 1): False, (48, 1): False, (12, 4): True,
              (64, 8): True}  # fmt: skip
    for (p, mt), used in points.items():
        assert summa.lockstep_pays(summa.SummaParams(p=p, mt=mt)) is used
    phase: list = []
    digest((4, 5, False, "fast"), phase, "fast")  # rate 1.8: the wavelet path
    assert phase[:2] == [0, 0]
    phase = []
    digest((8, 8, False, "fast"), phase, "fast")  # rate 17.1: the phase
    assert phase[0] >= 1 and phase[1] == phase[2]


def _marks_and_c(params, fidelity: str) -> tuple[str, list]:
    params = dataclasses.replace(params, wafer=dataclasses.replace(params.wafer, fidelity=fidelity))
    sim = Simulation()
    run = summa.build(sim, params)
    sim.check()
    sim.run()
    h = hashlib.sha256()
    for xy in sorted(run.wafer.pes):
        h.update(repr((xy, sorted(run.wafer.pes[xy].ce.marks.items()))).encode())
        h.update(run.c[xy].read(run.wafer.ce(*xy).sram).tobytes())
    ls = run.wafer.engine.lockstep
    return h.hexdigest(), [ls.phases, ls.wavelets] if ls else [0, 0]


@pytest.mark.parametrize(
    ("kw", "fabric", "taken"),
    [
        ({"p": 4, "mt": 5, "overlap": True, "microthread_priority": "low"}, {}, True),
        (
            {"p": 4, "mt": 4},
            {"ramp_credits": 3, "hop_latency_cycles": 2, "ramp_credit_latency_cycles": 4},
            True,
        ),
        ({"p": 5, "mt": 3}, {"router_buffer_wavelets": 1, "ramp_latency_cycles": 3}, True),
        ({"p": 4, "mt": 4}, {"arbitration": "fixed"}, False),  # round robin only
    ],
    ids=str,
)
def test_phase_equals_the_wavelet_path_off_the_defaults(kw, fabric, taken):
    """Overlap at low priority (the windows of consecutive steps meet), other latencies, credits
    and buffers: marks and C bytes equal with and without the phase."""
    params = summa.SummaParams(**kw)
    wafer = params.wafer
    params = dataclasses.replace(
        params, wafer=dataclasses.replace(wafer, fabric=dataclasses.replace(wafer.fabric, **fabric))
    )
    with_phase, moved = _marks_and_c(params, "lockstep-array")
    assert (moved[0] > 0) is taken
    assert _marks_and_c(params, "express") == (with_phase, [0, 0])
