"""The fuzz tier: random bad input through the whole command line, in-process.

Whatever a user types or points the CLI at, the answer is exit status 0 (it worked), 2 (a user
error, one clear line) or 3 (a validation out of tolerance), never a traceback (exit 1, "a bug
in wafersim"). Hypothesis draws:

- keys (real ones of the scenario's kind, their sections, near misses, junk) and values (numbers,
  NaN, infinities, huge and negative numbers, empty, strings, TOML tables and arrays) for
  ``run``, ``model`` and ``params`` of every built-in scenario;
- scenario files of random bytes, random TOML and mutated built-in scenarios;
- trace files of random bytes, and real traces cut off or corrupted at random places, for
  ``trace summary``, ``trace export`` and ``plot``;
- outputs that cannot be written (a directory, a path under a file, a full device, an input);
- files for every file-valued parameter of every built-in scenario (spmv's ``matrix``,
  hbm-trace's ``trace``, wafer-program's ``program``): good, mutated, megabytes of blanks or
  comments after a good start, random bytes, non-finite values and bad headers (``matrix``),
  and special paths (a directory, ``/dev/null``, ``/dev/zero``, a FIFO, a symlink loop);
- sweep options (grids, outputs, ``--traces``, ``--workers``, ``--resume``/``--overwrite``);
- SIGINT and SIGTERM at a drawn moment of a PE-level run (``-m slow``: subprocesses).

A run drawn with valid but huge values is cut short by a budget (components built, kernel
events), which the harness raises as a Ctrl-C: exit 130 is accepted only then. The default tier
runs a bounded slice (a few dozen examples per test); ``-m slow`` runs many more.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from runner import registry, scenario
from simcore import config as cfg
from simcore import sim as simmod

registry.load_all()
SCENARIOS = scenario.builtin_names()
KEYS = {
    name: [row[0] for row in cfg.describe(scenario.find(name).kind.params)] for name in SCENARIOS
}

MAX_COMPONENTS = 400
MAX_EVENTS = 60_000


class _Budget(KeyboardInterrupt):
    """The harness's cap on a drawn run's size (a valid but huge run is not a failure)."""


class _BudgetProgress(simmod.Progress):
    def __init__(self) -> None:
        super().__init__(io.StringIO(), after_s=0.0, every_s=0.0)

    def update(self, sim, wall, events, limit) -> None:
        if events > MAX_EVENTS:
            _state["hit"] = True
            raise _Budget


_state = {"hit": False}


@pytest.fixture(autouse=True)
def _budget(monkeypatch):
    register = simmod.Simulation.add_component
    run = simmod.Simulation.run

    def capped_register(self, comp):
        if len(self.components) >= MAX_COMPONENTS:
            _state["hit"] = True
            raise _Budget
        register(self, comp)

    def capped_run(self, **kw):
        self.progress = _BudgetProgress()
        return run(self, **kw)

    monkeypatch.setattr(simmod.Simulation, "add_component", capped_register)
    monkeypatch.setattr(simmod.Simulation, "run", capped_run)


def cli(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit status, stdout, stderr). Budget hits are reported as 130."""
    _state["hit"] = False
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, err: str, argv: tuple[str, ...]) -> None:
    """Exit 0, 2 or 3 (130 only when the harness's budget cut the run), never a traceback, and
    an error is one line saying what is wrong."""
    where = f"wafersim {' '.join(argv)!r} -> {code}: {err[-2000:]}"
    assert "Traceback" not in err, where
    assert "internal error" not in err, where
    if code == 130:
        assert _state["hit"], where
        return
    assert code in (0, 2, 3), where
    if code == 2:
        lines = err.strip().split("\n")
        if err.startswith("usage:"):  # argparse's own: usage line(s), then the error line
            assert lines[-1].startswith("wafersim"), where
        elif "stalled at cycle" in err or "livelocked at cycle" in err:
            assert lines[0].startswith("wafersim: error: "), where  # the report follows
        else:
            assert len(lines) == 1 and lines[0].startswith("wafersim: error: "), where


# -- strategies ----------------------------------------------------------------------------------
_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["0", "-1", "1", "2", "3", "7", "64", "1000", "750", "4096", "65536",
                     "9223372036854775807", "18446744073709551616", "1e300", "-1e300", "1e-300"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "+inf", "0.5", "-0.0", "1.5", "0.25", "1e6"]),
)  # fmt: skip
_values = st.one_of(
    _numbers,
    st.sampled_from(["", "true", "false", '""', '"x"', "none", "fwd", "wgrad", "reference",
                     "fast", "[1, 2]", "[]", "{}", "{a = 1}", "{pe = {sram_bytes = 0}}",
                     "{clock_hz = nan}", '"nan"', "'inf'", "1970-01-01", "[[1]]"]),
    st.text(max_size=12),
)  # fmt: skip


@st.composite
def overrides(draw, name: str) -> list[str]:
    keys = KEYS[name]
    sections = sorted({k.rsplit(".", 1)[0] for k in keys if "." in k})
    key_st = st.one_of(
        st.sampled_from(keys),
        st.sampled_from(keys),
        st.sampled_from(sections or ["wafer"]),
        st.sampled_from(keys).map(lambda k: k + ".x"),
        st.sampled_from(keys).map(lambda k: k[:-1]),
        st.text(alphabet="abcxyz_.[]=", min_size=1, max_size=10),
    )
    n = draw(st.integers(0, 3))
    return [f"{draw(key_st)}={draw(_values)}" for _ in range(n)]


def _fuzz_overrides(data) -> None:
    name = data.draw(st.sampled_from(SCENARIOS), label="scenario")
    sets = data.draw(overrides(name), label="overrides")
    verb = data.draw(st.sampled_from(["run", "run", "model", "params"]), label="verb")
    argv = [verb, name]
    for s in sets:
        argv += ["--set", s]
    if verb == "run":
        argv += ["--quiet", "--json"] if data.draw(st.booleans()) else ["--quiet"]
    code, _, err = cli(*argv)
    assert_clean(code, err, tuple(argv))


_FAST = settings(
    max_examples=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip
_DEEP = settings(
    max_examples=600, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip


@_FAST
@given(st.data())
def test_fuzz_overrides(data):
    _fuzz_overrides(data)


@pytest.mark.slow
@_DEEP
@given(st.data())
def test_fuzz_overrides_deep(data):
    _fuzz_overrides(data)


# -- scenario files ------------------------------------------------------------------------------
def _scenario_text(data) -> bytes:
    how = data.draw(st.sampled_from(["bytes", "mutate", "lines"]), label="how")
    if how == "bytes":
        return data.draw(st.binary(max_size=200), label="bytes")
    base = scenario.builtin_scenarios()[data.draw(st.sampled_from(SCENARIOS))].read_bytes()
    if how == "mutate":
        pos = data.draw(st.integers(0, len(base)), label="pos")
        junk = data.draw(st.binary(max_size=8), label="junk")
        cut = data.draw(st.integers(0, 8), label="cut")
        return base[:pos] + junk + base[pos + cut :]
    name = data.draw(st.sampled_from(SCENARIOS), label="name")
    extra = [
        f"{k} = {v}"
        for k, v in data.draw(
            st.lists(st.tuples(st.sampled_from(KEYS[name] + ["kind", "description", "x"]),
                               _values), max_size=3),
            label="lines",
        )
    ]  # fmt: skip
    return base + ("\n" + "\n".join(extra)).encode("utf-8", "replace")


def _fuzz_scenario_file(data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fuzz.toml")
        with open(path, "wb") as fh:
            fh.write(_scenario_text(data))
        verb = data.draw(st.sampled_from(["run", "model", "params"]), label="verb")
        argv = (verb, path, "--quiet") if verb == "run" else (verb, path)
        code, _, err = cli(*argv)
        assert_clean(code, err, argv)


@_FAST
@given(st.data())
def test_fuzz_scenario_files(data):
    _fuzz_scenario_file(data)


@pytest.mark.slow
@_DEEP
@given(st.data())
def test_fuzz_scenario_files_deep(data):
    _fuzz_scenario_file(data)


# -- trace inputs and unwritable outputs ---------------------------------------------------------
@functools.cache
def good_trace() -> bytes:
    """A real detail-level wafer trace of a few record batches (small batches, many cut points)."""
    from traces.writer import TraceWriter

    orig = TraceWriter.__init__

    def small(self, *a, **kw):
        kw["batch_rows"] = 200
        orig(self, *a, **kw)

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        path = os.path.join(tmp, "good.arrows")
        mp.setattr(TraceWriter, "__init__", small)
        code = main(["run", "wse-bcast", "--set", "pes=4", "--set", "elements=64", "--quiet",
                     "--json", "--trace", path, "--trace-level", "detail"])  # fmt: skip
        assert code == 0
        return _read(path)


def _trace_bytes(data, good: bytes) -> bytes:
    how = data.draw(st.sampled_from(["cut", "cut", "flip", "bytes", "empty"]), label="trace")
    if how == "cut":
        return good[: data.draw(st.integers(0, len(good)), label="cut at")]
    if how == "flip":
        pos = data.draw(st.integers(0, len(good) - 1), label="flip at")
        return good[:pos] + bytes([good[pos] ^ data.draw(st.integers(1, 255))]) + good[pos + 1 :]
    if how == "bytes":
        return data.draw(st.binary(max_size=300), label="bytes")
    return b""


def _output(data, tmp: str, trace: str) -> str:
    kind = data.draw(
        st.sampled_from(["ok", "dir", "under-file", "input", "full", "missing-dir", "ext"]),
        label="output",
    )
    if kind == "dir":
        return tmp
    if kind == "under-file":
        return os.path.join(trace, "out.png")
    if kind == "input":
        return trace
    if kind == "full":
        return "/dev/full"
    if kind == "missing-dir":
        return os.path.join(tmp, "new", "deeper", "out.png")
    if kind == "ext":
        return os.path.join(tmp, "out.xyz")
    return os.path.join(tmp, "out.png")


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _fuzz_traces(data, good: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.arrows")
        with open(trace, "wb") as fh:
            fh.write(_trace_bytes(data, good))
        before = _read(trace)
        verb = data.draw(
            st.sampled_from(
                ["summary", "export", "mesh", "timeline", "heatmap", "roofline", "banks"]
            ),
            label="verb",
        )
        out = _output(data, tmp, trace)
        if verb == "summary":
            argv: tuple[str, ...] = ("trace", "summary", trace)
        elif verb == "export":
            to = data.draw(st.sampled_from(["perfetto", "json"]))
            argv = ("trace", "export", trace, "--to", to, "-o", out)
        else:
            argv = ("plot", verb, trace, "-o", out)
        code, _, err = cli(*argv)
        assert_clean(code, err, argv)
        assert _read(trace) == before, "an input was changed"
        assert not [f for f in os.listdir(tmp) if ".partial-" in f], "a temporary file was left"
        shutil.rmtree(tmp, ignore_errors=True)


@_FAST
@given(data=st.data())
def test_fuzz_trace_inputs_and_outputs(data):
    _fuzz_traces(data, good_trace())


@pytest.mark.slow
@_DEEP
@given(data=st.data())
def test_fuzz_trace_inputs_and_outputs_deep(data):
    _fuzz_traces(data, good_trace())


# -- file-valued parameters ----------------------------------------------------------------------
FILE_KEYS = [
    (name, key) for name in SCENARIOS for key, _ in cfg.file_fields(scenario.find(name).kind.params)
]
_MTX_HEAD = "%%MatrixMarket matrix coordinate real general\n"
_MTX_GOOD = _MTX_HEAD + "3 3 3\n1 1 1.0\n2 2 2.0\n3 3 3.0\n"
#: A readable file for each file-valued key, which the draws corrupt.
_GOOD = {
    "matrix": _MTX_GOOD,
    "trace": "# a\n0x00000000 READ 0\n0x00000020 WRITE 2\n0x00000040 READ 4\n",
    "program": (
        Path(__file__).parent.parent / "workloads" / "wafer" / "kernels" / "axpy.py"
    ).read_text(),
}


def _good(name: str, key: str) -> bytes:
    """A readable file for ``key`` of scenario ``name``: a sample above, else the file the
    built-in scenario names (a Chakra trace, an HLO module), else nothing."""
    if key in _GOOD:
        return _GOOD[key].encode()
    value: object = scenario.find(name).data
    for part in key.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return Path(value).read_bytes() if isinstance(value, str) and os.path.isfile(value) else b""


#: What each kind needs besides the file to stay small.
_SMALL = {"spmv": ["iterations=1", "px=1", "py=1"], "wafer-program": ["n=16", "pes=2"]}


def _file_content(data, name: str, key: str) -> bytes | str:
    """A file for file-valued parameter ``key``: good, corrupt, huge (megabytes of blanks or
    comments after a good start), non-finite, random bytes, or a special path (str: a
    directory, a device, a FIFO, a missing file, a symlink loop)."""
    kinds = ["good", "mutate", "huge", "bytes", "special"]
    if key == "matrix":
        kinds += ["values", "header"]
    how = data.draw(st.sampled_from(kinds), label="file")
    good = _good(name, key)
    if how == "good":
        return good
    if how == "huge":
        filler = data.draw(st.sampled_from([b" ", b"\n", b"% c\n", b"# c\n", b"0"]))
        return good + filler * (3_000_000 // len(filler))
    if how == "mutate":
        base = good
        pos = data.draw(st.integers(0, len(base)), label="pos")
        junk = data.draw(st.binary(max_size=6), label="junk")
        return base[:pos] + junk + base[pos + data.draw(st.integers(0, 6)) :]
    if how == "values":
        vals = data.draw(st.lists(st.sampled_from(
            ["nan", "inf", "-inf", "1e39", "-1e39", "1e308", "3.4e38", "1e-45", "0", "1", "x"]),
            min_size=3, max_size=3), label="values")  # fmt: skip
        return _MTX_HEAD + "3 3 3\n" + "".join(f"{i} {i} {v}\n" for i, v in enumerate(vals, 1))
    if how == "header":
        dims = data.draw(st.lists(st.sampled_from(
            ["0", "1", "3", "-1", "99999999999", "16777217", "100000", "1e3", ""]),
            min_size=3, max_size=3), label="dims")  # fmt: skip
        layout = data.draw(st.sampled_from(["coordinate", "array"]), label="layout")
        return f"%%MatrixMarket matrix {layout} real general\n{' '.join(dims)}\n1 1 1.0\n"
    if how == "bytes":
        return data.draw(st.binary(max_size=200), label="bytes")
    return data.draw(st.sampled_from(["dir", "/dev/null", "/dev/zero", "fifo", "missing",
                                      "loop", "empty"]), label="special")  # fmt: skip


def _fuzz_file_params(data) -> None:
    name, key = data.draw(st.sampled_from(FILE_KEYS), label="parameter")
    with tempfile.TemporaryDirectory() as tmp:
        content = _file_content(data, name, key)
        suffix = {"matrix": "mtx", "trace": "trace", "program": "py", "et": "0.et"}.get(key, "txt")
        path = os.path.join(tmp, "in." + suffix)
        if isinstance(content, bytes):
            with open(path, "wb") as fh:
                fh.write(content)
        elif content == "dir":
            os.mkdir(path)
        elif content == "fifo":
            os.mkfifo(path)
        elif content == "loop":
            os.symlink(path, path)
        elif content == "empty":
            open(path, "wb").close()
        elif content.startswith("/dev/"):
            path = content
        before = _read(path) if os.path.isfile(path) else None
        argv = ["run", name, "--quiet", "--set", f"{key}={path}"]
        for s in _SMALL.get(name, []):
            argv += ["--set", s]
        out = data.draw(st.sampled_from(["none", "input", "link", "other"]), label="output")
        if out == "input":
            argv += ["--trace", path]
        elif out == "link" and os.path.isfile(path):
            os.link(path, os.path.join(tmp, "hard.arrows"))
            argv += ["--trace", os.path.join(tmp, "hard.arrows")]
        elif out == "other":
            argv += ["--trace", os.path.join(tmp, "t.arrows")]
        code, _, err = cli(*argv)
        assert_clean(code, err, tuple(argv))
        if before is not None:
            assert _read(path) == before, "an input was changed"


@_FAST
@given(data=st.data())
def test_fuzz_file_valued_parameters(data):
    _fuzz_file_params(data)


@pytest.mark.slow
@_DEEP
@given(data=st.data())
def test_fuzz_file_valued_parameters_deep(data):
    _fuzz_file_params(data)


# -- sweep options (checked before a cluster starts) ---------------------------------------------
class _ClusterReached(KeyboardInterrupt):
    """The harness stops a drawn sweep where its cluster would start: every check is done."""


@pytest.fixture
def _no_cluster(monkeypatch):
    from sweeps import engine

    @contextlib.contextmanager
    def stop(*args, **kwargs):
        _state["hit"] = True
        raise _ClusterReached
        yield

    monkeypatch.setattr(engine, "connect", stop)


_axis_values = st.one_of(
    st.lists(_numbers, min_size=1, max_size=3).map(",".join),
    st.sampled_from(["4,,8", "4,8,", ",", "", "0x10,0b1", "[1,2],[3", '"a",b', "1..3"]),
)


def _fuzz_sweep(data) -> None:
    name = data.draw(st.sampled_from(SCENARIOS), label="scenario")
    keys = KEYS[name]
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "t.parquet")
        if data.draw(st.booleans(), label="table there"):
            with open(table, "wb") as fh:
                fh.write(data.draw(st.binary(max_size=50)))
        argv = ["sweep", name, "--quiet"]
        for _ in range(data.draw(st.integers(0, 2), label="axes")):
            argv += ["--grid", f"{data.draw(st.sampled_from(keys))}={data.draw(_axis_values)}"]
        for s in data.draw(overrides(name), label="overrides"):
            argv += ["--set", s]
        out = data.draw(
            st.sampled_from(
                [
                    table,
                    tmp,
                    "/dev/full",
                    os.path.join(tmp, "x.csv"),
                    os.path.join(tmp, "new", "o.parquet"),
                ]
            ),
            label="-o",
        )
        argv += ["-o", out]
        traces = data.draw(
            st.sampled_from([None, table, tmp, "/dev/full", out, os.path.join(tmp, "tr")]),
            label="--traces",
        )
        if traces:
            argv += ["--traces", traces]
        workers = data.draw(st.sampled_from([None, "0", "1", "2", "1000", "-1", "x"]))
        if workers:
            argv += ["--workers", workers]
        for flag in ("--resume", "--overwrite"):
            if data.draw(st.booleans(), label=flag):
                argv.append(flag)
        before = _read(table) if os.path.isfile(table) else None
        code, _, err = cli(*argv)
        assert_clean(code, err, tuple(argv))
        if before is not None and code != 0:
            assert _read(table) == before, "a table was changed by a refused sweep"


@_FAST
@given(data=st.data())
def test_fuzz_sweep_options(_no_cluster, data):
    _fuzz_sweep(data)


@pytest.mark.slow
@_DEEP
@given(data=st.data())
def test_fuzz_sweep_options_deep(_no_cluster, data):
    _fuzz_sweep(data)


# -- signals during PE-level runs (subprocesses: the slow tier only) -----------------------------
@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sig=st.sampled_from([signal.SIGINT, signal.SIGTERM]),
    after_s=st.floats(min_value=0.0, max_value=4.0),
)
def test_fuzz_signals_during_pe_level_runs(sig, after_s):
    """SIGINT or SIGTERM at a drawn moment of a gpt-ws run at fidelity pe (PE-level sub-runs):
    exit 130, one line, the trace so far kept and readable, nothing else left behind."""
    from tests.test_outputs import interrupt_pe_level_run

    with tempfile.TemporaryDirectory() as tmp:
        interrupt_pe_level_run(Path(tmp), sig, after_s)
