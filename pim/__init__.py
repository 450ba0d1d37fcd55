"""pim: HBM stacks at DRAM-command level with processing-in-memory units.

- :mod:`pim.standard`: the memory standard as data (organisation, timing, constraint table);
- :mod:`pim.timing`: the one generic checker of the constraint table;
- :mod:`pim.device`: a pseudo-channel's banks (real bytes), row buffers, modes and PIM units;
- :mod:`pim.isa`: the PIM instruction set, its encoding and its numpy function;
- :mod:`pim.controller`: a controller per pseudo-channel (FR-FCFS/FCFS, open/closed page,
  refresh; in-order PIM command streams);
- :mod:`pim.stack`: the configuration block and the component owning the controllers;
- :mod:`pim.jitq`: JIT-Q, MX quantization compiled to PIM programs and command streams, checked
  against the bit-exact MX9/MX6/MX4 reference quantizer of :mod:`numerics.mx`.

Fidelity: command-exact in the HBM command clock (one command per cycle per pseudo-channel).
"""
