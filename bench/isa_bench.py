"""Tensor-instruction cost benchmark: how long :func:`pe.isa.cost_cycles` takes for long tensors.

The cost of an instruction comes from its descriptors alone (bank conflicts per beat), computed
with numpy over the beats, so a 10,000-element instruction should cost microseconds, dense or
strided. This reports the figure (it used to be a timed assertion in the tests, which failed on
a loaded machine and proved nothing there).
Run: ``python bench/isa_bench.py [--length N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import time

from pe import isa
from pe.config import PeConfig
from pe.dsd import MemDsd
from pe.memory import Sram


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=10_000, help="elements (a 4-D strided view "
                    "of side length**0.25 is measured too)")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    cfg = PeConfig()
    sram = Sram(cfg, "bench")
    n = args.length
    c, a = sram.alloc_array("C", "f16", n), sram.alloc_array("A", "f16", n)
    side = round(n**0.25)
    assert side**4 == n, "--length must be a fourth power (10000 = 10^4)"
    strided = MemDsd(0, "f16", (side,) * 4, (1, side + 1, (side + 1) ** 2, (side + 1) ** 3))
    cases = {
        f"faddh dense x{n}": lambda: isa.cost_cycles("faddh", n, cfg, dst=c, srcs=(c, a)),
        f"faddh strided {side}^4": lambda: isa.cost_cycles(
            "faddh", side**4, cfg, dst=strided, srcs=(strided, a)
        ),
    }
    for name, call in cases.items():
        call()  # warm up
        t0 = time.process_time()
        for _ in range(args.repeat):
            call()
        per = (time.process_time() - t0) / args.repeat
        print(f"{name:<28} {per * 1e6:9.1f} us CPU per cost_cycles call")


if __name__ == "__main__":
    main()
