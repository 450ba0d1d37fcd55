"""Make the project's Chakra test traces (run from the repository root):

    .venv/bin/python tests/data/chakra/make_chakra.py

Two sets of 8 ranks, written with our own encoder (workloads/tpu/chakra_et.py) in the format
ASTRA-sim reads (attribute types as its feeder reads them: num_ops int64, tensor_size uint64,
comm_type int64, comm_size int64, comm_src / comm_dst / comm_tag int32, pg_name string,
is_cpu_op bool):

- ``mlp-dp.{rank}.et``: one SGD step of a 2-layer MLP, x[B, D] -> relu(x·W1[D, F])·W2[F, D]
  (bf16), data parallel: every rank loads its batch, runs the forward and backward matmuls as
  compute nodes (num_ops FLOPs, tensor_size the bytes they touch), all-reduces each weight
  gradient over all ranks as soon as it is computed (so fc2's overlaps fc1's backward) and
  updates the weights; a metadata node starts the step and a host-side node (is_cpu_op) ends it;
- ``pipe.{rank}.et`` and ``pipe.groups.json``: the same MLP in a 2-stage pipeline, four-way data
  parallel per stage: ranks 0-3 hold fc1, ranks 4-7 fc2; rank r of stage 0 sends its activations
  to rank r+4 and receives their gradient back (send / receive nodes, tags 1 and 2); each stage
  all-reduces its gradient over its own process group (pg_name ``stage0`` / ``stage1``, listed in
  the groups file, ASTRA-sim's communicator-group JSON);
- ``ctrl.{rank}.et``: fc1's forward and backward matmuls, and its gradient's all-reduce, which
  waits for the backward pass through a control dependency only (ctrl_deps), so it runs at once
  under ``deps=data`` (as ASTRA-sim orders nodes) and after the backward pass under
  ``deps=data+ctrl``.

The files are committed; the tests read them (tests/test_tpu_chakra.py) and check that this
script makes them again byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

from workloads.tpu.chakra_et import COMM_TYPE, NODE_TYPE, Attr, Node, encode_trace

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = 8
B, D, F = 64, 512, 2048  # per-rank batch, model width, hidden width
BF16 = 2


def comp(i: int, name: str, flops: int, nbytes: int, deps: tuple[int, ...], us: int) -> Node:
    return Node(id=i, name=name, type=NODE_TYPE["COMP_NODE"], data_deps=deps,
                duration_micros=us,
                attrs=(Attr("num_ops", flops, "int64"), Attr("tensor_size", nbytes, "uint64"),
                       Attr("is_cpu_op", False, "bool")))  # fmt: skip


def allreduce(i: int, name: str, nbytes: int, deps: tuple[int, ...], pg: str = "") -> Node:
    attrs = [Attr("comm_type", COMM_TYPE["ALL_REDUCE"], "int64"),
             Attr("comm_size", nbytes, "int64"), Attr("is_cpu_op", False, "bool")]  # fmt: skip
    if pg:
        attrs.append(Attr("pg_name", pg, "string"))
    return Node(id=i, name=name, type=NODE_TYPE["COMM_COLL_NODE"], data_deps=deps,
                attrs=tuple(attrs))  # fmt: skip


def p2p(i: int, name: str, send: bool, src: int, dst: int, tag: int, nbytes: int,
        deps: tuple[int, ...]) -> Node:  # fmt: skip
    kind = "COMM_SEND_NODE" if send else "COMM_RECV_NODE"
    return Node(id=i, name=name, type=NODE_TYPE[kind], data_deps=deps,
                attrs=(Attr("comm_src", src, "int32"), Attr("comm_dst", dst, "int32"),
                       Attr("comm_tag", tag, "int32"), Attr("comm_size", nbytes, "int64"),
                       Attr("is_cpu_op", False, "bool")))  # fmt: skip


def mm(m: int, k: int, n: int) -> tuple[int, int]:
    """FLOPs and bytes (bf16 operands and result) of an [m, k]·[k, n] matmul."""
    return 2 * m * k * n, BF16 * (m * k + k * n + m * n)


def mlp_dp() -> list[Node]:
    meta = Node(id=1, name="step", type=NODE_TYPE["METADATA_NODE"])
    load = Node(id=2, name="load batch", type=NODE_TYPE["MEM_LOAD_NODE"], ctrl_deps=(1,),
                attrs=(Attr("tensor_size", BF16 * B * D, "uint64"),))  # fmt: skip
    host = Node(id=14, name="optimizer.step (host)", type=NODE_TYPE["COMP_NODE"],
                data_deps=(12, 13), duration_micros=5,
                attrs=(Attr("is_cpu_op", True, "bool"),))  # fmt: skip
    return [
        meta, load,
        comp(3, "fwd.fc1", *mm(B, D, F), (2,), 12),
        comp(4, "fwd.fc2", *mm(B, F, D), (3,), 12),
        comp(5, "loss", 3 * B * D, BF16 * 2 * B * D, (4,), 1),
        comp(6, "bwd.fc2.dW", *mm(F, B, D), (5,), 12),
        comp(7, "bwd.fc2.dX", *mm(B, D, F), (5,), 12),
        allreduce(8, "allreduce fc2.dW", BF16 * F * D, (6,)),
        comp(9, "bwd.fc1.dW", *mm(D, B, F), (7,), 12),
        allreduce(10, "allreduce fc1.dW", BF16 * D * F, (9,)),
        comp(12, "sgd.fc2", 2 * F * D, BF16 * 3 * F * D, (8,), 3),
        comp(13, "sgd.fc1", 2 * D * F, BF16 * 3 * D * F, (10,), 3),
        host,
    ]  # fmt: skip


def pipe(rank: int) -> list[Node]:
    half = RANKS // 2
    act = BF16 * B * F
    if rank < half:  # stage 0: fc1
        peer = rank + half
        return [
            comp(1, "fwd.fc1", *mm(B, D, F), (), 12),
            p2p(2, "send h", True, rank, peer, 1, act, (1,)),
            p2p(3, "recv dh", False, peer, rank, 2, act, (2,)),
            comp(4, "bwd.fc1.dW", *mm(D, B, F), (3,), 12),
            allreduce(5, "allreduce fc1.dW", BF16 * D * F, (4,), "stage0"),
            comp(6, "sgd.fc1", 2 * D * F, BF16 * 3 * D * F, (5,), 3),
        ]  # fmt: skip
    peer = rank - half
    return [
        p2p(1, "recv h", False, peer, rank, 1, act, ()),
        comp(2, "fwd.fc2", *mm(B, F, D), (1,), 12),
        comp(3, "loss", 3 * B * D, BF16 * 2 * B * D, (2,), 1),
        comp(4, "bwd.fc2.dX", *mm(B, D, F), (3,), 12),
        p2p(5, "send dh", True, rank, peer, 2, act, (4,)),
        comp(6, "bwd.fc2.dW", *mm(F, B, D), (3,), 12),
        allreduce(7, "allreduce fc2.dW", BF16 * F * D, (6,), "stage1"),
        comp(8, "sgd.fc2", 2 * F * D, BF16 * 3 * F * D, (7,), 3),
    ]  # fmt: skip


def ctrl() -> list[Node]:
    ar = allreduce(3, "allreduce fc1.dW", BF16 * D * F, ())
    return [
        comp(1, "fwd.fc1", *mm(B, D, F), (), 12),
        comp(2, "bwd.fc1.dW", *mm(D, B, F), (1,), 12),
        dataclasses.replace(ar, ctrl_deps=(2,)),
    ]


META = (Attr("schema", "wafersim test trace"), Attr("ranks", RANKS, "uint64"))


def files() -> dict[str, bytes]:
    """File name -> content of every file this script makes."""
    out = {}
    for rank in range(RANKS):
        out[f"mlp-dp.{rank}.et"] = encode_trace(mlp_dp(), "0.0.4", META)
        out[f"pipe.{rank}.et"] = encode_trace(pipe(rank), "0.0.4", META)
        out[f"ctrl.{rank}.et"] = encode_trace(ctrl(), "0.0.4", META)
    groups = {"stage0": list(range(RANKS // 2)), "stage1": list(range(RANKS // 2, RANKS))}
    out["pipe.groups.json"] = (json.dumps(groups, indent=1) + "\n").encode()
    return out


def main() -> None:
    for name, data in files().items():
        with open(os.path.join(HERE, name), "wb") as fh:
            fh.write(data)
    print(f"wrote {len(files())} files to {HERE}")


if __name__ == "__main__":
    main()
