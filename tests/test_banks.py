"""``plot banks``: each HBM bank's state over time from its DRAM commands and the run's timing
table; the row-open state agrees with the trace's own row slices."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from app import cli
from app.plots import bank_timing_of
from tests.figure_text import overlapping_texts
from traces import banks, read_trace
from traces.summary import union_length


@pytest.fixture(scope="module")
def jitq(tmp_path_factory):
    path = tmp_path_factory.mktemp("banks") / "j.arrows"
    assert cli.main(["run", "jitq", "--set", "rows=64", "--set", "cols=64", "--quiet",
                     "--trace", str(path), "--trace-level", "detail"]) == 0  # fmt: skip
    return str(path)


def test_timing_is_the_presets(jitq):
    t = bank_timing_of(jitq)
    assert (t.clock_hz, t.nRP, t.nRFC) == (1_200_000_000, 18, 420)  # 15 ns, 350 ns at 1.2 GHz


def test_row_open_share_is_the_row_slices_and_refresh_is_nrfc(jitq):
    timing = bank_timing_of(jitq)
    state, shares, names, end, _ = banks.bank_states(jitq, timing, bins=1000)
    assert names[:2] == ["pch[0]/bank[0]", "pch[0]/bank[1]"] and len(names) == 16
    assert shares.sum() == pytest.approx(1.0) and (shares > 0).all()
    rows = read_trace(jitq).table.to_pylist()
    open_ticks = 0
    for bank in names:
        spans = [(r["ts_ticks"], r["ts_ticks"] + r["dur_ticks"]) for r in rows
                 if r["category"] == "row" and r["component"].endswith(bank)]  # fmt: skip
        a = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        open_ticks += union_length(a[:, 0], a[:, 1])
    # the shares are exact (from the coverage, not the bins' main states)
    assert shares[1] * len(names) * end == pytest.approx(open_ticks)
    refs = sum(1 for r in rows if r["category"] == "dram" and r["name"] == "REF")
    assert shares[3] * len(names) * end == pytest.approx(refs * timing.nRFC)  # 1 tick a cycle
    assert state.shape == (16, 1000) and (state == 3).any() and (state == 1).any()


def test_figure_has_units_and_no_overlapping_text(jitq):
    fig = banks.banks_figure(jitq, bank_timing_of(jitq), bins=300)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "simulated time (us)"
    assert not overlapping_texts(fig)
    plt.close(fig)


def test_cli_banks_and_refusal(jitq, tmp_path, capsys):
    out = tmp_path / "b.png"
    assert cli.main(["plot", "banks", jitq, "--bins", "200", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    src = tmp_path / "w.arrows"
    assert cli.main(["run", "wse-bcast", "--set", "pes=2", "--set", "elements=8", "--quiet",
                     "--trace", str(src)]) == 0  # fmt: skip
    capsys.readouterr()
    assert cli.main(["plot", "banks", str(src), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(wse-bcast) is no HBM or PIM run" in err
