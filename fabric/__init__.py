"""fabric: the wafer's 2D mesh of routers (WSE-2 style).

Models routers with five ports (N, S, E, W, RAMP), 24 colours with static per-colour routes,
switch positions advanced by control wavelets, teardown, per-colour buffers with lossless
back-pressure and link arbitration, one 32-bit wavelet per link per cycle, and edge I/O ports.
Fidelity: cycle level (wavelet-exact reference mode and a flow-level fast mode).

Status: not yet built; the mesh lands with the wafer-scale engine work.
"""
