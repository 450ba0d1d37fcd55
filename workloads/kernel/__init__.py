"""The kernel family: workloads that exercise the simcore kernel alone, with no hardware model.

``link-chain`` sends real values through a chain of channels into a rate-limited sink, so the
kernel's channels (latency, credits, width, same-cycle rule) and back-pressure can be measured
against a closed-form model. Scenarios: ``link-chain``, ``link-chain-backpressure``.
"""

from __future__ import annotations

from workloads.kernel import linkchain


def register() -> None:
    """Register the family's kinds and validation cases."""
    linkchain.register()
