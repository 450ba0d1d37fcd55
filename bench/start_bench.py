"""Start time of the ``wafersim`` command: how long a short command takes from exec to exit.

    .venv/bin/python bench/start_bench.py [--repeat N] [--wafersim PATH] [--only TEXT] [--json]

Runs each command in N fresh processes (default 5) and prints the median wall time and the
median CPU time (user + system of the child, from ``getrusage``): ``wafersim --version``,
``list``, ``params SCENARIO`` for every built-in scenario, and ``run link-chain --quiet`` for
comparison (a run imports the simulation and trace modules a start does not need). Two
reference lines follow: the interpreter alone (``python -c pass``) and with numpy and SimPy,
which any kind's module imports (the floor of ``params``). On a busy machine wall time grows
with the load and CPU time much less: read both.

Compiled bytecode is cached as on an installed copy, in a temporary folder
(``PYTHONPYCACHEPREFIX``) whatever ``PYTHONDONTWRITEBYTECODE`` says, and a first, uncounted run
of each command fills it; ``--no-cache`` keeps the environment's setting instead (with
``PYTHONDONTWRITEBYTECODE=1`` every start compiles wafersim's modules again). The target is under
0.3 s for ``--version``, ``list`` and ``params`` (docs/cli.md, "Start time"); a line over it is
marked ``over``. ``--modules`` adds, for each command, the heavy third-party modules it
imported (``python -X importtime``; none of them is imported by ``--version`` or ``list``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: What a start must stay under (seconds of wall time on an idle machine).
TARGET_S = 0.3

#: Third-party packages heavy enough to show in ``--modules`` (import time well over 20 ms).
HEAVY = (
    "numpy", "simpy", "scipy", "networkx", "pyarrow", "perfetto", "google.protobuf",
    "matplotlib", "distributed", "dask", "tqdm", "polars",
)  # fmt: skip


def commands() -> list[list[str]]:
    from runner import scenario

    out = [["--version"], ["list"]]
    out += [["params", name] for name in scenario.builtin_names()]
    out.append(["run", "link-chain", "--quiet"])
    return out


def once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


#: Runs ``wafersim ARGS`` in this interpreter and prints the modules it imported, at exit.
SHOW_MODULES = (
    "import atexit, sys\n"
    "atexit.register(lambda: print(' '.join(sys.modules), file=sys.stderr))\n"
    "from app.cli import main\n"
    "sys.argv[0] = 'wafersim'\n"
    "sys.exit(main())\n"
)


def heavy_modules(python: str, args: list[str], env: dict[str, str]) -> list[str]:
    """The :data:`HEAVY` packages ``wafersim ARGS`` imports."""
    done = subprocess.run(
        [python, "-c", SHOW_MODULES, *args], env=env, capture_output=True, text=True, check=False
    )
    names = set(done.stderr.splitlines()[-1].split()) if done.stderr else set()
    return [h for h in HEAVY if h in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, metavar="N", help="processes per command")
    ap.add_argument(
        "--wafersim", default=os.path.join(os.path.dirname(sys.executable), "wafersim"),
        metavar="PATH", help="the command to time (default: wafersim beside this python)",
    )  # fmt: skip
    ap.add_argument("--only", metavar="TEXT", help="only the commands whose line contains TEXT")
    ap.add_argument("--modules", action="store_true", help="list the heavy modules each imports")
    ap.add_argument(
        "--no-cache", action="store_true",
        help="keep the environment's bytecode setting (default: cache it in a temporary folder)",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print one JSON list")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    cache = None if args.no_cache else tempfile.mkdtemp(prefix="start-bench-pycache-")
    env = dict(os.environ)
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    python = os.path.join(os.path.dirname(args.wafersim), "python")
    try:
        rows = measure(args, env, python)
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    if args.json:
        print(json.dumps(rows))
    else:
        print(
            f"medians of {args.repeat} fresh processes; bytecode "
            f"{'as the environment says' if cache is None else 'cached'}; "
            f"load average {os.getloadavg()[0]:.2f}"
        )
    return 0


#: Reference lines: what the interpreter costs, and with the packages every kind imports.
FLOORS = (["-c", "pass"], ["-c", "import numpy, simpy"])


def measure(args: argparse.Namespace, env: dict[str, str], python: str) -> list[dict]:
    rows = []
    todo = [(f"wafersim {' '.join(c)}", [args.wafersim, *c], c) for c in commands()]
    todo += [(f"python {c[0]} '{c[1]}'", [python, *c], None) for c in FLOORS]
    for line, argv, cmd in todo:
        if args.only and args.only not in line:
            continue
        once(argv, env)  # fill the caches (files, bytecode): not counted
        runs = [once(argv, env) for _ in range(args.repeat)]
        row = {
            "command": line,
            "wall_s": statistics.median(w for w, _ in runs),
            "cpu_s": statistics.median(c for _, c in runs),
            "min_wall_s": min(w for w, _ in runs),
        }
        if args.modules and cmd is not None:
            row["heavy_modules"] = heavy_modules(python, cmd, env)
        rows.append(row)
        if not args.json:
            target = cmd is not None and cmd[0] != "run"
            over = "  over" if row["wall_s"] > TARGET_S and target else ""
            mods = f"  [{', '.join(row['heavy_modules']) or '-'}]" if "heavy_modules" in row else ""
            print(
                f"{row['command']:<44} wall {row['wall_s']:.3f} s (min {row['min_wall_s']:.3f})"
                f"  cpu {row['cpu_s']:.3f} s{over}{mods}",
                flush=True,
            )
    return rows


if __name__ == "__main__":
    sys.exit(main())
