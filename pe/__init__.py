"""pe: the wafer's processing element compute engine (WSE-2 style).

Models 48 kB SRAM in 8 banks with bank conflicts, the 256 B cache, DSDs, tensor instructions with
their SIMD widths and set-up costs, dataflow-triggered tasks, microthreads and fabric queues.
Fidelity: cycle level; data is real (numpy-backed SRAM).

Status: not yet built; lands with the wafer-scale engine work.
"""
