"""TPU pod benchmark: wall time, CPU time and peak memory of large AllReduces (payload=size), at
both ICI fidelities.

    PYTHONPATH=. python bench/tpu_bench.py                 # every case, the figures of
                                                          # docs/tpu/performance.md
    PYTHONPATH=. python bench/tpu_bench.py --fidelity flow --case pod
    PYTHONPATH=. python bench/tpu_bench.py --profile       # and the top entries of a profile
    PYTHONPATH=. python bench/tpu_bench.py --fidelity flow --symmetry off   # every chip runs

Each case runs in a fresh process (peak memory is the process's maximum resident set; ``cpu_s``
is the process's CPU time, which other processes sharing the machine do not inflate). Cases,
each an AllReduce of 1 GiB (rounded up to whole shards) over every axis:

- ``v5e-pod``: a full v5e 16x16 pod (256 chips);
- ``v5p-512``: a v5p 8x8x8 slice;
- ``v5p-4096``: a v5p 16x16x16 slice (4,096 chips);
- ``pod``: a full v5p pod in its real shape, 16x20x28 (8,960 chips);
- ``dcn``: four v5e 16x16 pods joined over DCN (1,024 chips, axes sxy).

The packet fidelity runs with packets of ``--packet-mib`` MiB (16 by default: coarse, for speed;
with cut-through the packet size changes times only by packet rounding, see
docs/tpu/guide.md#packet-size) and a buffer of 16 packets, and only on the cases named in
``PACKET_CASES`` (the others take hours at that fidelity); the flow fidelity runs at the default
ICI parameters, with ``tpu-collective``'s ``symmetry`` (``--symmetry``: ``auto`` by default, one
chip per class of translations where that is exact, docs/tpu/design.md#symmetry; ``off``, every
chip).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import resource
import subprocess
import sys
import time

CASES = {
    "v5e-pod": ("v5e", "16x16", "xy", 1),
    "v5p-512": ("v5p", "8x8x8", "xyz", 1),
    "v5p-4096": ("v5p", "16x16x16", "xyz", 1),
    "pod": ("v5p", "16x20x28", "xyz", 1),
    "dcn": ("v5e", "16x16", "sxy", 4),
}
PACKET_CASES = ("v5e-pod", "v5p-512")


def one(case: str, fidelity: str, packet: int, profile: bool, symmetry: str = "auto") -> dict:
    from runner import registry, scenario
    from simcore import config as cfg
    from workloads.tpu.collective import CollectiveParams

    chip, topology, axes, slices = CASES[case]
    registry.load_all()
    # 1 GiB, rounded up to whole bf16 shards (8,960 chips do not divide 1 GiB)
    n = slices * math.prod(int(a) for a in topology.split("x"))
    nbytes = -(-(1 << 30) // (2 * n)) * 2 * n
    ici: dict = {"fidelity": fidelity}
    if fidelity == "packet":
        ici |= {"packet_bytes": packet, "buffer_bytes": 16 * packet}
    p = cfg.load(
        CollectiveParams,
        dict(chip=chip, topology=topology, axes=axes, op="allreduce", bytes=nbytes,
             payload="size", slices=slices, ici=ici, symmetry=symmetry),
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
        "case": f"{case}: allreduce 1 GiB {chip} {topology} {axes} x{slices}",
        "fidelity": fidelity,
        "symmetry": symmetry,
        "packet_bytes": p.ici.packet_bytes,
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
    ap.add_argument("--fidelity", choices=("packet", "flow"), action="append")
    ap.add_argument("--case", choices=tuple(CASES), action="append")
    ap.add_argument("--symmetry", choices=("auto", "off"), default="auto")
    ap.add_argument("--one", nargs=2, metavar=("CASE", "FIDELITY"))
    args = ap.parse_args()
    packet = int(args.packet_mib * (1 << 20))
    if args.one:
        print(json.dumps(one(*args.one, packet, args.profile, args.symmetry)))
        return
    for case in args.case or CASES:
        for fid in args.fidelity or ("flow", "packet"):
            if fid == "packet" and case not in PACKET_CASES and not args.case:
                continue
            cmd = [sys.executable, __file__, "--one", case, fid]
            cmd += ["--packet-mib", str(args.packet_mib), "--symmetry", args.symmetry]
            cmd += ["--profile"] if args.profile else []
            run = subprocess.run(cmd, capture_output=True, text=True, check=True)
            res = json.loads(run.stdout)
            prof = res.pop("profile", None)
            print(json.dumps(res), flush=True)
            if prof:
                print(prof)


if __name__ == "__main__":
    main()
