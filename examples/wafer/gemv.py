"""GEMV, y = A·x, on a row of PEs: a wafer kernel file for ``wafersim run wafer-program``.

A is m x n FP32. PE i of the row holds the column block A[:, i·nb:(i+1)·nb] (nb = n / pes,
column-major) and x's block; it computes its partial y_i = A_i·x_i with one ``@fmacs`` per
column (y_i += A[:, j]·x_j), then the collectives library chain-reduces the partial vectors
into PE 0 (FP32 adds). Time is the SDK's: max(end) - min(start) over the PEs' marks.

Run it:

    wafersim run wafer-program --set program=examples/wafer/gemv.py --set m=64 --set n=128
    wafersim params wafer-program --set program=examples/wafer/gemv.py
    wafersim validate wafer-program --set program=examples/wafer/gemv.py
"""

import numpy as np

from pe.program import Layout
from wafer.collectives import Collectives
from workloads.wafer.program import Param

PARAMS = {
    "m": Param(32, "rows of A and elements of y", min=1, max=2048),
    "n": Param(64, "columns of A and elements of x (a multiple of pes)", min=1, max=4096),
    "pes": Param(4, "PEs in the row; each holds n / pes columns of A", min=2, max=750),
}
# The wafer adds the partial sums in another order than numpy: FP32 rounding differs.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
VALIDATION = [
    {"m": 16, "n": 32, "pes": 2},
    {"m": 32, "n": 64, "pes": 4},
    {"m": 64, "n": 64, "pes": 8},
    {"m": 128, "n": 128, "pes": 4},
]
VALIDATION_MAX_ERROR_PCT = 15.0

MAIN, DONE = 10, 11  # local task ids (the collectives library takes 24..28)


def inputs(p, rng):
    if p.n % p.pes:
        raise ValueError(f"n = {p.n} is not a multiple of pes = {p.pes}; change n or pes")
    return {
        "a": rng.standard_normal((p.m, p.n)).astype(np.float32),
        "x": rng.standard_normal(p.n).astype(np.float32),
        "y": {},  # PE -> its y buffer (DSD), kept by the PE code for output()
    }


def layout(p, data):
    nb = p.n // p.pes

    def pe_code(pe):
        coll = Collectives(pe, y_colours=None)  # a row: no column dimension
        cols = slice(pe.x * nb, (pe.x + 1) * nb)
        a = pe.array("a", data["a"][:, cols].reshape(-1, order="F"))
        xs = data["x"][cols]
        y = pe.zeros("y", p.m)
        data["y"][pe.x] = y
        column = a.with_length(p.m)

        @pe.local_task(id=MAIN)
        def main(t):
            t.mark("start")
            for j in range(nb):  # y += A[:, j] * x_j
                t.fmacs(y, y, column.with_offset(j * p.m), float(xs[j]))
            coll.x.reduce_fadds(t, 0, y, DONE)

        @pe.local_task(id=DONE)
        def done(t):
            t.mark("end")

        pe.start(main)

    lay = Layout(p.pes, 1)
    lay.set_rectangle_code(pe_code)
    return lay


def output(p, wafer, data):
    return data["y"][0].read(wafer.ce(0, 0).sram)


def reference(p, data):
    return data["a"] @ data["x"]


def model(p):
    """Compute, nb fmacs of m elements (the SDK study's T_fmac = 2m + 10 each), then a chain
    reduction of m words along the row: its start-up, and m words streaming through."""
    nb = p.n // p.pes
    return nb * (2 * p.m + 10) + 1.6 * p.m + 250
