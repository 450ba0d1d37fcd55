"""The controller's two request paths agree: ``hbm.request_path = bulk`` (several commands a
kernel event) issues every command of ``event`` (the reference) at the same cycle, with the same
bank, row and column, and leaves the same latencies, counts, data and checker state.

Seeded random request lists with writes, spread arrivals and refreshes, over every scheduling
option; streamed traces over several pseudo-channels and stacks; the hand-over to the reference
(a request to a mode-register row, a column outside the row); traces (one traced controller:
the bulk path's events are the reference's; several: the reference runs).
"""

from __future__ import annotations

import numpy as np
import pytest

from app.cli import main
from pim.controller import Request
from pim.device import ProtocolError
from pim.stack import HbmConfig, HbmStack
from runner.scenario import run_kind
from simcore import Simulation
from tests.test_pim_dram import independent_check
from traces.reader import iter_batches, read_header
from workloads.pim import hbmtrace
from workloads.pim.hbmread import address


def requests(seed: int, n: int, *, rows: int, write_fraction: float, gap: float) -> list[Request]:
    """``n`` random accesses over ``rows`` rows per bank; arrivals in bursts (a mean ``gap``
    cycles apart, many at once), writes carrying data."""
    rng = np.random.default_rng([seed, 24])
    org = HbmConfig().standard().org
    span = org.bankgroups * org.columns * org.banks_per_group * rows
    arrivals = np.cumsum(rng.geometric(1.0 / (1.0 + gap), n) - 1) if gap else np.zeros(n, int)
    out = []
    for a, w, t in zip(rng.integers(0, span, n).tolist(), (rng.random(n) < write_fraction).tolist(),
                       arrivals.tolist(), strict=True):  # fmt: skip
        bank, row, col = address(org, a)
        data = rng.integers(0, 1 << 16, 16, dtype=np.uint16) if w else None
        out.append(Request(bool(w), bank, row, col, arrival=int(t), data=data))
    return out


def run(cfg: HbmConfig, reqs: list[Request]):
    """Run ``reqs`` (copies) through one controller; everything the two paths must agree on."""
    sim = Simulation()
    stack = HbmStack(sim, cfg, pchs=1, record=True)
    mine = [Request(r.is_write, r.bank, r.row, r.col, r.arrival, r.data) for r in reqs]
    ctl = stack.controllers[0]
    ctl.submit(mine)
    result = sim.run()
    return state(ctl, result.end_ticks), [(r.done, r.first, r.seq, None if r.value is None
                                          else r.value.tolist()) for r in mine], stack  # fmt: skip


def state(ctl, end_ticks: int) -> dict:
    ck = ctl.checker
    return {
        "log": list(ctl.trace_log),
        "counts": dict(ctl.counts),
        "counts order": list(ctl.counts),
        "cycles": (
            ctl.end_cycle,
            ctl.first_cycle,
            ctl.last_cycle,
            ctl._next_free,
            ctl.next_refresh,
            end_ticks,
        ),
        "requests": (ctl.completed, ctl.row_hits, ctl.row_misses, ctl.row_conflicts),
        "latency": (ctl.latency_sum_cycles, dict(ctl.latency_hist)),
        "bus": (ctl.bus_busy_cycles, ctl.host_bytes),
        "banks": (list(ctl.pch.open), list(ctl.pch.open_before), list(ctl._hits)),
        "checker": (
            list(ck.last_pch),
            [list(x) for x in ck.last_bg],
            [list(x) for x in ck.last_bank],
            list(ck.acts),
        ),
        "earliest": [ck.earliest1(c, b) for c in ("ACT", "PRE", "RD", "WR") for b in (0, 5)],
    }


OPTIONS = {
    "default": {},
    "unified": {"write_queue_depth": 0},
    "nocap": {"row_hit_cap": 0},
    "cap1-q8": {"row_hit_cap": 1, "queue_depth": 8},
    "small-wq": {"write_queue_depth": 8, "write_high_watermark": 4, "write_low_watermark": 1},
    "deep": {"queue_depth": 128, "write_queue_depth": 64, "write_high_watermark": 48},
    "fcfs": {"scheduler": "fcfs"},
    "fcfs-closed-unified": {"scheduler": "fcfs", "page_policy": "closed", "write_queue_depth": 0},
    "closed": {"page_policy": "closed"},
    "closed-cap2": {"page_policy": "closed", "row_hit_cap": 2, "queue_depth": 4},
    "hbm2-norefresh": {"preset": "hbm2-2.4", "refresh": "none"},
    # watermarks a config refuses (low above high: the drain mode flips at every decision),
    # built by hand: the bulk path must follow the reference there too
    "low-above-high": {
        "write_queue_depth": 16,
        "write_high_watermark": 4,
        "write_low_watermark": 8,
    },
}


@pytest.mark.parametrize("opts", list(OPTIONS.values()), ids=list(OPTIONS))
@pytest.mark.parametrize(
    ("seed", "rows", "write_fraction", "gap"),
    [(1, 4096, 0.3, 0.0), (2, 8, 0.25, 3.0), (3, 64, 0.5, 12.0)],
    ids=["random-at-0", "hits-bursty", "half-writes-sparse"],
)
def test_bulk_issues_the_reference_commands(opts, seed, rows, write_fraction, gap):
    reqs = requests(seed, 1800, rows=rows, write_fraction=write_fraction, gap=gap)
    ref, ref_reqs, ref_stack = run(HbmConfig(request_path="event", **opts), reqs)
    got, got_reqs, got_stack = run(HbmConfig(request_path="bulk", **opts), reqs)
    assert ref_stack.controllers[0].request_path == "event"
    for key in ref:
        assert got[key] == ref[key], key
    assert got_reqs == ref_reqs
    assert ref["requests"][0] == len(reqs)
    if opts.get("refresh") != "none":
        assert ref["counts"]["REF"] >= 1  # a refresh fell inside the run
    ra, ga = ref_stack.pchs[0].rows, got_stack.pchs[0].rows
    assert sorted(ra) == sorted(ga) and all(np.array_equal(ra[r], ga[r]) for r in ra)


def test_bulk_obeys_the_table_on_its_own():
    """Not only equal to the reference: the independent checker passes its stream."""
    reqs = requests(5, 700, rows=16, write_fraction=0.3, gap=2.0)
    got, _, stack = run(HbmConfig(), reqs)
    assert independent_check(stack.std, got["log"]) > 500


def test_a_request_outside_the_data_rows_hands_over_to_the_reference():
    org = HbmConfig().standard().org
    reqs = requests(6, 600, rows=64, write_fraction=0.2, gap=4.0)
    reqs[300] = Request(False, 3, org.rows - 3, 0, arrival=reqs[300].arrival)  # register row
    ref, ref_reqs, _ = run(HbmConfig(request_path="event"), reqs)
    got, got_reqs, _ = run(HbmConfig(), reqs)
    assert got == ref and got_reqs == ref_reqs
    assert any(e.row == org.rows - 3 for e in got["log"])
    reqs[100] = Request(False, 2, 5, org.columns, arrival=reqs[100].arrival)  # no such column
    messages = []
    for path in ("event", "bulk"):
        with pytest.raises(ProtocolError) as err:
            run(HbmConfig(request_path=path), reqs)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "beyond the row" in messages[0]


def trace_file(tmp_path, n: int = 6000) -> str:
    rng = np.random.default_rng(7)
    cyc = np.cumsum(rng.integers(0, 3, n))
    addr = rng.integers(0, 1 << 34, n) & ~31
    rw = np.where(rng.random(n) < 0.3, "WRITE", "READ")
    path = tmp_path / "r.trace"
    path.write_text("".join(f"{a:#x} {w} {c}\n" for a, w, c in zip(addr, rw, cyc, strict=True)))
    return str(path)


@pytest.mark.parametrize(("scope", "stacks"), [("pch", 1), ("stacks", 1), ("stacks", 2)])
def test_streamed_traces_agree_over_pseudo_channels_and_stacks(tmp_path, scope, stacks):
    path = trace_file(tmp_path)
    out = {}
    for rp in ("event", "bulk"):
        sim = Simulation()
        p = hbmtrace.HbmTraceParams(
            trace=path, scope=scope, address_mapping="row-bank-pch-bankgroup-column",
            hbm=HbmConfig(stacks=stacks, request_path=rp),
        )  # fmt: skip
        tr = hbmtrace.build(sim, p)
        for c in tr.stack.controllers:
            c.record = True
        res = sim.run()
        out[rp] = [state(c, res.end_ticks) for c in tr.stack.controllers]
        out[rp + " metrics"] = hbmtrace.metrics(sim, p, tr, res)
    assert out["bulk"] == out["event"]
    assert out["bulk metrics"] == out["event metrics"]
    assert sum(s["requests"][0] for s in out["bulk"]) == 6000


def test_a_traced_run_writes_the_same_events(tmp_path):
    """One controller traced: the bulk path's trace events are the reference's, in the same
    order (the header differs only in ``hbm.request_path``, which it records). Several
    controllers traced: the reference runs (their events interleave by kernel time)."""
    events, headers = {}, {}
    for rp in ("event", "bulk"):
        out = tmp_path / f"{rp}.arrows"
        args = ["run", "hbm-read", "--set", "pattern=random", "--set", "requests=3000",
                "--set", "write_fraction=0.2", "--set", f"hbm.request_path={rp}",
                "--trace", str(out), "--trace-level", "detail"]  # fmt: skip
        assert main(args) == 0
        events[rp] = [b for b in iter_batches(out)]
        h = read_header(out)
        assert h["config"]["hbm"].pop("request_path") == rp
        headers[rp] = h
    assert len(events["bulk"]) == len(events["event"])
    assert all(a.equals(b) for a, b in zip(events["bulk"], events["event"], strict=True))
    assert sum(b.num_rows for b in events["bulk"]) > 9000
    assert headers["bulk"] == headers["event"]
    sim = Simulation()
    sim.trace_level = 2
    stack = HbmStack(sim, HbmConfig(), pchs=2)
    assert not stack.controllers[0]._bulk_eligible()
    sim.trace_level = 0
    assert stack.controllers[0]._bulk_eligible()


def test_the_option_is_a_documented_choice(capsys):
    assert main(["run", "hbm-read", "--set", "hbm.request_path=fast"]) == 2
    err = capsys.readouterr().err
    assert "hbm.request_path" in err and "bulk" in err and "event" in err
    m = {rp: run_kind("hbm-read", _params(rp)) for rp in ("bulk", "event")}
    assert m["bulk"] == m["event"]


def _params(rp: str):
    from workloads.pim.hbmread import HbmReadParams

    return HbmReadParams(pattern="random", requests=2000, write_fraction=0.25,
                         hbm=HbmConfig(request_path=rp))  # fmt: skip
