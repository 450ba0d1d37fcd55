"""The weight-streaming cluster family: MemoryX (``memoryx/``), SwarmX (``swarmx/``) and CS-2
systems training a GPT by weight streaming.

- ``gpt-ws`` (:mod:`.gptws`): the kind: parameters, build, metrics, the analytical model;
- :mod:`.gpt`: the model table and the numpy function of a GPT's pieces (and a reference step);
- :mod:`.plan`: the execution plan as data (what streams when, what comes back);
- :mod:`.cs2`: a CS-2 at wafer level (calibrated models) or PE level (cycle-level programs);
- :mod:`.pekernels`: the PE programs of attention, its backward, the loss and the epilogues,
  with the software exp and reciprocal they use;
- :mod:`.calibration`: the wafer-level compute model of the products and its fit to PE-level
  runs; :mod:`.sidecal`: that of the other programs;
- :mod:`.validation`: the validation cases (requirements, latency hiding, scaling).

Built-in scenarios are in ``scenarios/`` beside this file.
"""

from __future__ import annotations

from runner import registry


def register() -> None:
    """Declare the family's modules and their kinds (each module registers its kinds and cases
    when it is first used: :func:`runner.registry.declare`)."""
    registry.declare("workloads.cluster.gptws", "gpt-ws")
    registry.declare("workloads.cluster.validation")
