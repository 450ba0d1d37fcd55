"""MemoryX: capacity, the CSR copy and its delta indices, the optimizers, and the service's
timing (tiers, I/O port, prefetch, update throughput) on a hand-built plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryx.plan import Chunk, Entry
from memoryx.service import MemoryX, MemoryXConfig, Server, TensorData
from memoryx.store import (
    MAX_DELTA,
    CsrTensor,
    DenseTensor,
    Optimizer,
    Placement,
    decode_row,
    encode_row,
    place,
    update_rows,
)
from numerics.floats import round_fp16
from simcore import Component, Simulation
from simcore.errors import ConfigError


# -- capacity ------------------------------------------------------------------------------------
def test_tensors_fill_dram_then_flash_at_20_bytes_per_parameter():
    plc = place([("a", 10), ("b", 10), ("c", 5)], dram_bytes=450, flash_bytes=1000)
    assert plc.tier_of == {"a": "dram", "b": "dram", "c": "flash"}
    assert (plc.dram_used, plc.flash_used) == (400, 100)


def test_overflow_names_the_bytes_needed_and_available():
    with pytest.raises(ConfigError) as err:
        place([("a", 100)], dram_bytes=1000, flash_bytes=500, prefix="memoryx.")
    assert str(err.value) == (
        "config key 'memoryx.flash_bytes' = 500: the model needs 2,000 B in MemoryX (100 "
        "parameters x 20 B) but MemoryX holds 1,500 B (memoryx.dram_bytes = 1,000 + "
        "memoryx.flash_bytes = 500); raise memoryx.flash_bytes or memoryx.dram_bytes to at "
        "least 2,000 B in total, or choose a smaller model"
    )


# -- CSR and delta indices -----------------------------------------------------------------------
def test_gaps_wider_than_16_bits_are_bridged_by_fillers():
    cols = np.array([3, 70_000, 200_000, 200_001])
    deltas, slot = encode_row(cols)
    assert deltas.dtype == np.uint16
    assert deltas.tolist() == [
        3,
        MAX_DELTA,
        70_000 - 3 - MAX_DELTA,
        MAX_DELTA,
        130_000 - MAX_DELTA,
        1,
    ]
    assert decode_row(deltas)[slot].tolist() == cols.tolist()


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 11),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_both_stream_orders_decode_to_the_fp16_masked_weights(rows, cols, density, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    mask = rng.random((rows, cols)) < density
    t = CsrTensor.build(w, mask)
    want = round_fp16(np.where(mask, w, 0))
    lo = int(rng.integers(0, rows))
    assert np.array_equal(t.dense_rows("fwd", lo, rows), want[lo:])
    lo = int(rng.integers(0, cols))
    assert np.array_equal(t.dense_rows("bwd", lo, cols), want.T[lo:])
    assert t.nnz == int(mask.sum())
    vals, deltas = t.stream("fwd", 0, rows)
    assert vals.dtype == np.float16 and deltas.dtype == np.uint16 and vals.size == t.nnz


def test_a_new_mask_re_transposes_the_index_streams():
    w = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    t = CsrTensor.build(w, np.eye(3, 4, dtype=bool))
    old = t.bwd.deltas.copy()
    mask = np.zeros((3, 4), bool)
    mask[:, 3] = True
    t.rebuild(w, mask)
    assert not np.array_equal(old, t.bwd.deltas)
    assert t.dense_rows("bwd", 3, 4).tolist() == [[4.0, 8.0, 12.0]]


def test_gradient_request_is_in_the_forward_index_format():
    t = CsrTensor.build(np.ones((2, 5), np.float32), np.ones((2, 5), bool))
    request = np.array([[0, 1, 0, 0, 1], [1, 0, 0, 0, 0]], bool)
    assert t.mask_stream(0, 2, request).tolist() == [1, 3, 0]


# -- optimizers ----------------------------------------------------------------------------------
def tensor(seed=1):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    mask = rng.random((4, 6)) < 0.6
    t = DenseTensor(w, mask, mask.copy())
    t.g[:] = rng.standard_normal((4, 6)).astype(np.float32)
    return t


def test_sgd_is_w_minus_lr_g_on_the_mask():
    t = tensor()
    w0 = t.w.copy()
    update_rows(t, slice(0, 4), Optimizer(name="sgd", lr=0.5), 1)
    assert np.array_equal(t.w, np.where(t.mask, w0 - np.float32(0.5) * t.g, 0))


def test_adam_matches_its_definition_over_two_steps():
    t = tensor()
    opt = Optimizer(name="adam", lr=0.1, beta1=0.8, beta2=0.9, eps=1e-6)
    w, m, v = t.w.astype(np.float64), np.zeros((4, 6)), np.zeros((4, 6))
    for step in (1, 2):
        g = np.where(t.request, t.g, 0).astype(np.float64)
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        w = w - 0.1 * (m / (1 - 0.8**step)) / (np.sqrt(v / (1 - 0.9**step)) + 1e-6)
        w = np.where(t.mask, w, 0)
        update_rows(t, slice(0, 4), opt, step)
    assert np.allclose(t.w, w, rtol=1e-5, atol=1e-6)


def test_regrowth_adds_weights_whose_gradient_exceeds_the_threshold():
    t = tensor()
    before = t.mask.copy()
    t.regrow(1.0)
    assert np.array_equal(t.mask, before | (np.abs(t.g) > 1.0))


# -- the service ---------------------------------------------------------------------------------
class Wafer(Component):
    """Takes every chunk, records when, and returns a gradient for those that ask."""

    def __init__(self, sim, n, grads, compute_cycles=0):
        super().__init__(sim, "wafer", domain=sim.domain("wafer", 1_000_000_000))
        self.in_port("in")
        self.out_port("out")
        self.n, self.grads, self.compute = n, grads, compute_cycles
        self.arrivals = []

    def start(self):
        self.process(self._run(), "run")

    def _run(self):
        for _ in range(self.n):
            chunk = yield self.ports["in"].get()
            self.arrivals.append(self.env.now)
            if self.compute:
                yield self.env.timeout(self.domain.ticks(self.compute))
            e = chunk.entry
            if e.returns_gradient:
                grad = np.ones((e.ghi - e.glo, 4), np.float32) if chunk.payload else None
                yield self.ports["out"].put(Chunk(e, e.grad_bytes, grad))


def service(entries, cfg, data=None, compute=0):
    sim = Simulation()
    plc = Placement({"w": "dram"}, 0, 0)
    mx = MemoryX(sim, "memoryx", cfg, entries, plc, data)
    wafer = Wafer(sim, len(entries), 0, compute)
    sim.connect(mx.weights, wafer.ports["in"], latency_cycles=10, capacity=2)
    sim.connect(wafer.ports["out"], mx.grads, latency_cycles=10, capacity=2)
    assert sim.run().status == "completed"
    return sim, mx, wafer


def test_chunks_leave_at_the_io_rate_behind_a_tier_read():
    cfg = MemoryXConfig(io_bits_per_s=8e9, dram_bytes_per_s=4e9)  # 1 B/cycle out, 4 in
    entries = [Entry(i, 0, "fwd", "w", "fwd", i, i + 1, 400) for i in range(3)]
    _, _, wafer = service(entries, cfg)
    # chunk 0: read 100 cycles, sent 400 cycles, 10 on the link; the next ones follow the port
    assert wafer.arrivals == [510, 910, 1310]


def test_updates_are_bound_by_the_slower_of_tier_and_alus_and_gate_the_next_step():
    cfg = MemoryXConfig(io_bits_per_s=8e12, dram_bytes_per_s=18e9, update_flops_per_s=2e9)
    e0 = Entry(
        0, 0, "bwd", "w", "fwd", 0, 1, 0, grad_bytes=0, glo=0, ghi=1, key=("w", 0), params=1000
    )
    e1 = Entry(1, 1, "fwd", "w", "fwd", 0, 1, 0, needs=(("w", 0),))
    _, mx, wafer = service([e0, e1], cfg)
    # SGD: 18 B per parameter at 18 B/cycle = 1,000 cycles; 4 flops at 2/cycle = 2,000 cycles
    assert mx.update_ends[0] == 10 + 10 + 2000
    assert mx.tiers["dram"].busy_ticks == 1000 and mx.alu.busy_ticks == 2000
    assert wafer.arrivals[1] == mx.update_ends[0] + 10


def test_real_gradients_update_the_dense_copy_and_the_fp16_stream():
    w = np.zeros((2, 4), np.float32)
    mask = np.ones((2, 4), bool)
    dense = DenseTensor(w, mask, mask.copy())
    data = {"w": TensorData(dense, CsrTensor.build(dense.w, mask))}
    cfg = MemoryXConfig(lr=0.25)
    entries = [
        Entry(0, 0, "bwd", "w", "bwd", 0, 4, 16, grad_bytes=32, glo=0, ghi=2, key=("w", 0),
              params=8),
        Entry(1, 1, "fwd", "w", "fwd", 0, 2, 16, needs=(("w", 0),)),
    ]  # fmt: skip
    _, mx, _ = service(entries, cfg, data)
    assert np.array_equal(mx.data["w"].dense.w, np.full((2, 4), -0.25, np.float32))
    assert np.array_equal(mx.data["w"].csr.dense_rows("fwd", 0, 2), np.full((2, 4), -0.25))


def test_server_counts_whole_cycles_of_its_domain():
    sim = Simulation()
    dom = sim.domain("d", 1_000_000_000)
    sim.domain("other", 3)  # makes the tick finer than the domain's cycle
    sim.check()
    s = Server("s", dom, 3e9)
    assert s.cycles(10) == math.ceil(10 / 3)
    start, end = s.reserve(1, 10)
    assert start == dom.next_edge(1) and end - start == dom.ticks(4)
