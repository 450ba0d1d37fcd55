"""Trace summaries (busy, stalls, utilisation, critical path) and plots rendered to files."""

from __future__ import annotations

import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest

from app import cli
from app.plots import plot_validate
from runner import registry
from simcore.errors import TraceError, WafersimError
from tests.figure_text import overlapping_texts
from tests.trace_samples import write_wafer_trace
from traces import heatmap, plots, read_trace
from traces.summary import summarize, union_length

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def wafer(tmp_path):
    path = tmp_path / "w.arrows"
    write_wafer_trace(path)
    return str(path)


def test_union_length():
    s, e = np.array([0, 5, 20, 21]), np.array([10, 8, 30, 25])
    assert union_length(s, e) == 20
    assert union_length(np.array([], int), np.array([], int)) == 0


def test_summary_busy_stalls_utilisation(wafer):
    s = summarize(wafer)
    assert s["status"] == "completed" and s["end_ticks"] == 600
    busy = {r["component"]: r for r in s["busy"]}
    # tasks: fmac [t, t+60) and reduce [t+20, t+80) overlap -> 80 of every 100 ticks
    assert busy["wafer/pe[0,0]/task"]["busy_fraction"] == pytest.approx(0.8)
    assert busy["wafer/pe[0,0]"]["busy_fraction"] >= 0.8  # ancestors cover children
    assert not busy["wafer/pe[0,0]"]["leaf"]
    causes = {c["cause"] for c in s["stalls"]["by_cause"]}
    assert causes <= {"cause=backpressure, link=east", "cause=operand_wait, link=east"}
    assert s["stalls"]["total_ticks"] == sum(r["ticks"] for r in s["stalls"]["top"])
    util = {(r["component"], r["name"]): r for r in s["utilisation"]}
    q = util[("wafer/pe[0,0]/ce", "input")]
    assert q["capacity"] == 8 and q["mean"] == pytest.approx(1.0)
    assert q["utilisation"] == pytest.approx(1.0 / 8)


def test_summary_critical_path_follows_flows(tmp_path):
    from traces import TraceLevel, TraceWriter

    path = tmp_path / "cp.arrows"
    with TraceWriter(path, level=TraceLevel.DETAIL, header={"tick_hz": 1}) as w:
        w.emit(0, 10, 0, 10, "d", "a", "task", "produce", flow_out=1)
        w.emit(0, 3, 0, 3, "d", "b", "task", "idle-work")
        w.emit(12, 5, 12, 5, "d", "b", "task", "consume", flow_in=1)
        w.emit(20, 4, 20, 4, "d", "b", "task", "finish")
    cp = summarize(str(path))["critical_path"]
    assert [e["event"] for e in cp["events"]] == ["task:produce", "task:consume", "task:finish"]
    assert cp["length_ticks"] == 24 and cp["via_flows"] == 1


def test_cli_summary_json_and_text(wafer, capsys):
    assert cli.main(["trace", "summary", wafer, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"busy", "stalls", "utilisation", "critical_path"} <= set(data)
    assert cli.main(["trace", "summary", wafer]) == 0
    out = capsys.readouterr().out
    assert "stalls:" in out and "link/queue utilisation" in out and "critical path" in out


def test_every_summary_table_has_headers_with_units(wafer, capsys):
    """Each table of ``trace summary`` (busiest components, stalls by cause, top stalls,
    link/queue utilisation, critical path) starts with a header row naming its columns, and a
    column of numbers names its unit (the queue table had no header, issue 27)."""
    assert cli.main(["trace", "summary", wafer]) == 0
    lines = capsys.readouterr().out.splitlines()
    tables: dict[str, list[list[str]]] = {}
    for line in lines:
        if line.startswith("  ") and not line.startswith("    "):
            title = line.strip()
        elif line.startswith("    "):
            tables.setdefault(title, []).append(re.split(r"\s{2,}", line.strip()))
    assert [t.split(" ")[0] for t in tables] == ["busiest", "stalls:", "top", "link/queue",
                                                "critical"]  # fmt: skip
    counts = {"slices", "stalls"}  # a count's unit is its name
    for title, (header, *rows) in tables.items():
        assert rows, title
        assert all(len(r) == len(header) for r in rows), title
        for k, name in enumerate(header):
            numbers = all(re.fullmatch(r"-|[\d,.]+", r[k]) for r in rows)
            if numbers:
                assert name in counts or re.search(r"\(.+\)", name), (title, name)
            else:
                assert not re.search(r"\d", name), (title, name)  # a header, not a value


def valid_image(path, kind):
    data = path.read_bytes()
    assert len(data) > 5000
    if kind == "png":
        assert data.startswith(PNG_MAGIC)
    else:
        assert b"<svg" in data[:1000]


def test_mesh_heatmaps(wafer, tmp_path):
    grid = plots.mesh_values(wafer, "busy")
    assert grid.shape == (2, 3) and not np.isnan(grid).any()
    plots.plot_mesh(wafer, str(tmp_path / "busy.png"), metric="busy")
    valid_image(tmp_path / "busy.png", "png")
    plots.plot_mesh(wafer, str(tmp_path / "link.svg"), metric="link")
    valid_image(tmp_path / "link.svg", "svg")


def test_timeline(wafer, tmp_path):
    plots.plot_timeline(wafer, str(tmp_path / "tl.png"))
    valid_image(tmp_path / "tl.png", "png")


def test_validate_plot(tmp_path):
    rows = plot_validate("link-chain", str(tmp_path / "v.png"))
    assert [r.case for r in rows] == ["link-chain"] * 6
    valid_image(tmp_path / "v.png", "png")


def test_comparison_plot_takes_plain_values(tmp_path):
    plots.plot_comparison(
        str(tmp_path / "c.svg"), labels=["I=1", "I=2", "I=4"], simulated=[13, 15, 19],
        model=[12, 14, 18], reference=[12, None, 18], title="fmac",
    )  # fmt: skip
    valid_image(tmp_path / "c.svg", "svg")
    with pytest.raises(WafersimError) as err:
        plots.plot_comparison(
            str(tmp_path / "d.png"), labels=["a", "b"], simulated=[1, 2], model=[1],
            reference=[None, None],
        )  # fmt: skip
    assert str(err.value) == (
        "plot_comparison needs one simulated, model (and reference) value per label; got "
        "2 labels, 2 simulated, 1 model, 2 reference values"
    )
    assert not (tmp_path / "d.png").exists()


def test_plot_errors(tmp_path, wafer, capsys):
    with pytest.raises(WafersimError) as err:
        plots.plot_mesh(wafer, str(tmp_path / "x.jpg"))
    assert str(err.value) == f"plot output '{tmp_path / 'x.jpg'}' must end in .png or .svg"
    chain = tmp_path / "chain.arrows"
    assert cli.main(["run", "link-chain", "--set", "items=10", "--quiet",
                     "--trace", str(chain), "--trace-level", "detail"]) == 0  # fmt: skip
    with pytest.raises(TraceError) as err:
        plots.plot_mesh(str(chain), str(tmp_path / "m.png"))
    assert str(err.value) == (
        f"'{chain}' has no components named like 'pe[x,y]' or 'chip[x,y]'; mesh plots need a "
        "wafer or TPU trace (a gpt-ws or link-chain trace is no mesh: try `wafersim plot "
        "timeline`)"
    )
    capsys.readouterr()
    assert cli.main(["plot", "validate", "nope", "-o", str(tmp_path / "v.png")]) == 2
    known = ", ".join(sorted(registry.CASES))
    assert capsys.readouterr().err == (
        f"wafersim: error: unknown validation case(s): nope; known cases: {known}\n"
    )
    assert cli.main(["plot", "timeline", str(chain), "-o", str(tmp_path / "t.svg")]) == 0


def test_timeline_draws_a_large_mesh_whole_in_seconds(tmp_path):
    """96 PEs (288 components): rows become PEs' ancestors, the whole run is drawn, the axis
    is simulated time with its unit and no offset, and no two texts overlap."""
    src = tmp_path / "big.arrows"
    write_wafer_trace(src, w=12, h=8, steps=6)
    fig = plots.timeline_figure(str(src))
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert 1 < len(rows) <= plots.MAX_ROWS and "wafer/pe[0,0]" not in rows
    tick_hz = int(read_trace(src).header["tick_hz"])
    rows_ = read_trace(src).table.to_pylist()
    end = max(r["ts_ticks"] + r["dur_ticks"] for r in rows_
              if r["phase"] != "counter" and r["category"] != "run")  # fmt: skip
    unit, size = plots.time_unit(end / tick_hz)
    assert ax.get_xlabel() == f"simulated time ({unit})"
    assert ax.get_xlim()[1] == pytest.approx(end / tick_hz / size)
    assert not ax.xaxis.get_major_formatter().get_offset()
    assert not overlapping_texts(fig)
    plt.close(fig)


def test_time_unit_and_category_colours():
    assert plots.time_unit(457e-6) == ("us", 1e-6)
    assert plots.time_unit(48.0) == ("s", 1.0)
    assert plots.time_unit(2.2e-9) == ("ns", 1e-9)
    assert (
        plots.category_colour("task")
        == plots.category_colour("task")
        != plots.category_colour("stall")
    )
    assert plots.category_colour("never-seen") == plots.category_colour("never-seen")


def test_sweep_plot_groups_by_the_swept_keys_it_does_not_plot(tmp_path, monkeypatch):
    """Points of different p are separate lines without --hue; axes name their units."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import app.plots as app_plots
    from sweeps.grid import META_KEY

    table = pa.table({"p": [2, 2, 4, 4], "mt": [1, 2, 1, 2], "status": ["completed"] * 4,
                      "time_s": [1.0, 2.0, 3.0, 4.0]})  # fmt: skip
    table = table.replace_schema_metadata({META_KEY: json.dumps({"axes": [["p"], ["mt"]]})})
    pq.write_table(table, tmp_path / "s.parquet")
    seen = {}
    monkeypatch.setattr(app_plots, "plot_series", lambda out, series, **kw: seen.update(
        series=series, **kw))  # fmt: skip
    app_plots.plot_sweep(str(tmp_path / "s.parquet"), str(tmp_path / "s.png"), x="mt", y="time_s")
    assert seen["series"] == {"p=2": ([1, 2], [1.0, 2.0]), "p=4": ([1, 2], [3.0, 4.0])}
    assert (seen["xlabel"], seen["ylabel"]) == ("mt", "time_s (s)")
    assert seen["title"] == "s.parquet: time_s vs mt by p"


def test_series_axes_have_no_offset_and_integer_ticks():
    fig = plots.series_figure({"": ([2, 3, 4], [48.0000, 48.0001, 48.0002])}, xlabel="p",
                              ylabel="time_s (s)")  # fmt: skip
    fig.canvas.draw()
    ax = fig.axes[0]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert ax.yaxis.get_major_formatter().get_offset() == ""
    assert ax.xaxis.get_major_formatter().get_offset() == ""
    plt.close(fig)


def test_mesh_shows_compute_async_and_fabric_apart_on_wafer_and_tpu(tmp_path, capsys):
    """wse-bcast: the PEs compute little and stream (async) most of the run, and each class
    is its own, labelled map; a TPU trace maps its chips (links by the chip they leave)."""
    bcast = tmp_path / "b.arrows"
    assert cli.main(["run", "wse-bcast", "--set", "pes=4", "--set", "elements=64", "--quiet",
                     "--trace", str(bcast), "--trace-level", "detail"]) == 0  # fmt: skip
    busy, streams, fabric = (plots.mesh_values(str(bcast), m) for m in ("busy", "async", "fabric"))
    assert busy.shape == (1, 4) and (streams > busy).all() and (streams > 0.5).all()
    assert (fabric > 0).all() and (busy <= 1).all()
    tpu = tmp_path / "t.arrows"
    assert cli.main(["run", "tpu-collective", "--set", "topology=2x2", "--set", "bytes=4096",
                     "--quiet", "--trace", str(tpu), "--trace-level", "detail"]) == 0  # fmt: skip
    assert plots.mesh_values(str(tpu), "fabric").shape == (2, 2)
    out = tmp_path / "m.png"
    assert cli.main(["plot", "mesh", str(tpu), "--metric", "fabric", "-o", str(out)]) == 0
    capsys.readouterr()
    grid = plots.mesh_values(str(bcast), "async") * 100
    fig = plots.mesh_figure(grid, plots.ACTIVITY_LABELS["async"], "async", vmax=100.0)
    bar = fig.axes[1]  # below a single row: a horizontal colour bar
    assert bar.get_xlabel() == "async operations in flight (% of run)"
    plt.close(fig)


#: One small traced run per family: (kind, point); tests/test_metric_names.py's small points.
FAMILIES = {
    "wafer": ("wse-bcast", {"pes": 4, "elements": 64}),
    "tpu": ("tpu-collective", {"topology": "2x2", "bytes": 4096, "op": "allreduce"}),
    "pim": ("jitq", {"rows": 64, "cols": 64}),
    "cluster": ("gpt-ws", {"model": "custom", "layers": 1, "hidden": 16, "sequence": 8,
                           "vocab": 32, "heads": 2, "batch": 1, "steps": 1}),
}  # fmt: skip
#: Plot commands that need a mesh or links: which families have them.
NEEDS = {
    "mesh": {"wafer", "tpu"},
    "links": {"wafer", "tpu"},
    "timeline": set(FAMILIES),
    "heatmap": set(FAMILIES),
}


@pytest.fixture(scope="module")
def family_traces(tmp_path_factory):
    from runner import scenario
    from simcore import config as cfg
    from simcore.tracing import TraceLevel

    folder = tmp_path_factory.mktemp("families")
    out = {}
    for family, (name, point) in FAMILIES.items():
        kind = registry.KINDS[name]
        path = folder / f"{family}.arrows"
        scenario.run_scenario(scenario.Scenario(name, "<test>", kind, "", {}),
                              cfg.load(kind.params, point), trace_path=str(path),
                              trace_level=TraceLevel.DETAIL)  # fmt: skip
        out[family] = str(path)
    return out


def _figure(command: str, path: str):
    if command == "timeline":
        return plots.timeline_figure(path)
    if command == "links":
        return plots.links_figure(path)
    if command == "heatmap":
        return heatmap.heatmap_figure(path)
    for metric in plots.ACTIVITY_LABELS:  # the first class the run has (a TPU collective: async)
        try:
            grid = plots.mesh_values(path, metric) * 100
        except TraceError as exc:
            if "on its PEs or chips" in str(exc):
                continue
            raise
        return plots.mesh_figure(grid, plots.ACTIVITY_LABELS[metric], metric, vmax=100.0)
    raise AssertionError(f"{path}: no activity on its PEs or chips")


@pytest.mark.parametrize("command", sorted(NEEDS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_plot_on_every_family_has_units_and_no_overlapping_text(
    family, command, family_traces
):
    path = family_traces[family]
    if family not in NEEDS[command]:
        with pytest.raises(TraceError) as err:
            _figure(command, path)
        assert "timeline" in str(err.value)  # a clear refusal that says what to use
        return
    fig = _figure(command, path)
    labels = [a.get_xlabel() for a in fig.axes] + [a.get_ylabel() for a in fig.axes]
    assert any(re.search(r"\((s|ms|us|ns|column|.*%.*)\)", lab) for lab in labels), labels
    assert not overlapping_texts(fig), (family, command)
    plt.close(fig)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_banks_and_roofline_on_every_family(family, family_traces):
    """`plot banks` draws the HBM-PIM trace (units, no overlapping text) and refuses the
    others in one line; `plot roofline` refuses these small runs, which do no arithmetic or
    carry no FLOP/byte counts (tests/test_roofline.py draws SUMMA and a TPU matmul)."""
    from app.plots import WAFER_FLOP_PER_ELEMENT, bank_timing_of, roofs_of
    from traces import banks, roofline

    path = family_traces[family]
    if family == "pim":
        fig = banks.banks_figure(path, bank_timing_of(path), bins=200)
        assert fig.axes[0].get_xlabel() == "simulated time (us)"
        assert not overlapping_texts(fig)
        plt.close(fig)
    else:
        with pytest.raises(TraceError, match="is no HBM or PIM run"):
            bank_timing_of(path)
    with pytest.raises(TraceError, match="no FLOP") as err:
        roofline.roofline_figure(path, roofline.count(path, WAFER_FLOP_PER_ELEMENT), roofs_of(path))
    assert "\n" not in str(err.value)
