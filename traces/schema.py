"""Version 1 of the wafersim event-trace schema.

A trace is an Arrow IPC *stream* (``.arrows``), zstd-compressed, one row per event. The schema's
metadata is the header: schema version, wafersim version, scenario, seed, the full effective
configuration (JSON), the tick frequency and the clock domains. Time is exact: ``ts_ticks`` is in
the simulation's common tick (``tick_hz`` in the header), ``cycle`` in the emitting component's own
clock domain.

Columns
-------
ts_ticks    int64    start of the event, in ticks (the common unit; ticks / tick_hz = seconds)
dur_ticks   int64    duration in ticks (0 for instants and counters)
cycle       int64    start, in cycles of the component's clock domain
dur_cycles  int64    duration in cycles of that domain
domain      dict     clock-domain name of the component
component   dict     hierarchical component path, e.g. ``wafer/pe[3,4]/router``
category    dict     event family: ``task``, ``instr``, ``wavelet``, ``stall``, ``link``, ``run``...
name        dict     event name within its category
phase       dict     ``slice`` (has a duration), ``instant`` or ``counter``
value       float64  counter value (null unless phase is ``counter``)
flow_out    int64    flow id this event starts (a send), or null
flow_in     int64    flow id this event ends (a receive), or null; many events may end one id
args_int    map<string, int64>    typed arguments
args_float  map<string, float64>
args_str    map<string, string>

The last event of every trace is ``category='run', name='end'`` with ``args_str.status`` one of
:data:`RUN_STATUSES`: ``completed``, ``stalled``, ``livelock``, ``interrupted``, ``limit`` (how the
kernel's run ended) or ``failed`` (an error stopped it); a trace without it was cut off (the
process was killed) and the reader says so.
"""

from __future__ import annotations

import pyarrow as pa

from simcore.sim import RUN_STATUSES as KERNEL_STATUSES
from simcore.tracing import LEVEL_NAMES, TraceLevel

__all__ = [
    "DICT_COLUMNS",
    "LEVEL_NAMES",
    "META_PREFIX",
    "PHASES",
    "RUN_STATUSES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TraceLevel",
]

SCHEMA_VERSION = 1
META_PREFIX = "wafersim."


_DICT = pa.dictionary(pa.int32(), pa.string())

SCHEMA = pa.schema(
    [
        pa.field("ts_ticks", pa.int64(), nullable=False),
        pa.field("dur_ticks", pa.int64(), nullable=False),
        pa.field("cycle", pa.int64(), nullable=False),
        pa.field("dur_cycles", pa.int64(), nullable=False),
        pa.field("domain", _DICT, nullable=False),
        pa.field("component", _DICT, nullable=False),
        pa.field("category", _DICT, nullable=False),
        pa.field("name", _DICT, nullable=False),
        pa.field("phase", _DICT, nullable=False),
        pa.field("value", pa.float64()),
        pa.field("flow_out", pa.int64()),
        pa.field("flow_in", pa.int64()),
        pa.field("args_int", pa.map_(pa.string(), pa.int64())),
        pa.field("args_float", pa.map_(pa.string(), pa.float64())),
        pa.field("args_str", pa.map_(pa.string(), pa.string())),
    ]
)

DICT_COLUMNS = ("domain", "component", "category", "name", "phase")
PHASES = ("slice", "instant", "counter")
#: Statuses of the final ``run/end`` event: how the kernel's run ended, or ``failed``.
RUN_STATUSES = (*KERNEL_STATUSES, "failed")
