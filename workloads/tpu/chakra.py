"""``tpu-chakra``: a Chakra execution trace set (one file per rank) run on a TPU slice.

The traces are read by :mod:`.chakra_et` (our own reader of the MLCommons format) and turned
into the op graph of :mod:`tpu.graph`, which runs it on the chips and the ICI: rank ``r`` is
device ``r`` (row-major over the slice). The number of ranks must be the slice's number of chips.

Node by node (the mapping; node types and attribute names are the format's):

- ``COMP_NODE``: a ``compute`` op of ``num_ops`` FLOPs on the MXUs while ``tensor_size`` bytes
  stream from HBM (it ends when both have: the chip's roofline, from its mechanisms);
- ``MEM_LOAD_NODE`` / ``MEM_STORE_NODE``: a ``memory`` op, ``tensor_size`` bytes through HBM;
- ``COMM_COLL_NODE``: a collective on the ICI, ``comm_type`` ALL_REDUCE, ALL_GATHER,
  REDUCE_SCATTER (and REDUCE_SCATTER_BLOCK) or ALL_TO_ALL of ``comm_size`` bytes (the whole
  buffer per rank: all-gather's result, reduce-scatter's input), over the ranks of its process
  group: the ranks whose traces have collectives on its ``pg_name`` (without ``pg_name``, every
  rank); the optional ``groups`` file (ASTRA-sim's communicator-group JSON,
  ``{"name": [ranks...]}``) is checked against them. The k-th collective of a group on each
  member is one instance (the order collective libraries require); members must agree on its
  type and size. REDUCE, GATHER, SCATTER, BROADCAST and BARRIER are refused, naming the node,
  or skipped with ``other_collectives=skip`` (ASTRA-sim replays a BROADCAST's recorded time);
- ``COMM_SEND_NODE`` / ``COMM_RECV_NODE``: a transfer of ``comm_size`` bytes from ``comm_src``
  to ``comm_dst`` routed on the torus; the k-th send from a to b with tag t meets the k-th
  receive on b from a with tag t;
- ``METADATA_NODE``, nodes with ``is_cpu_op`` true (host work: the model has no host), and
  compute or memory nodes with no work (``num_ops`` and ``tensor_size`` zero or absent) are not
  run; their dependencies pass through them (``skipped_nodes`` counts them).

``data_deps`` order nodes, as in ASTRA-sim's feeder (Chakra's PyTorch converter puts the
execution order there; its ``ctrl_deps`` are the call hierarchy, and may name nodes the trace
does not hold); ``deps=data+ctrl`` orders by both. A rank's nodes run in a topological order of
its dependencies, the earliest in the file first among those ready; each chip has a compute and
a communication stream that take their ops in that order (:mod:`tpu.graph`). The recorded
``duration_micros`` are not used: time comes from the chip and ICI models. Payloads are size
only. A malformed trace, a dependency on a node that does not exist, a cycle or an unmatched
collective or transfer is a user error naming the file and the node (exit status 2).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import json
import os
from collections.abc import Sequence
from typing import Any

from runner import registry
from simcore import config as cfg
from simcore.config import file_param, param
from simcore.errors import ConfigError
from simcore.sim import RunResult, Simulation
from tpu.chip import TensorChip
from tpu.graph import Graph, GraphRun, Op
from tpu.network import IciNetwork
from tpu.slice import SliceParams, build_slice
from tpu.topology import Slice
from workloads.tpu import opgraph
from workloads.tpu.chakra_et import (
    COMM_TYPES,
    INT_TYPES,
    NODE_TYPE,
    NODE_TYPES,
    ChakraError,
    Node,
    Trace,
    rank_files,
    read_trace,
)
from workloads.tpu.common import footprint as common_footprint

#: Chakra's collective types the ICI model runs, as :mod:`tpu.graph` names them.
COLLECTIVE_KINDS = {
    "ALL_REDUCE": "allreduce",
    "ALL_GATHER": "allgather",
    "REDUCE_SCATTER": "reducescatter",
    "REDUCE_SCATTER_BLOCK": "reducescatter",
    "ALL_TO_ALL": "alltoall",
}
COMP, MEM_LOAD, MEM_STORE = (
    NODE_TYPE["COMP_NODE"],
    NODE_TYPE["MEM_LOAD_NODE"],
    NODE_TYPE["MEM_STORE_NODE"],
)
SEND, RECV, COLL = (
    NODE_TYPE["COMM_SEND_NODE"],
    NODE_TYPE["COMM_RECV_NODE"],
    NODE_TYPE["COMM_COLL_NODE"],
)
METADATA = NODE_TYPE["METADATA_NODE"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChakraParams(SliceParams):
    et: str = file_param(
        "",
        "a Chakra trace file PREFIX.RANK.et: the set's other ranks' files beside it are read "
        "too (relative paths: the working directory, or the scenario file's folder)",
        names=("",),
        allowed="a path to one rank's Chakra trace file (PREFIX.RANK.et)",
    )
    groups: str = file_param(
        "",
        "communicator groups file, JSON {pg_name: [ranks...]} (ASTRA-sim's), checked against "
        "the traces; '' = groups from the traces alone",
        names=("",),
        allowed="a path to a JSON file of process groups, or '' (groups from the traces)",
    )
    deps: str = param(
        "data", "dependencies that order nodes: data_deps (as ASTRA-sim), or both data and ctrl",
        choices=("data", "data+ctrl"),
    )  # fmt: skip
    other_collectives: str = param(
        "refuse", "REDUCE, GATHER, SCATTER, BROADCAST, BARRIER nodes (the ICI model runs none): "
        "refuse the trace, or skip them", choices=("refuse", "skip"),
    )  # fmt: skip
    ops_listed: int = param(
        64, "ops of the rank that finished last listed in op_table (0: none)", min=0,
        max=1_000_000,
    )  # fmt: skip

    def check(self) -> None:
        super().check()
        if not self.et:
            raise ConfigError(
                "et", self.et, "no trace given",
                hint="set et=PATH (one rank's file of a Chakra trace set, PREFIX.RANK.et)",
            )  # fmt: skip
        ts = load(self.et, self.groups, self.deps, self.other_collectives)
        _refuse_ranks(self, self.slice(), ts.graph.devices)


# -- reading -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TraceSet:
    """The ranks' traces, as the kind runs them."""

    traces: tuple[Trace, ...]
    graph: Graph
    nodes: int
    skipped: int
    collectives: int
    transfers: int


def load(et: str, groups: str = "", deps: str = "data", other: str = "refuse") -> TraceSet:
    """Read the trace set ``et`` names (see :func:`.chakra_et.rank_files`) and make its graph;
    cached by the files' names, sizes and modification times."""
    files = rank_files(et)
    stamp = tuple((f, *_stat(f)) for f in files)
    gstamp = (groups, *_stat(groups)) if groups else ()
    return _load(stamp, gstamp, deps == "data+ctrl", other == "skip")


def _stat(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ChakraError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=8)
def _load(
    stamp: tuple[tuple[str, int, int], ...], gstamp: tuple[Any, ...], ctrl: bool, skip: bool
) -> TraceSet:
    traces = tuple(read_trace(f) for f, _m, _s in stamp)
    groups = read_groups(gstamp[0], len(traces)) if gstamp else None
    return to_graph(traces, groups, ctrl=ctrl, skip_other=skip)


def read_groups(path: str, ranks: int) -> dict[str, tuple[int, ...]]:
    """A communicator-group file: a JSON object mapping each process group's name to its ranks."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ChakraError(f"{path}: cannot read the groups file ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ChakraError(f"{path}: not a JSON file ({exc}); a groups file is "
                          '{"pg_name": [rank, ...], ...}') from None  # fmt: skip
    if not isinstance(data, dict):
        raise ChakraError(f'{path}: a groups file is a JSON object {{"pg_name": [rank, ...]}}, '
                          f"not a {type(data).__name__}")  # fmt: skip
    out: dict[str, tuple[int, ...]] = {}
    for name, members in data.items():
        ok = isinstance(members, list) and members and all(
            isinstance(r, int) and not isinstance(r, bool) for r in members
        )  # fmt: skip
        if not ok:
            raise ChakraError(f"{path}: group {name!r}: {members!r} is not a list of ranks")
        bad = [r for r in members if not 0 <= r < ranks]
        if bad:
            raise ChakraError(f"{path}: group {name!r}: rank {bad[0]} is not one of the trace's "
                              f"ranks 0..{ranks - 1}")  # fmt: skip
        if len(set(members)) != len(members):
            raise ChakraError(f"{path}: group {name!r} names a rank twice")
        out[str(name)] = tuple(sorted(members))
    return out


def _where(trace: Trace, node: Node) -> str:
    return f"{trace.path}: node {node.id}"


def _int_attr(trace: Trace, node: Node, name: str, default: int | None = 0) -> int:
    a = node.attr(name)
    if a is None or a.value is None:
        if default is None:
            raise ChakraError(f"{_where(trace, node)} ({node.type_name}) has no attribute "
                              f"'{name}'; the model needs it")  # fmt: skip
        return default
    if a.type not in (*INT_TYPES, "bool"):
        raise ChakraError(f"{_where(trace, node)}: attribute '{name}' is a {a.type or 'unset'} "
                          "value, not an integer")  # fmt: skip
    value = int(a.value)
    if value < 0:
        raise ChakraError(f"{_where(trace, node)}: attribute '{name}' = {value} is negative")
    return value


def _deps(node: Node, ctrl: bool) -> tuple[int, ...]:
    """The ids ``node`` waits for: its data dependencies (and control ones with ``ctrl``)."""
    return tuple(dict.fromkeys((*node.data_deps, *node.ctrl_deps))) if ctrl else node.data_deps


def _order(trace: Trace, ctrl: bool) -> list[Node]:
    """The trace's nodes in a topological order of their dependencies, the earliest in the
    file first among those ready."""
    pos: dict[int, int] = {}
    for i, n in enumerate(trace.nodes):
        if n.id in pos:
            raise ChakraError(f"{trace.path}: byte {n.offset}: a second node with id {n.id}")
        pos[n.id] = i
    waiting = [0] * len(trace.nodes)
    users: list[list[int]] = [[] for _ in trace.nodes]
    for i, n in enumerate(trace.nodes):
        for d in dict.fromkeys(_deps(n, ctrl)):
            j = pos.get(d)
            if j is None:
                raise ChakraError(f"{_where(trace, n)} depends on node {d}, which the trace "
                                  "does not have")  # fmt: skip
            if j == i:
                raise ChakraError(f"{_where(trace, n)} depends on itself")
            waiting[i] += 1
            users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    out: list[Node] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(trace.nodes[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(out) < len(trace.nodes):
        stuck = next(n for i, n in enumerate(trace.nodes) if waiting[i])
        raise ChakraError(f"{_where(trace, stuck)}: its dependencies form a cycle (it waits, "
                          "directly or not, for itself)")  # fmt: skip
    return out


@dataclasses.dataclass
class _Pending:
    """An op being made, before collectives and transfers are matched across ranks."""

    node: Node
    op: dict[str, Any]
    deps: tuple[int, ...]


def _classify(
    trace: Trace, node: Node, rank: int, ranks: int, skip_other: bool
) -> dict[str, Any] | None:
    """The op of ``node`` (its fields for :class:`tpu.graph.Op`), or None if it is not run."""
    t = node.type
    if t not in NODE_TYPES or t == 0:
        raise ChakraError(
            f"{trace.path}: byte {node.offset}: node {node.id} has node type {t} "
            f"({NODE_TYPES.get(t, 'unknown')}); allowed: "
            + ", ".join(f"{v} ({k})" for k, v in NODE_TYPES.items() if k)
        )
    cpu = node.attr("is_cpu_op")
    if t == METADATA or (cpu is not None and bool(cpu.value)):
        return None
    name = node.name or f"node{node.id}"
    where = f"{os.path.basename(trace.path)}:node {node.id}"
    if t in (COMP, MEM_LOAD, MEM_STORE):
        nbytes = _int_attr(trace, node, "tensor_size")
        if t == COMP:
            flops = _int_attr(trace, node, "num_ops")
            if not flops and not nbytes:
                return None
            return {"name": name, "cls": "compute", "where": where, "flops": flops,
                    "bytes": nbytes}  # fmt: skip
        if not nbytes:
            return None
        return {"name": name, "cls": "memory", "where": where, "bytes": nbytes}
    size = _int_attr(trace, node, "comm_size", None)
    if t == COLL:
        ct = _int_attr(trace, node, "comm_type", None)
        cname = COMM_TYPES.get(ct, f"CollectiveCommType {ct}")
        if cname not in COLLECTIVE_KINDS:
            if skip_other and ct in COMM_TYPES:
                return None
            raise ChakraError(
                f"{_where(trace, node)}: comm_type {ct} ({cname}) is not run by the ICI model; "
                f"allowed: {', '.join(f'{k} ({COMM_TYPES_R[k]})' for k in COLLECTIVE_KINDS)}"
            )
        pg = node.attr("pg_name")
        return {"name": name, "cls": "collective", "where": where, "bytes": size,
                "kind": COLLECTIVE_KINDS[cname], "comm_type": ct,
                "pg": "" if pg is None else str(pg.value)}  # fmt: skip
    src = _int_attr(trace, node, "comm_src", rank if t == SEND else None)
    dst = _int_attr(trace, node, "comm_dst", rank if t == RECV else None)
    for key, r in (("comm_src", src), ("comm_dst", dst)):
        if r >= ranks:
            raise ChakraError(f"{_where(trace, node)}: {key} = {r} is not one of the ranks "
                              f"0..{ranks - 1}")  # fmt: skip
    me, peer = (src, dst) if t == SEND else (dst, src)
    if me != rank:
        side = "comm_src" if t == SEND else "comm_dst"
        raise ChakraError(f"{_where(trace, node)}: {side} = {me} but the trace is rank {rank}'s")
    return {"name": name, "cls": "send" if t == SEND else "recv", "where": where,
            "bytes": size, "peer": peer, "src": src, "dst": dst,
            "tag": _int_attr(trace, node, "comm_tag")}  # fmt: skip


COMM_TYPES_R = {v: k for k, v in COMM_TYPES.items()}


def to_graph(
    traces: Sequence[Trace],
    groups: dict[str, tuple[int, ...]] | None,
    *,
    ctrl: bool = False,
    skip_other: bool = False,
) -> TraceSet:
    """The op graph of a trace set (module docstring); errors name the file and the node."""
    ranks = len(traces)
    pending: list[list[_Pending]] = []
    skipped = 0
    for rank, trace in enumerate(traces):
        ops: list[_Pending] = []
        # node id -> the indices (in ops) it stands for: itself, or its dependencies' if skipped
        stands: dict[int, tuple[int, ...]] = {}
        for node in _order(trace, ctrl):
            deps = tuple(sorted({j for d in _deps(node, ctrl) for j in stands[d]}))
            op = _classify(trace, node, rank, ranks, skip_other)
            if op is None:
                skipped += 1
                stands[node.id] = deps
                continue
            stands[node.id] = (len(ops),)
            ops.append(_Pending(node, op, deps))
        pending.append(ops)
    colls = _match_collectives(traces, pending, groups)
    sends = _match_transfers(traces, pending)
    programs: dict[int, Sequence[Op]] = {}
    for rank, ops in enumerate(pending):
        prog = []
        for p in ops:
            fields = {k: v for k, v in p.op.items() if k not in ("comm_type", "pg", "src",
                                                                "dst", "tag")}  # fmt: skip
            prog.append(Op(**fields, deps=p.deps, itemsize=1))
        programs[rank] = prog
    nodes = sum(len(t.nodes) for t in traces)
    return TraceSet(tuple(traces), Graph(ranks, programs), nodes, skipped, colls, sends)


def _match_collectives(
    traces: Sequence[Trace], pending: list[list[_Pending]],
    groups: dict[str, tuple[int, ...]] | None,
) -> int:  # fmt: skip
    """Give each collective its group and the key that joins its members' ops; returns the
    number of collective instances."""
    ranks = len(traces)
    every = tuple(range(ranks))
    # per process group, per member rank: its collectives on the group, in program order
    on: dict[str, dict[int, list[_Pending]]] = {}
    for rank, ops in enumerate(pending):
        for p in ops:
            if p.op["cls"] == "collective":
                on.setdefault(p.op["pg"], {}).setdefault(rank, []).append(p)
    instances = 0
    for pg in sorted(on):
        by_rank = on[pg]
        if not pg:
            members = every
        elif groups is not None:
            if pg not in groups:
                rank = min(by_rank)
                raise ChakraError(f"{_where(traces[rank], by_rank[rank][0].node)}: process "
                                  f"group {pg!r} is not in the groups file")  # fmt: skip
            members = groups[pg]
        else:
            members = tuple(sorted(by_rank))
        outside = [r for r in sorted(by_rank) if r not in members]
        if outside:
            r = outside[0]
            raise ChakraError(f"{_where(traces[r], by_rank[r][0].node)}: a collective on process "
                              f"group {pg!r}, whose ranks are {list(members)}")  # fmt: skip
        first = members[0]
        ref = by_rank.get(first, [])
        for r in members:
            mine = by_rank.get(r, [])
            if len(mine) != len(ref):
                # the first collective without a partner: on the rank that has more
                more, less = (r, first) if len(mine) > len(ref) else (first, r)
                extra = by_rank[more][min(len(mine), len(ref))]
                raise ChakraError(
                    f"{_where(traces[more], extra.node)}: rank {more} has "
                    f"{max(len(mine), len(ref))} collectives on process group "
                    f"{pg or '(all ranks)'!r}, rank {less} has {min(len(mine), len(ref))}: this "
                    f"one has no partner on rank {less}"
                )
            for k, (a, b) in enumerate(zip(ref, mine, strict=True)):
                if (a.op["comm_type"], a.op["bytes"]) != (b.op["comm_type"], b.op["bytes"]):
                    raise ChakraError(
                        f"{_where(traces[r], b.node)}: collective {k} on process group "
                        f"{pg or '(all ranks)'!r} is {COMM_TYPES[b.op['comm_type']]} of "
                        f"{b.op['bytes']} bytes, but on rank {first} "
                        f"({_where(traces[first], a.node)}) {COMM_TYPES[a.op['comm_type']]} of "
                        f"{a.op['bytes']} bytes"
                    )
        for r in members:
            for k, p in enumerate(by_rank.get(r, [])):
                p.op["groups"] = (members,)
                p.op["key"] = f"pg {pg or '*'} #{k}"
        instances += len(ref)
    return instances


def _match_transfers(traces: Sequence[Trace], pending: list[list[_Pending]]) -> int:
    """Pair each send with its receive (same source, destination and tag, in order)."""
    sends: dict[tuple[int, int, int], list[tuple[int, _Pending]]] = {}
    recvs: dict[tuple[int, int, int], list[tuple[int, _Pending]]] = {}
    for rank, ops in enumerate(pending):
        for p in ops:
            if p.op["cls"] in ("send", "recv"):
                key = (p.op["src"], p.op["dst"], p.op["tag"])
                (sends if p.op["cls"] == "send" else recvs).setdefault(key, []).append((rank, p))
    for key in sorted(set(sends) | set(recvs)):
        s, r = sends.get(key, []), recvs.get(key, [])
        if len(s) != len(r):
            rank, p = (s if len(s) > len(r) else r)[min(len(s), len(r))]
            what = "send" if len(s) > len(r) else "receive"
            raise ChakraError(
                f"{_where(traces[rank], p.node)}: a {what} from rank {key[0]} to rank {key[1]} "
                f"with tag {key[2]} that has no partner ({len(s)} sends, {len(r)} receives)"
            )
        for k, ((rs, ps), (rr, pr)) in enumerate(zip(s, r, strict=True)):
            if ps.op["bytes"] != pr.op["bytes"]:
                raise ChakraError(
                    f"{_where(traces[rr], pr.node)}: receives {pr.op['bytes']} bytes but its "
                    f"send ({_where(traces[rs], ps.node)}) sends {ps.op['bytes']}"
                )
            ps.op["key"] = pr.op["key"] = f"{key[0]}->{key[1]} tag {key[2]} #{k}"
    return sum(len(v) for v in sends.values())


# -- the kind ----------------------------------------------------------------------------------
@dataclasses.dataclass
class ChakraRun:
    traces: TraceSet
    topo: Slice
    net: IciNetwork
    program: GraphRun


def _refuse_ranks(p: ChakraParams, topo: Slice, ranks: int) -> None:
    if ranks != topo.chips:
        raise ConfigError(
            "topology", p.topology,
            f"has {topo.chips} chips but the trace set {p.et} has {ranks} ranks (one chip each)",
            allowed=f"a slice of {ranks} chips", hint="set topology (and slices) to match",
        )  # fmt: skip


def build(sim: Simulation, p: ChakraParams) -> ChakraRun:
    ts = load(p.et, p.groups, p.deps, p.other_collectives)
    top, topo, net = build_slice(sim, p)
    _refuse_ranks(p, topo, ts.graph.devices)
    chips = {c: TensorChip(top, f"chip[{','.join(map(str, c))}]", topo.spec) for c in topo.coords}
    run = GraphRun(top, topo, net, chips, ts.graph)
    return ChakraRun(ts, topo, net, run)


def metrics(sim: Simulation, p: ChakraParams, run: ChakraRun, result: RunResult) -> dict:
    """The op-graph kinds' metrics (:func:`.opgraph.metrics`, ``op_table`` cut to
    ``ops_listed`` records), the trace set's counts and the model's."""
    out = opgraph.metrics(sim, run.program, run.net)
    out["op_table"] = out["op_table"][: p.ops_listed]
    out.update({
        "nodes": run.traces.nodes,
        "skipped_nodes": run.traces.skipped,
        "collective_count": run.traces.collectives,
        "transfer_count": run.traces.transfers,
    })  # fmt: skip
    return opgraph.with_model(out, model(p))


# -- the model -----------------------------------------------------------------------------------
def op_time(op: Op, rank: int, topo: Slice, p: ChakraParams) -> float:
    """One op's roofline time on ``rank``: :func:`.opgraph.op_time` (compute: the larger of its
    MXU passes and its HBM bytes; memory: its HBM bytes; a collective over axes: the spec's
    formula, over another group: a ring's steps; a send: its bytes at one link's rate plus its
    route's hop latencies; a receive: nothing of its own, it ends when its send has arrived),
    and nothing for a send to its own rank (the run moves nothing)."""
    if op.cls == "send" and op.peer == rank:
        return 0.0
    return opgraph.op_time(op, rank, topo, p.ici)


def schedule(graph: Graph, times: dict[int, list[float]]) -> dict[int, list[float]]:
    """Each op's end on its rank's two in-order streams with its dependencies (analytical): a
    collective ends its time after its last member reaches it, a receive when its send has
    arrived (or when it starts, if later)."""
    programs = graph.programs
    end: dict[int, list[float | None]] = {r: [None] * len(ops) for r, ops in programs.items()}
    order = {(r, s): [i for i, op in enumerate(ops) if op.stream == s]
             for r, ops in programs.items() for s in ("compute", "comm")}  # fmt: skip
    at = dict.fromkeys(order, 0)
    free = dict.fromkeys(order, 0.0)
    starts: dict[str, dict[int, float]] = {}
    arrived: dict[str, float] = {}
    left = sum(len(ops) for ops in programs.values())
    while left:
        moved = False
        for (r, s), idx in order.items():
            ops, ends = programs[r], end[r]
            while at[r, s] < len(idx):
                i = idx[at[r, s]]
                op = ops[i]
                deps = [ends[j] for j in op.deps]
                if any(e is None for e in deps):
                    break
                start = max([free[r, s], *(e for e in deps if e is not None)])
                t = times[r][i]
                if op.cls == "collective" and op.bytes and len(op.groups[0]) > 1:
                    joined = starts.setdefault(op.match_key, {})
                    joined.setdefault(r, start)
                    if len(joined) < len(op.groups[0]):
                        break
                    e = max(joined.values()) + t
                elif op.cls == "recv":
                    if op.match_key not in arrived:
                        break
                    e = max(start, arrived[op.match_key])
                else:
                    e = start + t
                    if op.cls == "send":
                        arrived[op.match_key] = e
                ends[i] = free[r, s] = e
                at[r, s] += 1
                left -= 1
                moved = True
        if not moved:
            (r, s), idx = next((k, v) for k, v in order.items() if at[k] < len(v))
            op = programs[r][idx[at[r, s]]]
            raise ChakraError(
                f"{op.where}: the trace deadlocks: rank {r}'s {s} stream waits here for ranks "
                "that never reach this op's partners"
            )
    return {r: [e if e is not None else 0.0 for e in ends] for r, ends in end.items()}


def model(p: ChakraParams) -> dict[str, Any]:
    """Every op at its roofline (:func:`op_time`), scheduled on the ranks' streams like the
    simulation (:func:`schedule`): ``time_s``, and the last rank's ``compute_s``, ``memory_s``
    and ``comm_s`` (sums of its ops' times) and ``bound``."""
    ts = load(p.et, p.groups, p.deps, p.other_collectives)
    topo = p.slice()
    _refuse_ranks(p, topo, ts.graph.devices)
    times = {r: [op_time(op, r, topo, p) for op in ops] for r, ops in ts.graph.programs.items()}
    ends = schedule(ts.graph, times)
    last = max(ends, key=lambda r: (max(ends[r], default=0.0), -r))
    by = {"compute": 0.0, "memory": 0.0, "comm": 0.0}
    for op, t in zip(ts.graph.programs[last], times[last], strict=True):
        by[op.cls if op.cls in ("compute", "memory") else "comm"] += t
    bound = max(by, key=lambda k: by[k])
    return {
        "time_s": max((max(e, default=0.0) for e in ends.values()), default=0.0),
        "compute_s": by["compute"],
        "memory_s": by["memory"],
        "comm_s": by["comm"],
        "bound": "communication" if bound == "comm" else bound,
    }


def footprint(p: ChakraParams) -> registry.Footprint:
    """The network, six components per chip, one op record per node."""
    ts = load(p.et, p.groups, p.deps, p.other_collectives)
    _refuse_ranks(p, p.slice(), ts.graph.devices)
    return common_footprint(p, 6, 200 * ts.nodes, "et")


#: ``wafersim validate tpu-chakra``: the project's trace sets (tests/data/chakra/), simulated
#: against their scheduled roofline: (set, topology, extra parameters).
VALIDATION = (
    ("mlp-dp", "2x4", {}), ("mlp-dp", "8x1", {}), ("pipe", "2x4", {}), ("pipe", "8x1", {}),
    ("ctrl", "2x4", {}), ("ctrl", "2x4", {"deps": "data+ctrl"}),
)  # fmt: skip
#: Why the runs take longer than the model (measured: +21.5, +8.4, -4.9, +23.7, +23.2 and
#: +21.9 %): on 2x4 the all-reduce over both axes takes 23 % longer than the spec's formula (as
#: ``tpu-collective`` shows alone); every HBM op pays the access latency (0.33 us on v5e); on
#: 8x1 the pipeline's four transfers between the stages share the one link between them, which
#: the model's transfers (each alone on its route) do not.
VALIDATION_MAX_ERROR_PCT = 30.0
DATA = os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "chakra")
)


def _validate(runner: registry.Runner) -> list[registry.ValidationRow]:
    points = [
        cfg.load(ChakraParams, {"et": os.path.join(DATA, f"{name}.0.et"), "topology": topo,
                                "ops_listed": 0, **extra})
        for name, topo, extra in VALIDATION
    ]  # fmt: skip
    rows = []
    for (name, topo, extra), m in zip(VALIDATION, runner("tpu-chakra", points), strict=True):
        label = f"{name} v5e {topo}" + "".join(f" {k}={v}" for k, v in extra.items())
        rows.append(registry.ValidationRow("tpu-chakra", label, m["time_s"], m["model_time_s"],
                                           unit="s"))  # fmt: skip
    return rows


def register() -> None:
    registry.register_case(
        registry.ValidationCase(
            name="tpu-chakra",
            summary="the project's Chakra trace sets (DP, pipeline with groups and transfers, "
            "control dependencies) vs each op's roofline, scheduled across ranks",
            run=_validate,
            tolerance=VALIDATION_MAX_ERROR_PCT,
            criterion="max_pct",
            origin=__name__,
        )
    )
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-chakra",
            summary="a Chakra execution trace set (one file per rank) on a TPU slice",
            params=ChakraParams,
            build=build,
            metrics=metrics,
            model=model,
            origin=__name__,
            footprint=footprint,
        )
    )
