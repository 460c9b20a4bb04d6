"""live.load_snapshot(): the one way tools read the configuration, always validated."""

from __future__ import annotations

import pytest

from providers.models import Provider
from routing.config import live


@pytest.mark.django_db
def test_load_snapshot_builds_the_database_configuration_without_serving_it(imported):
    serving = live.current()
    snap = live.load_snapshot()
    assert set(snap.models) == {"chat-a", "chat-b"} and snap.resolve("fast").id == "chat-a"
    assert snap.version == live.read_version()
    assert live.current() is serving  # a tool's read never replaces what this process serves


@pytest.mark.django_db
def test_load_snapshot_refuses_an_invalid_configuration_listing_every_problem(imported):
    Provider.objects.filter(name="local-a").update(base_url="not-a-url")
    Provider.objects.create(name="other-p", dialect="openai", base_url="ftp://example.com")
    with pytest.raises(live.InvalidConfiguration) as exc:
        live.load_snapshot()
    message = str(exc.value)
    assert message.startswith("the configuration does not validate, fix it first: ")
    assert "providers[local-a].base_url" in message and "providers[other-p].base_url" in message
    assert {e.path for e in exc.value.errors} >= {"providers[local-a].base_url", "providers[other-p].base_url"}
