"""The examples of docs/traces.md run against a real trace, and polars reads replacement dicts."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from tests.trace_samples import write_wafer_trace

DOC = Path(__file__).resolve().parents[1] / "docs" / "traces.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_doc_has_examples_for_each_reader():
    text = "\n".join(python_blocks())
    assert "import duckdb" in text and "import polars" in text and "pyarrow.ipc" in text


@pytest.mark.parametrize("index", range(3))
def test_doc_example_runs(index, tmp_path, monkeypatch, capsys):
    pytest.importorskip("duckdb")
    pytest.importorskip("polars")
    monkeypatch.chdir(tmp_path)
    write_wafer_trace(tmp_path / "run.arrows", batch_rows=16)
    exec(compile(python_blocks()[index], f"{DOC}:block{index}", "exec"), {})
    assert capsys.readouterr().out.strip()


def test_polars_reads_replacement_dictionaries(tmp_path):
    pl = pytest.importorskip("polars")
    path = tmp_path / "run.arrows"
    write_wafer_trace(path, batch_rows=8)  # many batches, dictionaries replaced as they grow
    table = ipc.open_stream(pa.memory_map(str(path))).read_all()
    direct = pl.read_ipc_stream(path)
    converted = pl.from_arrow(table)
    want = table.column("component").to_pylist()
    assert direct["component"].cast(pl.String).to_list() == want
    assert converted["component"].cast(pl.String).to_list() == want
