"""``hbm-read``: host reads through one pseudo-channel's controller, streaming or random.

The DRAM model's own check, the way DRAM simulators are checked: a stream of reads to
consecutive addresses (bank groups interleaved first, then columns, banks, rows) should reach
the data bus peak except for refresh; random reads miss their row every time and run at the
activation rate. Each request carries the bank's real bytes back and ``correct`` compares them
with what the bank holds.

The analytical model (:func:`model`): a stream moves one burst each tCCD_S cycles; a random
access costs max(tRRD_S, tFAW / 4, tRC / banks) cycles (the activation rate); both stretched by
refresh, (tRFC + tRP + tRCD) every tREFI.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pim.controller import Request, latency_cycles
from pim.stack import HbmConfig, HbmStack
from runner import registry
from simcore.config import param, section
from simcore.sim import RunResult, Simulation
from workloads.pim.jitq import PCH_BYTES


@dataclasses.dataclass(frozen=True, kw_only=True)
class HbmReadParams(registry.ScenarioParams):
    pattern: str = param("stream", "address pattern", choices=("stream", "random"))
    requests: int = param(4096, "32-byte reads the host issues", min=1, max=10_000_000)
    rows_spanned: int = param(4096, "rows per bank the random pattern draws from", min=1)
    write_fraction: float = param(
        0.0, "share of the requests that are writes (drawn at random)", min=0.0, max=1.0
    )
    hbm: HbmConfig = section(HbmConfig, "the HBM stack")


def address(org: Any, a: int) -> tuple[int, int, int]:
    """(bank, row, column) of a 32-byte address: bank group first, then column, bank, row."""
    g = a % org.bankgroups
    a //= org.bankgroups
    col = a % org.columns
    a //= org.columns
    b = a % org.banks_per_group
    a //= org.banks_per_group
    return g * org.banks_per_group + b, a, col


@dataclasses.dataclass
class ReadRun:
    stack: HbmStack
    requests: list[Request]
    expect: list[np.ndarray]


def build(sim: Simulation, p: HbmReadParams) -> ReadRun:
    stack = HbmStack(sim, p.hbm, pchs=1)
    org, pch = stack.std.org, stack.pchs[0]
    rng = np.random.default_rng([p.seed, 13])
    span = org.bankgroups * org.columns * org.banks_per_group * min(p.rows_spanned, org.rows - 3)
    addrs = np.arange(p.requests) if p.pattern == "stream" else rng.integers(0, span, p.requests)
    writes = (
        rng.random(p.requests) < p.write_fraction
        if p.write_fraction
        else np.zeros(p.requests, bool)
    )
    reqs = []
    for a, w in zip(addrs.tolist(), writes.tolist(), strict=True):
        bank, row, col = address(org, a % span)
        reqs.append(Request(w, bank, row, col))
    touched = sorted({r.row for r in reqs})
    for row in touched:
        pch.row(row)[:] = rng.integers(0, 1 << 16, pch.row(row).shape, dtype=np.uint16)
    # a write stores the bytes its column holds, so what each read returns does not depend on
    # the order the scheduler chose (the controller has no same-address hazard check)
    expect = [pch.row(r.row)[r.bank, r.col].copy() for r in reqs]
    for r, e in zip(reqs, expect, strict=True):
        if r.is_write:
            r.data = e
    stack.controllers[0].submit(reqs)
    return ReadRun(stack, reqs, expect)


def metrics(sim: Simulation, p: HbmReadParams, run: ReadRun, result: RunResult) -> dict:
    ctl, t = run.stack.controllers[0], run.stack.std.timing
    cycles = ctl.end_cycle
    byte = run.stack.std.org.column_bytes
    peak = byte / t.nBL * t.clock_hz
    bw = p.requests * byte / (cycles / t.clock_hz)
    m = model(p)
    lat = latency_cycles([ctl])
    return {
        "time_s": cycles / t.clock_hz,
        "cycles": cycles,
        "bytes_per_s": bw,
        "peak_fraction": bw / peak,
        "row_activations": ctl.counts.get("ACT", 0),
        "refreshes": ctl.counts.get("REF", 0),
        "writes": ctl.counts.get("WR", 0),
        "latency_mean_s": lat["mean"] / t.clock_hz,
        "latency_p50_s": lat["p50"] / t.clock_hz,
        "latency_p99_s": lat["p99"] / t.clock_hz,
        "correct": all(
            r.is_write or (r.value is not None and np.array_equal(r.value, e))
            for r, e in zip(run.requests, run.expect, strict=True)
        ),
        "model_time_s": m["time_s"],
        "model_cycles": m["cycles"],
        "model_error_pct": 100.0 * (cycles - m["cycles"]) / m["cycles"],
    }


def model(p: HbmReadParams) -> dict[str, Any]:
    std = p.hbm.standard()
    t, org = std.timing, std.org
    activation_rate = max(t.nRRD_S, t.nFAW / 4, t.nRC / org.banks)
    if p.pattern == "stream":
        per = float(t.nCCD_S)
    else:  # a random read hits the open row with probability 1 / (rows it draws from)
        hit = 1.0 / min(p.rows_spanned, org.rows - 3)
        per = hit * t.nCCD_S + (1.0 - hit) * activation_rate
    cycles = p.requests * per
    if p.hbm.refresh == "all-bank":
        cycles *= 1 + (t.nRFC + t.nRP + t.nRCD) / t.nREFI
    return {
        "time_s": cycles / t.clock_hz,
        "cycles": cycles,
        "peak_fraction": t.nBL * p.requests / cycles,
    }


POINTS = (("stream", 4096), ("stream", 16384), ("random", 2048), ("random", 8192))


def _validate(runner: registry.Runner) -> list[registry.ValidationRow]:
    params = [HbmReadParams(pattern=pat, requests=n) for pat, n in POINTS]
    rows = []
    for p, m in zip(params, runner("hbm-read", params), strict=True):
        if not m["correct"]:
            raise RuntimeError(f"hbm-read {p.pattern}: reads returned wrong data")
        rows.append(
            registry.ValidationRow(
                "hbm-read",
                f"{p.pattern} {p.requests}",
                m["cycles"],
                m["model_cycles"],
                unit="cycles",
            )
        )
    return rows


#: Host bytes of one request (the request object, its expected word and the address arrays).
REQUEST_BYTES = 200


def footprint(p: HbmReadParams) -> registry.Footprint:
    """The stack and its one pseudo-channel (a controller with its banks and PIM track), and
    the requests."""
    return registry.Footprint(
        3 + p.hbm.standard().org.banks, PCH_BYTES + REQUEST_BYTES * p.requests, "requests"
    )


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="hbm-read",
            summary="host reads through an HBM pseudo-channel controller (stream or random)",
            params=HbmReadParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
    registry.register_case(
        registry.ValidationCase(
            name="hbm-read",
            summary="HBM read cycles vs the bus-peak (stream) and activation-rate (random) "
            "models, refresh included",
            run=_validate,
            tolerance=8.0,
            origin=__name__,
        )
    )
