"""pe: the wafer's processing elements (WSE-2 style) and the wafer that assembles them.

Models the 48 kB SRAM in 8 banks with bank conflicts and the 256 B cache (real bytes), data
structure descriptors, tensor instructions with their SIMD widths and set-up costs (function
apart from timing, :mod:`pe.isa`), dataflow-triggered tasks, microthreads and fabric queues
(:mod:`pe.ce`), the CSL-like program API (:mod:`pe.program`, :mod:`pe.task`), an SDK-style
collectives library (:mod:`wafer.collectives`) and the wafer (:mod:`wafer.system`).

Fidelity: cycle level; data is real (numpy). Left out: the main thread and microthreads do not
compete for datapath cycles; scalar instructions are not modelled (programs charge their cost).
"""
