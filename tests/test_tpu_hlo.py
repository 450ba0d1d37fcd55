"""tpu-hlo: HLO texts made by JAX (tests/data/hlo, no JAX needed) read into op graphs and run on
a slice; replica groups in every syntax; async pairs overlapping; the MLP under three shardings
compared with tpu-train-step, tpu-collective and the roofline model; bad files refused with
their file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from runner import scenario
from simcore import config as cfg
from workloads.tpu import hlo
from workloads.tpu.collective import CollectiveParams
from workloads.tpu.hlorun import DEMO, HloParams
from workloads.tpu.trainstep import TrainStepParams

DATA = Path(__file__).resolve().parent / "data" / "hlo"
MLP = {s: DATA / f"mlp-{s}.hlo.txt" for s in ("dp", "fsdp", "tp")}


def run(path, **kw):
    return scenario.run_kind("tpu-hlo", cfg.load(HloParams, {"hlo": str(path), **kw}))


def test_the_bundled_modules_are_the_committed_test_data():
    for name, path in MLP.items():
        assert (DEMO.parent / path.name).read_bytes() == path.read_bytes(), name


def test_the_mlp_modules_read_into_their_ops():
    counts = {}
    for name, path in MLP.items():
        mod = hlo.read(path)
        assert (mod.partitions, mod.replicas, mod.devices) == (8, 1, 8)
        ops = hlo.to_graph(mod).programs[0]
        counts[name] = [sum(op.cls == c for op in ops) for c in ("compute", "memory", "collective")]
    # 5 matmuls each (forward 2, backward 3); the collectives the shardings need
    assert counts == {"dp": [5, 9, 1], "fsdp": [5, 13, 3], "tp": [5, 9, 1]}
    dp = hlo.to_graph(hlo.read(MLP["dp"])).programs[0]
    by = {op.name: op for op in dp}
    # x[32, 512] . W1[512, 1024] per chip (global batch 256 over 8), rhs contracted on dim 1
    assert by["ynn_fusion.2"].matmul == (32, 512, 1024)
    assert by["dot.4"].matmul == (512, 32, 1024)  # dW2 = h^T . dy, contracting the batch
    ar = by["all-reduce.4"]  # both f32 gradients in one all-reduce over all 8 devices
    assert (ar.kind, ar.bytes, ar.groups, ar.channel) == (
        "allreduce", 4 * 2 * 512 * 1024, (tuple(range(8)),), 1)  # fmt: skip
    assert ar.where == "mlp-dp.hlo.txt:180 (make_hlo.py:39)"
    fsdp = {op.name: op for op in hlo.to_graph(hlo.read(MLP["fsdp"])).programs[0]}
    assert fsdp["all-gather"].bytes == 4 * 512 * 1024  # the gathered f32 W1


@pytest.mark.parametrize(
    ("text", "groups"),
    [
        ("{{0,1},{2,3}}", ((0, 1), (2, 3))),
        ("{}", ((0, 1, 2, 3),)),
        ("[2,2]<=[4]", ((0, 1), (2, 3))),
        ("[2,2]<=[2,2]T(1,0)", ((0, 2), (1, 3))),
        ("mesh['a'=2,'b'=2] {'b'}", ((0, 1), (2, 3))),
        ("mesh['a'=2,'b'=2] {'a'}", ((0, 2), (1, 3))),
        ("mesh['axis_0'=1,'axis_1'=4] {'axis_1'}", ((0, 1, 2, 3),)),
    ],
)
def test_replica_groups_in_every_syntax(text, groups):
    assert hlo.replica_groups(text, 4, "f:1") == groups


def test_the_three_shardings_run_and_are_communication_bound_at_batch_32():
    for name, path in MLP.items():
        m = run(path)
        assert m["time_s"] > 0 and m["correct"] is None, name
        assert m["bound"] == "communication", name
        assert m["device_count"] == 8 and len(m["op_table"]) == m["op_count"]
        assert m["flops"] == 5 * 2 * 256 * 512 * 1024 // 8  # five matmuls per chip
        # the roofline model, scheduled like the run: the simulation adds each op's latencies
        assert 0 < m["model_error_pct"] < 110, name
        assert m["model_time_s"] < m["time_s"]


def test_the_dp_all_reduce_is_the_slice_collective_and_scales_like_the_train_step():
    m = run(MLP["dp"])
    row = next(r for r in m["op_table"] if r["class"] == "collective")
    coll = scenario.run_kind(
        "tpu-collective",
        cfg.load(CollectiveParams, {"chip": "v5e", "topology": "2x4", "op": "allreduce",
                                    "axes": "xy", "bytes": 4 << 20, "dtype": "f32",
                                    "payload": "size"}),
    )  # fmt: skip
    assert row["end_s"] - row["start_s"] == pytest.approx(coll["time_s"], rel=1e-9)
    # tpu-train-step on one layer of the same sizes: per-chip batch 32, D 512, F 1024, its dW
    # (bf16, 1 MiB) all-reduced; the module all-reduces both layers' f32 gradients (4 MiB)
    step = scenario.run_kind(
        "tpu-train-step",
        cfg.load(TrainStepParams, {"chip": "v5e", "topology": "2x4", "axes": "xy", "batch": 32,
                                   "d_model": 512, "d_ff": 1024, "blocks": 1}),
    )  # fmt: skip
    assert step["bound"] == m["bound"] == "communication"
    assert 3.0 < m["comm_s"] / step["comm_s"] < 4.0  # 4x the bytes, the same hop latencies
    # five matmuls against the step's three of the same shapes (within their padding)
    assert m["compute_s"] / step["compute_s"] == pytest.approx(5 / 3, rel=0.1)


def test_dataflow_order_is_never_slower_than_module_order():
    for path in MLP.values():
        assert run(path, order="dataflow")["time_s"] <= run(path)["time_s"]


ASYNC = """HloModule jit_f, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p0: f32[1024,1024], p1: f32[1024,1024]) -> f32[1024,1024] {
  %p0 = f32[1024,1024]{1,0} parameter(0)
  %p1 = f32[1024,1024]{1,0} parameter(1)
  %ars = f32[1024,1024]{1,0} all-reduce-start(%p0), channel_id=1, replica_groups=[1,4]<=[4]
  %d = f32[1024,1024]{1,0} dot(%p1, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %ard = f32[1024,1024]{1,0} all-reduce-done(%ars)
  ROOT %r = f32[1024,1024]{1,0} add(%ard, %d)
}
"""


def test_an_async_pair_overlaps_the_ops_between_start_and_done(tmp_path):
    f = tmp_path / "async.hlo"
    f.write_text(ASYNC)
    sync = tmp_path / "sync.hlo"
    sync.write_text(
        ASYNC.replace("all-reduce-start", "all-reduce")
        .replace("  %ard = f32[1024,1024]{1,0} all-reduce-done(%ars)\n", "")
        .replace("%ard", "%ars")
    )
    ops = hlo.to_graph(hlo.read(f)).programs[0]
    assert [(op.name, op.deps) for op in ops] == [("ars", ()), ("d", ()), ("r", (0, 1))]
    a, s = run(f, topology="2x2"), run(sync, topology="2x2")
    assert a["overlap_pct"] > 0 and s["overlap_pct"] == 0
    # the dot runs under the all-reduce: the step is shorter by the dot's time
    dot = next(r for r in a["op_table"] if r["name"] == "d")
    hidden = dot["end_s"] - dot["start_s"]
    assert s["time_s"] - a["time_s"] == pytest.approx(hidden, rel=0.01)


BAD = [
    ("", "{f}:1: not an HLO module"),
    ("hello\n", "{f}:1: not an HLO module (the text must start with 'HloModule NAME'"),
    (ASYNC.replace("f32[1024,1024]{1,0} dot", "f32[1024,x]{1,0} dot"),
     "{f}:13: bad dimension 'x' in shape 'f32[1024,x]'"),
    (ASYNC.replace("dot(", "fft("),
     "{f}:13: fft d: not an op this reader costs"),
    (ASYNC[: ASYNC.index("  ROOT %r")], "{f}:9: computation main is not closed"),
    (ASYNC.replace("ENTRY ", ""), "no ENTRY computation"),
    (ASYNC.replace("dot(%p1, %p1)", "dot(%p1, %q)"),
     "{f}:13: dot d: operand %q is not defined in main"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_files_exit_2_naming_file_and_line(tmp_path, capsys, text, message):
    f = tmp_path / "bad.hlo"
    f.write_text(text)
    code = main(["run", "tpu-hlo", "--set", f"hlo={f}", "--set", "topology=2x2", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("wafersim: error: ") and err.count("\n") == 1
    assert message.format(f=f) in err


def test_a_module_for_other_devices_than_the_slice_is_refused(capsys):
    code = main(["run", "tpu-hlo", "--set", "topology=4x4", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "config key 'topology' = '4x4': the HLO module" in err
    assert (
        "runs on 8 devices (num_partitions=8, replica_count=1) but this slice has 16 chips; " in err
    )
    assert "allowed: a slice of 8 chips (e.g. 2x4)" in err


def test_cli_run_prints_the_op_table_and_is_deterministic(capsys):
    assert main(["run", "tpu-hlo", "--set", f"hlo={MLP['tp']}", "--json", "--quiet"]) == 0
    host = ("wall_s", "events_per_s")  # the host's timing, not the simulation's
    first = {k: v for k, v in json.loads(capsys.readouterr().out).items() if k not in host}
    assert main(["run", "tpu-hlo", "--set", f"hlo={MLP['tp']}", "--json", "--quiet"]) == 0
    again = {k: v for k, v in json.loads(capsys.readouterr().out).items() if k not in host}
    assert again == first
    assert main(["run", "tpu-hlo", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "op_table                     15 records:" in out
    assert "all-reduce.4               collective  mlp-dp.hlo.txt:180 (make_hlo.py:39)" in out


def test_a_compute_bound_matmul_hides_its_async_all_reduce_and_meets_its_roofline():
    m = run(DATA / "async-dot.hlo.txt")
    assert m["bound"] == "compute" and m["overlap_pct"] == 100.0
    assert m["time_s"] == m["compute_s"]
    assert m["flops_utilisation"] > 0.95
    assert abs(m["model_error_pct"]) < 3  # one large matmul: its pipeline fill is small


HELPER = """
import sys
from pathlib import Path
from workloads.tpu.jaxhlo import host_devices, hlo_text
devices = host_devices(4)
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(devices), ("d",))
def step(w, x):
    g = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    return w - 0.01 * g
w = jax.ShapeDtypeStruct((256, 256), jnp.float32)
x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
rep, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("d", None))
Path(sys.argv[1]).write_text(hlo_text(step, w, x, in_shardings=(rep, rows), out_shardings=rep))
"""


def test_the_jax_helper_makes_a_module_tpu_hlo_runs(tmp_path):
    pytest.importorskip("jax")  # the optional extra: skipped without it
    import subprocess
    import sys

    out = tmp_path / "step.hlo.txt"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", HELPER, str(out)], check=True, cwd=root)
    m = run(out, topology="2x2")
    assert m["device_count"] == 4 and m["op_count"] > 0
    assert any(r["class"] == "collective" for r in m["op_table"])  # the gradient's all-reduce


def test_validate_tpu_hlo_passes(capsys):
    assert main(["validate", "tpu-hlo", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "async-dot v5e 2x4" in out and "mlp-tp v5e 2x4" in out


FORMS = """HloModule forms, num_partitions=8

%agc (p: f32[8,16]) -> f32[64,16] {
  %p = f32[8,16]{1,0} parameter(0)
  ROOT %ag = f32[64,16]{1,0} all-gather(%p), channel_id=2, replica_groups=[1,8]<=[8], dimensions={0}
}

ENTRY %main (x: f32[8,16], img: f32[1,32,32,16], k: f32[3,3,16,64]) -> f32[1,32,32,64] {
  %x = f32[8,16]{1,0} parameter(0)
  %img = f32[1,32,32,16]{3,2,1,0} parameter(1)
  %k = f32[3,3,16,64]{3,2,1,0} parameter(2)
  %as = ((f32[8,16]{1,0}), f32[64,16]{1,0}, u32[]) async-start(%x), calls=%agc
  %c = f32[1,32,32,64]{3,2,1,0} convolution(%img, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %ad = f32[64,16]{1,0} async-done(%as), calls=%agc
  %cp = f32[64,16]{1,0} collective-permute(%ad), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %rs = f32[32,16]{1,0} reduce-scatter(%cp), channel_id=4, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}
  ROOT %t = (f32[1,32,32,64]{3,2,1,0}, /*index=1*/f32[32,16]{1,0}) tuple(%c, %rs)
}
"""  # noqa: E501


def test_async_wrappers_convolutions_permutes_and_explicit_groups(tmp_path):
    f = tmp_path / "forms.hlo"
    f.write_text(FORMS)
    ops = {op.name: op for op in hlo.to_graph(hlo.read(f)).programs[0]}
    assert set(ops) == {"as", "c", "cp", "rs"}
    ag = ops["as"]
    assert (ag.kind, ag.bytes, ag.groups, ag.channel) == ("allgather", 8 * 8 * 16 * 4,
                                                          (tuple(range(8)),), 2)  # fmt: skip
    # implicit GEMM: 32x32 output positions, 16 features x a 3x3 window, 64 output features
    assert ops["c"].matmul == (1024, 144, 64)
    assert ops["c"].deps == ()  # runs while the async all-gather does
    assert ops["cp"].deps == (0, 1) and ops["cp"].pairs == ((0, 1), (1, 2), (2, 3), (3, 0))
    assert ops["rs"].groups == ((0, 4), (1, 5), (2, 6), (3, 7))  # axis x of a 2x4 slice
    m = run(f)
    assert [r["name"] for r in m["op_table"]] == ["as", "c", "cp", "rs"]
    assert m["overlap_pct"] > 0


def test_a_module_printed_without_percent_sigils_reads_the_same(tmp_path):
    f = tmp_path / "bare.hlo"
    f.write_text(MLP["tp"].read_text().replace("%", ""))
    bare, usual = run(f), run(MLP["tp"])
    assert bare["time_s"] == usual["time_s"] and bare["op_count"] == usual["op_count"]


def test_a_2d_mesh_module_runs_its_groups_on_the_slices_axes():
    """mlp-2d (make_hlo_2d.py): data parallel over mesh rows, tensor parallel over columns, 16
    devices; JAX prints its groups in the explicit syntax. On a 4x4 slice the TP all-reduce runs
    along y and the gradients' along x, each as tpu-collective runs it."""
    m = run(DATA / "mlp-2d.hlo.txt", topology="4x4")
    assert m["device_count"] == 16 and m["bound"] == "communication"
    rows = {r["name"]: r for r in m["op_table"] if r["class"] == "collective"}
    for name, axes, nbytes in (("all-reduce.3", "y", 128 << 10), ("all-reduce.6", "x", 1 << 20)):
        alone = scenario.run_kind(
            "tpu-collective",
            cfg.load(CollectiveParams, {"chip": "v5e", "topology": "4x4", "op": "allreduce",
                                        "axes": axes, "bytes": nbytes, "dtype": "f32",
                                        "payload": "size"}),
        )  # fmt: skip
        r = rows[name]
        assert r["end_s"] - r["start_s"] == pytest.approx(alone["time_s"], rel=1e-9), name


def test_a_scan_unrolls_its_loop_and_slices_in_place(tmp_path):
    """mlp-scan (make_hlo_scan.py): jax.lax.scan over four stacked layers is a while loop with
    a known trip count; each iteration's ops run, named by loop and iteration, and the stacked
    weights are sliced and the stacked gradients updated in place, not copied whole."""
    path = DATA / "mlp-scan.hlo.txt"
    ops = {op.name: op for op in hlo.to_graph(hlo.read(path)).programs[0]}
    layer = 512 * 512 * 4  # one f32 layer of the [4, 512, 512] stack
    ars = [n for n, op in ops.items() if op.kind == "allreduce"]
    assert ars == [f"while.27/{i}/all-reduce.4" for i in range(4)]  # a gradient per layer
    assert all(ops[n].bytes == layer for n in ars)
    # the slice of one layer read and written (and the s32 index), not the 4 MiB stack
    assert ops["while.22/2/dynamic-slice_bitcast_fusion"].bytes == 2 * layer + 4
    assert ops["while.27/0/bitcast_dynamic-update-slice_fusion.2"].bytes == 2 * layer + 4
    module, dataflow = run(path), run(path, order="dataflow")
    assert module["op_count"] == 76 and module["overlap_pct"] == 0
    # out of order, each layer's gradient all-reduce runs under the next layers' backward
    assert dataflow["overlap_pct"] > 20 and dataflow["time_s"] < 0.9 * module["time_s"]
    unknown = tmp_path / "loop.hlo"
    unknown.write_text(path.read_text().replace('"known_trip_count":{"n":"4"}', '"x":{}'))
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "while(" in s)
    with pytest.raises(hlo.HloError, match=rf":{line}: while while.22: a loop without a known"):
        hlo.to_graph(hlo.read(unknown))
