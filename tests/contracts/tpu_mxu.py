"""The TPU chip's MXUs (:mod:`tpu.chip`) as a subject of the function/timing contract.

A case is one matmul ``[m, k] x [k, n]`` on a chip of a generation, with its B tile shape. The
execution is the real pipeline: a :class:`tpu.chip.TensorChip` copies tiles HBM -> VMEM and its
core multiplies them; the result is the output the job leaves. Its cost is the MXU's busy cycles
(the passes of every tile product), which the timing (:meth:`tpu.chip.Mxu.cycles` over
:func:`tpu.chip.tile_schedule`) gives from the case alone. The function is
:func:`tpu.chip.matmul_function` (bf16 values, float32 sums in schedule order). The MXU has no
fast path: both runs take the same one.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from numerics.floats import round_bf16
from simcore import Component, Simulation
from tests.contracts.function_timing import Run
from tpu.chip import Job, TensorChip, matmul_function, tile_schedule
from tpu.chips import CHIPS


@dataclasses.dataclass(frozen=True)
class MxuCase:
    chip: str
    m: int
    k: int
    n: int
    tile_k: int
    tile_n: int

    def __str__(self) -> str:
        return (
            f"{self.chip} [{self.m},{self.k}]x[{self.k},{self.n}] tiles {self.tile_k}x{self.tile_n}"
        )


class MxuSubject:
    name = "tpu-mxu"

    def cases(self) -> st.SearchStrategy[MxuCase]:
        return st.builds(
            MxuCase,
            chip=st.sampled_from(["v5e", "v5p", "v6e", "v3"]),
            m=st.integers(1, 40),
            k=st.integers(1, 300),
            n=st.integers(1, 300),
            tile_k=st.sampled_from([8, 64, 128]),
            tile_n=st.sampled_from([8, 64, 256]),
        )

    def values(self, case: MxuCase, rng: np.random.Generator, *, specials: bool):
        a = rng.standard_normal((case.m, case.k)).astype(np.float32)
        b = rng.standard_normal((case.k, case.n)).astype(np.float32)
        if specials:
            pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3e38], np.float32)
            for x in (a, b):
                hit = rng.random(x.shape) < 0.1
                x[hit] = rng.choice(pool, size=int(hit.sum()))
        return round_bf16(a), round_bf16(b)

    def _chip(self, case: MxuCase) -> tuple[Simulation, TensorChip]:
        sim = Simulation()
        top = Component(sim, "pod", domain=sim.domain("ici", 1_000_000_000))
        chip = TensorChip(top, "chip", CHIPS[case.chip], tile_k=case.tile_k, tile_n=case.tile_n)
        return sim, chip

    def function(self, case: MxuCase, values) -> np.ndarray:
        a, b = values
        _, chip = self._chip(case)
        return matmul_function(a, b, chip.tiles(Job(case.m, case.k, case.n)))

    def cost(self, case: MxuCase) -> int:
        _, chip = self._chip(case)
        tiles = chip.tiles(Job(case.m, case.k, case.n))
        return sum(
            chip.mxu.cycles(rows, depth, width)
            for _, rows, _, width, _, depth in tile_schedule(tiles, case.m, case.k, case.n)
        )

    def execute(self, case: MxuCase, values, *, fast_path: bool) -> Run:
        a, b = values
        sim, chip = self._chip(case)
        job = Job(case.m, case.k, case.n, a, b)

        class Start(Component):
            def start(self) -> None:
                chip.matmul(job)

        Start(chip, "start")
        sim.run()
        assert job.out is not None
        cycles = chip.mxu.busy_ticks // chip.domain.period_ticks
        return Run(result=job.out, cycles=cycles, memory=job.out.tobytes(), fast=False)

    def fast_path_applies(self, case: MxuCase) -> bool:
        return False
