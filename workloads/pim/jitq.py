"""``jitq``: just-in-time MX quantization of a BF16 weight matrix by the HBM's PIM units.

The master matrix (seeded random BF16 or FP32 values with a spread of exponents, zeros among
them; FP32 as two 16-bit planes, high and low halves side by side in each row) is
resident in the even banks in the chosen placement (:mod:`pim.jitq`); the command stream the
host sends each pseudo-channel runs the quantization kernel, and the units leave the MX copy in
the odd banks. Time is what the controllers take to issue the stream under the standard's
constraint table (:mod:`pim.timing`), refresh included.

Two fidelities (``fidelity``): ``stack`` simulates every pseudo-channel of every stack, each
with its own data; ``pch`` simulates pseudo-channel 0 command by command and scales: every
pseudo-channel receives the same broadcast stream and the same amount of (padded) work, so it
takes the same time, and the system's commands are the per-channel counts times the channels
(docs/pim/design.md, "Two fidelities"). ``correct`` compares, bit for bit, every simulated
unit's output with :mod:`numerics.mx`'s reference.

The analytical model (:func:`model`, never used for timing): column commands (triggers and
register writes) x tCCD_L, plus what each waits beyond that for a bus turnaround or a row switch,
plus row visits shorter than tRC, stretched by refresh.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from numerics import mx
from numerics.floats import bf16_bits, fp32_bits
from pim import jitq as kernel
from pim.stack import HbmConfig, HbmStack
from runner import registry
from simcore.config import param, section
from simcore.sim import RunResult, Simulation


@dataclasses.dataclass(frozen=True, kw_only=True)
class JitqParams(registry.ScenarioParams):
    format: str = param("mx6", "MX format of the low-precision copy", choices=kernel.FORMATS)
    placement: str = param(
        "tiled", "data placement: tiled, strided, or strided with the shift counter (opt)",
        choices=kernel.PLACEMENTS,
    )  # fmt: skip
    direction: str = param(
        "row", "quantize along rows (row) or down columns (col)", choices=kernel.DIRECTIONS
    )
    rows: int = param(256, "rows of the weight matrix (a multiple of 16)", min=16, max=1 << 20)
    cols: int = param(256, "columns of the weight matrix (a multiple of 16)", min=16, max=1 << 20)
    master: str = param("bf16", "precision of the master weights", choices=("bf16", "fp32"))
    fidelity: str = param(
        "pch", "simulate one pseudo-channel and scale (pch) or every one (stack)",
        choices=("pch", "stack"),
    )  # fmt: skip
    batch_groups: int = param(
        8, "groups of 16 words each CRF program runs over before the next phase", min=1, max=64
    )
    zero_fraction: float = param(0.05, "share of exact zeros in the random matrix", min=0, max=1)
    hbm: HbmConfig = section(HbmConfig, "the HBM stacks")

    @property
    def planes(self) -> int:
        return 2 if self.master == "fp32" else 1

    def check(self) -> None:
        std = self.hbm.standard()
        kernel.make_layout(
            self.rows, self.cols, self.placement, self.direction, std.org,
            std.org.pchs * self.hbm.stacks, self.planes,
        )  # fmt: skip


def matrix(p: JitqParams) -> np.ndarray:
    """The seeded master matrix's bits (BF16: uint16, FP32: uint32): normal values scaled by
    2^[-8, 8), some exact zeros."""
    rng = np.random.default_rng([p.seed, 12])
    vals = rng.standard_normal((p.rows, p.cols))
    # the exponents, the zeros and the conversion in strips of rows: the same draws in the same
    # order as whole-matrix calls (tests/test_pim_jitq.py), less memory touched at once
    out = np.empty((p.rows, p.cols), np.uint32 if p.master == "fp32" else np.uint16)
    step = max(1, MATRIX_STRIP_ELEMENTS // p.cols)
    for r in range(0, p.rows, step):
        v = vals[r : r + step]
        np.ldexp(v, rng.integers(-8, 8, v.shape), out=v)  # x 2^e: exact
    for r in range(0, p.rows, step):
        v = vals[r : r + step]
        v[rng.random(v.shape) < p.zero_fraction] = 0.0
        f = v.astype(np.float32)
        out[r : r + step] = fp32_bits(f) if p.master == "fp32" else bf16_bits(f)
    return out


#: Elements per strip in which :func:`matrix` draws its zeros and converts its values.
MATRIX_STRIP_ELEMENTS = 1 << 20


def planes_of(bits: np.ndarray) -> list[np.ndarray]:
    """The 16-bit planes of a master matrix: itself (BF16), or high and low halves (FP32)."""
    if bits.dtype == np.uint32:
        return [(bits >> 16).astype(np.uint16), (bits & 0xFFFF).astype(np.uint16)]
    return [bits]


@dataclasses.dataclass
class JitqRun:
    stack: HbmStack
    layout: kernel.Layout
    plan: kernel.Plan
    bits: np.ndarray
    words: list[np.ndarray]


def _plan_key(p: JitqParams) -> tuple:
    """What a plan (and its static counts) depends on: not the seed, the data or the fidelity."""
    return (p.rows, p.cols, p.placement, p.direction, p.planes, p.format, p.batch_groups, p.hbm)


#: The last plan compiled and its static counts (:func:`stream_counts`), by :func:`_plan_key`. A
#: run asks for them up to three times: the progress display's model (for its ETA), the build,
#: the metrics' model; at 4096 x 4096 each compile and count costs about 0.5 s. One entry: a
#: sweep holds one plan at most. The stream is never changed once compiled (every
#: pseudo-channel's controller already shares it).
_LAST_PLAN: dict[tuple, tuple[kernel.Layout, kernel.Plan]] = {}
_LAST_COUNTS: dict[tuple, tuple[kernel.Plan, dict[str, int]]] = {}


def plan_for(p: JitqParams, stack: HbmStack) -> tuple[kernel.Layout, kernel.Plan]:
    key = _plan_key(p)
    hit = _LAST_PLAN.get(key)
    if hit is not None:
        return hit
    org = stack.std.org
    lay = kernel.make_layout(
        p.rows, p.cols, p.placement, p.direction, org, org.pchs * p.hbm.stacks, p.planes
    )
    pch = stack.pchs[0]
    plan = kernel.compile_jitq(
        lay, p.format, batch_groups=p.batch_groups, conf_row=pch.row_conf,
        abmr_row=pch.row_abmr, sbmr_row=pch.row_sbmr,
    )  # fmt: skip
    _LAST_PLAN.clear()
    _LAST_PLAN[key] = (lay, plan)
    return lay, plan


def build(sim: Simulation, p: JitqParams) -> JitqRun:
    p.check()
    std = p.hbm.standard()
    total = std.org.pchs * p.hbm.stacks
    stack = HbmStack(sim, p.hbm, pchs=1 if p.fidelity == "pch" else total)
    lay, plan = plan_for(p, stack)
    bits = matrix(p)
    upc = std.org.banks // 2
    n = upc * len(stack.pchs)  # the simulated pseudo-channels' units
    words = [lay.scatter(plane, 0, n) for plane in planes_of(bits)]
    for k, (pch, ctl) in enumerate(zip(stack.pchs, stack.controllers, strict=True)):
        kernel.load(pch, lay, [w[k * upc : (k + 1) * upc] for w in words])
        ctl.submit_stream(plan.stream)
    return JitqRun(stack, lay, plan, bits, words)


def _counts(stack: HbmStack) -> dict[str, Any]:
    """Per pseudo-channel command counts (the same on every channel)."""
    ctl = stack.controllers[0]
    units = stack.pchs[0].units
    shift = {k.split(":")[1]: v for k, v in sorted(units.by_role.items()) if k.startswith("shift")}
    out: dict[str, Any] = {
        c: ctl.counts.get(c, 0) for c in ("ACT", "PRE", "PREA", "RD", "WR", "REF")
    }
    out["pim_triggers"] = units.triggers
    out["pim_by_instruction"] = dict(sorted(units.by_op.items()))
    out["pim_by_class"] = by_class(units.by_op)
    out["shift_related"] = {**shift, "total": sum(shift.values())}
    return out


#: The instruction classes the study names, by opcode.
CLASSES = {
    "MAX/CMP": ("MAX", "CMP"), "bitSHIFT": ("BSHIFT",), "laneSHIFT": ("LSHIFT",),
    "ADD": ("ADD",), "MUL": ("MUL", "MAC", "MAD"), "move": ("MOV", "FILL"),
}  # fmt: skip


def by_class(by_op: dict[str, int]) -> dict[str, int]:
    """Executed PIM instructions per class of :data:`CLASSES` (``move``: between the row
    buffer and the registers, register to register, and into the shift counter)."""
    return {name: sum(by_op.get(op, 0) for op in ops) for name, ops in CLASSES.items()}


def reference(
    bits: np.ndarray, p: JitqParams, lay: kernel.Layout, units: int
) -> tuple[np.ndarray, np.ndarray]:
    """:mod:`numerics.mx`'s codes and scale exponents for the tiles of units ``0 .. units - 1``,
    as :meth:`kernel.Layout.scatter` lays them out (zero padding quantizes to zeros). Blocks lie
    inside 16 x 16 tiles in both directions, so the tiles side by side, a 16-row matrix,
    quantize as they do in the whole matrix (only the simulated units' tiles are quantized)."""
    tiles = lay.tiles(bits, lay.tile_ids(0, units))
    n = tiles.size // (16 * 16)
    strip = tiles.reshape(n, 16, 16).transpose(1, 0, 2).reshape(16, 16 * n)
    codes, scale = mx.lanes(mx.quantize_matrix(strip, p.format, p.direction), strip.shape,
                            p.direction)  # fmt: skip
    back = [a.reshape(16, n, 16).transpose(1, 0, 2).reshape(tiles.shape) for a in (codes, scale)]
    return lay.place(back[0]), lay.place(back[1])


def metrics(sim: Simulation, p: JitqParams, run: JitqRun, result: RunResult) -> dict[str, Any]:
    stack, lay = run.stack, run.layout
    std = stack.std
    upc = std.org.banks // 2
    want_codes, want_scale = reference(run.bits, p, lay, upc * len(stack.pchs))
    correct = True
    for k, pch in enumerate(stack.pchs):
        codes, scale = kernel.read_back(pch, lay)
        sl = slice(k * upc, (k + 1) * upc)
        correct &= bool(np.array_equal(codes, want_codes[sl]))
        correct &= bool(np.array_equal(scale, want_scale[sl]))
    cycles = stack.end_cycle()
    total = stack.total_pchs
    per = _counts(stack)
    scale_by = total
    system = {
        k: (v * scale_by if isinstance(v, int) else {kk: vv * scale_by for kk, vv in v.items()})
        for k, v in per.items()
    }
    busy = sum(c.bus_busy_cycles for c in stack.controllers) / len(stack.controllers)
    time_s = cycles / std.timing.clock_hz
    shift_s = stack.controllers[0].shift_cycles / std.timing.clock_hz
    m = model(p, run.plan)
    return {
        "time_s": time_s,
        "cycles": cycles,
        "shift_time_s": shift_s,
        "other_time_s": time_s - shift_s,
        "commands": system,
        "commands_per_pch": per,
        "row_activations": system["ACT"],
        "pch_bus_utilisation": busy / cycles if cycles else 0.0,
        "correct": correct,
        "elements": p.rows * p.cols,
        "elements_per_s": p.rows * p.cols / time_s if time_s else 0.0,
        "simulated_pchs": len(stack.pchs),
        "total_pchs": total,
        "groups_per_unit": lay.groups,
        "model_time_s": m["time_s"],
        "model_cycles": m["cycles"],
        "model_error_pct": 100.0 * (time_s - m["time_s"]) / m["time_s"],
    }


# -- analytical model ----------------------------------------------------------------------------
def stream_counts(p: JitqParams, plan: kernel.Plan | None = None) -> dict[str, int]:
    """Static counts of the compiled stream (no simulation) and the cycles each column command
    waits beyond tCCD_L after the one before: a bus turnaround (RD -> WR, WR -> RD) or a row
    switch (the PRE waits for the precharged parity's last RD or WR, less the commands that went
    to the other parity since, then tRP, then tRCD), whichever is longer; and row visits shorter
    than tRC. ``plan``: the compiled stream of ``p`` when the caller has it (else compiled here)."""
    sim = Simulation()
    stack = HbmStack(sim, p.hbm, pchs=1)
    if plan is None:
        _, plan = plan_for(p, stack)
    key = _plan_key(p)
    cached = _LAST_COUNTS.get(key)
    if cached is not None and cached[0] is plan:
        return dict(cached[1])
    conf = stack.pchs[0].row_conf
    t = p.hbm.standard().timing
    turn = {("RD", "WR"): t.nCL + t.nBL + 2 - t.nCWL, ("WR", "RD"): t.nCWL + t.nBL + t.nWTR_L}
    trig = reg = switches = turnarounds = ras = extra = 0
    open_row = [-1, -1]
    opened_at = [0, 0]  # column commands issued when the parity's row was opened
    last = ["RD", "RD"]  # the last column command to each parity
    last_at = [0, 0]  # its index
    prev = "RD"
    switch_wait = 0  # the pending row switch's spacing, until the next column command
    ccd = t.nCCD_L
    for cmd, bank, row, *_ in plan.stream:
        par = bank % 2
        if cmd == "RD" or cmd == "WR":
            spacing = 0 if cmd == prev else turn[(prev, cmd)]
            if spacing > 0:
                turnarounds += 1
            wait = spacing if spacing > switch_wait else switch_wait
            if wait > ccd:
                extra += wait - ccd
            switch_wait = 0
            n = trig + reg
            if open_row[par] == conf:
                reg += 1
            else:
                trig += 1
            prev = last[par] = cmd
            last_at[par] = n
        elif cmd == "ACT":
            open_row[par] = row
            opened_at[par] = trig + reg
        elif cmd in ("PRE", "PREA"):
            n = trig + reg
            parities = (0, 1) if cmd == "PREA" else (par,)
            for q in parities:
                if open_row[q] < 0:
                    continue
                gap = t.nRTP if last[q] == "RD" else t.nCWL + t.nBL + t.nWR
                wait = max(1, gap - (n - 1 - last_at[q]) * t.nCCD_L)
                switch_wait = max(switch_wait, wait + t.nRP + t.nRCD)
                switches += 1
                # ACT to ACT of a bank is at least tRC: short visits wait for it
                held = t.nRCD + (n - opened_at[q] - 1) * t.nCCD_L + gap + t.nRP
                ras += max(0, t.nRC - held)
                open_row[q] = -1
    counts = {
        "triggers": trig, "reg_writes": reg, "row_switches": switches,
        "turnarounds": turnarounds, "wait_cycles": extra, "ras_wait_cycles": ras,
    }  # fmt: skip
    _LAST_COUNTS.clear()
    _LAST_COUNTS[key] = (plan, counts)
    return dict(counts)


def model(p: JitqParams, plan: kernel.Plan | None = None) -> dict[str, Any]:
    """T = (triggers + register writes) x tCCD_L + what each column command waits beyond
    tCCD_L (a bus turnaround or a row switch: ``wait_cycles``) + row visits shorter than tRC
    (``ras_wait_cycles``), stretched by refresh: (tRFC + tRP + tRCD) every tREFI."""
    std = p.hbm.standard()
    t = std.timing
    n = stream_counts(p, plan)
    cycles = (n["triggers"] + n["reg_writes"]) * t.nCCD_L + n["wait_cycles"] + n["ras_wait_cycles"]
    if p.hbm.refresh == "all-bank":
        cycles *= 1 + (t.nRFC + t.nRP + t.nRCD) / t.nREFI
    return {"time_s": cycles / t.clock_hz, "cycles": cycles, **n}


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="jitq",
            summary="JIT-Q: MX quantization of a BF16 matrix by HBM-PIM units, command-level",
            params=JitqParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="pim",
            summary="JIT-Q cycles: command-level simulation vs the closed-form stream model, "
            "every format, placement and direction at two sizes",
            run=_validate,
            tolerance=2.0,
            criterion="mape",
            origin=__name__,
        )
    )


# -- validation ----------------------------------------------------------------------------------
#: (rows, cols) of the sweep: 1 and 32 tiles per unit (tiled), 1 and 2 super-tiles (strided).
VALIDATE_SIZES = ((256, 256), (2048, 1024))


def _validate(runner: registry.Runner) -> list[registry.ValidationRow]:
    points = [
        JitqParams(format=f, placement=pl, direction=d, rows=r, cols=c)
        for r, c in VALIDATE_SIZES
        for pl in kernel.PLACEMENTS
        for d in kernel.DIRECTIONS
        for f in kernel.FORMATS
    ]
    rows = []
    for p, m in zip(points, runner("jitq", points), strict=True):
        if not m["correct"]:
            raise RuntimeError(f"jitq {p.format} {p.placement} {p.direction}: wrong bits")
        label = f"{p.rows}x{p.cols} {p.format} {p.placement} {p.direction}"
        rows.append(
            registry.ValidationRow("pim", label, m["cycles"], m["model_cycles"], unit="cycles")
        )
    return rows


#: Host memory of one simulated pseudo-channel (its controller, banks' open rows and the
#: command stream it is given), bytes: tracemalloc over the jitq scenario's build measured
#: 3.15 MB for one pseudo-channel and its 256 x 256 matrix, this plus 32 B an element above it.
PCH_BYTES = 1_500_000
#: Host bytes per matrix element: float64 draws, the BF16 bits, the scattered words and the
#: quantized copy read back (rounded up).
BYTES_PER_ELEMENT = 32


def footprint(p: JitqParams) -> registry.Footprint:
    """The stack and its simulated pseudo-channels (one at fidelity pch, all at stack), each a
    controller with its banks and PIM track, and the matrix in its host forms."""
    org = p.hbm.standard().org
    pchs = 1 if p.fidelity == "pch" else org.pchs * p.hbm.stacks
    return registry.Footprint(
        1 + pchs * (2 + org.banks), pchs * PCH_BYTES + BYTES_PER_ELEMENT * p.rows * p.cols, "rows"
    )
