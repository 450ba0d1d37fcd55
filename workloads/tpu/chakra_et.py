"""Chakra execution traces: our own reader and writer of the MLCommons format, in pure Python.

A Chakra execution trace (ET) describes one rank's (one NPU's) work as a graph of nodes; a
workload on N ranks is N files, ``PREFIX.0.et`` .. ``PREFIX.{N-1}.et``. The format is defined by
``schema/protobuf/et_def.proto`` of github.com/mlcommons/chakra (read at commit
21585d8f2d65603d791d2121e3d4632351120262); the field numbers and enum values below are that
file's (facts of the format, not code). A file is a sequence of protobuf messages, each preceded
by its length as a varint (``src/third_party/utils/protolib.py`` there: ``encodeMessage``): one
``GlobalMetadata`` first, then ``Node`` messages. A file may be gzip-compressed (the reference
reader accepts both; so does this one).

This module decodes the protobuf wire format itself (varints, zigzag, fixed32/64,
length-delimited fields; packed and unpacked repeated scalars; unknown fields skipped, as
protobuf readers must), so neither the ``protobuf`` nor the ``chakra`` package is needed. A
malformed file is a :class:`ChakraError` naming the file and the byte offset (or the node id)
where reading failed. :func:`encode_trace` writes the same format (the project's test traces
are made with it: ``tests/data/chakra/make_chakra.py``).

What is decoded: ``GlobalMetadata`` (``version``, ``attr``) and every field of ``Node`` (``id``,
``name``, ``type``, ``ctrl_deps``, ``data_deps``, ``start_time_micros``, ``duration_micros``,
``inputs``/``outputs`` (``IOInfo``: three strings), ``attr``); an ``AttributeProto``'s value is
any of its oneof's 30 fields (scalars and ``...List`` messages), decoded to Python values.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from simcore.errors import WafersimError

#: Where the format is defined (docs cite it).
SCHEMA = "github.com/mlcommons/chakra schema/protobuf/et_def.proto"
SCHEMA_COMMIT = "21585d8f2d65603d791d2121e3d4632351120262"

# -- enums of et_def.proto ---------------------------------------------------------------------
#: ``NodeType``.
NODE_TYPES = {
    0: "INVALID_NODE",
    1: "METADATA_NODE",
    2: "MEM_LOAD_NODE",
    3: "MEM_STORE_NODE",
    4: "COMP_NODE",
    5: "COMM_SEND_NODE",
    6: "COMM_RECV_NODE",
    7: "COMM_COLL_NODE",
}
NODE_TYPE = {v: k for k, v in NODE_TYPES.items()}
#: ``CollectiveCommType``.
COMM_TYPES = {
    0: "ALL_REDUCE",
    1: "REDUCE",
    2: "ALL_GATHER",
    3: "GATHER",
    4: "SCATTER",
    5: "BROADCAST",
    6: "ALL_TO_ALL",
    7: "REDUCE_SCATTER",
    8: "REDUCE_SCATTER_BLOCK",
    9: "BARRIER",
}
COMM_TYPE = {v: k for k, v in COMM_TYPES.items()}

# -- wire format ---------------------------------------------------------------------------------
VARINT, I64, LEN, I32 = 0, 1, 2, 5
WIRE_NAMES = {0: "varint", 1: "fixed64", 2: "length-delimited", 3: "start-group",
              4: "end-group", 5: "fixed32"}  # fmt: skip

#: ``AttributeProto``'s oneof ``value``: field number -> scalar type. Field n+1 (even) is the
#: ``...List`` message of the same type (``repeated T values = 1``).
ATTR_SCALARS = {
    3: "double", 5: "float", 7: "int32", 9: "int64", 11: "uint32", 13: "uint64", 15: "sint32",
    17: "sint64", 19: "fixed32", 21: "fixed64", 23: "sfixed32", 25: "sfixed64", 27: "bool",
    29: "string", 31: "bytes",
}  # fmt: skip
ATTR_FIELD = {t: n for n, t in ATTR_SCALARS.items()}
#: The wire type of each scalar type.
SCALAR_WIRE = {
    "double": I64, "float": I32, "int32": VARINT, "int64": VARINT, "uint32": VARINT,
    "uint64": VARINT, "sint32": VARINT, "sint64": VARINT, "fixed32": I32, "fixed64": I64,
    "sfixed32": I32, "sfixed64": I64, "bool": VARINT, "string": LEN, "bytes": LEN,
}  # fmt: skip
#: Integer scalar types (an attribute read as an integer may hold any of them).
INT_TYPES = ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
             "sfixed32", "sfixed64")  # fmt: skip


class ChakraError(WafersimError):
    """A Chakra trace that cannot be read (the message names the file and the byte offset or
    node id)."""


class WireError(Exception):
    """Malformed wire data at absolute byte ``offset`` (the reader adds the file's name)."""

    def __init__(self, offset: int, problem: str) -> None:
        self.offset = offset
        self.problem = problem
        super().__init__(f"byte {offset}: {problem}")


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at ``buf[pos]`` (at most 10 bytes, before ``end``) and the position
    after it."""
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise WireError(start, "truncated varint (the data ends inside it)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >> 64:
                raise WireError(start, "varint longer than 64 bits")
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError(start, "varint longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    """``value`` (0 .. 2**64-1; a negative int64 as its two's complement) as a varint."""
    if value < 0:
        value += 1 << 64
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{value} does not fit in a 64-bit varint")
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(0x80 | bits)
        else:
            out.append(bits)
            return bytes(out)


def zigzag_decode(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def zigzag_encode(n: int) -> int:
    return (n << 1) ^ (n >> 63) if n < 0 else n << 1


def _signed(n: int, bits: int) -> int:
    n &= (1 << bits) - 1
    return n - (1 << bits) if n >> (bits - 1) else n


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a message as read: number, wire type, offset of its key, and its value (an
    int for varint / fixed32 / fixed64, the ``(start, end)`` of the payload for
    length-delimited)."""

    number: int
    wire: int
    offset: int
    value: Any


def fields(buf: bytes, pos: int, end: int) -> Iterable[Field]:
    """The fields of the message in ``buf[pos:end]``, in order."""
    while pos < end:
        key_at = pos
        key, pos = read_varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(key_at, "field number 0 (not a protobuf message here)")
        value: Any
        if wire == VARINT:
            value, pos = read_varint(buf, pos, end)
        elif wire == I64:
            if pos + 8 > end:
                raise WireError(key_at, f"field {number}: truncated fixed64")
            value = int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire == I32:
            if pos + 4 > end:
                raise WireError(key_at, f"field {number}: truncated fixed32")
            value = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        elif wire == LEN:
            n, pos = read_varint(buf, pos, end)
            if pos + n > end:
                raise WireError(
                    key_at, f"field {number}: length {n} runs past the end of its message"
                )
            value = (pos, pos + n)
            pos += n
        else:
            name = WIRE_NAMES.get(wire, "invalid")
            raise WireError(key_at, f"field {number}: wire type {wire} ({name}) is not used here")
        yield Field(number, wire, key_at, value)


def _expect(f: Field, wire: int, message: str, name: str) -> None:
    if f.wire != wire:
        raise WireError(
            f.offset, f"{message}.{name} (field {f.number}) has wire type {f.wire} "
            f"({WIRE_NAMES.get(f.wire, 'invalid')}), the schema says {WIRE_NAMES[wire]}",
        )  # fmt: skip


def _text(buf: bytes, f: Field, message: str, name: str) -> str:
    _expect(f, LEN, message, name)
    a, b = f.value
    try:
        return buf[a:b].decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f.offset, f"{message}.{name} is not UTF-8 text") from None


def _scalar(kind: str, raw: int) -> Any:
    """A scalar decoded from its raw varint / fixed value."""
    if kind in ("int64", "sfixed64"):
        return _signed(raw, 64)
    if kind in ("int32", "sfixed32"):
        return _signed(raw, 32)
    if kind in ("sint32", "sint64"):
        return zigzag_decode(raw)
    if kind == "uint32":
        return raw & 0xFFFFFFFF
    if kind == "bool":
        return raw != 0
    if kind == "double":
        return struct.unpack("<d", raw.to_bytes(8, "little"))[0]
    if kind == "float":
        return struct.unpack("<f", raw.to_bytes(4, "little"))[0]
    return raw  # uint64, fixed32, fixed64


def _packed(buf: bytes, f: Field, kind: str) -> list[Any]:
    """The values of a packed repeated scalar field."""
    a, b = f.value
    wire = SCALAR_WIRE[kind]
    out: list[Any] = []
    pos = a
    while pos < b:
        if wire == VARINT:
            raw, pos = read_varint(buf, pos, b)
        else:
            size = 8 if wire == I64 else 4
            if pos + size > b:
                raise WireError(pos, f"packed {kind} values end inside a value")
            raw = int.from_bytes(buf[pos : pos + size], "little")
            pos += size
        out.append(_scalar(kind, raw))
    return out


# -- messages -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Attr:
    """An ``AttributeProto``: ``name``, its value, and the value's type (``int64``,
    ``string``...; a list's is ``int64_list``...; ``""`` when the oneof is unset)."""

    name: str
    value: Any
    type: str = ""
    doc_string: str = ""


@dataclasses.dataclass(frozen=True)
class IOInfo:
    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Node:
    """A ``Node`` of the trace; ``offset`` is where its message starts in the file."""

    id: int
    name: str = ""
    type: int = 0
    ctrl_deps: tuple[int, ...] = ()
    data_deps: tuple[int, ...] = ()
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: tuple[Attr, ...] = ()
    offset: int = 0

    @property
    def type_name(self) -> str:
        return NODE_TYPES.get(self.type, f"NodeType {self.type}")

    def attr(self, name: str) -> Attr | None:
        """The last attribute named ``name`` (None if there is none)."""
        found = None
        for a in self.attrs:
            if a.name == name:
                found = a
        return found


@dataclasses.dataclass(frozen=True)
class Trace:
    """One rank's trace: its file, the metadata's ``version`` and attributes, the nodes in file
    order."""

    path: str
    version: str
    metadata: tuple[Attr, ...]
    nodes: tuple[Node, ...]


def decode_attr(buf: bytes, a: int, b: int) -> Attr:
    name, doc, kind = "", "", ""
    value: Any = None
    for f in fields(buf, a, b):
        n = f.number
        if n == 1:
            name = _text(buf, f, "AttributeProto", "name")
        elif n == 2:
            doc = _text(buf, f, "AttributeProto", "doc_string")
        elif n in ATTR_SCALARS:
            kind = ATTR_SCALARS[n]
            _expect(f, SCALAR_WIRE[kind], "AttributeProto", f"{kind}_val")
            if kind == "string":
                value = _text(buf, f, "AttributeProto", "string_val")
            elif kind == "bytes":
                value = bytes(buf[f.value[0] : f.value[1]])
            else:
                value = _scalar(kind, f.value)
        elif n - 1 in ATTR_SCALARS and n <= 32:
            item = ATTR_SCALARS[n - 1]
            kind = f"{item}_list"
            _expect(f, LEN, "AttributeProto", kind)
            value = _decode_list(buf, f.value[0], f.value[1], item)
    return Attr(name, value, kind, doc)


def _decode_list(buf: bytes, a: int, b: int, item: str) -> list[Any]:
    out: list[Any] = []
    wire = SCALAR_WIRE[item]
    for f in fields(buf, a, b):
        if f.number != 1:
            continue
        if item in ("string", "bytes"):
            _expect(f, LEN, f"{item} list", "values")
            raw = bytes(buf[f.value[0] : f.value[1]])
            if item == "string":
                try:
                    out.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    raise WireError(f.offset, "a string list value is not UTF-8") from None
            else:
                out.append(raw)
        elif f.wire == LEN:
            out.extend(_packed(buf, f, item))
        else:
            _expect(f, wire, f"{item} list", "values")
            out.append(_scalar(item, f.value))
    return out


def decode_metadata(buf: bytes, a: int, b: int) -> tuple[str, tuple[Attr, ...]]:
    version, attrs = "", []
    for f in fields(buf, a, b):
        if f.number == 1:
            version = _text(buf, f, "GlobalMetadata", "version")
        elif f.number == 2:
            _expect(f, LEN, "GlobalMetadata", "attr")
            attrs.append(decode_attr(buf, *f.value))
    return version, tuple(attrs)


def _uint64s(buf: bytes, f: Field, name: str) -> list[int]:
    if f.wire == LEN:
        return _packed(buf, f, "uint64")
    _expect(f, VARINT, "Node", name)
    return [f.value]


def _ioinfo(buf: bytes, f: Field, name: str) -> IOInfo:
    _expect(f, LEN, "Node", name)
    got = {1: "", 2: "", 3: ""}
    for g in fields(buf, *f.value):
        if g.number in got:
            got[g.number] = _text(buf, g, "IOInfo", ("values", "shapes", "types")[g.number - 1])
    return IOInfo(got[1], got[2], got[3])


def decode_node(buf: bytes, a: int, b: int, offset: int) -> Node:
    """The ``Node`` message in ``buf[a:b]`` (``offset``: where its length prefix starts)."""
    kw: dict[str, Any] = {"id": 0}
    ctrl: list[int] = []
    data: list[int] = []
    attrs: list[Attr] = []
    for f in fields(buf, a, b):
        n = f.number
        if n in (1, 3, 6, 7):
            name = {1: "id", 3: "type", 6: "start_time_micros", 7: "duration_micros"}[n]
            _expect(f, VARINT, "Node", name)
            kw[name] = _signed(f.value, 32) if n == 3 else f.value
        elif n == 2:
            kw["name"] = _text(buf, f, "Node", "name")
        elif n == 4:
            ctrl.extend(_uint64s(buf, f, "ctrl_deps"))
        elif n == 5:
            data.extend(_uint64s(buf, f, "data_deps"))
        elif n in (8, 9):
            kw["inputs" if n == 8 else "outputs"] = _ioinfo(
                buf, f, "inputs" if n == 8 else "outputs"
            )
        elif n == 10:
            _expect(f, LEN, "Node", "attr")
            attrs.append(decode_attr(buf, *f.value))
    return Node(**kw, ctrl_deps=tuple(ctrl), data_deps=tuple(data), attrs=tuple(attrs),
                offset=offset)  # fmt: skip


def _messages(buf: bytes) -> Iterable[tuple[int, int, int]]:
    """(offset of the length prefix, payload start, payload end) of each length-delimited
    message of a file."""
    pos, end = 0, len(buf)
    while pos < end:
        at = pos
        n, pos = read_varint(buf, pos, end)
        if pos + n > end:
            raise WireError(
                at, f"a message of {n} bytes is announced but only {end - pos} bytes follow "
                "(the file is truncated)",
            )  # fmt: skip
        yield at, pos, pos + n
        pos += n


def decode_trace(buf: bytes, path: str = "<bytes>") -> Trace:
    """Decode one rank's trace file content (gzip-compressed or not)."""
    if buf[:2] == b"\x1f\x8b":
        try:
            buf = gzip.decompress(buf)
        except (OSError, EOFError) as exc:
            raise ChakraError(f"{path}: a gzip file that does not decompress ({exc})") from None
    if not buf:
        raise ChakraError(f"{path}: empty file; a Chakra trace starts with a GlobalMetadata "
                          "message")  # fmt: skip
    try:
        msgs = iter(_messages(buf))
        at, a, b = next(msgs)
        first = list(fields(buf, a, b))
        if not first or any(f.number > 2 or f.wire != LEN for f in first):
            raise ChakraError(
                f"{path}: byte {at}: the first message is not a GlobalMetadata (it has "
                + ("no fields" if not first else "fields a GlobalMetadata does not: a Node?")
                + "); a Chakra trace starts with one"
            )
        version, meta = decode_metadata(buf, a, b)
        nodes = [decode_node(buf, a, b, at) for at, a, b in msgs]
    except WireError as exc:
        raise ChakraError(f"{path}: byte {exc.offset}: {exc.problem}") from None
    return Trace(path, version, meta, tuple(nodes))


def read_trace(path: str) -> Trace:
    """Read and decode one rank's trace file."""
    try:
        with open(path, "rb") as fh:
            buf = fh.read()
    except OSError as exc:
        raise ChakraError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    return decode_trace(buf, path)


# -- a set of ranks -----------------------------------------------------------------------------
RANK_FILE = re.compile(r"^(?P<prefix>.*)\.(?P<rank>\d+)\.et(?:\.gz)?$")


def rank_files(et: str) -> list[str]:
    """The files of a trace set, rank 0 first. ``et`` is a folder holding one set
    (``NAME.{rank}.et``), one rank's file of a set (its siblings are found), a prefix (as
    ASTRA-sim's ``--workload-configuration``: ``PREFIX.{rank}.et``), or a single file of any
    other name (one rank)."""
    if os.path.isdir(et):
        found: dict[str, dict[int, str]] = {}
        for name in sorted(os.listdir(et)):
            m = RANK_FILE.match(name)
            if m:
                found.setdefault(m["prefix"], {})[int(m["rank"])] = os.path.join(et, name)
        if not found:
            raise ChakraError(f"{et}: a folder with no trace files (NAME.RANK.et)")
        if len(found) > 1:
            raise ChakraError(f"{et}: a folder with {len(found)} trace sets "
                              f"({', '.join(sorted(found))}); give the prefix of one")  # fmt: skip
        (ranks,) = found.values()
        return _contiguous(et, ranks)
    m = RANK_FILE.match(os.path.basename(et))
    if os.path.isfile(et) and not m:
        return [et]
    prefix = os.path.join(os.path.dirname(et), m["prefix"]) if m else et
    folder = os.path.dirname(prefix) or "."
    base = os.path.basename(prefix)
    ranks = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    for name in names:
        mm = RANK_FILE.match(name)
        if mm and mm["prefix"] == base:
            ranks[int(mm["rank"])] = os.path.join(folder, name)
    if not ranks:
        raise ChakraError(f"{et}: no trace files {prefix}.RANK.et")
    return _contiguous(prefix, ranks)


def _contiguous(where: str, ranks: dict[int, str]) -> list[str]:
    want = range(len(ranks))
    missing = [r for r in range(max(ranks) + 1) if r not in ranks]
    if missing:
        raise ChakraError(
            f"{where}: ranks {sorted(ranks)} are there but rank {missing[0]} is missing "
            "(a set is ranks 0..N-1, one file each)"
        )
    return [ranks[r] for r in want]


# -- writing ------------------------------------------------------------------------------------
def _key(number: int, wire: int) -> bytes:
    return encode_varint(number << 3 | wire)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, LEN) + encode_varint(len(payload)) + payload


def _scalar_bytes(kind: str, value: Any) -> bytes:
    if kind in ("sint32", "sint64"):
        return encode_varint(zigzag_encode(int(value)))
    if kind == "bool":
        return encode_varint(1 if value else 0)
    if kind in ("int32", "int64", "uint32", "uint64"):
        return encode_varint(int(value))
    fmt = {"double": "<d", "float": "<f", "fixed32": "<I", "fixed64": "<Q", "sfixed32": "<i",
           "sfixed64": "<q"}[kind]  # fmt: skip
    return struct.pack(fmt, value)


def encode_attr(attr: Attr) -> bytes:
    """An ``AttributeProto``. ``attr.type`` names the oneof field (``int64``, ``string``,
    ``int64_list``...); empty: from the value (bool, int -> int64, float -> double, str, bytes)."""
    kind = attr.type or _infer(attr.value)
    out = _len_field(1, attr.name.encode()) if attr.name else b""
    if attr.doc_string:
        out += _len_field(2, attr.doc_string.encode())
    if kind.endswith("_list"):
        item = kind[: -len("_list")]
        body = b""
        if item in ("string", "bytes"):
            for v in attr.value:
                body += _len_field(1, v.encode() if isinstance(v, str) else v)
        elif attr.value:
            body = _len_field(1, b"".join(_scalar_bytes(item, v) for v in attr.value))
        return out + _len_field(ATTR_FIELD[item] + 1, body)
    number = ATTR_FIELD[kind]
    if kind == "string":
        return out + _len_field(number, attr.value.encode())
    if kind == "bytes":
        return out + _len_field(number, bytes(attr.value))
    return out + _key(number, SCALAR_WIRE[kind]) + _scalar_bytes(kind, attr.value)


def _infer(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    raise ValueError(f"give the attribute type of {value!r}")


def encode_node(node: Node) -> bytes:
    """A ``Node`` message (fields at their default values are left out, as protobuf does)."""
    out = b""
    if node.id:
        out += _key(1, VARINT) + encode_varint(node.id)
    if node.name:
        out += _len_field(2, node.name.encode())
    if node.type:
        out += _key(3, VARINT) + encode_varint(node.type)
    for number, deps in ((4, node.ctrl_deps), (5, node.data_deps)):
        if deps:
            out += _len_field(number, b"".join(encode_varint(d) for d in deps))
    for number, value in ((6, node.start_time_micros), (7, node.duration_micros)):
        if value:
            out += _key(number, VARINT) + encode_varint(value)
    for number, io in ((8, node.inputs), (9, node.outputs)):
        if io is not None:
            body = b"".join(
                _len_field(i, s.encode())
                for i, s in ((1, io.values), (2, io.shapes), (3, io.types))
                if s
            )
            out += _len_field(number, body)
    for a in node.attrs:
        out += _len_field(10, encode_attr(a))
    return out


def encode_metadata(version: str, attrs: Sequence[Attr] = ()) -> bytes:
    out = _len_field(1, version.encode()) if version else b""
    for a in attrs:
        out += _len_field(2, encode_attr(a))
    return out


def encode_trace(nodes: Sequence[Node], version: str = "0.0.4",
                 metadata: Sequence[Attr] = ()) -> bytes:  # fmt: skip
    """One rank's file: the GlobalMetadata, then the nodes, each preceded by its length."""
    msgs = [encode_metadata(version, metadata)] + [encode_node(n) for n in nodes]
    return b"".join(encode_varint(len(m)) + m for m in msgs)
