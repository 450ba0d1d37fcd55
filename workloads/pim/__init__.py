"""The HBM-PIM family (``pim/``): HBM stacks at DRAM-command level with PIM units.

- ``jitq`` (:mod:`.jitq`): just-in-time MX quantization of a weight matrix by the PIM units,
  command by command, with the bits read back checked against the reference quantizer;
- ``hbm-read`` (:mod:`.hbmread`): host reads (streaming or random) through the controllers,
  the DRAM model's bandwidth and row-miss checks.

Built-in scenarios are in ``scenarios/`` beside this file.
"""

from __future__ import annotations

from workloads.pim import jitq


def register() -> None:
    """Register the family's kinds and validation cases."""
    jitq.register()
