"""Arrow traces: round trip, header, levels, cut-off files, clear errors."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import simcore.version
import traces.schema
from runner import scenario
from simcore.errors import TraceError
from simcore.sim import RUN_STATUSES as KERNEL_STATUSES
from traces import TraceLevel, TraceWriter, read_header, read_trace
from traces.schema import RUN_STATUSES


def write_sample(path, n=10, batch_rows=4):
    with TraceWriter(path, level=TraceLevel.DETAIL, header={"seed": 5}, batch_rows=batch_rows) as w:
        for i in range(n):
            w.emit(10 * i, 5, i, 0, "clk", f"top/c[{i % 3}]", "task", "t", "slice",
                   args={"n": i, "x": 0.5, "s": "hi", "flag": True})  # fmt: skip
        w.emit(999, 0, 99, 0, "clk", "top", "link", "occupancy", "counter", value=3.0, flow_out=7)
    return path


def test_round_trip(tmp_path):
    path = write_sample(tmp_path / "a.arrows")
    trace = read_trace(path)
    t = trace.table
    assert not trace.truncated
    assert trace.header["seed"] == 5 and trace.header["schema_version"] == 1
    assert trace.header["level"] == "detail"
    assert t.num_rows == 11
    assert t.column("component").to_pylist()[:4] == ["top/c[0]", "top/c[1]", "top/c[2]", "top/c[0]"]
    assert t.schema.field("component").type == pa.dictionary(pa.int32(), pa.string())
    assert dict(t.column("args_int")[3].as_py()) == {"n": 3, "flag": 1}
    assert dict(t.column("args_float")[3].as_py()) == {"x": 0.5}
    assert dict(t.column("args_str")[3].as_py()) == {"s": "hi"}
    assert t.column("value").to_pylist()[-1] == 3.0
    assert t.column("flow_out").to_pylist()[-1] == 7
    assert trace.status == "cut off"  # no run/end event in this hand-written sample


def test_truncated_file_keeps_complete_batches(tmp_path):
    path = write_sample(tmp_path / "a.arrows", n=40, batch_rows=8)
    data = path.read_bytes()
    (tmp_path / "cut.arrows").write_bytes(data[: len(data) * 2 // 3])
    trace = read_trace(tmp_path / "cut.arrows")
    assert trace.truncated
    assert trace.table.num_rows % 8 == 0 and 0 < trace.table.num_rows < 41
    assert "is truncated after" in trace.note


def test_errors_are_clear(tmp_path):
    with pytest.raises(TraceError) as err:
        read_trace(tmp_path / "missing.arrows")
    assert str(err.value) == f"trace file '{tmp_path / 'missing.arrows'}' does not exist"
    (tmp_path / "empty.arrows").write_bytes(b"")
    with pytest.raises(TraceError) as err:
        read_trace(tmp_path / "empty.arrows")
    assert str(err.value) == (
        f"trace file '{tmp_path / 'empty.arrows'}' is empty (the run wrote nothing)"
    )
    junk = tmp_path / "junk.arrows"
    junk.write_bytes(b"this is not arrow at all" * 10)
    with pytest.raises(TraceError) as err:
        read_trace(junk)
    with pytest.raises(pa.ArrowInvalid) as arrow_err:  # pyarrow's own words end the message
        ipc.open_stream(junk.read_bytes()).read_all()
    assert str(err.value) == (
        f"'{junk}' is not a readable wafersim trace (Arrow IPC stream): {arrow_err.value}"
    )
    other = tmp_path / "other.arrows"
    with pa.OSFile(str(other), "wb") as f, ipc.new_stream(f, pa.schema([("a", pa.int64())])) as w:
        w.write_batch(pa.record_batch([pa.array([1])], names=["a"]))
    with pytest.raises(TraceError) as err:
        read_header(other)
    assert str(err.value) == f"'{other}' is an Arrow stream but not a wafersim trace (no header)"


def test_scenario_trace_has_header_and_end_status(tmp_path):
    sc = scenario.find("link-chain")
    params = scenario.resolve_params(sc, ["items=50"])
    out = scenario.run_scenario(
        sc, params, trace_path=str(tmp_path / "t.arrows"), trace_level=TraceLevel.DETAIL
    )
    trace = read_trace(out.trace_path)
    assert trace.status == "completed"
    assert trace.header["config"]["items"] == 50
    assert trace.header["tick_hz"] == 1_000_000_000
    assert trace.header["domains"] == {"chain": 1_000_000_000}
    names = trace.table.column("name").to_pylist()
    assert names.count("send") == 50 and names.count("receive") == 50


@pytest.mark.parametrize(
    ("level", "expected"), [("summary", {"sink_done", "end"}), ("ops", {"sink_done", "end"})]
)
def test_levels_filter_events(tmp_path, level, expected):
    sc = scenario.find("link-chain")
    params = scenario.resolve_params(sc, ["items=20"])
    out = scenario.run_scenario(
        sc, params, trace_path=str(tmp_path / "t.arrows"), trace_level=TraceLevel[level.upper()]
    )
    assert set(read_trace(out.trace_path).table.column("name").to_pylist()) == expected


def test_every_way_a_run_can_end_is_a_documented_status():
    assert (*KERNEL_STATUSES, "failed") == RUN_STATUSES
    assert "livelock" in RUN_STATUSES
    for status in RUN_STATUSES:
        assert f"``{status}``" in (traces.schema.__doc__ or "")


def test_one_version_string_in_package_metadata_and_trace_headers(tmp_path):
    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "simcore.version.__version__"
    }
    sc = scenario.find("link-chain")
    path = str(tmp_path / "v.arrows")
    scenario.run_scenario(sc, scenario.resolve_params(sc, ["items=3"]), trace_path=path)
    assert read_header(path)["wafersim_version"] == simcore.version.__version__


def test_a_damaged_schema_is_a_clear_error(tmp_path):
    """A header that says v1 over columns that are not v1's (a flipped byte in a field name)
    is refused when the trace is opened, not as a crash in whatever reads a column."""
    from traces import read_header
    from traces.schema import META_PREFIX, SCHEMA, SCHEMA_VERSION

    schema = pa.schema([f.with_name("kategory") if f.name == "category" else f for f in SCHEMA],
                       metadata={f"{META_PREFIX}schema_version": str(SCHEMA_VERSION)})  # fmt: skip
    path = tmp_path / "bad.arrows"
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, schema):
        pass
    with pytest.raises(TraceError) as err:
        read_header(path)
    assert str(err.value) == (
        f"'{path}' has a damaged schema: unexpected column kategory: "
        "dictionary<values=string, indices=int32, ordered=0>, no column category"
    )
