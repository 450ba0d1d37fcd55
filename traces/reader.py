"""Reading wafersim traces, including ones cut short.

:func:`read_trace` returns the header and every complete record batch. A stream that ends in the
middle of a message (the writing process was killed) yields the batches before the cut, with
``truncated`` set and a message saying how much was recovered. A file that is not an Arrow stream,
or not a wafersim trace, or of an unknown schema version, raises :class:`TraceError` with a clear
message.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from simcore.errors import TraceError
from traces.schema import META_PREFIX, SCHEMA, SCHEMA_VERSION


@dataclasses.dataclass
class Trace:
    """A trace read from disk: its header, its events, and whether it ended cleanly."""

    path: str
    header: dict[str, Any]
    table: pa.Table
    truncated: bool
    note: str

    @property
    def status(self) -> str:
        """The run's final status from its ``run/end`` event, or ``cut off`` if there is none."""
        ends = [
            i
            for i, (c, n) in enumerate(
                zip(
                    self.table.column("category").to_pylist(),
                    self.table.column("name").to_pylist(),
                    strict=True,
                )
            )
            if c == "run" and n == "end"
        ]
        if not ends:
            return "cut off"
        args = dict(self.table.column("args_str")[ends[-1]].as_py() or [])
        return args.get("status", "unknown")


#: What reading a damaged stream can raise (a cut, or bytes changed on disk).
_DAMAGED = (pa.ArrowException, OSError)


def _next_batch(reader: ipc.RecordBatchStreamReader) -> pa.RecordBatch:
    """The next batch, fully validated (offsets and dictionary indices in bounds), so damaged
    bytes are found here and not as a crash in whatever reads the batch."""
    batch = reader.read_next_batch()
    batch.validate(full=True)
    return batch


def _decode_header(schema: pa.Schema, path: str) -> dict[str, Any]:
    try:
        meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    except UnicodeDecodeError:
        raise TraceError(f"'{path}' has a damaged header (not UTF-8 text)") from None
    if f"{META_PREFIX}schema_version" not in meta:
        raise TraceError(f"'{path}' is an Arrow stream but not a wafersim trace (no header)")
    header: dict[str, Any] = {}
    for key, raw in meta.items():
        if not key.startswith(META_PREFIX):
            continue
        name = key[len(META_PREFIX) :]
        try:
            header[name] = json.loads(raw)
        except json.JSONDecodeError:
            header[name] = raw
    try:
        version = int(header["schema_version"])
    except (TypeError, ValueError):
        raise TraceError(
            f"'{path}' has a damaged header (schema version {header['schema_version']!r})"
        ) from None
    if version != SCHEMA_VERSION:
        raise TraceError(
            f"'{path}' uses trace schema v{version}; this wafersim reads v{SCHEMA_VERSION} "
            "(re-run the scenario with this version)"
        )
    wrong = [f"{f.name}: {f.type}" for f in schema if SCHEMA.get_field_index(f.name) < 0
             or SCHEMA.field(f.name).type != f.type]  # fmt: skip
    missing = [n for n in SCHEMA.names if n not in schema.names]
    if wrong or missing:
        raise TraceError(
            f"'{path}' has a damaged schema: "
            + ", ".join(
                [*(f"unexpected column {w}" for w in wrong), *(f"no column {m}" for m in missing)]
            )
        )
    return header


def _open(path: str) -> ipc.RecordBatchStreamReader:
    if not os.path.exists(path):
        raise TraceError(f"trace file '{path}' does not exist")
    if os.path.getsize(path) == 0:
        raise TraceError(f"trace file '{path}' is empty (the run wrote nothing)")
    try:
        return ipc.open_stream(pa.memory_map(path, "r"))
    except _DAMAGED as exc:
        raise TraceError(
            f"'{path}' is not a readable wafersim trace (Arrow IPC stream): {exc}"
        ) from None


def iter_batches(path: str | os.PathLike[str]) -> Iterator[pa.RecordBatch]:
    """Yield the trace's record batches one at a time (flat memory); stops quietly at a cut."""
    reader = _open(os.fspath(path))
    while True:
        try:
            yield _next_batch(reader)
        except StopIteration:
            return
        except _DAMAGED:
            return


class BatchStream:
    """Batches of a trace one at a time; after iterating, ``truncated`` and ``note`` say whether
    the stream was cut off (like :func:`read_trace`, but with flat memory)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._reader = _open(self.path)
        self.header = _decode_header(self._reader.schema, self.path)
        self.truncated = False
        self.note = ""
        self.rows = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        batches = 0
        while True:
            try:
                batch = _next_batch(self._reader)
            except StopIteration:
                return
            except _DAMAGED as exc:
                self.truncated = True
                self.note = (
                    f"trace '{self.path}' is truncated after {batches} complete batch(es) "
                    f"({self.rows} events); the rest is lost ({exc})"
                )
                return
            batches += 1
            self.rows += batch.num_rows
            yield batch


def start_end(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """A batch's event starts and ends in ticks: ``ts_ticks`` and ``ts_ticks + dur_ticks``."""
    ts = batch.column("ts_ticks").to_numpy()
    return ts, ts + batch.column("dur_ticks").to_numpy()


def coded(batch: pa.RecordBatch, column: str) -> tuple[list[str], np.ndarray]:
    """A dictionary-encoded column of a batch: its distinct values and each row's index."""
    col = batch.column(column)
    return col.dictionary.to_pylist(), col.indices.to_numpy(zero_copy_only=False)


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = os.fspath(path)
    return _decode_header(_open(path).schema, path)


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a whole trace. A cut-off stream gives the complete batches and ``truncated=True``."""
    path = os.fspath(path)
    reader = _open(path)
    header = _decode_header(reader.schema, path)
    batches: list[pa.RecordBatch] = []
    truncated = False
    note = ""
    while True:
        try:
            batches.append(_next_batch(reader))
        except StopIteration:
            break
        except _DAMAGED as exc:
            truncated = True
            note = (
                f"trace '{path}' is truncated after {len(batches)} complete batch(es) "
                f"({sum(b.num_rows for b in batches)} events); the rest is lost ({exc})"
            )
            break
    table = pa.Table.from_batches(batches, schema=reader.schema)
    return Trace(path=path, header=header, table=table, truncated=truncated, note=note)
