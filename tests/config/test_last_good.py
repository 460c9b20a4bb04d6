"""A rejected configuration never becomes the last good one, and boot refuses it (in-process).

The last good file (routing/config/lastgood.py) is what a process serves when it boots
while the database is down (docs/usage-records.md#boot-without-the-database): it must
only ever hold a configuration that passed validation. tests/e2e/test_boot.py checks the
refusal with a real server; these run the same paths in-process, in a second.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from routing.config import lastgood, live
from routing.config.validation import validate_document
from tests.config.test_db_errors import failing_queries


def break_the_database_copy() -> None:
    """An edit that bypassed validation (a raw SQL fix, an old release's row)."""
    from providers.models import Model

    Model.objects.filter(public_id="chat-a").update(connect_timeout_ms=0)


@pytest.fixture
def restored() -> Iterator[None]:
    previous = live.current()
    lastgood.path().unlink(missing_ok=True)
    yield
    live.swap(previous)
    live.set_degraded("database", False)
    live.last_error = live.rejected_version = None
    lastgood.path().unlink(missing_ok=True)


@pytest.mark.django_db(transaction=True)
def test_a_rejected_configuration_never_reaches_the_last_good_file_and_a_boot_without_the_database_serves_the_previous(
    imported, restored
):
    assert live.rebuild_from_db("test")
    good = live.current()
    assert lastgood.load() is not None

    break_the_database_copy()
    assert not live.rebuild_from_db("test")  # rejected: still serving the good one
    document, _, version, _, _ = lastgood.load()
    assert validate_document(document) == [], "the last good file holds a configuration validation rejected"
    assert version == good.version

    # A restart while the database is down serves the file: the previous good configuration.
    with failing_queries("providers_model", "connection refused"):
        served = live.boot()
    assert served is not good and served.version == good.version
    assert served.models["chat-a"].timeouts == good.models["chat-a"].timeouts
    assert live.degraded.get("database")


@pytest.mark.django_db(transaction=True)
def test_boot_refuses_an_invalid_configuration_naming_the_field(imported, restored):
    break_the_database_copy()
    with pytest.raises(ImproperlyConfigured) as refused:
        live.boot()
    text = str(refused.value)
    assert "models[chat-a].connect_timeout_ms" in text and "positive whole number" in text, text
    assert "fix it before starting" in text
    assert lastgood.load() is None  # nothing was saved from it
