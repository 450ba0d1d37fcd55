"""The weight-streaming cluster family (``memoryx/``, ``swarmx/``): none registered yet.

It will hold training steps on CS-2 systems fed by MemoryX (dense and sparse weight copies, the
optimiser update) over SwarmX (weight broadcast, gradient reduction across data-parallel
systems): layer by layer, with the execution plan (which layer's weights stream when, what
overlaps what) kept as data the coordinator walks and the analytical models read. Its built-in
scenarios will go in ``scenarios/`` beside this file.
"""

from __future__ import annotations


def register() -> None:
    """Register the family's kinds and validation cases: none yet."""
