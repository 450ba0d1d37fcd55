"""memoryx: the weight store and optimizer service of a weight-streaming cluster.

- :mod:`memoryx.store`: capacity at 20 B per parameter across DRAM and flash, the dense FP32
  copy with SGD and Adam (real numpy), the FP16 CSR copy with 16-bit delta indices in forward
  and transposed order, gradient-request masks;
- :mod:`memoryx.plan`: the execution plan as data (one entry per streamed chunk);
- :mod:`memoryx.service`: MemoryX as a component (its own clock domain): tiers as bandwidth
  servers, a reader that prefetches ahead of the I/O port, the optimizer's update throughput.

See docs/cluster/guide.md and docs/cluster/hardware.md.
"""
