"""The wafer family: workloads lowered onto the wafer-scale engine (``fabric/``, ``pe/``).

- ``wse-fmac``, ``wse-bcast`` (:mod:`.wse`): the SDK study's calibration measurements, one PE's
  ``@fmacs`` and a row broadcast, validated against the study's fits;
- ``summa`` (:mod:`.summa`): the SDK's SUMMA GEMM with row and column broadcasts;
- ``ws-matmul`` (:mod:`.wsmatmul`): weight-streamed sparse matmuls, fwd, bwd and wgrad;
- ``spmv`` (:mod:`.spmv`): sparse matrix-vector products from .mtx files or generators;
- ``gemv`` (:mod:`.gemv`): dense matrix-vector products, up to the full 750 x 994 array;
- ``wafer-program`` (:mod:`.program`): a user's kernel from a Python file
  (docs/workloads-from-outside.md).

The study's fits and constants that these models are built from live in :mod:`.calibration`.
"""

from __future__ import annotations

from runner import registry


def register() -> None:
    """Declare the family's modules and their kinds (each module registers its kinds and cases
    when it is first used: :func:`runner.registry.declare`)."""
    registry.declare("workloads.wafer.wse", "wse-fmac", "wse-bcast")
    registry.declare("workloads.wafer.summa", "summa")
    registry.declare("workloads.wafer.wsmatmul", "ws-matmul")
    registry.declare("workloads.wafer.spmv", "spmv")
    registry.declare("workloads.wafer.gemv", "gemv")
    registry.declare("workloads.wafer.program", "wafer-program")
