"""Shared test fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _no_background_tasks_in_process() -> Iterator[None]:
    """In-process tests call the ASGI handler directly; the per-process background tasks
    (usage writer, config listener, prober) run in the real servers of tests/e2e."""
    from routing import background, usage

    background.disable()
    yield
    # Records queued by in-process requests belong to no database; never flush them at exit.
    usage.sink.discard()
