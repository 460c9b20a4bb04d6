"""Shared test fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _no_background_tasks_in_process() -> None:
    """In-process tests call the ASGI handler directly; the per-process background tasks
    (usage writer, config listener, prober) run in the real servers of tests/e2e."""
    from routing import background

    background.disable()
