"""Instruction counts that repeat: what a bench sets before it runs under valgrind.

Two things outside the model move the instructions ``valgrind --tool=cachegrind`` counts for
the same code, and nothing simulated reads either:

- ``simcore.sim`` looks at the wall clock every chunk of events to size the next chunk for its
  progress lines, so a loaded host (or valgrind's own slowness) makes it take smaller chunks
  and run more instructions (the same SUMMA P=16 Mt=8 counted 9,446 M, 10,635 M and 10,320 M
  in three runs);
- the metrics' float64 products (a reference result and its error bound) run on BLAS threads
  whose spin-waits valgrind counts (with the clock fixed, P=32 Mt=8 counted 45,618 M and
  47,521 M; with one thread too, two runs at P=16 differed by 2,407 instructions).

:func:`one_blas_thread` must run before numpy is imported; :func:`steady_clock` after
``simcore.sim`` is. ``bench/summa_cpu.py --steady-clock`` and ``bench/kinds_bench.py --ir``
use both.
"""

from __future__ import annotations

import os
import time
import types


def one_blas_thread() -> None:
    """numpy's BLAS on one thread (call before numpy is first imported)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"


def steady_clock() -> None:
    """The run loop's wall clock reads 0: chunks of a fixed size, the same cycles, results and
    trace (only the chunk sizing and the progress lines read it)."""
    import simcore.sim

    simcore.sim.time = types.SimpleNamespace(  # type: ignore[assignment]
        perf_counter=lambda: 0.0, process_time=time.process_time, time=time.time
    )
