"""The HBM-PIM family (``pim/``): HBM stacks at DRAM-command level with PIM units.

- ``jitq`` (:mod:`.jitq`): just-in-time MX quantization of a weight matrix by the PIM units,
  command by command, with the bits read back checked against the reference quantizer;
- ``hbm-read`` (:mod:`.hbmread`): host reads, streaming or random, through a controller: the
  DRAM model's bandwidth and row-miss checks;
- ``hbm-trace`` (:mod:`.hbmtrace`): a DRAMsim3 or Ramulator request trace file through the
  controllers of one pseudo-channel or whole stacks;
- ``jitq-study`` (:mod:`.study`): the JIT-Q study per LLM: GPU roofline of a transformer
  layer against the simulated PIM quantization rate (slack, capacity, throughput loss).

Built-in scenarios are in ``scenarios/`` beside this file.
"""

from __future__ import annotations

from runner import registry


def register() -> None:
    """Declare the family's modules and their kinds (each module registers its kinds and cases
    when it is first used: :func:`runner.registry.declare`)."""
    registry.declare("workloads.pim.hbmread", "hbm-read")
    registry.declare("workloads.pim.hbmtrace", "hbm-trace")
    registry.declare("workloads.pim.jitq", "jitq")
    registry.declare("workloads.pim.study", "jitq-study")
