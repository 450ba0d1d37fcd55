"""TPU collectives and transfers: results equal numpy on every kind of topology (rings, lines,
several axes, uneven parts), payload=size gives the same times as real data, the bandwidth-bound
times agree with the spec's formulas, the CLI's fixed keys, and bad input gets one exact message
each (exit 2)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from runner import scenario
from simcore import config as cfg
from simcore.errors import ConfigError
from workloads.tpu.collective import CollectiveParams
from workloads.tpu.p2p import P2pParams

SLICES = [
    ("v5e", "4x4", "x"), ("v5e", "4x4", "xy"), ("v5e", "2x3", "yx"), ("v5e", "16x2", "x"),
    ("v5e", "16x2", "xy"), ("v5p", "4x4x4", "xyz"), ("v5p", "4x4x4", "z"), ("v4p", "2x2x2", "xz"),
    ("v6e", "16x1", "x"), ("v3", "3x2", "xy"),
]  # fmt: skip


#: Coarse packets for the large bandwidth-bound cases (speed); packet size changes their times
#: only by packet rounding (test_packet_size_changes_a_collective_only_by_packet_rounding).
COARSE = {"packet_bytes": 1 << 20, "buffer_bytes": 16 << 20}


def collective(**kw) -> dict:
    return scenario.run_kind("tpu-collective", cfg.load(CollectiveParams, kw))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(SLICES),
    op=st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall"]),
    ring=st.sampled_from(["bidirectional", "unidirectional"]),
    blocks=st.integers(1, 5),
    packet=st.sampled_from([64, 256, 4096]),
    dtype=st.sampled_from(["bf16", "f32"]),
    seed=st.integers(0, 3),
)
def test_collectives_equal_numpy_and_size_mode_gives_the_same_time(
    where, op, ring, blocks, packet, dtype, seed
):
    chip, shape, axes = where
    n = 1
    for a in axes:
        n *= int(shape.split("x")["xyz".index(a)])
    item = 2 if dtype == "bf16" else 4
    nbytes = item * n * (n if op == "alltoall" else 1) * blocks
    kw = dict(chip=chip, topology=shape, axes=axes, op=op, ring=ring, bytes=nbytes, dtype=dtype,
              seed=seed, ici={"packet_bytes": packet})  # fmt: skip
    real = collective(**kw)
    size = collective(**kw, payload="size")
    assert real["correct"] is True
    assert size["correct"] is None
    assert real["time_s"] == size["time_s"]
    assert real["hops"] == size["hops"]


@pytest.mark.parametrize(
    ("chip", "shape", "axes", "op", "ring"),
    [
        ("v5e", "16x16", "x", "allgather", "bidirectional"),
        ("v5e", "16x16", "y", "reducescatter", "bidirectional"),
        ("v5e", "16x16", "x", "allreduce", "bidirectional"),
        ("v5e", "16x16", "x", "allgather", "unidirectional"),
        ("v5e", "8x16", "x", "allgather", "bidirectional"),  # a line: no wraparound on x
        ("v5p", "4x4x4", "z", "allreduce", "bidirectional"),
        ("v5e", "16x16", "x", "alltoall", "bidirectional"),
    ],
)
def test_bandwidth_bound_times_match_the_formulas(chip, shape, axes, op, ring):
    m = collective(chip=chip, topology=shape, axes=axes, op=op, ring=ring,
                   bytes=1 << 28, payload="size", ici=COARSE)  # fmt: skip
    assert m["model_bound"] == "bandwidth"
    assert abs(m["model_error_pct"]) < 2.5 if op != "alltoall" else abs(m["model_error_pct"]) < 5


def test_no_wraparound_doubles_the_time():
    ring = collective(chip="v5e", topology="16x16", axes="x", bytes=1 << 26, payload="size",
                      ici=COARSE)  # fmt: skip
    line = collective(chip="v5e", topology="8x16", axes="y", bytes=1 << 26, payload="size",
                      ici=COARSE)  # fmt: skip
    assert ring["time_s"] == line["time_s"]  # y wraps on 8x16: the same 16-chip ring
    cut = collective(chip="v5e", topology="15x16", axes="x", bytes=15 * (1 << 22), payload="size",
                     ici=COARSE)  # fmt: skip
    full = collective(chip="v5e", topology="16x16", axes="x", bytes=15 * (1 << 22), payload="size",
                      ici=COARSE)  # fmt: skip
    assert 1.8 < cut["time_s"] / full["time_s"] < 2.0


def test_latency_bound_collectives_take_a_hop_latency_per_hop():
    m = collective(chip="v5e", topology="16x16", axes="x", bytes=16 * 64, payload="size")
    assert m["model_bound"] == "latency" and m["hops"] == 8
    assert 8e-6 < m["time_s"] < 8.2e-6


def test_cli_collective_prints_the_fixed_keys(capsys):
    code = main([
        "run", "tpu-collective", "--set", "chip=v5e", "--set", "topology=4x4", "--set",
        "op=allgather", "--set", "axes=x", "--set", "bytes=33554432", "--set", "dtype=bf16",
        "--set", "ici.packet_bytes=1048576", "--set", "ici.buffer_bytes=16777216", "--json",
        "--quiet",
    ])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    keys = ("time_s", "hops", "algbw_bytes_per_s", "busbw_bytes_per_s", "link_utilisation")
    for key in (*keys, "correct"):
        assert key in data
    assert data["correct"] is True and data["hops"] == 3
    assert data["algbw_bytes_per_s"] == pytest.approx(33554432 / data["time_s"])
    assert data["busbw_bytes_per_s"] == pytest.approx(data["algbw_bytes_per_s"] * 3 / 4)


def test_cli_p2p_prints_the_fixed_keys(capsys):
    code = main([
        "run", "tpu-p2p", "--set", "chip=v5e", "--set", "topology=4x4", "--set", "src=0,0",
        "--set", "dst=3,3", "--set", "bytes=17000000", "--json", "--quiet",
    ])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {k: data[k] for k in ("hops", "paths", "correct")} == {
        "hops": 6, "paths": 2, "correct": True,
    }  # fmt: skip
    assert 0 < data["first_byte_s"] < data["time_s"]
    assert abs(data["model_error_pct"]) < 0.1


def test_p2p_split_over_disjoint_paths_is_faster_and_correct():
    small = {"bytes": 4_000_000, "ici": {"packet_bytes": 65536}}
    one = scenario.run_kind("tpu-p2p", cfg.load(P2pParams, {**small, "paths": 1}))
    two = scenario.run_kind("tpu-p2p", cfg.load(P2pParams, {**small, "paths": 2}))
    assert two["correct"] is True and two["paths"] == 2
    assert two["time_s"] < 0.7 * one["time_s"]
    assert two["first_byte_s"] == one["first_byte_s"]
    size = scenario.run_kind(
        "tpu-p2p", cfg.load(P2pParams, {**small, "paths": 2, "payload": "size"})
    )
    assert size["time_s"] == two["time_s"]


BAD = [
    ("tpu-collective", ["chip=v9"], "config key 'chip' = 'v9': unknown TPU generation; allowed: "
     "v3, v4p, v5p, v5e, v6e; pick one with --set chip=v5e"),
    ("tpu-collective", ["topology=4x4x4"], "config key 'topology' = '4x4x4': v5e slices are 2-D "
     "(v5e's ICI is a 2-D torus with 4 neighbours per chip); allowed: 2 axes up to 16x16"),
    ("tpu-collective", ["topology=4x0"], "config key 'topology' = '4x0': every axis needs at "
     "least one chip; allowed: >= 1 per axis"),
    ("tpu-collective", ["axes=z"], "config key 'axes' = 'z': the 4x4 slice has no axis 'z'; "
     "allowed: x, y"),
    ("tpu-collective", ["bytes=1002"], "config key 'bytes' = 1002: does not divide into 4 shards "
     "of whole bf16 elements (8 bytes each step; set by op, axes and dtype); allowed: a "
     "multiple of 8, e.g. 1000 or 1008"),
    ("tpu-collective", ["bytes=17179869184"], "config key 'bytes' = 17179869184: each chip would "
     "hold 17,179,869,184 bytes but a v5e chip has 16,000,000,000 bytes of HBM; allowed: at "
     "most 16,000,000,000 bytes per chip"),
    ("tpu-p2p", ["src=4,0"], "config key 'src' = '4,0': not a chip of the 4x4 slice; allowed: "
     "0..3,0..3"),
    ("tpu-p2p", ["dst=0,0,1"], "config key 'dst' = '0,0,1': not a chip of the 4x4 slice; "
     "allowed: 0..3,0..3"),
    ("tpu-p2p", ["bytes=20000000000"], "config key 'bytes' = 20000000000: larger than a v5e "
     "chip's HBM (16,000,000,000 bytes); allowed: 1 .. 16,000,000,000"),
    ("tpu-matmul", ["j=2050"], "config key 'j' = 2050: does not shard evenly over the 4 chips "
     "of axes 'x'; allowed: a multiple of 4"),
    ("tpu-matmul", ["blocks=3"], "config key 'blocks' = 3: does not divide the 1024 columns "
     "that are communicated in blocks (k = 1024, sharding = 'contracting'); allowed: a divisor "
     "of 1024"),
    ("tpu-matmul", ["i=65536", "j=65536", "k=65536", "payload=size"], "config key 'i' = 65536: "
     "A, B and C need 34,359,738,368 bytes but a v5e chip has 16,000,000,000 bytes of HBM; "
     "allowed: smaller i, j, k"),
    ("tpu-train-step", ["axes=q"], "config key 'axes' = 'q': the 16x1 slice has no axis 'q'; "
     "allowed: x, y"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "sets", "message"), BAD)
def test_bad_input_gets_one_clear_message(capsys, name, sets, message):
    argv = ["run", name, "--quiet"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"wafersim: error: {message}\n"


def test_real_payload_too_large_to_hold_points_to_size():
    with pytest.raises(ConfigError) as err:
        cfg.load(CollectiveParams, {"topology": "16x16", "bytes": 1 << 30})
    assert str(err.value) == (
        "config key 'payload' = 'real': real arrays on 256 chips need 549,755,813,888 bytes of "
        "host memory here (limit 2,147,483,648); allowed: real up to that size, size for "
        "larger arrays; use --set payload=size (same timing, no data)"
    )


@pytest.mark.slow
def test_validate_tpu_passes(capsys):
    """`wafersim validate tpu tpu-explained`: the formulas hold within 5 % where their
    assumptions do, and every other row names its reason."""
    assert main(["validate", "tpu", "tpu-explained"]) == 0
    out = capsys.readouterr().out
    for line in out.splitlines():
        if line.startswith("tpu-explained "):
            assert "[" in line and "]" in line


@pytest.mark.parametrize("op", ["allgather", "reducescatter", "allreduce", "alltoall"])
@pytest.mark.parametrize(("slices", "shape", "axes"), [(2, "2x2", "xys"), (3, "2x1", "sx")])
def test_collectives_across_slices_over_dcn(op, slices, shape, axes):
    kw = dict(topology=shape, axes=axes, op=op, slices=slices, bytes=2 * 8 * 3 * 24)
    real = collective(**kw)
    assert real["correct"] is True
    assert real["time_s"] == collective(**kw, payload="size")["time_s"]


def test_dcn_allreduce_and_transfer_match_their_models():
    m = collective(topology="16x16", axes="s", op="allreduce", slices=2, bytes=64 << 20,
                   payload="size", ici=COARSE)  # fmt: skip
    assert m["model_bound"] == "dcn" and abs(m["model_error_pct"]) < 2
    p = scenario.run_kind("tpu-p2p", cfg.load(P2pParams, dict(
        slices=2, src="0,0,0", dst="1,3,3", bytes=17_000_000, paths=1,
        payload="size")))  # fmt: skip
    assert p["route"].startswith("0,0,0>1,0,0>") and abs(p["model_error_pct"]) < 2


def test_multi_slice_axes_are_named():
    with pytest.raises(ConfigError) as err:
        cfg.load(CollectiveParams, {"slices": 2, "axes": "z"})
    assert str(err.value) == (
        "config key 'axes' = 'z': 2 slices of 4x4 has no axis 'z'; allowed: s, x, y"
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from([("v5e", "16x4"), ("v5p", "4x4x4"), ("v5p", "2x3x2"), ("v3", "3x5")]),
    data=st.data(),
    nbytes=st.integers(1, 50_000),
    paths=st.integers(0, 4),
    packet=st.sampled_from([64, 4096, 1 << 20]),
)
def test_p2p_delivers_the_bytes_by_a_minimal_route(where, data, nbytes, paths, packet):
    chip, shape = where
    dims = [int(a) for a in shape.split("x")]
    src = [data.draw(st.integers(0, a - 1)) for a in dims]
    dst = [data.draw(st.integers(0, a - 1)) for a in dims]
    if src == dst:
        dst[0] = (dst[0] + 1) % dims[0]
    kw = dict(chip=chip, topology=shape, src=",".join(map(str, src)),
              dst=",".join(map(str, dst)), bytes=nbytes, paths=paths,
              ici={"packet_bytes": packet, "buffer_bytes": max(packet, 1 << 18)})  # fmt: skip
    real = scenario.run_kind("tpu-p2p", cfg.load(P2pParams, kw))
    size = scenario.run_kind("tpu-p2p", cfg.load(P2pParams, {**kw, "payload": "size"}))
    assert real["correct"] is True and real["time_s"] == size["time_s"]
    topo = cfg.load(P2pParams, kw).slice()
    shortest = len(topo.route(tuple(src), tuple(dst))) - 1
    assert real["hops"] == shortest  # every path used is minimal
    assert 0 < real["first_byte_s"] <= real["time_s"]


@pytest.mark.parametrize("op", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_packet_size_changes_a_collective_only_by_packet_rounding(op):
    """4 MiB over x of a v5e 4x4 line, packets from 1 KiB to 1 MiB: the times differ by at most
    one largest packet's serialisation per phase and hop (1 MiB at 45 GB/s = 23.3 us)."""
    times = {}
    for packet in (1024, 16384, 1 << 20):
        ici = {"packet_bytes": packet, "buffer_bytes": 16 << 20}
        m = collective(chip="v5e", topology="4x4", axes="x", op=op, bytes=1 << 22,
                       payload="size", ici=ici)  # fmt: skip
        times[packet] = m["time_s"]
    phases = 2 if op == "allreduce" else 1
    bound = phases * 3 * (1 << 20) / 4.5e10
    assert max(times.values()) - min(times.values()) <= bound


@pytest.mark.parametrize("op", ["allgather", "reducescatter", "allreduce"])
def test_axis_by_axis_schedule_is_correct_and_follows_its_hierarchical_formula(op):
    """ASTRA-sim's hierarchical schedule (all the data one axis after the other) as a choice:
    numpy-exact, slower than the rotated default on two axes, and within a few percent of the
    sum of its one-axis formulas (lines here: the formula's line term is approximate)."""
    kw = dict(chip="v5e", topology="4x4", axes="xy", op=op, bytes=1 << 22, dtype="f32")
    rot = collective(**kw)
    hier = collective(**kw, schedule="axis-by-axis")
    assert hier["correct"] is True
    assert hier["time_s"] > rot["time_s"]
    assert abs(hier["model_error_pct"]) < 8
