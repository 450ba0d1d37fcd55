"""Analytical models of weight-streamed training, beside the simulation (never feeding it).

**Requirements** (the spec's formulas, per model of the table): training FLOPs 6·tokens·P; the
PFLOP/s that train in one week, 6·tokens·P / 604,800 s; MemoryX capacity 20 B·P; interconnect
bandwidth each way P · iterations · 32 bit / 604,800 s, iterations = tokens / batch (FP16
weights in twice, FP32 gradients out, per parameter per step). P and tokens are the table's
(a custom model: its structural P and 3·10^11 tokens).

**Step time** of the simulated configuration, read from the same execution plan the simulation
walks (:func:`cs2.plan.build_plan`), as a recurrence over its chunks
(:func:`step_model`): the wafer's compute per chunk (the CS-2's compute model, the one the
wafer-level component uses), each chunk's serialisations and link latencies over the h links
between MemoryX and a CS-2, the updates. The step boundary is what nothing hides: the first
forward chunk of the next step (the embedding) needs the update of a gradient the wafer sends
at the very end of the backward pass, so the wafer waits for the round trip::

    round trip = gradient chunk up (h serialisations + h link latencies)
               + its update (max(tier bytes / tier bandwidth, flops / ALU rate))
               + the weight chunk read and sent down (h serialisations + h link latencies)

The **latency-hiding condition** of the spec: the round trip is hidden when the first layer's
compute exceeds it; here the wafer computes the weight gradients in forward order, so what
covers the round trip is its work after sending the first streamed chunk's gradient: the first
layer's weight gradients and the later layers' (``first_layer_compute_s`` vs ``round_trip_s``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from cs2 import gpt
from cs2.plan import build_plan
from cs2.system import matmul_cycles, side_cycles
from memoryx.plan import Entry
from memoryx.store import BYTES_PER_PARAM
from swarmx.tree import FANOUT

SECONDS_PER_WEEK = 604_800
CUSTOM_TOKENS = 3e11


def requirements(
    name: str, p_params: float, tokens: float, batch_tokens: float
) -> dict[str, float]:
    """The spec's four requirement formulas."""
    flops = 6 * tokens * p_params
    iterations = tokens / batch_tokens
    return {
        "train_flops": flops,
        "one_week_pflops": flops / SECONDS_PER_WEEK / 1e15,
        "memoryx_bytes": BYTES_PER_PARAM * p_params,
        "interconnect_bits_per_s": p_params * iterations * 32 / SECONDS_PER_WEEK,
        "iterations": iterations,
    }


def tree_shape(systems: int, mode: str) -> tuple[int, int]:
    """(logical nodes, links MemoryX -> CS-2) of the SwarmX tree, by formula."""
    f = FANOUT[mode]
    nodes, level, depth = 0, systems, 0
    while depth == 0 or level > 1:
        level = math.ceil(level / f)
        nodes += level
        depth += 1
    return nodes, depth + 1


def entry_compute_s(p: Any, e: Entry, shape: gpt.Shape, seqs: int) -> float:
    c = p.cs2.compute
    cycles = matmul_cycles(e.work, seqs * shape.sequence, c) + side_cycles(e.work, shape, seqs, c)
    return round(cycles) / p.cs2.clock_hz


def step_model(p: Any) -> dict[str, float]:
    """Step time (``time_s``: the last step's), the run's end (``run_time_s``: the last update
    of the last step), exposed latency and the latency-hiding terms of configuration ``p``.

    A walk of the plan (no events): the way down is a chain of stages, each holding one chunk
    at a time, with the links between them holding ``link_buffer_chunks`` (C) chunks in flight
    and waiting. The reader reads chunk k from its tier when its dependencies' updates are done
    and chunk k-1 is in the prefetch buffer (``prefetch_chunks`` slots the I/O port has not
    taken); MemoryX's port and each node on the way down take chunk k when it is there and
    chunk k-1 is passed on, serialise it (store and forward), and put it on the next link once
    that link's receiver has taken chunk k-C; it arrives one link latency later. The wafer
    starts chunk k when it has arrived and chunk k-1 is done, for the compute model's time.
    Gradients go up the same way, summarised: applied in order, the wafer's gradient buffer
    holding ``grad_buffer_chunks`` (and the way up 3·h more, so a slow updater holds the wafer
    back), each link passing at most C chunks per latency and serialisation (its credit loop).
    Left out: the tier's contention between reads and updates (a gap-filling booking of both
    was tried and overshot the simulation at 75-90 % sparsity, where it matters: +3 % instead
    of -1 %).
    """
    shape, seqs = p.shape(), p.seqs()
    plan = build_plan(shape, p.plan_config())
    mx, sw = p.memoryx, p.swarmx
    _, h = tree_shape(p.systems, sw.mode)
    io_rate = mx.io_bits_per_s / 8
    down_rate = min(io_rate, sw.port_bits_per_s / 8)
    up_rate = min(p.cs2.io_bits_per_s, sw.port_bits_per_s) / 8
    latency = sw.link_latency_cycles / sw.clock_hz
    tier_rate = {"dram": mx.dram_bytes_per_s, "flash": mx.flash_bytes_per_s}
    tiers = p.placement().tier_of
    opt = mx.opt()

    def update_s(e: Entry) -> float:
        mem = e.params * mx.bytes_per_update() / tier_rate[tiers[e.tensor]]
        return max(mem, e.params * opt.flops_per_param / mx.update_flops_per_s)

    done: dict[tuple[int, str, int], float] = {}
    put_read = finished = grad_sent = grad_in = updated = 0.0
    exposed: dict[int, float] = {}
    step_end: dict[int, float] = {}
    compute: dict[int, float] = {}
    per_entry: list[float] = []
    begun: list[float] = []  # when the wafer started each chunk
    link_slots = sw.link_buffer_chunks
    prefetch = mx.prefetch_chunks
    node_rate = sw.port_bits_per_s / 8
    takes: list[list[float]] = [[] for _ in range(h)]  # when stage j took each chunk
    puts: list[list[float]] = [[] for _ in range(h)]  # when it put each on its link down
    up_slots = p.cs2.grad_buffer_chunks + 3 * h
    update_starts: list[float] = []
    grads_in: list[float] = []
    starts: list[float] = []  # when each gradient chunk left the wafer's buffer
    for e in plan:
        ready = max((done[(e.step - 1, *k)] for k in e.needs), default=0.0)
        # The reader: one chunk after the other, each once its dependencies are updated and
        # the previous one is in the prefetch buffer, which holds P chunks the port has not
        # taken.
        read = max(put_read, ready) + (e.stream_bytes / tier_rate[tiers.get(e.tensor, "dram")]
                                       if e.tensor else 0.0)  # fmt: skip
        put_read = read if len(takes[0]) < prefetch else max(read, takes[0][-prefetch])
        # MemoryX's port (stage 0) and the nodes on the way down (stages 1..h-1): each takes
        # the chunk when it is there and the previous one is passed on, serialises it, and
        # puts it on the next link once that link has a free slot (its receiver took chunk
        # k - C); the wafer (stage h) takes it when it is done with the previous chunk.
        arrived = put_read
        for j in range(h):
            take = max(arrived, puts[j][-1]) if puts[j] else arrived
            takes[j].append(take)
            done_ser = take + e.stream_bytes / (io_rate if j == 0 else node_rate)
            below = takes[j + 1] if j + 1 < h else begun
            put = done_ser if len(below) < link_slots else max(done_ser, below[-link_slots])
            puts[j].append(put)
            arrived = put + latency
        exposed[e.step] = exposed.get(e.step, 0.0) + max(0.0, arrived - finished)
        c = entry_compute_s(p, e, shape, seqs)
        compute[e.step] = compute.get(e.step, 0.0) + c
        per_entry.append(c)
        begun.append(max(finished, arrived))
        finished = begun[-1] + c
        if e.returns_gradient:
            # The wafer's gradient buffer: chunk k goes in once chunk k - B has left it.
            if len(starts) >= p.cs2.grad_buffer_chunks:
                finished = max(finished, starts[-p.cs2.grad_buffer_chunks])
            # ... and the way up holds 3·h more: a slow updater holds the wafer back
            if len(update_starts) >= up_slots:
                finished = max(finished, update_starts[-up_slots])
            gser = e.grad_bytes / up_rate
            starts.append(max(grad_sent, finished))
            grad_sent = starts[-1] + gser
            grad_in = max(grad_sent + (h - 1) * gser + h * latency, grad_in + gser)
            if len(grads_in) >= link_slots:
                grad_in = max(grad_in, grads_in[-link_slots] + latency + gser)
            grads_in.append(grad_in)
            update_starts.append(max(updated, grad_in))
            updated = update_starts[-1] + update_s(e)
            done[(e.step, *e.key)] = updated  # type: ignore[misc]
            step_end[e.step] = updated
    last = p.steps - 1
    step = step_end[last] - step_end[last - 1] if last else step_end[0]
    # The round trip of the step boundary: the first chunk's gradient up, its update, the
    # chunk of the next step down.
    first = plan[0]
    grad = next(e for e in plan if e.key == (first.tensor, 0))
    # What hides it: the wafer's work after sending that gradient (the first layer's weight
    # gradients and every later layer's).
    first_layer = sum(per_entry[grad.index + 1 : len(plan) // p.steps])
    round_trip = (
        h * (grad.grad_bytes / up_rate + latency)
        + update_s(grad)
        + first.stream_bytes / tier_rate[tiers.get(first.tensor, "dram")]
        + first.stream_bytes / io_rate
        + (h - 1) * first.stream_bytes / down_rate
        + h * latency
    )
    return {
        "time_s": step,
        "run_time_s": step_end[last],
        "compute_s": compute[last],
        "exposed_latency_s": exposed[last],
        "round_trip_s": round_trip,
        "first_layer_compute_s": first_layer,
        "latency_hidden": first_layer > round_trip,
    }


def model_flops(shape: gpt.Shape, tokens: int, density: float, forward: bool = False) -> float:
    """FLOPs of one training step on one system's ``tokens`` tokens, by formula: 6 per token per
    non-zero weight of the decoder and head (the embedding is a gather), plus attention's
    2 x 2 S H per token forward, twice that backward; ``forward``: the forward pass only (the
    inference FLOPs). The simulation counts the FLOPs of the work each CS-2 does
    (:meth:`cs2.plan.Work.flops`); the two agree up to the rounding of non-zeros
    per row (tested)."""
    h, s = shape.hidden, shape.sequence
    weights = 12 * shape.layers * h * h * density + shape.vocab * h
    passes = 1 if forward else 3  # forward; backward: activation and weight gradients
    attention = passes * 4 * s * h * shape.layers * tokens
    return passes * 2 * tokens * weights + attention


def model(p: Any) -> dict[str, Any]:
    """``wafersim model gpt-ws``: the requirements of the model and the configuration's step."""
    shape = p.shape()
    table = gpt.MODELS.get(p.model)
    seqs = p.seqs()
    if table:
        req = requirements(p.model, table["params"], table["tokens"], table["batch_tokens"])
    else:
        req = requirements(p.model, shape.params, CUSTOM_TOKENS,
                           p.systems * seqs * shape.sequence)  # fmt: skip
    step = step_model(p)
    nodes, hops = tree_shape(p.systems, p.swarmx.mode)
    tokens = p.systems * seqs * shape.sequence
    one = step if p.systems == 1 else step_model(_with(p, systems=1, batch=seqs))
    return {
        **req,
        "parameters": shape.params,
        "batch": seqs,
        "train_flops_per_step": model_flops(shape, seqs * shape.sequence, 1 - p.sparsity),
        "forward_flops_per_step": model_flops(
            shape, seqs * shape.sequence, 1 - p.sparsity, forward=True
        ),
        **step,
        "tokens_per_s": tokens / step["time_s"],
        "scaling_efficiency": one["time_s"] / step["time_s"],
        "swarmx_nodes": nodes,
        "swarmx_hops": hops,
    }


def _with(p: Any, **changes: Any) -> Any:
    return dataclasses.replace(p, **changes)
