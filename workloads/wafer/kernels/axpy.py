"""y = a·x + y on a row of PEs: the kernel ``wafer-program`` runs when no ``program`` is set.

Each PE holds ``n`` elements of x and y and runs one ``@fmacs``; no fabric traffic. A kernel
file declares its parameters (``PARAMS``), inputs, layout and PE code, how to read its result
back, numpy's answer and a model (docs/workloads-from-outside.md).
"""

import numpy as np

from pe.program import Layout
from workloads.wafer.program import Param

PARAMS = {
    "n": Param(64, "FP32 elements of x and y per PE", min=1, max=4096),
    "pes": Param(4, "PEs in the row", min=1, max=750),
    "a": Param(2.0, "the scalar a"),
}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}  # one FP32 multiply-add per element: exact
VALIDATION = [{"n": 16}, {"n": 256}, {"n": 1024, "pes": 2}]
VALIDATION_MAX_ERROR_PCT = 1.0


def inputs(p, rng):
    shape = (p.pes, p.n)
    return {
        "x": rng.standard_normal(shape).astype(np.float32),
        "y": rng.standard_normal(shape).astype(np.float32),
        "bufs": {},  # PE x -> its y buffer, filled by the PE code, read by output()
    }


def layout(p, data):
    def pe_code(pe):
        x = pe.array("x", data["x"][pe.x])
        y = pe.array("y", data["y"][pe.x])
        data["bufs"][pe.x] = y

        @pe.local_task(id=10)
        def main(t):
            t.mark("start")
            t.fmacs(y, y, x, p.a)
            t.mark("end")

        pe.start(main)

    lay = Layout(p.pes, 1)
    lay.set_rectangle_code(pe_code)
    return lay


def output(p, wafer, data):
    return np.stack([data["bufs"][x].read(wafer.ce(x, 0).sram) for x in range(p.pes)])


def reference(p, data):
    return (data["y"] + np.float32(p.a) * data["x"]).astype(np.float32)


def model(p):
    """The SDK study's T_fmac(I) = 2I + 10 (all PEs in parallel)."""
    return 2 * p.n + 10
