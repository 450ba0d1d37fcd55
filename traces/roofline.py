"""Roofline of a traced run: each device's achieved FLOP/s against its arithmetic intensity.

What is counted, per device (a wafer ``pe[x,y]`` or a TPU ``chip[...]``, with everything under
it), from what the trace records at ``--trace-level detail``:

* **FLOP**: a wafer instruction slice (category ``instr``) does ``elements`` x the FLOP per
  element of its instruction (given by the caller, who knows the ISA: an FMAC is 2, an add 1,
  a move 0); a TPU ``mxu`` slice multiplies ``[m, k] x [k, n]``: ``2 m k n``.
* **bytes**: what feeds the compute from the level the roof is drawn for. On the wafer, the
  fabric: wavelets a PE's router delivers to its own CE (``port`` ``RAMP``; an express
  stream's ``ports`` naming ``RAMP``, ``wavelets`` of them), 4 bytes each. On a TPU, HBM:
  the ``bytes`` of its ``hbm`` slices.

Achieved FLOP/s is a device's FLOP over the whole run's simulated time; intensity is FLOP per
byte. The roofs (peak compute, bandwidth) come from the configured hardware and are the
caller's (``app/plots.py``), since this layer imports no family.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simcore.errors import TraceError
from traces.plots import check_output, fit_title, header_tick_hz, plt
from traces.reader import coded, iter_batches, start_end

#: Bytes in one wafer wavelet (its 32-bit payload).
WAVELET_BYTES = 4

_DEVICE = re.compile(r"^(pe|chip)\[\d+(,\s*\d+)*\]$")


@dataclasses.dataclass
class Counts:
    """Per device: FLOP and bytes; the run's length."""

    flop: dict[str, float]
    bytes: dict[str, float]
    end_ticks: int
    tick_hz: int

    @property
    def seconds(self) -> float:
        return self.end_ticks / self.tick_hz


def _device(component: str) -> str | None:
    for part in component.split("/"):
        if _DEVICE.match(part):
            return part
    return None


def _int_arg(batch: pa.RecordBatch, rows: np.ndarray, key: str) -> np.ndarray:
    got = pc.map_lookup(batch.column("args_int").take(pa.array(rows)), key, "first")
    return pc.fill_null(got, 0).to_numpy(zero_copy_only=False).astype(np.float64)


def _add(acc: dict[str, float], devices: list[str | None], ids: np.ndarray, v: np.ndarray) -> None:
    sums = np.bincount(ids, weights=v, minlength=len(devices))
    for i in np.flatnonzero(sums).tolist():
        name = devices[i]
        if name is not None:
            acc[name] = acc.get(name, 0.0) + float(sums[i])


def count(path: str, flop_per_element: dict[str, float]) -> Counts:
    """FLOP and bytes per device (module doc), one pass over the trace's batches with array
    operations (no Python loop per event)."""
    tick_hz = header_tick_hz(path)
    flop: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    end = 0
    for batch in iter_batches(path):
        end = max(end, int(start_end(batch)[1].max(initial=0)))
        comps, ci = coded(batch, "component")
        devices = [_device(c) for c in comps]
        cats, ki = coded(batch, "category")
        names, ni = coded(batch, "name")

        def rows_of(category: str, cats: list[str] = cats, ki: np.ndarray = ki) -> np.ndarray:
            if category not in cats:
                return np.zeros(0, np.int64)
            return np.flatnonzero(ki == cats.index(category))

        rows = rows_of("instr")
        if len(rows):
            per = np.asarray([flop_per_element.get(n, 0.0) for n in names])
            _add(flop, devices, ci[rows], per[ni[rows]] * _int_arg(batch, rows, "elements"))
        rows = rows_of("mxu")
        if len(rows):
            m, k, n = (_int_arg(batch, rows, a) for a in ("m", "k", "n"))
            _add(flop, devices, ci[rows], 2.0 * m * k * n)
        rows = rows_of("hbm")
        if len(rows):
            _add(nbytes, devices, ci[rows], _int_arg(batch, rows, "bytes"))
        rows = rows_of("wavelet")
        if len(rows):
            args = batch.column("args_str").take(pa.array(rows))
            port = pc.fill_null(pc.map_lookup(args, "port", "first"), "")
            ports = pc.fill_null(pc.map_lookup(args, "ports", "first"), "")
            single = pc.equal(port, "RAMP").to_numpy(zero_copy_only=False)
            stream = pc.match_substring_regex(ports, r"(^|,)RAMP(,|$)").to_numpy(
                zero_copy_only=False
            )
            wavelets = np.where(stream, _int_arg(batch, rows, "wavelets"), single.astype(float))
            _add(nbytes, devices, ci[rows], WAVELET_BYTES * wavelets)
    return Counts(flop, nbytes, end, tick_hz)


@dataclasses.dataclass(frozen=True)
class Roofs:
    """The configured hardware's roofs for one device: compute peaks (label -> FLOP/s, one
    per precision the run uses) and the bandwidth of the level bytes are counted at."""

    compute: dict[str, float]
    bandwidth_bytes_per_s: float
    bandwidth_label: str
    device: str  # "PE" or "chip"


def roofline_figure(path: str, counts: Counts, roofs: Roofs):
    """Log-log roofline: one point per device (FLOP over the run's time, FLOP per byte), all
    devices together (total FLOP per total byte, mean FLOP/s) as a larger hollow marker, a
    roof per compute peak: ``min(peak, bandwidth x intensity)``. Devices that did no FLOP,
    or received no counted bytes (infinite intensity), are not drawn and the title counts
    them."""
    names = sorted(set(counts.flop) | set(counts.bytes))
    flop = np.asarray([counts.flop.get(n, 0.0) for n in names])
    nbytes = np.asarray([counts.bytes.get(n, 0.0) for n in names])
    if not flop.any():
        raise TraceError(
            f"'{path}' records no FLOP on its {roofs.device}s (compute slices with their sizes "
            "are traced at --trace-level detail)"
        )
    drawn = (flop > 0) & (nbytes > 0)
    if not drawn.any():
        raise TraceError(
            f"'{path}': no {roofs.device} both computed and read counted bytes "
            f"({roofs.bandwidth_label}); its intensity is unbounded, so there is no roofline"
        )
    seconds = counts.seconds
    ai = flop[drawn] / nbytes[drawn]
    perf = flop[drawn] / seconds
    fig, ax = plt.subplots(figsize=(8.0, 5.2))
    lo = min(ai.min(), min(roofs.compute.values()) / roofs.bandwidth_bytes_per_s) / 8
    hi = max(ai.max(), max(roofs.compute.values()) / roofs.bandwidth_bytes_per_s) * 8
    x = np.geomspace(lo, hi, 200)
    styles = ["-", "--", ":", "-."]
    for i, (label, peak) in enumerate(sorted(roofs.compute.items(), key=lambda kv: -kv[1])):
        ax.plot(x, np.minimum(peak, roofs.bandwidth_bytes_per_s * x), styles[i % 4],
                color="#444444", label=f"roof: {label} {_si(peak)}FLOP/s")  # fmt: skip
    ax.plot([], [], " ", label=f"slope: {roofs.bandwidth_label} "
                               f"{_si(roofs.bandwidth_bytes_per_s)}B/s")  # fmt: skip
    mean_ai = flop[drawn].sum() / nbytes[drawn].sum()
    ax.scatter([mean_ai], [perf.mean()], s=120, marker="D", facecolors="none", linewidths=1.5,
               edgecolors="#ff7f0e", label=f"all {drawn.sum()} {roofs.device}s together",
               zorder=3)  # fmt: skip
    ax.scatter(ai, perf, s=14, color="#1f77b4", alpha=0.7, label=f"a {roofs.device}", zorder=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    top = max(roofs.compute.values())
    ax.set_ylim(min(perf.min(), top) / 20, top * 3)
    ax.set_xlabel(f"arithmetic intensity (FLOP/byte of {roofs.bandwidth_label})")
    ax.set_ylabel(f"achieved per {roofs.device} (FLOP/s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    left = len(names) - int(drawn.sum())
    note = f"; {left} {roofs.device}(s) without FLOP or bytes not drawn" if left else ""
    fit_title(fig, ax, f"roofline per {roofs.device}, {_si(seconds)}s run: "
                       f"{os.path.basename(path)}{note}", fontsize=9)  # fmt: skip
    fig.tight_layout()
    return fig


def plot_roofline(path: str, out: str, counts: Counts, roofs: Roofs) -> None:
    check_output(out)
    fig = roofline_figure(path, counts, roofs)
    fig.savefig(out)
    plt.close(fig)


def _si(value: float) -> str:
    """``1.97e14`` -> ``197 T``: three significant digits and an SI prefix, then the unit."""
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g} {prefix}"
    for prefix, size in (("", 1.0), ("m", 1e-3), ("u", 1e-6), ("n", 1e-9)):
        if abs(value) >= size:
            return f"{value / size:.3g} {prefix}"
    return f"{value:.3g} "
