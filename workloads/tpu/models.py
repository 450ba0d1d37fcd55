"""Analytical models of TPU collectives and matmuls (the spec's formulas), beside the simulator.

Nothing here feeds the simulation's timing: these are what ``wafersim model`` prints and what
``wafersim validate tpu`` compares the simulation with. Notation: V = bytes of the full (gathered)
array, W = bidirectional ICI bandwidth per link, |X| = chips on an axis, T_min = per-hop latency.

- AllGather / ReduceScatter, bidirectional ring, one axis: T = max(T_min·|X|/2, V/W);
  several axes: T = max(T_min·Σ|X_i|/2, V/(W·n_axes)).
- Unidirectional ring: |X|-1 hops of V/|X| bytes at the one-way rate:
  T = (|X|-1)·max(T_min, V/(|X|·W/2)).
- An axis without wraparound is a line: its end links carry |X|-1 shards one way, so it is
  modelled like the unidirectional ring (about twice the bidirectional ring: the spec's "no
  wraparound roughly doubles the time"); with several axes the bandwidth term doubles.
- AllReduce = ReduceScatter + AllGather = 2x AllGather.
- AllToAll: 1/4 of AllGather on a bidirectional ring (V/(4W)); over several axes each link
  direction of axis i carries V·|X_i|/(8N) bytes, N = chips in the group, so the bandwidth term is
  V·max|X_i|/(4·N·W) (which is V/(4W) for one axis). Doubled on a line.
- Latency-bound below about W_oneway x T_min bytes per hop (45 kB on v5e).
- Roofline: a matmul takes max(FLOPs / peak, bytes / HBM rate); compute-bound when its
  arithmetic intensity exceeds peak / HBM rate (critical batch ≈ 240 for bf16 on v5e).
- Data-parallel / FSDP training stays compute-bound on ICI when the per-chip batch exceeds
  C / W (v5p: 4.59e14 / 1.8e11 ≈ 2550 per axis, divided by the axes used).
"""

from __future__ import annotations

import math

from tpu.chips import ChipSpec


def collective_time(
    op: str,
    nbytes: int,
    sizes: tuple[int, ...],
    wraps: tuple[bool, ...],
    spec: ChipSpec,
    *,
    hop_latency_s: float = 1e-6,
    ring: str = "bidirectional",
    link_bytes_per_s: float = 0.0,
) -> dict[str, float | str]:
    """The spec's time of ``op`` on an array of ``nbytes`` over axes of ``sizes``."""
    w_one = link_bytes_per_s or spec.ici_oneway_bytes_per_s
    w = 2 * w_one
    n_axes = len(sizes)
    line = not all(wraps)
    if n_axes == 1 and (ring == "unidirectional" or line):
        x = sizes[0]
        lat = hop_latency_s * (x - 1)
        bw = (x - 1) * nbytes / (x * w_one)
        ag = (x - 1) * max(hop_latency_s, nbytes / (x * w_one)) if x > 1 else 0.0
    else:
        lat = hop_latency_s * sum(sizes) / 2
        bw = nbytes / (w * n_axes) * (2 if line or ring == "unidirectional" else 1)
        ag = max(lat, bw)
    if op == "allreduce":
        t, lat, bw = 2 * ag, 2 * lat, 2 * bw
    elif op == "alltoall":
        n = math.prod(sizes)
        bw = nbytes * max(sizes) / (4 * n * w) * (2 if line else 1)
        t = max(lat, bw)
    else:
        t = ag
    return {
        "time_s": t,
        "latency_term_s": lat,
        "bandwidth_term_s": bw,
        "bound": "latency" if lat >= bw else "bandwidth",
        "latency_bound_below_bytes_per_hop": w_one * hop_latency_s,
    }


def p2p_time(
    nbytes: int, hops: int, paths: int, spec: ChipSpec, *, hop_latency_s: float = 1e-6,
    chunk_bytes: int = 1 << 20, link_bytes_per_s: float = 0.0,
) -> dict[str, float]:  # fmt: skip
    """A transfer split evenly over ``paths`` link-disjoint paths of ``hops`` hops, chunked,
    store-and-forward per chunk: hops·(T_min + chunk/W) for the first chunk, then the rest of
    the message at W per path."""
    w_one = link_bytes_per_s or spec.ici_oneway_bytes_per_s
    per_path = nbytes / paths
    chunk = min(chunk_bytes, per_path)
    first = hops * (hop_latency_s + chunk / w_one)
    return {"time_s": first + (per_path - chunk) / w_one, "first_byte_s": first}


def matmul_roofline(
    i: int, j: int, k: int, spec: ChipSpec, bytes_per_elem: int = 2, out_bytes: int = 4
) -> dict[str, float | str]:
    """max(compute, HBM traffic) of A[I,J]·B[J,K] on one chip (each operand read once)."""
    flops = 2 * i * j * k
    traffic = bytes_per_elem * (i * j + j * k) + out_bytes * i * k
    t_c = flops / spec.bf16_flops
    t_m = traffic / spec.hbm_bytes_per_s
    return {
        "time_s": max(t_c, t_m),
        "compute_s": t_c,
        "memory_s": t_m,
        "intensity_flops_per_byte": flops / traffic,
        "critical_intensity": spec.bf16_flops / spec.hbm_bytes_per_s,
        "bound": "compute" if t_c >= t_m else "memory",
    }


def critical_batch(spec: ChipSpec) -> float:
    """Batch above which a bf16 weight matmul is compute-bound: peak FLOP/s / HBM B/s."""
    return spec.bf16_flops / spec.hbm_bytes_per_s


def dp_critical_batch(spec: ChipSpec, n_axes: int = 1) -> float:
    """Per-chip batch above which data parallelism is compute-bound on ICI: C / W / n_axes."""
    return spec.bf16_flops / spec.ici_bidir_bytes_per_s / n_axes
