"""Metrics mean one thing each, whatever the output options.

- ``kernel_events`` (``run``) counts the kernel's events and does not change with ``--quiet``,
  a progress line or a trace; ``trace summary`` counts trace ``records``, a different thing.
- ``blocked_puts`` counts congestion: puts that found every slot of their channel taken. A chain
  whose sink keeps up has none; a slow sink gives some.
"""

from __future__ import annotations

import json

import pytest

from app.cli import main
from simcore import sim as simmod


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["link-chain-backpressure", "wse-bcast"])
def test_kernel_events_do_not_depend_on_output_options(capsys, tmp_path, monkeypatch, name):
    quiet = run_json(capsys, "run", name, "--json", "--quiet")
    # A progress line that prints from the first batch on reads the event counter every batch.
    monkeypatch.setattr(simmod.Progress, "__init__", _eager)
    loud = run_json(capsys, "run", name, "--json")
    traced = run_json(capsys, "run", name, "--json", "--quiet", "--trace",
                      str(tmp_path / "t.arrows"), "--trace-level", "detail")  # fmt: skip
    assert "events" not in quiet
    assert quiet["kernel_events"] == loud["kernel_events"] == traced["kernel_events"] > 0
    assert main(["trace", "summary", str(tmp_path / "t.arrows"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "events" not in summary and summary["records"] > 0


def _eager(self, stream=None, *, after_s=0.0, every_s=0.0):
    import io

    self.stream, self.after_s, self.every_s, self._last, self.printed = io.StringIO(), 0, 0, 0, 0


def test_blocked_puts_means_congestion(capsys):
    free = run_json(capsys, "run", "link-chain", "--json", "--quiet")
    assert free["throughput_items_per_cycle"] == 1.0 and free["blocked_puts"] == 0
    slow = run_json(capsys, "run", "link-chain", "--json", "--quiet",
                    "--set", "sink_interval_cycles=3")  # fmt: skip
    assert slow["blocked_puts"] > 0
