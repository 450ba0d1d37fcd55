"""``hbm-trace``: DRAMsim3 and Ramulator request traces, address mappings, streaming, refusals."""

from __future__ import annotations

import types

import pytest

from app.cli import main
from pim.stack import HbmConfig
from pim.standard import hbm3_study
from runner.scenario import run_kind
from simcore.errors import ConfigError
from workloads.pim.hbmtrace import Feeder, HbmTraceParams, Mapper, TraceFileError, read_trace


def write(tmp_path, text: str, name: str = "t.trace") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_both_formats_read_by_their_definitions(tmp_path):
    d = write(tmp_path, "# comment\n0x40 READ 0\n\n0x80 WRITE 5  # tail\n64 R 9\n")
    assert list(read_trace(d, "dramsim3")) == [(2, False, 64, 0), (4, True, 128, 5),
                                                (5, False, 64, 9)]  # fmt: skip
    r = write(tmp_path, "0x40 R\n0x80 W\n", "r.trace")
    assert list(read_trace(r, "ramulator")) == [(1, False, 64, 0), (2, True, 128, 0)]
    cpu = write(tmp_path, "3 4096\n2 8192 12288\n", "cpu.trace")
    assert list(read_trace(cpu, "ramulator")) == [
        (1, False, 4096, 3), (2, False, 8192, 5), (2, True, 12288, 5),
    ]  # fmt: skip
    assert isinstance(read_trace(d, "dramsim3"), types.GeneratorType)


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("dramsim3", "0x0 READ 0\n0x40 FETCH 3\n",
         "t.trace:2: expected '<address> READ|WRITE <cycle>' (DRAMsim3), got '0x40 FETCH 3'"),
        ("dramsim3", "0x0 READ 7\n0x40 READ 3\n",
         "t.trace:2: cycle 3 is before the previous line's 7 (arrivals must not decrease)"),
        ("dramsim3", "0xZZ READ 0\n", "t.trace:1: address '0xZZ' is not a non-negative integer"),
        ("ramulator", "0x0 R\n0x40 X\n",
         "t.trace:2: expected '<address> R|W' or '<bubbles> <address> [<writeback address>]' "
         "(Ramulator), got '0x40 X'"),
    ],
)  # fmt: skip
def test_a_malformed_line_is_refused_with_its_number(tmp_path, fmt, text, message):
    path = write(tmp_path, text)
    with pytest.raises(TraceFileError) as err:
        list(read_trace(path, fmt))
    assert str(err.value) == f"{tmp_path}/{message}"


def test_a_malformed_line_is_a_user_error_exit_2(tmp_path, capsys):
    path = write(tmp_path, "0x0 READ 0\nnot a request\n")
    assert main(["run", "hbm-trace", "--set", f"trace={path}"]) == 2
    assert "t.trace:2: expected '<address> READ|WRITE <cycle>'" in capsys.readouterr().err


def test_the_address_mapping_is_an_order_of_fields():
    org = hbm3_study().org
    m = Mapper(org, "row-bankgroup-bank-pch-column", 32)
    # column: bits 5-9, pch: next 32 values, bank, bankgroup, row
    a = (((((7 * 4 + 2) * 4 + 3) * 32 + 5) * 32) + 9) * 32
    assert m(a) == (5, 2 * 4 + 3, 7, 9)
    m = Mapper(org, "pch-row-bank-bankgroup-column", 1)
    assert m(32 * (32 + 1)) == (0, 4, 0, 1)  # column 1 of bank group 1 (bank 4)
    with pytest.raises(ConfigError) as err:
        HbmTraceParams(trace="traces/mixed-1536.dramsim3.trace",
                       address_mapping="row-bank-column-pch").check()  # fmt: skip
    assert str(err.value) == (
        "config key 'address_mapping' = 'row-bank-column-pch': not an order of the five address "
        "fields; allowed: row, bankgroup, bank, column, pch, each once, joined by '-' (most "
        "significant first)"
    )


def test_the_feeder_reads_only_as_far_as_a_controller_asks():
    pulled = []

    def lines():
        for i in range(10_000):
            pulled.append(i)
            yield i + 1, False, i * 32 * 32, i  # one pseudo-channel after another

    f = Feeder(lines(), Mapper(hbm3_study().org, "row-bankgroup-bank-pch-column", 4), 4)
    s1 = f.stream(1)
    next(s1)
    assert len(pulled) == 2 and len(f.buffers[0]) == 1  # pch 0's request waits in its buffer
    assert next(f.stream(0)).arrival == 0 and len(pulled) == 2


def test_a_trace_run_counts_every_request_once():
    for fmt, scope in (("dramsim3", "pch"), ("ramulator", "stacks")):
        p = HbmTraceParams(trace=f"traces/mixed-1536.{fmt}.trace", format=fmt, scope=scope,
                           hbm=HbmConfig(refresh="none"))  # fmt: skip
        m = run_kind("hbm-trace", p)
        assert m["requests"] == 1536
        assert m["row_hits"] + m["row_misses"] + m["row_conflicts"] == 1536
        assert m["row_activations"] == m["row_misses"] + m["row_conflicts"]
        assert len(m["pch_utilisation_pct"]) == (1 if scope == "pch" else 32)
        assert 0 < m["latency_mean_s"] <= m["latency_p99_s"]
        assert m["bandwidth_bytes_per_s"] == pytest.approx(1536 * 32 / m["time_s"])
