"""TPU pod benchmark: wall time and peak memory of large AllReduces with payload=size.

    PYTHONPATH=. python bench/tpu_bench.py            # the figures of docs/tpu/performance.md
    PYTHONPATH=. python bench/tpu_bench.py --profile  # and the top entries of a profile

Each case runs in a fresh process (peak memory is the process's maximum resident set; ``cpu_s``
is the process's CPU time, which other processes sharing the machine do not inflate):

- AllReduce of 1 GiB over a full v5e 16x16 pod (axes xy);
- AllReduce of 1 GiB over a v5p 8x8x8 slice (axes xyz);
- AllReduce of 1 GiB over a v5p 16x16x16 slice: 4,096 chips (axes xyz).

Packets of ``--packet-mib`` MiB (16 by default: coarse, for speed; with cut-through the packet
size changes times only by packet rounding, see docs/tpu/guide.md#packet-size) and a buffer of
16 packets per link direction and virtual channel.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import resource
import subprocess
import sys
import time

CASES = [
    ("v5e", "16x16", "xy"),
    ("v5p", "8x8x8", "xyz"),
    ("v5p", "16x16x16", "xyz"),
]


def one(chip: str, topology: str, axes: str, packet: int, profile: bool) -> dict:
    from runner import registry, scenario
    from simcore import config as cfg
    from workloads.tpu.collective import CollectiveParams

    registry.load_all()
    p = cfg.load(
        CollectiveParams,
        dict(chip=chip, topology=topology, axes=axes, op="allreduce", bytes=1 << 30,
             payload="size", ici={"packet_bytes": packet, "buffer_bytes": 16 * packet}),
    )  # fmt: skip
    prof = cProfile.Profile() if profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    m = scenario.run_kind("tpu-collective", p)
    if prof:
        prof.disable()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    out = {
        "case": f"allreduce 1 GiB {chip} {topology} {axes}",
        "packet_bytes": packet,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "sim_time_ms": round(m["time_s"] * 1e3, 4),
        "model_time_ms": round(m["model_time_s"] * 1e3, 4),
        "sent_packets": m["sent_packets"],
        "flows": m["flows"],
    }
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(8)
        out["profile"] = s.getvalue()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packet-mib", type=float, default=16.0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--one", nargs=3, metavar=("CHIP", "TOPOLOGY", "AXES"))
    args = ap.parse_args()
    packet = int(args.packet_mib * (1 << 20))
    if args.one:
        print(json.dumps(one(*args.one, packet, args.profile)))
        return
    for chip, topology, axes in CASES:
        cmd = [sys.executable, __file__, "--one", chip, topology, axes]
        cmd += ["--packet-mib", str(args.packet_mib)] + (["--profile"] if args.profile else [])
        res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        prof = res.pop("profile", None)
        print(json.dumps(res))
        if prof:
            print(prof)


if __name__ == "__main__":
    main()
