"""The journal of a sweep: results appended one JSON line per point as they arrive, so that a
sweep killed part-way keeps what it has, and results in the one form the journal and the table
both store (:func:`normalise`)."""

from __future__ import annotations

import json
import os
from typing import Any

from sweeps.grid import plain


def normalise(result: dict[str, Any]) -> dict[str, Any]:
    """A result as the journal stores and returns it: the same whether it came from a worker
    just now or from a file written by an earlier, interrupted run."""
    return json.loads(json.dumps(plain(result)))


class Journal:
    """Results appended one JSON line per point as they arrive (``OUTPUT.journal.jsonl``), so
    that a sweep killed part-way keeps what it has. A line cut short by the kill is ignored."""

    def __init__(self, output: str) -> None:
        self.path = output + ".journal.jsonl"
        self._file: Any = None

    def read(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        if os.path.exists(self.path):
            with open(self.path) as f:
                for line in f:
                    try:
                        result = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(result, dict) and "config_hash" in result:
                        found[result["config_hash"]] = result
        return found

    def append(self, result: dict[str, Any]) -> None:
        if self._file is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._file = open(self.path, "a")  # noqa: SIM115 - kept open for the whole sweep
        self._file.write(json.dumps(result) + "\n")
        self._file.flush()

    def close(self, *, remove: bool = False) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if remove and os.path.exists(self.path):
            os.remove(self.path)
