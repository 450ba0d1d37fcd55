"""``plot heatmap``: units x time bins, exact coverage, any size, every family's rows."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import numpy as np
import pytest

from app import cli
from tests.trace_samples import write_wafer_trace
from traces import heatmap


def _naive(ids, starts, ends, n_units, edges):
    """Per tick: is the unit covered? Then summed per bin (the definition, slowly)."""
    span = int(edges[-1])
    on = np.zeros((n_units, span), bool)
    for u, s, e in zip(ids, starts, ends, strict=True):
        on[u, s:e] = True
    return np.stack([on[:, a:b].sum(axis=1) for a, b in itertools.pairwise(edges)],
                    axis=1)  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_binned_coverage_is_the_union_per_bin(seed):
    rng = np.random.default_rng(seed)
    n_units, n = 5, 60
    ids = rng.integers(0, n_units, n)
    starts = rng.integers(0, 190, n)
    ends = starts + rng.integers(0, 30, n)
    edges = np.array(sorted({0, 230, *rng.integers(1, 230, 7).tolist()}), dtype=np.int64)
    got = heatmap.binned_coverage(ids, starts, ends, n_units, edges)
    assert np.array_equal(got, _naive(ids, starts, ends, n_units, edges))


def test_wafer_rows_are_pes_in_row_order_and_cells_are_percent_of_bin(tmp_path):
    src = tmp_path / "w.arrows"
    write_wafer_trace(src, w=3, h=2, steps=6)
    grid, names, kind, end, _ = heatmap.heatmap_values(str(src), bins=6)
    assert kind == "pe" and end == 600
    assert names == ["pe[0,0]", "pe[1,0]", "pe[2,0]", "pe[0,1]", "pe[1,1]", "pe[2,1]"]
    # every step: tasks over [t, t+80), instructions and wavelets inside; stalls do not count
    assert np.allclose(grid, 80.0)
    busy, _, _, _, _ = heatmap.heatmap_values(str(src), metric="fabric", bins=6)
    # wavelets: a send [t+10, t+14) and receives from the row's other PEs in [t+15, t+18)
    assert (busy > 0).all() and (busy < 10).all()


def test_a_64x64_wafer_maps_every_pe(tmp_path):
    src = tmp_path / "w64.arrows"
    write_wafer_trace(src, w=64, h=64, steps=1, batch_rows=8192, fanout=1)
    grid, names, kind, _, _ = heatmap.heatmap_values(str(src), bins=50)
    assert (
        kind == "pe"
        and grid.shape == (4096, 50)
        and names[64] == "pe[0,1]"
        and names[-1] == "pe[63,63]"
    )
    fig = heatmap.heatmap_figure(str(src), bins=50)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert all(lab.startswith("pe[0,") for lab in labels)  # whole PE rows named
    assert ax.get_xlabel() == "simulated time (ns)"
    plt.close(fig)


def test_a_16x16_torus_maps_chips_and_links(tmp_path):
    src = tmp_path / "t.arrows"
    assert cli.main(["run", "tpu-collective", "--set", "topology=16x16", "--set", "bytes=65536",
                     "--quiet", "--trace", str(src)]) == 0  # fmt: skip
    chips, names, kind, _, _ = heatmap.heatmap_values(str(src), unit="chip", bins=40)
    assert kind == "chip" and chips.shape == (256, 40) and names[:2] == ["chip[0,0]", "chip[1,0]"]
    links, names, kind, _, _ = heatmap.heatmap_values(str(src), unit="link", bins=40)
    assert kind == "link" and links.shape[0] >= 256 and all(n.startswith("link[") for n in names)
    assert links.max() > 0 and links.max() <= 100.0


def test_cli_heatmap_and_its_refusals(tmp_path, capsys):
    src = tmp_path / "w.arrows"
    write_wafer_trace(src)
    out = tmp_path / "h.png"
    assert cli.main(["plot", "heatmap", str(src), "--by", "component", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert cli.main(["plot", "heatmap", str(src), "--by", "bank", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no HBM banks" in err and "--by" in err
    assert cli.main(["plot", "heatmap", str(src), "--bins", "9999", "-o", str(out)]) == 2
    assert "--bins 9999 is out of range; give 1 to 5000" in capsys.readouterr().err


def test_cli_choices_are_the_modules():
    assert cli.HEATMAP_UNITS == heatmap.UNITS and cli.HEATMAP_METRICS == heatmap.METRICS


def test_plot_links_counts_express_stream_wavelets(tmp_path):
    """A fast-fidelity broadcast moves its wavelets in express streams (``ports``, ``wavelets``
    over a slice): each link they name is busy one cycle per wavelet, not the whole slice."""
    from traces import plots, read_trace

    src = tmp_path / "b.arrows"
    assert cli.main(["run", "wse-bcast", "--set", "pes=4", "--set", "elements=64", "--quiet",
                     "--trace", str(src), "--trace-level", "detail"]) == 0  # fmt: skip
    rows = read_trace(src).table.to_pylist()
    end = max(r["ts_ticks"] + r["dur_ticks"] for r in rows)
    grids, family = plots.link_values(str(src))
    assert family == "mesh"
    (stream,) = [r for r in rows if r["component"] == "wafer/pe[2,0]/router"
                 and dict(r["args_str"]).get("ports") == "E,W"]  # fmt: skip
    wavelets = dict(stream["args_int"])["wavelets"]
    per_cycle = stream["dur_ticks"] / stream["dur_cycles"]
    singles = sum(r["dur_ticks"] for r in rows if r["component"] == "wafer/pe[2,0]/router"
                  and dict(r["args_str"] or ()).get("port") == "E")  # fmt: skip
    assert grids["E"][0, 2] == pytest.approx(100 * (wavelets * per_cycle + singles) / end)
    assert 0 < grids["E"][0, 2] < 50  # 64 wavelets in a run of hundreds of cycles
