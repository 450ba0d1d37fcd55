"""The HBM-PIM family (``pim/``): HBM stacks at DRAM-command level with PIM units.

- ``jitq`` (:mod:`.jitq`): just-in-time MX quantization of a weight matrix by the PIM units,
  command by command, with the bits read back checked against the reference quantizer;
- ``jitq-study`` (:mod:`.study`): the JIT-Q study per LLM: GPU roofline of a transformer
  layer against the simulated PIM quantization rate (slack, capacity, throughput loss).

Built-in scenarios are in ``scenarios/`` beside this file.
"""

from __future__ import annotations

from workloads.pim import jitq, study


def register() -> None:
    """Register the family's kinds and validation cases."""
    jitq.register()
    study.register()
