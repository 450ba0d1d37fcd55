"""Bad input and honest parameters: one test per class of defect, over every kind and option.

- Non-finite numbers (NaN, ±inf) are refused for every float parameter, from ``--set`` and from
  a scenario file, naming the key.
- The range ``params`` shows is the range enforced: out of it is refused; inside it, a value is
  accepted or refused for a reason that names another key (a cross-field limit).
- Every numeric option of the CLI refuses negative numbers.
- A key given twice with ``--set`` is refused.
- ``params`` shows the values a run uses, and who set each.
- Every parameter of a kind that has a model changes the model's prediction, or is listed here
  with the reason it does not.
- Error messages name keys by their full path (what ``--set`` takes).
- A scenario path that is a directory, not UTF-8, or names no kind is a clear error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from app import cli
from runner import registry, scenario
from simcore import config as cfg
from simcore.errors import ConfigError
from simcore.sim import RunResult

registry.load_all()
KINDS = sorted(registry.KINDS)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def leaves(kind: str) -> list[tuple[str, dataclasses.Field, type]]:
    """(full key, field, type) of every leaf parameter of ``kind``."""
    out = []

    def walk(cls, prefix):
        for f, tp in cfg.config_fields(cls):
            if isinstance(tp, type) and dataclasses.is_dataclass(tp):
                walk(tp, prefix + f.name + ".")
            else:
                out.append((prefix + f.name, f, tp))

    walk(registry.KINDS[kind].params, "")
    return out


def nest(key: str, value) -> dict:
    data: dict = {}
    cfg.apply_override(data, f"{key}=0")
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    return data


def full_keys(kind: str) -> set[str]:
    return {k for k, _, _ in leaves(kind)}


# -- non-finite numbers --------------------------------------------------------------------------
FLOATS = [(kind, key) for kind in KINDS for key, _, tp in leaves(kind) if tp is float]


def test_there_are_float_parameters():
    assert ("summa", "loop_overhead_cycles") in FLOATS and ("ws-matmul", "density") in FLOATS


@pytest.mark.parametrize(("kind", "key"), FLOATS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_floats_are_refused(capsys, tmp_path, kind, key, value):
    path = tmp_path / "s.toml"
    section, _, leaf = key.rpartition(".")
    header = f"[{section}]\n" if section else ""
    path.write_text(f'kind = "{kind}"\n{header}{leaf} = {value}\n')
    for argv in (["model", kind, "--set", f"{key}={value}"], ["run", str(path), "--quiet"]):
        if argv[0] == "model" and registry.KINDS[kind].model is None:
            continue
        if argv[0] == "model":
            argv[1] = str(_scenario_of(kind, tmp_path))
        code, _, err = run(capsys, *argv)
        assert code == 2, err
        assert err.startswith(f"wafersim: error: config key '{key}' = {float(value)!r}: not a "
                              "finite number"), err  # fmt: skip


def _scenario_of(kind: str, tmp_path) -> str:
    path = tmp_path / f"{kind}.toml"
    extra = ""
    if kind == "tpu-chakra":  # no default trace: a one-rank set (a file not named X.RANK.et)
        one = tmp_path / "one.et"
        one.write_bytes((Path(__file__).parent / "data/chakra/mlp-dp.0.et").read_bytes())
        extra = f'et = "{one}"\ntopology = "1x1"\n'
    path.write_text(f'kind = "{kind}"\n{extra}')
    return str(path)


# -- shown ranges are enforced ranges ------------------------------------------------------------
def _range_cases():
    for kind in KINDS:
        for key, f, tp in leaves(kind):
            meta = dict(f.metadata)
            if tp not in (int, float) or (meta.get("min") is None and meta.get("max") is None):
                continue
            yield kind, key, tp, meta


RANGES = list(_range_cases())


@pytest.mark.parametrize(
    ("kind", "key", "tp", "meta"), RANGES, ids=[f"{k}:{n}" for k, n, *_ in RANGES]
)
def test_shown_range_is_the_enforced_range(kind, key, tp, meta):
    cls = registry.KINDS[kind].params
    lo, hi, open_lo = meta.get("min"), meta.get("max"), meta.get("min_open")
    step = 1 if tp is int else 1e-9
    outside, inside = [], []
    if lo is not None:
        outside.append(lo if open_lo else lo - step)
        inside.append(lo + step if open_lo else lo)
    if hi is not None:
        outside.append(hi + step)
        inside.append(hi)
    if hi is None:
        inside += [v for v in (2, 10, 1000) if lo is None or v > lo]
    if meta.get("multiple_of"):
        m = meta["multiple_of"]
        outside.append(lo + 1 if lo is not None else 1)
        inside = [v - v % m for v in inside]
    for value in outside:
        with pytest.raises(ConfigError) as err:
            cfg.load(cls, nest(key, tp(value)))
        assert err.value.key == key, err.value
        assert err.value.problem in ("out of range", f"not a multiple of {meta.get('multiple_of')}")
        assert err.value.allowed == cfg._fmt_range(meta)
    others = full_keys(kind) - {key}
    for value in inside:
        try:
            cfg.load(cls, nest(key, tp(value)))
        except ConfigError as exc:
            # Refused inside the shown range: only for a limit set by other keys, named.
            named = set(re.findall(r"[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*", str(exc)))
            assert exc.key != key or named & others, f"{key} = {value}: {exc}"


# -- numeric options -----------------------------------------------------------------------------
def _options(parser, words=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*words, name))
        elif action.option_strings and action.type is not None:
            yield words, action


def test_numeric_options_refuse_negatives(capsys):
    numeric = list(_options(cli._parser()))
    assert any(a.dest == "livelock_cycles" for _, a in numeric)
    for words, action in numeric:
        assert action.type not in (int, float), f"{words} {action.dest}: use a checked type"
        argv = [*words, *(["wse-fmac"] if words == ("run",) else [])]
        with pytest.raises(SystemExit) as exc:
            cli.main([*argv, action.option_strings[-1], "-1"])
        assert exc.value.code == 2
        assert "is negative" in capsys.readouterr().err


# -- --set -------------------------------------------------------------------------------------
def test_a_key_set_twice_is_refused(capsys):
    code, _, err = run(capsys, "run", "wse-fmac", "--set", "elements=8", "--set", "elements=9")
    assert code == 2
    assert err == (
        "wafersim: error: config key 'elements': set twice (--set elements=8 and --set "
        "elements=9); give each key once\n"
    )


# -- params tells the truth ----------------------------------------------------------------------
@pytest.mark.parametrize("name", scenario.builtin_names())
def test_params_shows_the_values_a_run_uses(capsys, name):
    code, out, _ = run(capsys, "params", name, "--set", "seed=5", "--json")
    assert code == 0
    rows = {r["key"]: r for r in json.loads(out)}
    sc = scenario.find(name)
    used = cfg.flatten(cfg.to_dict(scenario.resolve_params(sc, ["seed=5"])))
    assert {k: r["value"] for k, r in rows.items()} == json.loads(json.dumps(used))
    in_file = cfg.flatten(sc.data)
    for key, r in rows.items():
        expected = "--set" if key == "seed" else "scenario" if key in in_file else "default"
        assert r["source"] == expected, key


def test_params_human_marks_scenario_values(capsys):
    code, out, _ = run(capsys, "params", "link-chain-backpressure")
    assert code == 0
    assert re.search(r"\n  seed +7 +scenario ", out)
    assert re.search(r"\n  items +5000 +scenario ", out)
    assert re.search(r"\n  pipe +False +default ", out)
    code, out, _ = run(capsys, "params", "ws-matmul")
    assert re.search(r"\n  rows +32 +scenario ", out)
    assert re.search(r"\n  density +0.25 +scenario +\(0.0 \.\. 1.0\] ", out)


# -- models use their parameters -----------------------------------------------------------------
#: Top-level parameters a kind's model does not read, and why.
MODEL_IGNORES = {
    ("summa", "overlap"): "the model reports both schedules (cycles and overlap_cycles)",
    ("wse-bcast", "root"): "the study's fit does not depend on where the broadcast starts",
    ("wse-bcast", "pes"): "the study's fit T_bcast(I) = 1.6 I + 250 has no row-length term",
    ("link-chain", "items_per_cycle"): "the sink takes at most one item a cycle, so a link "
    "wider than one item never limits the chain",
    **{(k, "payload"): "real arrays or byte counts only: the same timing by design (tested equal)"
       for k in ("tpu-collective", "tpu-matmul", "tpu-p2p", "tpu-train-step")},
    ("tpu-collective", "symmetry"): "one chip per class of translations or every chip: the "
    "same times and counts by design (tested equal, tests/test_tpu_symmetry.py)",
    ("tpu-collective", "dtype"): "bytes sets the array's size; dtype only says how many "
    "elements that is (links move bytes; no reduction time is modelled; same simulated time)",
    ("summa", "microthread_priority"): "the study's model has no priority term; in the "
    "simulation it moves the time by at most 0.1% (33,055 or 33,057 cycles without overlap, "
    "32,788 or 32,826 with)",
    ("gpt-ws", "heads"): "attention's FLOPs (4·S²·H a sequence) do not depend on how H is split "
    "into heads; heads shape only the functional data",
    ("gpt-ws", "fidelity"): "a simulator setting (how each chunk's compute is simulated), not "
    "hardware: the model predicts the same CS-2 at either fidelity",
    ("gpt-ws", "functional"): "real data or sizes only: the same timing by design (tested equal)",
    ("jitq", "fidelity"): "a simulator setting (one pseudo-channel scaled, or every one), not "
    "hardware: the model is per pseudo-channel, which both simulate alike",
    ("hbm-read", "write_fraction"): "the model prices activations and bursts, which a write "
    "costs as a read does; the read/write turnarounds that write drain groups are left out "
    "(its validation points are reads only)",
    ("jitq", "zero_fraction"): "values only: the command stream, and so the time, is the same "
    "whatever the data",
    ("tpu-hlo", "slices"): "the module's devices must be the slice's chips: a module for one "
    "slice is refused on several (no other value is valid)",
    ("tpu-p2p", "slices"): "src and dst name the two chips (and their slices): more slices do "
    "not change the path between them",
    ("tpu-chakra", "slices"): "the trace's ranks must be the slice's chips: a set for one slice "
    "is refused on several (no other value is valid)",
    ("tpu-chakra", "groups"): "a groups file is checked against the traces: a valid one names "
    "exactly the ranks that hold each group's collectives, which is what the traces imply",
    ("tpu-chakra", "other_collectives"): "skip runs a trace that refuse refuses; a trace without "
    "such collectives runs the same under both",
    ("tpu-chakra", "ops_listed"): "how many ops op_table lists: reporting only",
}  # fmt: skip
CHAKRA = Path(__file__).parent / "data" / "chakra"
HLO = Path(__file__).parent / "data" / "hlo"
#: Base points where each parameter's effect shows (a parameter passes if any base shows it).
_TINY_GPT = {"model": "custom", "layers": 2, "hidden": 16, "sequence": 8, "vocab": 64, "batch": 1}
BASES = {
    "link-chain": [{}, {"capacity": 1}],
    "gpt-ws": [{}, _TINY_GPT],
    "ws-matmul": [{}, {"ring_priority": "low"}],
    "jitq": [{}, {"rows": 2048, "cols": 2048}],
    "hbm-read": [{}, {"pattern": "random"}],
    "spmv": [{}, {"matrix": "random"}, {"matrix": "banded"}, {"matrix": "laplacian"},
             {"matrix": "laplacian", "graph": "erdos_renyi"},
             {"matrix": "random", "layout": "dcsr"}, {"matrix": "powerlaw", "n": 1024}],
    "tpu-collective": [{}, {"op": "allreduce"},
                       {"chip": "v4p", "topology": "4x4x4", "payload": "size"},
                       {"slices": 2, "axes": "xs", "payload": "size"},
                       {"axes": "xy", "op": "allreduce", "payload": "size"}],
    "tpu-matmul": [{}, {"slices": 2, "axes": "xs"}, {"tile_k": 96, "tile_n": 96}],
    "tpu-p2p": [{}, {"slices": 2, "src": "0,0,0", "dst": "1,3,3"},
                {"chip": "v4p", "topology": "4x4x4", "src": "0,0,0", "dst": "0,0,3"}],
    "tpu-train-step": [{}, {"slices": 2, "axes": "xs"}, {"tile_k": 96, "tile_n": 96}],
    "tpu-chakra": [{"et": str(CHAKRA / "mlp-dp.0.et"), "topology": "2x4"},
                   {"et": str(CHAKRA / "ctrl.0.et"), "topology": "2x4"}],
    "tpu-hlo": [{}, {"hlo": str(HLO / "mlp-fsdp.hlo.txt")},
                {"hlo": str(HLO / "async-dot.hlo.txt"), "tile_k": 160, "tile_n": 160}],
}  # fmt: skip
#: Other values to try for free-form text parameters (the first one valid at a base is used).
OTHER_VALUES = {
    **{(k, "chip"): ["v6e", "v4p"] for k in ("tpu-collective", "tpu-matmul", "tpu-p2p",
                                              "tpu-train-step")},
    **{(k, "topology"): ["8x4", "8x8", "4x4x8"] for k in ("tpu-collective", "tpu-matmul",
                                                            "tpu-p2p", "tpu-train-step")},
    **{(k, "axes"): ["xy", "x", "xys"] for k in ("tpu-collective", "tpu-matmul",
                                                   "tpu-train-step")},
    ("tpu-chakra", "chip"): ["v6e"],
    ("tpu-chakra", "topology"): ["8x1"],  # the sets' 8 ranks
    ("tpu-chakra", "et"): [str(CHAKRA / "pipe.0.et")],
    ("tpu-chakra", "groups"): [str(CHAKRA / "pipe.groups.json")],
    ("tpu-hlo", "chip"): ["v6e"],
    ("tpu-hlo", "topology"): ["8x1"],  # the modules' 8 devices
    ("tpu-hlo", "hlo"): [str(HLO / "mlp-tp.hlo.txt")],
    ("tpu-p2p", "src"): ["1,0", "0,0,1"],
    ("tpu-p2p", "dst"): ["2,3", "1,2,3"],
    ("spmv", "matrix"): ["random", "banded"],
    ("wafer-program", "program"): [str(Path(__file__).parent.parent / "examples/wafer/gemv.py")],
}  # fmt: skip


def _model_params():
    for kind in KINDS:
        if registry.KINDS[kind].model is None:
            continue
        for key, f, tp in leaves(kind):
            if "." in key or key == "seed":
                continue
            yield kind, key, f, tp


@pytest.mark.parametrize(("kind", "key", "f", "tp"), list(_model_params()),
                         ids=[f"{k}:{n}" for k, n, *_ in _model_params()])  # fmt: skip
def test_models_use_their_parameters(kind, key, f, tp):
    k = registry.KINDS[kind]
    changed, compared = False, 0
    for point in BASES.get(kind, [{}]):
        base = cfg.load(k.params, dict(point))
        new = _other_value(kind, k.params, key, f, tp, base, point)
        if new is not None:
            compared += 1
            changed |= k.model(base) != k.model(new)
    assert compared or (kind, key) in MODEL_IGNORES, f"no other valid value for {key} at any base"
    if (kind, key) in MODEL_IGNORES:
        assert not changed, f"{kind}.{key} is listed as ignored but changes the model"
    else:
        assert changed, f"model of {kind} ignores {key}"


def _other_value(kind, cls, key, f, tp, base, point):
    meta = dict(f.metadata)
    current = getattr(base, key)
    if tp is bool:
        candidates = [not current]
    elif meta.get("choices"):
        candidates = [c for c in meta["choices"] if c != current]
    elif typing_literal(tp):
        candidates = [c for c in tp.__args__ if c != current]
    elif tp is str:
        candidates = OTHER_VALUES[(kind, key)]
    else:
        candidates = [current * 2, current + 1, current / 2 if tp is float else current - 1,
                      current * 4] + ([current + 0.5] if tp is float else [])  # fmt: skip
    for value in (c for c in candidates if c != current):
        try:
            return cfg.load(cls, {**point, key: value})
        except ConfigError:
            continue
    return None


def typing_literal(tp) -> bool:
    return getattr(tp, "__origin__", None) is not None and str(tp).startswith("typing.Literal")


# -- messages name full keys ---------------------------------------------------------------------
_BAD = ["-1", "0", "3", "1000000000", "1.5", "nan", '"x"', "{a = 1}"]


@pytest.mark.parametrize("kind", KINDS)
def test_messages_name_keys_by_their_full_path(kind):
    keys = full_keys(kind)
    suffixes = {k.split(".", i)[-1]: k for k in keys for i in range(1, k.count(".") + 1)}
    cls = registry.KINDS[kind].params
    seen = 0
    for key in sorted(keys):
        for raw in _BAD:
            try:
                cfg.load(cls, nest(key, cfg.parse_override(f"x={raw}")[1]))
            except ConfigError as exc:
                seen += 1
                assert exc.key in keys or exc.key.split("[")[0] in keys, str(exc)
                for token in re.findall(
                    r"(?<![\w.'])[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+", str(exc)
                ):
                    assert token in keys or token not in suffixes, (
                        f"{exc}: '{token}' should be '{suffixes[token]}'"
                    )
    assert seen


# -- scenario files ------------------------------------------------------------------------------
def test_scenario_path_errors(capsys, tmp_path):
    code, _, err = run(capsys, "run", str(tmp_path))
    assert code == 2 and err == (
        f"wafersim: error: scenario '{tmp_path}' is a directory; give a scenario file (.toml) or "
        "a built-in scenario name (wafersim list)\n"
    )
    latin = tmp_path / "latin.toml"
    latin.write_bytes('kind = "wse-fmac"\ndescription = "caf\xe9"\n'.encode("latin-1"))
    code, _, err = run(capsys, "run", str(latin))
    assert code == 2 and err == (
        f"wafersim: error: scenario file '{latin}' is not UTF-8 text (byte 0xe9 at offset 36); "
        "save it as UTF-8\n"
    )
    weird = tmp_path / "weird.toml"
    weird.write_text("kind = [1, 2]\n")
    code, _, err = run(capsys, "run", str(weird))
    assert code == 2 and "kind = [1, 2] is not a known workload kind" in err


def test_non_finite_is_nothing_special_for_ints(capsys):
    code, _, err = run(capsys, "run", "wse-fmac", "--set", "elements=inf")
    assert code == 2 and "expected an integer" in err


# -- help, version, seed, effective parameters ---------------------------------------------------
def _commands(parser, words=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*words, name), sub, helps.get(name)
                yield from _commands(sub, (*words, name))


def test_every_command_and_argument_is_described():
    for words, sub, help_text in _commands(cli._parser()):
        assert help_text, f"wafersim {' '.join(words)} has no one-line help"
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                assert action.help, f"wafersim {' '.join(words)}: {action.dest} has no help"


def test_version(capsys):
    from simcore.version import __version__

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"wafersim {__version__}\n"


def test_seed_flag(capsys):
    code, out, _ = run(capsys, "run", "link-chain", "--seed", "9", "--json", "--quiet")
    assert code == 0 and json.loads(out)["seed"] == 9
    code, _, err = run(capsys, "run", "link-chain", "--seed", "9", "--set", "seed=1")
    assert code == 2 and "set twice" in err


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_run_json_echoes_every_effective_parameter(name):
    sc = scenario.find(name)
    params = scenario.resolve_params(sc, ["seed=3"])
    result = RunResult("completed", 0, 0, 0.0)
    data = scenario.RunOutput(sc, params, result, {"cycles": 1}, None).as_json()
    assert data["config"] == cfg.to_dict(params) and data["config"]["seed"] == 3


def test_run_json_echoes_the_config(capsys):
    code, out, _ = run(capsys, "run", "wse-fmac", "--json", "--quiet", "--set", "elements=8")
    assert code == 0
    config = json.loads(out)["config"]
    assert config["elements"] == 8 and config["wafer"]["pe"]["sram_bytes"] == 49152


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "wse-bcast", "--quiet", "--set", "wafer.fabric.colours=1"],
         "wafer/pe[0,0]: the program uses colour 1 but the fabric has colours 0..0 "
         "(wafer.fabric.colours = 1); raise wafer.fabric.colours (at least 2; the WSE-2 has 24)"),
        (["run", "ws-matmul", "--quiet", "--set", "cols=100000"],
         "config key 'cols' = 100000: a PE needs 1,600,640 B for the input and output "
         "activations and two accumulators (cols / px = 25,000 per PE) but has 47,104 B beside "
         "the code (wafer.pe.sram_bytes - wafer.pe.code_bytes); lower cols (or the other "
         "sizes: rows, cols, tokens), or raise px"),
        (["run", "wse-bcast", "--quiet", "--set", "root=16"],
         "config key 'root' = 16: must be a PE of the row of pes = 16; allowed: -1 (the "
         "middle) .. 15; lower root or raise pes"),
    ],
)  # fmt: skip
def test_messages_name_the_key_to_change(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err == f"wafersim: error: {message}\n"


def test_a_directory_as_trace_output(capsys, tmp_path):
    code, _, err = run(capsys, "run", "wse-fmac", "--quiet", "--trace", str(tmp_path))
    assert code == 2
    assert err == f"wafersim: error: --trace '{tmp_path}' is a directory; give a file path\n"


# -- file-valued parameters (issue 27) -------------------------------------------------------------
MTX = "%%MatrixMarket matrix coordinate real general\n4 4 4\n1 1 1.0\n2 2 2.0\n3 3 3.0\n4 4 4.0\n"


def _file_keys():
    """(kind, key, field) of every file-valued parameter of every kind."""
    for kind in KINDS:
        for key, f in cfg.file_fields(registry.KINDS[kind].params):
            yield kind, key, f


def test_file_valued_parameters_have_their_own_type():
    found = {(kind, key) for kind, key, _ in _file_keys()}
    assert ("spmv", "matrix") in found
    # a string key whose description speaks of a file or a path is a file_param
    for kind in KINDS:
        for key, f, tp in leaves(kind):
            doc = f.metadata.get("doc", "").lower()
            if tp is str and (".mtx" in doc or "path" in doc or " file" in doc):
                assert (kind, key) in found, f"{kind}: {key} reads a file: make it a file_param"


def _a_good_file(kind: str, key: str, tmp_path) -> str:
    """A file the kind reads without complaint: a matrix, a kernel, a request trace."""
    root = Path(__file__).resolve().parent.parent
    if kind == "wafer-program":
        path = tmp_path / "input.py"
        path.write_text((root / "workloads/wafer/kernels/axpy.py").read_text())
    elif kind == "tpu-hlo":
        path = tmp_path / "input.hlo.txt"
        path.write_text((root / "tests/data/hlo/mlp-dp.hlo.txt").read_text())
    elif kind == "hbm-trace":
        path = tmp_path / "input.trace"
        path.write_text("0x0 READ 0\n0x40 WRITE 4\n")
    elif kind == "tpu-chakra":  # one rank (the scenario's slice is one chip), no process groups
        if key == "et":
            path = tmp_path / "input.et"
            path.write_bytes((root / "tests/data/chakra/mlp-dp.0.et").read_bytes())
        else:
            path = tmp_path / "input.json"
            path.write_text("{}\n")
    else:
        path = tmp_path / "input.mtx"
        path.write_text(MTX)
    return str(path)


@pytest.mark.parametrize(("kind", "key", "f"), list(_file_keys()))
def test_a_file_valued_parameter_is_never_an_output(capsys, tmp_path, kind, key, f):
    scen = _scenario_of(kind, tmp_path)
    good = _a_good_file(kind, key, tmp_path)
    before = Path(good).read_bytes()
    suffix = Path(good).suffix  # a kernel file must end in .py, through a link too
    hard, soft = tmp_path / f"hard{suffix}", tmp_path / f"soft{suffix}"
    os.link(good, hard)
    os.symlink(good, soft)
    for given, out in [(good, good), (good, hard), (str(soft), good)]:
        for option in ("--trace", "--perfetto"):
            code, _, err = run(capsys, "run", scen, "--quiet", "--set", f"{key}={given}",
                               option, str(out))  # fmt: skip
            assert code == 2 and err == (
                f"wafersim: error: {option} '{out}' is the input of {key} '{given}': writing it "
                f"would destroy the input; give {option} another path\n"
            )
    assert Path(good).read_bytes() == before


@pytest.mark.parametrize(("kind", "key", "f"), list(_file_keys()))
def test_a_file_valued_parameter_is_checked(capsys, tmp_path, kind, key, f):
    scen = _scenario_of(kind, tmp_path)
    allowed = f.metadata["file_allowed"] or "a path to a readable file"
    for value, problem in [
        (str(tmp_path / "none"), "no such file"),
        (str(tmp_path), "is a directory, not a file"),
        ("/dev/null", "is not a regular file (a device, FIFO or socket)"),
    ]:
        code, _, err = run(capsys, "run", scen, "--quiet", "--set", f"{key}={value}")
        assert code == 2 and err == (
            f"wafersim: error: config key '{key}' = '{value}': {problem}; allowed: {allowed}; "
            f"set it with --set {key}=<path>\n"
        )


def test_a_relative_path_in_a_scenario_file_is_beside_it(capsys, tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.mtx").write_text(MTX)
    (tmp_path / "sub" / "s.toml").write_text('kind = "spmv"\nmatrix = "m.mtx"\npx = 2\npy = 2\n')
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "run", "sub/s.toml", "--quiet", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["correct"] and data["config"]["matrix"] == os.path.join("sub", "m.mtx")
    # the path on the command line is the user's, from the current folder
    code, _, err = run(capsys, "run", "sub/s.toml", "--quiet", "--set", "matrix=m.mtx")
    assert code == 2 and "config key 'matrix' = 'm.mtx': no such file" in err


@pytest.mark.parametrize(
    ("values", "shown"),
    [("1 1 nan\n2 2 1.0", "nan"), ("1 1 1.0\n2 2 -inf", "-inf"), ("1 1 1e39\n2 2 1e39", "1e+39")],
)
def test_an_mtx_with_values_not_finite_in_fp32_is_refused(capsys, tmp_path, values, shown):
    path = tmp_path / "bad.mtx"
    path.write_text(f"%%MatrixMarket matrix coordinate real general\n2 2 2\n{values}\n")
    code, _, err = run(capsys, "run", "spmv", "--quiet", "--set", f"matrix={path}",
                       "--set", "px=1", "--set", "py=1", "--set", "iterations=1")  # fmt: skip
    count = 2 if shown == "1e+39" else 1
    assert code == 2 and err == (
        f"wafersim: error: config key 'matrix' = '{path}': {count} value(s) not finite in FP32 "
        f"(the first: {shown}); allowed: finite values of magnitude at most 3.403e+38; fix the "
        "file's values\n"
    )


# -- literals and the messages of issue 27 ---------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "jitq", "--set", "rows=0x10"],
         "config key 'rows' = '0x10': a hexadecimal, octal or binary literal; allowed: a decimal "
         "integer, 16 .. 1048576; write it in decimal: --set rows=16"),
        (["run", "tpu-collective", "--set", "bytes=0b1000"],
         "config key 'bytes' = '0b1000': a hexadecimal, octal or binary literal; allowed: a "
         "decimal integer, 1 .. inf; write it in decimal: --set bytes=8"),
        (["run", "spmv", "--set", "density=0o7"],
         "config key 'density' = '0o7': a hexadecimal, octal or binary literal; allowed: a "
         "decimal number, (0.0 .. 1.0]; write it in decimal: --set density=7"),
        (["run", "tpu-collective", "--set", "topology=0b1"],
         "config key 'topology' = '0b1': not a slice shape; allowed: X x Y or X x Y x Z, e.g. "
         "4x4 or 4x4x8; set it with --set topology=4x4"),
        (["run", "tpu-collective", "--set", "bytes=3"],
         "config key 'bytes' = 3: does not divide into 4 shards of whole bf16 elements (8 bytes "
         "each step; set by op, axes and dtype); allowed: a multiple of 8, e.g. 8"),
        (["run", "jitq-study", "--set", "calibration_rows=1000"],
         "config key 'calibration_rows' = 1000: not a multiple of 16; allowed: 256 .. inf, a "
         "multiple of 16; change calibration_rows"),
        (["run", "jitq-study", "--set", "calibration_rows=100000000000"],
         "config key 'calibration_rows' = 100000000000: a 100000000000 x 1024 BF16 tensor needs "
         "1,562,500,000 rows per bank but a bank has 32,765 data rows (one odd-bank row per "
         "group of 256 elements: at most 2,147,287,040 elements in the stacks); change "
         "calibration_rows"),
        (["run", "tpu-train-step", "--set", "batch=100000000"],
         "config key 'batch' = 100000000: the layer needs 4,505,633,554,432 bytes per chip but a "
         "v5e chip has 16,000,000,000 bytes of HBM; allowed: 1 .. 354,368; lower batch"),
        (["run", "tpu-collective", "--set", "topology=1x1"],
         "config key 'axes' = 'x': spans 1 chip of the 1x1 slice (x: 1): a collective over one "
         "chip moves no bytes over the ICI, so it has no time or bandwidth to measure; allowed: "
         "axes spanning 2 or more chips; use a larger topology (--set topology=2x2 or larger) or "
         "other axes"),
        (["run", "gpt-ws", "--set", "cs2.sram_bytes=1"],
         "config key 'cs2.sram_bytes' = 1: the stored activations of 1 sequence(s) need "
         "157,286,400 B but a wafer holds 1 B; allowed: at least 157,286,400; raise "
         "cs2.sram_bytes, or lower layers, sequence or hidden"),
    ],
)  # fmt: skip
def test_issue_27_messages(capsys, argv, message):
    code, _, err = run(capsys, *argv, "--quiet")
    assert code == 2 and err == f"wafersim: error: {message}\n"


TOPOLOGY_ALLOWED = (
    "X x Y (v3, v5e, v6e) or X x Y x Z (v4p, v5p), each axis 1 .. the pod's on it, e.g. 4x4 or "
    "4x4x8"
)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['topology = 0x4   # a comment'],
         "config key 'topology' = 0x4 in {f} line 3: a string is expected (TOML reads 0x4 as the "
         f"integer 4); allowed: {TOPOLOGY_ALLOWED}; quote it, e.g. topology = \"4x4\""),
        (['topology = 0o17'],
         "config key 'topology' = 0o17 in {f} line 3: a string is expected (TOML reads 0o17 as "
         f"the integer 15); allowed: {TOPOLOGY_ALLOWED}; quote it, e.g. topology = \"4x4\""),
        (['src = 0b11'],
         "config key 'src' = 0b11 in {f} line 3: a string is expected (TOML reads 0b11 as the "
         "integer 3); allowed: a chip of the slice: one index per axis, 0 .. its size - 1, e.g. "
         "0,0 or 0,0,0; quote it, e.g. src = \"0,0\""),
        (['chip = true'],
         "config key 'chip' = true in {f} line 3: a string is expected (TOML reads true as a "
         "boolean); allowed: v3, v4p, v5p, v5e, v6e; quote it, e.g. chip = \"v5e\""),
        (['payload = 0x1'],
         "config key 'payload' = 0x1 in {f} line 3: a string is expected (TOML reads 0x1 as the "
         "integer 1); allowed: 'real', 'size'; quote it, e.g. payload = \"real\""),
    ],
)  # fmt: skip
def test_a_radix_literal_in_a_scenario_file_is_quoted_as_written(capsys, tmp_path, lines, message):
    """TOML reads ``topology = 0x4`` as the integer 4: a string key refuses it quoting the text
    and the line of the file (issue 27), for ``run``, ``params`` and ``model``."""
    f = tmp_path / "s.toml"
    f.write_text('kind = "tpu-p2p"\n\n' + "\n".join(lines) + "\n")
    for command in ("run", "params", "model"):
        code, _, err = run(capsys, command, str(f))
        assert code == 2 and err == f"wafersim: error: {message.format(f=f)}\n", command
    # the same key set on the command line is the command line's value: no file line named
    code, _, err = run(capsys, "params", str(f), "--set", lines[0].replace(" ", ""))
    assert code == 2 and " line " not in err


def test_a_radix_literal_in_a_sweep_file_is_quoted_as_written(capsys, tmp_path):
    """A sweep's points are invalid with the literal as the sweep file's [set] or the scenario
    file writes it."""
    import pyarrow.parquet as pq

    scen = tmp_path / "s.toml"
    scen.write_text('kind = "tpu-p2p"\ntopology = 0x4\n')
    sweep = tmp_path / "w.toml"
    sweep.write_text('scenario = "tpu-p2p"\n[set]\ntopology = 0b100\n[grid]\nbytes = [64]\n')
    for argv, where in (([str(scen), "--grid", "bytes=64"], f"0x4 in {scen} line 2"),
                        ([str(sweep)], f"0b100 in {sweep} line 3")):  # fmt: skip
        out = tmp_path / "o.parquet"
        code, _, _ = run(capsys, "sweep", *argv, "-o", str(out), "--overwrite", "--quiet")
        (row,) = pq.read_table(out).to_pylist()
        assert code == 0 and row["status"] == "invalid"
        assert row["error"].startswith(f"config key 'topology' = {where}: a string is expected")


def test_a_non_decimal_literal_for_a_string_key_keeps_its_text():
    assert cfg.parse_override("topology=0x4") == ("topology", "0x4")
    assert cfg.parse_override("rows=16") == ("rows", 16)
    assert cfg.parse_override("name=0x_") == ("name", "0x_")  # not a literal: TOML's error


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        # each of these ended the process under scipy 1.17's reader (SIGSEGV, SIGFPE)
        (b"%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 2.0\n3 3 3.g/",
         "not a readable Matrix Market file (after line 2: could not convert string '3.g/' to "
         "float64 at row 2, column 3.)"),
        (b"%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 2.0\n3 3 3.\x1cD",
         "not a Matrix Market file: byte 0x1c at offset 74 is not ASCII text"),
        (b"%%MatrixMarket matrix array real general\n 0 100000\n1 1 1.0\n",
         "the header declares a 0 x 100000 matrix"),
        (b"%%MatrixMarket matrix coordinate real general\n99999999999 4 1\n1 1 1.0\n",
         "the header declares a 99,999,999,999 x 4 matrix of 1 stored entries"),
        (b"%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1.0\n",
         "not a readable Matrix Market file (the size line declares 3 entries but the file has "
         "1)"),
        (b"%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n",
         "not a readable Matrix Market file (entry 1: (3, 1) is not inside 2 x 2)"),
    ],
)  # fmt: skip
def test_a_malformed_mtx_is_a_message_not_a_crash(capsys, tmp_path, content, problem):
    path = tmp_path / "m.mtx"
    path.write_bytes(content)
    code, _, err = run(capsys, "run", "spmv", "--quiet", "--set", f"matrix={path}")
    assert code == 2 and err.startswith(
        f"wafersim: error: config key 'matrix' = '{path}': {problem}"
    )


def test_symmetric_and_pattern_mtx_files_are_read(tmp_path):
    from workloads.wafer import sparse

    path = tmp_path / "s.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real symmetric\n% c\n3 3 2\n1 1 2.0\n3 1 5\n")
    assert sparse.read_mtx(str(path)).toarray().tolist() == [[2, 0, 5], [0, 0, 0], [5, 0, 0]]
    path.write_text("%%MatrixMarket matrix coordinate pattern skew-symmetric\n2 2 1\n2 1\n")
    assert sparse.read_mtx(str(path)).toarray().tolist() == [[0, -1], [1, 0]]
    path.write_text("%%MatrixMarket matrix array integer general\n2 2\n1\n2\n3\n4\n")
    assert sparse.read_mtx(str(path)).toarray().tolist() == [[1, 3], [2, 4]]
