"""The TPU pod family (``tpu/``): none registered yet.

It will hold workloads on TPU chips joined by ICI tori: matmuls on the systolic arrays and the
collectives of data-, tensor- and pipeline-parallel training, each with an analytical model
(roofline per chip, collective algorithms per torus dimension). Its built-in scenarios will go
in ``scenarios/`` beside this file.
"""

from __future__ import annotations


def register() -> None:
    """Register the family's kinds and validation cases: none yet."""
