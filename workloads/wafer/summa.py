"""SUMMA GEMM on the wafer, lowered as the SDK's "GEMM with collective operations" is.

C = A·B, all M x M FP32, on a P x P block of PEs; PE (x, y) holds the Mt x Mt blocks
A[y, x], B[y, x] and C[y, x] (M = P·Mt), each column-major. The run has P steps. In step k:

- the PEs of column k broadcast their A block along their rows (``Collectives.x``) and the PEs of
  row k broadcast their B block down their columns (``Collectives.y``), concurrently on the two
  dimensions' own colours and queues. A root sends its own block; every other PE receives into a
  temporary (``Ap``, ``Bp``), so a PE holds A, B, C and two temporaries: the study's 5 buffers;
- the x broadcast's callback *activates* the compute task and the y broadcast's callback
  *unblocks* it (it was blocked when the step started), so it runs once both blocks are in;
- the compute task does C += A_k·B_k: for k in Kt, for j in Nt, with the scalar b = B_k[j·Kt+k],
  ``fmacs(C[:, j], C[:, j], A_k[:, k], b)`` over Mt elements. Columns are addressed by moving
  1-D descriptors (``with_offset``, CSL's ``@increment_dsd_offset``); then the task starts the
  next step itself, so step k+1's broadcasts begin only after step k's compute (no overlap).

What it costs comes from mechanisms only: the fmacs cost model of :mod:`pe.isa`, the collectives
library over the fabric engine, task switches and control ops of the compute engine. The one
program-level cost is the loop's scalar work per inner iteration (address arithmetic, loading b),
``loop_overhead_cycles``, because the PE model has no scalar instructions: it is charged by
advancing the task's local cycle ``t.now``, fractional values accumulating over the iterations.

Timing is read like the study reads it, ``cycles = max(end) - min(start)`` over the PEs' timestamp
marks. Marks inside the program (one timestamp read each) split the time of the PE that ends
last into compute (inside the compute task), communication (step start to the later broadcast
callback) and control (callbacks and task switches up to the compute task).

``overlap = true`` is an experiment beyond the SDK: two temporaries per operand (7 buffers), and
the compute task of step k starts step k+1's broadcasts before computing. The broadcasts'
microthreads share the datapath with the compute task (see :mod:`pe.ce`): at low priority they
wait for it to end, at medium (``microthread_priority = auto`` with overlap) every word they
move is a cycle the compute task ends later; what overlap still hides is the latency of the
posted router writes (docs/wafer/summa.md, "Overlap and the shared datapath").

The analytical model (:func:`model`) is the study's T_total = {(T_fmac + 0.5·N_loop + 10) + T_bcast
+ 100} x P with the calibration fits and constants of :mod:`workloads.wafer.calibration`; it
never feeds the simulation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from pe.config import PeConfig
from pe.dsd import MemDsd
from pe.program import Layout, PeBuilder
from runner import registry
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from simcore.tracing import TraceLevel
from wafer.collectives import Collectives
from wafer.system import MAX_WIDTH, Wafer, WaferConfig
from workloads.wafer import calibration
from workloads.wafer.calibration import t_bcast_reference, t_fmac_reference
from workloads.wafer.footprint import wafer as wafer_footprint

#: Run each step's Mt² fmacs as one batch (same cycles and bits; ``False``: one ``t.op`` per
#: fmacs, the reference the batch is tested against). Traces at ops level always take the
#: per-instruction path, so every fmacs is a slice.
BATCHED_LOOP = True
OPS_LEVEL = TraceLevel.OPS  # (a module name: an enum member read off its class costs per call)

#: Whether the lock-step phase (:mod:`wafer.lockstep`) moves each step's two broadcasts is the
#: wafer's fidelity's choice (``wafer.fidelity``): the lock-step fidelities always, 'fast' where
#: the program says it pays (``Layout.lockstep_pays``, from :func:`lockstep_pays`). The phase
#: costs some array operations per cycle of a broadcast window whatever it moves, and a visit of
#: every PE at its entry and exit; below this many wavelet arrivals per cycle
#: (:func:`lockstep_rate`), or with streams shorter than ``LOCKSTEP_MIN_WORDS`` (windows of
#: set-up with little to move), the wavelet path is the cheaper one (measured with
#: ``bench/summa_gate.py``: docs/wafer/performance.md, "Where the lock-step phase pays"). Speed
#: only: every fidelity gives the same cycles and bits.
LOCKSTEP_MIN_RATE = 10.0
LOCKSTEP_MIN_WORDS = 16


def lockstep_pays(p: SummaParams) -> bool:
    """Whether the lock-step phase pays for SUMMA's broadcasts, so the 'fast' fidelity uses it
    (speed only)."""
    return p.mt * p.mt >= LOCKSTEP_MIN_WORDS and lockstep_rate(p) >= LOCKSTEP_MIN_RATE


def lockstep_rate(p: SummaParams) -> float:
    """Wavelet arrivals per cycle of a step's broadcast window, roughly: 2·P²·Mt² over a window
    of ~350 cycles of set-up and teardown plus the two streams (bench/summa_windows.py)."""
    words = p.mt * p.mt
    return 2.0 * p.p * p.p * words / (350 + 2 * words)


#: Local task ids of the program (the collectives library takes 24..28).
MAIN, X_DONE, Y_DONE, COMPUTE = 10, 11, 12, 13
WORD_BYTES = 4


def buffers(overlap: bool) -> int:
    """Mt x Mt FP32 buffers per PE: A, B, C and one (two with overlap) temporary per operand."""
    return 7 if overlap else 5


def max_mt(pe: PeConfig, overlap: bool = False) -> int:
    """The largest Mt whose buffers fit in SRAM beside the program (``pe.code_bytes``)."""
    free = pe.sram_bytes - pe.code_bytes
    return math.isqrt(max(free, 0) // (buffers(overlap) * WORD_BYTES))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SummaParams(registry.ScenarioParams):
    p: int = param(4, "PEs per side of the square PE block (P); M = P·Mt", min=2, max=MAX_WIDTH)
    mt: int = param(14, "side of each PE's A, B and C blocks (Mt), FP32 elements", min=1)
    overlap: bool = param(
        False, "start step k+1's broadcasts before step k's compute (experiment, 7 buffers)"
    )
    microthread_priority: str = param(
        "auto",
        "priority of the broadcasts' microthreads: low waits while a task runs on the PE, "
        "medium/high take issue cycles from it; auto: medium with overlap, else low (the SDK's)",
        choices=("auto", "high", "medium", "low"),
    )
    loop_overhead_cycles: float = param(
        calibration.SUMMA_LOOP_CYCLES_PER_ITERATION,
        "cycles of scalar work (address arithmetic, loading b) per inner-loop iteration; the PE "
        "model has no scalar instructions (study: 0.5·N_loop)",
        min=0.0,
    )
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    def check(self) -> None:
        limit = max_mt(self.wafer.pe, self.overlap)
        if self.mt > limit:
            n = buffers(self.overlap)
            data = n * self.mt * self.mt * WORD_BYTES
            code = self.wafer.pe.code_bytes
            raise ConfigError(
                "mt",
                self.mt,
                f"{n} buffers of {self.mt} x {self.mt} FP32 ({data:,} B) plus code ({code:,} B) "
                f"need {data + code:,} B but a PE has {self.wafer.pe.sram_bytes:,} B of SRAM "
                "(wafer.pe.sram_bytes)",
                allowed=f"1 .. {limit} (the largest Mt that fits)",
                hint="lower mt (raise p to keep M = p·mt)",
            )

    @property
    def m(self) -> int:
        return self.p * self.mt


@dataclasses.dataclass
class PeState:
    """What one PE's program keeps between tasks (CSL: PE-level variables)."""

    step: int = 0
    loop_debt: float = 0.0  # fractional loop-overhead cycles not charged yet


@dataclasses.dataclass
class SummaRun:
    wafer: Wafer
    a: np.ndarray
    b: np.ndarray
    c: dict[tuple[int, int], MemDsd]


def inputs(p: SummaParams) -> tuple[np.ndarray, np.ndarray]:
    """The seeded FP32 matrices A and B (M x M)."""
    rng = np.random.default_rng([p.seed, 4])
    a = rng.standard_normal((p.m, p.m)).astype(np.float32)
    b = rng.standard_normal((p.m, p.m)).astype(np.float32)
    return a, b


def _block(mat: np.ndarray, x: int, y: int, mt: int) -> np.ndarray:
    """Block (row y, column x), flattened column-major."""
    return mat[y * mt : (y + 1) * mt, x * mt : (x + 1) * mt].reshape(-1, order="F")


def _columns(buf: MemDsd, mt: int) -> list[MemDsd]:
    """1-D descriptors of the Mt columns of a flat column-major Mt x Mt block."""
    col = buf.with_length(mt)
    return [col.with_offset(j * mt) for j in range(mt)]


def build(sim: Simulation, p: SummaParams) -> SummaRun:
    """Lay SUMMA's program out on P x P PEs and build the wafer that runs it."""
    p.check()
    a_mat, b_mat = inputs(p)
    run = SummaRun(None, a_mat, b_mat, {})  # type: ignore[arg-type]
    layout = Layout(p.p, p.p)
    layout.set_rectangle_code(SummaProgram(p, run).code)
    # The program's data colours (Collectives.x's and .y's) carry only the two broadcasts; the
    # lock-step fidelities move them in lock step, and 'fast' does where that pays.
    layout.lockstep_colours = (0, 2)
    layout.lockstep_pays = lockstep_pays(p)
    run.wafer = Wafer(sim, p.wafer, layout)
    return run


def microthread_priority(p: SummaParams) -> str:
    """The broadcasts' microthread priority: ``auto`` is medium with overlap, else low."""
    if p.microthread_priority == "auto":
        return "medium" if p.overlap else "low"
    return p.microthread_priority


class SummaProgram:
    """What the PEs' programs share: the parameters, the run (its matrices, and where each PE
    keeps its C block), and the batched loop's cycle costs and scratch space."""

    def __init__(self, p: SummaParams, run: SummaRun) -> None:
        self.p = p
        self.run = run
        self.priority = microthread_priority(p)
        self.shared_costs: dict[tuple[int, int], int] = {}  # (C, A_k) bank phases -> cycles
        self.scratch = np.empty((p.mt + 1, p.mt, p.mt), np.float32)  # products, running sums
        self.bank_period = p.wafer.pe.bank_interleave_bytes * p.wafer.pe.sram_banks

    def code(self, pe: PeBuilder) -> None:
        """The PE code (the layout runs it for every PE)."""
        PeProgram(self, pe)


class PeProgram:
    """One PE's program, as CSL would write it: its buffers, its PE-level variables
    (:class:`PeState`) and its four tasks (``main``, the two broadcasts' callbacks, ``compute``).
    """

    def __init__(self, prog: SummaProgram, pe: PeBuilder) -> None:
        p = prog.p
        mt = p.mt
        self.prog = prog
        self.pe = pe
        self.mt = mt
        self.steps = p.p
        self.coll = Collectives(pe, microthreads=prog.priority)
        # Flat column-major blocks; with_length(mt) makes the column descriptor of column 0.
        self.a = pe.array("A", _block(prog.run.a, pe.x, pe.y, mt))
        self.b = pe.array("B", _block(prog.run.b, pe.x, pe.y, mt))
        self.c = pe.zeros("C", mt * mt)
        self.temps = 2 if p.overlap else 1
        self.ap = [pe.zeros(f"Ap{i}", mt * mt) for i in range(self.temps)]
        self.bp = [pe.zeros(f"Bp{i}", mt * mt) for i in range(self.temps)]
        prog.run.c[(pe.x, pe.y)] = self.c
        self.state = PeState()
        # Column descriptors, moved once at build time as @increment_dsd_offset would move them
        # in the loop (the cost of that arithmetic is in loop_overhead_cycles).
        self.c_cols = _columns(self.c, mt)
        self.a_cols = {buf.name: _columns(buf, mt) for buf in (self.a, *self.ap)}
        self.loop_costs: dict[str, int] = {}  # A buffer -> cycles of a step's Mt² fmacs
        self.views: dict[str, np.ndarray] = {}  # batched's views of C and the A and B buffers
        self.unit = pe.ce.tensor_unit
        pe.local_task(id=MAIN)(self.main)
        pe.local_task(id=X_DONE)(self.x_done)
        pe.local_task(id=Y_DONE)(self.y_done)
        pe.local_task(id=COMPUTE)(self.compute)
        pe.block(COMPUTE)
        pe.start(MAIN)

    def a_of(self, step: int) -> MemDsd:
        """Step ``step``'s A block on this PE: its own on column ``step``, else a temporary."""
        return self.a if self.pe.x == step else self.ap[step % self.temps]

    def b_of(self, step: int) -> MemDsd:
        return self.b if self.pe.y == step else self.bp[step % self.temps]

    def start_step(self, t: Any, step: int) -> None:
        t.block(COMPUTE)
        self.coll.x.broadcast(t, step, self.a_of(step), X_DONE)
        self.coll.y.broadcast(t, step, self.b_of(step), Y_DONE)

    # -- tasks -------------------------------------------------------------------------------
    def main(self, t: Any) -> None:
        t.mark("start")
        self.start_step(t, 0)

    def x_done(self, t: Any) -> None:
        t.mark(f"x{self.state.step}")
        t.activate(COMPUTE)

    def y_done(self, t: Any) -> None:
        t.mark(f"y{self.state.step}")
        t.unblock(COMPUTE)

    def compute(self, t: Any) -> None:
        """C += A_k·B_k, then the next step (with overlap, its broadcasts first)."""
        state = self.state
        step = state.step
        t.mark(f"c{step}")
        overlap = self.prog.p.overlap
        if overlap and step + 1 < self.steps:
            self.start_step(t, step + 1)
        if BATCHED_LOOP and self.pe.ce.trace_level < OPS_LEVEL:
            self.batched(t, step)
        else:
            self.loop(t, step)
        t.mark(f"e{step}")
        state.step = step + 1
        if state.step == self.steps:
            t.mark("end")
        elif not overlap:
            self.start_step(t, state.step)

    # -- the compute loop ----------------------------------------------------------------------
    def loop(self, t: Any, step: int) -> None:
        """The loop as written: one fmacs per (k, j), its overhead charged per iteration."""
        mt = self.mt
        c_cols = self.c_cols
        a_k_cols = self.a_cols[self.a_of(step).name]
        b_vals = self.pe.read(self.b_of(step)).tolist()  # the scalars b (in the loop overhead)
        op = t.op  # t.op("fmacs", ...) is t.fmacs(...) without a wrapper per call
        overhead = self.prog.p.loop_overhead_cycles
        debt = self.state.loop_debt
        for k in range(mt):
            a_k = a_k_cols[k]
            for j in range(mt):
                c_j = c_cols[j]
                op("fmacs", c_j, c_j, a_k, b_vals[j * mt + k])
                debt += overhead
                whole = int(debt)
                t.now += whole
                debt -= whole
        self.state.loop_debt = debt

    def loop_cost(self, a_k: MemDsd) -> int:
        """Cycles of a step's Mt² fmacs with ``a_k``: the tensor unit's cost of each, summed. An
        fmacs's cost depends on its operands' places in the bank pattern only, so PEs whose
        buffers start alike there share the sum."""
        cost = self.loop_costs.get(a_k.name)
        if cost is None:
            prog = self.prog
            key = (self.c.base % prog.bank_period, a_k.base % prog.bank_period)
            cost = prog.shared_costs.get(key)
            if cost is None:
                mt, cost_of = self.mt, self.unit.cost
                cost = prog.shared_costs[key] = sum(
                    cost_of("fmacs", mt, dst=c_j, srcs=(c_j, a_kk, None))
                    for a_kk in self.a_cols[a_k.name]
                    for c_j in self.c_cols
                )
            self.loop_costs[a_k.name] = cost
        return cost

    def batched(self, t: Any, step: int) -> None:
        """The loop's fast path: the same Mt² fmacs, their cycles summed from the tensor unit's
        cost of each (the general path's), their results from all Mt³ FP32 products at once and
        a running sum over k (each element sees the same products and adds in the same order)."""
        mt = self.mt
        state = self.state
        a_k = self.a_of(step)
        cost = self.loop_cost(a_k)
        whole, state.loop_debt = loop_debt(
            state.loop_debt, self.prog.p.loop_overhead_cycles, mt * mt
        )
        t.now += cost + whole
        self.pe.ce.instructions += mt * mt
        views = self.views
        if not views:
            self.make_views()
        c_t = views["C"]
        # scratch[k + 1, j, i] = A[i, k]·B[k, j] (FP32 products), scratch[0] = C; the running
        # sums over k are C + A[:, 0]B[0, :] + ... in that order, as the fmacs add them.
        scratch = self.prog.scratch
        scratch[0] = c_t
        np.multiply(views["a" + a_k.name], views["b" + self.b_of(step).name], out=scratch[1:])
        np.add.accumulate(scratch, axis=0, out=scratch)
        c_t[...] = scratch[mt]

    def make_views(self) -> None:
        """Row-major views of the column-major blocks, made on a PE's first batched step: cT[j, i]
        is C[i, j]; a_views[k, 0, i] is A[i, k]; b_views[k, j, 0] is B[k, j]."""
        mt = self.mt
        sram = self.pe.ce.sram
        views = self.views
        views["C"] = sram.view(self.c.base, "f32", mt * mt).reshape(mt, mt)
        for buf in (self.a, *self.ap):
            views["a" + buf.name] = sram.view(buf.base, "f32", mt * mt).reshape(mt, 1, mt)
        for buf in (self.b, *self.bp):
            views["b" + buf.name] = (
                sram.view(buf.base, "f32", mt * mt).reshape(mt, mt).T[:, :, None]
            )


@functools.lru_cache(maxsize=256)
def loop_debt(debt: float, overhead: float, iterations: int) -> tuple[int, float]:
    """(whole cycles charged, debt left) after ``iterations`` of the loop's overhead charging:
    ``debt += overhead; whole = int(debt); t.now += whole; debt -= whole``, run as the loop runs
    it (so floating-point rounding is the same)."""
    charged = 0
    for _ in range(iterations):
        debt += overhead
        whole = int(debt)
        charged += whole
        debt -= whole
    return charged, debt


def split_cycles(marks: dict[str, int], steps: int) -> dict[str, int]:
    """Compute, communication and control cycles of one PE, summed over the steps.

    Per step k, from the PE's marks: communication runs from the step's start (``start`` or the
    previous compute's end ``e{k-1}``) to the later broadcast callback (``x{k}``, ``y{k}``);
    control from there to the compute task's start ``c{k}``; compute to its end ``e{k}``. With
    ``overlap`` the communication is what is left exposed, not what the broadcasts take.
    """
    comp = comm = ctrl = 0
    prev = marks["start"]
    for k in range(steps):
        done = max(marks[f"x{k}"], marks[f"y{k}"], prev)
        comm += done - prev
        ctrl += marks[f"c{k}"] - done
        comp += marks[f"e{k}"] - marks[f"c{k}"]
        prev = marks[f"e{k}"]
    ctrl += marks["end"] - prev
    return {"compute_cycles": comp, "comm_cycles": comm, "control_cycles": ctrl}


def peak_tflops(p: SummaParams) -> float:
    """Single-PE FP32 fmacs peak (one multiply-add per initiation interval) x the P² PEs."""
    flop_per_cycle = 2.0 / p.wafer.pe.fp32_fmac_cycles_per_element
    return flop_per_cycle * p.p * p.p * p.wafer.clock_hz / 1e12


def tflops(p: SummaParams, cycles: float) -> float:
    """F = 2·M³·f_clk / T, in TFLOP/s."""
    return 2.0 * p.m**3 * p.wafer.clock_hz / cycles / 1e12


def fp32_error_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise bound on |C_fp32 - A·B| for M rounded products summed in FP32.

    Each term is rounded once (the product) and the running sum once per add (fmacs is not
    fused, see docs/wafer/pe-isa.md), so |error| <= gamma_(M+1) · (|A|·|B|) with
    gamma_n = n·u / (1 - n·u), u = 2^-24 (Higham, recursive summation of rounded products).
    """
    n = a.shape[1] + 1
    u = 2.0**-24
    gamma = n * u / (1.0 - n * u)
    return gamma * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


def metrics(sim: Simulation, p: SummaParams, run: SummaRun, result: RunResult) -> dict:
    wafer, mt = run.wafer, p.mt
    got = np.zeros((p.m, p.m), np.float64)
    for (x, y), c in run.c.items():
        block = c.read(wafer.ce(x, y).sram).reshape((mt, mt), order="F")
        got[y * mt : (y + 1) * mt, x * mt : (x + 1) * mt] = block
    ref = run.a.astype(np.float64) @ run.b.astype(np.float64)
    err = np.abs(got - ref)
    correct = bool(np.all(err <= fp32_error_bound(run.a, run.b)))
    cycles = wafer.span_cycles()
    last = max(wafer.pes.values(), key=lambda pe: (pe.ce.marks["end"], pe.xy[1], pe.xy[0]))
    modelled = model(p)
    model_cycles = modelled["cycles"]
    out: dict[str, Any] = {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        **split_cycles(last.ce.marks, p.p),
        "critical_pe_xy": list(last.xy),
        "p": p.p,
        "mt": mt,
        "matrix_rows": p.m,
        "overlap": p.overlap,
        "tflops": tflops(p, cycles),
        "peak_tflops": peak_tflops(p),
        "peak_fraction": tflops(p, cycles) / peak_tflops(p),
        "model_time_s": modelled["time_s"],
        "model_cycles": model_cycles,
        "model_error_pct": 100.0 * (cycles - model_cycles) / model_cycles,
        "max_abs_error": float(err.max()),
        "correct": correct,
    }
    return out


# -- analytical model ----------------------------------------------------------------------------
def model(p: SummaParams) -> dict[str, Any]:
    """The study's time model, from the calibration fits only (never from end-to-end runs).

    Per step: T_comp = T_fmac + 0.5·N_loop + 10 with T_fmac the sum of T_fmac(Mt) over the Mt²
    fmacs and N_loop = Mt² inner-loop iterations (0.5 is the study's loop cost, the default of
    ``loop_overhead_cycles``: the model uses the parameter, as the simulation does); T_comm =
    T_bcast(Mt²); T_cntl = 100. The x and y
    broadcasts run concurrently, so a step pays one T_bcast. ``overlap_cycles`` is the same model
    with each step's broadcasts hidden behind the previous compute (not the study's).
    """
    mt, steps = p.mt, p.p
    n_loop = mt * mt
    t_fmac = mt * mt * t_fmac_reference(mt)
    t_comp = t_fmac + p.loop_overhead_cycles * n_loop + calibration.SUMMA_COMPUTE_FIXED_CYCLES
    t_comm = t_bcast_reference(mt * mt)
    t_cntl = calibration.SUMMA_CONTROL_CYCLES
    cycles = (t_comp + t_comm + t_cntl) * steps
    overlap_cycles = t_comm + (max(t_comp, t_comm) + t_cntl) * steps
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "compute_cycles": t_comp * steps,
        "comm_cycles": t_comm * steps,
        "control_cycles": t_cntl * steps,
        "fmac_cycles_per_step": t_fmac,
        "loop_iterations_per_step": n_loop,
        "p": steps,
        "mt": mt,
        "matrix_rows": p.m,
        "tflops": tflops(p, cycles),
        "peak_tflops": peak_tflops(p),
        "peak_fraction": tflops(p, cycles) / peak_tflops(p),
        "overlap_cycles": overlap_cycles,
        "overlap_tflops": tflops(p, overlap_cycles),
    }


def footprint(p: SummaParams) -> registry.Footprint:
    """P² PEs holding the buffers; the host keeps A and B (FP32) and, to check C, the gathered
    result, the float64 reference, its error and its bound (M² float64 each)."""
    data = buffers(p.overlap) * p.mt * p.mt * WORD_BYTES
    return wafer_footprint(p.p * p.p, data, p.m * p.m * (2 * WORD_BYTES + 4 * 8), "p")


# -- registration --------------------------------------------------------------------------------
def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="summa",
            summary="SUMMA GEMM on P x P PEs with row/column broadcasts (the SDK's GEMM)",
            params=SummaParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
    cases = (
        ("summa", VALIDATE_POINTS, 3.5, "P = 4..32, Mt = 1..48 (the largest that fits)"),
        ("summa-strong", STRONG_POINTS, 3.0, "strong scaling: M = 64 on P = 2..32"),
        ("summa-weak", WEAK_POINTS, 2.0, "weak scaling: Mt = 8 on P = 2..16"),
    )
    for name, points, tolerance, what in cases:
        registry.register_case(
            registry.ValidationCase(
                name=name,
                summary=f"SUMMA cycles vs the study's T_total model, {what}",
                run=functools.partial(_sweep, case=name, points=points),
                tolerance=tolerance,
                criterion="mape",
                origin=__name__,
                source=calibration.STUDY,
            )
        )


# -- validation ----------------------------------------------------------------------------------
#: (P, Mt) points of the default case: P = 4..32, Mt from 1 to the largest that fits (48),
#: sampled so that ``wafersim validate summa`` runs in about two minutes.
VALIDATE_POINTS = (
    *((4, mt) for mt in (1, 4, 8, 16, 32, 48)),
    *((8, mt) for mt in (1, 4, 8)),
    (16, 1),
    (32, 1),
)
#: Fixed M = 64 on P = 2..32 PEs per side (Mt = 32 .. 2).
STRONG_POINTS = tuple((p, 64 // p) for p in (2, 4, 8, 16, 32))
#: Fixed Mt = 8 on P = 2..16 PEs per side.
WEAK_POINTS = tuple((p, 8) for p in (2, 4, 8, 16))


def _sweep(
    runner: registry.Runner, *, case: str, points: tuple[tuple[int, int], ...]
) -> list[registry.ValidationRow]:
    runs = runner("summa", [SummaParams(p=p, mt=mt) for p, mt in points])
    rows = []
    for (p, mt), m in zip(points, runs, strict=True):
        if not m["correct"]:
            raise RuntimeError(f"summa P={p} Mt={mt}: wrong product ({m['max_abs_error']:g})")
        rows.append(
            registry.ValidationRow(
                case, f"P={p} Mt={mt}", m["cycles"], m["model_cycles"], unit="cycles"
            )
        )
    return rows
