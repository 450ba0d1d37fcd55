"""The wafer family: workloads lowered onto the wafer-scale engine (``fabric/``, ``pe/``).

- ``wse-fmac``, ``wse-bcast`` (:mod:`.wse`): the SDK study's calibration measurements, one PE's
  ``@fmacs`` and a row broadcast, validated against the study's fits;
- ``summa`` (:mod:`.summa`): the SDK's SUMMA GEMM with row and column broadcasts;
- ``ws-matmul`` (:mod:`.wsmatmul`): weight-streamed sparse matmuls, fwd, bwd and wgrad;
- ``spmv`` (:mod:`.spmv`): sparse matrix-vector products from .mtx files or generators.

The study's fits and constants that these models are built from live in :mod:`.calibration`.
"""

from __future__ import annotations

from workloads.wafer import spmv, summa, wse, wsmatmul


def register() -> None:
    """Register the family's kinds and validation cases."""
    wse.register()
    summa.register()
    wsmatmul.register()
    spmv.register()
