"""JIT-Q: MX quantization compiled to PIM programs and the DRAM command streams that run them.

The host-side compiler of the JIT-Q study's kernel. Given a BF16 master matrix, a format
(mx9/mx6/mx4), a direction (``row``: blocks of 16 along rows; ``col``: down columns) and a
placement, it lays the tensor out in the even banks, and produces the command stream every
pseudo-channel receives: mode changes, CRF and SRF programming, row activations and one RD or
WR trigger per executed PIM instruction. The PIM units write the quantized tensor into the odd
banks: per element a code (sign << 15 | magnitude) and a scale exponent (E_max - mu of its
pair), which :func:`numerics.mx.from_lanes` turns back into MX blocks (packing to 9/6/4 bits is left
to the reader of the copy, the GPU).

**Placements.** A unit processes *groups* of 16 words (16 x 16 elements):

- ``tiled``: the tensor is cut into 16 x 16 tiles; tile p of a unit sits row-major in 16
  consecutive words of its even bank. Row direction: each word is a block (*lane blocks*), so
  the exponent reduction needs lane shifts (a butterfly of LSHIFT + MAX) and the pair maximum
  one more. Column direction: a block is a lane across the tile's 16 words (*word blocks*).
- ``strided``: 16 tiles share a 256-word super-tile: word r*16 + c holds element (r, c) of
  tile l in lane l. Both directions give word blocks (no lane shifts), and one instruction
  serves 16 tiles; column blocks are words c, c+16, ..., c+240, spread over 8 DRAM rows, so
  column quantization opens more rows.
- ``opt``: ``strided`` with the shift-counter ALU: a variable shift costs one BSHIFT per bit
  instead of three commands (CMP, masked BSHIFT, ADD).

**Kernel** (integer lane arithmetic, see :mod:`pim.isa`), three phases on word blocks and two
on lane blocks, each a CRF program of at most 32 entries looped over a batch of groups with
JUMP, with intermediate values in the odd bank's row of the group:

1. exponents: E = the BF16 exponent field (multiply by 2, then 8 one-bit right shifts); the
   pair maxima and the block maximum E_max (MAX over words, or the lane butterfly);
2. scales and shifts: mu = (E_max > pair max), the pair's scale exponent Es = E_max - mu
   (an output), and each element's shift k = Es - E (>= 8 for zeros and subnormals, which
   flushes them);
3. significands: V = the significand << 7 (multiply by 512, two right shifts, add the hidden
   bit), V >> k by a variable shift of 8 steps, round half to even at bit 15 - m (shift, the
   remainder, the quotient's LSB, a compare), saturate to 2^m - 1, put the sign back.

The function of every instruction is :func:`pim.isa.evaluate`; nothing here computes values,
it only decides instructions and addresses. Bits read back equal :mod:`numerics.mx`'s reference.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import numpy as np

from numerics.mx import BLOCK, MANTISSA_BITS
from pim.controller import Command
from pim.device import COL_OP_MODE, COL_SRF, PseudoChannel, crf_payload
from pim.isa import LANE_DOWN, LANE_UP, SHIFT_COUNTER, SHIFT_MASKED, Instr
from pim.standard import Organisation
from simcore.errors import ConfigError

#: The study's placements, then the variants kept beside them (docs/pim/design.md).
PLACEMENTS = ("tiled", "strided", "opt", "tiled-butterfly")
#: Placements whose tiles are whole: a block of the row direction is one word (lane blocks).
TILED = ("tiled", "tiled-butterfly")
DIRECTIONS = ("row", "col")
FORMATS = tuple(MANTISSA_BITS)
WORDS_PER_GROUP = 16
SLOT_PAIR = 16  # odd-row column of the first pair/scale slot
SLOT_EMAX = 24

A = [("GRF_A", i) for i in range(8)]
B = [("GRF_B", i) for i in range(8)]
EVEN = ("EVEN_BANK", 0)
ODD = ("ODD_BANK", 0)


# -- program structure: instructions tagged with the address of their bank operand ---------------
@dataclasses.dataclass
class Op:
    instr: Instr
    tag: str | None = None  # x0/x1/x (input word), slot0/slot1/slot, pslot, emax; None: any


@dataclasses.dataclass
class Loop:
    body: list
    count: int
    var: str = ""  # "g" (groups), "j" (pairs), "w" (words), "" (repeat)


class Consts:
    """The SRF constants of one phase: value -> scalar operand (SRF_M 0-7, then SRF_A 0-7)."""

    def __init__(self) -> None:
        self.values: list[int] = []

    def __call__(self, value: int) -> tuple[str, int]:
        value &= 0xFFFF
        if value not in self.values:
            self.values.append(value)
        i = self.values.index(value)
        return ("SRF_M", i) if i < 8 else ("SRF_A", i - 8)

    def payload(self) -> np.ndarray:
        out = np.zeros(16, np.uint16)
        out[: len(self.values)] = self.values
        return out


def flatten(items: list) -> list[Instr]:
    """CRF entries: loop bodies followed by a JUMP back over them (count = repeats - 1)."""
    out: list[Instr] = []
    for it in items:
        if isinstance(it, Op):
            out.append(it.instr)
        else:
            body = flatten(it.body)
            out.extend(body)
            if it.count > 1:
                out.append(Instr("JUMP", count=it.count - 1, offset=len(body)))
    return out


def expand(items: list, env: dict[str, int]) -> Iterator[tuple[Op, dict[str, int]]]:
    """The dynamic instruction sequence (what the triggers run), with loop variables."""
    for it in items:
        if isinstance(it, Op):
            yield it, env
        else:
            for n in range(it.count):
                inner = dict(env)
                if it.var == "g":
                    inner["g"] = env.get("g0", 0) + n
                elif it.var:
                    inner[it.var] = n
                yield from expand(it.body, inner)


def _op(op: str, dst, src0=("A_OUT", 0), src1=("A_OUT", 0), tag=None, role="", **kw) -> Op:
    return Op(Instr(op, dst=dst, src0=src0, src1=src1, role=role, **kw), tag)


def _exponent(k: Consts, x_tag: str, e_reg, role_shift="shift:BSHIFT") -> list:
    """E = BF16 exponent field of the input word (sign dropped by x2, then 8 right shifts)."""
    return [
        _op("MOV", A[0], EVEN, tag=x_tag),
        _op("MUL", e_reg, A[0], k(2), integer=True),
        Loop([_op("BSHIFT", e_reg, e_reg, right=True, role=role_shift)], 8),
    ]


def _shift_of(k: Consts, es, e, tag: str) -> list:
    """k = Es - E, at least 8 where E = 0 (zeros, subnormals); written to the word's slot."""
    return [
        _op("MUL", A[6], e, k(-1), integer=True),
        _op("ADD", A[6], es, A[6], integer=True),
        _op("CMP", A[7], k(1), e),
        _op("MUL", A[7], A[7], k(-8), integer=True),
        _op("MAX", A[6], A[6], A[7]),
        _op("MOV", ODD, A[6], tag=tag),
    ]


def phase_exponents_words(k: Consts, groups: int) -> list:
    """Word blocks, phase 1: E per word (slot), pair maxima (pair slot), E_max (emax slot)."""
    pair = []
    for h, e in ((0, A[1]), (1, A[2])):
        pair += _exponent(k, f"x{h}", e)
        pair.append(_op("MOV", ODD, e, tag=f"slot{h}"))
    pair += [
        _op("MAX", A[3], A[1], A[2]),
        _op("MOV", ODD, A[3], tag="pslot"),
        _op("MAX", B[0], B[0], A[3]),
    ]
    group = [_op("MOV", B[0], k(0)), Loop(pair, 8, "j"), _op("MOV", ODD, B[0], tag="emax")]
    return [Loop(group, groups, "g")]


def phase_scales_words(k: Consts, groups: int) -> list:
    """Word blocks, phase 2: Es per pair (replaces the pair max), k per word (replaces E)."""
    pair = [
        _op("MOV", A[3], ODD, tag="pslot"),
        _op("CMP", A[4], B[0], A[3]),
        _op("ADD", A[5], B[0], A[4], integer=True),
        _op("MOV", ODD, A[5], tag="pslot"),
    ]
    for h in (0, 1):
        pair.append(_op("MOV", A[7], ODD, tag=f"slot{h}"))
        pair += _shift_of(k, A[5], A[7], f"slot{h}")
    group = [_op("MOV", B[0], ODD, tag="emax"), Loop(pair, 8, "j")]
    return [Loop(group, groups, "g")]


def phase_exponents_lanes(k: Consts, groups: int) -> list:
    """Lane blocks, the study's kernel (``tiled`` rows), phase 1: E; E_max by a linear
    reduction, 15 steps of a one-lane shift down and a MAX (lane 0 ends with the block's
    maximum), then 15 steps of a one-lane shift up and a MAX to align it in every lane; the pair
    maxima by a swap of neighbouring lanes; Es (scale slot of the word) and k (slot)."""
    sh = "shift:LSHIFT"
    down = dict(distance=1, lane_mode=LANE_DOWN, role=sh)
    up = dict(distance=1, lane_mode=LANE_UP, role=sh)
    word = _exponent(k, "x", A[1])
    word += [
        _op("LSHIFT", A[3], A[1], **down),
        _op("MAX", A[2], A[1], A[3]),
        Loop([_op("LSHIFT", A[3], A[2], **down), _op("MAX", A[2], A[2], A[3])], BLOCK - 2),
        Loop([_op("LSHIFT", A[3], A[2], **up), _op("MAX", A[2], A[2], A[3])], BLOCK - 1),
    ]
    word += _pair_scale(k)
    return [Loop([Loop(word, WORDS_PER_GROUP, "w")], groups, "g")]


def phase_exponents_butterfly(k: Consts, groups: int) -> list:
    """Lane blocks, the butterfly variant (``tiled-butterfly`` rows), phase 1: E, E_max and
    pair maxima by lane butterflies (every lane ends with the maximum after four exchanges), Es
    (scale slot of the word) and k (slot)."""
    sh = "shift:LSHIFT"
    word = _exponent(k, "x", A[1])
    word += [_op("LSHIFT", A[2], A[1], distance=8, role=sh), _op("MAX", A[2], A[1], A[2])]
    for d in (4, 2, 1):
        word += [_op("LSHIFT", A[3], A[2], distance=d, role=sh), _op("MAX", A[2], A[2], A[3])]
    word += _pair_scale(k)
    return [Loop([Loop(word, WORDS_PER_GROUP, "w")], groups, "g")]


def _pair_scale(k: Consts) -> list:
    """From E (A1) and E_max in every lane (A2): the pair maximum (a swap of neighbouring lanes),
    mu, Es = E_max - mu to the word's scale slot, and k to its slot."""
    return [
        _op("LSHIFT", A[3], A[1], distance=1, role="shift:LSHIFT"),
        _op("MAX", A[3], A[1], A[3]),
        _op("CMP", A[4], A[2], A[3]),
        _op("ADD", A[5], A[2], A[4], integer=True),
        _op("MOV", ODD, A[5], tag="wslot"),
        *_shift_of(k, A[5], A[1], "slot"),
    ]


def _shifted_significand(k: Consts, counter: bool) -> list:
    """R = (significand << 7) >> k in A4 (k from the word's slot; 8 steps at most)."""
    word = [
        _op("MOV", A[0], EVEN, tag="x"),
        _op("MUL", A[4], A[0], k(512), integer=True),
        Loop([_op("BSHIFT", A[4], A[4], right=True)], 2),
        _op("ADD", A[4], A[4], k(0x4000), integer=True),
        _op("MOV", A[5], ODD, tag="slot"),
    ]
    if counter:
        word += [
            _op("MOV", A[5], A[5], to_counter=True),
            Loop([_op("BSHIFT", A[4], A[4], right=True, lanes=SHIFT_COUNTER,
                      role="shift:BSHIFT")], 8),
        ]  # fmt: skip
    else:
        word.append(
            Loop([
                _op("CMP", A[6], A[5], k(0), role="shift:CMP"),
                _op("BSHIFT", A[4], A[4], A[6], right=True, lanes=SHIFT_MASKED,
                    role="shift:BSHIFT"),
                _op("ADD", A[5], A[5], A[6], integer=True, role="shift:ADD"),
            ], 8)
        )  # fmt: skip
    return word


def _rounded_code(k: Consts, fmt: str, sticky: bool) -> list:
    """code = sign | saturate(RNE(A4 / 2^(15 - m))) written to the slot. ``sticky``: the low
    halves of FP32 inputs lie below the rounding bit, so they only break ties: the quotient's
    LSB is replaced by max(LSB, low half != 0)."""
    m = MANTISSA_BITS[fmt]
    sh = 15 - m
    word = [
        _op("MOV", A[3], A[4]),
        Loop([_op("BSHIFT", A[3], A[3], right=True, role="shift:BSHIFT")], sh),
        _op("MUL", A[6], A[3], k(-(1 << sh)), integer=True),
        _op("ADD", A[6], A[4], A[6], integer=True),
        _op("MOV", A[7], A[3]),
        _op("BSHIFT", A[7], A[7], right=True, role="shift:BSHIFT"),
        _op("MUL", A[7], A[7], k(-2), integer=True),
        _op("ADD", A[7], A[3], A[7], integer=True),
    ]
    if sticky:
        word += [
            _op("MOV", A[1], EVEN, tag="xlo"),
            _op("CMP", A[2], A[1], k(0)),
            _op("CMP", A[1], k(0), A[1]),
            _op("ADD", A[1], A[1], A[2], integer=True),
            _op("MUL", A[1], A[1], k(-1), integer=True),
            _op("MAX", A[7], A[7], A[1]),
            _op("MOV", A[0], EVEN, tag="x"),
        ]
    word += [
        _op("ADD", A[6], A[6], A[7], integer=True),
        _op("CMP", A[6], A[6], k(1 << (sh - 1))),
        _op("MUL", A[6], A[6], k(-1), integer=True),
        _op("ADD", A[3], A[3], A[6], integer=True),
        _op("CMP", A[6], A[3], k((1 << m) - 1)),
        _op("ADD", A[3], A[3], A[6], integer=True),
        _op("CMP", A[6], k(0), A[0]),
        _op("MUL", A[6], A[6], k(0x8000), integer=True),
        _op("ADD", A[3], A[3], A[6], integer=True),
        _op("MOV", ODD, A[3], tag="slot"),
    ]
    return word


def phase_significands(k: Consts, groups: int, fmt: str, counter: bool) -> list:
    """Phase 3 (BF16): code = sign | saturate(RNE((significand << 7 >> k) / 2^(15 - m)))."""
    word = _shifted_significand(k, counter) + _rounded_code(k, fmt, sticky=False)
    return [Loop([Loop(word, WORDS_PER_GROUP, "w")], groups, "g")]


def phase_shifts(k: Consts, groups: int, counter: bool) -> list:
    """Phase 3 (FP32): R = (high half's significand << 7) >> k, written over k."""
    word = [*_shifted_significand(k, counter), _op("MOV", ODD, A[4], tag="slot")]
    return [Loop([Loop(word, WORDS_PER_GROUP, "w")], groups, "g")]


def phase_rounding(k: Consts, groups: int, fmt: str) -> list:
    """Phase 4 (FP32): the code from R, the low half as sticky bit, the sign."""
    word = [_op("MOV", A[4], ODD, tag="slot"), *_rounded_code(k, fmt, sticky=True)]
    return [Loop([Loop(word, WORDS_PER_GROUP, "w")], groups, "g")]


# -- layout ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a matrix lives: per unit slot, groups of 16 input words and their odd rows."""

    rows: int
    cols: int
    placement: str
    direction: str
    units: int  # unit slots over every pseudo-channel of every stack
    per_unit: int  # tiles (tiled) or super-tiles (strided, opt) per unit
    columns: int  # words per DRAM row
    planes: int = 1  # 16-bit planes per element: 1 (BF16), 2 (FP32: high and low halves)

    @property
    def lane_blocks(self) -> bool:
        return self.placement in TILED and self.direction == "row"

    @property
    def row_major(self) -> bool:
        """The study's ``tiled``: each unit's tiles lie row-major in its bank, a DRAM row holding
        one tile row of ``width`` tiles side by side (a stretch of one matrix row)."""
        return self.placement == "tiled"

    @property
    def width(self) -> int:
        """Words per DRAM row of one plane."""
        return self.columns // self.planes

    @property
    def groups(self) -> int:
        """Groups of 16 words each unit processes."""
        return self.per_unit * (1 if self.placement in TILED else 16)

    @property
    def input_words(self) -> int:
        if self.row_major:  # whole strips of 16 DRAM rows x width words
            return -(-self.per_unit // self.width) * 16 * self.width
        return self.per_unit * (16 if self.placement in TILED else 256)

    @functools.cached_property
    def _tile_words(self) -> np.ndarray:
        """Row-major tiles: (per_unit, 16) word offsets of tile p's row r: strip p // width,
        DRAM row strip * 16 + r, column p % width."""
        p = np.arange(self.per_unit)[:, None]
        r = np.arange(BLOCK)[None, :]
        return ((p // self.width) * BLOCK + r) * self.width + p % self.width

    @functools.cached_property
    def _row_groups(self) -> np.ndarray:
        """Row-major tiles, row direction: the used words in address order, 16 a group (a
        group's words are one DRAM row's, or two's when a strip is not 16-aligned)."""
        return np.sort(self._tile_words.ravel()).reshape(-1, WORDS_PER_GROUP)

    def group_words(self, g: int) -> np.ndarray:
        """Even-bank word offsets of group ``g``'s 16 words, in block-element order."""
        if self.row_major:
            return self._row_groups[g] if self.direction == "row" else self._tile_words[g]
        w = np.arange(WORDS_PER_GROUP)
        if self.placement in TILED:
            return g * 16 + w
        p, i = divmod(g, 16)
        if self.direction == "row":
            return p * 256 + i * 16 + w
        return p * 256 + i + 16 * w

    def word_address(self, off: int, plane: int = 0) -> tuple[int, int]:
        """(row, column) of logical word ``off`` of a plane. With two planes a row holds 16
        words of each: the high halves in columns 0-15, the low halves beside them."""
        if self.planes == 1:
            return divmod(int(off), self.columns)
        per = self.columns // 2
        row, col = divmod(int(off), per)
        return row, col + plane * per

    def tile_ids(self, u0: int = 0, u1: int | None = None) -> np.ndarray:
        """The matrix tiles (row-major tile numbers) units ``u0 .. u1 - 1`` hold, shaped
        (per_unit, units) (tiled: tile t -> unit t % units, position t // units) or (per_unit,
        units, 16) (strided, opt: super-tile s = 16 tiles, one a lane -> unit s % units,
        position s // units); numbers past the last tile are the zero padding."""
        u1 = self.units if u1 is None else u1
        ids = np.arange(self.per_unit)[:, None] * self.units + np.arange(u0, u1)[None, :]
        if self.placement in TILED:
            return ids
        return ids[:, :, None] * 16 + np.arange(16)

    def tiles(self, mat: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The 16 x 16 tiles ``ids`` of ``mat`` (shape ids.shape + (16, 16)), zero past the
        last tile."""
        tr, tc = self.rows // BLOCK, self.cols // BLOCK
        rows = mat.reshape(tr, BLOCK, tc, BLOCK)
        out = np.zeros((*ids.shape, BLOCK, BLOCK), mat.dtype)
        valid = ids < tr * tc
        t = ids[valid]
        out[valid] = rows[t // tc, :, t % tc]
        return out

    def place(self, tiles: np.ndarray) -> np.ndarray:
        """Tiles as :meth:`tile_ids` orders them -> the units' even-bank words (units,
        input_words, 16), zero-padded."""
        n = tiles.shape[1]
        if self.placement in TILED:
            per = tiles.transpose(1, 0, 2, 3)  # unit, position, r, c: a tile is 16 words
            if self.row_major:
                out = np.zeros((n, self.input_words, BLOCK), tiles.dtype)
                out[:, self._tile_words] = per
                return out
            return per.reshape(n, self.input_words, BLOCK)
        # position, unit, lane, r, c -> unit, position, r, c, lane: word r*16+c of a super-tile
        return tiles.transpose(1, 0, 3, 4, 2).reshape(n, self.input_words, BLOCK)

    def scatter(self, mat: np.ndarray, u0: int = 0, u1: int | None = None) -> np.ndarray:
        """(units, input_words, 16) uint16: each unit's even-bank words, zero-padded (units
        ``u0 .. u1 - 1``, all by default)."""
        return self.place(self.tiles(mat, self.tile_ids(u0, u1)))

    def gather(self, words: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`scatter` for (units, input_words, 16) arrays."""
        tr, tc = self.rows // BLOCK, self.cols // BLOCK
        if self.placement in TILED:
            if self.row_major:
                words = words[:, self._tile_words]
            per = words.reshape(self.units, self.per_unit, BLOCK, BLOCK).transpose(1, 0, 2, 3)
            tiles = per.reshape(-1, BLOCK, BLOCK)[: tr * tc]
        else:
            w = words.reshape(self.units, self.per_unit, BLOCK, BLOCK, 16)
            tiles = w.transpose(1, 0, 4, 2, 3).reshape(-1, BLOCK, BLOCK)[: tr * tc]
        return (
            tiles.reshape(tr, tc, BLOCK, BLOCK).transpose(0, 2, 1, 3).reshape(self.rows, self.cols)
        )


def make_layout(
    rows: int,
    cols: int,
    placement: str,
    direction: str,
    org: Organisation,
    pchs: int,
    planes: int = 1,
) -> Layout:
    """Check shapes and capacity; ``pchs`` is every pseudo-channel of every stack."""
    if placement not in PLACEMENTS:
        raise ConfigError(
            "placement", placement, "unknown placement", allowed=", ".join(PLACEMENTS)
        )
    if direction not in DIRECTIONS:
        raise ConfigError(
            "direction", direction, "unknown direction", allowed=", ".join(DIRECTIONS)
        )
    for key, n in (("rows", rows), ("cols", cols)):
        if n % BLOCK:
            raise ConfigError(
                key, n, f"does not tile into {BLOCK}-element MX blocks (the kernel refuses, it "
                "does not pad)", hint=f"pad the tensor to a multiple of {BLOCK}",
            )  # fmt: skip
    units = pchs * org.banks // 2
    tiles = (rows // BLOCK) * (cols // BLOCK)
    per_unit = -(-tiles // units) if placement in TILED else -(-tiles // (16 * units))
    lay = Layout(rows, cols, placement, direction, units, per_unit, org.columns, planes)
    data_rows = org.rows - 3
    need = max(-(-lay.input_words * lay.planes // org.columns), lay.groups)
    if need > data_rows:
        cap = units * data_rows * WORDS_PER_GROUP * BLOCK
        raise ConfigError(
            "rows", rows, f"a {rows} x {cols} BF16 tensor needs {need:,} rows per bank but a bank "
            f"has {data_rows:,} data rows (one odd-bank row per group of 256 elements: at most "
            f"{cap:,} elements in the stacks)",
            hint="use a smaller tensor or more stacks (hbm.stacks)",
        )  # fmt: skip
    return lay


# -- the command stream -------------------------------------------------------------------------
@dataclasses.dataclass
class Plan:
    layout: Layout
    fmt: str
    stream: list[Command]
    phases: list[list[Instr]]
    batch_groups: int


#: Address codes of :func:`_template`: an even-bank input word (plane 0 or 1), an odd column.
_PLANE0, _PLANE1, _ODD = 0, 1, 2


def _template(items: list) -> list[tuple[str, int, int, int]]:
    """The triggers of a phase over groups 0 .. n - 1, as (RD or WR, address code, index,
    group): code _PLANE0/_PLANE1 with the index of a word of the group, or _ODD with a column
    of the group's odd row (the slots of the module docstring; an untagged instruction takes the
    address of the next tagged one, or of the last one). A batch adds its first group."""
    dyn = list(expand(items, {"g0": 0}))
    addr: list[tuple[int, int, int] | None] = []
    for op, env in dyn:
        tag = op.tag
        if tag is None:
            addr.append(None)
        elif tag in ("x", "x0", "x1", "xlo"):
            w = env["w"] % WORDS_PER_GROUP if tag in ("x", "xlo") else 2 * env["j"] + int(tag[1])
            addr.append((_PLANE1 if tag == "xlo" else _PLANE0, w, env["g"]))
        elif tag in ("slot", "slot0", "slot1"):
            w = env["w"] % WORDS_PER_GROUP if tag == "slot" else 2 * env["j"] + int(tag[-1])
            addr.append((_ODD, w, env["g"]))
        elif tag == "pslot":
            addr.append((_ODD, SLOT_PAIR + env["j"], env["g"]))
        elif tag == "wslot":
            addr.append((_ODD, SLOT_PAIR + env["w"] % WORDS_PER_GROUP, env["g"]))
        else:  # emax
            addr.append((_ODD, SLOT_EMAX, env["g"]))
    nxt = None
    for i in range(len(addr) - 1, -1, -1):  # untagged: where the next tagged one is
        if addr[i] is None:
            addr[i] = nxt
        else:
            nxt = addr[i]
    out = []
    last = None
    for (op, _env), a in zip(dyn, addr, strict=True):
        a = a or last
        last = a
        assert a is not None
        is_write = op.instr.dst[0] in ("EVEN_BANK", "ODD_BANK")
        out.append(("WR" if is_write else "RD", a[0], a[1], a[2]))
    return out


def _word_addresses(lay: Layout, g: int) -> list[list[tuple[int, int]]]:
    """(row, column) of group ``g``'s 16 input words, per plane."""
    words = lay.group_words(g).tolist()
    return [[lay.word_address(w, plane) for w in words] for plane in range(lay.planes)]


def compile_jitq(
    lay: Layout, fmt: str, *, batch_groups: int = 8, conf_row: int, abmr_row: int, sbmr_row: int
) -> Plan:
    """The command stream that quantizes every unit's groups (the same for every pCH)."""
    if fmt not in FORMATS:
        raise ConfigError("format", fmt, "unknown MX format", allowed=", ".join(FORMATS))
    counter = lay.placement == "opt"
    stream: list[Command] = [Command("ACT", 0, abmr_row), Command("PRE", 0)]
    open_rows = [-1, -1]
    phases_seen: list[list[Instr]] = []
    templates: dict[tuple[str, int], list[tuple[str, int, int, int]]] = {}
    addresses: dict[int, list[list[tuple[int, int]]]] = {}
    new = tuple.__new__

    def goto(parity: int, row: int) -> None:
        if open_rows[parity] != row:
            if open_rows[parity] >= 0:
                stream.append(Command("PRE", parity))
            stream.append(Command("ACT", parity, row))
            open_rows[parity] = row

    for first in range(0, lay.groups, batch_groups):
        n = min(batch_groups, lay.groups - first)
        lanes = phase_exponents_lanes if lay.placement == "tiled" else phase_exponents_butterfly
        builders = (
            [lambda k, n=n, lanes=lanes: lanes(k, n)]
            if lay.lane_blocks
            else [lambda k, n=n: phase_exponents_words(k, n),
                  lambda k, n=n: phase_scales_words(k, n)]
        )  # fmt: skip
        names = ["exponents+scales"] if lay.lane_blocks else ["exponents", "scales"]
        if lay.planes == 1:
            builders.append(lambda k, n=n: phase_significands(k, n, fmt, counter))
            names.append("significands")
        else:
            builders.append(lambda k, n=n: phase_shifts(k, n, counter))
            builders.append(lambda k, n=n: phase_rounding(k, n, fmt))
            names += ["shifts", "rounding"]
        for name, build in zip(names, builders, strict=True):
            k = Consts()
            items = build(k)
            program = [*flatten(items), Instr("EXIT")]
            if first == 0:
                phases_seen.append(program)
            # program the CRF and SRF, enter AB-PIM (the register row opened on the even side)
            goto(0, conf_row)
            stream.append(Command("WR", 0, conf_row, COL_OP_MODE, np.zeros(16, np.uint16)))
            for i, (col, data) in enumerate(crf_payload(program)):
                note = ([ins.role for ins in program], name) if i == 0 else None
                stream.append(Command("WR", 0, conf_row, col, data, note))
            stream.append(Command("WR", 0, conf_row, COL_SRF, k.payload()))
            mode = np.zeros(16, np.uint16)
            mode[0] = 1
            stream.append(Command("WR", 0, conf_row, COL_OP_MODE, mode))
            # the triggers, one per executed instruction, with the rows they need
            key = (name, n)
            if key not in templates:
                templates[key] = _template(items)
            for cmd, code, a, dg in templates[key]:
                g = first + dg
                if code == _ODD:
                    parity, row, col = 1, g, a
                else:
                    words = addresses.get(g)
                    if words is None:
                        words = addresses[g] = _word_addresses(lay, g)
                    parity = 0
                    row, col = words[code][a]
                if open_rows[parity] != row:
                    goto(parity, row)
                stream.append(new(Command, (cmd, parity, row, col, None, None)))
    goto(0, conf_row)  # leave AB-PIM, then AB -> SB
    stream.append(Command("WR", 0, conf_row, COL_OP_MODE, np.zeros(16, np.uint16)))
    stream += [Command("PREA", 0), Command("ACT", 0, sbmr_row), Command("PREA", 0)]
    return Plan(lay, fmt, stream, phases_seen, batch_groups)


def load(pch: PseudoChannel, lay: Layout, planes: list[np.ndarray]) -> None:
    """Put one pseudo-channel's units' input words, per plane (units, input_words, 16), in its
    even banks (the master copy is resident before JIT-Q runs: not a timed transfer)."""
    per = pch.ncols // lay.planes
    for plane, words in enumerate(planes):
        n = words.shape[1]
        for r in range(-(-n // per)):
            chunk = words[:, r * per : (r + 1) * per]
            col = plane * per
            pch.row(r)[0::2, col : col + chunk.shape[1]] = chunk


def read_back(pch: PseudoChannel, lay: Layout) -> tuple[np.ndarray, np.ndarray]:
    """The codes and scale exponents the units wrote, as (units, input_words, 16) arrays in
    the input's word order."""
    units = pch.nbanks // 2
    codes = np.zeros((units, lay.input_words, 16), np.uint16)
    scale = np.zeros_like(codes)
    for g in range(lay.groups):
        row = pch.row(g)[1::2]  # (units, columns, 16)
        words = lay.group_words(g)
        codes[:, words] = row[:, :WORDS_PER_GROUP]
        if lay.lane_blocks:
            scale[:, words] = row[:, SLOT_PAIR : SLOT_PAIR + WORDS_PER_GROUP]
        else:
            pairs = row[:, SLOT_PAIR : SLOT_PAIR + WORDS_PER_GROUP // 2]
            scale[:, words] = np.repeat(pairs, 2, axis=1)
    return codes, scale
