"""The SDK study's calibration of the wafer: fits measured on one PE and one PE row, and the
constants of its SUMMA time model.

These are measurements, not mechanisms: the analytical models of the wafer family (``wse-fmac``,
``wse-bcast``, ``summa``, ``ws-matmul``) are built from them, and the ``wse-fmac`` and
``wse-bcast`` validation cases compare the simulation with the two fits. Nothing here feeds the
simulation's timing, which comes from the PE and fabric mechanisms alone.

- T_fmac(I) = 2 I + 10: one FP32 ``@fmacs`` over I elements (within 2 cycles for I in 1..2048).
- T_bcast(I) = 1.6 I + 250: a row or column broadcast of I FP32 words with the collectives
  library (MAPE 2.0 % for I in 1..4096). Its slope is the stream rate of a fabric -> memory move
  through a PE's ramp, which the ws-matmul models use for every stream along a row or column.
- SUMMA: T_total = {(T_fmac + 0.5·N_loop + 10) + T_bcast + 100} x P (docs/wafer/summa.md).
"""

from __future__ import annotations

#: Where the fits and constants below were published (docs/wafer/hardware.md, sources S8 and S9).
STUDY = (
    'R. Matsuzaki, D. Mukunoki, T. Miyajima, "Performance evaluation and modelling of '
    'single-precision matrix multiplication on Cerebras CS-2", SC24 workshops, 2024; journal '
    "version J. Information Processing 34:132-139, 2026, DOI 10.2197/ipsjjip.34.132"
)

#: T_fmac(I) = FMAC_CYCLES_PER_ELEMENT · I + FMAC_FIXED_CYCLES.
FMAC_CYCLES_PER_ELEMENT = 2.0
FMAC_FIXED_CYCLES = 10.0

#: T_bcast(I) = BCAST_CYCLES_PER_WORD · I + BCAST_FIXED_CYCLES.
BCAST_CYCLES_PER_WORD = 1.6
BCAST_FIXED_CYCLES = 250.0

#: Stream rate of a fabric -> memory move through a PE's ramp, cycles per FP32 word: the slope
#: of the T_bcast fit (each hop of a ring or chain reduction is such a stream).
STREAM_CYCLES_PER_WORD = BCAST_CYCLES_PER_WORD

#: The study's SUMMA constants besides the two fits: scalar loop work per inner iteration, the
#: compute step's fixed cost and the control cost per step (cycles).
SUMMA_LOOP_CYCLES_PER_ITERATION = 0.5
SUMMA_COMPUTE_FIXED_CYCLES = 10.0
SUMMA_CONTROL_CYCLES = 100.0


def t_fmac_reference(elements: int) -> float:
    """The study's fit for one FP32 ``@fmacs`` over I elements (cycles)."""
    return FMAC_CYCLES_PER_ELEMENT * elements + FMAC_FIXED_CYCLES


def t_bcast_reference(elements: int) -> float:
    """The study's fit for a row/column broadcast of I FP32 words (cycles)."""
    return BCAST_CYCLES_PER_WORD * elements + BCAST_FIXED_CYCLES
