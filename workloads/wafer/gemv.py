"""Dense matrix-vector product y = A·x on a px x py rectangle of PEs (docs/wafer/gemv.md).

A is m x n FP32, seeded (standard normal), as is x. PE (x, y) holds block A[y, x] (rows
``y·rb .. (y+1)·rb``, columns ``x·cb .. (x+1)·cb``; rb = ceil(m / py), cb = ceil(n / px), the
last blocks padded with zeros) column-major in its SRAM, and room for x's block x_x and a
partial y. One product, the layout of ``spmv`` with a dense block:

1. **x down the columns**: PE (c, 0) holds x_c and broadcasts it down its column with the
   collectives library (``Collectives.y``); the others receive it into their x buffer.
2. **local product** (in the broadcast's callback task): zero the partial sums (``fmovs``), then
   one ``fmacs`` per column of the block, y += A[:, j]·x_j (x_j read from the PE's SRAM);
3. **partial sums along the rows**: a chain reduction (``Collectives.x.reduce_fadds``) to the PE
   at x = 0 of each row, which ends with y's block.

Timing: the PEs' timestamp marks, ``cycles = max(end) - min(start)``, from the PE and fabric
mechanisms alone. The analytical model (:func:`model`) is built from the SDK study's fits; it never
feeds the simulation. The product is checked against numpy (float64) with the FP32 rounding bound.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pe.dsd import MemDsd
from pe.program import Layout, PeBuilder
from runner import registry
from simcore.config import param, section
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from wafer.collectives import Collectives
from wafer.system import MAX_HEIGHT, MAX_WIDTH, Wafer, WaferConfig
from workloads.wafer.calibration import t_bcast_reference, t_fmac_reference
from workloads.wafer.footprint import BUILD_BYTES, WORD_BYTES
from workloads.wafer.footprint import wafer as wafer_footprint

#: Local task ids (the collectives library takes 24..28).
MAIN, X_DONE, RED_DONE = 10, 11, 12


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemvParams(registry.ScenarioParams):
    m: int = param(64, "rows of A and elements of y; split over the py PE rows", min=1)
    n: int = param(64, "columns of A and elements of x; split over the px PE columns", min=1)
    px: int = param(4, "PE columns; A's columns and x are split over them", min=1, max=MAX_WIDTH)
    py: int = param(4, "PE rows; A's rows and y are split over them", min=1, max=MAX_HEIGHT)
    wafer: WaferConfig = section(WaferConfig, "the wafer-scale engine")

    def block(self) -> tuple[int, int]:
        """(rb, cb): the rows and columns of every PE's block."""
        return -(-self.m // self.py), -(-self.n // self.px)

    def check(self) -> None:
        sides = (("px", self.px, self.n, "n", "columns"), ("py", self.py, self.m, "m", "rows"))
        for key, parts, size, dim, what in sides:
            if parts > size:
                raise ConfigError(
                    key, parts, f"more PEs than the matrix's {size} {what}",
                    allowed=f"at most {dim} = {size}", hint=f"raise {dim} or lower {key}",
                )  # fmt: skip
        free = self.wafer.pe.sram_bytes - self.wafer.pe.code_bytes
        need = pe_bytes(self)
        if need > free:
            rb, cb = self.block()
            raise ConfigError(
                "m", self.m,
                f"a {self.m} x {self.n} matrix on {self.px} x {self.py} PEs gives each PE a "
                f"{rb} x {cb} block: {need:,} B with x and y, but a PE has {free:,} B beside "
                "the code",
                hint="lower m or n, or raise px and py",
            )  # fmt: skip


def pe_bytes(p: GemvParams) -> int:
    """SRAM bytes of a PE's data: its block, x's block and the partial y (FP32)."""
    rb, cb = p.block()
    return (rb * cb + cb + rb) * WORD_BYTES


def inputs(p: GemvParams) -> tuple[np.ndarray, np.ndarray]:
    """The seeded FP32 A (m x n) and x."""
    rng = np.random.default_rng([p.seed, 21])
    a = rng.standard_normal((p.m, p.n), dtype=np.float32)
    x = rng.standard_normal(p.n, dtype=np.float32)
    return a, x


@dataclasses.dataclass
class GemvRun:
    wafer: Wafer
    a: np.ndarray
    x: np.ndarray
    y: dict[int, MemDsd]  # block row -> the row root's partial-sum buffer


class _GemvPe:
    """One PE's program: its buffers, and its tasks as methods (one slotted object per PE
    rather than closures and their cells: a full array has 745,500)."""

    __slots__ = ("abuf", "cb", "coll", "columns", "p", "pe", "rb", "xbuf", "ypart")

    def __init__(
        self, pe: PeBuilder, p: GemvParams, rb: int, cb: int, blk: np.ndarray,
        x_block: np.ndarray, columns: dict[tuple, tuple[MemDsd, ...]],
    ) -> None:  # fmt: skip
        """``blk``: the PE's block of A, column-major (``rb * cb`` values, a column is
        contiguous); ``columns``: the build's column descriptors by block layout (_columns)."""
        self.pe, self.p, self.rb, self.cb = pe, p, rb, cb
        self.coll = Collectives(pe)
        self.abuf = pe.array("a", blk)  # column-major (blk: its columns one after another)
        self.xbuf = pe.array("x", x_block) if pe.y == 0 else pe.zeros("x", cb)
        self.ypart = pe.zeros("y", rb)
        self.columns = _columns(columns, self.abuf, rb, cb)
        pe.bind_local(MAIN, self.main)
        pe.bind_local(X_DONE, self.local_product)
        pe.bind_local(RED_DONE, self.reduced)
        pe.start(MAIN)

    def main(self, t: Any) -> None:
        t.mark("start")
        if self.p.py > 1:
            self.coll.y.broadcast(t, 0, self.xbuf, X_DONE)  # type: ignore[union-attr]
        else:
            t.activate(X_DONE)

    def local_product(self, t: Any) -> None:
        ypart = self.ypart
        t.fmovs(ypart, 0.0)
        xs = self.pe.read(self.xbuf).tolist()  # the scalars x_j, loaded from SRAM
        for column, x_j in zip(self.columns, xs, strict=True):  # y += A[:, j]·x_j
            t.fmacs(ypart, ypart, column, x_j)
        if self.p.px > 1:
            self.coll.x.reduce_fadds(t, 0, ypart, RED_DONE)
        else:
            t.activate(RED_DONE)

    def reduced(self, t: Any) -> None:
        t.mark("end")


def _columns(
    cache: dict[tuple, tuple[MemDsd, ...]], abuf: MemDsd, rb: int, cb: int
) -> tuple[MemDsd, ...]:
    """The ``cb`` columns of ``rb`` elements of the column-major block ``abuf``, from the
    build's ``cache``: every PE's block sits at the same address (one program, the same buffers
    in the same order), so the PEs share one tuple of descriptors instead of making ``cb`` new
    ones each (descriptors are values: the tensor unit keeps what it derives from one per SRAM,
    pe/isa.py ``FastOperand``). The cache is the build's, not the module's, so what a descriptor
    keeps of the last SRAM it ran in goes with the wafer."""
    key = (abuf.base, abuf.dtype, abuf.shape, abuf.strides, abuf.offset, abuf.name, abuf.space,
           rb, cb)  # fmt: skip
    cols = cache.get(key)
    if cols is None:
        column = abuf.with_length(rb)
        cols = cache[key] = tuple(column.with_offset(j * rb) for j in range(cb))
    return cols


def build(sim: Simulation, p: GemvParams) -> GemvRun:
    p.check()
    a, x = inputs(p)
    rb, cb = p.block()
    a_pad = np.zeros((rb * p.py, cb * p.px), np.float32)
    a_pad[: p.m, : p.n] = a
    # Every PE's block column-major, one after another (block (c, r) is blocks[r, c]): made
    # once, instead of a copy cut from A per PE
    blocks = a_pad.reshape(p.py, rb, p.px, cb).transpose(0, 2, 3, 1).reshape(p.py, p.px, rb * cb)
    del a_pad
    x_pad = np.zeros(cb * p.px, np.float32)
    x_pad[: p.n] = x
    run = GemvRun(None, a, x, {})  # type: ignore[arg-type]
    columns: dict[tuple, tuple[MemDsd, ...]] = {}

    def code(pe: PeBuilder) -> None:
        c, r = pe.x, pe.y
        prog = _GemvPe(pe, p, rb, cb, blocks[r, c], x_pad[c * cb : (c + 1) * cb], columns)
        if c == 0:
            run.y[r] = prog.ypart

    layout = Layout(p.px, p.py)
    layout.set_rectangle_code(code)
    run.wafer = Wafer(sim, p.wafer, layout)
    return run


def metrics(sim: Simulation, p: GemvParams, run: GemvRun, result: RunResult) -> dict[str, Any]:
    wafer = run.wafer
    got = np.concatenate([run.y[r].read(wafer.ce(0, r).sram) for r in range(p.py)])[: p.m]
    a64, x64 = run.a.astype(np.float64), run.x.astype(np.float64)
    ref = a64 @ x64
    err = np.abs(got.astype(np.float64) - ref)
    # FP32: each y_i is cb products summed in order on a PE, then px partial sums in a chain.
    n_terms = p.block()[1] + p.px + 1
    u = 2.0**-24
    bound = n_terms * u / (1 - n_terms * u) * (np.abs(a64) @ np.abs(x64))
    correct = bool(np.all(err <= bound + 1e-30))
    cycles = wafer.span_cycles()
    m = model(p)
    rb, cb = p.block()
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "rows": p.m,
        "cols": p.n,
        "block_rows": rb,
        "block_cols": cb,
        "pe_bytes": pe_bytes(p),
        "gflops": 2.0 * p.m * p.n * p.wafer.clock_hz / cycles / 1e9,
        "model_time_s": m["time_s"],
        "model_cycles": m["cycles"],
        "model_error_pct": 100.0 * (cycles - m["cycles"]) / m["cycles"],
        "max_abs_error": float(err.max(initial=0.0)),
        "correct": correct,
    }


def model(p: GemvParams) -> dict[str, Any]:
    """Cycles from the SDK study's fits, never from a simulation: the column broadcast of cb
    words, T_bcast(cb); the local product, zeroing y (the fmovs's rate, T_fmac(rb)/2) and cb
    fmacs of rb elements, cb·T_fmac(rb); the chain reduction of rb words along the row,
    T_bcast(rb) plus one hop per PE of the row."""
    rb, cb = p.block()
    t_x = t_bcast_reference(cb) if p.py > 1 else 0.0
    t_local = t_fmac_reference(rb) / 2 + cb * t_fmac_reference(rb)
    t_red = t_bcast_reference(rb) + p.px if p.px > 1 else 0.0
    cycles = t_x + t_local + t_red
    return {
        "time_s": cycles / p.wafer.clock_hz,
        "cycles": cycles,
        "x_broadcast_cycles": t_x,
        "local_cycles": t_local,
        "reduce_cycles": t_red,
        "rows": p.m,
        "cols": p.n,
    }


def footprint(p: GemvParams) -> registry.Footprint:
    """px x py PEs with their blocks; the host keeps A twice (the matrix and its padded copy,
    FP32) and A in float64 for the check."""
    host = (2 * WORD_BYTES + 8) * p.m * p.n + 8 * WORD_BYTES * (p.m + p.n)
    return wafer_footprint(
        p.px * p.py, pe_bytes(p), host, "px", program_bytes=PROGRAM_BYTES, build_bytes=BUILD_BYTES
    )


#: Host memory of a gemv PE's program beyond an idle PE (its tasks, buffers and collectives'
#: routes and tasks, and what a product's run makes): resident memory at the peak of a product
#: is 18.8 kB per PE at 128 x 128 and 17.4 kB at 256 x 256 with the idle PE's
#: (bench/wafer_bench.py --full-wafer, 2026-11-26), beside
#: :data:`~workloads.wafer.footprint.BUILD_BYTES`; tracemalloc at 16 x 16 and 32 x 32 (the host's
#: matrices counted apart) 15 to 17 kB.
#: 1 kB more since express streams can hand back to the wavelet path (fabric/express.py): a
#: live stream's schedule and per-router state (gemv at 128 x 128: 18,932 -> 19,954 B per PE,
#: the lead's measurement on merging it).
PROGRAM_BYTES = 13_500


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="gemv",
            summary="dense y = A·x on px x py PEs (column broadcast of x, fmacs, row reduction)",
            params=GemvParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
