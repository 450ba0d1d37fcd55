"""Tensor instructions of the compute engine: what they compute and how long they take, apart.

Three separately testable pieces:

- **function** (:func:`apply`): numpy on operand *values*, with the hardware's number formats.
  Each arithmetic step rounds to its type: FP16 ops compute and round in float16, FP32 ops in
  float32; multiply-adds round the product, then the sum (not fused: the vendor does not document
  fused rounding). ``fmachs`` multiplies FP16 inputs (exact in FP32) and accumulates in FP32.
  Integer adds wrap. IEEE specials propagate silently (no numpy warnings).
- **timing** (:func:`cost_cycles`): cycles the instruction occupies the datapath, from mechanisms
  only. See :func:`cost_cycles` for the model; docs/pe-isa.md shows which parameters carry the
  measured T_fmac(I) = 2 I + 10.
- **both** (:func:`execute`): gather the memory operands, apply, scatter into the destination,
  return the cost. Dtypes and lengths are checked first, with messages naming the op and operand.

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
from collections.abc import Callable

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
    with np.errstate(all="ignore"):
        out = np.asarray(spec.fn(*vals))
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
    values never matter. Memory operands must have ``length`` elements.
    """
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
    key = (op, length, id(cfg), _timing_key(dst, cfg), *(_timing_key(s, cfg) for s in srcs))
    cost = _COSTS.get(key)
    if cost is None:
        beats = beat_cycles(op, length, cfg, dst=dst, srcs=tuple(srcs))
        cost = cfg.dsd_setup_cycles + cfg.pipeline_stages + int(beats.sum())
        if len(_COSTS) > 200_000:
            _COSTS.clear()
        _COSTS[key] = cost
        _CONFIGS[id(cfg)] = cfg  # keeps ``id(cfg)`` from being reused while cached
    return cost


# The cost depends on the operands only through their type, shape, strides, memory space and
# where they start within one period of the bank pattern, so it is computed once per such key.
_COSTS: dict[tuple, int] = {}
_CONFIGS: dict[int, PeConfig] = {}


def _timing_key(x: object, cfg: PeConfig) -> tuple | None:
    if not isinstance(x, MemDsd):
        return None
    period = cfg.bank_interleave_bytes * cfg.sram_banks
    start = (x.base + x.offset * x.itemsize) % period
    return (x.dtype, x.shape, x.strides, x.space, start)


# --------------------------------------------------------------------------- both


def _check_dtype(
    op: str, what: str, dtype: str, allowed: tuple[str, ...], dsd: MemDsd | None = None
) -> None:
    if dtype not in allowed:
        who = f"{what} {dsd.label}" if dsd is not None else what  # labels only on error
        raise OperandError(
            f"{op}: {who} has element type {dtype}, the op needs {' or '.join(allowed)}"
        )


def execute(
    op: str,
    sram: Store,
    dst: MemDsd,
    srcs: tuple[MemDsd | np.ndarray | float, ...],
    cfg: PeConfig,
    *,
    cache: Store | None = None,
) -> int:
    """Run ``op``: read the sources, compute, write ``dst``; returns the cost in cycles.

    Sources are memory descriptors, scalars, or 1-D arrays of values already taken from the
    fabric. Descriptors with ``space='cache'`` live in ``cache``. All sources are read before
    ``dst`` is written.
    """
    spec = spec_of(op)
    if op in FAST_OPS:
        cost = _execute_dense_f32(op, spec, sram, dst, srcs, cfg)
        if cost is not None:
            return cost
    if not isinstance(dst, MemDsd):
        raise OperandError(f"{op}: dst must be a memory DSD, got {type(dst).__name__}")
    if len(srcs) != spec.n_srcs:
        raise OperandError(f"{op}: takes {spec.n_srcs} source operands, got {len(srcs)}")

    def store_of(d: MemDsd, what: str) -> Store:
        if d.space == "cache":
            if cache is None:
                raise OperandError(f"{op}: {what} {d.label} is in the cache but no cache was given")
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
        types = {dst.dtype} | {short_name(np.asarray(v).dtype) for v in values if not _is_scalar(v)}
        if len(types) > 1:
            raise OperandError(
                f"{op}: operands have element types {', '.join(sorted(types))}; they must match"
            )
    cost = cost_cycles(op, dst.length, cfg, dst=dst, srcs=tuple(timing))
    dst_store = store_of(dst, "dst")
    mem_srcs = [(s, store_of(s, "src")) for s in srcs if isinstance(s, MemDsd)]
    if _overlaps(dst, dst_store, mem_srcs):
        _execute_in_order(op, spec, dst, dst_store, srcs, values, store_of)
        return cost
    dst.write(dst_store, np.broadcast_to(_compute(op, spec, dst, values), (dst.length,)))
    return cost


def _compute(op: str, spec: OpSpec, dst: MemDsd, values: list) -> np.ndarray:
    if spec.raw_move:
        # Bits are copied: a tensor source is reinterpreted, a scalar converted, as dst's type.
        (src,) = values
        dt = DTYPES[dst.dtype]
        result = np.asarray(src, dtype=dt) if _is_scalar(src) else np.asarray(src).view(dt)
        return apply(op, result)
    return apply(op, *values)


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
    d_idx = dst._indices_in(dst_store)
    where = [
        (s._indices_in(store_of(s, "src")), store_of(s, "src")) if isinstance(s, MemDsd) else None
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


# The common case of a kernel's inner loop: an FP32 element-wise op whose tensors are all dense
# in SRAM and whose scalars are plain numbers. It computes exactly what the general path does
# (same numpy function on float32 values, sources read before the destination is written), on
# SRAM views and without the general path's checks and conversions, which cannot fail here.
FAST_OPS = frozenset({"fmacs", "fadds", "fsubs", "fmuls", "fmaxs"})


def _execute_dense_f32(
    op: str, spec: OpSpec, sram: Store, dst: object, srcs: tuple, cfg: PeConfig
) -> int | None:
    if type(dst) is not MemDsd or len(srcs) != spec.n_srcs:
        return None
    data = sram.data
    d = dst.__dict__.get(_ENTRY)
    if d is None or d[0] is not data or d[1] is not cfg:
        d = _dense_entry(dst, sram, data, cfg)
        if d is None:
            return None
    start, stop, n = d[3], d[4], d[5]
    vals: list = []
    key: list = [op, d[6]]
    for i, s in enumerate(srcs):
        if type(s) is MemDsd:
            e = s.__dict__.get(_ENTRY)
            if e is None or e[0] is not data or e[1] is not cfg:
                e = _dense_entry(s, sram, data, cfg)
                if e is None:
                    return None
            if e[5] != n or (e[3] != start and e[3] < stop and start < e[4]):
                return None  # other lengths, or overlapping dst at a shift: the general path
            vals.append(e[2])
            key.append(e[6])
        elif type(s) in (float, int) and i in spec.scalar_srcs:
            vals.append(F32(s))
            key.append(-1)
        else:
            return None
    with np.errstate(all="ignore"):
        _IN_PLACE[op](d[2], *vals)
    k = tuple(key)
    cost = d[7].get(k)
    if cost is None:
        timing = tuple(s if type(s) is MemDsd else None for s in srcs)
        cost = d[7][k] = cost_cycles(op, n, cfg, dst=dst, srcs=timing)
    return cost


def _fma_into(out: np.ndarray, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    # _fma on FP32 values: the product is already FP32, so its cast is the identity.
    np.add(acc, np.multiply(a, b), out=out)


# Each fast op computes its spec's function on FP32 values straight into the destination view.
# Sources are read before any element is written: the path is only taken when no source
# overlaps the destination at a shift, and ufuncs with ``out`` handle identical operands.
_IN_PLACE: dict[str, Callable[..., None]] = {
    "fmacs": _fma_into,
    "fadds": lambda out, *v: np.add(*v, out=out),
    "fsubs": lambda out, *v: np.subtract(*v, out=out),
    "fmuls": lambda out, *v: np.multiply(*v, out=out),
    "fmaxs": lambda out, *v: np.maximum(*v, out=out),
}


# What the fast path derives from a descriptor, kept on the descriptor (they are immutable
# values, so this is what ``functools.cached_property`` does, for one store and config at a time):
# (store bytes, config, writable FP32 view, first and end element, length, timing class, costs).
# The timing class numbers the descriptor's ``_timing_key``; ``costs`` memoises, per (op, the
# operands' classes), the cost of a fast-path instruction with this destination, which is what
# ``cost_cycles`` depends on (the config is fixed per entry).
_ENTRY = "_isa_dense_f32"
_TIMING_CLASSES: dict[tuple, int] = {}


def _dense_entry(d: MemDsd, sram: Store, data: np.ndarray, cfg: PeConfig) -> tuple | None:
    """The fast path's view of a dense FP32 SRAM descriptor in ``sram``, or None for others."""
    e = d.__dict__.get(_ENTRY)
    if e is not None and e[0] is data and e[1] is cfg:
        return e
    if d.dtype != "f32" or d.space != "sram" or not d.is_dense:
        return None
    lo, hi = d.span()
    if lo < 0 or hi >= sram.nbytes:
        return None  # out of bounds: the general path reports it
    where = d._dense_slice(sram)
    tkey = _timing_key(d, cfg)
    cls = _TIMING_CLASSES.setdefault(tkey, len(_TIMING_CLASSES))
    view = data.view(F32)[where]
    e = (data, cfg, view, where.start, where.stop, d.length, cls, {})
    d.__dict__[_ENTRY] = e
    return e
