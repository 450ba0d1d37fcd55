"""A sweep's result table (Parquet): a row per point in sweep order, its metrics as columns and
the sweep in the schema's metadata; read back for a resume (:func:`previous_results`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from runner import outputs
from simcore.errors import WafersimError
from simcore.version import __version__
from sweeps.grid import MEASURED, META_KEY, STATUSES, TAIL, Point, Sweep, plain
from sweeps.journal import Journal, normalise


def is_table(path: str) -> bool:
    """True if ``path`` is a sweep table (a Parquet file with this module's metadata)."""
    try:
        return META_KEY in (pq.read_schema(path).metadata or {})
    except (pa.ArrowInvalid, OSError, ValueError):
        return False


def previous_results(output: str) -> dict[str, dict[str, Any]]:
    """Results of an earlier run to the same output (its table, then its journal), by hash."""
    found: dict[str, dict[str, Any]] = {}
    if os.path.exists(output):
        # not a sweep table (or a damaged one): nothing to resume from
        with contextlib.suppress(pa.ArrowInvalid, OSError, KeyError, ValueError):
            found.update(results_from_table(pq.read_table(output)))
    found.update(Journal(output).read())
    return found


def results_from_table(table: pa.Table) -> dict[str, dict[str, Any]]:
    """The inverse of :func:`build_table` on its results: hash -> result."""
    meta = json.loads((table.schema.metadata or {})[META_KEY])
    columns = meta["metrics"]
    found: dict[str, dict[str, Any]] = {}
    for row in table.to_pylist():
        metrics = {}
        for column, (name, is_json) in columns.items():
            value = row[column]
            if value is not None:
                metrics[name] = json.loads(value) if is_json else value
        result = {k: row[k] for k in ("config_hash", "status", "error", *MEASURED, "attempts")}
        result["metrics"] = metrics
        result["trace"] = row.get("trace")
        found[row["config_hash"]] = normalise(result)
    return found


def _column(values: list[Any]) -> tuple[pa.Array, bool]:
    """An Arrow column of ``values`` (None = null); mixed or nested values become JSON text."""
    try:
        if not any(isinstance(v, dict) for v in values):
            return pa.array(values), False
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    return pa.array([None if v is None else json.dumps(v) for v in values], pa.string()), True


def build_table(
    sweep: Sweep, points: Sequence[Point], results: dict[str, dict[str, Any]], traces: bool
) -> pa.Table:
    """One row per point, in sweep order: ``point``, the swept keys, ``status``, ``error``,
    every metric (null where a point has none), ``wall_s``, ``peak_rss_bytes``, ``attempts``,
    ``config_hash``, ``config`` (the full effective configuration, JSON) and, with traces
    (asked for now, or kept from an earlier run), ``trace``. A metric named like a swept key
    is ``metrics.NAME``."""
    keys = sweep.keys
    rows = [results[p.config_hash] for p in points]
    names: list[str] = []
    for r in rows:
        names.extend(n for n in r.get("metrics", {}) if n not in names)
    columns: dict[str, pa.Array] = {"point": pa.array([p.index for p in points], pa.int64())}
    for key in keys:
        columns[key], _ = _column([plain(p.values[key]) for p in points])
    columns["status"] = pa.array([r["status"] for r in rows], pa.string())
    columns["error"] = pa.array([r.get("error") or None for r in rows], pa.string())
    metric_columns: dict[str, tuple[str, bool]] = {}
    for name in names:
        column = f"metrics.{name}" if name in columns or name in TAIL else name
        columns[column], is_json = _column([r.get("metrics", {}).get(name) for r in rows])
        metric_columns[column] = (name, is_json)
    columns["wall_s"] = pa.array([r.get("wall_s") for r in rows], pa.float64())
    columns["peak_rss_bytes"] = pa.array([r.get("peak_rss_bytes") for r in rows], pa.int64())
    columns["attempts"] = pa.array([r.get("attempts", 1) for r in rows], pa.int64())
    columns["config_hash"] = pa.array([p.config_hash for p in points], pa.string())
    columns["config"] = pa.array([p.config or None for p in points], pa.string())
    if traces or any(r.get("trace") for r in rows):
        columns["trace"] = pa.array([r.get("trace") for r in rows], pa.string())
    meta = {
        "wafersim_version": __version__,
        "scenario": sweep.scen.name,
        "kind": sweep.scen.kind.name,
        "set": [[k, plain(v)] for k, v in sweep.fixed],
        "axes": [list(axis.keys) for axis in sweep.axes],
        "metrics": metric_columns,
    }
    return pa.table(columns).replace_schema_metadata({META_KEY: json.dumps(meta)})


def write_table(table: pa.Table, output: str) -> None:
    """Write atomically: a sweep killed while writing leaves the previous table (or none)."""
    folder = os.path.dirname(output)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with outputs.atomic(output, "the sweep table (-o)") as tmp:  # a full disk: a clear error
        pq.write_table(table, tmp)


def read_table(path: str) -> pa.Table:
    if not os.path.exists(path):
        raise WafersimError(f"sweep table '{path}' does not exist (write one with wafersim sweep)")
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise WafersimError(f"'{path}' is not a Parquet table: {exc}") from None


def summarise(statuses: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return {k: v for k, v in counts.items() if v}
