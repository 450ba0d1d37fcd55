"""Weight-streaming cluster benchmarks and sweeps (``gpt-ws``).

Run: ``python bench/cluster_bench.py COMMAND`` with COMMAND one of

- ``step``: one GPT-3 step on 64 CS-2s at wafer level (target: under 60 s), wall time, kernel
  events and the top entries of a profile;
- ``tiny-pe``: one step of a two-layer tiny GPT at PE level on an 8x8 sub-array per system
  (every product, attention, loss and epilogue a cycle-level program), with a profile;
- ``sweeps``: GPT-3 on 1..64 systems (8 sequences each) and GPT-3 on 4 systems at sparsity
  0..90 %, as tables, and plots to ``out/gpt-ws-scaling.png``, ``out/gpt-ws-sparsity.png``;
- ``calibrate``: re-run the PE-level ``ws-matmul`` calibration points and re-fit the wafer-level
  compute model (:mod:`cs2.calibration`), then the PE programs without streamed
  weights and their cost models (:mod:`cs2.sidecal`), printing the constants and
  the error.

Figures are printed, never asserted: they depend on the machine.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

from cs2 import calibration as cal
from cs2 import sidecal
from runner import scenario
from simcore import config as cfg
from simcore.sim import Simulation
from traces.plots import plot_comparison
from wafer.programs.wscommon import WsMatmulParams
from workloads.cluster import gptws
from workloads.cluster.model import step_model
from workloads.cluster.validation import scaling_points, sparsity_points


def timed_run(p: gptws.GptWsParams, profile: bool = False) -> tuple[dict, float, int, str]:
    sim = Simulation(seed=p.seed)
    c = gptws.build(sim, p)
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    result = sim.run()
    if prof:
        prof.disable()
    wall = time.perf_counter() - t0
    m = gptws.metrics(sim, p, c, result)
    text = ""
    if prof:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
        text = out.getvalue()
    return m, wall, result.events, text


def cmd_step(_: argparse.Namespace) -> None:
    p = gptws.GptWsParams(model="gpt3-175b", systems=64, steps=1)
    t0 = time.process_time()
    m, wall, events, _ = timed_run(p)
    cpu = time.process_time() - t0
    print(
        f"GPT-3, 64 CS-2s, one step at wafer level: wall {wall:.1f} s (CPU {cpu:.1f} s incl. "
        f"the 1-system run for scaling_efficiency), {events:,} events, "
        f"{events / wall:,.0f} events/s, {m['plan_entries']:,} plan chunks"
    )
    print(
        f"  simulated step {m['time_s']:.2f} s, {m['tokens_per_s']:,.0f} tokens/s, "
        f"utilisation {m['wafer_utilisation']:.3f}"
    )
    _, _, _, prof = timed_run(gptws.GptWsParams(model="gpt3-175b", systems=16, steps=1), True)
    print("profile (16 systems, one step):")
    print(prof)


def cmd_tiny_pe(_: argparse.Namespace) -> None:
    p = cfg.load(
        gptws.GptWsParams,
        dict(
            model="custom",
            layers=2,
            hidden=16,
            sequence=8,
            vocab=32,
            heads=2,
            batch=1,
            systems=2,
            steps=1,
            fidelity="pe",
            chunk_bytes=1024,
        ),
    )
    t0 = time.perf_counter()
    m, wall, _, prof = timed_run(p, profile=True)
    total = time.perf_counter() - t0
    print(
        f"tiny GPT (2 layers, H=16, S=8, V=32), 2 systems, PE level on 8x8: run {wall:.1f} s "
        f"under the profiler (with the 1-system reference {total:.1f} s), {m['pe_runs']} "
        f"PE-level products and {m['pe_side_runs']} other PE programs, correct={m['correct']}, "
        f"step {m['time_s'] * 1e6:.1f} us simulated"
    )
    print("  PE cycles of the programs without streamed weights (both systems):")
    for kind, cyc in m["pe_side_cycles"].items():
        print(f"    {kind:15s} {cyc:9,}")
    print("profile (the 2-system run):")
    print(prof)


def cmd_sweeps(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    for name, points, label in (
        ("scaling", scaling_points(), lambda p: f"N={p.systems}"),
        ("sparsity", sparsity_points(), lambda p: f"{100 * p.sparsity:.0f} %"),
    ):
        print(
            f"{'point':>8} {'step s':>9} {'model s':>9} {'tokens/s':>10} {'util':>6} "
            f"{'scaling':>8} {'exposed ms':>10} {'link util':>9} {'wall s':>7}"
        )
        sims, models, labels = [], [], []
        for p in points:
            t0 = time.perf_counter()
            m = scenario.run_kind("gpt-ws", p)
            wall = time.perf_counter() - t0
            mod = step_model(p)["time_s"]
            sims.append(m["time_s"])
            models.append(mod)
            labels.append(label(p))
            print(
                f"{label(p):>8} {m['time_s']:9.3f} {mod:9.3f} {m['tokens_per_s']:10,.0f} "
                f"{m['wafer_utilisation']:6.3f} {m['scaling_efficiency']:8.4f} "
                f"{1e3 * m['exposed_latency_s']:10.3f} {m['swarmx_link_utilisation']:9.4f} "
                f"{wall:7.1f}"
            )
        path = out / f"gpt-ws-{name}.png"
        plot_comparison(
            str(path),
            labels=labels,
            simulated=sims,
            model=models,
            reference=[None] * len(sims),
            title=f"gpt-ws {name}: GPT-3 step time (s), simulated vs model",
        )
        print(f"wrote {path}\n")


def cmd_calibrate(_: argparse.Namespace) -> None:
    for flavour, start in (("fwd", cal.FWD), ("wgrad", cal.WGRAD)):
        runs = []
        for r, c, t, px, py, d in cal.POINTS:
            runs.append(
                scenario.run_kind(
                    "ws-matmul",
                    WsMatmulParams(
                        flavour=flavour, rows=r, cols=c, tokens=t, px=px, py=py, density=d
                    ),
                )
            )
        fitted, mape = cal.fit(cal.POINTS, runs, start)
        print(f"{flavour}: {fitted} MAPE {mape:.1f} % over {len(runs)} PE-level runs")
        for point, m in zip(cal.POINTS, runs, strict=True):
            model = cal.model_cycles(fitted, *point[:5], m["nnz"])
            print(
                f"   {point}: run {m['cycles']:,} cycles, model {model:,.0f} "
                f"({100 * (model - m['cycles']) / m['cycles']:+.1f} %)"
            )
    runs = [sidecal.measure(kind, dims) for kind, dims in sidecal.POINTS]
    fitted, mape = sidecal.fit(sidecal.POINTS, runs)
    side = sidecal.SideCostConfig(**fitted)
    print("side work (cs2.compute.side):")
    for kind in sidecal.KINDS:
        consts = ", ".join(f"{n}={fitted[n]}" for n in sidecal.NAMES[kind])
        print(f"  {kind}: {consts}; MAPE {mape[kind]:.2f} %")
        for (k, dims), cyc in zip(sidecal.POINTS, runs, strict=True):
            if k == kind:
                model = sidecal.cycles(side, kind, dims)
                print(f"   {dims}: run {cyc:,} cycles, model {model:,.0f} "
                      f"({100 * (model - cyc) / cyc:+.1f} %)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("step")
    sub.add_parser("tiny-pe")
    q = sub.add_parser("sweeps")
    q.add_argument("--out", default="out")
    sub.add_parser("calibrate")
    args = ap.parse_args()
    {"step": cmd_step, "tiny-pe": cmd_tiny_pe, "sweeps": cmd_sweeps, "calibrate": cmd_calibrate}[
        args.command
    ](args)


if __name__ == "__main__":
    main()
