"""pim: HBM stacks with processing-in-memory units.

Will model HBM pseudo-channels, banks with row-buffer timing, PIM units driven by broadcast
commands, and just-in-time MX quantization, at DRAM-command level in the HBM clock domain.
Status: not yet built.
"""
