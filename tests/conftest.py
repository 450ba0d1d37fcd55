"""Shared fixtures: tiny systems built directly on the kernel."""

from __future__ import annotations

import pytest

from runner import registry


@pytest.fixture(autouse=True, scope="session")
def _registered() -> None:
    registry.load_all()
