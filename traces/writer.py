"""Streaming Arrow trace writer with bounded memory.

Events are appended as tuples to an in-memory list; every ``batch_rows`` events (and at close) the
list is turned into one Arrow record batch and written to the IPC stream, so memory stays bounded
whatever the run length. String columns are dictionary-encoded against a per-column table that
only grows: once every component has been seen the dictionaries stop changing and later batches
carry no dictionary at all. The stream is flushed after each batch, so a run killed mid-way
leaves a file whose complete batches can still be read (see :mod:`traces.reader`).

The writer implements the kernel's tracer protocol (``level`` and ``emit``), so components never
import pyarrow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from simcore.errors import WafersimError
from traces.schema import META_PREFIX, SCHEMA, SCHEMA_VERSION, TraceLevel

# Tuple layout of one buffered event (kept in step with SCHEMA's column order).
_TS, _DUR, _CYC, _DCYC, _DOM, _COMP, _CAT, _NAME, _PH, _VAL, _FOUT, _FIN, _ARGS = range(13)


def _args_columns(rows: tuple) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The three typed argument map columns, built flat (keys, values, offsets) in one sweep."""
    ik: list[str] = []
    iv: list[int] = []
    fk: list[str] = []
    fv: list[float] = []
    sk: list[str] = []
    sv: list[str] = []
    io, fo, so = [0], [0], [0]
    for args in rows:
        if args:
            for k, v in args.items():
                t = type(v)
                if t is int:
                    ik.append(k)
                    iv.append(v)
                elif t is float:
                    fk.append(k)
                    fv.append(v)
                elif t is str:
                    sk.append(k)
                    sv.append(v)
                elif isinstance(v, bool | int):
                    ik.append(k)
                    iv.append(int(v))
                elif isinstance(v, float):
                    fk.append(k)
                    fv.append(float(v))
                else:
                    sk.append(k)
                    sv.append(str(v))
        io.append(len(ik))
        fo.append(len(fk))
        so.append(len(sk))
    return (
        _map(io, ik, iv, pa.int64()),
        _map(fo, fk, fv, pa.float64()),
        _map(so, sk, sv, pa.string()),
    )


def _map(offsets: list[int], keys: list[str], items: list, item_type: pa.DataType) -> pa.Array:
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(items, item_type)
    )


class TraceWriter:
    """Writes events to ``path`` as a v1 wafersim trace. Use as a context manager or call close."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        level: TraceLevel,
        header: Mapping[str, Any],
        batch_rows: int = 65536,
        name: str | None = None,
    ) -> None:
        self.path = os.fspath(path)
        #: The path messages name: ``name`` when writing under a temporary file, else ``path``.
        self.name = name or self.path
        self.level = int(level)
        self.batch_rows = batch_rows
        self.rows_written = 0
        self._rows: list[tuple] = []
        self._tables: dict[int, dict[str, int]] = {i: {} for i in (_DOM, _COMP, _CAT, _NAME, _PH)}
        self._closed = False
        #: The OSError a write met (a full disk), if any: the file is then incomplete.
        self.failed: OSError | None = None
        meta = {f"{META_PREFIX}schema_version": str(SCHEMA_VERSION)}
        meta[f"{META_PREFIX}level"] = TraceLevel(level).name.lower()
        for key, value in header.items():
            meta[f"{META_PREFIX}{key}"] = value if isinstance(value, str) else json.dumps(value)
        self.schema = SCHEMA.with_metadata(meta)
        parent = os.path.dirname(self.path)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._sink = pa.OSFile(self.path, "wb")
        except OSError as exc:
            raise WafersimError(
                f"cannot write trace '{self.name}': {exc.strerror or exc}"
            ) from None
        options = ipc.IpcWriteOptions(compression="zstd")
        self._writer = ipc.new_stream(self._sink, self.schema, options=options)

    def emit(
        self,
        ts_ticks: int,
        dur_ticks: int,
        cycle: int,
        dur_cycles: int,
        domain: str,
        component: str,
        category: str,
        name: str,
        phase: str = "slice",
        value: float | None = None,
        flow_out: int | None = None,
        flow_in: int | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        """Buffer one event; the caller has already checked the level."""
        self._rows.append(
            (ts_ticks, dur_ticks, cycle, dur_cycles, domain, component, category, name, phase,
             value, flow_out, flow_in, args)
        )  # fmt: skip
        if len(self._rows) >= self.batch_rows:
            self.flush()

    def _dict_column(self, col: int, values: tuple) -> pa.DictionaryArray:
        table = self._tables[col]
        indices = [table.setdefault(v, len(table)) for v in values]
        return pa.DictionaryArray.from_arrays(
            pa.array(indices, pa.int32()), pa.array(list(table), pa.string())
        )

    def flush(self) -> None:
        """Write the buffered events as one record batch."""
        if not self._rows or self._closed:
            return
        cols = list(zip(*self._rows, strict=True))
        args_int, args_float, args_str = _args_columns(cols[_ARGS])
        arrays = [
            pa.array(cols[_TS], pa.int64()),
            pa.array(cols[_DUR], pa.int64()),
            pa.array(cols[_CYC], pa.int64()),
            pa.array(cols[_DCYC], pa.int64()),
            self._dict_column(_DOM, cols[_DOM]),
            self._dict_column(_COMP, cols[_COMP]),
            self._dict_column(_CAT, cols[_CAT]),
            self._dict_column(_NAME, cols[_NAME]),
            self._dict_column(_PH, cols[_PH]),
            pa.array(cols[_VAL], pa.float64()),
            pa.array(cols[_FOUT], pa.int64()),
            pa.array(cols[_FIN], pa.int64()),
            args_int,
            args_float,
            args_str,
        ]
        try:
            self._writer.write_batch(pa.record_batch(arrays, schema=self.schema))
            self._sink.flush()
        except OSError as exc:
            self.failed = exc
            self._rows.clear()
            raise
        self.rows_written += len(self._rows)
        self._rows.clear()

    def close(self) -> None:
        """Write what is buffered and end the stream. Safe to call twice."""
        if self._closed:
            return
        try:
            self.flush()
            self._writer.close()
        except OSError as exc:
            self.failed = self.failed or exc
            raise
        finally:
            self._closed = True
            try:
                self._sink.close()
            except OSError as exc:
                self.failed = self.failed or exc
                raise

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
