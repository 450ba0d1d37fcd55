"""fabric: the wafer's 2D mesh of routers (WSE-2 style).

Models routers with five ports (N, S, E, W, RAMP), 24 colours with static per-colour routes,
switch positions advanced by control wavelets, teardown, wavelet filters, per-colour buffers with
lossless credit-based back-pressure and link arbitration, one 32-bit wavelet per link per cycle,
and edge ports (components with kernel ports) where other models connect to the wafer.

Fidelity: cycle level, in two modes that give the same cycles for uncontended streams: the
wavelet-exact reference engine (:mod:`fabric.engine`) and express streams (:mod:`fabric.express`)
that move an uncontended stream at once. The fabric runs on a
:class:`simcore.stepping.CycleScheduler` and knows compute engines only through the protocols of
:mod:`fabric.endpoints`; it imports nothing from ``pe/``.
"""
