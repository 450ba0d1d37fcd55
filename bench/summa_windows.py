"""SUMMA: where each step's broadcasts sit in time, from the PEs' timestamp marks.

Per point it prints, over the steps, the largest spread of the PEs' step starts (``start`` or the
previous compute's end ``e{k-1}``), the longest broadcast window (first step start to the last
broadcast callback ``x{k}``/``y{k}``) and the smallest gap from that last callback to the first
end of the step's compute ``e{k}`` (with ``overlap``: its first start ``c{k}``), where the next
step's first set-up begins. A positive gap means the
fabric is silent between two steps' broadcasts: the premise of a lock-step phase per step
(docs/wafer/design.md, "The lock-step phase").

Run: ``PYTHONPATH=. python bench/summa_windows.py [P,MT[,overlap] ...]`` (default 8,8 16,8).
"""

from __future__ import annotations

import sys

from simcore import Simulation
from workloads.wafer import summa


def windows(p: int, mt: int, overlap: bool) -> tuple[int, int, int | None]:
    """(spread of step starts, broadcast window, gap to the next step's first set-up), cycles."""
    sim = Simulation()
    run = summa.build(sim, summa.SummaParams(p=p, mt=mt, overlap=overlap))
    sim.check()
    sim.run()
    marks = [pe.ce.marks for pe in run.wafer.pes.values()]
    spread, window, gaps = 0, 0, []
    for k in range(p):
        prev = f"c{k - 1}" if overlap else f"e{k - 1}"
        starts = [m["start"] if k == 0 else m[prev] for m in marks]
        last = max(max(m[f"x{k}"], m[f"y{k}"]) for m in marks)
        spread = max(spread, max(starts) - min(starts))
        window = max(window, last - min(starts))
        if k + 1 < p:  # the next step's set-ups begin at the end of this compute (with
            # overlap at its start)
            nxt = f"c{k}" if overlap else f"e{k}"
            gaps.append(min(m[nxt] for m in marks) - last)
    return spread, window, min(gaps) if gaps else None


def main() -> None:
    for point in sys.argv[1:] or ["8,8", "16,8"]:
        parts = point.split(",")
        p, mt = int(parts[0]), int(parts[1])
        overlap = len(parts) > 2 and parts[2] in ("1", "true", "overlap")
        spread, window, gap = windows(p, mt, overlap)
        print(
            f"P={p:<3} Mt={mt:<3} overlap={overlap!s:<5}  spread of step starts {spread:>4}  "
            f"broadcast window {window:>5}  gap to the next step's first set-up {gap}",
            flush=True,
        )


if __name__ == "__main__":
    main()
