"""Data structure descriptors (DSDs): how a tensor instruction names its operands.

A WSE-2 tensor instruction does not take addresses; it takes descriptors held in data structure
registers, and hardware state machines walk them. This module models the descriptors as values:

- :class:`MemDsd`, a 1-D to 4-D tensor in SRAM or in the cache (base, shape, strides, offset);
- :class:`FabInDsd` / :class:`FabOutDsd`, a stream of wavelets on a colour through a fabric queue;
- :class:`FifoDsd`, a circular buffer in SRAM that async operations push to and pop from.

Iteration order: the first dimension varies fastest (like CSL's ``tensor_access`` maps, which list
the innermost index first). A ``MemDsd`` with shape ``(m, n)`` and strides ``(1, m)`` therefore
walks a column-major m x n block column by column, which is what the SDK's GEMM uses.

Addresses are bytes; shapes, strides and offsets are elements. Element ``(i0, i1, ...)`` lives at
``base + (offset + i0*s0 + i1*s1 + ...) * itemsize``. Strides may be zero (a broadcast read) or
negative. ``read`` gathers a copy; ``write`` scatters (when two elements share an address the last
one in iteration order wins). Fabric descriptors only describe and validate streams: the compute
engine moves their data.

Left out: DSD ``wrap``/circular addressing on memory tensors other than :class:`FifoDsd`, and the
DSR register file itself (which DSR holds which descriptor; the engine owns that).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Protocol

import numpy as np

from simcore.errors import BuildError

#: Element types a descriptor can carry, by the short names CSL uses.
DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "i16": np.dtype(np.int16),
    "u16": np.dtype(np.uint16),
    "i32": np.dtype(np.int32),
    "u32": np.dtype(np.uint32),
}

#: WSE-2 limits used when no configuration is at hand (24 colours, 8 in / 6 out queues;
#: docs/wafer/hardware.md).
COLOURS = 24
INPUT_QUEUES = 8
OUTPUT_QUEUES = 6


_SUPPORTED = frozenset(DTYPES.values())

#: Interned descriptor shapes and strides (tuples of ints: immutable, safe to share).
_TUPLES: dict[tuple[int, ...], tuple[int, ...]] = {}


def np_dtype(dtype: str | np.dtype) -> np.dtype:
    """The numpy dtype for a short name ('f32') or anything numpy accepts that we support."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    if isinstance(dtype, np.dtype) and dtype in _SUPPORTED:
        return dtype
    try:
        nd = np.dtype(dtype)
    except TypeError:
        nd = None
    if nd is None or nd not in DTYPES.values():
        raise BuildError(f"unsupported element type {dtype!r}; allowed: {', '.join(DTYPES)}")
    return nd


def short_name(dtype: str | np.dtype) -> str:
    """The short name ('f32') of a supported dtype."""
    nd = np_dtype(dtype)
    return next(k for k, v in DTYPES.items() if v == nd)


class Store(Protocol):
    """What a descriptor needs from the memory it lives in (``Sram`` and ``Cache`` both are)."""

    @property
    def owner(self) -> str:
        """The PE's path, for messages."""

    @property
    def kind(self) -> str:
        """'SRAM' or 'cache', for messages."""

    @property
    def nbytes(self) -> int: ...

    @property
    def data(self) -> np.ndarray:
        """The bytes (``uint8``); typed access views them."""


def _check_dtype(what: str, dtype: str) -> None:
    if dtype not in DTYPES:
        raise BuildError(f"{what}: element type {dtype!r} is not one of {', '.join(DTYPES)}")


@dataclasses.dataclass(frozen=True)
class MemDsd:
    """A 1-D to 4-D tensor in a PE's SRAM (``space='sram'``) or cache (``space='cache'``).

    ``shape`` and ``strides`` have one entry per dimension, first dimension fastest; strides and
    ``offset`` are in elements, ``base`` in bytes and aligned to the element size. Construction
    checks the shape; whether the tensor fits its memory is checked by :meth:`check` (and by
    ``read``/``write``), since a descriptor does not know its memory.
    """

    base: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    name: str = dataclasses.field(default="", kw_only=True)
    space: str = dataclasses.field(default="sram", kw_only=True)

    def __post_init__(self) -> None:
        shape = tuple(int(n) for n in self.shape)
        strides = tuple(int(s) for s in self.strides)
        # One tuple object per distinct shape and strides (a full array's PEs make millions)
        shape = _TUPLES.setdefault(shape, shape)
        strides = _TUPLES.setdefault(strides, strides)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        if self.dtype not in DTYPES:  # (the label is made only for the message)
            _check_dtype(self.label, self.dtype)
        if not 1 <= len(shape) <= 4:
            raise BuildError(f"{self.label}: {len(shape)} dimensions; a DSD has 1 to 4")
        if len(strides) != len(shape):
            raise BuildError(
                f"{self.label}: shape {shape} has {len(shape)} dimensions but strides {strides} "
                f"has {len(strides)}; give one stride per dimension"
            )
        if any(n < 1 for n in shape):
            raise BuildError(
                f"{self.label}: shape {shape} has length 0 in some dimension; every dimension "
                "needs at least one element"
            )
        if self.space not in ("sram", "cache"):
            raise BuildError(f"{self.label}: space {self.space!r} is not 'sram' or 'cache'")
        if self.base < 0 or self.base % self.itemsize:
            raise BuildError(
                f"{self.label}: base address {self.base:#x} is not a non-negative multiple of "
                f"the {self.itemsize}-byte element size"
            )

    @classmethod
    def trusted(
        cls,
        base: int,
        dtype: str,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        name: str,
        space: str,
    ) -> MemDsd:
        """A descriptor whose fields have passed the constructor's checks before (the same
        dtype, shape, strides and space; ``base`` aligned): built without them, field by field
        as the constructor sets them (an allocator makes millions on a full array)."""
        new = object.__new__(cls)
        put = object.__setattr__
        put(new, "base", base)
        put(new, "dtype", dtype)
        put(new, "shape", shape)
        put(new, "strides", strides)
        put(new, "offset", 0)
        put(new, "name", name)
        put(new, "space", space)
        # ``length``'s value, as its cached property would keep it at its first read (a
        # program's buffers are read for it by the collectives on every PE: the property's
        # first read takes a lock)
        put(new, "length", shape[0] if len(shape) == 1 else math.prod(shape))
        return new

    @classmethod
    def vector(
        cls,
        base: int,
        dtype: str,
        length: int,
        stride: int = 1,
        *,
        name: str = "",
        space: str = "sram",
    ) -> MemDsd:
        """A 1-D descriptor of ``length`` elements ``stride`` elements apart."""
        return cls(base, dtype, (length,), (stride,), name=name, space=space)

    @property
    def label(self) -> str:
        """How messages name this descriptor."""
        who = f"'{self.name}'" if self.name else f"at {self.base:#x}"
        return f"DSD {who} ({self.dtype}, shape {self.shape}, strides {self.strides})"

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @functools.cached_property
    def length(self) -> int:
        """Number of elements the descriptor walks."""
        return math.prod(self.shape)

    @functools.cached_property
    def is_dense(self) -> bool:
        """True when successive elements sit at successive addresses (no gaps, stride 1)."""
        expect = 1
        for n, s in zip(self.shape, self.strides, strict=True):
            if n > 1 and s != expect:
                return False
            expect *= n
        return True

    def element_indices(self) -> np.ndarray:
        """Element offsets from ``base`` (in elements), in iteration order, as int64."""
        idx = np.full((), self.offset, dtype=np.int64)
        for n, s in zip(self.shape, self.strides, strict=True):
            # Each new dimension is slower, so it becomes a new leading axis.
            idx = np.arange(n, dtype=np.int64).reshape((n,) + (1,) * idx.ndim) * s + idx
        return idx.reshape(-1)

    def addresses(self) -> np.ndarray:
        """Byte addresses of the elements in iteration order (first dimension fastest)."""
        return self.base + self.element_indices() * self.itemsize

    @functools.cached_property
    def _span(self) -> tuple[int, int]:
        return self._compute_span()

    def span(self) -> tuple[int, int]:
        """Lowest and highest byte touched (inclusive), without listing every address."""
        return self._span

    def _compute_span(self) -> tuple[int, int]:
        """Lowest and highest byte touched (inclusive), without listing every address."""
        lo = hi = self.offset
        for n, s in zip(self.shape, self.strides, strict=True):
            lo += min(0, (n - 1) * s)
            hi += max(0, (n - 1) * s)
        return self.base + lo * self.itemsize, self.base + (hi + 1) * self.itemsize - 1

    def check(self, store: Store) -> None:
        """Raise ``BuildError`` unless every element lies inside ``store``."""
        lo, hi = self.span()
        if lo < 0 or hi >= store.nbytes:
            raise BuildError(
                f"PE {store.owner}: {self.label} with offset {self.offset} touches addresses "
                f"{lo:#x}..{hi:#x}, outside the {store.kind} (0x0..{store.nbytes - 1:#x}); "
                "fix its base, shape, strides or offset"
            )
        widen = getattr(store, "widen", None)
        if widen is not None:  # a packed SRAM (pe.memory.SramArena) reached above its bytes
            widen(hi + 1)

    def indices_in(self, store: Store) -> np.ndarray:
        self.check(store)
        return (self.base // self.itemsize) + self.element_indices()

    def _dense_slice(self, store: Store) -> slice | None:
        """The element slice of a dense descriptor (checked against ``store``), else None."""
        if not self.is_dense:
            return None
        self.check(store)
        start = self.base // self.itemsize + self.offset
        return slice(start, start + self.length)

    def read(self, store: Store) -> np.ndarray:
        """Gather the elements (a copy, in iteration order)."""
        shape = self.shape
        if len(shape) == 1 and (shape[0] == 1 or self.strides[0] == 1):
            # A dense vector inside the store's bytes (every task's launch of a memory source
            # reads one): the same copy as below, without the cached properties' first-use
            # cost on a descriptor made anew, and nothing to check or widen (``len(data)`` is
            # at most ``nbytes``, and a packed store already holds the bytes).
            dtype = DTYPES[self.dtype]
            lo = self.base + self.offset * dtype.itemsize
            end = lo + shape[0] * dtype.itemsize
            data = store.data
            if lo >= 0 and end <= len(data):
                return data[lo:end].view(dtype).copy()
        dense = self._dense_slice(store)
        index = dense if dense is not None else self.indices_in(store)
        view = store.data.view(DTYPES[self.dtype])  # (after the checks: they may widen it)
        if dense is not None:
            return view[dense].copy()
        return view[index]

    def write(self, store: Store, values: np.ndarray | float) -> None:
        """Scatter ``values`` (one per element, or a scalar) into the tensor."""
        vals = np.asarray(values)
        if vals.ndim and vals.size != self.length:
            raise BuildError(
                f"PE {store.owner}: writing {vals.size} values into {self.label}, which has "
                f"{self.length} elements"
            )
        if vals.dtype != DTYPES[self.dtype]:
            with np.errstate(all="ignore"):
                vals = vals.astype(DTYPES[self.dtype])
        dense = self._dense_slice(store)
        index = dense if dense is not None else self.indices_in(store)
        view = store.data.view(DTYPES[self.dtype])  # (after the checks: they may widen it)
        if dense is not None:
            view[dense] = vals.reshape(-1) if vals.ndim else vals
        else:
            view[index] = vals.reshape(-1)

    def with_offset(self, delta_elements: int) -> MemDsd:
        """The same descriptor moved by ``delta_elements`` (CSL ``@increment_dsd_offset``)."""
        return self._derived(self.shape, self.offset + int(delta_elements))

    def with_length(self, n: int) -> MemDsd:
        """A 1-D descriptor with a new length (CSL ``@set_dsd_length``)."""
        if len(self.shape) != 1:
            raise BuildError(
                f"{self.label}: with_length applies to 1-D descriptors; this one has "
                f"{len(self.shape)} dimensions, build a new one instead"
            )
        n = int(n)
        if n < 1:
            return dataclasses.replace(self, shape=(n,))  # (its checks name the bad length)
        return self._derived((n,), self.offset)

    def _derived(self, shape: tuple[int, ...], offset: int) -> MemDsd:
        """This descriptor with a new (valid) shape of as many dimensions, or a new offset.
        Built without the constructor's checks, which the other fields have passed and these
        two cannot fail (an offset is not checked; the caller checks the shape): tasks move and
        resize descriptors in their inner loops, and ``dataclasses.replace`` with
        ``__post_init__`` was the largest cost of a general program's run (profile of spmv)."""
        new = object.__new__(type(self))
        new.__dict__.update(
            base=self.base, dtype=self.dtype, shape=shape, strides=self.strides, offset=offset,
            name=self.name, space=self.space,
        )  # fmt: skip
        return new


def _check_fabric(dsd: _Labelled, colour: int, length: int, queue: int, queues: int,
                  dtype: str) -> None:  # fmt: skip
    if dtype in DTYPES and 0 <= colour < COLOURS and 0 <= queue < queues and length >= 1:
        return  # (the label is made only for a message: a stream's set-up makes two DSDs)
    what = dsd.label
    _check_dtype(what, dtype)
    if not 0 <= colour < COLOURS:
        raise BuildError(f"{what}: colour {colour} out of range; allowed 0 .. {COLOURS - 1}")
    if not 0 <= queue < queues:
        raise BuildError(f"{what}: queue {queue} out of range; allowed 0 .. {queues - 1}")
    if length < 1:
        raise BuildError(f"{what}: length {length}; a fabric stream needs at least 1 element")


class _Labelled(Protocol):
    @property
    def label(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class FabInDsd:
    """``length`` elements arriving on ``colour`` through input queue ``queue`` (0..7)."""

    colour: int
    length: int
    queue: int
    dtype: str = "f32"

    def __post_init__(self) -> None:
        _check_fabric(self, self.colour, self.length, self.queue, INPUT_QUEUES, self.dtype)

    @property
    def label(self) -> str:
        return f"fabric input DSD (colour {self.colour}, queue {self.queue}, {self.dtype})"

    def check(self, colours: int, input_queues: int) -> None:
        """Check against a configuration with fewer colours or queues than the WSE-2."""
        _check_fabric(self, self.colour, self.length, self.queue, input_queues, self.dtype)
        if self.colour >= colours:
            raise BuildError(f"{self.label}: colour out of range; allowed 0 .. {colours - 1}")


@dataclasses.dataclass(frozen=True)
class FabOutDsd:
    """``length`` elements sent on ``colour`` through output queue ``queue`` (0..5).

    ``control`` marks the wavelets as control wavelets (commands) rather than data.
    """

    colour: int
    length: int
    queue: int
    dtype: str = "f32"
    control: bool = False

    def __post_init__(self) -> None:
        _check_fabric(self, self.colour, self.length, self.queue, OUTPUT_QUEUES, self.dtype)

    @property
    def label(self) -> str:
        return f"fabric output DSD (colour {self.colour}, queue {self.queue}, {self.dtype})"

    def check(self, colours: int, output_queues: int) -> None:
        """Check against a configuration with fewer colours or queues than the WSE-2."""
        _check_fabric(self, self.colour, self.length, self.queue, output_queues, self.dtype)
        if self.colour >= colours:
            raise BuildError(f"{self.label}: colour out of range; allowed 0 .. {colours - 1}")


@dataclasses.dataclass(eq=False)
class FifoDsd:
    """A circular buffer of ``capacity`` elements at ``base`` in SRAM.

    Unlike the other descriptors this one has state: the hardware DSR of a FIFO holds a read and
    a write pointer that advance as elements are pushed and popped, so the object is mutable and
    compares by identity. ``push`` and ``pop`` move real data through the store.
    """

    base: int
    capacity: int
    dtype: str
    name: str = dataclasses.field(default="", kw_only=True)
    head: int = dataclasses.field(default=0, init=False)
    count: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        _check_dtype(self.label, self.dtype)
        if self.capacity < 1:
            raise BuildError(f"{self.label}: capacity {self.capacity}; needs at least 1 element")
        itemsize = DTYPES[self.dtype].itemsize
        if self.base < 0 or self.base % itemsize:
            raise BuildError(
                f"{self.label}: base address {self.base:#x} is not a non-negative multiple of "
                f"the {itemsize}-byte element size"
            )

    @property
    def label(self) -> str:
        who = f"'{self.name}'" if self.name else f"at {self.base:#x}"
        return f"FIFO {who} ({self.dtype}, capacity {self.capacity})"

    @property
    def free(self) -> int:
        """Elements that can still be pushed."""
        return self.capacity - self.count

    def _slots(self, store: Store, start: int, n: int) -> np.ndarray:
        self.as_mem().check(store)
        return self.base // DTYPES[self.dtype].itemsize + (start + np.arange(n)) % self.capacity

    def as_mem(self) -> MemDsd:
        """The buffer as a 1-D memory descriptor (for allocation checks)."""
        return MemDsd.vector(self.base, self.dtype, self.capacity, name=self.name)

    def push(self, store: Store, values: np.ndarray | float) -> None:
        """Append ``values`` (1-D) at the tail; raises ``BuildError`` if they do not fit."""
        vals = np.atleast_1d(np.asarray(values)).reshape(-1)
        if vals.size > self.free:
            raise BuildError(
                f"PE {store.owner}: {self.label} overflow: pushing {vals.size} elements but it "
                f"holds {self.count} and has room for {self.free}; pop first or enlarge it"
            )
        slots = self._slots(store, self.head + self.count, vals.size)
        with np.errstate(all="ignore"):
            store.data.view(DTYPES[self.dtype])[slots] = vals.astype(DTYPES[self.dtype])
        self.count += vals.size

    def pop(self, store: Store, n: int) -> np.ndarray:
        """Remove and return the ``n`` oldest elements; raises ``BuildError`` if fewer are held."""
        if n > self.count:
            raise BuildError(
                f"PE {store.owner}: {self.label} underflow: popping {n} elements but it holds "
                f"{self.count}; wait for more pushes"
            )
        slots = self._slots(store, self.head, n)  # (before the bytes: it may widen them)
        out = store.data.view(DTYPES[self.dtype])[slots]
        self.head = (self.head + n) % self.capacity
        self.count -= n
        return out
