"""A reader of HLO text (what ``jax.jit(f).lower(...).compile().as_text()`` prints) into the op
graph of :mod:`tpu.graph`.

What is read: the module header (``num_partitions``, ``replica_count``), every computation
(``%name (params) -> shape {`` ... ``}``, the ``ENTRY`` one and those it calls), and each
instruction's name, shape (arrays ``f32[32,512]{1,0}`` with or without a layout, tuples,
scalars), opcode, operands and the attributes the costs need. The sections JAX adds before the
computations (``FileNames``, ``FunctionNames``, ``FileLocations``, ``StackFrames``) give each
instruction's Python source line through its ``stack_frame_id``.

How each ENTRY instruction is costed (size only: shapes, no values):

- ``dot``: a matmul on the MXUs, ``m`` the lhs's free dims, ``k`` the contracting ones, ``n``
  the rhs's free dims; batch dims fold into ``m`` or ``n``, whichever keeps the larger operand's
  HBM traffic right (the chip's pipeline reads the other operand once, not once per batch);
  ``convolution``: the same as an implicit GEMM (``m`` output positions x batch, ``k`` input
  features per group x kernel window, ``n`` output features), from ``dim_labels``. Dots are
  run as the MXU runs them at JAX's default precision, bf16 passes (an f32 dot is one pass per
  tile, the chip's pipeline moves bf16 tiles);
- ``fusion``: compute if its fused computation (or one it calls) holds a dot or convolution
  (one: that matmul; several: their FLOPs as MXU passes with the fusion's operand and result
  bytes from HBM), else memory: its operands' and result's bytes through HBM;
- elementwise and data-movement ops (:data:`MEMORY_OPS`): memory, operand + result bytes;
- free (:data:`FREE_OPS`: parameters, constants, tuples, get-tuple-element, bitcast,
  partition-id...): no op;
- collectives (:data:`COLLECTIVE_OPS`), their ``-start``/``-done`` async forms and
  ``async-start``/``async-done`` wrapping one: on the ICI with their replica groups, in the old
  ``{{0,1},{2,3}}``, the iota ``[2,4]<=[4,2]T(1,0)`` and the ``mesh['a'=2,'b'=4] {'b'}`` syntax
  (empty groups: every device), ``source_target_pairs`` and ``channel_id``; bytes as
  :class:`tpu.graph.Op` defines them, from the operands' shapes;
- ``dynamic-slice`` and ``dynamic-update-slice``, alone or in a fusion: the slice read and
  written, the update in place (the buffer neither read nor copied);
- ``while`` with a ``known_trip_count`` (``jax.lax.scan``) and ``call``: their computation's
  ops, once per iteration (named ``while.22/0/op``...), tuple elements followed through the
  loop state;
- anything else (a ``while`` of unknown length, ``conditional``, ``custom-call``, ``fft``,
  ``triangular-solve``...) is refused, naming the op and its line: a rule for them would be a
  guess (their cost depends on values or on a library's kernel).

Schedule: ``order="module"`` (the default) runs the ENTRY computation in the module's order,
each op after the one before it; an async ``-start`` lets the ops after it run until its
``-done`` (then the next op also waits for the collective). ``order="dataflow"``: each op
waits only for the ops whose results it reads (the kind then lets each stream take its ready
ops out of order: what a latency-hiding scheduler could reach).

Errors are :class:`HloError` (exit status 2) naming the file and line.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from simcore.errors import ConfigError, WafersimError
from tpu.graph import Graph, Op

DTYPE_BYTES = {
    "pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4,
    "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16,
    "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3b11fnuz": 1,
    "f8e4m3": 1, "f8e3m4": 1, "f4e2m1fn": 1, "f8e8m0fnu": 1, "token": 0,
}  # fmt: skip

FREE_OPS = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "partition-id",
    "replica-id", "after-all", "opt-barrier", "domain", "add-dependency", "bitcast-convert",
})  # fmt: skip

MEMORY_OPS = frozenset({
    # elementwise
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "complex", "convert",
    "cos", "divide", "erf", "exp", "exponential", "exponential-minus-one", "expm1", "floor",
    "imag", "is-finite", "log", "log-plus-one", "log1p", "logistic", "maximum", "minimum",
    "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce-precision",
    "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "cosine",
    "sin", "sqrt", "subtract", "tan", "tanh", "xor", "stochastic-convert", "count-leading-zeros",
    # data movement and reductions
    "broadcast", "concatenate", "copy", "copy-start", "copy-done", "dynamic-slice",
    "dynamic-update-slice", "gather", "iota", "pad", "reduce", "reduce-window", "reshape",
    "reverse", "scatter", "select-and-scatter", "slice", "sort", "transpose", "map", "rng",
    "rng-bit-generator", "rng-get-and-update-state",
})  # fmt: skip

#: HLO opcode -> the collective kind of :mod:`tpu.graph`.
COLLECTIVE_OPS = {
    "all-reduce": "allreduce", "all-gather": "allgather", "reduce-scatter": "reducescatter",
    "all-to-all": "alltoall", "collective-permute": "collective-permute",
}  # fmt: skip

ORDERS = ("module", "dataflow")


class HloError(WafersimError):
    """An HLO text that cannot be read or run; the message names the file and the line."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """An array (``dtype``, ``dims``) or a tuple of shapes (``parts``)."""

    dtype: str = ""
    dims: tuple[int, ...] = ()
    parts: tuple[Shape, ...] | None = None

    @property
    def bytes(self) -> int:
        if self.parts is not None:
            return sum(p.bytes for p in self.parts)
        return DTYPE_BYTES[self.dtype] * math.prod(self.dims)

    @property
    def itemsize(self) -> int:
        if self.parts is not None:
            return self.parts[0].itemsize if self.parts else 1
        return max(1, DTYPE_BYTES[self.dtype])


@dataclasses.dataclass
class Instr:
    name: str
    shape: Shape
    opcode: str
    operands: list[str]
    attrs: dict[str, str]
    line: int
    root: bool = False
    args: str = ""  # the text between the parentheses (a parameter's number)


@dataclasses.dataclass
class Computation:
    name: str
    line: int
    instrs: list[Instr] = dataclasses.field(default_factory=list)
    by_name: dict[str, Instr] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Module:
    """A parsed HLO module: its computations, the ENTRY one, partitions and source lines."""

    path: str
    name: str
    partitions: int
    replicas: int
    computations: dict[str, Computation]
    entry: Computation
    sources: dict[int, str]  # stack_frame_id -> "file:line"

    @property
    def devices(self) -> int:
        return self.partitions * self.replicas


# -- text -> Module ------------------------------------------------------------------------------
_HEADER = re.compile(r"^HloModule\s+([^\s,]+)(.*)$")
_COMP = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*(->.*)?\{\s*$")
_INSTR = re.compile(r"^(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMMENT = re.compile(r"/\*.*?\*/")
_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


class _Reader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, line: int, what: str) -> HloError:
        return HloError(f"{self.path}:{line}: {what}")

    # shapes
    def shape(self, text: str, pos: int, line: int) -> tuple[Shape, int]:
        """The shape starting at ``text[pos]`` and the position after it (and its layout)."""
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if text.startswith("(", pos):
            parts = []
            pos += 1
            while True:
                while pos < len(text) and text[pos] == " ":
                    pos += 1
                if text.startswith(")", pos):
                    return Shape(parts=tuple(parts)), pos + 1
                part, pos = self.shape(text, pos, line)
                parts.append(part)
                while pos < len(text) and text[pos] == " ":
                    pos += 1
                if text.startswith(",", pos):
                    pos += 1
                elif not text.startswith(")", pos):
                    raise self.error(line, f"bad tuple shape near {text[pos : pos + 30]!r}")
        m = _SHAPE.match(text, pos)
        if m is None:
            raise self.error(line, f"bad shape near {text[pos : pos + 30]!r}")
        dtype = m.group(1)
        if dtype not in DTYPE_BYTES:
            raise self.error(line, f"unknown element type {dtype!r} in {m.group(0)!r}")
        dims = []
        for d in filter(None, (s.strip() for s in m.group(2).split(","))):
            d = d.removeprefix("<=")  # a dynamic dimension: its bound
            if not d.isdigit():
                raise self.error(line, f"bad dimension {d!r} in shape {m.group(0)!r}")
            dims.append(int(d))
        pos = m.end()
        if text.startswith("{", pos):  # the layout
            end = _close(text, pos, "{", "}")
            if end < 0:
                raise self.error(line, f"unclosed layout in shape {text[m.start() : pos + 30]!r}")
            pos = end + 1
        return Shape(dtype, tuple(dims)), pos

    def parse(self) -> Module:
        lines = self.lines
        first = next((i for i, s in enumerate(lines) if s.strip()), None)
        if first is None or not _HEADER.match(lines[first].strip()):
            raise self.error((first or 0) + 1, "not an HLO module (the text must start with "
                             "'HloModule NAME', as jax's compile().as_text() prints)")  # fmt: skip
        head = _HEADER.match(lines[first].strip())
        assert head is not None
        name, rest = head.group(1), head.group(2)
        partitions = _int_attr(rest, "num_partitions", 1)
        replicas = _int_attr(rest, "replica_count", 1)
        comps: dict[str, Computation] = {}
        entry: Computation | None = None
        sources = self._sources()
        i = first + 1
        while i < len(lines):
            s = lines[i].strip()
            if not s or s.startswith("//") or not (s.endswith("{") and ("->" in s or "(" in s)):
                i += 1
                continue
            m = _COMP.match(s)
            if m is None:
                raise self.error(i + 1, f"bad computation header {s[:60]!r}")
            comp = Computation(m.group(2), i + 1)
            if comp.name in comps:
                raise self.error(i + 1, f"computation {comp.name} defined twice")
            comps[comp.name] = comp
            if m.group(1):
                entry = comp
            i += 1
            closed = False
            while i < len(lines):
                s = lines[i].strip()
                if s == "}":
                    closed = True
                    break
                if s and not s.startswith("//"):
                    ins = self.instr(s, i + 1)
                    if ins.name in comp.by_name:
                        raise self.error(i + 1, f"instruction {ins.name} defined twice")
                    comp.instrs.append(ins)
                    comp.by_name[ins.name] = ins
                i += 1
            if not closed:
                raise self.error(comp.line, f"computation {comp.name} is not closed by '}}' "
                                 "(the file is truncated?)")  # fmt: skip
            i += 1
        if entry is None:
            raise self.error(len(lines), "no ENTRY computation (the file is truncated?)")
        return Module(self.path, name, partitions, replicas, comps, entry, sources)

    def instr(self, s: str, line: int) -> Instr:
        s = _COMMENT.sub("", s)  # XLA marks long tuples' elements: /*index=5*/
        m = _INSTR.match(s)
        if m is None:
            raise self.error(line, f"not an HLO instruction: {s[:60]!r}")
        root, name, rest = bool(m.group(1)), m.group(2), m.group(3)
        shape, pos = self.shape(rest, 0, line)
        om = re.compile(r"\s*([\w\-]+)\(").match(rest, pos)
        if om is None:
            raise self.error(line, f"{name}: no opcode after its shape")
        opcode = om.group(1)
        close = _close(rest, om.end() - 1, "(", ")")
        if close < 0:
            raise self.error(line, f"{name}: unclosed operand list")
        args = rest[om.end() : close]
        operands: list[str] = []
        if opcode != "constant" and args.strip():
            operands = re.findall(r"%([\w.\-]+)", args)
            if not operands:  # printed without the '%' sigils: "f32[8]{0} p0, f32[8]{0} p1"
                operands = [a.split()[-1] for a in _split(args) if a.split()]
        attrs = _attrs(rest[close + 1 :])
        return Instr(name, shape, opcode, operands, attrs, line, root, args.strip())

    def _sources(self) -> dict[int, str]:
        """stack_frame_id -> "file:line", from the sections JAX prints before the code."""
        files: dict[int, str] = {}
        locs: dict[int, str] = {}
        frames: dict[int, str] = {}
        section = ""
        for s in self.lines:
            t = s.strip()
            if t in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
                section = t
                continue
            if not t or t.startswith("%") or t.startswith("ENTRY"):
                if t:
                    break
                continue
            m = re.match(r"^(\d+)\s+(.*)$", t)
            if m is None:
                continue
            key, val = int(m.group(1)), m.group(2)
            if section == "FileNames":
                files[key] = Path(val.strip('"')).name
            elif section == "FileLocations":
                f = re.search(r"file_name_id=(\d+)", val)
                ln = re.search(r"\bline=(\d+)", val)
                if f and ln:
                    locs[key] = f"{files.get(int(f.group(1)), '?')}:{ln.group(1)}"
            elif section == "StackFrames":
                f = re.search(r"file_location_id=(\d+)", val)
                if f:
                    frames[key] = locs.get(int(f.group(1)), "")
        return frames


def _int_attr(text: str, key: str, default: int) -> int:
    m = re.search(rf"\b{key}=(\d+)", text)
    return int(m.group(1)) if m else default


def _close(text: str, pos: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at ``text[pos]`` (quotes skipped), or -1."""
    depth, i, quote = 0, pos, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c == '"':
            quote = c
        elif c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split(text: str) -> list[str]:
    """``text`` cut at its top-level commas (not inside brackets or quotes)."""
    depth, quote, cur = 0, "", []
    parts = []
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and i + 1 < len(text):
                cur.append(c + text[i + 1])
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _attrs(text: str) -> dict[str, str]:
    """``, key=value, key={...}`` -> {key: value}, commas inside brackets and quotes kept."""
    out: dict[str, str] = {}
    for p in _split(text):
        if "=" in p:
            k, v = p.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def read(path: str | Path, key: str = "hlo") -> Module:
    """Parse the HLO text at ``path``; an unreadable or malformed file is an :class:`HloError`."""
    p = str(path)
    try:
        raw = Path(p).read_bytes()
    except OSError as exc:
        raise HloError(f"config key '{key}' = {p!r}: cannot read it ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HloError(f"{p}:1: not an HLO module (not UTF-8 text)") from None
    return _Reader(p, text).parse()


# -- replica groups ------------------------------------------------------------------------------
def replica_groups(text: str, devices: int, where: str) -> tuple[tuple[int, ...], ...]:
    """The groups of a ``replica_groups=`` value in any of the three syntaxes (module doc)."""
    t = text.strip()
    if t in ("", "{}"):
        return (tuple(range(devices)),)
    if t.startswith("{"):
        groups = re.findall(r"\{([\d,\s]*)\}", t[1:-1])
        return tuple(tuple(int(x) for x in g.split(",") if x.strip()) for g in groups)
    m = re.fullmatch(r"\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?", t)
    if m:
        shape = [int(x) for x in m.group(1).split(",")]
        src = [int(x) for x in m.group(2).split(",")]
        ids = np.arange(math.prod(src)).reshape(src)
        if m.group(3):
            ids = ids.transpose([int(x) for x in m.group(3).split(",")])
        ids = ids.reshape(shape)
        return tuple(tuple(int(x) for x in row) for row in ids.reshape(shape[0], -1))
    m = re.fullmatch(r"mesh\[([^\]]*)\]\s*\{([^}]*)\}", t)
    if m:
        axes = re.findall(r"'([^']+)'\s*=\s*(\d+)", m.group(1))
        names = [a for a, _ in axes]
        sizes = [int(s) for _, s in axes]
        chosen = re.findall(r"'([^']+)'", m.group(2))
        if not axes or any(c not in names for c in chosen):
            raise HloError(f"{where}: replica_groups {t!r}: a group axis is not one of the mesh's")
        ids = np.arange(math.prod(sizes)).reshape(sizes)
        inner = [names.index(c) for c in chosen]
        outer = [i for i in range(len(names)) if i not in inner]
        size = math.prod(sizes[i] for i in inner)
        ids = ids.transpose(outer + inner).reshape(-1, size)
        return tuple(tuple(int(x) for x in row) for row in ids)
    raise HloError(f"{where}: replica_groups {t!r} is in no syntax this reader knows "
                   "({{0,1},{2,3}}, [2,4]<=[8] or mesh['a'=2] {'a'})")  # fmt: skip


def _pairs(text: str) -> tuple[tuple[int, int], ...]:
    return tuple((int(a), int(b)) for a, b in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text))


def _dims(text: str | None) -> list[int]:
    if not text:
        return []
    return [int(x) for x in re.findall(r"\d+", text)]


# -- Module -> Graph -----------------------------------------------------------------------------
@dataclasses.dataclass
class Costed:
    """One ENTRY instruction as an op of the graph (before its dependencies are known)."""

    op: Op
    instr: Instr
    async_start: bool = False


class _Coster:
    def __init__(self, mod: Module) -> None:
        self.mod = mod
        self._holds: dict[str, list[Instr]] = {}

    def where(self, ins: Instr) -> str:
        """``file:line`` of the instruction, and its Python source when JAX recorded one."""
        frame = re.search(r"stack_frame_id=(\d+)", ins.attrs.get("metadata", ""))
        src = self.mod.sources.get(int(frame.group(1)), "") if frame else ""
        loc = f"{Path(self.mod.path).name}:{ins.line}"
        return f"{loc} ({src})" if src else loc

    def refuse(self, ins: Instr, why: str) -> HloError:
        return HloError(f"{self.mod.path}:{ins.line}: {ins.opcode} {ins.name}: {why}")

    def shape_of(self, comp: Computation, name: str, ins: Instr) -> Shape:
        d = comp.by_name.get(name)
        if d is None:
            raise self.refuse(ins, f"operand %{name} is not defined in {comp.name}")
        return d.shape

    def operand_bytes(self, comp: Computation, ins: Instr) -> int:
        return sum(self.shape_of(comp, o, ins).bytes for o in ins.operands)

    def fusion_bytes(self, comp: Computation, ins: Instr, fused: Computation) -> int:
        """HBM bytes of a fusion: its operands and result, except that an operand the fused
        code only dynamic-slices is read as its slices, and a result that is a
        dynamic-update-slice of an operand is updated in place (the update's bytes written,
        that operand not read)."""
        params = {int(i.args): i.name for i in fused.instrs
                  if i.opcode == "parameter" and i.args.isdigit()}  # fmt: skip
        users: dict[str, list[Instr]] = {}
        for i in fused.instrs:
            for o in i.operands:
                users.setdefault(o, []).append(i)
        root = next((i for i in fused.instrs if i.root), None)
        while root is not None and root.opcode == "bitcast" and root.operands:
            root = fused.by_name.get(root.operands[0])
        in_place = ""
        total = ins.shape.bytes
        if root is not None and root.opcode == "dynamic-update-slice" and len(root.operands) > 1:
            in_place = root.operands[0]
            update = fused.by_name.get(root.operands[1])
            total = update.shape.bytes if update is not None else total
        for n, name in enumerate(ins.operands):
            full = self.shape_of(comp, name, ins).bytes
            inner = params.get(n, "")
            uses = users.get(inner, [])
            if inner and inner == in_place and len(uses) == 1:
                continue
            if uses and all(u.opcode == "dynamic-slice" and u.operands[0] == inner for u in uses):
                total += min(full, sum(u.shape.bytes for u in uses))
            else:
                total += full
        return total

    def called(self, ins: Instr) -> Computation:
        name = ins.attrs.get("calls", "").lstrip("%").split(",")[0].strip().lstrip("%")
        comp = self.mod.computations.get(name)
        if comp is None:
            raise self.refuse(ins, f"calls {name or 'nothing'}, which the module does not define")
        return comp

    def matmuls(self, comp: Computation, seen: frozenset[str] = frozenset()) -> list[Instr]:
        """The dots and convolutions in ``comp`` and the computations it calls."""
        if comp.name in seen:
            return []
        out = []
        for ins in comp.instrs:
            if ins.opcode in ("dot", "convolution"):
                out.append(ins)
            elif "calls" in ins.attrs:
                out += self.matmuls(self.called(ins), seen | {comp.name})
        return out

    def mkn(self, comp: Computation, ins: Instr) -> tuple[int, int, int]:
        """(m, k, n) of a dot or a convolution (batch folded as the module docstring says)."""
        if len(ins.operands) < 2:
            raise self.refuse(ins, "needs two operands")
        lhs = self.shape_of(comp, ins.operands[0], ins)
        rhs = self.shape_of(comp, ins.operands[1], ins)
        if lhs.parts is not None or rhs.parts is not None:
            raise self.refuse(ins, "an operand is a tuple")
        if ins.opcode == "convolution":
            return self._conv(ins, lhs, rhs)
        lc, rc = _dims(ins.attrs.get("lhs_contracting_dims")), _dims(
            ins.attrs.get("rhs_contracting_dims"))  # fmt: skip
        lb, rb = _dims(ins.attrs.get("lhs_batch_dims")), _dims(ins.attrs.get("rhs_batch_dims"))
        try:
            k = math.prod(lhs.dims[d] for d in lc)
            b = math.prod(lhs.dims[d] for d in lb)
            m = math.prod(s for d, s in enumerate(lhs.dims) if d not in lc and d not in lb)
            n = math.prod(s for d, s in enumerate(rhs.dims) if d not in rc and d not in rb)
            if k != math.prod(rhs.dims[d] for d in rc):
                raise self.refuse(ins, f"contracting sizes differ: {lhs.dims} x {rhs.dims}")
        except IndexError:
            raise self.refuse(ins, "a dimension number is out of its operand's rank") from None
        # batches fold into the side whose operand is the larger (it stays read once per batch)
        return (b * m, k, n) if m * k >= k * n else (m, k, b * n)

    def _conv(self, ins: Instr, lhs: Shape, rhs: Shape) -> tuple[int, int, int]:
        labels = ins.attrs.get("dim_labels", "")
        m = re.fullmatch(r"([\w]+)_([\w]+)->([\w]+)", labels)
        if m is None:
            raise self.refuse(ins, f"dim_labels {labels!r} unreadable")
        kernel = m.group(2)
        if len(kernel) != len(rhs.dims):
            raise self.refuse(ins, f"dim_labels {labels!r} do not match the kernel's rank")
        groups = int(ins.attrs.get("feature_group_count", "1") or 1)
        o = rhs.dims[kernel.index("o")]
        i = rhs.dims[kernel.index("i")]
        window = math.prod(s for c, s in zip(kernel, rhs.dims, strict=True) if c not in "io")
        out = ins.shape.bytes // max(1, ins.shape.itemsize)
        return max(1, out // max(1, o)), max(1, i * window), max(1, o // groups) * groups

    def cost(self, ins: Instr, comp: Computation) -> Op | None:
        op = ins.opcode
        where = self.where(ins)
        base = op.removesuffix("-start").removesuffix("-done")
        if op in FREE_OPS or op.endswith("-done") or op == "async-update":
            return None
        if op in ("dot", "convolution"):
            return Op(name=ins.name, cls="compute", where=where, matmul=self.mkn(comp, ins))
        if op == "fusion":
            fused = self.called(ins)
            mats = self.matmuls(fused)
            io = self.fusion_bytes(comp, ins, fused)
            if not mats:
                return Op(name=ins.name, cls="memory", where=where, bytes=io)
            if len(mats) == 1:
                return Op(name=ins.name, cls="compute", where=where,
                          matmul=self._inner_mkn(mats[0]))  # fmt: skip
            flops = sum(2 * math.prod(self._inner_mkn(d)) for d in mats)
            return Op(name=ins.name, cls="compute", where=where, flops=flops, bytes=io)
        if op == "async-start":
            inner = [i for i in self.called(ins).instrs if i.opcode in COLLECTIVE_OPS]
            if not inner:
                raise self.refuse(ins, "wraps no collective (only async collectives are run)")
            return self.collective(comp, ins, inner[0].opcode, inner[0].attrs, where)
        if base in COLLECTIVE_OPS:
            return self.collective(comp, ins, base, ins.attrs, where)
        if op == "dynamic-slice":  # reads the slice, not the buffer
            return Op(name=ins.name, cls="memory", where=where, bytes=2 * ins.shape.bytes)
        if op == "dynamic-update-slice":  # in place: the update is read and written
            update = self.shape_of(comp, ins.operands[1], ins) if len(ins.operands) > 1 else None
            nbytes = 2 * update.bytes if update is not None else ins.shape.bytes
            return Op(name=ins.name, cls="memory", where=where, bytes=nbytes)
        if op in MEMORY_OPS:
            return Op(name=ins.name, cls="memory", where=where,
                      bytes=self.operand_bytes(comp, ins) + ins.shape.bytes)  # fmt: skip
        why = "not an op this reader costs (no rule: control flow, library calls and the like "
        why += "are refused)"
        if op == "custom-call":
            why = f"custom_call_target={ins.attrs.get('custom_call_target', '?')}: " + why
        raise self.refuse(ins, why)

    def _inner_mkn(self, d: Instr) -> tuple[int, int, int]:
        comp = next(c for c in self.mod.computations.values() if c.by_name.get(d.name) is d)
        return self.mkn(comp, d)

    def collective(
        self, comp: Computation, ins: Instr, opcode: str, attrs: dict[str, str], where: str
    ) -> Op:
        kind = COLLECTIVE_OPS[opcode]
        devices = self.mod.devices
        at = f"{self.mod.path}:{ins.line}"
        operands = [self.shape_of(comp, o, ins) for o in ins.operands]
        nbytes = sum(s.bytes for s in operands)
        item = operands[0].itemsize if operands else ins.shape.itemsize
        channel = int(attrs["channel_id"]) if attrs.get("channel_id", "").isdigit() else None
        if kind == "collective-permute":
            pairs = _pairs(attrs.get("source_target_pairs", ""))
            return Op(name=ins.name, cls="collective", where=where, kind=kind, bytes=nbytes,
                      pairs=pairs, channel=channel, itemsize=item)  # fmt: skip
        groups = replica_groups(attrs.get("replica_groups", ""), devices, at)
        if kind == "allgather":
            nbytes *= len(groups[0])  # the gathered (result) buffer
        return Op(name=ins.name, cls="collective", where=where, kind=kind, bytes=nbytes,
                  groups=groups, channel=channel, itemsize=item)  # fmt: skip


#: What a value waits for: a set of op indices, or a tuple of values (a tuple's elements).
Value = frozenset[int] | tuple[Any, ...]


def _flat(v: Value) -> frozenset[int]:
    if isinstance(v, tuple):
        return frozenset().union(*(_flat(x) for x in v))
    return v


class _Emitter:
    """Walks the ENTRY computation in order, emitting ops; a ``while`` with a known trip count
    and a ``call`` emit their computation's ops in place (a loop once per iteration)."""

    def __init__(self, mod: Module, order: str) -> None:
        self.mod = mod
        self.order = order
        self.coster = _Coster(mod)
        self.ops: list[Op] = []
        self.last: set[int] = set()  # module order: what the next op waits for
        self.starts: dict[str, int] = {}  # async -start instruction (prefixed) -> its op

    def emit(self, comp: Computation, args: list[Value], prefix: str, depth: int) -> Value:
        """Emit ``comp``'s ops (its parameters waiting for ``args``); what its ROOT waits for.
        A value is the set of ops it waits for, or a tuple of values (tuples, a loop's state),
        so that ``get-tuple-element`` waits only for its element's ops."""
        if depth > 16:
            raise HloError(f"{self.mod.path}:{comp.line}: computations nested over 16 deep")
        made: dict[str, Value] = {}
        root: Value = frozenset()
        for ins in comp.instrs:
            reads = frozenset().union(*(_flat(made.get(o, frozenset())) for o in ins.operands))
            if ins.opcode == "parameter":
                n = int(ins.args) if ins.args.isdigit() else 0
                made[ins.name] = args[min(n, len(args) - 1)] if args else frozenset()
            elif ins.opcode == "tuple":
                made[ins.name] = tuple(made.get(o, frozenset()) for o in ins.operands)
            elif ins.opcode == "get-tuple-element" and ins.operands:
                whole = made.get(ins.operands[0], frozenset())
                k = int(ins.attrs.get("index", "-1") or -1)
                made[ins.name] = whole[k] if isinstance(whole, tuple) and 0 <= k < len(whole) \
                    else _flat(whole)  # fmt: skip
            elif ins.opcode in ("while", "call"):
                ins_args = [made.get(o, frozenset()) for o in ins.operands]
                made[ins.name] = self.nested(ins, ins_args, prefix, depth)
            else:
                made[ins.name] = self.one(ins, comp, set(reads), prefix)
            if ins.root:
                root = made[ins.name]
        return root

    def nested(self, ins: Instr, args: list[Value], prefix: str, depth: int) -> Value:
        name = f"{prefix}{ins.name}"
        if ins.opcode == "call":
            callee = self._computation(ins, "to_apply")
            return self.emit(callee, args, f"{name}/", depth + 1)
        trips = re.search(r'known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"',
                          ins.attrs.get("backend_config", ""))  # fmt: skip
        if trips is None:
            raise self.coster.refuse(ins, "a loop without a known trip count (its "
                                     "backend_config has no known_trip_count): its cost "
                                     "depends on values")  # fmt: skip
        body = self._computation(ins, "body")
        state: Value = args[0] if args else frozenset()
        for i in range(int(trips.group(1))):
            state = self.emit(body, [state], f"{name}/{i}/", depth + 1)
        return state

    def _computation(self, ins: Instr, key: str) -> Computation:
        name = ins.attrs.get(key, "").lstrip("%")
        comp = self.mod.computations.get(name)
        if comp is None:
            raise self.coster.refuse(ins, f"{key}={name or '?'} is not a computation of the module")
        return comp

    def one(self, ins: Instr, comp: Computation, reads: set[int], prefix: str) -> Value:
        if ins.opcode.endswith("-done") or ins.opcode == "async-done":
            start = next((self.starts[prefix + o] for o in ins.operands
                          if prefix + o in self.starts), None)  # fmt: skip
            if start is None:
                raise self.coster.refuse(ins, "its -start is not among its operands")
            if self.order == "module":
                self.last = self.last | {start}
            return frozenset({start})
        op = self.coster.cost(ins, comp)
        if op is None:
            return frozenset(reads)
        deps = reads if self.order == "dataflow" else self.last | reads
        idx = len(self.ops)
        self.ops.append(dataclasses.replace(op, name=prefix + op.name, deps=tuple(sorted(deps))))
        if ins.opcode.endswith("-start") or ins.opcode == "async-start":
            self.starts[prefix + ins.name] = idx
        elif self.order == "module":
            self.last = {idx}
        return frozenset({idx})


def to_graph(mod: Module, order: str = "module") -> Graph:
    """The module's ENTRY computation as an SPMD :class:`tpu.graph.Graph` (schedule ``order``)."""
    em = _Emitter(mod, order)
    em.emit(mod.entry, [], "", 0)
    return Graph.spmd(em.ops, mod.devices)


def check_devices(mod: Module, chips: int, topology: str) -> None:
    """The module's devices (partitions x replicas) must be the slice's chips."""
    if mod.devices != chips:
        raise ConfigError(
            "topology", topology,
            f"the HLO module {mod.path} runs on {mod.devices} devices "
            f"(num_partitions={mod.partitions}, replica_count={mod.replicas}) but this slice "
            f"has {chips} chips",
            allowed=f"a slice of {mod.devices} chips (e.g. {suggest(mod.devices)})",
        )  # fmt: skip


def suggest(n: int) -> str:
    """A 2-D slice shape of ``n`` chips, as square as it gets."""
    a = math.isqrt(n)
    while n % a:
        a -= 1
    return f"{a}x{n // a}"
