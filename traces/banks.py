"""The HBM bank-state timeline: what each bank is doing over time, from its DRAM commands.

A bank's state is read from the commands the controller issued to it (``dram`` slices named
``ACT``, ``PRE``, ``PREA``, ``REF`` on ``pch[i]/bank[j]``), with the memory standard's timing
table (given by the caller, who knows the preset):

* **active (row open)**: from an ``ACT`` to the next ``PRE``/``PREA`` of the bank (or the run's
  end): a row is in the row buffer, reads and writes hit it;
* **precharging**: ``nRP`` cycles after a ``PRE``/``PREA`` (the bank cannot activate before);
* **refreshing**: ``nRFC`` cycles after a ``REF``;
* **idle**: the rest (precharged, nothing under way).

Each cell of the picture is one bank over one time bin, coloured by the state the bank spends
most of the bin in; the legend gives each state's share of all banks' time. The states'
coverage per bin is :func:`traces.heatmap.binned_coverage` (no Python loop per event), so a
whole stack (512 banks) over thousands of bins draws in seconds.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from simcore.errors import TraceError, WafersimError
from traces.heatmap import MAX_BINS, binned_coverage, unit_of
from traces.plots import check_output, fit_title, header_tick_hz, plt, time_unit
from traces.reader import coded, iter_batches, start_end

STATES = ("idle", "active (row open)", "precharging", "refreshing")
STATE_COLOURS = ("#e8e8e8", "#2ca02c", "#ff7f0e", "#d62728")
_CMD = {"ACT": 0, "PRE": 1, "PREA": 1, "REF": 2}


@dataclasses.dataclass(frozen=True)
class BankTiming:
    """What the state timeline needs of a memory standard's timing table."""

    clock_hz: int  # the command clock the cycles count
    nRP: int  # precharge time, cycles
    nRFC: int  # refresh cycle time, cycles


def bank_states(
    path: str, timing: BankTiming, *, bins: int = 1000
) -> tuple[np.ndarray, np.ndarray, list[str], int, int]:
    """``(state, shares, banks, end_ticks, tick_hz)``: ``state[bank, bin]`` is the index in
    :data:`STATES` of the state the bank spends most of the bin in; ``shares[s]`` is the share
    (0..1) of all banks' time in state ``s``."""
    if not 1 <= bins <= MAX_BINS:
        raise WafersimError(f"--bins {bins} is out of range; give 1 to {MAX_BINS}")
    tick_hz = header_tick_hz(path)
    keys: dict[tuple, int] = {}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    end = 0
    for batch in iter_batches(path):
        ts, te = start_end(batch)
        end = max(end, int(te.max(initial=0)))
        cats, ki = coded(batch, "category")
        if "dram" not in cats:
            continue
        names, ni = coded(batch, "name")
        comps, ci = coded(batch, "component")
        code = np.asarray([_CMD.get(n, -1) for n in names], np.int64)
        lut = np.full(len(comps), -1, np.int64)
        for j, c in enumerate(comps):
            key = unit_of(c, "bank")
            if key is not None:
                lut[j] = keys.setdefault(key, len(keys))
        ids = lut[ci]
        cmd = code[ni]
        take = (ki == cats.index("dram")) & (ids >= 0) & (cmd >= 0)
        parts.append((ids[take], ts[take], cmd[take]))
    ids, ts, cmd = (np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, np.int64)
                    for i in range(3))  # fmt: skip
    if not len(ids):
        raise TraceError(
            f"'{path}' has no DRAM commands on banks (ACT, PRE, REF on pch[i]/bank[j]): "
            "plot banks reads HBM and PIM traces at --trace-level detail"
        )
    per_cycle = tick_hz / timing.clock_hz
    order = np.lexsort((ts, ids))
    ids, ts, cmd = ids[order], ts[order], cmd[order]
    # active: an ACT to the bank's next precharge (the index after it, by a reverse running
    # minimum over the precharges' positions), else to the run's end
    n = len(ids)
    pos = np.where(cmd == 1, np.arange(n), n)
    next_pre = np.minimum.accumulate(pos[::-1])[::-1]
    after = np.append(next_pre[1:], n)
    act = np.flatnonzero(cmd == 0)
    close = after[act]
    same = close < n
    same[same] = ids[close[same]] == ids[act[same]]
    act_end = np.where(same, ts[np.minimum(close, n - 1)], end)
    pre = cmd == 1
    ref = cmd == 2
    intervals = {
        1: (ids[act], ts[act], act_end),
        2: (ids[pre], ts[pre], ts[pre] + round(timing.nRP * per_cycle)),
        3: (ids[ref], ts[ref], ts[ref] + round(timing.nRFC * per_cycle)),
    }
    end = max(end, *(int(e.max(initial=0)) for _, _, e in intervals.values()))
    bins = min(bins, end)
    edges = np.round(np.linspace(0, end, bins + 1)).astype(np.int64)
    width = np.diff(edges).astype(np.float64)
    cover = np.zeros((len(STATES), len(keys), bins))
    for s, (i, a, b) in intervals.items():
        cover[s] = binned_coverage(i, a, np.minimum(b, end), len(keys), edges)
    cover[0] = np.maximum(0.0, width[None, :] - cover[1:].sum(axis=0))
    rows = [keys[k] for k in sorted(keys, key=lambda k: k[:-1])]
    cover = cover[:, rows, :]
    shares = cover.sum(axis=(1, 2)) / cover.sum()
    names = [k[-1] for k in sorted(keys, key=lambda k: k[:-1])]
    return np.argmax(cover, axis=0), shares, names, end, tick_hz


def banks_figure(path: str, timing: BankTiming, *, bins: int = 1000):
    """One row per bank, one column per time bin, coloured by the bank's main state in the
    bin; time in seconds or a sub-unit; the legend names each state with its share."""
    from matplotlib.colors import BoundaryNorm, ListedColormap

    state, shares, names, end, tick_hz = bank_states(path, timing, bins=bins)
    n = len(names)
    unit, size = time_unit(end / tick_hz)
    scale = 1.0 / (tick_hz * size)
    fig_h = min(10.0, max(3.4, 1.8 + 0.16 * n))
    fig, ax = plt.subplots(figsize=(11.0, fig_h))
    cmap = ListedColormap(STATE_COLOURS)
    ax.imshow(state, aspect="auto", cmap=cmap, norm=BoundaryNorm(np.arange(-0.5, 4), 4),
              interpolation="nearest", extent=(0.0, end * scale, n - 0.5, -0.5))  # fmt: skip
    room = max(1, int(fig_h * 72 * 0.7 / 11))
    step = 1
    while step * room < n:
        step *= 2
    ticks = list(range(0, n, step))
    ax.set_yticks(ticks, [names[i] for i in ticks], fontsize=7)
    ax.set_ylabel(
        "bank (pseudo-channel / bank)" + (f", one named every {step}" if step > 1 else "")
    )
    ax.set_xlabel(f"simulated time ({unit})")
    ax.xaxis.get_major_formatter().set_useOffset(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STATE_COLOURS]
    labels = [f"{s}: {100 * v:.1f} %" for s, v in zip(STATES, shares, strict=True)]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              title="bank state (share of\nall banks' time)", title_fontsize=8)  # fmt: skip
    fit_title(fig, ax, f"HBM bank states, main state per bin ({len(state[0])} bins): "
                       f"{os.path.basename(path)}")  # fmt: skip
    fig.tight_layout()
    return fig


def plot_banks(path: str, out: str, timing: BankTiming, *, bins: int = 1000) -> None:
    check_output(out)
    fig = banks_figure(path, timing, bins=bins)
    fig.savefig(out)
    plt.close(fig)
