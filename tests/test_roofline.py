"""``plot roofline``: wafer kernels and TPU steps from their trace's counts, against the roofs
of the configured hardware; other families refused in one line."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from app import cli
from app.plots import WAFER_FLOP_PER_ELEMENT, roofs_of
from pe import isa
from tests.figure_text import overlapping_texts
from traces import roofline


def _run(tmp_path, name, *sets):
    path = tmp_path / f"{name}.arrows"
    args = ["run", name, "--quiet", "--trace", str(path), "--trace-level", "detail"]
    for s in sets:
        args += ["--set", s]
    assert cli.main(args) == 0
    return str(path)


def test_every_wafer_instruction_has_its_flop_count():
    assert set(WAFER_FLOP_PER_ELEMENT) == set(isa.OPS)


def test_summa_points_are_its_fmacs_over_its_fabric_input(tmp_path, capsys):
    path = _run(tmp_path, "summa", "p=2", "mt=4")
    capsys.readouterr()
    counts = roofline.count(path, WAFER_FLOP_PER_ELEMENT)
    # SUMMA at P=2: each PE does P steps of Mt^2 FMACs over Mt elements: 2 Mt^3 P FLOP
    assert sorted(counts.flop) == ["pe[0,0]", "pe[0,1]", "pe[1,0]", "pe[1,1]"]
    assert all(v == 2 * 4**3 * 2 for v in counts.flop.values())
    assert all(v > 0 and v % roofline.WAVELET_BYTES == 0 for v in counts.bytes.values())
    roofs = roofs_of(path)
    assert roofs.device == "PE" and roofs.compute["FP32 fmacs"] == pytest.approx(850e6)
    assert roofs.compute["FP16 fmach"] == pytest.approx(8 * 850e6)
    assert roofs.bandwidth_bytes_per_s == pytest.approx(4 * 850e6)
    out = tmp_path / "r.png"
    assert cli.main(["plot", "roofline", path, "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_tpu_matmul_per_chip_against_the_chip_table(tmp_path):
    path = _run(tmp_path, "tpu-matmul", "topology=2x2", "i=64", "j=256", "k=256")
    counts = roofline.count(path, WAFER_FLOP_PER_ELEMENT)
    assert len(counts.flop) == 4
    # J sharded over x (2 chips): each chip multiplies [64, 128] x [128, 256]
    assert all(v == 2 * 64 * 128 * 256 for v in counts.flop.values())
    assert all(v > 0 for v in counts.bytes.values())
    roofs = roofs_of(path)
    assert roofs.compute == {"bf16 peak": 1.97e14} and roofs.bandwidth_bytes_per_s == 8.1e11
    fig = roofline.roofline_figure(path, counts, roofs)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte of HBM)"
    assert ax.get_ylabel() == "achieved per chip (FLOP/s)"
    assert not overlapping_texts(fig)
    plt.close(fig)


@pytest.mark.parametrize(
    ("name", "sets", "says"),
    [
        ("jitq", ["rows=16", "cols=64"], "(jitq) carries no FLOP/byte counts"),
        ("wse-bcast", ["pes=2", "elements=8"], "records no FLOP on its PEs"),
    ],
)
def test_traces_without_counts_are_refused_in_one_line(tmp_path, capsys, name, sets, says):
    path = _run(tmp_path, name, *sets)
    capsys.readouterr()
    assert cli.main(["plot", "roofline", path, "-o", str(tmp_path / "r.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert not (tmp_path / "r.png").exists()
