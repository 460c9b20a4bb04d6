"""A shared component is degraded while any subsystem using it says so (switchboard_degraded)."""

from __future__ import annotations

import pytest

from routing.config import live


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(live, "degraded", {})
    monkeypatch.setattr(live, "_degraded_by", {})
    monkeypatch.setattr(live, "degraded_listeners", [lambda c, f: calls.append((c, f))])
    return calls


def test_component_stays_degraded_until_every_source_recovers(seen: list[tuple[str, bool]]) -> None:
    live.set_degraded("redis", True, "breakers")
    live.set_degraded("redis", True, "cache")
    live.set_degraded("redis", False, "breakers")  # the cache still cannot reach it
    assert live.degraded["redis"] is True
    live.set_degraded("redis", False, "cache")
    assert live.degraded["redis"] is False
    assert seen == [("redis", True), ("redis", False)]  # one call per change, not per report


def test_components_are_independent_and_a_first_healthy_report_is_announced(seen: list[tuple[str, bool]]) -> None:
    live.set_degraded("database", False)
    live.set_degraded("redis", True, "limits")
    live.set_degraded("database", True)
    assert live.degraded == {"database": True, "redis": True}
    assert seen == [("database", False), ("redis", True), ("database", True)]
