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

from workloads import registry
from workloads.tpu import collective, matmul, p2p, trainstep, validation


def register() -> None:
    """Register the family's kinds and validation cases."""
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-collective",
            summary="a collective over axes of a TPU slice (ICI rings, chunked, real shards)",
            params=collective.CollectiveParams,
            build=collective.build,
            metrics=collective.metrics,
            model=collective.model,
            origin=collective.__name__,
        )
    )
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-p2p",
            summary="one transfer between two chips of a TPU slice, routed over the torus",
            params=p2p.P2pParams,
            build=p2p.build,
            metrics=p2p.metrics,
            model=p2p.model,
            origin=p2p.__name__,
        )
    )
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-matmul",
            summary="a sharded matmul on a TPU slice: chips' MXU pipelines and ICI collectives",
            params=matmul.MatmulParams,
            build=matmul.build,
            metrics=matmul.metrics,
            model=matmul.model,
            origin=matmul.__name__,
        )
    )
    registry.register_kind(
        registry.WorkloadKind(
            name="tpu-train-step",
            summary="one layer's data-parallel or FSDP training step on a TPU slice",
            params=trainstep.TrainStepParams,
            build=trainstep.build,
            metrics=trainstep.metrics,
            model=trainstep.model,
            origin=trainstep.__name__,
        )
    )
    validation.register()
