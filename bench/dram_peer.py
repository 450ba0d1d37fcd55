"""The same request trace through wafersim's ``hbm-trace`` and, when one is built here, DRAMsim3.

    .venv/bin/python bench/dram_peer.py TRACE [--dramsim3 PATH/dramsim3main --config HBM.ini]
        [--format dramsim3] [--cycles N]

Prints wafersim's cycles, activations and row hits for the trace on one pseudo-channel; with
``--dramsim3``, runs DRAMsim3's trace front end on the same file (``dramsim3main CONFIG -t TRACE
-c CYCLES -o OUTDIR``) and prints the statistics it writes (``num_cycles``, ``num_act_cmds``,
``num_read_row_hits``...) beside them. Not part of CI: DRAMsim3 is not a dependency, and its
configuration must be made to match the ``hbm3-4.8`` preset by hand (docs/pim/hardware.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    from runner import registry
    from runner.scenario import run_kind
    from workloads.pim.hbmtrace import HbmTraceParams

    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--format", default="dramsim3", choices=("dramsim3", "ramulator"))
    ap.add_argument("--dramsim3", help="path to a locally built dramsim3main")
    ap.add_argument("--config", help="DRAMsim3 .ini matching the hbm3-4.8 preset")
    ap.add_argument("--cycles", type=int, default=10_000_000, help="DRAMsim3 cycles to run")
    args = ap.parse_args()
    registry.load_all()
    m = run_kind("hbm-trace", HbmTraceParams(trace=os.path.abspath(args.trace), format=args.format))
    keys = ("cycles", "requests", "row_activations", "row_hits", "row_misses", "row_conflicts")
    print("wafersim:", json.dumps({k: m[k] for k in keys}))
    if not args.dramsim3:
        return
    if not args.config:
        sys.exit("--dramsim3 needs --config (a DRAMsim3 .ini for the same HBM3 timings)")
    with tempfile.TemporaryDirectory() as out:
        cmd = [args.dramsim3, args.config, "-t", args.trace, "-c", str(args.cycles), "-o", out]
        subprocess.run(cmd, check=True, capture_output=True)
        for name in sorted(os.listdir(out)):
            if name.endswith(".json"):
                with open(os.path.join(out, name)) as fh:
                    stats = json.load(fh)
                print(f"dramsim3 ({name}):", json.dumps(stats)[:2000])


if __name__ == "__main__":
    main()
