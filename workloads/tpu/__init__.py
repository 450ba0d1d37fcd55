"""The TPU pod family: workloads on TPU chips joined by ICI tori (``tpu/``).

- ``tpu-collective`` (:mod:`.collective`): AllGather, ReduceScatter, AllReduce, AllToAll over one
  or several axes of a slice, moving real shards;
- ``tpu-p2p`` (:mod:`.p2p`): one transfer between two chips, dimension-order routed or split over
  minimal paths;
- ``tpu-matmul`` (:mod:`.matmul`): A[I,J]·B[J,K] on a slice under the four sharding cases, with
  the collectives each needs overlapped with the chips' HBM -> VMEM -> MXU pipelines;
- ``tpu-train-step`` (:mod:`.trainstep`): one layer's data-parallel or FSDP training step, to see
  the compute-bound / communication-bound crossover as the per-chip batch varies;

Analytical models (the spec's formulas) are in :mod:`.models`; ``wafersim validate tpu
tpu-explained`` compares them with the simulation (:mod:`.validation`).
"""

from __future__ import annotations

from workloads.tpu import collective, matmul, p2p, trainstep, validation


def register() -> None:
    """Register the family's kinds and validation cases."""
    collective.register()
    p2p.register()
    matmul.register()
    trainstep.register()
    validation.register()
