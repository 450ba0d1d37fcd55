"""Tensor instructions of the compute engine: what they compute and how long they take, apart.

Three separately testable pieces:

- **function** (:func:`apply`): numpy on operand *values*, with the hardware's number formats.
  Each arithmetic step rounds to its type: FP16 ops compute and round in float16, FP32 ops in
  float32; multiply-adds round the product, then the sum (not fused: the vendor does not document
  fused rounding). ``fmachs`` multiplies FP16 inputs (exact in FP32) and accumulates in FP32.
  Integer adds wrap. IEEE specials propagate silently (no numpy warnings).
- **timing** (:func:`cost_cycles`): cycles the instruction occupies the datapath, from mechanisms
  only, from the operands' descriptors and never their data. See :func:`cost_cycles` for the
  model; docs/wafer/pe-isa.md shows which parameters carry the measured T_fmac(I) = 2 I + 10.
- **execution** (:class:`TensorUnit`, one per ``PeConfig``): gather the memory operands, apply,
  scatter into the destination, return the cost. Dtypes and lengths are checked first, with
  messages naming the op and operand. The unit owns every cache: the cost memo, the numbering
  of operands' timing classes and the state of its FP32 fast path, which computes exactly what
  the general path does (the contract test in tests/test_contract_function_timing.py checks
  function against execution, cost against data, and fast path against general path).

Operands are written ``dst = f(src0, src1, ...)``; the op table :data:`OPS` says which sources
may be scalars (a Python number or a 0-d array, e.g. a register or a value from the fabric).

Element order: the datapath streams an instruction element by element, so when ``dst`` writes
an address that a source reads at another position, or writes one address several times (a
stride-0 accumulator), element i sees what element i-1 wrote. ``fmacs(acc, acc, a, b)`` with a
one-word stride-0 ``acc`` is thus a dot product, rounded at every step in order. The cost is the
same as for any fmacs of that length: the model assumes the FP32 interval of 2 cycles per
element covers the accumulate dependency (a forwarding path; not documented by the vendor).

Left out: fabric operands' rates (the compute engine paces wavelets through its queues and
passes ``None`` for them here) and write-versus-read bank conflicts (writes are assumed to drain
through a write buffer).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pe.config import PeConfig
from pe.dsd import DTYPES, FabInDsd, FabOutDsd, MemDsd, Store, short_name
from simcore.errors import BuildError


class OperandError(BuildError):
    """A tensor instruction was given operands of the wrong kind, type or length."""


F32, F16 = np.float32, np.float16


def _fma(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # Round the product to the accumulator's type, then the sum (two roundings, see module doc).
    return acc + (a * b).astype(acc.dtype)


def _fmachs(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return acc + a.astype(F32) * b.astype(F32)


def _wrap_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.int64) + b.astype(np.int64)).astype(a.dtype)


def _copy(a: np.ndarray) -> np.ndarray:
    return a.copy()


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One tensor instruction.

    ``dst_dtypes`` and each entry of ``src_dtypes`` list the element types allowed for that
    operand; the first is the op's own type, which scalars are converted to. ``same_dtype`` ops
    (integer adds) need all tensor operands of one type. ``raw_move`` ops copy bits, so a move
    between 32-bit types reinterprets rather than converts. ``simd_width_param`` and
    ``interval_param`` name ``PeConfig`` fields: elements per issue beat, and the minimum cycles
    per beat (``None``: one).
    """

    name: str
    dst_dtypes: tuple[str, ...]
    src_dtypes: tuple[tuple[str, ...], ...]
    scalar_srcs: tuple[int, ...]
    simd_width_param: str
    fn: Callable[..., np.ndarray]
    doc: str
    interval_param: str | None = None
    same_dtype: bool = False
    raw_move: bool = False

    @property
    def n_srcs(self) -> int:
        return len(self.src_dtypes)

    @property
    def n_tensor_operands(self) -> int:
        """Most tensor operands the op takes (destination included)."""
        return 1 + self.n_srcs

    @property
    def scalar_allowed(self) -> bool:
        return bool(self.scalar_srcs)


_S, _H = ("f32",), ("f16",)
_B32, _B16 = ("f32", "i32", "u32"), ("f16", "i16", "u16")
_I16, _I32 = ("i16", "u16"), ("i32", "u32")

# fmt: off
OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec("fmacs", _S, (_S, _S, _S), (1, 2), "fmacs_simd_width", _fma,
               "FP32 multiply-add: dst = src0 + src1 * src2",
               interval_param="fp32_fmac_cycles_per_element"),
        OpSpec("fmach", _H, (_H, _H, _H), (1, 2), "fmach_simd_width", _fma,
               "FP16 multiply-add, FP16 accumulate: dst = src0 + src1 * src2"),
        OpSpec("fmachs", _S, (_S, _H, _H), (1, 2), "fmachs_simd_width", _fmachs,
               "FP16 multiply, FP32 accumulate: dst = src0 + f32(src1 * src2)"),
        OpSpec("fadds", _S, (_S, _S), (0, 1), "fadds_simd_width", np.add,
               "FP32 add: dst = src0 + src1"),
        OpSpec("faddh", _H, (_H, _H), (0, 1), "faddh_simd_width", np.add,
               "FP16 add: dst = src0 + src1"),
        OpSpec("fsubs", _S, (_S, _S), (0, 1), "fadds_simd_width", np.subtract,
               "FP32 subtract: dst = src0 - src1"),
        OpSpec("fmuls", _S, (_S, _S), (0, 1), "fadds_simd_width", np.multiply,
               "FP32 multiply: dst = src0 * src1"),
        OpSpec("fmulh", _H, (_H, _H), (0, 1), "fmulh_simd_width", np.multiply,
               "FP16 multiply: dst = src0 * src1"),
        OpSpec("fmaxs", _S, (_S, _S), (0, 1), "fadds_simd_width", np.maximum,
               "FP32 maximum (a NaN operand gives NaN): dst = max(src0, src1)"),
        OpSpec("fnegs", _S, (_S,), (), "fadds_simd_width", np.negative,
               "FP32 negate: dst = -src0"),
        OpSpec("fmovs", _S, (_S,), (0,), "fmovs_simd_width", _copy,
               "FP32 move: dst = src0"),
        OpSpec("fmovh", _H, (_H,), (0,), "mov16_simd_width", _copy,
               "FP16 move: dst = src0"),
        OpSpec("mov32", _B32, (_B32,), (0,), "mov32_simd_width", _copy,
               "32-bit move, bits copied unchanged: dst = src0", raw_move=True),
        OpSpec("mov16", _B16, (_B16,), (0,), "mov16_simd_width", _copy,
               "16-bit move, bits copied unchanged: dst = src0", raw_move=True),
        OpSpec("add16", _I16, (_I16, _I16), (0, 1), "faddh_simd_width", _wrap_add,
               "16-bit integer add, wrapping: dst = src0 + src1", same_dtype=True),
        OpSpec("add32", _I32, (_I32, _I32), (0, 1), "fadds_simd_width", _wrap_add,
               "32-bit integer add, wrapping: dst = src0 + src1", same_dtype=True),
    )
}
# fmt: on


def spec_of(op: str) -> OpSpec:
    """The table entry for ``op``; an unknown name is an :class:`OperandError`."""
    try:
        return OPS[op]
    except KeyError:
        raise OperandError(f"unknown tensor instruction {op!r}; known: {', '.join(OPS)}") from None


def _is_scalar(x: object) -> bool:
    return isinstance(x, int | float | np.number) or (isinstance(x, np.ndarray) and x.ndim == 0)


# --------------------------------------------------------------------------- function


def apply(op: str, *operands: np.ndarray | float) -> np.ndarray:
    """The result of ``op`` on source values (1-D arrays of one length, or scalars).

    Tensor values of a type the op allows keep it; others are converted to the op's own type,
    as are scalars. Returns a new 1-D array in the destination type (for integer and raw moves,
    the type of the first tensor source).
    """
    spec = spec_of(op)
    if len(operands) != spec.n_srcs:
        raise OperandError(f"{op}: takes {spec.n_srcs} source operands, got {len(operands)}")
    vals = []
    for i, (x, allowed) in enumerate(zip(operands, spec.src_dtypes, strict=True)):
        if _is_scalar(x) and i not in spec.scalar_srcs:
            raise OperandError(f"{op}: src{i} must be a tensor, got the scalar {x!r}")
        arr = np.asarray(x)
        if arr.dtype in [DTYPES[d] for d in allowed]:
            vals.append(arr)
        else:
            with np.errstate(all="ignore"):
                vals.append(arr.astype(DTYPES[allowed[0]]))
    if spec.same_dtype:
        first = next((v.dtype for v in vals if v.ndim), vals[0].dtype)
        vals = [v.astype(first) for v in vals]
    quiet = _quiet_on()  # (``np.errstate(all="ignore")``: see _quiet_on)
    try:
        out = np.asarray(spec.fn(*vals))
    finally:
        _quiet_off(quiet)
    if not spec.raw_move and not spec.same_dtype:
        out = out.astype(DTYPES[spec.dst_dtypes[0]], copy=False)
    return np.atleast_1d(out)


# --------------------------------------------------------------------------- timing


def _mem_reads(srcs: tuple[object, ...]) -> list[MemDsd]:
    return [s for s in srcs if isinstance(s, MemDsd) and s.space == "sram"]


def beat_width(op: str, cfg: PeConfig, operands: tuple[object, ...]) -> int:
    """Elements per issue beat: the op's SIMD width, or 1 if any memory operand is not dense.

    A strided (or gapped multi-dimensional) operand cannot fill a 64-bit access with successive
    elements, so the whole instruction drops to one element per beat.
    """
    width = cfg.simd_width(spec_of(op).simd_width_param)
    mems = [x for x in operands if isinstance(x, MemDsd)]
    return width if all(m.is_dense for m in mems) else 1


def beat_cycles(
    op: str, length: int, cfg: PeConfig, *, dst: object = None, srcs: tuple[object, ...] = ()
) -> np.ndarray:
    """Cycles of each issue beat (int64 array), bank conflicts included.

    A beat issues ``beat_width`` elements. It needs ``ceil(R / 2)`` SRAM read cycles for its R
    SRAM source reads (two 64-bit reads per cycle), taken in operand order as pairs (src0, src1),
    (src2, ...); a pair whose start banks agree modulo ``bank_conflict_modulus`` is serialised
    and costs ``bank_conflict_penalty_cycles`` more. The beat lasts the longer of that and the
    op's initiation interval (``interval_param``, else 1): a long interval hides conflicts.
    Cache operands, fabric operands and scalars read no SRAM bank.
    """
    spec = spec_of(op)
    width = beat_width(op, cfg, (dst, *srcs))
    n_beats = -(-length // width)
    interval = getattr(cfg, spec.interval_param) if spec.interval_param else 1
    reads = _mem_reads(srcs)
    mem = np.full(n_beats, -(-len(reads) // 2), dtype=np.int64)
    groups = [
        (r.addresses()[::width] // cfg.bank_interleave_bytes)
        % cfg.sram_banks
        % cfg.bank_conflict_modulus
        for r in reads
    ]
    for a, b in zip(groups[0::2], groups[1::2], strict=False):
        mem += (a == b) * cfg.bank_conflict_penalty_cycles
    return np.maximum(mem, interval)


def cost_cycles(
    op: str,
    length: int,
    cfg: PeConfig,
    *,
    dst: MemDsd | FabOutDsd | None = None,
    srcs: tuple[MemDsd | FabInDsd | None, ...] = (),
) -> int:
    """Cycles ``op`` over ``length`` elements occupies the datapath.

    ``dsd_setup_cycles`` (load the descriptors) + ``pipeline_stages`` (fill the pipeline once)
    + the sum of :func:`beat_cycles`. ``None`` stands for a scalar or a fabric operand. The data
    values never matter. Memory operands must have ``length`` elements. Computed afresh on every
    call: :meth:`TensorUnit.cost` gives the same number, memoised.
    """
    _check_cost_operands(op, length, dst, srcs)
    return _cost(op, length, cfg, dst, srcs)


def _cost(op: str, length: int, cfg: PeConfig, dst: object, srcs: tuple) -> int:
    beats = beat_cycles(op, length, cfg, dst=dst, srcs=tuple(srcs))
    return cfg.dsd_setup_cycles + cfg.pipeline_stages + int(beats.sum())


def _check_cost_operands(op: str, length: int, dst: object, srcs: tuple) -> None:
    spec = spec_of(op)
    if length < 1:
        raise OperandError(f"{op}: length {length}; a tensor instruction needs at least 1")
    if len(srcs) > spec.n_srcs:
        raise OperandError(f"{op}: takes {spec.n_srcs} source operands, got {len(srcs)}")
    for what, x in (("dst", dst), *((f"src{i}", s) for i, s in enumerate(srcs))):
        if isinstance(x, MemDsd | FabInDsd | FabOutDsd) and x.length != length:
            raise OperandError(
                f"{op}: {what} {x.label} has {x.length} elements, the instruction {length}"
            )


# --------------------------------------------------------------------------- execution


#: Entries a unit's cost memo holds before it starts again (a bound on memory; a kernel uses a
#: few hundred operand shapes and placements).
MEMO_ENTRIES = 200_000


class TensorUnit:
    """The tensor instructions of PEs built from one :class:`PeConfig`: run them, cost them.

    :meth:`execute` runs an instruction on a PE's memories and returns its cycles; :meth:`cost`
    gives the cycles alone, equal to :func:`cost_cycles` and memoised. The unit holds no
    simulated state (each PE passes its own memories), only caches of what follows from the
    configuration and the operands' descriptors, so one unit serves every compute engine of a
    wafer: the wafer builds it once. Its caches live and die with it:

    - the cost memo, keyed by (op, length, each operand's timing key): an operand matters to the
      cost only through its type, shape, strides, memory space and where it starts within one
      period of the bank pattern;
    - the timing classes, a number per timing key, so that the fast path's memo keys are short
      tuples of ints;
    - the fast path: its per-descriptor state (:class:`FastOperand`, valid for one memory and one
      unit) and its cost memo keyed by (op, the operands' timing classes).

    ``fast_path=False`` sends every instruction down the general path. Results, bytes written
    and cycles are the same either way; only the speed differs (the contract test compares the
    two). ``fast_instructions`` counts the instructions the fast path ran.
    """

    __slots__ = ("_classes", "_costs", "_f32", "_f32_of", "_fast_costs", "_period",
                 "_run_costs", "cfg", "fast_instructions", "fast_path",
                 "run_vector_min")  # fmt: skip

    def __init__(self, cfg: PeConfig, *, fast_path: bool = True) -> None:
        self.cfg = cfg
        self.fast_path = fast_path
        self.fast_instructions = 0
        self._period = cfg.bank_interleave_bytes * cfg.sram_banks  # bytes of one bank pattern
        self._costs: dict[tuple, int] = {}
        self._classes: dict[tuple, int] = {}
        self._fast_costs: dict[tuple, int] = {}
        # execute_run's costs by the run's form (op, each operand's strides or None): one
        # number, or a memo by the memory operands' start addresses within a bank period
        self._run_costs: dict[tuple, int | dict[int, int]] = {}
        self.run_vector_min = RUN_VECTOR_MIN
        # The last SRAM bytes an operand was made in, and their FP32 view (_f32_view)
        self._f32_of: np.ndarray | None = None
        self._f32: np.ndarray | None = None

    def cost(
        self,
        op: str,
        length: int,
        *,
        dst: MemDsd | FabOutDsd | None = None,
        srcs: tuple[MemDsd | FabInDsd | None, ...] = (),
    ) -> int:
        """:func:`cost_cycles` under this unit's configuration, computed once per timing key."""
        _check_cost_operands(op, length, dst, srcs)
        key = (op, length, self._timing_key(dst), *(self._timing_key(s) for s in srcs))
        cost = self._costs.get(key)
        if cost is None:
            cost = _cost(op, length, self.cfg, dst, srcs)
            _remember(self._costs, key, cost)
        return cost

    def _timing_key(self, x: object) -> tuple | None:
        """What the cost depends on about operand ``x`` (None: a scalar or fabric operand)."""
        return self._memory_key(x) if isinstance(x, MemDsd) else None

    def _memory_key(self, d: MemDsd) -> tuple:
        start = (d.base + d.offset * d.itemsize) % self._period
        return (d.dtype, d.shape, d.strides, d.space, start)

    def execute(
        self,
        op: str,
        sram: Store,
        dst: MemDsd,
        srcs: tuple[MemDsd | np.ndarray | float, ...],
        *,
        cache: Store | None = None,
    ) -> int:
        """Run ``op``: read the sources, compute, write ``dst``; returns the cost in cycles.

        Sources are memory descriptors, scalars, or 1-D arrays of values already taken from the
        fabric. Descriptors with ``space='cache'`` live in ``cache``. All sources are read before
        ``dst`` is written, except where operands overlap (see the module's element order).
        """
        if self.fast_path:
            fast = _FAST.get(op)
            if fast is not None:
                cost = self._execute_dense_f32(op, fast, sram, dst, srcs, cache)
                if cost is not None:
                    return cost
        return self._execute_general(op, sram, dst, srcs, cache)

    def _execute_general(
        self, op: str, sram: Store, dst: MemDsd, srcs: tuple, cache: Store | None
    ) -> int:
        spec = spec_of(op)
        if not isinstance(dst, MemDsd):
            raise OperandError(f"{op}: dst must be a memory DSD, got {type(dst).__name__}")
        if len(srcs) != spec.n_srcs:
            raise OperandError(f"{op}: takes {spec.n_srcs} source operands, got {len(srcs)}")

        def store_of(d: MemDsd, what: str) -> Store:
            if d.space == "cache":
                if cache is None:
                    raise OperandError(
                        f"{op}: {what} {d.label} is in the cache but no cache was given"
                    )
                return cache
            return sram

        _check_dtype(op, "dst", dst.dtype, spec.dst_dtypes, dst)
        values: list[np.ndarray | float] = []
        timing: list[MemDsd | None] = []
        for i, (s, allowed) in enumerate(zip(srcs, spec.src_dtypes, strict=True)):
            what = f"src{i}"
            if isinstance(s, MemDsd):
                _check_dtype(op, what, s.dtype, allowed, s)
                if s.length != dst.length:
                    raise OperandError(
                        f"{op}: {what} {s.label} has {s.length} elements but dst {dst.label} has "
                        f"{dst.length}; give both the same length"
                    )
                values.append(s.read(store_of(s, what)))
                timing.append(s)
            elif _is_scalar(s):
                if i not in spec.scalar_srcs:
                    raise OperandError(f"{op}: {what} must be a tensor, got the scalar {s!r}")
                values.append(s)
                timing.append(None)
            else:
                arr = np.asarray(s)
                if arr.ndim != 1 or arr.size != dst.length:
                    raise OperandError(
                        f"{op}: {what} has {arr.size} values but dst {dst.label} has {dst.length}"
                    )
                _check_dtype(op, what, short_name(arr.dtype), allowed)
                values.append(arr)
                timing.append(None)
        if spec.same_dtype:
            types = {dst.dtype} | {
                short_name(np.asarray(v).dtype) for v in values if not _is_scalar(v)
            }
            if len(types) > 1:
                raise OperandError(
                    f"{op}: operands have element types {', '.join(sorted(types))}; they must match"
                )
        cost = self.cost(op, dst.length, dst=dst, srcs=tuple(timing))
        dst_store = store_of(dst, "dst")
        mem_srcs = [(s, store_of(s, "src")) for s in srcs if isinstance(s, MemDsd)]
        if _overlaps(dst, dst_store, mem_srcs):
            _execute_in_order(op, spec, dst, dst_store, srcs, values, store_of)
            return cost
        dst.write(dst_store, np.broadcast_to(_compute(op, spec, dst, values), (dst.length,)))
        return cost

    def _execute_dense_f32(
        self, op: str, fast: _FastOp, sram: Store, dst: object, srcs: tuple,
        cache: Store | None = None,
    ) -> int | None:  # fmt: skip
        """The fast path, or None (nothing done) when the instruction is not its case.
        Operands in the software cache (``cache``) take it too; what is kept for them is made
        again at each instruction (the check below is against the SRAM's bytes)."""
        if type(dst) is not MemDsd or len(srcs) != fast.n_srcs:
            return None
        data = sram.data
        d = dst.__dict__.get(_FAST_OPERAND)
        if d is None or d.data is not data or d.unit is not self:
            d = self._fast_operand(dst, sram, data, cache)
            if d is None:
                return None
        start, stop, n = d.start, d.stop, d.length
        vals: list = []
        key: list = [op, d.timing_class]
        one = _ONE_ELEMENT.get(op) if n == 1 else None
        if one is not None:
            # One element (a kernel's scalar step, e.g. spmv's fmacs per non-zero): the exact
            # scalar form of ``elementwise`` on the elements' values (Python floats; the scalar
            # as given, which it rounds to FP32 as the ufuncs do), or None where it does not
            # vouch for the bits: then the ufuncs below, as for any length.
            args: list = []
            for i, s in enumerate(srcs):
                if type(s) is MemDsd:
                    e = s.__dict__.get(_FAST_OPERAND)
                    if e is None or e.data is not data or e.unit is not self:
                        e = self._fast_operand(s, sram, data, cache)
                        if e is None:
                            return None
                    if e.length != 1:
                        return None  # other lengths: general path
                    vals.append(e.view)
                    args.append(e.view.item(0))
                    key.append(e.timing_class)
                elif type(s) is float and i in fast.scalar_srcs:
                    vals.append(s)
                    args.append(s)
                    key.append(-1)
                else:
                    return None
            r = one(*args, _not_scalar)
            if r is not None:
                d.view[0] = r
            else:
                with np.errstate(all="ignore"):  # as below
                    fast.compute(d.view, *[F32(v) if v.__class__ is float else v for v in vals])
        else:
            # A scalar may overflow FP32: silently, as in apply (``np.errstate(all="ignore")``
            # without its object and Python frames per instruction: see _quiet_on).
            quiet = _quiet_on()
            try:
                for i, s in enumerate(srcs):
                    if type(s) is MemDsd:
                        e = s.__dict__.get(_FAST_OPERAND)
                        if e is None or e.data is not data or e.unit is not self:
                            e = self._fast_operand(s, sram, data, cache)
                            if e is None:
                                return None
                        if e.length != n or (
                            e.start != start and e.start < stop and start < e.stop
                            and e.data is d.data
                        ):  # fmt: skip
                            return None  # other lengths, or overlapping dst at a shift: general
                        vals.append(e.view)
                        key.append(e.timing_class)
                    elif type(s) is float and i in fast.scalar_srcs:
                        vals.append(F32(s))
                        key.append(-1)
                    else:
                        return None
                fast.compute(d.view, *vals)
            finally:
                _quiet_off(quiet)
        self.fast_instructions += 1
        k = tuple(key)
        cost = self._fast_costs.get(k)
        if cost is None:
            timing = tuple(s if type(s) is MemDsd else None for s in srcs)
            cost = self.cost(op, n, dst=dst, srcs=timing)
            _remember(self._fast_costs, k, cost)
        return cost

    def _fast_operand(
        self, d: MemDsd, sram: Store, data: np.ndarray, cache: Store | None = None
    ) -> FastOperand | None:
        """Make and keep the fast path's state for ``d`` in ``sram`` (``data``: its bytes), or
        in ``cache`` for a descriptor in the software cache; None if ``d`` is not a dense FP32
        tensor inside its memory (the general path takes it, or reports it). A one-element
        descriptor is dense whatever its stride (e.g. a stride-0 accumulator of one word)."""
        if d.dtype != "f32":
            return None
        e = d.__dict__.get(_FAST_OPERAND)
        if e is not None and e.unit is self and e.f32 is not None:
            # A descriptor shared by PEs of one role (the same buffer at the same address in
            # each PE's SRAM), last used in another SRAM: its elements and timing class are
            # the same here (they follow from the descriptor and the unit), only the view is
            # another memory's (``f32`` is kept for SRAM operands only).
            # It is moved to this memory in place (the descriptor is its only holder).
            stop = e.stop
            if stop * 4 <= len(data):  # (a packed SRAM below the operand: the full path)
                f32 = self._f32 if self._f32_of is data else self._f32_view(data)
                e.data = data
                e.view = f32[e.start : stop]
                e.f32 = f32
                return e
        space = d.space
        if space != "sram":
            if space != "cache" or cache is None:
                return None
            data = cache.data
        shape = d.shape
        if len(shape) == 1 and shape[0] >= 1:
            # One dimension (the inner loops' descriptors, made anew by each move): ``is_dense``
            # and ``span`` worked out here, without their cached properties' cost per new one.
            n = shape[0]
            if n > 1 and d.strides[0] != 1:
                return None
            lo = d.base + d.offset * 4
            hi = lo + 4 * n - 1
            key = ("f32", shape, d.strides, space, lo % self._period)  # (_memory_key)
        else:
            if not d.is_dense:
                return None
            lo, hi = d.span()
            n = d.length
            key = self._memory_key(d)
        if lo < 0 or hi >= len(data):  # (a packed SRAM: the general path widens it)
            return None
        start = lo // 4  # dense: the lowest byte is the first element's
        stop = start + n
        timing_class = self._classes.setdefault(key, len(self._classes))
        if space == "sram":
            f32 = self._f32 if self._f32_of is data else self._f32_view(data)
            e = FastOperand(data, self, f32[start:stop], start, stop, timing_class)
            e.f32 = f32
        else:
            e = FastOperand(data, self, data.view(F32)[start:stop], start, stop, timing_class)
        d.__dict__[_FAST_OPERAND] = e
        return e

    def _f32_view(self, data: np.ndarray) -> np.ndarray:
        """``data`` (an SRAM's bytes) as FP32 words, kept for the next operand in the same
        SRAM (an instruction's operands, and a PE's next instructions, share it)."""
        f32 = self._f32 = data.view(F32)
        self._f32_of = data
        return f32

    # -- runs of one-element instructions ------------------------------------------------------
    def execute_run(
        self, op: str, sram: Store, dst: tuple[MemDsd, Sequence[int]], srcs: tuple, *,
        cache: Store | None = None,
    ) -> list[int]:  # fmt: skip
        """Run a *run* of one-element instructions ``op`` and return each one's cycles, in order.

        Instruction k is ``execute(op, sram, dst_k, srcs_k, cache=cache)``: a memory operand,
        given as ``(dsd, offsets)`` (``dsd`` 1-D), stands for
        ``dsd.with_length(1).with_offset(offsets[k])``; a list of scalars for its element k;
        any other scalar for itself; every list of offsets or scalars has one entry per
        instruction (``dst``'s offsets give the count). The result, the bytes written, each
        cost and ``fast_instructions`` are those of the instructions run one after the other
        (:meth:`_execute_run_each`, the reference); on the fast path (``fadds``, ``fsubs``,
        ``fmuls`` and ``fmacs`` on FP32 operands in SRAM) without a descriptor, a
        :class:`FastOperand` or a call per instruction: the words an instruction touches are
        kept as Python floats (FP32 values, exact) and written back when the run ends; an
        instruction the scalar form does not vouch for (a value outside FP32's finite range, a
        scalar that is not a Python float) is run as the reference runs it, on the memory as
        it stands then. Costs are memoised per run form and the operands' start addresses
        within the bank period (:meth:`cost` of the instruction's descriptors, once per key).
        """
        n = _run_length(op, dst, srcs)
        if n and self.fast_path and op in _ONE_ELEMENT:
            got = self._execute_run_fast(op, sram, dst, srcs, n, cache)
            if got is not None:
                return got
        return self._execute_run_each(op, sram, dst, srcs, n, cache)

    def _execute_run_each(
        self, op: str, sram: Store, dst: tuple, srcs: tuple, n: int, cache: Store | None
    ) -> list[int]:
        """The reference: each instruction's descriptors made and :meth:`execute` called."""
        return [
            self.execute(op, sram, *_run_instruction(dst, srcs, k), cache=cache) for k in range(n)
        ]

    def _execute_run_fast(
        self, op: str, sram: Store, dst: tuple, srcs: tuple, n: int, cache: Store | None
    ) -> list[int] | None:
        """:meth:`execute_run` on the fast path, or None (nothing done) when the run is not its
        case: a memory operand that is not a 1-D FP32 ``MemDsd`` in the SRAM, or a word
        outside the SRAM's bytes as they stand (a packed SRAM: the reference widens it)."""
        data = sram.data
        f32 = self._f32 if self._f32_of is data else self._f32_view(data)
        size = len(f32)
        words: list[list[int] | None] = []
        values: list[Any] = []
        form: list[Any] = [op]
        for x in (dst, *srcs):
            if x is dst and words:  # (the destination again, an accumulator: its words)
                words.append(words[0])
                values.append(None)
                form.append("dst")  # (placed where the destination is)
            elif type(x) is tuple:
                d, offsets = x
                if type(d) is not MemDsd or d.dtype != "f32" or d.space != "sram":
                    return None
                if len(d.shape) != 1:
                    return None
                w0 = d.base // 4 + d.offset  # (an FP32 descriptor's base is word-aligned)
                ws = [w0 + o for o in map(int, offsets)]  # (with_offset's int())
                if min(ws) < 0 or max(ws) >= size:
                    return None
                words.append(ws)
                values.append(None)
                form.append(d.strides)
            else:
                words.append(None)
                values.append(x if type(x) is list else [x] * n)
                form.append(None)
        costs = self._run_form_costs(tuple(form))
        # Each instruction's cycles: one figure for the whole run when the form's cost is the
        # same at every placement (fmacs: its interval hides the bank conflicts), else looked
        # up by the operands' start addresses within the bank period.
        cycles: list[int] = [costs] * n if type(costs) is int else []
        cur: dict[int, float] = {}  # word -> its value, read or written by the run (in range)
        out: dict[int, float] = {}  # words written, not yet in the SRAM
        scalar_srcs = _FAST[op].scalar_srcs
        q = self._period
        m = _F32_MAX
        pack, unpack = _pack32, _unpack32
        get = cur.get
        item = f32.item
        fallbacks = 0
        dws = words[0]
        assert dws is not None  # (dst is a memory operand: _run_length)

        def each(k: int) -> None:
            # Instruction k as the reference runs it, on the memory as it stands: the words
            # written so far go to the SRAM first; the destination word is read again after.
            nonlocal data, f32, item, fallbacks
            _flush(f32, out)
            c = self.execute(op, sram, *_run_instruction(dst, srcs, k), cache=cache)
            if type(costs) is int:
                cycles[k] = c
            else:
                cycles.append(c)
            cur.pop(dws[k], None)
            fallbacks += 1
            if sram.data is not data:  # (a packed SRAM widened: the same words, new bytes)
                data = sram.data
                f32 = self._f32 if self._f32_of is data else self._f32_view(data)
                item = f32.item

        if (
            op == "fmacs" and words[1] is not None and words[2] is not None
            and words[3] is None and type(costs) is int
        ):  # fmt: skip
            # y[i] += x[j] * c (a sparse row's step) at one cost: ``_fmacs_1`` inline. A value
            # enters ``cur`` only inside FP32's finite range, so only new ones are checked.
            if n >= self.run_vector_min and set(dws).isdisjoint(words[2]):
                ps = _products(f32, words[2], values[3])
                if ps is not None:
                    k = -1
                    for dw, aw, p, c in zip(dws, words[1], ps, values[3], strict=True):
                        k += 1
                        acc = get(aw)
                        if acc is None:
                            acc = item(aw)
                            if not -m <= acc <= m:
                                each(k)
                                continue
                            cur[aw] = acc
                        if c.__class__ is float and -m <= p <= m:
                            r = acc + p
                            if -m <= r <= m:
                                cur[dw] = out[dw] = unpack(pack(r))[0]
                                continue
                        each(k)
                    _flush(f32, out)
                    self.fast_instructions += n - fallbacks
                    return cycles
            k = -1
            for dw, aw, xw, c in zip(dws, words[1], words[2], values[3], strict=True):
                k += 1
                acc = get(aw)
                if acc is None:
                    acc = item(aw)
                    if not -m <= acc <= m:
                        each(k)
                        continue
                    cur[aw] = acc
                a = get(xw)
                if a is None:
                    a = item(xw)
                    if not -m <= a <= m:
                        each(k)
                        continue
                    cur[xw] = a
                if c.__class__ is float and -m <= c <= m:
                    p = a * unpack(pack(c))[0]  # (a is an FP32 value: exact in double)
                    if -m <= p <= m:
                        r = acc + unpack(pack(p))[0]
                        if -m <= r <= m:
                            cur[dw] = out[dw] = unpack(pack(r))[0]
                            continue
                each(k)
        else:
            one = _ONE_ELEMENT[op]
            operands = list(zip(words[1:], values[1:], range(len(srcs)), strict=True))
            keyed = type(costs) is not int
            for k in range(n):
                dw = dws[k]
                args: list[Any] = []
                ck = (dw * 4) % q
                for ws, vs, i in operands:
                    if ws is not None:
                        w = ws[k]
                        v = get(w)
                        if v is None:
                            v = cur[w] = item(w)  # (out of range: the scalar form declines)
                        ck = ck * q + (w * 4) % q
                    else:
                        v = vs[k]
                        if v.__class__ is not float or i not in scalar_srcs:
                            break  # (the reference's general path)
                        ck = ck * q
                    args.append(v)
                else:
                    r = one(*args, _not_scalar)
                    if r is not None:
                        cur[dw] = out[dw] = float(r)
                        if keyed:
                            cy = costs.get(ck)  # type: ignore[union-attr]
                            if cy is None:
                                cy = costs[ck] = self._run_cost(op, dst, srcs, k)  # type: ignore[index]
                            cycles.append(cy)
                        continue
                each(k)
        _flush(f32, out)
        self.fast_instructions += n - fallbacks
        return cycles

    def _run_form_costs(self, form: tuple) -> int | dict[int, int]:
        """A run form's costs (``form``: the op, then each operand's strides, None for a
        scalar, or "dst" for the destination's operand given again): one number when
        :meth:`cost` gives the same at every start address of its memory operands within the
        bank period (each placement costed once, made as the descriptors it stands for), else
        a memo the run fills by placement."""
        got = self._run_costs.get(form)
        if got is not None:
            return got
        if len(self._run_costs) >= 1024:  # (a bound: a kernel has a few run forms)
            self._run_costs.clear()
        op, q = form[0], self._period
        starts = sorted({(4 * w) % q for w in range(q)})  # a word's possible starts
        mems = [s for s in form[1:] if s is not None and s != "dst"]
        got = {}
        if len(starts) ** len(mems) <= 256:
            found = set()
            for place in itertools.product(starts, repeat=len(mems)):
                it = iter(place)
                ds: list[MemDsd | None] = []
                for s in form[1:]:
                    if s == "dst":  # (the destination's operand again: its placement)
                        ds.append(ds[0])
                    else:
                        ds.append(
                            None if s is None else MemDsd(next(it), "f32", (1,), s, space="sram")
                        )
                found.add(self.cost(op, 1, dst=ds[0], srcs=tuple(ds[1:])))
            if len(found) == 1:
                (got,) = found
        self._run_costs[form] = got
        return got

    def _run_cost(self, op: str, dst: tuple, srcs: tuple, k: int) -> int:
        """The cost of a run's instruction ``k``, as the fast path costs it."""
        d, s = _run_instruction(dst, srcs, k)
        return self.cost(op, 1, dst=d, srcs=tuple(x if type(x) is MemDsd else None for x in s))


#: Runs of at least this many ``fmacs`` in spmv's form whose ``x`` words the run does not write
#: take their products as one numpy multiply (:func:`_products`); shorter ones one by one (a
#: unit's ``run_vector_min``; the results are the same either way, only the speed differs).
RUN_VECTOR_MIN = 8


def _products(f32: np.ndarray, xws: list[int], cs: list) -> list[float] | None:
    """``fl32(x[w] * fl32(c))`` for a run's ``x`` words and scalars, as Python floats (FP32
    values), or None if a scalar is not a number. Each is the scalar form's rounded product
    (both factors FP32, so the product is exact in double and rounded once either way); an
    infinite or NaN one, or one of an infinite or NaN factor, is outside FP32's finite range
    and sends its instruction to the reference, as the scalar form does."""
    quiet = _quiet_on()
    try:
        return np.multiply(f32[xws], np.array(cs, F32)).tolist()  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError):
        return None
    finally:
        _quiet_off(quiet)


def _run_length(op: str, dst: Any, srcs: tuple) -> int:
    """The number of instructions of a run (:meth:`TensorUnit.execute_run`), its operands'
    forms checked (a wrong one is an :class:`OperandError` naming it)."""
    spec_of(op)
    if not (type(dst) is tuple and len(dst) == 2 and isinstance(dst[0], MemDsd)):
        raise OperandError(f"{op} run: dst must be (memory DSD, offsets), got {type(dst).__name__}")
    n = len(dst[1])
    for i, s in enumerate(srcs):
        if type(s) is tuple:
            if not (len(s) == 2 and isinstance(s[0], MemDsd)):
                raise OperandError(
                    f"{op} run: src{i} must be (memory DSD, offsets), a list of scalars or a "
                    "scalar; got a tuple of something else"
                )
            got = len(s[1])
        elif type(s) is list:
            got = len(s)
        elif isinstance(s, MemDsd | FabInDsd | FabOutDsd):
            raise OperandError(
                f"{op} run: src{i} is a DSD; give (DSD, offsets) for a memory operand (a run "
                "has no fabric operands)"
            )
        else:
            continue
        if got != n:
            raise OperandError(
                f"{op} run: src{i} has {got} entries but dst has {n} offsets; give one per "
                "instruction"
            )
    return n


def _run_instruction(dst: tuple, srcs: tuple, k: int) -> tuple[MemDsd, tuple]:
    """A run's instruction ``k`` as descriptors and scalars (see ``execute_run``)."""
    d, offsets = dst
    out = []
    for s in srcs:
        if type(s) is tuple:
            out.append(s[0].with_length(1).with_offset(s[1][k]))
        elif type(s) is list:
            out.append(s[k])
        else:
            out.append(s)
    return d.with_length(1).with_offset(offsets[k]), tuple(out)


def _flush(f32: np.ndarray, out: dict[int, float]) -> None:
    """Write a run's pending words (FP32 values as Python floats: exact) into the memory."""
    for w, v in out.items():
        f32[w] = v
    out.clear()


def _remember(memo: dict[tuple, int], key: tuple, cost: int) -> None:
    if len(memo) >= MEMO_ENTRIES:
        memo.clear()
    memo[key] = cost


# --------------------------------------------------------------------------- general path


def _check_dtype(
    op: str, what: str, dtype: str, allowed: tuple[str, ...], dsd: MemDsd | None = None
) -> None:
    if dtype not in allowed:
        who = f"{what} {dsd.label}" if dsd is not None else what  # labels only on error
        raise OperandError(
            f"{op}: {who} has element type {dtype}, the op needs {' or '.join(allowed)}"
        )


def _compute(op: str, spec: OpSpec, dst: MemDsd, values: list) -> np.ndarray:
    if spec.raw_move:
        # Bits are copied: a tensor source is reinterpreted, a scalar converted, as dst's type.
        (src,) = values
        dt = DTYPES[dst.dtype]
        result = _raw_scalar(op, src, dst.dtype) if _is_scalar(src) else np.asarray(src).view(dt)
        return apply(op, result)
    return apply(op, *values)


def _raw_scalar(op: str, value: object, dtype: str) -> np.ndarray:
    """A raw move's scalar source converted to ``dtype``, the destination's type: to a float
    type as IEEE converts (rounding, overflow to infinity); an integer type needs an integer
    value in its range."""
    nd = DTYPES[dtype]
    v = np.asarray(value)
    if nd.kind == "f":
        with np.errstate(all="ignore"):
            return v.astype(nd)
    info = np.iinfo(nd)
    if v.dtype.kind in "iub" or v.dtype == object:
        number: int | None = int(v)
    elif v.dtype.kind == "f" and np.isfinite(v) and float(v).is_integer():
        number = int(v)
    else:
        number = None
    if number is None or not info.min <= number <= info.max:
        raise OperandError(
            f"{op}: the scalar {value!r} does not fit dst's type {dtype}; give an integer in "
            f"{info.min} .. {info.max}"
        )
    return np.asarray(number, nd)


def _overlaps(dst: MemDsd, dst_store: Store, mem_srcs: list[tuple[MemDsd, Store]]) -> bool:
    """Whether element-by-element order matters: ``dst`` writes one address twice (e.g. a
    stride-0 accumulator), or writes an address a source reads at another position."""
    if dst.is_dense:
        lo, hi = dst.span()
        if all(
            s is not dst_store or s_d.span()[1] < lo or s_d.span()[0] > hi for s_d, s in mem_srcs
        ):
            return False  # the common case, decided from the spans alone
    d = dst.addresses()
    if not dst.is_dense and len(np.unique(d)) < d.size:
        return True
    for s_dsd, store in mem_srcs:
        if store is not dst_store:
            continue
        a = s_dsd.addresses()
        if np.intersect1d(a, d).size and not np.array_equal(a, d):
            return True
    return False


def _execute_in_order(
    op: str, spec: OpSpec, dst: MemDsd, dst_store: Store, srcs: tuple, values: list,
    store_of: Callable[[MemDsd, str], Store],
) -> None:  # fmt: skip
    """Run the op element by element, as the datapath streams it: element i reads its sources
    after element i-1 has been written. So ``fmacs(acc, acc, a, b)`` with ``acc`` a stride-0
    descriptor of one word accumulates the dot product a·b into that word, rounding each step."""
    n = dst.length
    d_idx = dst.indices_in(dst_store)
    where = [
        (s.indices_in(store_of(s, "src")), store_of(s, "src")) if isinstance(s, MemDsd) else None
        for s in srcs
    ]
    word, first = d_idx[0], where[0]
    if (
        op in ("fmacs", "fadds")  # all-FP32 operands: element indices compare directly
        and (d_idx == word).all()
        and first is not None
        and first[1] is dst_store
        and (first[0] == word).all()
        and not any(w is not None and w[1] is dst_store and (w[0] == word).any() for w in where[1:])
    ):
        # A running sum into one word: the same steps as the loop below, done by numpy.
        terms = apply(op, np.zeros(n, F32), *values[1:])  # the products (or addends), rounded
        view = dst_store.data.view(F32)
        view[word] = np.add.accumulate(np.concatenate((view[d_idx[:1]], terms)), dtype=F32)[-1]
        return
    dview = dst_store.data.view(DTYPES[dst.dtype])
    for i in range(n):
        vals = []
        for s, v, w in zip(srcs, values, where, strict=True):
            if w is not None:  # read now: an earlier element may have written it
                vals.append(w[1].data.view(DTYPES[s.dtype])[w[0][i : i + 1]])
            else:
                vals.append(v if _is_scalar(v) else v[i : i + 1])
        dview[d_idx[i]] = np.asarray(_compute(op, spec, dst, vals)).reshape(-1)[0]


# --------------------------------------------------------------------------- fast path

# The common case of a kernel's inner loop: an FP32 element-wise op whose tensors are all dense
# in SRAM and whose scalars are Python floats. It computes exactly what the general path does
# (the same numpy function on the same float32 values, sources read before the destination is
# written), on SRAM views and without the general path's checks and conversions, which cannot
# fail here. Integer scalars take the general path: ``numpy.float32`` of a Python int rounds
# through float64 (twice, for integers beyond 2^53) where the general path rounds once.


# The fast path's FP error state, ``np.errstate(all="ignore")`` in effect: numpy 2 keeps it in a
# context variable, set and reset here around an instruction without the errstate object and its
# three Python frames (five instructions per PE of a gemv product); older numpy through seterr.
# (numpy's private names, listed with the reason in tests/test_layers.py FOREIGN)
try:
    import numpy._core._multiarray_umath as _np_umath
    import numpy._core._ufunc_config as _np_ufunc_config

    _quiet_on: Callable[[], Any] = functools.partial(
        _np_ufunc_config._extobj_contextvar.set, _np_umath._make_extobj(all="ignore")
    )
    _quiet_off: Callable[[Any], Any] = _np_ufunc_config._extobj_contextvar.reset
except (ImportError, AttributeError):  # numpy < 2, or numpy's internals moved

    def _quiet_on() -> Any:
        return np.seterr(all="ignore")

    def _quiet_off(old: Any) -> Any:
        return np.seterr(**old)


def _fma_into(out: np.ndarray, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    # _fma on FP32 values: the product is already FP32, so its cast is the identity.
    np.add(acc, np.multiply(a, b), out=out)


@dataclasses.dataclass(frozen=True, slots=True)
class _FastOp:
    """An op of the fast path: ``compute(out, *sources)`` writes its spec's function of FP32
    values into the destination view (ufuncs with ``out`` handle a source identical to it)."""

    compute: Callable[..., None]
    n_srcs: int
    scalar_srcs: tuple[int, ...]


def _into(ufunc: np.ufunc) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    def compute(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        ufunc(a, b, out=out)

    return compute


def _move_into(out: np.ndarray, a: np.ndarray) -> None:
    # _copy of an FP32 tensor or of an FP32 scalar, broadcast into the destination view
    np.copyto(out, a)


_FAST: dict[str, _FastOp] = {
    name: _FastOp(compute, OPS[name].n_srcs, OPS[name].scalar_srcs)
    for name, compute in (
        ("fmovs", _move_into),
        ("fmacs", _fma_into),
        ("fadds", _into(np.add)),
        ("fsubs", _into(np.subtract)),
        ("fmuls", _into(np.multiply)),
        ("fmaxs", _into(np.maximum)),
    )
}

#: The ops the fast path can run (others always take the general path).
FAST_OPS = frozenset(_FAST)

# Where a descriptor keeps its FastOperand: an entry of its own instance dict, as
# ``functools.cached_property`` keeps the descriptor's ``length`` and ``is_dense``.
_FAST_OPERAND = "_fast_operand"


class FastOperand:
    """What the fast path keeps about one dense FP32 descriptor in one SRAM, for one unit.

    ``view`` is the writable FP32 view of the descriptor's elements in ``data`` (the memory's
    bytes), which are elements ``start`` to ``stop`` of the memory; ``timing_class`` is the
    unit's number for the descriptor's timing key.

    Ownership: the descriptor holds it, in its instance dict under ``_FAST_OPERAND`` (one at a
    time); descriptors are immutable values, so what is derived from one stays true. It is valid
    only while ``data`` is the bytes of the memory the instruction runs on and ``unit`` is the
    unit running it (hence the same configuration and class numbers); otherwise the unit builds
    a new one in its place, or, for an SRAM operand of the same unit met in another SRAM (a
    descriptor shared by the PEs of one role), moves this one to that memory (``data``,
    ``view`` and ``f32``, the memory's FP32 view, remade; its elements and class follow from
    the descriptor and the unit). A descriptor shared by two PEs' memories, or run under two
    configurations, is therefore re-derived at each change, never trusted.
    """

    __slots__ = ("data", "f32", "length", "start", "stop", "timing_class", "unit", "view")

    def __init__(
        self, data: np.ndarray, unit: TensorUnit, view: np.ndarray, start: int, stop: int,
        timing_class: int,
    ) -> None:  # fmt: skip
        self.data = data
        self.unit = unit
        self.view = view
        self.start = start
        self.stop = stop
        self.length = stop - start
        self.timing_class = timing_class
        self.f32: np.ndarray | None = None  # ``data``'s FP32 view, for an SRAM operand


# --------------------------------------------------------------------------- one element
# An async operation with a fabric input computes one element per wavelet (pe/task.py): the
# same function as ``apply`` on one-element arrays, which costs a dozen numpy calls per
# element. The FP32 arithmetic ops have an exact scalar form: their sources are FP32 values,
# held exactly by Python floats (doubles), and a sum, difference or product of two FP32 values
# computed in double and rounded once to FP32 is the correctly rounded FP32 result (double has
# at least 2 x 24 + 2 bits, so the double rounding is innocuous; a product of two FP32 values
# is even exact in double). Only finite values inside FP32's range take it: an input or
# result outside (overflow, infinities, NaNs, whose bits the scalar path does not vouch for)
# and any source that is not a Python or FP32 float go through ``apply``, so every element is
# the general path's, bit for bit (tests/test_contract_function_timing.py checks this).

_F32_MAX = float(np.finfo(np.float32).max)
# A finite double inside FP32's range rounded to FP32 and back, as ``float(F32(v))`` but in
# half the time: ``struct``'s 'f' packing is the same C cast (round to nearest even, the
# subnormals included), and the scalar forms below only take values inside the range.
_PACK32 = struct.Struct("f")
_pack32, _unpack32 = _PACK32.pack, _PACK32.unpack


def _scalar_general(op: str) -> Callable[..., np.float32]:
    """One element of ``op`` through ``apply`` (made once per op and shared)."""
    general = _GENERAL.get(op)
    if general is None:

        def general(*args: object) -> np.float32:
            return apply(op, *(np.asarray([a]) for a in args))[0]  # type: ignore[arg-type]

        _GENERAL[op] = general
    return general


_GENERAL: dict[str, Callable[..., np.float32]] = {}


def _fadds_1(a: object, b: object, _g: Callable[..., np.float32]) -> np.float32:
    m = _F32_MAX
    if a.__class__ in _FLOATS and b.__class__ in _FLOATS and -m <= a <= m and -m <= b <= m:  # type: ignore[operator]
        x = _unpack32(_pack32(a))[0] + _unpack32(_pack32(b))[0]  # type: ignore[arg-type]
        if -m <= x <= m:
            return F32(x)
    return _g(a, b)


def _fsubs_1(a: object, b: object, _g: Callable[..., np.float32]) -> np.float32:
    m = _F32_MAX
    if a.__class__ in _FLOATS and b.__class__ in _FLOATS and -m <= a <= m and -m <= b <= m:  # type: ignore[operator]
        x = _unpack32(_pack32(a))[0] - _unpack32(_pack32(b))[0]  # type: ignore[arg-type]
        if -m <= x <= m:
            return F32(x)
    return _g(a, b)


def _fmuls_1(a: object, b: object, _g: Callable[..., np.float32]) -> np.float32:
    m = _F32_MAX
    if a.__class__ in _FLOATS and b.__class__ in _FLOATS and -m <= a <= m and -m <= b <= m:  # type: ignore[operator]
        x = _unpack32(_pack32(a))[0] * _unpack32(_pack32(b))[0]  # type: ignore[arg-type]
        if -m <= x <= m:
            return F32(x)
    return _g(a, b)


def _fmacs_1(acc: object, a: object, b: object, _g: Callable[..., np.float32]) -> np.float32:
    m = _F32_MAX
    if (
        acc.__class__ in _FLOATS and a.__class__ in _FLOATS and b.__class__ in _FLOATS
        and -m <= acc <= m and -m <= a <= m and -m <= b <= m  # type: ignore[operator]
    ):  # fmt: skip
        p = _unpack32(_pack32(a))[0] * _unpack32(_pack32(b))[0]  # type: ignore[arg-type]
        if -m <= p <= m:
            x = _unpack32(_pack32(acc))[0] + _unpack32(_pack32(p))[0]  # type: ignore[arg-type]
            if -m <= x <= m:
                return F32(x)
    return _g(acc, a, b)


_FLOATS = (float, np.float32)
_SCALAR_FAST: dict[str, Callable[..., np.float32]] = {
    "fadds": _fadds_1,
    "fsubs": _fsubs_1,
    "fmuls": _fmuls_1,
    "fmacs": _fmacs_1,
}


def stream_element(
    op: str, mem: Any, fabric_first: bool, *, as_float: bool = False
) -> Callable[[Any, int], Any] | None:
    """``elem(v, k)``: ``elementwise(op)(v, mem[k])`` (``(mem[k], v)`` unless
    ``fabric_first``) for an async operation with a fabric input ``v`` and an FP32 memory
    source ``mem``, in one call per element where ``elementwise`` takes three (the operation's
    closure, ``elementwise``'s and the scalar form's): the scalar form's arithmetic inline, on
    the memory's element as a Python float (an FP32 value, exact), and the scalar form itself for
    any element it does not cover, so every element is ``elementwise``'s. None for other ops
    and sources (``fadds``, ``fsubs`` and ``fmuls`` only). ``as_float``: the element as the
    Python float ``float(elementwise(...))`` instead (an operation sending its elements to the
    fabric puts that float in the wavelet: one FP32 scalar fewer made and read per element)."""
    if op not in ("fadds", "fsubs", "fmuls") or not isinstance(mem, np.ndarray):
        return None
    if mem.dtype != F32 or mem.ndim != 1:
        return None
    fast = _SCALAR_FAST[op]
    general = _scalar_general(op)
    item = mem.item  # (element k as a Python float; no list of them: a reduction's source
    # may be long, and a list of floats takes ten times the array's bytes at 4,096 PEs at once)
    m = _F32_MAX
    floats = _FLOATS

    def other(v: Any, k: int) -> Any:
        r = fast(v, mem[k], general) if fabric_first else fast(mem[k], v, general)
        return float(r) if as_float else r

    pack, unpack = _pack32, _unpack32

    if op == "fadds":

        def elem(v: Any, k: int) -> Any:
            b = item(k)
            if v.__class__ in floats and -m <= v <= m and -m <= b <= m:
                x = unpack(pack(v))[0] + b
                if -m <= x <= m:
                    return unpack(pack(x))[0] if as_float else F32(x)
            return other(v, k)

    elif op == "fmuls":

        def elem(v: Any, k: int) -> Any:
            b = item(k)
            if v.__class__ in floats and -m <= v <= m and -m <= b <= m:
                x = unpack(pack(v))[0] * b
                if -m <= x <= m:
                    return unpack(pack(x))[0] if as_float else F32(x)
            return other(v, k)

    else:
        sign = 1.0 if fabric_first else -1.0  # v - b, or b - v = -(v - b) (exact, either way)

        def elem(v: Any, k: int) -> Any:
            b = item(k)
            if v.__class__ in floats and -m <= v <= m and -m <= b <= m:
                x = unpack(pack(v))[0] - b if sign > 0 else b - unpack(pack(v))[0]
                if -m <= x <= m:
                    return unpack(pack(x))[0] if as_float else F32(x)
            return other(v, k)

    return elem


def _not_scalar(*_args: object) -> None:
    """The general form a one-element instruction of the fast path falls back to: none
    (None: the fast path's ufuncs compute it)."""
    return None


#: One-element instructions of the fast path (``TensorUnit._execute_dense_f32``): the scalar
#: forms above, given the elements' values (Python floats holding FP32 values, and the
#: instruction's scalar as given, which they round to FP32 as the ufunc path does).
_ONE_ELEMENT: dict[str, Callable[..., np.float32 | None]] = dict(_SCALAR_FAST)


def elementwise(op: str, *, fast_path: bool = True) -> Callable[..., np.float32]:
    """``f(*sources)``: one element of ``op`` (scalar sources in ``apply``'s order), the same
    value as ``apply(op, *one-element arrays)[0]``; FP32 arithmetic takes the exact scalar form
    above where it holds (``fast_path=False``: always ``apply``, for the contract test).
    Made once per (op, fast_path) and shared: a pure function of the two (every async operation
    with a fabric input asks for one when it launches)."""
    key = (op, fast_path)
    f = _ELEMENTWISE.get(key)
    if f is not None:
        return f
    spec_of(op)
    general = _scalar_general(op)
    fast = _SCALAR_FAST.get(op) if fast_path else None
    if fast is None:
        f = general
    elif fast is _fmacs_1:
        f = lambda acc, a, b: _fmacs_1(acc, a, b, general)  # noqa: E731
    else:
        f = lambda a, b: fast(a, b, general)  # noqa: E731
    _ELEMENTWISE[key] = f
    return f


_ELEMENTWISE: dict[tuple[str, bool], Callable[..., np.float32]] = {}
