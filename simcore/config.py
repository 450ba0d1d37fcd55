"""Configuration: frozen keyword-only dataclasses loaded from TOML-shaped dicts.

Each hardware block and each scenario declares its parameters as a frozen, keyword-only dataclass
whose fields are made with :func:`param` (a default, a one-line description, an optional range or
set of choices). Units live in field names (``hop_latency_cycles``, ``clock_hz``, ``sram_bytes``).
Nested blocks are fields whose type is another config dataclass, made with :func:`section`.

:func:`load` maps a plain dict (parsed TOML plus ``--set`` overrides) onto such a class and checks
every key and value: unknown keys get a "did you mean", wrong types and out-of-range values name
the key, the value and what is allowed. :func:`apply_override` turns ``a.b=value`` into a nested
dict entry, parsing the value as a TOML literal when it is one.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import stat
import tomllib
import types
import typing
from typing import Any, Literal, TypeVar

from simcore.errors import MISSING, ConfigError

T = TypeVar("T")


def param(
    default: Any,
    doc: str,
    *,
    min: float | None = None,  # noqa: A002 - reads naturally at call sites
    max: float | None = None,  # noqa: A002
    choices: tuple[Any, ...] | None = None,
    min_open: bool = False,
    multiple_of: int | None = None,
    allowed: str | None = None,
) -> Any:
    """A config field: its default, a one-line description and an optional allowed range
    (``min`` .. ``max`` inclusive; ``min_open``: values must be greater than ``min``;
    ``multiple_of``: integers that are multiples of it).
    ``wafersim params`` shows exactly what is enforced here; a limit that depends on other keys,
    or a form a range cannot say (a slice shape, chip coordinates), belongs in ``check()``, and
    ``allowed`` says it in words for ``wafersim params`` (the same words as the check's error).
    """
    return dataclasses.field(
        default=default,
        metadata={"doc": doc, "min": min, "max": max, "choices": choices, "min_open": min_open,
                  "multiple_of": multiple_of, "allowed": allowed},
    )  # fmt: skip


def file_param(
    default: str, doc: str, *, names: tuple[str, ...] = (), allowed: str | None = None
) -> Any:
    """A file-valued config field: a path the run reads (a matrix, a program, a calibration).
    Any value but one of ``names`` (built-in alternatives such as generator names) is a path:
    :func:`load` refuses one that does not exist, is a directory or cannot be read, naming the
    key; :func:`input_files` lists the paths of a loaded config (the command line refuses them
    as outputs); :func:`resolve_files` makes a scenario file's relative paths relative to its
    folder. Parsing the file is the kind's reader's job (with the key named too). ``allowed``
    says what the value may be, in errors and ``wafersim params``."""
    return dataclasses.field(
        default=default,
        metadata={"doc": doc, "file": True, "names": tuple(names), "file_allowed": allowed,
                  "min": None, "max": None, "choices": None, "min_open": False,
                  "multiple_of": None, "allowed": None},
    )  # fmt: skip


def is_file_field(f: dataclasses.Field) -> bool:
    """True for a field made with :func:`file_param`."""
    return bool(f.metadata.get("file"))


def file_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field]]:
    """(dotted key, field) of every file-valued field of config class ``cls``, nested ones too."""
    out: list[tuple[str, dataclasses.Field]] = []
    for f, tp in config_fields(cls):
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out.extend(file_fields(tp, f"{prefix}{f.name}."))
        elif is_file_field(f):
            out.append((prefix + f.name, f))
    return out


def is_path_value(f: dataclasses.Field, value: Any) -> bool:
    """True if ``value`` of file-valued field ``f`` names a file (not one of its built-in names)."""
    return isinstance(value, str) and value not in f.metadata.get("names", ())


def input_files(obj: Any) -> dict[str, str]:
    """Dotted key -> path of every file a loaded config reads (its file-valued fields whose
    value is a path)."""
    out: dict[str, str] = {}
    for key, f in file_fields(type(obj)):
        value: Any = obj
        for part in key.split("."):
            value = getattr(value, part)
        if is_path_value(f, value):
            out[key] = value
    return out


def resolve_files(cls: type, data: dict[str, Any], folder: str) -> dict[str, Any]:
    """``data`` (a scenario file's keys) with every relative path of a file-valued field made
    relative to ``folder`` (the scenario file's), so a scenario reads the files beside it
    wherever it is run from. ``data`` itself is not changed."""
    out = _copy_tree(data)
    for key, f in file_fields(cls):
        node: Any = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node:
            continue
        value = node[parts[-1]]
        if is_path_value(f, value) and value and not os.path.isabs(os.path.expanduser(value)):
            node[parts[-1]] = os.path.join(folder, value)
    return out


def _copy_tree(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy_tree(v) if isinstance(v, dict) else v for k, v in d.items()}


def _file_allowed(meta: dict[str, Any]) -> str:
    names = meta.get("names") or ()
    return meta.get("file_allowed") or "a path to a readable file" + (
        f", or one of: {', '.join(names)}" if names else ""
    )


def _check_file(key: str, path: str, meta: dict[str, Any]) -> None:
    """A file-valued key's path exists, is a regular file and can be read."""
    allowed = _file_allowed(meta)
    hint = f"set it with --set {key}=<path>"
    if not path:
        raise ConfigError(key, path, "an empty path", allowed=allowed, hint=hint)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(key, path, "no such file", allowed=allowed, hint=hint) from None
    except OSError as exc:
        raise ConfigError(
            key, path, f"cannot be read ({exc.strerror or exc})", allowed=allowed, hint=hint
        ) from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(key, path, "is a directory, not a file", allowed=allowed, hint=hint)
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(
            key, path, "is not a regular file (a device, FIFO or socket)", allowed=allowed,
            hint=hint,
        )  # fmt: skip
    if not os.access(path, os.R_OK):
        raise ConfigError(key, path, "no permission to read it", allowed=allowed, hint=hint)


def section(cls: type, doc: str) -> Any:
    """A nested config block, defaulting to ``cls()``."""
    return dataclasses.field(default_factory=cls, metadata={"doc": doc})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScenarioParams:
    """Fields every scenario has: the base of every kind's parameter dataclass (and of the
    parameters of a program that more than one family runs, such as the weight-streamed matmul).
    """

    seed: int = param(0, "seed of all random streams (inputs, arbitration)", min=0, max=2**63 - 1)


def config_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """The fields of a config class with their resolved types, in declaration order."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def _fmt_range(meta: dict[str, Any]) -> str | None:
    if meta.get("choices"):
        return ", ".join(repr(c) for c in meta["choices"])
    lo, hi = meta.get("min"), meta.get("max")
    step = meta.get("multiple_of")
    if lo is None and hi is None:
        return f"a multiple of {step}" if step else None
    text = f"{'-inf' if lo is None else lo} .. {'inf' if hi is None else hi}"
    if meta.get("min_open"):
        text = f"({text}]"
    if step:
        text += f", a multiple of {step}"
    return text


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


#: The problem of a :class:`ConfigError` for a non-string value of a string key (the scenario
#: reader adds where in its file the value is written: runner/scenario.py).
EXPECTED_STRING = "expected a string"


def _coerce(key: str, value: Any, tp: Any, meta: dict[str, Any]) -> Any:
    origin = typing.get_origin(tp)
    hint = f"set it with --set {key}=<value>"
    if origin is Literal:
        allowed = typing.get_args(tp)
        if not isinstance(value, str) and all(isinstance(a, str) for a in allowed):
            raise ConfigError(
                key, value, EXPECTED_STRING, allowed=", ".join(repr(a) for a in allowed),
                hint=hint,
            )  # fmt: skip
        if value not in allowed:
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            raise ConfigError(
                key,
                value,
                "not an allowed choice",
                allowed=", ".join(repr(a) for a in allowed),
                hint=f"did you mean {close[0]!r}?" if close else hint,
            )
        return value
    if origin in (tuple, list):
        (elem,) = typing.get_args(tp)[:1]
        if not isinstance(value, list | tuple):
            raise ConfigError(key, value, f"expected a list of {_type_name(elem)}", hint=hint)
        return tuple(_coerce(f"{key}[{i}]", v, elem, {}) for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or value == "none":
            return None
        return _coerce(key, value, args[0], meta)
    if tp in (int, float) and isinstance(value, str) and RADIX_INT.fullmatch(value):
        r = _fmt_range(meta)
        raise ConfigError(
            key, value, "a hexadecimal, octal or binary literal",
            allowed=f"a decimal {'integer' if tp is int else 'number'}" + (f", {r}" if r else ""),
            hint=f"write it in decimal: --set {key}={int(value, 0)}",
        )  # fmt: skip
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, value, "expected true or false", hint=hint)
    elif tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, value, "expected an integer", hint=hint)
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, value, "expected a number", hint=hint)
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(
                key, value, "not a finite number", allowed=_fmt_range(meta) or "a finite number",
                hint=f"set it with --set {key}=<value>",
            )  # fmt: skip
    elif tp is str and not isinstance(value, str):
        raise ConfigError(
            key, value, EXPECTED_STRING, allowed=meta.get("allowed") or _fmt_range(meta),
            hint=hint,
        )  # fmt: skip
    if meta.get("file") and value not in meta.get("names", ()):
        _check_file(key, value, meta)
    lo, hi = meta.get("min"), meta.get("max")
    below = lo is not None and (value <= lo if meta.get("min_open") else value < lo)
    if below or (hi is not None and value > hi):
        raise ConfigError(
            key, value, "out of range", allowed=_fmt_range(meta), hint=f"change {key}"
        )
    step = meta.get("multiple_of")
    if step and value % step:
        raise ConfigError(
            key, value, f"not a multiple of {step}", allowed=_fmt_range(meta), hint=f"change {key}"
        )
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(key, value, "not an allowed choice", allowed=_fmt_range(meta))
    return value


def load(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build ``cls`` from ``data``, checking every key and value. Missing keys keep defaults.

    A class whose fields depend on the data (a kind that reads its parameters from a file the
    data names) has a classmethod ``for_data(data)`` returning the class to build."""
    for_data = getattr(cls, "for_data", None)
    if for_data is not None:
        cls = for_data(data)
    fields = config_fields(cls)
    names = [f.name for f, _ in fields]
    for key in data:
        if key not in names:
            full = prefix + key
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
            raise ConfigError(
                full,
                MISSING,
                "unknown key",
                allowed=", ".join(prefix + n for n in names),
                hint=f"did you mean '{prefix}{close[0]}'?" if close else None,
            )
    kwargs: dict[str, Any] = {}
    for f, tp in fields:
        if f.name not in data:
            continue
        value = data[f.name]
        key = prefix + f.name
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(
                    key,
                    value,
                    "is a section, not a value",
                    hint=f"set one of its keys, e.g. --set {key}.<key>=<value>",
                )
            kwargs[f.name] = load(tp, value, prefix=key + ".")
        else:
            kwargs[f.name] = _coerce(key, value, tp, dict(f.metadata))
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if callable(check):
        try:
            check()
        except ConfigError as err:
            # A block's check names keys from the block's own section ("pe.code_bytes"); under
            # a deeper prefix ("wafer.pe.") give the user the full path they would --set.
            # The keys its message names ("change pe.bank_bytes") get the same full path.
            outer, _, section = prefix.rstrip(".").rpartition(".")
            if outer and err.key.startswith(section + "."):
                named = re.compile(rf"(?<![\w.]){re.escape(section)}\.(?=\w)")
                full = f"{outer}.{section}."
                raise ConfigError(
                    f"{outer}.{err.key}", err.value, named.sub(full, err.problem),
                    allowed=err.allowed and named.sub(full, err.allowed),
                    hint=err.hint and named.sub(full, err.hint),
                ) from None  # fmt: skip
            raise
    return obj


def parse_region(text: str) -> tuple[int, int, int, int]:
    """``x0:x1,y0:y1``: a block of a PE array, half-open (x0 <= x < x1, y0 <= y < y1), as
    ``(x0, x1, y0, y1)``. A bad spelling is a ValueError saying the form (``run
    --trace-region``, ``--detail-region``)."""
    if "-" in text:
        raise ValueError(
            f"{text!r} is negative; give x0:x1,y0:y1 with 0 <= x0 < x1 and 0 <= y0 < y1"
        )
    try:
        xs, ys = text.split(",")
        x0, x1 = (int(v) for v in xs.split(":"))
        y0, y1 = (int(v) for v in ys.split(":"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a region; give x0:x1,y0:y1 (half-open, e.g. 0:16,0:16)"
        ) from None
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"{text!r} is an empty region; give 0 <= x0 < x1 and 0 <= y0 < y1")
    return x0, x1, y0, y1


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``a.b=value``; the value is a TOML literal if it parses as one, else a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            text, MISSING, "an override must look like KEY=VALUE", hint="e.g. --set elements=64"
        )
    raw = raw.strip()
    if RADIX_INT.fullmatch(raw):
        return key, raw  # kept as typed: see _coerce
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


#: A hexadecimal, octal or binary integer literal (``0x10``, ``0o17``, ``0b101``). ``--set``
#: keeps it as the text typed: a string key gets that text, and an integer key refuses it with
#: its decimal value as the hint (``rows=0x10`` silently meaning 16 surprises more than it helps).
RADIX_INT = re.compile(
    r"[+-]?0(?:[xX][0-9A-Fa-f](?:_?[0-9A-Fa-f])*|[oO][0-7](?:_?[0-7])*|[bB][01](?:_?[01])*)"
)


_TOML_TABLE = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_TOML_KEY = re.compile(
    r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=\s*(.*)$"
)


def _toml_key(text: str) -> str:
    return ".".join(
        p.strip().strip("\"'") for p in re.split(r"\.(?=(?:[^\"']|\"[^\"]*\"|'[^']*')*$)", text)
    )


def toml_literal(text: str, dotted: str) -> tuple[int, str] | None:
    """Where a TOML document sets key ``dotted`` (``a.b``), as it is written: (line number from
    1, the value's source text), or None if no line of it does. :mod:`tomllib` keeps no source
    positions, so the text is scanned again: ``[table]`` headers, ``key = value`` lines (dotted
    and quoted keys too) and, failing those, ``key = value`` inside an inline table. Used to
    quote a value as the user wrote it (``0x4``: TOML has already made it the integer 4)."""
    lines = text.splitlines()
    table = ""
    for n, line in enumerate(lines, 1):
        head = _TOML_TABLE.match(line)
        if head and not line.lstrip().startswith("[["):
            table = _toml_key(head.group(1)) + "."
            continue
        m = _TOML_KEY.match(line)
        if m and table + _toml_key(m.group(1)) == dotted:
            return n, m.group(2).split("#", 1)[0].strip()
    last = re.escape(dotted.rsplit(".", 1)[-1])
    inline = re.compile(rf"[{{,]\s*{last}\s*=\s*([^,}}#]+)")
    for n, line in enumerate(lines, 1):
        m = inline.search(line)
        if m:
            return n, m.group(1).strip()
    return None


def apply_override(data: dict[str, Any], text: str) -> None:
    """Apply one ``--set a.b=value`` to a nested dict in place."""
    set_key(data, *parse_override(text))


def set_key(data: dict[str, Any], dotted: str, value: Any) -> None:
    """``data[a][b] = value`` for ``a.b`` (sections made as needed), as ``--set a.b=value``."""
    parts = dotted.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(
                ".".join(parts[: i + 1]), nxt, "is a value, not a section", hint=f"drop '{dotted}'"
            )
        node = nxt
    node[parts[-1]] = value


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as ``{"a.b": value}``, the keys ``--set`` takes."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def to_dict(obj: Any) -> dict[str, Any]:
    """The effective configuration as plain data (for trace headers and JSON)."""
    out = dataclasses.asdict(obj)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """Rows (key, default, allowed, description) for every leaf field, for ``wafersim params``."""
    rows: list[tuple[str, str, str, str]] = []
    for f, tp in config_fields(cls):
        key = prefix + f.name
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, key + "."))
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        meta = dict(f.metadata)
        # a float key refuses inf and nan (_coerce): "a finite number" is its whole constraint
        bare = "a finite number" if tp is float else _type_name(tp)
        allowed = meta.get("allowed") or _fmt_range(meta) or bare
        if is_file_field(f):
            allowed = _file_allowed(dict(f.metadata))
        rows.append((key, repr(default), allowed, f.metadata.get("doc", "")))
    return rows
