"""``hbm-trace``: a request trace file, as DRAM-simulator users bring them, through HBM controllers.

The trace is read line by line as the controllers admit requests (a generator over the file:
millions of requests are never held at once; only requests read ahead for another
pseudo-channel wait in that pseudo-channel's buffer). Two formats, each by its public definition:

- ``dramsim3``: ``<address> READ|WRITE <cycle>`` (DRAMsim3's trace: a hex address, the request
  type, its arrival in the memory clock); ``R``/``W`` are accepted for READ/WRITE;
- ``ramulator``: Ramulator's memory trace ``<address> R|W`` (every request there at cycle 0:
  the controllers take them as fast as their queues admit), or its CPU trace
  ``<bubbles> <address> [<writeback address>]`` (a read after ``bubbles`` non-memory
  instructions, one a command cycle here; the optional writeback is a write at the same cycle).

Addresses (hex with ``0x`` or decimal) are bytes; a request moves one 32-byte column. The column
offset is dropped and the rest split by ``address_mapping``: the fields ``row``, ``bankgroup``,
``bank``, ``column`` and ``pch`` from the most significant to the least (mixed radix: rows are
the data rows, pch the simulated pseudo-channels), so any order is a mapping; addresses beyond the
stacks' capacity wrap. ``scope = "pch"`` sends every request to one pseudo-channel (the ``pch``
field is then dropped); ``"stacks"`` simulates every pseudo-channel of ``hbm.stacks`` stacks.
The run carries no data (the trace has none): banks keep rows and modes, not bytes.

Metrics: the whole run's ``time_s`` and ``cycles`` (to the last data beat), bandwidth; per
request, by the first command issued for it, a row hit (RD/WR: its row was open), a miss (ACT:
the bank was closed) or a conflict (PRE: another row was open); activations; request latency
(arrival to the last data beat: mean, p50, p99); each simulated pseudo-channel's data-bus
utilisation in percent.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from pim.controller import Request, latency_cycles
from pim.stack import HbmConfig, HbmStack
from runner import registry
from simcore.config import file_param, param, section
from simcore.errors import ConfigError, WafersimError
from simcore.sim import RunResult, Simulation

FIELDS = ("row", "bankgroup", "bank", "column", "pch")
#: What ``address_mapping`` may be (``wafersim params`` and its check's error).
MAPPING_ALLOWED = (
    "row, bankgroup, bank, column, pch, each once, joined by '-' (most significant first)"
)
HERE = os.path.dirname(os.path.abspath(__file__))


class TraceFileError(WafersimError):
    """A trace file that cannot be read, or a line of it that is not a request."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class HbmTraceParams(registry.ScenarioParams):
    trace: str = file_param(
        "",
        "request trace file (relative paths: the working directory, or the scenario file's "
        "folder in a scenario)",
        names=("",),
        allowed="a path to a readable trace file",
    )
    format: str = param("dramsim3", "trace format", choices=("dramsim3", "ramulator"))
    scope: str = param(
        "pch", "pch: every request to one pseudo-channel; stacks: all of hbm.stacks' pCHs",
        choices=("pch", "stacks"),
    )  # fmt: skip
    address_mapping: str = param(
        "row-bankgroup-bank-pch-column",
        "address fields, most significant first: an order of row, bankgroup, bank, column, pch",
        allowed=MAPPING_ALLOWED,
    )
    hbm: HbmConfig = section(HbmConfig, "the HBM stacks")

    def check(self) -> None:
        if not self.trace:
            raise ConfigError(
                "trace", self.trace, "no trace file given", hint="set trace=PATH (a trace file)"
            )
        path = resolve(self.trace)
        if not os.path.isfile(path):
            raise ConfigError(
                "trace", self.trace, "no such file",
                hint="give a path to a trace file (relative: the working directory, or the "
                "scenario file's folder in a scenario)",
            )  # fmt: skip
        fields = self.address_mapping.split("-")
        if sorted(fields) != sorted(FIELDS):
            raise ConfigError(
                "address_mapping", self.address_mapping,
                "not an order of the five address fields",
                allowed=MAPPING_ALLOWED,
            )  # fmt: skip


def resolve(path: str) -> str:
    """``path`` as given, or beside this module (``traces/...``: the bundled traces) when it is
    not found from the working directory; the command line and scenario files have resolved
    and checked it already (``trace`` is a file-valued parameter)."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    return os.path.join(HERE, path)


def _int(tok: str, path: str, n: int, what: str) -> int:
    try:
        v = int(tok, 0)
    except ValueError:
        v = -1
    if v < 0:
        raise TraceFileError(f"{path}:{n}: {what} {tok!r} is not a non-negative integer")
    return v


def read_trace(path: str, fmt: str) -> Iterator[tuple[int, bool, int, int]]:
    """(line number, is_write, byte address, arrival cycle) per request, in file order;
    blank lines and ``#`` comments are skipped; a malformed line is a :class:`TraceFileError`
    naming its line; arrivals must not decrease."""
    last = 0
    cpu_cycle = 0
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read the trace file ({exc.strerror})") from None
    with fh:
        for n, line in enumerate(fh, 1):
            toks = line.split("#", 1)[0].split()
            if not toks:
                continue
            if fmt == "dramsim3":
                if len(toks) != 3 or toks[1].upper() not in ("READ", "WRITE", "R", "W"):
                    raise TraceFileError(
                        f"{path}:{n}: expected '<address> READ|WRITE <cycle>' (DRAMsim3), "
                        f"got {line.strip()!r}"
                    )
                addr = _int(toks[0], path, n, "address")
                cyc = _int(toks[2], path, n, "cycle")
                if cyc < last:
                    raise TraceFileError(
                        f"{path}:{n}: cycle {cyc} is before the previous line's {last} "
                        "(arrivals must not decrease)"
                    )
                last = cyc
                yield n, toks[1].upper().startswith("W"), addr, cyc
            elif len(toks) == 2 and toks[1].upper() in ("R", "W"):
                yield n, toks[1].upper() == "W", _int(toks[0], path, n, "address"), 0
            elif 2 <= len(toks) <= 3 and toks[1][:1].isdigit():
                cpu_cycle += _int(toks[0], path, n, "bubble count")
                yield n, False, _int(toks[1], path, n, "address"), cpu_cycle
                if len(toks) == 3:
                    yield n, True, _int(toks[2], path, n, "writeback address"), cpu_cycle
            else:
                raise TraceFileError(
                    f"{path}:{n}: expected '<address> R|W' or '<bubbles> <address> "
                    f"[<writeback address>]' (Ramulator), got {line.strip()!r}"
                )


class Mapper:
    """Byte address -> (pseudo-channel, bank, row, column) by a mapping order."""

    def __init__(self, org: Any, order: str, pchs: int) -> None:
        self.shift = (org.column_bytes - 1).bit_length()
        radix = {"row": org.rows - 3, "bankgroup": org.bankgroups, "bank": org.banks_per_group,
                 "column": org.columns, "pch": pchs}  # fmt: skip
        self.fields = [(f, radix[f]) for f in reversed(order.split("-"))]  # least first
        self.bpg = org.banks_per_group

    def __call__(self, addr: int) -> tuple[int, int, int, int]:
        a = addr >> self.shift
        v = {}
        for f, r in self.fields:
            v[f] = a % r
            a //= r
        return v["pch"], v["bankgroup"] * self.bpg + v["bank"], v["row"], v["column"]


class Feeder:
    """Deals the trace's requests to the pseudo-channels as each controller asks for its next:
    reads ahead only until it finds that pseudo-channel's next request."""

    def __init__(self, lines: Iterator[tuple[int, bool, int, int]], mapper: Mapper, n: int):
        self.lines = lines
        self.mapper = mapper
        self.buffers: list[collections.deque[Request]] = [collections.deque() for _ in range(n)]
        self.requests = 0
        self.row_state: list[list[int]] = []

    def stream(self, k: int) -> Iterator[Request]:
        buf = self.buffers[k]
        while True:
            if buf:
                yield buf.popleft()
                continue
            for _n, w, addr, cyc in self.lines:
                pch, bank, row, col = self.mapper(addr)
                self.requests += 1
                req = Request(w, bank, row, col, arrival=cyc)
                if pch == k:
                    yield req
                    break
                self.buffers[pch].append(req)
            else:
                if not buf:
                    return


@dataclasses.dataclass
class TraceRun:
    stack: HbmStack
    feeder: Feeder


def build(sim: Simulation, p: HbmTraceParams) -> TraceRun:
    cfg = p.hbm
    n = 1 if p.scope == "pch" else cfg.standard().org.pchs * cfg.stacks
    stack = HbmStack(sim, cfg, pchs=n, store_data=False)
    mapper = Mapper(stack.std.org, p.address_mapping, n)
    feeder = Feeder(read_trace(resolve(p.trace), p.format), mapper, n)
    for k, ctl in enumerate(stack.controllers):
        ctl.submit_source(feeder.stream(k))
    return TraceRun(stack, feeder)


def metrics(sim: Simulation, p: HbmTraceParams, run: TraceRun, result: RunResult) -> dict:
    ctls = run.stack.controllers
    t, org = run.stack.std.timing, run.stack.std.org
    cycles = max((c.end_cycle for c in ctls), default=0)
    done = sum(c.completed for c in ctls)
    lat = latency_cycles(ctls)
    acts = sum(c.counts.get("ACT", 0) for c in ctls)
    hits = sum(c.row_hits for c in ctls)
    misses = sum(c.row_misses for c in ctls)
    conflicts = sum(c.row_conflicts for c in ctls)
    secs = cycles / t.clock_hz
    return {
        "time_s": secs,
        "cycles": cycles,
        "requests": done,
        "bandwidth_bytes_per_s": done * org.column_bytes / secs if secs else 0.0,
        "row_hits": hits,
        "row_misses": misses,
        "row_conflicts": conflicts,
        "row_activations": acts,
        "refreshes": sum(c.counts.get("REF", 0) for c in ctls),
        "latency_mean_s": lat["mean"] / t.clock_hz,
        "latency_p50_s": lat["p50"] / t.clock_hz,
        "latency_p99_s": lat["p99"] / t.clock_hz,
        "pch_utilisation_pct": [
            round(100.0 * c.bus_busy_cycles / cycles, 6) if cycles else 0.0 for c in ctls
        ],
        "correct": None,
    }


def footprint(p: HbmTraceParams) -> registry.Footprint:
    """The stack, and per simulated pseudo-channel its controller, its banks' and its PIM
    tracks; the requests in flight (the trace is streamed, so its length does not count)."""
    std = p.hbm.standard()
    n = 1 if p.scope == "pch" else std.org.pchs * p.hbm.stacks
    return registry.Footprint(1 + n * (2 + std.org.banks), n * (64 * 200 + 4096), "")


def register() -> None:
    registry.register_kind(
        registry.WorkloadKind(
            name="hbm-trace",
            summary="a DRAMsim3 or Ramulator request trace through HBM controllers",
            params=HbmTraceParams,
            build=build,
            metrics=metrics,
            origin=__name__,
            footprint=footprint,
        )
    )
