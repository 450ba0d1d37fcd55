"""Wafer programs shared by the tests that compare fidelities and speed paths."""

from __future__ import annotations

import numpy as np

from pe.program import Layout
from wafer.collectives import Collectives
from wafer.system import Wafer


def chained_row_broadcasts(width: int, height: int, words: int, rounds: int, seed: int):
    """Each row broadcasts from root 0, 1, ..., rounds-1 in turn (the benchmark's pattern)."""
    data = np.random.default_rng(seed).standard_normal((width, words)).astype(np.float32)

    def build(sim, cfg):
        bufs = {}

        def code(pe):
            coll = Collectives(pe)
            buf = pe.array("buf", data[pe.x])
            bufs[(pe.x, pe.y)] = buf
            state = {"root": 0}

            @pe.local_task(id=10)
            def step(t):
                t.mark(f"start{state['root']}")
                coll.x.broadcast(t, state["root"] % width, buf, 11)

            @pe.local_task(id=11)
            def done(t):
                t.mark(f"end{state['root']}")
                state["root"] += 1
                if state["root"] < rounds:
                    t.activate(10)

            pe.start(step)

        layout = Layout(width, height)
        layout.set_rectangle_code(code)
        wafer = Wafer(sim, cfg, layout)
        return wafer, lambda w: {xy: b.read(w.ce(*xy).sram).tolist() for xy, b in bufs.items()}

    return build
