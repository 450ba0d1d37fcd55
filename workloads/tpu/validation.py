"""``wafersim validate tpu``: the simulation against the spec's formulas, regime by regime.

The sweep crosses the bandwidth-bound and latency-bound regimes of the ICI collectives on five
generations, rings and lines (with and without wraparound), one axis and several, slices joined
over DCN, point to point transfers, the chip's matmul roofline and critical batch, and the
data-parallel training step and its critical per-chip batch. The model column is always the
formula of :mod:`workloads.tpu.models` (never fitted to the simulation).

Where simulation and formula differ for a modelled reason, the point's label says which, in
brackets; those rows form the second case, ``tpu-explained``, whose tolerance is loose on
purpose: its job is to show and name the gaps. The ``tpu`` case holds the rows where the
formula's assumptions hold, and must agree within a few percent.

Packets: the bandwidth-bound cases (16 MiB and more) run with 1 MiB packets (``COARSE``) so the
sweep takes seconds, not hours: with cut-through a packet's size changes a transfer's time only by
one packet's serialisation per phase (``tests/test_tpu_network.py`` and
``tests/test_tpu_collectives.py`` bound it), a fraction of a percent at these sizes.
"""

from __future__ import annotations

from typing import Any

from runner import registry
from simcore import config as cfg
from workloads.tpu import models
from workloads.tpu.collective import CollectiveParams
from workloads.tpu.matmul import MatmulParams
from workloads.tpu.p2p import P2pParams
from workloads.tpu.trainstep import TrainStepParams

MIB = 1 << 20
#: Packets for the bandwidth-bound cases: coarse, for speed (see the module's docstring).
COARSE = {"ici": {"packet_bytes": MIB, "buffer_bytes": 16 * MIB}}

#: Reasons, printed in the labels of rows where simulation and formula differ by design.
FIRST_PHASE = "first phases: formula counts the last axis only, +1/|X| per earlier axis"
LATENCY_ADDS = "hop latency adds to serialisation; formula takes the max"
LATENCY_AT_CROSSOVER = "at the crossover: path latency + serialisation vs the max()"
FILL = "pipeline fill and drain: first tile in, last tile out"
HBM_ALL = "X and the f32 output also cross HBM; formula counts W only"
LAST_BLOCK = "each gathered block waits for the previous gather to end everywhere"
DCN_SKEW = "hosts' NICs finish chips at different times; the parts then share ICI axes"
CROSSOVER = "near the crossover: blocks overlap partly, the formula's max() + 1/blocks is rough"
EXPOSED = "the exposed AllReduce includes its last block and hop latencies"

Row = tuple[str, dict[str, Any], str | None]  # (label, parameters, reason or None)


def _size(nbytes: int) -> str:
    if nbytes % MIB == 0:
        return f"{nbytes // MIB}MiB"
    return f"{nbytes // 1024}KiB" if nbytes % 1024 == 0 else f"{nbytes / 1000:g}kB"


def _coll(
    chip: str, topo: str, axes: str, op: str, nbytes: int, why: str | None = None, **kw: Any
) -> Row:
    note = f" ({kw['ring']})" if "ring" in kw else ""
    many = f"{kw['slices']} slices of " if "slices" in kw else ""
    label = f"{many}{chip} {topo} {axes} {op}{note} {_size(nbytes)}"
    return label, dict(chip=chip, topology=topo, axes=axes, op=op, bytes=nbytes, **kw), why


def _p2p(
    chip: str, topo: str, src: str, dst: str, nbytes: int, paths: int = 1, slices: int = 1
) -> Row:
    many = f"{slices} slices of " if slices > 1 else ""
    label = f"p2p {many}{chip} {topo} {src}->{dst} {_size(nbytes)} {paths} path(s)"
    kw = dict(chip=chip, topology=topo, src=src, dst=dst, bytes=nbytes, paths=paths)
    return label, {**kw, "slices": slices}, None


V = 256 * MIB
COLLECTIVES: list[Row] = [
    _coll("v5e", "16x16", "x", "allgather", V),
    _coll("v5e", "16x16", "x", "reducescatter", V),
    _coll("v5e", "16x16", "x", "allreduce", V),
    _coll("v5e", "16x16", "x", "alltoall", V),
    _coll("v5e", "16x16", "x", "allgather", V, ring="unidirectional"),
    _coll("v6e", "16x4", "x", "allreduce", V),
    _coll("v3", "32x2", "x", "allgather", V),
    _coll("v5p", "4x4x4", "z", "allgather", V),
    _coll("v4p", "4x4x8", "z", "allreduce", V),
    _coll("v5e", "8x16", "x", "allgather", V),  # a line: no wraparound on x
    _coll("v5p", "4x4x2", "x", "allreduce", V),  # a line: not whole cubes
    _coll("v5e", "8x16", "x", "alltoall", V),
    _coll("v5e", "16x16", "xy", "allgather", V, FIRST_PHASE),
    _coll("v5p", "4x4x4", "xyz", "allreduce", 255 * MIB, FIRST_PHASE),
    _coll("v5e", "16x16", "x", "allgather", 16 * 1024, LATENCY_ADDS),
    _coll("v5p", "4x4x4", "x", "allreduce", 4096, LATENCY_ADDS),
    _coll("v5e", "16x16", "x", "allgather", 720_000, LATENCY_AT_CROSSOVER),  # 45 kB per hop
    _coll("v5e", "16x16", "xy", "alltoall", 16 * MIB, LATENCY_ADDS),
    _coll("v5e", "16x16", "s", "allreduce", 64 * MIB, slices=2),  # over DCN only
    _coll("v5e", "16x16", "xys", "allreduce", 64 * MIB, DCN_SKEW, slices=2),
]

P2P: list[Row] = [
    _p2p("v5e", "4x4", "0,0", "3,3", 17_000_000),
    _p2p("v5e", "4x4", "0,0", "3,3", 17_000_000, paths=2),
    _p2p("v5p", "8x8x8", "0,0,0", "4,4,4", 64 * MIB, paths=3),
    _p2p("v5e", "4x4", "0,0,0", "1,3,3", 17_000_000, slices=2),
]


#: A row before its case is known: (label, simulated, model, unit, reason or None).
Result = tuple[str, float, float, str, str | None]


def _coarse(kw: dict[str, Any]) -> dict[str, Any]:
    return COARSE if kw["bytes"] >= 16 * MIB else {}


def _collectives(runner: registry.Runner) -> list[Result]:
    pts = [
        cfg.load(CollectiveParams, {**kw, "payload": "size", **_coarse(kw)})
        for _, kw, _ in COLLECTIVES
    ]
    runs = runner("tpu-collective", pts)
    rows = [
        (label, m["time_s"], m["model_time_s"], "s", why)
        for (label, _, why), m in zip(COLLECTIVES, runs, strict=True)
    ]
    pts = [cfg.load(P2pParams, {**kw, "payload": "size", **_coarse(kw)}) for _, kw, _ in P2P]
    runs = runner("tpu-p2p", pts)
    rows += [
        (label, m["time_s"], m["model_time_s"], "s", why)
        for (label, _, why), m in zip(P2P, runs, strict=True)
    ]
    return rows


def _matmuls(runner: registry.Runner) -> list[Result]:
    """The roofline rows, then the critical batch of each chip from three more runs of one
    call: compute per row (a large batch) against the memory-bound time (two small batches give
    its intercept and slope), crossing where they meet."""
    shown = [("v5e", 4096, b) for b in (64, 240, 1024, 4096)]
    shown += [("v5p", 4096, b) for b in (128, 2048)]
    probes = [(c, 8192, b) for c in ("v5e", "v5p") for b in (32, 64, 4096)]
    pts = [
        cfg.load(MatmulParams, dict(chip=c, topology="1x1" if c == "v5e" else "1x1x1",
                                    sharding="none", i=b, j=d, k=d, payload="size", **COARSE))
        for c, d, b in shown + probes
    ]  # fmt: skip
    sharded = [
        (dict(chip="v5e", topology="16x1", sharding="contracting", i=1024, j=8192, k=4096,
              blocks=8), None),
        (dict(chip="v5p", topology="4x4x4", axes="z", sharding="contracting", i=2048, j=8192,
              k=8192, blocks=8), None),
        (dict(chip="v5p", topology="4x4x4", axes="x", sharding="both", i=8192, j=4096, k=8192,
              blocks=4), None),
        (dict(chip="v5e", topology="16x1", sharding="both", i=4096, j=4096, k=8192, blocks=4),
         LAST_BLOCK),
    ]  # fmt: skip
    pts += [cfg.load(MatmulParams, {**kw, "payload": "size", **COARSE}) for kw, _ in sharded]
    runs = runner("tpu-matmul", pts)
    rows: list[Result] = [
        (f"matmul {c} X[{b},{d}]·W[{d},{d}]", m["time_s"], m["model_time_s"], "s", FILL)
        for (c, d, b), m in zip(shown, runs, strict=False)
    ]
    for (kw, why), m in zip(sharded, runs[len(shown) + len(probes) :], strict=True):
        label = (
            f"matmul {kw['chip']} {kw['topology']} {kw.get('axes', 'x')} {kw['sharding']} "
            f"[{kw['i']},{kw['j']}]·[{kw['j']},{kw['k']}]"
        )
        rows.append((label, m["time_s"], m["model_time_s"], "s", why))
    for at, chip in ((len(shown), "v5e"), (len(shown) + 3, "v5p")):
        small, smaller, large = runs[at + 1], runs[at], runs[at + 2]
        per_row = large["mxu_busy_s"] / 4096
        slope = (small["time_s"] - smaller["time_s"]) / 32
        base = smaller["time_s"] - slope * 32
        spec = pts[at].spec
        label = f"critical batch {chip} bf16 (rows)"
        rows.append((label, base / (per_row - slope), models.critical_batch(spec), "rows", HBM_ALL))
    return rows


def _train(runner: registry.Runner) -> list[Result]:
    base = dict(chip="v5p", topology="4x4x4", axes="x", d_model=2048, d_ff=4096)
    cases = [(s, b) for s in ("dp", "fsdp") for b in (256, 512, 2048, 8192)]
    runs = runner("tpu-train-step", [
        cfg.load(TrainStepParams, {**base, "strategy": s, "batch": b, **COARSE}) for s, b in cases
    ])  # fmt: skip
    rows: list[Result] = []
    for (s, b), m in zip(cases, runs, strict=True):
        ratio = m["model_compute_s"] / m["model_comm_s"]
        why = None if ratio < 0.5 or ratio > 2 else CROSSOVER
        rows.append((f"train {s} v5p 4x4x4 x batch {b}", m["time_s"], m["model_time_s"], "s", why))
    # the data-parallel critical batch, from the simulation: the exposed AllReduce at a small
    # batch against the backward pass's compute per sample at a large one
    lo, hi = runs[0], runs[3]
    per_sample = hi["mxu_busy_s"] / 8192
    comm = lo["time_s"] - lo["mxu_busy_s"] / 3
    sim_b = comm / (2 / 3 * per_sample)
    rows.append(
        ("critical batch dp v5p x (per chip)", sim_b, lo["model_critical_batch"], "rows", EXPOSED)
    )
    return rows


#: ``tpu-fidelity``: the flow fidelity against the packet one (the reference) on bandwidth-bound
#: cases, each message 64 packets or more (tests/test_tpu_fidelity.py has the whole matrix).
FIDELITY: list[tuple[str, str, dict[str, Any]]] = [
    ("v5e 16x16 x allreduce 64MiB", "tpu-collective",
     dict(chip="v5e", topology="16x16", axes="x", op="allreduce", bytes=64 * MIB, **COARSE)),
    ("v5e 8x16 x allgather 64MiB (a line)", "tpu-collective",
     dict(chip="v5e", topology="8x16", axes="x", op="allgather", bytes=64 * MIB, **COARSE)),
    ("v5e 16x16 xy allreduce 256MiB", "tpu-collective",
     dict(chip="v5e", topology="16x16", axes="xy", op="allreduce", bytes=V, **COARSE)),
    ("v5e 4x4 xy reducescatter 16MiB", "tpu-collective",
     dict(chip="v5e", topology="4x4", axes="xy", op="reducescatter", bytes=16 * MIB)),
    ("v5e 4x4 xy alltoall 64MiB", "tpu-collective",
     dict(chip="v5e", topology="4x4", axes="xy", op="alltoall", bytes=64 * MIB)),
    ("v5p 4x4x4 xyz allreduce 16MiB", "tpu-collective",
     dict(chip="v5p", topology="4x4x4", axes="xyz", op="allreduce", bytes=16 * MIB)),
    ("2 slices of v5e 4x2 xys allreduce 8MiB", "tpu-collective",
     dict(chip="v5e", topology="4x2", axes="xys", op="allreduce", bytes=8 * MIB, slices=2)),
    ("p2p v5e 4x4 0,0->3,3 17MB every port", "tpu-p2p",
     dict(chip="v5e", topology="4x4", src="0,0", dst="3,3", bytes=17_000_000, paths=0)),
]  # fmt: skip


def _fidelity(runner: registry.Runner) -> list[registry.ValidationRow]:
    """Each case at ``ici.fidelity`` flow (the simulated column) and packet (the model column)."""
    rows = []
    for kind, params in (("tpu-collective", CollectiveParams), ("tpu-p2p", P2pParams)):
        cases = [(label, kw) for label, k, kw in FIDELITY if k == kind]
        pts = [
            cfg.load(
                params, {**kw, "payload": "size", "ici": {**kw.get("ici", {}), "fidelity": fid}}
            )
            for fid in ("flow", "packet")
            for _, kw in cases
        ]
        done = runner(kind, pts)  # one call per kind: a parallel runner runs them all at once
        runs = {"flow": done[: len(cases)], "packet": done[len(cases) :]}
        for (label, _), flow, packet in zip(cases, runs["flow"], runs["packet"], strict=True):
            row = registry.ValidationRow(
                "tpu-fidelity", f"{label}: flow vs packet", flow["time_s"], packet["time_s"],
                unit="s",
            )  # fmt: skip
            rows.append(row)
    return rows


def _all(runner: registry.Runner) -> list[Result]:
    return _collectives(runner) + _matmuls(runner) + _train(runner)


#: The last sweep and the runner that ran it (held, so the two cases share one sweep when
#: `wafersim validate tpu tpu-explained` gives them the same runner).
_last: list[Any] = [None, None]


def _rows(runner: registry.Runner, explained: bool) -> list[registry.ValidationRow]:
    if _last[0] is not runner:
        _last[:] = [runner, _all(runner)]
    case = "tpu-explained" if explained else "tpu"
    return [
        registry.ValidationRow(case, f"{label} [{why}]" if why else label, sim, model, unit=unit)
        for label, sim, model, unit, why in _last[1]
        if (why is not None) == explained
    ]


def register() -> None:
    registry.register_case(
        registry.ValidationCase(
            name="tpu",
            summary="TPU collectives, transfers, training steps vs the spec's formulas "
            "(bandwidth-bound, assumptions held)",
            run=lambda runner: _rows(runner, explained=False),
            tolerance=5.0,
            criterion="max_pct",
            origin=__name__,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="tpu-fidelity",
            summary="TPU ICI: the flow fidelity (model column: the packet fidelity, the "
            "reference) on bandwidth-bound collectives and a transfer",
            run=_fidelity,
            tolerance=2.0,
            criterion="max_pct",
            origin=__name__,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="tpu-explained",
            summary="TPU rows where simulation and formula differ for a named, modelled reason",
            run=lambda runner: _rows(runner, explained=True),
            # the largest row: the hierarchical AllReduce over two slices, +43.6 %
            tolerance=50.0,
            criterion="max_pct",
            origin=__name__,
        )
    )
