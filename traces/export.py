"""One entry point for trace exports: pick the format, the output name, and check the input."""

from __future__ import annotations

import os

from simcore.errors import TraceError
from traces.perfetto import ExportStats

FORMATS = {"perfetto": ".pftrace", "json": ".json"}


def export_path(path: str, to: str, output: str | None = None) -> str:
    """The output path of exporting ``path`` to ``to``: ``output``, or ``path`` with the
    format's extension."""
    if to not in FORMATS:
        raise TraceError(f"unknown export format '{to}'; choose one of: {', '.join(FORMATS)}")
    return output or os.path.splitext(path)[0] + FORMATS[to]


def export(
    path: str, to: str, output: str | None = None, *, detail_region: str | None = None
) -> tuple[str, ExportStats]:
    """Export the Arrow trace ``path`` to format ``to``; returns the output path and counts.
    ``stats.note`` says if the trace was cut off (what was readable is exported); a trace
    with no readable event is refused. ``detail_region``: see
    :func:`traces.perfetto.export_perfetto` (Perfetto only)."""
    out = export_path(path, to, output)
    if os.path.abspath(out) == os.path.abspath(path):
        raise TraceError(f"export output '{out}' would overwrite its input; give another -o")
    if to == "perfetto":
        from traces.perfetto import export_perfetto

        return out, export_perfetto(path, out, detail_region=detail_region)
    if detail_region is not None:
        raise TraceError("--detail-region applies to --to perfetto only (the JSON export has "
                         "no block summaries)")  # fmt: skip
    from traces.chrome_json import export_chrome_json

    return out, export_chrome_json(path, out)
