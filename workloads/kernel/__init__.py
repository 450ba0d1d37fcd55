"""The kernel family: workloads that exercise the simcore kernel alone, with no hardware model.

``link-chain`` sends real values through a chain of channels into a rate-limited sink, so the
kernel's channels (latency, credits, width, same-cycle rule) and back-pressure can be measured
against a closed-form model. Scenarios: ``link-chain``, ``link-chain-backpressure``.
"""

from __future__ import annotations

from runner import registry


def register() -> None:
    """Declare the family's modules and their kinds (each module registers its kinds and cases
    when it is first used: :func:`runner.registry.declare`)."""
    registry.declare("workloads.kernel.linkchain", "link-chain")
