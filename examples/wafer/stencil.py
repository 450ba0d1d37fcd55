"""A 2-D five-point Jacobi stencil on a grid of PEs: a kernel file for ``wafer-program``.

The field is ``px`` x ``py`` points, one per PE, each a vector of ``k`` FP32 values (k
independent layers). A step computes, at every point,

    u' = c0·u + c1·(u_west + u_east + u_north + u_south)        (zero outside the grid)

Every PE sends its vector to its (up to) four neighbours and receives theirs, with async moves
on the fabric. A direction needs two colours, alternating with the sender's parity (x for east
and west, y for north and south), so that a router sends its own vector on one colour and
receives its neighbour's on the other: 8 colours in all. Each async move activates a counting
task; when all of a PE's moves are done its compute task runs one ``@fmuls`` and up to four
``@fmacs``, copies u' into u, and starts the next step. Time is max(end) - min(start).

    wafersim run wafer-program --set program=examples/wafer/stencil.py --set px=8 --set py=8
"""

import numpy as np

from pe.program import Layout
from workloads.wafer.program import Param

PARAMS = {
    "px": Param(4, "PEs (grid points) along x", min=1, max=750),
    "py": Param(4, "PEs (grid points) along y", min=1, max=994),
    "k": Param(16, "FP32 values per grid point (independent layers)", min=1, max=2048),
    "steps": Param(2, "Jacobi steps", min=1, max=100),
    "c0": Param(0.5, "weight of the point itself"),
    "c1": Param(0.125, "weight of each neighbour"),
}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}  # the same FP32 operations in the same order as numpy

#: direction -> (dx, dy, first colour); the sender's parity picks the colour of the pair.
DIRS = {"E": (1, 0, 0), "W": (-1, 0, 2), "S": (0, 1, 4), "N": (0, -1, 6)}
OPPOSITE = {"E": "W", "W": "E", "S": "N", "N": "S"}
ORDER = ("W", "E", "N", "S")  # neighbours added in this order (numpy adds them alike)
MAIN, COMPUTE = 10, 19  # counting tasks: 11..18, one per async move


def colour(direction, x, y):
    dx, _, base = DIRS[direction]
    return base + (x % 2 if dx else y % 2)


def inputs(p, rng):
    return {"u": rng.standard_normal((p.py, p.px, p.k)).astype(np.float32), "bufs": {}}


def layout(p, data):
    lay = Layout(p.px, p.py)

    def pe_code(pe):
        x, y = pe.x, pe.y
        u = pe.array("u", data["u"][y, x])
        new = pe.zeros("new", p.k)
        data["bufs"][(x, y)] = u
        moves = []  # (kind, direction, colour, queue)
        sends = recvs = 0
        for d, (dx, dy, _) in DIRS.items():
            nx, ny = x + dx, y + dy
            if 0 <= nx < p.px and 0 <= ny < p.py:
                c = colour(d, x, y)  # I send towards d ...
                pe.route(c, rx=["RAMP"], tx=[d])
                moves.append(("send", d, c, sends))
                sends += 1
                r = colour(OPPOSITE[d], nx, ny)  # ... and receive what that neighbour sends me
                pe.route(r, rx=[d], tx=["RAMP"])
                moves.append(("recv", d, r, 4 + recvs))
                recvs += 1
        inbox = {d: pe.zeros(f"from_{d}", p.k) for kind, d, _, _ in moves if kind == "recv"}
        state = {"done": 0, "step": 0}

        @pe.local_task(id=MAIN)
        def main(t):
            if state["step"] == 0:
                t.mark("start")
            state["done"] = 0
            for i, (kind, d, c, q) in enumerate(moves):
                if kind == "send":
                    t.mov32(
                        pe.fabout(colour=c, length=p.k, queue=q), u, async_=True, activate=11 + i
                    )
                else:
                    t.mov32(
                        inbox[d],
                        pe.fabin(colour=c, length=p.k, queue=q),
                        async_=True,
                        activate=11 + i,
                    )
            if not moves:
                t.activate(COMPUTE)

        def counter(t):
            state["done"] += 1
            if state["done"] == len(moves):
                t.activate(COMPUTE)

        for i in range(len(moves)):
            pe.local_task(id=11 + i)(counter)

        @pe.local_task(id=COMPUTE)
        def compute(t):
            t.fmuls(new, u, p.c0)
            for d in ORDER:
                if d in inbox:
                    t.fmacs(new, new, inbox[d], p.c1)
            t.fmovs(u, new)
            state["step"] += 1
            if state["step"] < p.steps:
                t.activate(MAIN)
            else:
                t.mark("end")

        pe.start(main)

    lay.set_rectangle_code(pe_code)
    return lay


def output(p, wafer, data):
    return np.stack(
        [
            np.stack([data["bufs"][(x, y)].read(wafer.ce(x, y).sram) for x in range(p.px)])
            for y in range(p.py)
        ]
    )


def reference(p, data):
    u = data["u"].copy()
    c0, c1 = np.float32(p.c0), np.float32(p.c1)
    for _ in range(p.steps):
        pad = np.zeros((p.py + 2, p.px + 2, p.k), np.float32)
        pad[1:-1, 1:-1] = u
        near = {"W": pad[1:-1, :-2], "E": pad[1:-1, 2:], "N": pad[:-2, 1:-1], "S": pad[2:, 1:-1]}
        new = u * c0
        for d in ORDER:
            # a boundary PE has no such neighbour and skips the add: adding 0·c1 is exact too
            new = (new + near[d] * c1).astype(np.float32)
        u = new
    return u
