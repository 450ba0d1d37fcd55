"""Kernel benchmark: wafersim's channels and components next to bare SimPy, same machine, same run.

The work: N items through a chain of K bounded, 1-cycle-latency links with a relay between
each pair (source -> link -> relay -> ... -> sink), as fast as back-pressure allows.

- bare SimPy: each link is a ``simpy.Store(capacity)`` and the 1-cycle latency a ``timeout(1)``
  in the relay, the plain idiom a SimPy user would write;
- wafersim: the ``link-chain`` components over :class:`simcore.Channel` (latency, credits, width
  and same-cycle rules included).

Both count kernel events from SimPy's own counter. The figure of merit is *item-hops per second*
(the same simulated work on both sides) and its ratio; events/s are printed for reference.
Run: ``python bench/kernel_bench.py [--items N] [--stages K] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import itertools
import time

import simpy

from simcore import Simulation
from workloads.kernel import linkchain


def bare_simpy(items: int, stages: int, capacity: int) -> tuple[float, int]:
    env = simpy.Environment()
    stores = [simpy.Store(env, capacity) for _ in range(stages)]

    def source():
        for i in range(items):
            yield stores[0].put(i)

    def relay(a, b):
        while True:
            item = yield a.get()
            yield env.timeout(1)
            yield b.put(item)

    def sink():
        for _ in range(items):
            yield stores[-1].get()

    env.process(source())
    for a, b in itertools.pairwise(stores):
        env.process(relay(a, b))
    env.process(sink())
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    return wall, next(env._eid)


def wafersim_chain(items: int, stages: int, capacity: int) -> tuple[float, int]:
    sim = Simulation(seed=0)
    p = linkchain.LinkChainParams(items=items, stages=stages, latency_cycles=1, capacity=capacity)
    linkchain.build(sim, p)
    result = sim.run()
    assert result.status == "completed"
    return result.wall_s, result.events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--stages", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    hops = args.items * args.stages
    best: dict[str, tuple[float, int]] = {}
    for _ in range(args.repeat):
        for name, fn in (("bare simpy", bare_simpy), ("wafersim", wafersim_chain)):
            wall, events = fn(args.items, args.stages, args.capacity)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, events)
    print(f"kernel benchmark: {args.items:,} items x {args.stages} links (best of {args.repeat})")
    print(f"{'kernel':<12} {'wall s':>8} {'events':>12} {'events/s':>12} {'item-hops/s':>13}")
    for name, (wall, events) in best.items():
        print(
            f"{name:<12} {wall:>8.3f} {events:>12,} {events / wall:>12,.0f} {hops / wall:>13,.0f}"
        )
    ratio = (hops / best["wafersim"][0]) / (hops / best["bare simpy"][0])
    print(f"ratio wafersim / bare SimPy (item-hops per second): {ratio:.2f}")


if __name__ == "__main__":
    main()
