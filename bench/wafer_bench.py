"""Wafer benchmark: simulated PE-cycles per wall-second, and memory per simulated PE.

The workload (issue #3): on a W x W mesh every PE row-broadcasts ``words`` FP32 wavelets with the
collectives library: each row runs W broadcasts one after another (root 0, then 1, ...), and all
rows run at once. PE-cycles = PEs x simulated cycles. Memory: peak RSS of building and running
the mesh, minus the interpreter's baseline, divided by the PEs.

Run: ``python bench/wafer_bench.py [--sizes 16 64] [--words 1024] [--fidelity reference]``
(``--profile`` prints the top of a cProfile of the first size; ``--build-only`` builds the
mesh and reports its memory without running it: run one size per process for clean figures;
``--rounds N`` runs N broadcasts per row instead of W, which is how the reference fidelity is
measured at 64x64: PE-cycles/s is a rate, and a row's broadcasts all cost alike).
``--full-wafer`` runs one of :mod:`full_wafer`'s points on the full 750 x 994 array instead (or
``--array WxH`` for the same blocks per PE on a smaller one): build and run time, CPU and
wall, and peak memory (``ru_maxrss``).
PE-cycles/s divide by the run's wall seconds; the CPU seconds beside them say how much of
that the process had (the machine may be shared).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import resource
import time

import full_wafer  # (bench/, beside this file)
import numpy as np

from pe.program import Layout
from simcore import Simulation
from wafer.collectives import Collectives
from wafer.system import ENGINES, Wafer, WaferConfig


def row_broadcasts(
    width: int, words: int, cfg: WaferConfig, rounds: int | None = None
) -> tuple[Simulation, Wafer]:
    """Every row broadcasts from root 0, 1, ... (``rounds`` roots, default all ``width``)."""
    rounds = width if rounds is None else rounds
    data = np.arange(words, dtype=np.float32)

    def code(pe):
        coll = Collectives(pe)
        buf = pe.array("buf", data)
        state = {"root": 0}

        @pe.local_task(id=10)
        def step(t):
            if state["root"] == 0:
                t.mark("start")
            coll.x.broadcast(t, state["root"], buf, 11)

        @pe.local_task(id=11)
        def done(t):
            state["root"] += 1
            if state["root"] < rounds:
                t.activate(10)
            else:
                t.mark("end")

        pe.start(step)

    layout = Layout(width, width)
    layout.set_rectangle_code(code)
    sim = Simulation()
    wafer = Wafer(sim, cfg, layout)
    return sim, wafer


def rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(
    width: int, words: int, cfg: WaferConfig, rounds: int | None = None, run: bool = True
) -> dict:
    base = rss_bytes()
    t0 = time.perf_counter()
    sim, wafer = row_broadcasts(width, words, cfg, rounds)
    build_s = time.perf_counter() - t0
    if not run:
        sim.check()
        for pe in wafer.pes.values():
            pe.ce.sram.data  # noqa: B018 (the PEs' buffers are written at build: touch all)
        pes = width * width
        return {"mesh": f"{width}x{width}", "pes": pes, "build_s": build_s,
                "bytes_per_pe": (rss_bytes() - base) / pes}  # fmt: skip
    cpu0 = time.process_time()
    result = sim.run()
    cpu_s = time.process_time() - cpu0
    assert result.status == "completed", result.report
    cycles = wafer.span_cycles()
    pes = width * width
    return {
        "mesh": f"{width}x{width}",
        "pes": pes,
        "cycles": cycles,
        "build_s": build_s,
        "run_s": result.wall_s,
        "cpu_s": cpu_s,
        "pe_cycles_per_s": pes * cycles / result.wall_s,
        "bytes_per_pe": (rss_bytes() - base) / pes,
        "events": result.events,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--words", type=int, default=1024)
    ap.add_argument("--fidelity", default="fast", choices=["fast", *ENGINES])
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--rounds", type=int, default=None, help="broadcasts per row (default: one per PE)"
    )
    ap.add_argument("--build-only", action="store_true", help="build and report memory only")
    ap.add_argument(
        "--full-wafer", action="store_true",
        help="the full 750 x 994 array instead (bench/full_wafer.py: --point, --array)",
    )  # fmt: skip
    ap.add_argument("--point", default="spmv-poisson2d", help="--full-wafer: which workload")
    ap.add_argument("--array", default="750x994", help="--full-wafer: the PE array, WxH")
    ap.add_argument(
        "--max-gb", type=float, default=15.0,
        help="--full-wafer: refuse a point whose footprint estimate is above this (GB; the "
        "full array's points estimate 13.2 to 13.4)",
    )  # fmt: skip
    ap.add_argument(
        "--no-estimate-check", action="store_true",
        help="--full-wafer: build even if the footprint estimate is above --max-gb or the "
        "memory available (bench/full_wafer.py)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.full_wafer:
        full_wafer.main(
            args.point, args.array, args.build_only, args.max_gb, args.no_estimate_check
        )
        return
    cfg = dataclasses.replace(WaferConfig(), fidelity=args.fidelity)
    if args.build_only:
        print(f"build only: row broadcasts of {args.words} words")
        for w in args.sizes:
            m = measure(w, args.words, cfg, args.rounds, run=False)
            print(f"{m['mesh']:>8} build {m['build_s']:.1f} s, {m['bytes_per_pe']:,.0f} B/PE")
        return
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        measure(args.sizes[0], args.words, cfg, args.rounds)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        return
    print(f"row broadcasts of {args.words} words, fidelity {args.fidelity}")
    print(
        f"{'mesh':>8} {'cycles':>10} {'build s':>8} {'run s':>8} {'CPU s':>8} {'PE-cycles/s':>14} "
        f"{'B/PE':>10}"
    )
    for w in args.sizes:
        m = measure(w, args.words, cfg, args.rounds)
        print(
            f"{m['mesh']:>8} {m['cycles']:>10,} {m['build_s']:>8.2f} {m['run_s']:>8.2f} "
            f"{m['cpu_s']:>8.2f} {m['pe_cycles_per_s']:>14,.0f} {m['bytes_per_pe']:>10,.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
