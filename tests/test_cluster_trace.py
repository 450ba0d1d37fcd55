"""gpt-ws traces carry the pipeline: weights MemoryX -> SwarmX -> each CS-2 and gradients back
as flows (one per hop, every receive with its send), and buffer and link counters in units."""

from __future__ import annotations

import pytest

from app import cli
from traces import read_trace
from traces.layout import counter_unit

POINT = ["model=custom", "layers=1", "hidden=16", "sequence=8", "vocab=32", "heads=2",
         "batch=1", "steps=1"]  # fmt: skip


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("gptws") / "g.arrows"
    args = ["run", "gpt-ws", "--quiet", "--trace", str(path), "--trace-level", "ops"]
    for s in POINT:
        args += ["--set", s]
    assert cli.main(args) == 0
    return read_trace(path).table.to_pylist()


def _sender(rows):
    return {r["flow_out"]: r for r in rows if r["flow_out"] is not None}


def test_every_receive_has_its_send_one_hop_each(rows):
    sends = _sender(rows)
    receives = [r for r in rows if r["flow_in"] is not None]
    assert receives and all(r["flow_in"] in sends for r in receives)
    assert len(sends) == sum(1 for r in rows if r["flow_out"] is not None)  # ids unique


def test_weights_flow_memoryx_swarmx_cs2_and_gradients_back(rows):
    sends = _sender(rows)

    def chain(r):
        out = [r["component"]]
        while r["flow_in"] is not None:
            r = sends[r["flow_in"]]
            out.append(r["component"])
        return out[::-1]

    computes = [r for r in rows if r["category"] == "compute"]
    assert len(computes) == 4 * 20
    for r in computes:  # every chunk a CS-2 computes came from MemoryX through SwarmX
        c = chain(r)
        assert c[0] in ("memoryx/reader", "memoryx/io") and "swarmx/node[1,0]" in c, c
    updates = [r for r in rows if r["category"] == "update"]
    assert updates
    for r in updates:  # every update's gradient came from a CS-2 through its I/O and SwarmX
        c = chain(r)
        assert c[-3:] == ["cs2/cs2[0]/io", "swarmx/node[1,0]", "memoryx/updater"], c
        assert c[0].startswith("memoryx/") and "cs2/cs2[0]" in c


def test_buffer_and_link_counters_have_units(rows):
    counters = {(r["component"], r["name"]) for r in rows if r["phase"] == "counter"}
    assert ("cs2/cs2[0]", "weights_buffer_chunks") in counters
    assert ("swarmx/node[1,0]", "down_link_bytes") in counters
    assert ("swarmx/node[1,0]", "up_link_bytes") in counters
    assert counter_unit("weights_buffer_chunks").unit == "chunks"
    assert counter_unit("down_link_bytes").unit == "bytes"
    link = [r["value"] for r in rows if r["name"] == "down_link_bytes"]
    assert max(link) > 0 and link[-1] == 0.0  # bytes on the link while a chunk crosses it
