"""Text that explains itself: citations, no internal references, no stale claims.

- Every validation case with a published reference figure cites its source (shown by validate).
- The user-facing docs carry no internal issue numbers and no "still landing" placeholders.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner import registry

registry.load_all()
ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


class _AnyMetrics(dict):
    """Metrics of a point, whatever a case reads: each key gives 1."""

    def __missing__(self, key):
        return True if key == "correct" else 1


def _fake_runner(kind, points):
    return [_AnyMetrics() for _ in points]


@pytest.mark.parametrize("name", sorted(registry.CASES))
def test_cases_with_published_figures_cite_them(name):
    case = registry.CASES[name]
    rows = case.run(_fake_runner)
    if any(r.reference is not None for r in rows):
        assert case.source, f"case {name} shows reference figures but cites no source"
    if case.source:
        assert re.search(r"\b(19|20)\d\d\b", case.source), "a citation names its year"


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_docs_have_no_internal_references(path):
    text = path.read_text()
    # "issue #4" is the tracker's; a journal's "vol. 43, issue 3" is a citation.
    assert not re.search(r"\bissue #\d+", text, flags=re.I), f"{path}: internal issue number"
    bare = re.search(r"(?<!, )\bissues? \d+", text, flags=re.I)  # not "vol. 43, issue 3"
    assert not bare, f"{path}: internal issue number {bare.group(0)!r}"
    assert "still landing" not in text
