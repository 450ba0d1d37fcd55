"""tpu: TPU chips and ICI pods, in three layers (the ASTRA-sim shape).

- network (:mod:`tpu.topology`, :mod:`tpu.network`): slices as networkx graphs with each
  generation's wraparound rule; each ICI link direction an :class:`tpu.network.IciLink`, an output
  port with bandwidth, per-hop latency and credits; messages cut into packets that cut through
  chips;
- system (:mod:`tpu.collectives`): AllGather, ReduceScatter, AllReduce and AllToAll as phases of
  flows over logical axes (bidirectional or unidirectional rings, lines where an axis
  does not wrap), moving real numpy shards or byte counts only;
- chips (:mod:`tpu.chips`, :mod:`tpu.chip`): each generation's facts as data; a chip's HBM,
  VMEM and MXUs with the HBM -> VMEM -> MXU pipeline that runs its matmuls;
- between slices, DCN hops through PCIe and host NICs (:class:`tpu.network.DcnHop`);
- programs from outside (:mod:`tpu.graph`): an op graph (compute, memory, collectives with
  replica groups, sends and receives, dependencies) run on a slice's chips and ICI, a compute
  and a communication stream per chip, for the HLO and Chakra readers;
- a slice assembled (:mod:`tpu.slice`): its parameters (generation, shape, links), its build
  (the pod's top component and the ICI network) and its link utilisation.

Workloads (scenarios) live in ``workloads/tpu/``. Facts and sources: docs/tpu/hardware.md.
"""
