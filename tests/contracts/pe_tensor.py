"""The PE's tensor instructions (:mod:`pe.isa`) as a subject of the function/timing contract.

A case is one instruction: an op of ``pe.isa.OPS``, a shape, a configuration, and per operand
(destination first) its kind and type. Tensor operands sit in SRAM or in the cache, each in its
own buffer after a gap of a few words (which moves its start bank), laid out dense, row-major,
padded, reversed, strided or (sources only) as a stride-0 broadcast. Sources may also be the
very descriptor of an earlier operand (``fmacs(c, c, a, s)``), scalars (Python or numpy
numbers) or arrays of values taken from the fabric. No operand overlaps another at a shift:
those follow element order, which tests/test_pe_isa.py checks against a sequential reference.
Half the cases have the fast path's shape: an op of ``FAST_OPS`` on dense FP32 SRAM tensors and
Python scalars (a float keeps the fast path, an int leaves it).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import strategies as st

from pe import isa
from pe.config import PeConfig
from pe.dsd import DTYPES, MemDsd
from pe.memory import Cache, Sram
from tests.contracts.function_timing import Run

#: Configurations cases run under: the default, slow FMACs with costly conflicts, and a wider
#: bank interleave with narrower FP16 units and a deeper pipeline.
CONFIGS = (
    PeConfig(),
    PeConfig(fp32_fmac_cycles_per_element=1, bank_conflict_penalty_cycles=3, dsd_setup_cycles=7),
    PeConfig(
        bank_interleave_bytes=4, fmach_simd_width=2, faddh_simd_width=2, mov16_simd_width=2,
        pipeline_stages=9,
    ),
)  # fmt: skip

DST_LAYOUTS = ("dense", "rowmajor", "padded", "reversed", "strided")
SRC_LAYOUTS = (*DST_LAYOUTS, "broadcast")


@dataclasses.dataclass(frozen=True)
class Operand:
    """One operand of a case.

    ``kind`` is 'tensor' (a descriptor laid out as ``layout`` in ``space``, ``gap_words`` free
    words before its buffer), 'alias' (the descriptor of operand ``alias_of``, 0 being the
    destination), 'scalar' (``number`` says which: a Python 'float' or 'int', or a 'numpy'
    scalar of the operand's type) or 'stream' (an array of values from the fabric).
    """

    kind: str
    dtype: str
    layout: str = "dense"
    space: str = "sram"
    gap_words: int = 0
    alias_of: int = -1
    number: str = ""


@dataclasses.dataclass(frozen=True)
class TensorCase:
    """One instruction: ``operands`` are the destination then the sources."""

    op: str
    shape: tuple[int, ...]
    config: int
    operands: tuple[Operand, ...]

    @property
    def length(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        """The case in words, for failure messages."""

        def name(i: int) -> str:
            return "dst" if i == 0 else f"src{i - 1}"

        parts = []
        for i, o in enumerate(self.operands):
            if o.kind == "tensor":
                gap = f" after {o.gap_words} free words" if o.gap_words else ""
                what = f"{o.dtype} {o.layout} in {o.space}{gap}"
            elif o.kind == "alias":
                what = f"the DSD of {name(o.alias_of)}"
            elif o.kind == "scalar":
                kind = "a numpy scalar" if o.number == "numpy" else f"a Python {o.number}"
                what = f"{kind} ({o.dtype})"
            else:
                what = f"{o.dtype} values from the fabric"
            parts.append(f"{name(i)} {what}")
        return f"{self.op} of shape {self.shape} under CONFIGS[{self.config}]: {', '.join(parts)}"


def _buffer_elements(layout: str, shape: tuple[int, ...]) -> int:
    n = math.prod(shape)
    if layout == "padded":
        return n // shape[0] * (shape[0] + 2)
    return {"strided": 2 * n, "broadcast": 1}.get(layout, n)


def _descriptor(o: Operand, shape: tuple[int, ...], base: int) -> MemDsd:
    """The descriptor of a tensor operand whose buffer starts at ``base``."""
    if o.layout == "broadcast":
        return MemDsd(base, o.dtype, shape, (0,) * len(shape), space=o.space)
    dims = (shape[0] + 2, *shape[1:]) if o.layout == "padded" else shape
    order = reversed(range(len(dims))) if o.layout == "rowmajor" else range(len(dims))
    strides, step = [0] * len(dims), 1
    for k in order:
        strides[k] = step
        step *= dims[k]
    offset = 0
    if o.layout == "padded":
        offset = 1
    elif o.layout == "reversed":
        strides[0], offset = -strides[0], shape[0] - 1
    elif o.layout == "strided":
        strides = [2 * s for s in strides]
    return MemDsd(base, o.dtype, shape, tuple(strides), offset, space=o.space)


def _footprint(o: Operand, shape: tuple[int, ...]) -> int:
    """Bytes the operand's gap and buffer take (buffers are 4-byte aligned)."""
    return (
        4 * o.gap_words + -(-_buffer_elements(o.layout, shape) * DTYPES[o.dtype].itemsize // 4) * 4
    )


@st.composite
def _cases(draw: st.DrawFn) -> TensorCase:
    fast_shaped = draw(st.booleans())
    op = draw(st.sampled_from(sorted(isa.FAST_OPS if fast_shaped else isa.OPS)))
    spec = isa.OPS[op]
    one_dim = st.integers(1, 48).map(lambda n: (n,))
    many_dims = st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple)
    shape = draw(one_dim if fast_shaped else st.one_of(one_dim, many_dims))
    config = draw(st.integers(0, len(CONFIGS) - 1))
    dst_dtype = draw(st.sampled_from(spec.dst_dtypes))
    cache_left = CONFIGS[config].cache_bytes

    def tensor(dtype: str, layouts: tuple[str, ...]) -> Operand:
        nonlocal cache_left
        layout = "dense" if fast_shaped else draw(st.sampled_from(layouts))
        o = Operand("tensor", dtype, layout, gap_words=draw(st.integers(0, 3)))
        if not fast_shaped and _footprint(o, shape) <= cache_left and draw(st.booleans()):
            cache_left -= _footprint(o, shape)
            o = dataclasses.replace(o, space="cache")
        return o

    operands = [tensor(dst_dtype, DST_LAYOUTS)]
    for i, allowed in enumerate(spec.src_dtypes):
        dtype = dst_dtype if spec.same_dtype else draw(st.sampled_from(allowed))
        kinds = ["tensor"]
        if i in spec.scalar_srcs:
            kinds.append("scalar")
        if not fast_shaped:
            kinds.append("stream")
        aliases = [j for j, o in enumerate(operands) if o.dtype == dtype and o.kind != "scalar"]
        aliases = [j for j in aliases if operands[j].kind != "stream"]
        if aliases:
            kinds.append("alias")
        kind = draw(st.sampled_from(kinds))
        if kind == "tensor":
            operands.append(tensor(dtype, SRC_LAYOUTS))
        elif kind == "alias":
            operands.append(Operand("alias", dtype, alias_of=draw(st.sampled_from(aliases))))
        elif kind == "scalar":
            # A raw move converts its scalar to the destination's type (tests/test_pe_isa.py
            # checks the error for one that does not fit), so it is drawn as one.
            dtype = dst_dtype if spec.raw_move else dtype
            numbers = ["int"] if DTYPES[dtype].kind != "f" else ["float", "int"]
            if not fast_shaped:
                numbers.append("numpy")
            number = draw(st.sampled_from(numbers))
            operands.append(Operand("scalar", dtype, number=number))
        else:
            operands.append(Operand("stream", dtype))
    return TensorCase(op, shape, config, tuple(operands))


def _special_pool(dtype: str) -> np.ndarray:
    nd = DTYPES[dtype]
    if nd.kind == "f":
        bits = {"f32": [0x7FC00000, 0xFFC00000, 0x7FA00001, 0x7F800000, 0xFF800000],
                "f16": [0x7E00, 0xFE00, 0x7D01, 0x7C00, 0xFC00]}[dtype]  # fmt: skip
        info = np.finfo(nd)
        extremes = [
            0.0,
            -0.0,
            info.smallest_subnormal,
            -info.smallest_subnormal,
            info.max,
            info.tiny,
        ]
        return np.concatenate((np.array(bits, f"u{nd.itemsize}").view(nd), np.array(extremes, nd)))
    info = np.iinfo(nd)
    return np.array(sorted({info.min, info.max, 0, 1, max(info.min, -1)}), nd)


def _random(rng: np.random.Generator, dtype: str, size: int, specials: bool) -> np.ndarray:
    nd = DTYPES[dtype]
    if nd.kind == "f":
        with np.errstate(over="ignore"):
            x = (rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4, size)).astype(nd)
    else:
        info = np.iinfo(nd)
        x = rng.integers(info.min, info.max, size, endpoint=True, dtype=nd)
    if specials:
        pick = rng.random(size) < 0.4
        pick[rng.integers(size)] = True
        x[pick] = rng.choice(_special_pool(dtype), int(pick.sum()))
    return x


def _tie_integer(rng: np.random.Generator) -> int:
    """An integer just above halfway between two FP32 values, so close that FP64 loses the
    difference: rounded once it goes up, rounded through FP64 it ties (to even, often down)."""
    k = int(rng.integers(31, 39))
    m = int(rng.integers(2**23, 2**24))
    value = m * 2**k + 2 ** (k - 1) + int(rng.integers(1, 2 ** (k - 30)))
    return value if rng.random() < 0.5 else -value


def _scalar(rng: np.random.Generator, o: Operand, specials: bool) -> object:
    """A scalar of the operand's type or, for Python numbers, one the instruction converts:
    doubles that round, overflow or underflow in FP32 or FP16, and integers that round."""
    value = _random(rng, o.dtype, 1, specials)[0]
    if o.number == "numpy":
        return value
    if DTYPES[o.dtype].kind != "f":
        return int(value)
    if o.number == "int":
        return int(rng.integers(-1000, 1000)) if rng.random() < 0.5 else _tie_integer(rng)
    if not specials and rng.random() < 0.5:
        return float(rng.standard_normal() * 10.0 ** rng.integers(-50, 51))
    return float(value)


class PeTensorSubject:
    """``pe.isa``: function :func:`pe.isa.apply`, timing :func:`pe.isa.cost_cycles`, execution
    :meth:`pe.isa.TensorUnit.execute` (one unit per configuration and fast-path switch, kept
    across cases so that its caches are exercised)."""

    name = "pe-tensor"

    def __init__(self) -> None:
        self._units: dict[tuple[int, bool], isa.TensorUnit] = {}

    def cases(self) -> st.SearchStrategy[TensorCase]:
        return _cases()

    def values(self, case: TensorCase, rng: np.random.Generator, *, specials: bool) -> tuple:
        """Per operand: a tensor's whole buffer, a scalar, a stream's values (None: alias)."""
        out: list[object] = []
        for o in case.operands:
            if o.kind == "tensor":
                out.append(_random(rng, o.dtype, _buffer_elements(o.layout, case.shape), specials))
            elif o.kind == "stream":
                out.append(_random(rng, o.dtype, case.length, specials))
            elif o.kind == "scalar":
                out.append(_scalar(rng, o, specials))
            else:
                out.append(None)
        return tuple(out)

    def function(self, case: TensorCase, values: tuple) -> np.ndarray:
        """``apply`` on the values each source reads; a raw move takes its source as the
        destination's type (a tensor's bits reinterpreted, a scalar converted)."""
        read: list[object] = []
        for o, v in zip(case.operands, values, strict=True):
            if o.kind == "alias":
                read.append(read[o.alias_of])
            elif o.kind == "tensor":
                read.append(np.asarray(v)[_descriptor(o, case.shape, 0).element_indices()])
            else:
                read.append(v)
        srcs = read[1:]
        spec = isa.OPS[case.op]
        if spec.raw_move:
            dt = DTYPES[case.operands[0].dtype]
            (src,) = srcs
            with np.errstate(over="ignore"):  # a float scalar too large for FP16 is infinite
                # (from int64, an integer scalar is rounded once)
                srcs = [np.asarray(src).view(dt) if np.ndim(src) else np.asarray(src).astype(dt)]
        return np.broadcast_to(isa.apply(case.op, *srcs), (case.length,))

    def _place(self, case: TensorCase) -> tuple[Sram, Cache, list[object]]:
        """Fresh memories with each tensor's buffer allocated, and each operand's descriptor
        (None for scalars and streams)."""
        cfg = CONFIGS[case.config]
        sram, cache = Sram(cfg, owner="contract"), Cache(cfg, owner="contract")
        descs: list[object] = []
        for i, o in enumerate(case.operands):
            if o.kind == "alias":
                descs.append(descs[o.alias_of])
            elif o.kind == "tensor":
                store = cache if o.space == "cache" else sram
                if o.gap_words:
                    store.alloc(f"gap{i}", 4 * o.gap_words)
                n = _buffer_elements(o.layout, case.shape)
                buf = store.alloc_array(f"op{i}", o.dtype, n)
                descs.append(_descriptor(o, case.shape, buf.base))
            else:
                descs.append(None)
        return sram, cache, descs

    def cost(self, case: TensorCase) -> int:
        _, _, descs = self._place(case)
        return isa.cost_cycles(
            case.op, case.length, CONFIGS[case.config], dst=descs[0], srcs=tuple(descs[1:])
        )

    def execute(self, case: TensorCase, values: tuple, *, fast_path: bool) -> Run:
        unit = self._units.get((case.config, fast_path))
        if unit is None:
            unit = self._units[(case.config, fast_path)] = isa.TensorUnit(
                CONFIGS[case.config], fast_path=fast_path
            )
        sram, cache, descs = self._place(case)
        operands = []
        for o, d, v in zip(case.operands, descs, values, strict=True):
            if o.kind == "tensor":
                store = cache if o.space == "cache" else sram
                MemDsd.vector(d.base, o.dtype, len(v), space=o.space).write(store, v)
            operands.append(d if d is not None else v)
        before = unit.fast_instructions
        cycles = unit.execute(case.op, sram, operands[0], tuple(operands[1:]), cache=cache)
        dst = descs[0]
        result = dst.read(cache if dst.space == "cache" else sram)
        memory = sram.data.tobytes() + cache.data.tobytes()
        return Run(result, cycles, memory, unit.fast_instructions > before)

    def fast_path_applies(self, case: TensorCase) -> bool:
        """An op of ``FAST_OPS`` whose tensors are all dense FP32 descriptors in the SRAM or the
        software cache and whose scalars are Python floats (streams, integers and numpy scalars
        take the general path)."""
        if case.op not in isa.FAST_OPS:
            return False
        _, _, descs = self._place(case)
        for o, d in zip(case.operands, descs, strict=True):
            if o.kind == "stream" or (o.kind == "scalar" and o.number != "float"):
                return False
            if d is not None and not (
                d.dtype == "f32" and d.space in ("sram", "cache") and d.is_dense
            ):
                return False
        return True
