"""Export at scale: generate a trace of N events (default 1,000,000) and export it to Perfetto.

    .venv/bin/python bench/export_bench.py [--events N] [--to perfetto|json]

The trace is wafer-shaped (``wafer/pe[x,y]/{task,router,ce}``): overlapping task slices, wavelet
sends each received by two neighbours (flows), link occupancy counters. The export runs in a
child process so its peak RSS (``ru_maxrss``) is measured alone; wall time and output size are
printed. Targets: under 10 s and under 1 GB for 1,000,000 events.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def generate(path: str, events: int) -> int:
    from traces import TraceLevel, TraceWriter

    header = {"scenario": "export-bench", "kind": "bench", "seed": 0, "tick_hz": 1_000_000_000,
              "domains": {"wafer": 1_000_000_000}}  # fmt: skip
    n = 0
    flow = 0
    w, h = 32, 32
    with TraceWriter(path, level=TraceLevel.DETAIL, header=header) as tw:
        step = 0
        while n < events:
            t = step * 100
            for y in range(h):
                for x in range(w):
                    pe = f"wafer/pe[{x},{y}]"
                    tw.emit(
                        t, 60, t, 60, "wafer", f"{pe}/task", "task", "fmac", args={"step": step}
                    )
                    tw.emit(t + 20, 60, t + 20, 60, "wafer", f"{pe}/task", "task", "reduce")
                    flow += 1
                    tw.emit(t + 10, 4, t + 10, 4, "wafer", f"{pe}/router", "wavelet", "send",
                            flow_out=flow)  # fmt: skip
                    for k in (1, 2):
                        tw.emit(t + 15 + k, 2, t + 15 + k, 2, "wafer",
                                f"wafer/pe[{(x + k) % w},{y}]/router", "wavelet", "receive",
                                flow_in=flow)  # fmt: skip
                    tw.emit(t, 0, t, 0, "wafer", f"{pe}/router", "link", "east", "counter",
                            value=float((x + y + step) % 4), args={"capacity": 4})  # fmt: skip
                    n += 6
            step += 1
        tw.emit(step * 100, 0, step * 100, 0, "wafer", "run", "run", "end", "instant",
                args={"status": "completed"})  # fmt: skip
    return n + 1


def child(src: str, out: str, to: str) -> None:
    from traces.export import export

    t0 = time.perf_counter()
    _, stats = export(src, to, out)
    wall = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"export --to {to}: {wall:.2f} s wall, peak RSS {rss_mb:.0f} MB")
    print(f"  {stats.describe()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--to", choices=("perfetto", "json"), default="perfetto")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.to)
        return
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "big.arrows")
        t0 = time.perf_counter()
        n = generate(src, args.events)
        print(f"generated {n:,} events in {time.perf_counter() - t0:.1f} s "
              f"({os.path.getsize(src) / 1e6:.1f} MB Arrow)")  # fmt: skip
        out = os.path.join(tmp, "big.pftrace" if args.to == "perfetto" else "big.json")
        subprocess.run([sys.executable, __file__, "--to", args.to, "--child", src, out], check=True)


if __name__ == "__main__":
    main()
