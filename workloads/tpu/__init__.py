"""The TPU pod family: workloads on TPU chips joined by ICI tori (``tpu/``).

- ``tpu-collective`` (:mod:`.collective`): AllGather, ReduceScatter, AllReduce, AllToAll over one
  or several axes of a slice, moving real shards;
- ``tpu-p2p`` (:mod:`.p2p`): one transfer between two chips, dimension-order routed or split over
  minimal paths;
- ``tpu-matmul`` (:mod:`.matmul`): A[I,J]·B[J,K] on a slice under the four sharding cases, with
  the collectives each needs overlapped with the chips' HBM -> VMEM -> MXU pipelines;
- ``tpu-train-step`` (:mod:`.trainstep`): one layer's data-parallel or FSDP training step, to see
  the compute-bound / communication-bound crossover as the per-chip batch varies;
- ``tpu-hlo`` (:mod:`.hlorun`, reader :mod:`.hlo`): an SPMD HLO module as JAX prints it, run as
  an op graph (:mod:`tpu.graph`) on the slice; the metrics and the model every op-graph kind
  shares are in :mod:`.opgraph`;
- ``tpu-chakra`` (:mod:`.chakra`): a Chakra execution trace set (one file per rank, read by our
  own reader, :mod:`.chakra_et`) run as an op graph (:mod:`tpu.graph`);

Analytical models (the spec's formulas) are in :mod:`.models`; ``wafersim validate tpu
tpu-explained`` compares them with the simulation (:mod:`.validation`).
"""

from __future__ import annotations

from runner import registry


def register() -> None:
    """Declare the family's modules and their kinds (each module registers its kinds and cases
    when it is first used: :func:`runner.registry.declare`)."""
    registry.declare("workloads.tpu.collective", "tpu-collective")
    registry.declare("workloads.tpu.p2p", "tpu-p2p")
    registry.declare("workloads.tpu.matmul", "tpu-matmul")
    registry.declare("workloads.tpu.trainstep", "tpu-train-step")
    registry.declare("workloads.tpu.chakra", "tpu-chakra")
    registry.declare("workloads.tpu.hlorun", "tpu-hlo")
    registry.declare("workloads.tpu.validation")
