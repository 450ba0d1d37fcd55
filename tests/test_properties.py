"""Properties of the kernel under random configurations and random timing (Hypothesis).

- determinism: the same scenario and seed give a byte-identical trace;
- conservation: every item sent is received exactly once, in order, unchanged;
- back-pressure never drops data and never overfills a channel;
- the link-chain simulation agrees with its closed-form model once the pipeline is full.
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_harness import run_pair

from runner import scenario
from simcore.tracing import TraceLevel
from workloads.kernel import linkchain

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

chain_params = st.fixed_dictionaries(
    {
        "stages": st.integers(1, 6),
        "items": st.integers(1, 300),
        "latency_cycles": st.integers(0, 5),
        "capacity": st.integers(1, 6),
        "items_per_cycle": st.integers(1, 3),
        "pipe": st.booleans(),
        "sink_interval_cycles": st.integers(1, 4),
        "seed": st.integers(0, 2**32),
    }
)


def _run(p: dict, path: str | None = None) -> scenario.RunOutput:
    sc = scenario.find("link-chain")
    params = linkchain.LinkChainParams(**p)
    return scenario.run_scenario(sc, params, trace_path=path, trace_level=TraceLevel.DETAIL)


@FAST
@given(chain_params)
def test_same_seed_same_trace(tmp_path_factory, p):
    d = tmp_path_factory.mktemp("det")
    digests = []
    for name in ("a", "b"):
        _run(p, str(d / f"{name}.arrows"))
        digests.append(hashlib.sha256((d / f"{name}.arrows").read_bytes()).hexdigest())
    assert digests[0] == digests[1]


@FAST
@given(chain_params)
def test_conservation_and_checksum(p):
    out = _run(p)
    assert out.metrics["received_items"] == p["items"]
    assert out.metrics["correct"]


@FAST
@given(
    latency=st.integers(0, 4),
    capacity=st.integers(1, 5),
    width=st.integers(1, 3),
    pipe=st.booleans(),
    src_gaps=st.lists(st.integers(0, 4), min_size=30, max_size=30),
    dst_gaps=st.lists(st.integers(0, 6), min_size=30, max_size=30),
    sink_first=st.booleans(),
)
def test_random_delays_never_drop_or_overfill(
    latency, capacity, width, pipe, src_gaps, dst_gaps, sink_first
):
    log, _, (_, dst, chan) = run_pair(
        latency=latency, capacity=capacity, width=width, pipe=pipe, items=30,
        src_gaps=src_gaps, dst_gaps=dst_gaps, sink_first=sink_first,
    )  # fmt: skip
    assert dst.got == list(range(30))
    accept = {i: c for e, i, c in log if e == "accept"}
    recv = {i: c for e, i, c in log if e == "recv"}
    for i in range(30):
        assert recv[i] >= accept[i] + latency  # latency is never shortened
    # Credits: at no cycle are more than `capacity` items accepted but not yet received.
    for cyc in set(accept.values()):
        in_use = sum(1 for i in range(30) if accept[i] <= cyc < recv[i] + (0 if pipe else 1))
        assert in_use <= capacity + (width if pipe else 0)
    # Width: never more than `width` accepts in one cycle.
    per_cycle: dict[int, int] = {}
    for c in accept.values():
        per_cycle[c] = per_cycle.get(c, 0) + 1
    assert max(per_cycle.values()) <= width
    assert chan.occupancy == 0


@FAST
@given(chain_params.filter(lambda p: p["items"] >= 200))
def test_chain_matches_its_model(p):
    params = linkchain.LinkChainParams(**p)
    sim_cycles = _run(p).metrics["cycles"]
    model_cycles = linkchain.model(params)["cycles"]
    assert abs(sim_cycles - model_cycles) / model_cycles < 0.03
