"""Event traces of wafersim runs: an Arrow IPC stream per run (schema v1, :mod:`traces.schema`).

Fidelity: every event carries exact integer time (common ticks and the component's own cycles);
nothing is sampled or rounded. The writer streams bounded record batches so memory stays flat; the
reader recovers what a killed run managed to write. Summaries and exports read these files.
"""

from traces.reader import Trace, iter_batches, read_header, read_trace
from traces.schema import SCHEMA, SCHEMA_VERSION, TraceLevel
from traces.writer import TraceWriter

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Trace",
    "TraceLevel",
    "TraceWriter",
    "iter_batches",
    "read_header",
    "read_trace",
]
