"""PE configuration, SRAM and cache: allocation, overflow messages, views, banks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pe.config import PeConfig
from pe.dsd import MemDsd
from pe.memory import Cache, Sram, SramOverflowError
from simcore import config
from simcore.errors import BuildError, ConfigError

CFG = PeConfig()
OWNER = "wafer/pe[3,4]"


def test_defaults_follow_the_spec() -> None:
    assert (CFG.sram_bytes, CFG.sram_banks, CFG.bank_bytes) == (49152, 8, 6144)
    assert (CFG.cache_bytes, CFG.pipeline_stages) == (256, 6)
    assert (CFG.fmach_simd_width, CFG.fadds_simd_width, CFG.fmacs_simd_width) == (4, 2, 1)
    assert CFG.fp32_fmac_cycles_per_element == 2
    assert CFG.timestamp_bits == 48
    CFG.check()


def test_every_field_has_a_description() -> None:
    for f in dataclasses.fields(PeConfig):
        assert f.metadata["doc"], f.name


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"bank_bytes": 4096},
            "config key 'pe.sram_bytes' = 49152: must equal pe.sram_banks x pe.bank_bytes = "
            "8 x 4096 = 32768; change pe.bank_bytes or pe.sram_banks to match",
        ),
        (
            {"bank_conflict_modulus": 3},
            "config key 'pe.bank_conflict_modulus' = 3: must divide pe.sram_banks = 8; use half "
            "the bank count (WSE-2: 4)",
        ),
        (
            {"fadds_simd_width": 4},
            "config key 'fadds_simd_width' = 4: out of range; allowed: 1 .. 2; change "
            "fadds_simd_width",
        ),
        (
            {"cache_bytes": 254},
            "config key 'cache_bytes' = 254: not a multiple of 4; allowed: 0 .. inf, a multiple "
            "of 4; change cache_bytes",
        ),
    ],
)
def test_check_rejects_inconsistent_values(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(PeConfig, data)
    assert str(err.value) == message


def test_sram_starts_with_the_default_code_size() -> None:
    sram = Sram(CFG, OWNER)
    assert sram.data.dtype == np.uint8 and sram.data.size == 49152
    assert (sram.code_bytes, sram.used_bytes, sram.free_bytes) == (2048, 2048, 47104)
    sram.reserve_code(1000)
    assert (sram.used_bytes, sram.code_base) == (1000, 48152)


def test_alloc_bumps_and_aligns() -> None:
    sram = Sram(CFG, OWNER)
    assert sram.alloc("a", 6) == 0
    assert sram.alloc("b", 4) == 8
    assert sram.alloc("c", 1, align=16) == 16
    assert sram.buffers == {"a": (0, 6), "b": (8, 4), "c": (16, 1)}
    assert sram.used_bytes == 2048 + 17


def test_sram_overflow_message() -> None:
    sram = Sram(CFG, OWNER)
    sram.alloc("A", 20514)
    sram.alloc("B", 20514)
    with pytest.raises(SramOverflowError) as err:
        sram.alloc("C", 9216)
    assert str(err.value) == (
        "PE wafer/pe[3,4]: SRAM overflow allocating 'C' (9,216 B): 52,296 B needed "
        "(code 2,048 B + data 50,248 B) but the PE has 49,152 B (48 kB); already used: "
        "43,078 B (code 2,048 B, 'A' 20,514 B, 'B' 20,514 B); reduce the buffer sizes or the "
        "tile size"
    )
    assert isinstance(err.value, BuildError)
    assert sram.buffers == {"A": (0, 20514), "B": (20516, 20514)}


def test_summa_tiles_fit_with_the_default_code_size() -> None:
    # 5 Mt^2 FP32 buffers + 2 kB code: Mt = 48 fits (48,128 B), Mt = 49 does not (50,068 B).
    for mt, fits in ((47, True), (48, True), (49, False)):
        sram = Sram(CFG, OWNER)
        names = ("A", "B", "C", "T0", "T1")
        if fits:
            for name in names:
                sram.alloc_array(name, "f32", (mt, mt))
            assert sram.used_bytes == 2048 + 5 * mt * mt * 4
        else:
            with pytest.raises(SramOverflowError):
                for name in names:
                    sram.alloc_array(name, "f32", (mt, mt))


def test_code_reservation_that_does_not_fit() -> None:
    sram = Sram(CFG, OWNER)
    sram.alloc("A", 40000)
    with pytest.raises(SramOverflowError) as err:
        sram.reserve_code(10000)
    assert str(err.value) == (
        "PE wafer/pe[3,4]: SRAM overflow reserving code (10,000 B): 50,000 B needed (code "
        "10,000 B + data 40,000 B) but the PE has 49,152 B (48 kB); shrink the program or the "
        "buffers"
    )
    assert sram.code_bytes == 2048


@pytest.mark.parametrize(
    ("name", "nbytes", "align", "message"),
    [
        (
            "A",
            4,
            4,
            "PE wafer/pe[3,4]: SRAM buffer 'A' is already allocated (8 B at 0x0); give the new "
            "buffer another name",
        ),
        (
            "B",
            0,
            4,
            "PE wafer/pe[3,4]: SRAM buffer 'B' has size 0; it needs a positive number of bytes",
        ),
        ("B", 4, 3, "PE wafer/pe[3,4]: SRAM buffer 'B': alignment 3 is not a power of two"),
        ("", 4, 4, "PE wafer/pe[3,4]: SRAM buffers need a non-empty name"),
    ],
)
def test_alloc_rejects_bad_requests(name: str, nbytes: int, align: int, message: str) -> None:
    sram = Sram(CFG, OWNER)
    sram.alloc("A", 8)
    with pytest.raises(BuildError) as err:
        sram.alloc(name, nbytes, align=align)
    assert str(err.value) == message


def test_view_writes_through_to_sram() -> None:
    sram = Sram(CFG, OWNER)
    addr = sram.alloc("x", 16)
    v = sram.view(addr, "f32", 4)
    v[:] = [1.0, 2.0, 3.0, 4.0]
    assert sram.data[addr : addr + 16].view(np.float32).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert sram.view(addr, np.float32, 4)[2] == 3.0
    assert sram.view(addr, "u16", 8)[1] == np.array([1.0], np.float32).view(np.uint16)[1]
    with pytest.raises(BuildError) as err:
        sram.view(2, "f32", 1)
    assert str(err.value) == (
        "PE wafer/pe[3,4]: SRAM address 0x2 is not aligned to 4-byte f32 elements"
    )
    with pytest.raises(BuildError) as err:
        sram.view(49148, "f32", 2)
    assert str(err.value) == (
        "PE wafer/pe[3,4]: SRAM view of 2 x f32 at 0xbffc ends at 0xc004, outside 0x0..0xc000"
    )


def test_bank_of_interleaves_16_bit_words() -> None:
    sram = Sram(CFG, OWNER)
    assert [sram.bank_of(a) for a in range(0, 20, 2)] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
    assert sram.bank_of(3) == 1
    assert sram.bank_of(np.array([0, 16, 18])).tolist() == [0, 0, 1]
    wide = Sram(dataclasses.replace(CFG, bank_interleave_bytes=4), OWNER)
    assert [wide.bank_of(a) for a in (0, 2, 4, 32)] == [0, 0, 1, 0]


def test_alloc_array_orders() -> None:
    sram = Sram(CFG, OWNER)
    col = sram.alloc_array("col", "f32", (3, 5))
    row = sram.alloc_array("row", np.float16, (3, 5), order="C")
    vec = sram.alloc_array("vec", "i16", 7)
    assert (col.base, col.shape, col.strides, col.dtype) == (0, (3, 5), (1, 3), "f32")
    assert (row.base, row.strides, row.dtype) == (60, (5, 1), "f16")
    assert (vec.base, vec.shape, vec.strides) == (92, (7,), (1,))
    assert col.is_dense and not row.is_dense


def test_cache_has_the_same_api_and_its_own_overflow_message() -> None:
    cache = Cache(CFG, OWNER)
    acc = cache.alloc_array("acc", "f32", 48)
    assert (acc.space, cache.used_bytes, cache.free_bytes) == ("cache", 192, 64)
    cache.view(acc.base, "f32", 48)[:] = 1.5
    assert acc.read(cache).sum() == 72.0
    with pytest.raises(SramOverflowError) as err:
        cache.alloc("acc2", 80)
    assert str(err.value) == (
        "PE wafer/pe[3,4]: cache overflow allocating 'acc2' (80 B): 272 B needed (data 272 B) "
        "but the cache has 256 B; already used: 192 B ('acc' 192 B); keep fewer accumulators "
        "in the cache or move some to SRAM"
    )


def test_sram_arena_slices_are_zeroed_independent_and_page_aligned():
    import mmap

    from pe.memory import SramArena

    arena = SramArena()
    a, b = arena.take(49152), arena.take(49152)
    assert a.dtype == np.uint8 and len(a) == len(b) == 49152
    assert not a.any() and not b.any()
    a[:] = 7
    assert not b.any()  # no overlap
    assert a.ctypes.data % mmap.PAGESIZE == 0 and b.ctypes.data % mmap.PAGESIZE == 0


def test_sram_from_an_arena_reads_and_writes_like_a_plain_one():
    from pe.memory import SramArena

    plain, paged = Sram(PeConfig(), "p"), Sram(PeConfig(), "q", arena=SramArena())
    for s in (plain, paged):
        d = s.alloc_array("x", "f32", (5, 3))
        d.write(s, np.arange(15, dtype=np.float32))
    assert plain.data.tobytes() == paged.data.tobytes()


def test_a_packed_sram_keeps_its_buffers_shares_pages_and_widens_when_reached_above():
    """settle() packs a built PE's SRAM to its buffers' bytes (several PEs per page); reads,
    writes, views and later allocations above the packed bytes widen it to a whole SRAM with
    the same contents."""
    from pe.memory import SramArena

    arena = SramArena()
    arena.building = True
    srams = []
    for k in range(3):
        s = Sram(PeConfig(), f"pe{k}", arena=arena)
        d = s.alloc_array("x", "f32", 5)
        d.write(s, np.arange(5, dtype=np.float32) + 10 * k)  # into the build's scratch
        s.alloc_array("y", "f32", 3)  # never written: zeros
        s.settle()
        srams.append((s, d))
    arena.building = False
    for k, (s, d) in enumerate(srams):
        assert len(s.data) == arena.PACK_ALIGN  # 32 B of buffers, packed
        assert d.read(s).tolist() == [10 * k + i for i in range(5)]
        assert s.view(20, "f32", 3).tolist() == [0, 0, 0]  # the scratch was zeroed between PEs
    # the three share one page, one after another
    first, second = srams[0][0].data, srams[1][0].data
    assert second.ctypes.data - first.ctypes.data == arena.PACK_ALIGN
    s, d = srams[1]
    far = MemDsd.vector(4096, "f32", 4)  # above the packed bytes: widened, contents kept
    far.write(s, np.ones(4, np.float32))
    assert len(s.data) == s.nbytes and d.read(s).tolist() == [10, 11, 12, 13, 14]
    assert far.read(s).tolist() == [1, 1, 1, 1]
    assert srams[2][1].read(srams[2][0]).tolist() == [20, 21, 22, 23, 24]  # neighbour untouched
    s2, d2 = srams[2]
    s2.alloc_array("big", "f32", 100)  # an allocation above the packed bytes widens too
    assert len(s2.data) == s2.nbytes and d2.read(s2).tolist() == [20, 21, 22, 23, 24]
    assert srams[0][0].image() == srams[0][0].data.tobytes() + bytes(49152 - 64)
    s0 = srams[0][0]  # raw bytes by address: widen(end) first, then index (see Sram.data)
    s0.widen(8192)[8188:8192] = 7
    assert len(s0.data) == s0.nbytes and s0.view(8188, "u32", 1).tolist() == [0x07070707]
    assert srams[0][1].read(s0).tolist() == [0, 1, 2, 3, 4]


def test_a_pe_that_writes_above_its_buffers_during_the_build_keeps_a_whole_sram():
    from pe.memory import SramArena

    arena = SramArena()
    arena.building = True
    s = Sram(PeConfig(), "p", arena=arena)
    s.alloc_array("x", "f32", 2)
    MemDsd.vector(1024, "f32", 1).write(s, np.float32(3.0))
    s.settle()
    t = Sram(PeConfig(), "q", arena=arena)  # the next PE gets a zeroed scratch
    assert not t.data.any()
    t.settle()
    assert len(s.data) == s.nbytes and s.view(1024, "f32", 1).tolist() == [3.0]


def test_values_given_to_new_buffers_wait_for_the_packed_slice_or_for_the_first_read():
    """put() during a build: the values go straight into the packed slice at settle (no
    scratch), or are written into the bytes when the PE first asks for them (a read, a view,
    a descriptor's write); either way the SRAM holds what a direct write would have written."""
    from pe.memory import SramArena

    def build(read_first: bool) -> tuple[Sram, MemDsd, MemDsd, np.ndarray]:
        arena = SramArena()
        arena.building = True
        s = Sram(PeConfig(), "p", arena=arena)
        x = s.alloc_array("x", "f32", 3)
        values = np.array([1.5, -2.0, 3.25], np.float32)
        s.put(x.base, values)  # a copy waits: the caller may change its array afterwards
        values[:] = 0
        i = s.alloc_array("i", "u16", 4)
        s.put(i.base, np.array([7, 8, 9, 10], np.uint16), owned=True)
        if read_first:  # the PE code reads its SRAM before it settles
            assert x.read(s).tolist() == [1.5, -2.0, 3.25]
            x.write(s, np.array([4.0, 5.0, 6.0], np.float32))
        s.settle()
        arena.building = False
        return s, x, i, s.image()

    s, x, i, image = build(read_first=False)
    assert len(s.data) == SramArena.PACK_ALIGN and x.read(s).tolist() == [1.5, -2.0, 3.25]
    assert i.read(s).tolist() == [7, 8, 9, 10]
    plain = Sram(PeConfig(), "q")  # the same writes on a plain SRAM: the same bytes
    plain.alloc_array("x", "f32", 3).write(plain, np.array([1.5, -2.0, 3.25], np.float32))
    plain.alloc_array("i", "u16", 4).write(plain, np.array([7, 8, 9, 10], np.uint16))
    assert image == plain.image()
    s, x, i, _ = build(read_first=True)
    assert x.read(s).tolist() == [4.0, 5.0, 6.0] and i.read(s).tolist() == [7, 8, 9, 10]


def test_stores_allocating_the_same_buffers_share_their_table_and_get_equal_descriptors():
    """Allocation steps taken before are one lookup: the same addresses and descriptors as the
    first store's, one shared table of buffers; a different step or a name taken fails or
    diverges exactly as it would have."""
    a, b = Sram(CFG, "a"), Sram(CFG, "b")
    got = []
    for s in (a, b):
        got.append((s.alloc_array("x", "f32", 5), s.alloc_array("r", "u16", (3,)),
                    s.alloc_array("m", "f32", (2, 3), order="C")))  # fmt: skip
    assert got[0] == got[1] and got[0][2].strides == (3, 1)
    assert a.buffers == b.buffers == {"x": (0, 20), "r": (20, 6), "m": (28, 24)}
    assert a.used_bytes == b.used_bytes == CFG.code_bytes + 52
    c = Sram(CFG, "c")
    c.alloc_array("x", "f32", 5)
    assert c.alloc_array("y", "f32", 1).base == 20  # another step from the shared table
    assert a.buffers["r"] == (20, 6) and "y" not in a.buffers
    with pytest.raises(BuildError, match="'x' is already allocated"):
        b.alloc_array("x", "f32", 5)
    small = dataclasses.replace(CFG, sram_bytes=CFG.code_bytes + 32)
    d = Sram(small, "d")
    d.alloc_array("x", "f32", 5)  # fits
    d.alloc_array("r", "u16", (3,))  # fits (28 bytes)
    with pytest.raises(SramOverflowError, match="allocating 'm'"):  # a step taken elsewhere
        d.alloc_array("m", "f32", (2, 3), order="C")
