"""The HBM-PIM family (``pim/``): none registered yet.

It will hold workloads on HBM stacks with processing-in-memory: streaming kernels (GEMV,
element-wise operations) run by the banks' compute units under the DRAM timing constraints,
compared with the host reading the same data over the channels. Its built-in scenarios will go in
``scenarios/`` beside this file.
"""

from __future__ import annotations


def register() -> None:
    """Register the family's kinds and validation cases: none yet."""
