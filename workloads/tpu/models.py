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
  arithmetic intensity exceeds peak / HBM rate (critical batch ≈ 240 for bf16 on v5e). The
  FLOPs are those the MXUs spend: each B tile (``tile_k`` x ``tile_n``) is padded up to whole
  MXU passes (d x d weights, 8 rows), so tiles that are not multiples of the MXU size cost more.
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
    packet_bytes: int = 4096, link_bytes_per_s: float = 0.0, dcn_hops: int = 0,
    pcie_bytes_per_s: float = 1.5e10, dcn_bytes_per_s: float = 2.5e10,
    dcn_latency_s: float = 1e-5,
) -> dict[str, float]:  # fmt: skip
    """A transfer split evenly over ``paths`` link-disjoint paths of ``hops`` hops, in packets
    that cut through every chip: the first packet's tail arrives after the path's latency
    (hops·T_min) plus one packet's serialisation, the whole message after the path's latency
    plus its serialisation at W per path. Of those hops, ``dcn_hops`` go between slices: four
    stages each (PCIe out, NIC out, NIC in, PCIe in) and the network latency instead of T_min,
    and the slowest stage sets the rate."""
    w_one = link_bytes_per_s or spec.ici_oneway_bytes_per_s
    per_path = nbytes / paths
    packet = min(packet_bytes, per_path)
    latency = (hops - dcn_hops) * hop_latency_s + dcn_hops * dcn_latency_s
    rate = w_one
    if dcn_hops:
        rate = min(w_one, pcie_bytes_per_s, dcn_bytes_per_s)
    return {"time_s": latency + per_path / rate, "first_byte_s": latency + packet / rate}


def padded(size: int, tile: int, unit: int) -> int:
    """``size`` cut into tiles of ``tile`` (the last one shorter), each rounded up to ``unit``."""
    tile = min(tile, size)
    full, rest = divmod(size, tile)
    return full * -(-tile // unit) * unit + -(-rest // unit) * unit


def mxu_flops(
    i: int, j: int, k: int, spec: ChipSpec, tile_k: int | None = None, tile_n: int | None = None
) -> int:
    """FLOPs the MXUs spend on A[I,J]·B[J,K]: rows rounded up to 8, B's tiles to whole d x d
    passes (no padding when no tiles are given: J and K as one tile each)."""
    d = spec.mxu_dim
    return 2 * padded(i, i, 8) * padded(j, tile_k or j, d) * padded(k, tile_n or k, d)


def matmul_roofline(
    i: int, j: int, k: int, spec: ChipSpec, bytes_per_elem: int = 2, out_bytes: int = 4,
    tile_k: int | None = None, tile_n: int | None = None,
) -> dict[str, float | str]:  # fmt: skip
    """max(compute, HBM traffic) of A[I,J]·B[J,K] on one chip (each operand read once); the
    compute term counts the padded MXU passes of ``tile_k`` x ``tile_n`` tiles when given."""
    flops = 2 * i * j * k
    traffic = bytes_per_elem * (i * j + j * k) + out_bytes * i * k
    t_c = (mxu_flops(i, j, k, spec, tile_k, tile_n) if tile_k else flops) / spec.bf16_flops
    t_m = traffic / spec.hbm_bytes_per_s
    return {
        "time_s": max(t_c, t_m),
        "compute_s": t_c,
        "memory_s": t_m,
        "intensity_flops_per_byte": flops / traffic,
        "critical_intensity_flops_per_byte": spec.bf16_flops / spec.hbm_bytes_per_s,
        "bound": "compute" if t_c >= t_m else "memory",
    }


def critical_batch(spec: ChipSpec) -> float:
    """Batch above which a bf16 weight matmul is compute-bound: peak FLOP/s / HBM B/s."""
    return spec.bf16_flops / spec.hbm_bytes_per_s


def dp_critical_batch(spec: ChipSpec, n_axes: int = 1) -> float:
    """Per-chip batch above which data parallelism is compute-bound on ICI: C / W / n_axes."""
    return spec.bf16_flops / spec.ici_bidir_bytes_per_s / n_axes


def dcn_time(
    op: str, nbytes: int, n_ici: int, slices: int, chips_per_host: int, *,
    pcie_bytes_per_s: float, dcn_bytes_per_s: float, latency_s: float,
) -> float:  # fmt: skip
    """The DCN phase of a collective over slices (hierarchical: it moves 1/n_ici of the data
    per chip): every chip sends and receives (S-1) shards of V/(n_ici·S) through its PCIe link
    and its host's NIC, which the host's chips share; an AllReduce does it twice."""
    if slices == 1:
        return 0.0
    rate = min(pcie_bytes_per_s, dcn_bytes_per_s / chips_per_host)
    shard = nbytes / (n_ici * slices)
    once = (slices - 1) * shard / rate + latency_s * (slices // 2)
    return 2 * once if op == "allreduce" else once
