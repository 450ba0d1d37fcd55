"""Chakra traces on a TPU slice (``tpu-chakra``): how fast the reader, the mapping, the model and
the simulation go on a generated data-parallel trace set.

Run: ``python bench/chakra_bench.py [--layers N] [--ranks R] [--profile]``. It writes a set of
R ranks (a ``layers``-layer MLP step: per layer a forward and two backward compute nodes and a
gradient all-reduce of ``--grad-bytes``, in a temporary folder, with our writer), then times, in
CPU and wall seconds: decoding every file, building the op graph, the analytical model, and the
run (``wafersim run tpu-chakra``'s build and simulation). Figures are printed, never asserted:
they depend on the machine.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import pstats
import tempfile
import time
from pathlib import Path

from runner import scenario
from simcore import config as cfg
from workloads.tpu import chakra
from workloads.tpu.chakra_et import COMM_TYPE, NODE_TYPE, Attr, Node, encode_trace, read_trace


def make_set(folder: Path, ranks: int, layers: int, grad_bytes: int) -> str:
    nodes: list[Node] = []

    def add(name: str, kind: str, deps: tuple[int, ...], attrs: tuple[Attr, ...]) -> int:
        nodes.append(Node(id=len(nodes) + 1, name=name, type=NODE_TYPE[kind], data_deps=deps,
                          attrs=attrs))  # fmt: skip
        return len(nodes)

    work = (Attr("num_ops", 2 * 64 * 512 * 512), Attr("tensor_size", 2 * 600_000, "uint64"))
    reduce = (Attr("comm_type", COMM_TYPE["ALL_REDUCE"]), Attr("comm_size", grad_bytes))

    def comp(name: str, deps: tuple[int, ...]) -> int:
        return add(name, "COMP_NODE", deps, work)

    last: tuple[int, ...] = ()
    for layer in range(layers):
        last = (comp(f"fwd{layer}", last),)
    for layer in reversed(range(layers)):
        dw = comp(f"dW{layer}", last)
        last = (comp(f"dX{layer}", last),)
        add(f"allreduce{layer}", "COMM_COLL_NODE", (dw,), reduce)
    data = encode_trace(nodes)
    for r in range(ranks):
        (folder / f"bench.{r}.et").write_bytes(data)
    return str(folder / "bench.0.et")


def timed(what: str, fn, *args):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn(*args)
    print(
        f"{what:<28} {time.process_time() - c0:8.3f} s CPU {time.perf_counter() - w0:8.3f} s wall"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=500)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--grad-bytes", type=int, default=65536)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    side = int(math.sqrt(a.ranks))
    while a.ranks % side:
        side -= 1
    topology = f"{side}x{a.ranks // side}"
    with tempfile.TemporaryDirectory() as tmp:
        et = make_set(Path(tmp), a.ranks, a.layers, a.grad_bytes)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        print(f"{a.ranks} ranks x {4 * a.layers} nodes, {size:,} bytes, topology {topology}")
        files = chakra.rank_files(et)
        traces = timed("decode", lambda: [read_trace(f) for f in files])
        timed("op graph", chakra.to_graph, traces, None)
        p = cfg.load(chakra.ChakraParams, {"et": et, "topology": topology, "ops_listed": 0})
        timed("model", chakra.model, p)
        prof = cProfile.Profile() if a.profile else None
        if prof:
            prof.enable()
        out = timed("run (build + simulate)", scenario.run_kind, "tpu-chakra", p)
        if prof:
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(15)
            print(s.getvalue())
        print(f"time_s {out['time_s']:.6g}  model_time_s {out['model_time_s']:.6g}  "
              f"model_error_pct {out['model_error_pct']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
