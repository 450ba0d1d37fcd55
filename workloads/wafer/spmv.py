"""Sparse matrix-vector product y = A·x on a px x py rectangle of PEs (docs/wafer/spmv.md).

A comes from a Matrix Market file or a generator (:mod:`.sparse`); PE (x, y) holds block
A[y, x] (rows of block row y, columns of block column x) as CSR, or as DCSR when the block is
hypersparse, and the block x_x of the vector. One product:

1. **x down the columns**: the PE of column c that holds x_c (the diagonal PE (c, c) when px =
   py, else PE (c, 0)) broadcasts it down its column with the collectives library
   (``Collectives.y``); the others receive it into their x buffer.
2. **local sparse product** (DSD-driven, in the broadcast's callback task): the PE zeroes its
   partial sums (``fmovs``), then walks its CSR/DCSR arrays read from SRAM: per stored row it
   pays ``row_overhead_cycles`` of scalar work (row pointers, branch); per non-zero
   ``nnz_overhead_cycles`` (load the column index, move the descriptors) and one ``fmacs`` over
   one element: y[i] += x[col]·a. The WSE-2 has no gather descriptor, so a sparse row cannot be
   one vector instruction; the fmacs's cost (issue overhead included) comes from :mod:`pe.isa`.
3. **partial sums along the rows**: a chain reduction (``Collectives.x.reduce_fadds``) to the
   PE at x = 0 of each row, which ends with y's block.

``iterations = K > 1`` repeats it as a power iteration: y_1 = A·x_0 and y_{k+1} = A·(y_k /
||y_k||). Between products, on the wafer: the row roots (column 0) compute their sum of squares
(``fmacs`` into a stride-0 accumulator), reduce it down column 0 (``Collectives.y``), PE (0, 0)
takes 1/sqrt (``rsqrt_cycles``, scalar work) and broadcasts the scale up column 0, each row
root scales its block (``fmuls``) and broadcasts it along its row (``Collectives.x``) so the
diagonal PE (r, r) holds x_r for the next product (the others' x buffers are overwritten by the
next column broadcast). The result is y_K = A·x_{K-1}; ``steady_iteration_cycles`` is one whole
iteration (normalisation included) once the pipeline is full.

Timing: the PEs' timestamp marks, ``cycles = max(end) - min(start)``. Every cost comes from the
PE and fabric mechanisms and the three named scalar-work parameters (the PE model has no scalar
instructions). The analytical model (:func:`model`) is built from the SDK study's fits and the
matrix's block structure; it never feeds the simulation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from pe.dsd import MemDsd
from pe.program import Layout, PeBuilder
from runner import registry
from simcore.config import file_param, param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from wafer.collectives import Collectives
from wafer.system import MAX_HEIGHT, MAX_WIDTH, Wafer, WaferConfig
from workloads.wafer import sparse
from workloads.wafer.calibration import (
    STREAM_CYCLES_PER_WORD,
    t_bcast_reference,
    t_fmac_reference,
)
from workloads.wafer.footprint import BUILD_BYTES
from workloads.wafer.footprint import wafer as wafer_footprint

#: Local task ids (the collectives library takes 24..28).
MAIN, X_DONE, RED_DONE, SUM_DONE, SCALE_DONE, ROW_DONE = 10, 11, 12, 13, 14, 15


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpmvParams(registry.ScenarioParams):
    matrix: str = file_param(
        "poisson2d",
        "the matrix: a Matrix Market file (path/to/file.mtx) or a generator: "
        + ", ".join(sparse.GENERATORS),
        names=sparse.GENERATORS,
        allowed=sparse.MATRIX_ALLOWED,
    )
    n: int = param(256, "order of a generated matrix (poisson2d, grid: a perfect square)", min=1)
    density: float = param(
        0.02, "fraction of non-zeros (random; erdos_renyi edge probability)", min=0.0,
        min_open=True, max=1.0,
    )  # fmt: skip
    bandwidth: int = param(2, "diagonals each side of the main one (banded)", min=0)
    graph: str = param("barabasi_albert", "networkx graph of laplacian", choices=sparse.GRAPHS)
    degree: int = param(
        2,
        "edges per new node (barabasi_albert), neighbours (watts_strogatz), mean non-zeros per "
        "row (powerlaw)",
        min=1,
        allowed="1 .. n - 1 (barabasi_albert), 2 .. n - 1 (watts_strogatz), 1 or more (powerlaw)",
    )  # fmt: skip
    exponent: float = param(
        2.5, "power-law exponent of the rows' and columns' non-zero counts (powerlaw)",
        allowed="> 2, e.g. 2.5",
    )  # fmt: skip
    px: int = param(4, "PE columns; A's columns and x are split over them", min=1, max=MAX_WIDTH)
    py: int = param(4, "PE rows; A's rows and y are split over them", min=1, max=MAX_HEIGHT)
    iterations: int = param(1, "products y_{k+1} = A·(y_k/||y_k||); 1: y = A·x", min=1)
    layout: str = param(
        "auto", "block format: csr, dcsr (non-empty rows only), auto (dcsr when nnz < rows)",
        choices=sparse.LAYOUTS,
    )  # fmt: skip
    row_overhead_cycles: float = param(
        4.0, "scalar work per stored row of a block (load row pointers, branch)", min=0.0
    )
    nnz_overhead_cycles: float = param(
        2.0, "scalar work per non-zero besides its fmacs (load column index, move DSDs)", min=0.0
    )
    rsqrt_cycles: int = param(40, "scalar 1/sqrt of the squared norm (power iteration)", min=0)
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    def matrix_csr(self) -> sp.csr_matrix:
        return sparse.load(
            self.matrix, self.n, self.density, self.bandwidth, self.graph, self.degree,
            self.seed, self.exponent,
        )  # fmt: skip

    def check(self) -> None:
        a = self.matrix_csr()
        if self.iterations > 1:
            if a.shape[0] != a.shape[1]:
                raise ConfigError(
                    "matrix",
                    self.matrix,
                    f"is {a.shape[0]} x {a.shape[1]}; iterations = {self.iterations} needs a "
                    "square matrix (y feeds the next product)",
                    allowed="iterations = 1 for a rectangular matrix",
                )
            if self.px != self.py:
                raise ConfigError(
                    "px",
                    self.px,
                    f"iterations > 1 needs a square PE block (px = py; py = {self.py}): block "
                    "row r of y becomes block column r of x on the diagonal",
                )
        for key, parts, n in (("px", self.px, a.shape[1]), ("py", self.py, a.shape[0])):
            if parts > n:
                raise ConfigError(key, parts, f"more PEs than the matrix's {n} rows/columns")
        free = self.wafer.pe.sram_bytes - self.wafer.pe.code_bytes
        need = sparse.pe_bytes(a, self.px, self.py, self.layout, vector_words(self, a.shape))
        if need > free:
            fit = smallest_fit(self, a, free)
            raise ConfigError(
                "matrix",
                self.matrix,
                f"{a.shape[0]} x {a.shape[1]} with {a.nnz:,} non-zeros needs {need:,} B per PE "
                f"on {self.px} x {self.py} PEs but a PE has {free:,} B beside the code",
                hint=f"the smallest square rectangle that fits is {fit}",
            )


def vector_words(p: SpmvParams, shape: tuple[int, int]) -> int:
    """FP32 words a PE holds besides its block: x (cb), partial y (rb), two scalars."""
    rb, cb = sparse.block_shape(shape, p.px, p.py)
    return cb + rb + 2


def smallest_fit(p: SpmvParams, a: sp.csr_matrix, free: int) -> str:
    """'s x s' for the smallest square PE block whose largest PE fits in ``free`` bytes.

    A PE's data shrinks as the block grows, so the side is found by bisection (a few loads of
    the block counts, not one per side: a large matrix would take minutes), then stepped down
    while the next smaller side fits too (the shrinking is not strict at every side)."""

    def fits(s: int) -> bool:
        q = dataclasses.replace(p, px=s, py=s)
        return sparse.pe_bytes(a, s, s, p.layout, vector_words(q, a.shape)) <= free

    top = min(MAX_WIDTH, *a.shape)
    if not fits(top):
        return f"none up to {top} x {top}"
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    while lo > 1 and fits(lo - 1):
        lo -= 1
    return f"{lo} x {lo} (--set px={lo} --set py={lo})"


def initial_x(p: SpmvParams, n_cols: int) -> np.ndarray:
    """The seeded FP32 x_0."""
    return np.random.default_rng([p.seed, 12]).standard_normal(n_cols).astype(np.float32)


def x_root(p: SpmvParams, column: int) -> int:
    """The PE row that holds x's block ``column``: the diagonal when px = py, else row 0."""
    return column if p.px == p.py else 0


@dataclasses.dataclass
class SpmvRun:
    wafer: Wafer
    a: sp.csr_matrix
    x0: np.ndarray
    y: dict[int, MemDsd]  # block row -> the row root's partial-sum buffer
    blocks: sparse.Blocks


@dataclasses.dataclass(frozen=True)
class _Shared:
    """What every PE's program reads: the parameters and the block sizes."""

    p: SpmvParams
    rb: int
    cb: int
    last: int  # the last iteration


class _SpmvPe:
    """One PE's program: its buffers and state, and its tasks as methods (a PE's task is a
    bound method of this object: on a full array's 745,500 PEs, one object with slots per PE
    instead of a closure, its cells and a state object per task)."""

    __slots__ = (
        "c", "coll", "cols", "dcsr", "it", "nnz", "norm", "pe", "r", "row_ids", "rowptr",
        "scal", "sh", "vals", "xbuf", "ypart",
    )  # fmt: skip

    def __init__(self, pe: PeBuilder, sh: _Shared, blk: sparse.Block, x_block: np.ndarray) -> None:
        rb = sh.rb
        self.sh, self.pe = sh, pe
        self.c, self.r = pe.x, pe.y
        self.coll = Collectives(pe)
        # The block in SRAM: values, 16-bit column indices, row pointers, row ids (DCSR).
        self.nnz = nnz = blk.nnz
        self.vals = pe.array("vals", blk.vals) if nnz else None
        self.cols = pe.array("cols", blk.cols, "u16") if nnz else None
        # (an empty block's row pointers are all zero, as a new buffer is: nothing to write;
        # its product never reads them, so its descriptor is not kept)
        rowptr = blk.rowptr
        if nnz:
            self.rowptr = pe.array("rowptr", rowptr, "u16")
        else:
            pe.zeros("rowptr", rowptr.size, "u16")
            self.rowptr = None
        self.dcsr = dcsr = blk.fmt == "dcsr"
        self.row_ids = pe.array("row_ids", blk.row_ids, "u16") if dcsr and nnz else None
        self.xbuf = pe.array("x", x_block)
        self.ypart = pe.zeros("y", rb)
        scal = pe.zeros("s", 2)  # [0]: sum of squares, [1]: 1/||y||
        self.scal = scal if sh.last > 0 else None  # (only a power iteration reads it)
        self.it = 0
        self.norm: tuple[MemDsd, MemDsd, MemDsd] | None = None  # (sumsq, s0, s1): see norm_dsds
        pe.bind_local(MAIN, self.main)
        pe.bind_local(X_DONE, self.local_product)
        pe.bind_local(RED_DONE, self.reduced)
        if sh.last > 0:  # the normalisation's tasks: only a power iteration activates them
            if self.c == 0:
                pe.bind_local(SUM_DONE, self.summed)
                pe.bind_local(SCALE_DONE, self.scaled)
            pe.bind_local(ROW_DONE, self.next_iteration)
        pe.start(MAIN)

    def norm_dsds(self) -> tuple[MemDsd, MemDsd, MemDsd]:
        """The normalisation's descriptors (column 0, iterations > 1), made on first use."""
        if self.norm is None:
            scal, rb = self.scal, self.sh.rb
            assert scal is not None  # (a power iteration's)
            sumsq = MemDsd(scal.base, "f32", (rb,), (0,), name="sumsq")  # stride 0: accumulates
            self.norm = sumsq, scal.with_length(1), scal.with_length(1).with_offset(1)
        return self.norm

    def start_iteration(self, t: Any) -> None:
        t.mark(f"it{self.it}")
        p = self.sh.p
        if p.py > 1:
            self.coll.y.broadcast(t, x_root(p, self.c), self.xbuf, X_DONE)  # type: ignore[union-attr]
        else:
            t.activate(X_DONE)

    def main(self, t: Any) -> None:
        t.mark("start")
        self.start_iteration(t)

    def local_product(self, t: Any) -> None:
        sh, pe = self.sh, self.pe
        p, rb = sh.p, sh.rb
        xbuf, ypart = self.xbuf, self.ypart
        t.fmovs(ypart, 0.0)
        if self.nnz:
            v = pe.read(self.vals).tolist()  # type: ignore[arg-type]
            col = pe.read(self.cols).tolist()  # type: ignore[arg-type]
            ptr = pe.read(self.rowptr).tolist()  # type: ignore[arg-type]
            row_ids = self.row_ids
            ids = pe.read(row_ids).tolist() if row_ids is not None else range(rb)
            # One run of one-element fmacs, y[i] += x[c]·a per non-zero in CSR order
            # (TaskContext.element_run: the same instructions, cycles and results as an ``op``
            # per non-zero, without a descriptor or a call each). The scalar work is a debt of
            # fractional cycles: a row's overhead is added as its row is walked (before its
            # first non-zero), a non-zero's after its fmacs, and after each fmacs the debt's
            # whole cycles are spent.
            rows: list[int] = []
            walked: list[int] = []  # rows walked before each non-zero (its row's first)
            last = -1  # the last stored row that had a non-zero
            for s, i in enumerate(ids):
                lo, hi = ptr[s], ptr[s + 1]
                if lo != hi:
                    rows += [i] * (hi - lo)
                    walked.append(s - last)
                    walked += [0] * (hi - lo - 1)
                    last = s
            y_rows = (ypart, rows)
            debt = t.element_run(
                "fmacs", y_rows, y_rows, (xbuf, col), v,
                after=p.nnz_overhead_cycles, before=p.row_overhead_cycles, befores=walked,
            )  # fmt: skip
            row_oh = p.row_overhead_cycles
            for _ in range(len(ids) - 1 - last):  # the stored rows after the last non-zero
                debt += row_oh
            t.now += math.ceil(debt)
        elif not self.dcsr:  # CSR walks its row pointers even when they are all equal
            t.now += math.ceil(p.row_overhead_cycles * rb)
        if p.px > 1:
            self.coll.x.reduce_fadds(t, 0, ypart, RED_DONE)
        else:
            t.activate(RED_DONE)

    def reduced(self, t: Any) -> None:
        sh = self.sh
        if self.it == sh.last:
            t.mark("end")
            return
        if self.c != 0:  # wait for the scaled y block along the row
            self.coll.x.broadcast(t, 0, self.xbuf, ROW_DONE)
            return
        sumsq, s0, _ = self.norm_dsds()
        ypart = self.ypart
        t.fmovs(s0, 0.0)
        t.fmacs(sumsq, sumsq, ypart, ypart)
        if sh.p.py > 1:
            self.coll.y.reduce_fadds(t, 0, s0, SUM_DONE)  # type: ignore[union-attr]
        else:
            t.activate(SUM_DONE)

    def summed(self, t: Any) -> None:  # column 0 only
        p = self.sh.p
        _, s0, s1 = self.norm_dsds()
        if self.r == 0:
            total = float(self.pe.read(s0)[0])
            t.now += p.rsqrt_cycles
            t.fmovs(s1, float(np.float32(1.0) / np.sqrt(np.float32(total))))
        if p.py > 1:
            self.coll.y.broadcast(t, 0, s1, SCALE_DONE)  # type: ignore[union-attr]
        else:
            t.activate(SCALE_DONE)

    def scaled(self, t: Any) -> None:  # column 0 only
        ypart = self.ypart
        t.fmuls(ypart, ypart, float(self.pe.read(self.norm_dsds()[2])[0]))
        if self.r == 0:
            t.fmovs(self.xbuf, ypart)  # PE (0, 0) is block row 0's diagonal
        if self.sh.p.px > 1:
            self.coll.x.broadcast(t, 0, ypart, ROW_DONE)
        else:
            t.activate(ROW_DONE)

    def next_iteration(self, t: Any) -> None:
        self.it += 1
        self.start_iteration(t)


def build(sim: Simulation, p: SpmvParams) -> SpmvRun:
    p.check()
    a = p.matrix_csr()
    rb, cb = sparse.block_shape(a.shape, p.px, p.py)
    x0 = initial_x(p, a.shape[1])
    x_pad = np.zeros(cb * p.px, np.float32)
    x_pad[: a.shape[1]] = x0
    blocks = sparse.split(a, p.px, p.py, p.layout)
    run = SpmvRun(None, a, x0, {}, blocks)  # type: ignore[arg-type]
    shared = _Shared(p, rb, cb, p.iterations - 1)

    def code(pe: PeBuilder) -> None:
        c = pe.x
        prog = _SpmvPe(pe, shared, blocks[(c, pe.y)], x_pad[c * cb : (c + 1) * cb])
        if c == 0:
            run.y[pe.y] = prog.ypart

    layout = Layout(p.px, p.py)
    layout.set_rectangle_code(code)
    run.wafer = Wafer(sim, p.wafer, layout)
    return run


def reference(a: sp.csr_matrix, x0: np.ndarray, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """(y_K, x_{K-1}) in float64 with the simulation's steps: y_1 = A·x_0, x_k = y_k/||y_k||."""
    a64 = a.astype(np.float64)
    x = x0.astype(np.float64)
    y = a64 @ x
    for _ in range(iterations - 1):
        x = y / np.linalg.norm(y)
        y = a64 @ x
    return y, x


def metrics(sim: Simulation, p: SpmvParams, run: SpmvRun, result: RunResult) -> dict[str, Any]:
    wafer, a = run.wafer, run.a
    rb = sparse.block_shape(a.shape, p.px, p.py)[0]
    got = np.concatenate([run.y[r].read(wafer.ce(0, r).sram) for r in range(p.py)])[
        : a.shape[0]
    ].astype(np.float64)
    ref, x_prev = reference(a, run.x0, p.iterations)
    err = np.abs(got - ref)
    # FP32: each row sums at most (row nnz + px) rounded terms; the normalisation adds a few
    # relative roundings per iteration to x.
    n_terms = int(np.diff(a.indptr).max(initial=0)) + p.px + 1
    u = 2.0**-24
    bound = n_terms * u / (1 - n_terms * u) * (abs(a) @ np.abs(x_prev))
    if p.iterations > 1:
        bound = bound + 8 * p.iterations * (a.shape[0] + 8) * u * (abs(a) @ np.abs(x_prev))
    correct = bool(np.all(err <= bound + 1e-30))
    cycles = wafer.span_cycles()
    its = []
    for k in range(p.iterations):
        begin = max(pe.ce.marks[f"it{k}"] for pe in wafer.pes.values())
        end_key = f"it{k + 1}" if k + 1 < p.iterations else "end"
        its.append(max(pe.ce.marks[end_key] for pe in wafer.pes.values()) - begin)
    blocks = run.blocks
    m = model(p)
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "iteration_cycles": its,
        "steady_iteration_cycles": its[-2] if p.iterations > 1 else cycles,
        "rows": a.shape[0],
        "cols": a.shape[1],
        "nnz": int(a.nnz),
        "block_rows": rb,
        "max_block_nnz": int(blocks.nnz.max()),
        "dcsr_blocks": int(blocks.dcsr.sum()),
        "pe_bytes": sparse.pe_bytes(a, p.px, p.py, p.layout, vector_words(p, a.shape)),
        "gflops": 2.0 * a.nnz * p.iterations * p.wafer.clock_hz / cycles / 1e9,
        "model_time_s": m["time_s"],
        "model_cycles": m["cycles"],
        "model_error_pct": 100.0 * (cycles - m["cycles"]) / m["cycles"],
        "max_abs_error": float(err.max(initial=0.0)),
        "correct": correct,
    }


# -- analytical model ----------------------------------------------------------------------------
def model(p: SpmvParams) -> dict[str, Any]:
    """Cycles from the study's fits and the blocks' sizes, never from a simulation.

    Per product: a column broadcast of cb words, T_bcast(cb); the slowest PE's local product,
    its non-zeros x (T_fmac(1) + nnz overhead) plus its stored rows x row overhead plus zeroing
    y, T_fmac-like rb/2 (the fmovs's rate); the row reduction of rb words over px PEs,
    T_bcast(rb) plus one stream cycle per word for every extra hop of the chain's pipeline is
    not paid (the chain streams), plus px hops. Between products the normalisation: a sum of
    squares T_fmac(rb), a column reduction and broadcast of one word, 2·T_bcast(1), the
    rsqrt, a scale T_fmac(rb)/2 and a row broadcast T_bcast(rb).
    """
    a = p.matrix_csr()
    rb, cb = sparse.block_shape(a.shape, p.px, p.py)
    nnz = sparse.block_nnz(a, p.px, p.py)
    dcsr = sparse.choose_format(nnz, rb, p.layout)
    coo = a.tocoo()
    pe = (coo.row // rb) * p.px + coo.col // cb
    stored = np.bincount(sparse.distinct(pe * rb + coo.row % rb) // rb, minlength=p.px * p.py)
    stored = np.where(dcsr.reshape(-1), stored, rb).reshape(p.py, p.px)
    local = (
        nnz * (t_fmac_reference(1) + p.nnz_overhead_cycles)
        + stored * p.row_overhead_cycles
        + t_fmac_reference(rb) / 2
    )
    t_local = float(local.max())
    t_x = t_bcast_reference(cb) if p.py > 1 else 0.0
    t_red = t_bcast_reference(rb) + p.px if p.px > 1 else 0.0
    product = t_x + t_local + t_red
    norm = (
        t_fmac_reference(rb)
        + (2 * t_bcast_reference(1) if p.py > 1 else 0.0)
        + p.rsqrt_cycles
        + t_fmac_reference(rb) / 2
        + (t_bcast_reference(rb) if p.px > 1 else 0.0)
    )
    cycles = product * p.iterations + norm * (p.iterations - 1)
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "steady_iteration_cycles": product + norm if p.iterations > 1 else product,
        "local_cycles": t_local,
        "x_broadcast_cycles": t_x,
        "reduce_cycles": t_red,
        "normalise_cycles": norm,
        "rows": a.shape[0],
        "cols": a.shape[1],
        "nnz": int(a.nnz),
        "stream_cycles_per_word": STREAM_CYCLES_PER_WORD,
    }


# -- registration and validation -----------------------------------------------------------------
def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="spmv",
            summary="sparse y = A·x on px x py PEs (CSR/DCSR blocks; .mtx files or generators)",
            params=SpmvParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="spmv",
            summary="spmv cycles vs the block-structure model (study fits), 2-D Poisson, "
            "banded, random and graph Laplacians on 2x2 .. 8x8 PEs",
            run=functools.partial(_sweep, points=VALIDATE_POINTS),
            tolerance=VALIDATE_TOLERANCE_PCT,
            criterion="mape",
            origin=__name__,
        )
    )


#: (label, parameters) of the validation sweep.
VALIDATE_POINTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("poisson2d n=256 2x2", {"matrix": "poisson2d", "n": 256, "px": 2, "py": 2}),
    ("poisson2d n=256 4x4", {"matrix": "poisson2d", "n": 256, "px": 4, "py": 4}),
    ("poisson2d n=1024 8x8", {"matrix": "poisson2d", "n": 1024, "px": 8, "py": 8}),
    ("banded n=512 bw=4 4x4", {"matrix": "banded", "n": 512, "bandwidth": 4}),
    ("random n=512 d=0.02 4x4", {"matrix": "random", "n": 512, "density": 0.02}),
    ("laplacian n=256 4x4", {"matrix": "laplacian", "n": 256}),
    ("poisson2d n=256 4x4 K=4", {"matrix": "poisson2d", "n": 256, "iterations": 4}),
    ("random n=1024 d=0.001 8x8", {"matrix": "random", "n": 1024, "density": 0.001,
                                   "px": 8, "py": 8}),
)  # fmt: skip
VALIDATE_TOLERANCE_PCT = 3.5


def _sweep(
    runner: registry.Runner, *, points: tuple[tuple[str, dict[str, Any]], ...]
) -> list[registry.ValidationRow]:
    runs = runner("spmv", [SpmvParams(**kw) for _, kw in points])
    rows = []
    for (label, _), m in zip(points, runs, strict=True):
        if not m["correct"]:
            raise RuntimeError(f"spmv {label}: wrong product ({m['max_abs_error']:g})")
        rows.append(
            registry.ValidationRow("spmv", label, m["cycles"], m["model_cycles"], unit="cycles")
        )
    return rows


def footprint(p: SpmvParams) -> registry.Footprint:
    """px x py PEs, each with its block (the largest PE's data, for all) and a program of
    :func:`program_bytes`; the host keeps the matrix (CSR: a value and a column index per
    non-zero, twice: the matrix and its blocks) and the vectors."""
    a = p.matrix_csr()
    data = sparse.pe_bytes(a, p.px, p.py, p.layout, vector_words(p, a.shape))
    host = 2 * 12 * a.nnz + 8 * 4 * (a.shape[0] + a.shape[1])
    pes = p.px * p.py
    return wafer_footprint(
        pes, data, host, "px", program_bytes=program_bytes(pes, a.nnz), build_bytes=BUILD_BYTES
    )


def program_bytes(pes: int, nnz: int) -> int:
    """Host bytes per PE of spmv's program beyond an idle PE, at the peak of a product: every PE
    :data:`PROGRAM_BYTES`, the PEs holding non-zeros (at most ``min(pes, nnz)``)
    :data:`NONZERO_PE_BYTES` more, and :data:`NNZ_BYTES` per non-zero (spread over the PEs)."""
    extra = min(pes, nnz) * NONZERO_PE_BYTES + nnz * NNZ_BYTES
    return PROGRAM_BYTES + -(-extra // pes)


#: Host memory of a PE's spmv program beyond an idle PE, on every PE (its tasks, buffers,
#: descriptors and the collectives' routes and tasks, and what a product's run makes: router
#: buffers, operations, credits): resident memory at the peak of a product is 17.5 kB per PE at
#: 256 x 256 and 16.2 kB at 750 x 994 with the idle PE's (bench/wafer_bench.py --full-wafer,
#: 2026-11-26), beside :data:`~workloads.wafer.footprint.BUILD_BYTES`.
#: 1 kB more since express streams can hand back to the wavelet path (fabric/express.py): a
#: live stream's schedule and per-router state (gemv at 128 x 128: 18,932 -> 19,954 B per PE,
#: the lead's measurement on merging it).
PROGRAM_BYTES = 13_500
#: More on a PE that holds non-zeros (the one-element descriptors of its x and y, its local
#: product's task state): tracemalloc at 32 x 32, power-law (every PE holds some) against
#: poisson2d (one in ten), about 2 kB; rounded up. (Since 2026-11-27 the product makes no
#: descriptors: its run's lists of words and values live only while its task runs; the bound
#: is kept.) 1 kB more since relay chains
#: (fabric/relay.py): a chain's schedule and sums while its reduction runs; the 16 x 16
#: power-law point's traced peak went from 5.97 to 6.08 MB alone, and read up to 6.25 MB after
#: the rest of the test suite had run in the process (tests/test_full_array.py).
NONZERO_PE_BYTES = 4_000
#: Per non-zero (its fmacs operation, queued while the PE's local product runs): about 50 B
#: (tracemalloc, 16 x 16 and 32 x 32 power-law at 4 to 63 non-zeros per PE); rounded up.
NNZ_BYTES = 60
