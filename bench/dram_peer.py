"""The same request trace through wafersim's ``hbm-trace`` and, when one is built here, DRAMsim3.

    .venv/bin/python bench/dram_peer.py TRACE [--format dramsim3] [--dramsim3 PATH/dramsim3main]
        [--config HBM.ini] [--write-config OUT.ini] [--cycles N]

Prints wafersim's cycles, activations and row hits for the trace on one pseudo-channel. With a
DRAMsim3 binary (``--dramsim3``, else ``$DRAMSIM3``, else ``dramsim3main`` on the PATH, else
none: then only wafersim's side is printed), runs DRAMsim3's trace front end on the same
requests (comment lines dropped: its reader takes none; ``dramsim3main CONFIG -t TRACE -c
CYCLES -o OUTDIR``) and prints the statistics it writes (:data:`DRAMSIM3_KEYS`) beside them,
and the CPU seconds it took. DRAMsim3 runs ``--cycles`` cycles whatever the trace's length:
give a few more than the trace needs (wafersim's ``cycles``), so that every request is done
(``num_reads_done``, ``num_writes_done``). Without ``--config`` the DRAMsim3 configuration is
written from the ``hbm3-4.8`` preset (:func:`dramsim3_ini`: one pseudo-channel as one DRAMsim3
channel, the preset's cycles, the controller's queue depth); ``--write-config`` saves it. Not
part of CI: DRAMsim3 is not a dependency (build it under /tmp: ``cmake -S DRAMsim3 -B build &&
make -C build dramsim3main``). Measured on the built-in sample (bench/notes/pim-requests.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def dramsim3_ini(preset: str = "hbm3-4.8", queue_depth: int = 32) -> str:
    """A DRAMsim3 configuration for one pseudo-channel of ``preset``: HBM protocol, its bank
    groups, banks and rows; a 32-byte column access in nBL cycles (DRAMsim3 counts an HBM burst
    as BL / 2 cycles and a physical column as device_width bits, two per access: BL 4 at 64
    bits); every timing in the preset's command-clock cycles; all-bank refresh; open page;
    DRAMsim3's row/bank-group/bank/channel/column address order (wafersim's default mapping)."""
    from pim.standard import PRESETS

    std = PRESETS[preset]()
    o, t = std.org, std.timing
    width, bl = 64, 2 * t.nBL
    assert width * bl // 8 == o.column_bytes, "a column access must be one 32-byte PIM word"
    columns = o.row_bytes * 8 // width // 2  # DRAMsim3 doubles HBM columns
    mib = o.banks * o.rows * o.row_bytes // (1 << 20)
    return f"""[dram_structure]
protocol = HBM
bankgroups = {o.bankgroups}
banks_per_group = {o.banks_per_group}
rows = {o.rows}
columns = {columns}
device_width = {width}
BL = {bl}

[timing]
tCK = {1e9 / t.clock_hz:.4f}
CL = {t.nCL}
CWL = {t.nCWL}
tRCD = {t.nRCD}
tRCDRD = {t.nRCD}
tRCDWR = {t.nRCD}
tRP = {t.nRP}
tRAS = {t.nRAS}
tRFC = {t.nRFC}
tREFI = {t.nREFI}
tRRD_S = {t.nRRD_S}
tRRD_L = {t.nRRD_L}
tWTR_S = {t.nWTR_S}
tWTR_L = {t.nWTR_L}
tFAW = {t.nFAW}
tWR = {t.nWR}
tCCD_S = {t.nCCD_S}
tCCD_L = {t.nCCD_L}
tRTP = {t.nRTP}
tRTRS = 0

[system]
channel_size = {mib}
channels = 1
bus_width = {width}
address_mapping = rorabgbachco
queue_structure = PER_BANK
refresh_policy = RANK_LEVEL_SIMULTANEOUS
row_buf_policy = OPEN_PAGE
trans_queue_size = {queue_depth}
unified_queue = False

[other]
epoch_period = 100000000
output_level = 1
"""


#: DRAMsim3's statistics set beside wafersim's (its JSON has many more).
DRAMSIM3_KEYS = (
    "num_cycles", "num_reads_done", "num_writes_done", "num_act_cmds", "num_pre_cmds",
    "num_read_row_hits", "num_write_row_hits", "num_ref_cmds", "average_read_latency",
)  # fmt: skip


def find_dramsim3(given: str | None) -> str | None:
    for cand in (given, os.environ.get("DRAMSIM3"), shutil.which("dramsim3main")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    if given:
        sys.exit(f"--dramsim3 {given}: not an executable file")
    return None


def main() -> None:
    from runner import registry
    from runner.scenario import run_kind
    from workloads.pim.hbmtrace import HbmTraceParams

    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--format", default="dramsim3", choices=("dramsim3", "ramulator"))
    ap.add_argument("--dramsim3", help="path to a locally built dramsim3main")
    ap.add_argument("--config", help="a DRAMsim3 .ini (default: written from hbm3-4.8)")
    ap.add_argument("--write-config", metavar="OUT.ini", help="save the generated .ini")
    ap.add_argument("--cycles", type=int, default=10_000_000, help="DRAMsim3 cycles to run")
    args = ap.parse_args()
    ini = dramsim3_ini()
    if args.write_config:
        with open(args.write_config, "w") as fh:
            fh.write(ini)
    registry.load_all()
    m = run_kind("hbm-trace", HbmTraceParams(trace=os.path.abspath(args.trace), format=args.format))
    keys = ("cycles", "requests", "row_activations", "row_hits", "row_misses", "row_conflicts")
    print("wafersim:", json.dumps({k: m[k] for k in keys}))
    binary = find_dramsim3(args.dramsim3)
    if binary is None:
        print("dramsim3: not found (--dramsim3, $DRAMSIM3 or dramsim3main on the PATH)")
        return
    if args.format != "dramsim3":
        sys.exit("DRAMsim3 reads its own trace format: give a --format dramsim3 trace")
    with tempfile.TemporaryDirectory() as out:
        config = args.config
        if config is None:
            config = os.path.join(out, "hbm3-4.8.ini")
            with open(config, "w") as fh:
                fh.write(ini)
        trace = os.path.join(out, "trace.txt")  # DRAMsim3's reader takes no comment lines
        with open(args.trace) as src, open(trace, "w") as dst:
            dst.writelines(ln for ln in src if ln.strip() and not ln.lstrip().startswith("#"))
        cmd = [binary, config, "-t", trace, "-c", str(args.cycles)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([*cmd, "-o", out], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        for name in sorted(os.listdir(out)):
            if name.endswith(".json"):
                with open(os.path.join(out, name)) as fh:
                    stats = json.load(fh)
                for ch, st in sorted(stats.items()):
                    brief = {k: st[k] for k in DRAMSIM3_KEYS if k in st}
                    print(f"dramsim3 ({name}, channel {ch}):", json.dumps(brief))
        print(f"dramsim3: {cpu:.2f} s CPU for {args.cycles:,} cycles")


if __name__ == "__main__":
    main()
