"""The `created` of /v1/models: when the configuration version served was recorded, read with the
configuration (never 0 once anything is configured, and the same until the configuration changes)."""

from __future__ import annotations

from routing.config import live
from routing.models import ConfigRevision


def test_the_snapshot_carries_when_its_version_was_recorded(imported):
    snapshot, errors, _ = live.load_from_db()
    assert not errors
    newest = ConfigRevision.objects.order_by("-version").first()
    assert newest is not None
    assert snapshot.config_time == int(newest.created_at.timestamp()) > 0
    again, _, _ = live.load_from_db()
    assert again.config_time == snapshot.config_time  # stable while the configuration is unchanged


def test_without_a_recorded_version_the_reload_counters_time_is_used(imported):
    ConfigRevision.objects.all().delete()
    snapshot, _, _ = live.load_from_db()
    assert snapshot.config_time > 0


def test_an_empty_database_says_0(db):
    assert live.read_config_time() == 0
