"""swarmx: the broadcast-reduce tree between MemoryX and the CS-2 systems.

- :mod:`swarmx.tree`: the topology, a networkx tree of 1:4 (or 2 x 1:2) nodes for any number
  of systems: node count linear, depth logarithmic in N;
- :mod:`swarmx.node`: a broadcast-reduce node as a component (processes and channels, one
  transaction per plan chunk): weights broadcast down, FP32 gradients sum-reduced up, each port
  a bundle of 100 Gb/s interfaces serialising what it sends.

See docs/cluster/guide.md and docs/cluster/hardware.md.
"""
