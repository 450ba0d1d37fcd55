"""A PE's local memories with real data: the 48 kB SRAM and the 256 B software-managed cache.

Each store is one ``numpy.uint8`` array; typed access goes through numpy views, so a tensor
instruction's writes land in the same bytes a later read sees. Allocation is a bump allocator
fixed at build time (CSL programs declare their buffers statically): data buffers grow upward
from address 0; the program's code occupies the top of SRAM, because instructions live in the
same 48 kB as data. An allocation that does not fit raises :class:`SramOverflowError` naming the
PE, the buffer, the bytes needed against the bytes available, and what already uses the memory.

Bank model (used by the timing code in ``pe.isa``): successive ``bank_interleave_bytes`` (2, one
16-bit word) sit in successive banks, so byte address ``a`` is in bank
``(a // bank_interleave_bytes) % sram_banks``. The cache has no banks: it is a separate small
store that never conflicts with SRAM accesses.

Left out: freeing buffers (programs do not), and the placement of code relative to data inside
real CSL binaries (only its size matters here).
"""

from __future__ import annotations

import math
import mmap

import numpy as np

from pe.config import PeConfig
from pe.dsd import MemDsd, np_dtype, short_name
from simcore.errors import BuildError


class SramOverflowError(BuildError):
    """A PE's buffers (plus its code) do not fit its SRAM or cache."""


#: (dtype, shape, order) -> (short dtype, shape, strides, bytes, alignment) of the buffers
#: allocated so far: the same few shapes on every PE of a wafer.
_ARRAY_SPECS: dict[tuple, tuple[str, tuple[int, ...], tuple[int, ...], int, int]] = {}


#: Settled stores' tables of buffers, one object per distinct table (see _Store.settle).
_LAYOUTS: dict[tuple, tuple] = {}
_MAX_LAYOUTS = 1 << 16

#: At most this many allocation steps are kept per arena (:attr:`SramArena.steps`).
_MAX_STEPS = 1 << 16


def _b(n: int) -> str:
    return f"{n:,} B"


class SramArena:
    """Zeroed memory for many PEs' SRAMs. Two kinds of slices of anonymous memory maps
    (``CHUNK_BYTES`` each, so a large wafer needs few maps; the operating system backs a page
    only when it is first written):

    - :meth:`take`: a whole store, page-aligned: a PE's 48 kB costs the pages its buffers
      touch;
    - :meth:`take_packed`: only the bytes below a store's allocation top (rounded up to
      ``PACK_ALIGN``), packed one after another, so that several PEs holding a few hundred
      bytes each share a page instead of taking one each (a full array's 745,500 PEs, 4 kB
      each, would be 3 GB). A wafer packs each PE's SRAM once its PE code has run
      (:meth:`_Store.settle`); a packed store widens to a whole one if an allocation or an
      access ever reaches above it.

    While a wafer builds (``building``), the one PE whose code is running writes into a
    shared zeroed scratch store, which :meth:`_Store.settle` copies into its packed slice and
    zeroes again. A slice is an ordinary contiguous ``uint8`` array, so views and descriptors
    work unchanged. A map is released when no slice of it is left."""

    CHUNK_BYTES = 64 << 20
    PACK_ALIGN = 64

    def __init__(self) -> None:
        self._chunk: np.ndarray | None = None
        self._offset = 0
        self._packed: np.ndarray | None = None
        self._packed_offset = 0
        self.building = False
        self._scratch: np.ndarray | None = None
        self.scratch_user: _Store | None = None
        # A building store whose bytes were never asked for: the values its new buffers were
        # given (byte address, contiguous values), written when its bytes are first asked for
        # or straight into its packed slice when it settles (no scratch to scan and zero).
        self._deferred: _Store | None = None
        self._writes: list[tuple[int, np.ndarray]] = []
        #: Allocation steps taken before by this arena's stores, from a shared table of
        #: buffers: (id(table), name, dtype, shape, order, space) as given -> (table, the table
        #: with the new buffer, its byte address, the new top, the descriptor's dtype, shape
        #: and strides). The PEs of one program allocate the same buffers in the same order:
        #: each step after the first PE's is one lookup, and their tables are one shared tuple
        #: from the start (see :meth:`_Store.alloc_array`). Kept per arena (one wafer), so it
        #: lives and dies with the wafer and never grows across runs in one process.
        self.steps: dict[tuple, tuple] = {}

    def take(self, nbytes: int) -> np.ndarray:
        step = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
        if self._chunk is None or self._offset + step > len(self._chunk):
            size = max(self.CHUNK_BYTES, step)
            self._chunk = np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8)
            self._offset = 0
        out = self._chunk[self._offset : self._offset + nbytes]
        self._offset += step
        return out

    def take_packed(self, nbytes: int) -> np.ndarray:
        """``nbytes`` (a multiple of ``PACK_ALIGN``) right after the last packed slice."""
        if self._packed is None or self._packed_offset + nbytes > len(self._packed):
            size = max(self.CHUNK_BYTES, nbytes)
            self._packed = np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8)
            self._packed_offset = 0
        out = self._packed[self._packed_offset : self._packed_offset + nbytes]
        self._packed_offset += nbytes
        return out

    def scratch(self, store: _Store) -> np.ndarray:
        """The build's scratch store for ``store`` (zeroed), or a whole slice of its own if
        another store holds the scratch."""
        if self.scratch_user is not None:
            return self.take(store.nbytes)
        if self._scratch is None or len(self._scratch) != store.nbytes:
            self._scratch = np.zeros(store.nbytes, dtype=np.uint8)
        self.scratch_user = store
        return self._scratch

    def defer(self, store: _Store, addr: int, values: np.ndarray) -> None:
        """Keep ``values`` (contiguous, owned) for ``store``'s new buffer at byte ``addr``
        until its bytes are asked for or it settles (one store at a time: another's are
        written first)."""
        if self._deferred is not store:
            if self._deferred is not None:
                self.flush()
            self._deferred = store
        self._writes.append((addr, values))

    def flush(self) -> None:
        """Write the deferred store's values into its bytes (made as ``data`` makes them)."""
        store, writes = self._deferred, self._writes
        self._deferred, self._writes = None, []
        assert store is not None
        for addr, values in writes:
            store.view(addr, values.dtype, values.size)[:] = values

    def release_scratch(self, store: _Store, used: int, above: bool) -> None:
        """``store`` is done with the scratch; zero what it wrote (``used`` bytes from 0, or
        all of it if it wrote ``above`` them)."""
        scratch = self._scratch
        assert scratch is not None and self.scratch_user is store
        if above:
            scratch[:] = 0
        else:
            scratch[:used] = 0
        self.scratch_user = None


class _Store:
    """Shared allocator and views of :class:`Sram` and :class:`Cache`."""

    kind = "memory"
    space = "sram"
    advice = "reduce the buffer sizes"
    _code = 0  # bytes of code at the top (code_bytes; an Sram sets its own)

    def __init__(self, nbytes: int, owner: str, arena: SramArena | None = None) -> None:
        self.owner = owner
        self.nbytes = nbytes
        self._data: np.ndarray | None = None
        self._arena = arena
        # name -> (byte address, bytes): a tuple of its items shared by every store with the
        # same buffers (a wafer's PEs mostly have the same: see alloc_array and settle), or a
        # dict of its own
        self._buffers: dict[str, tuple[int, int]] | tuple[tuple[str, tuple[int, int]], ...] = ()
        self._top = 0  # first byte above the last data buffer

    @property
    def data(self) -> np.ndarray:
        """The memory's bytes (``uint8``), created zeroed on first use so that idle PEs of a large
        wafer cost no memory (from ``arena`` if given: then only touched pages cost memory).
        A packed store's (:meth:`settle`) ends at its allocation top: accesses through
        descriptors and :meth:`view` widen it first (:meth:`widen`). Indexing this array
        directly does not: it is a plain ``numpy`` array (a subclass or wrapper that widened on
        indexing would tax every access of the hot paths, which read it once per instruction),
        so a raw access above a packed store's bytes fails as numpy's do (a slice reads short,
        an assignment raises). Code that reaches memory by address, above its buffers, takes
        ``widen(end)`` (or :meth:`view`) first, as ``pe.dsd`` and the fast path of ``pe.isa``
        do; nothing in the package indexes it raw above the buffers."""
        if self._data is None:
            arena = self._arena
            if arena is None:
                self._data = np.zeros(self.nbytes, dtype=np.uint8)
            elif arena.building:
                self._data = arena.scratch(self)
            else:
                self._data = arena.take(self.nbytes)
            if arena is not None and arena._deferred is self:
                arena.flush()  # the values its buffers were given (put)
        return self._data

    def put(self, addr: int, values: np.ndarray, *, owned: bool = False) -> None:
        """Give a new buffer at byte ``addr`` its ``values`` (1-D, of the buffer's dtype and
        size: :meth:`pe.program.PeBuilder.array`). While a wafer builds and the store's bytes
        have not been asked for, the values wait (a contiguous copy, or ``values`` themselves
        if ``owned``: contiguous, and held by nothing else) and go straight into its packed
        slice when it settles; else they are written at once."""
        arena = self._arena
        if self._data is None and arena is not None and arena.building:
            arena.defer(self, addr, values if owned else values.copy())
        else:
            self.view(addr, values.dtype, values.size)[:] = values

    def settle(self) -> None:
        """Pack the store (its program's code has run and allocated its buffers): keep only
        the bytes below the allocation top, in a packed slice of the arena (see
        :class:`SramArena`). A store without an arena, or without buffers, is left as it is.
        Its table of buffers becomes one shared by the stores with the same buffers."""
        b = self._buffers
        if isinstance(b, dict) and len(_LAYOUTS) < _MAX_LAYOUTS:
            items = tuple(b.items())
            self._buffers = _LAYOUTS.setdefault(items, items)
        arena = self._arena
        if arena is None:
            return
        used = -(-self._top // arena.PACK_ALIGN) * arena.PACK_ALIGN
        data = self._data
        if data is None and arena._deferred is self:
            # Its bytes were never asked for: only its buffers' values were written (put)
            packed = arena.take_packed(used)
            writes = arena._writes
            arena._deferred, arena._writes = None, []
            for addr, values in writes:
                packed[addr : addr + values.nbytes] = values.view(np.uint8)
            self._data = packed
        elif data is not None and arena.scratch_user is self:
            # (used: a multiple of 64; count_nonzero takes half of any()'s time here)
            above = bool(np.count_nonzero(data[used:].view(np.uint64)))
            if above:  # written above its buffers: keep the whole store
                whole = arena.take(self.nbytes)
                whole[:] = data
                self._data = whole
            elif used:
                packed = arena.take_packed(used)
                packed[:] = data[:used]
                self._data = packed
            else:
                self._data = None
            arena.release_scratch(self, used, above)
        elif data is None and used:
            self._data = arena.take_packed(used)

    def image(self) -> bytes:
        """All ``nbytes`` of the memory (a packed store's bytes above its buffers are zeros)."""
        data = self.data
        return data.tobytes() + bytes(self.nbytes - len(data))

    def widen(self, end: int) -> np.ndarray:
        """The store's bytes, made whole (``nbytes``) if a packed store ends below ``end``."""
        data = self.data
        if end > len(data):
            arena = self._arena
            whole = np.zeros(self.nbytes, np.uint8) if arena is None else arena.take(self.nbytes)
            whole[: len(data)] = data
            self._data = data = whole
        return data

    @property
    def code_bytes(self) -> int:
        return 0

    @property
    def buffers(self) -> dict[str, tuple[int, int]]:
        """Allocated buffers: name -> (byte address, bytes), in allocation order."""
        return dict(self._buffers)

    def _buffer_dict(self) -> dict[str, tuple[int, int]]:
        b = self._buffers
        if not isinstance(b, dict):
            b = self._buffers = dict(b)
        return b

    @property
    def used_bytes(self) -> int:
        """Bytes taken by code and data, alignment padding included."""
        return self.code_bytes + self._top

    @property
    def free_bytes(self) -> int:
        return self.nbytes - self.used_bytes

    def _what(self) -> str:
        return f"PE {self.owner}: {self.kind}"

    def _usage(self) -> str:
        parts = [f"'{n}' {_b(size)}" for n, (_, size) in self._buffer_dict().items()]
        if self.code_bytes:
            parts.insert(0, f"code {_b(self.code_bytes)}")
        return f"{_b(self.used_bytes)}" + (f" ({', '.join(parts)})" if parts else "")

    def _capacity(self) -> str:
        return f"the {self.kind} has {_b(self.nbytes)}"

    def _needed(self, data_bytes: int) -> str:
        return f"{_b(self.code_bytes + data_bytes)} needed (data {_b(data_bytes)})"

    def alloc(self, name: str, nbytes: int, *, align: int = 4) -> int:
        """Reserve ``nbytes`` for buffer ``name`` aligned to ``align``; returns its byte address."""
        if not name:
            raise BuildError(f"{self._what()} buffers need a non-empty name")
        buffers = self._buffer_dict()
        if name in buffers:
            addr, size = buffers[name]
            raise BuildError(
                f"{self._what()} buffer '{name}' is already allocated ({_b(size)} at "
                f"{addr:#x}); give the new buffer another name"
            )
        if isinstance(nbytes, bool) or not isinstance(nbytes, int | np.integer) or nbytes < 1:
            raise BuildError(
                f"{self._what()} buffer '{name}' has size {nbytes!r}; it needs a positive number "
                "of bytes"
            )
        if align < 1 or align & (align - 1):
            raise BuildError(
                f"{self._what()} buffer '{name}': alignment {align} is not a power of two"
            )
        return self._place(buffers, name, int(nbytes), align)

    def _place(
        self, buffers: dict[str, tuple[int, int]], name: str, nbytes: int, align: int
    ) -> int:
        """:meth:`alloc` once its arguments are checked (``name`` new, ``nbytes`` a positive
        int, ``align`` a power of two)."""
        addr = -(-self._top // align) * align
        end = addr + nbytes
        if self.code_bytes + end > self.nbytes:
            raise SramOverflowError(
                f"PE {self.owner}: {self.kind} overflow allocating '{name}' ({_b(nbytes)}): "
                f"{self._needed(end)} but {self._capacity()}; already used: {self._usage()}; "
                f"{self.advice}"
            )
        buffers[name] = (addr, nbytes)
        self._top = end
        if self._data is not None and end > len(self._data):
            self.widen(end)  # a packed store (see settle) allocating above its bytes
        return addr

    def alloc_array(
        self, name: str, dtype: str | np.dtype, shape: int | tuple[int, ...], *, order: str = "F"
    ) -> MemDsd:
        """Allocate a dense tensor and return a descriptor walking all of it.

        ``order='F'`` (default) is column-major: the first dimension is contiguous, so the
        descriptor's iteration order (first dimension fastest) is address order. ``order='C'`` is
        row-major: the last dimension is contiguous and the descriptor walks with strides.
        """
        table = self._buffers
        arena = self._arena
        steps = None if arena is None else arena.steps
        shared = steps is not None and type(table) is tuple
        if shared:
            step_key = (id(table), name, dtype, shape, order, self.space)
            try:
                step = steps.get(step_key)
            except TypeError:  # (an unhashable dtype or size: the general path below)
                step = None
                shared = False
            if step is not None and step[0] is table and self._code + step[3] <= self.nbytes:
                # A step taken before from this table: the same buffer at the same address
                _, self._buffers, addr, end, short, shape_t, strides_t = step
                self._top = end
                if self._data is not None and end > len(self._data):
                    self.widen(end)  # (as _place)
                return MemDsd.trusted(addr, short, shape_t, strides_t, name, self.space)
        dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
        key = (dtype, dims, order)
        try:
            spec = _ARRAY_SPECS.get(key)
        except TypeError:  # (an unhashable dtype or size: the general path below)
            spec = key = None
        if spec is not None:  # a shape made before: its descriptor's fields are checked
            short, shape_t, strides_t, nbytes, align = spec
            buffers = self._buffer_dict()
            if name and name not in buffers:  # (else alloc's message)
                addr = self._place(buffers, name, nbytes, align)
            else:
                addr = self.alloc(name, nbytes, align=align)
            if shared and len(steps) < _MAX_STEPS:
                new = (*table, (name, (addr, nbytes)))
                new = _LAYOUTS.setdefault(new, new)  # (kept: _LAYOUTS is never emptied)
                self._buffers = new
                steps[step_key] = (table, new, addr, self._top, short, shape_t, strides_t)
            return MemDsd.trusted(addr, short, shape_t, strides_t, name, self.space)
        nd = np_dtype(dtype)
        if order not in ("F", "C"):
            raise BuildError(f"{self._what()} buffer '{name}': order {order!r} is not 'F' or 'C'")
        strides: list[int] = []
        step = 1
        for n in dims if order == "F" else reversed(dims):
            strides.append(step)
            step *= int(n)
        if order == "C":
            strides.reverse()
        count = math.prod(int(n) for n in dims)
        align = max(4, nd.itemsize)
        addr = self.alloc(name, count * nd.itemsize, align=align)
        dsd = MemDsd(
            addr,
            short_name(nd),
            tuple(int(n) for n in dims),
            tuple(strides),
            name=name,
            space=self.space,
        )
        if key is not None and len(_ARRAY_SPECS) < 4096:
            _ARRAY_SPECS[key] = (dsd.dtype, dsd.shape, dsd.strides, count * nd.itemsize, align)
        return dsd

    def view(self, addr: int, dtype: np.dtype | str, count: int) -> np.ndarray:
        """A numpy view of ``count`` elements at byte ``addr``; writing it writes the memory."""
        nd = np_dtype(dtype)
        end = addr + count * nd.itemsize
        if addr < 0 or count < 0 or end > self.nbytes:
            raise BuildError(
                f"{self._what()} view of {count} x {short_name(nd)} at {addr:#x} ends at "
                f"{end:#x}, outside 0x0..{self.nbytes:#x}"
            )
        if addr % nd.itemsize:
            raise BuildError(
                f"{self._what()} address {addr:#x} is not aligned to {nd.itemsize}-byte "
                f"{short_name(nd)} elements"
            )
        return self.widen(end)[addr:end].view(nd)


class Sram(_Store):
    """The PE's 48 kB data-and-code SRAM, in ``cfg.sram_banks`` interleaved banks.

    ``owner`` is the PE's path, used in messages. The program's size starts at
    ``cfg.code_bytes`` (a default) until :meth:`reserve_code` sets the real one.
    """

    kind = "SRAM"
    space = "sram"
    advice = "reduce the buffer sizes or the tile size"

    def __init__(self, cfg: PeConfig, owner: str, arena: SramArena | None = None) -> None:
        super().__init__(cfg.sram_bytes, owner, arena)
        self.cfg = cfg
        code = cfg.code_bytes
        if type(code) is int and 0 <= code <= self.nbytes:
            self._code = code  # (what reserve_code sets: no data yet, so it fits)
        else:
            self._code = 0
            self.reserve_code(code)

    @property
    def code_bytes(self) -> int:
        """Bytes of SRAM taken by the program (at the top of the address space)."""
        return self._code

    def reserve_code(self, nbytes: int) -> None:
        """Set the program size; it replaces the previous reservation and must fit beside data."""
        if nbytes < 0:
            raise BuildError(f"PE {self.owner}: code size {nbytes} B is negative")
        if nbytes + self._top > self.nbytes:
            raise SramOverflowError(
                f"PE {self.owner}: SRAM overflow reserving code ({_b(nbytes)}): "
                f"{_b(nbytes + self._top)} needed (code {_b(nbytes)} + data {_b(self._top)}) but "
                f"{self._capacity()}; shrink the program or the buffers"
            )
        self._code = int(nbytes)

    @property
    def code_base(self) -> int:
        """Lowest byte address of the code."""
        return self.nbytes - self._code

    def _capacity(self) -> str:
        kb = f" ({self.nbytes / 1024:g} kB)" if self.nbytes % 1024 == 0 else ""
        return f"the PE has {_b(self.nbytes)}{kb}"

    def _needed(self, data_bytes: int) -> str:
        return (
            f"{_b(self.code_bytes + data_bytes)} needed (code {_b(self.code_bytes)} + data "
            f"{_b(data_bytes)})"
        )

    def bank_of(self, addr: int | np.ndarray) -> int | np.ndarray:
        """The bank holding byte ``addr`` (scalar or array): successive words, successive banks."""
        banks = (np.asarray(addr) // self.cfg.bank_interleave_bytes) % self.cfg.sram_banks
        return int(banks) if banks.ndim == 0 else banks


class Cache(_Store):
    """The PE's 256 B software-managed cache (accumulators): same API as :class:`Sram`, no banks."""

    kind = "cache"
    space = "cache"
    advice = "keep fewer accumulators in the cache or move some to SRAM"

    def __init__(self, cfg: PeConfig, owner: str) -> None:
        super().__init__(cfg.cache_bytes, owner)
        self.cfg = cfg
