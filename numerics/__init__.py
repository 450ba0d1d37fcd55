"""numerics: the number formats the hardware families compute and store in, in one place.

- :mod:`numerics.floats`: bfloat16 and IEEE binary16 (fp16) rounding from float32, and the bit
  patterns of bf16, fp16 and fp32 values;
- :mod:`numerics.mx`: the MX9 / MX6 / MX4 shared-microexponent formats, the bit-exact reference
  quantizer and dequantizer (what the PIM kernel is checked against).

Every rounding is to nearest, ties to even, as the hardware does it; every function takes and
returns numpy arrays and is exact (no float64 detours that could round twice). Nothing here
knows about simulation: this package imports numpy and the standard library only (rank 0 in
``tests/import_graph.py``), so every family, and the tests, round the same way.
"""
