"""routing.ops.controls: one implementation behind the dashboard, the admin action and the CLI.

Each path applies the control here, broadcasts it to the other processes, puts it in
the feed, audits who did it and logs it; BYO breakers travel as their wire key and are
audited with their "<model>@<org>" label.
"""

from __future__ import annotations

import copy
import logging

import pytest
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.core.management import call_command

from routing.core.breaker import BreakerKey, State
from routing.models import BreakerAction
from routing.ops import controls
from routing.runtime.observe import feed
from routing.runtime.process import current
from tests.core.breakers import breaker_settings
from tests.ops.conftest import DOCUMENT

BYO = BreakerKey("op-a", "op-chat", "acme")
SHARED = BreakerKey("op-a", "op-chat")


def _listen(layer):
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(feed.CONTROL_GROUP, channel)
    return channel


@pytest.mark.django_db
def test_sync_force_open_of_a_byo_breaker_is_applied_broadcast_fed_audited_and_logged(snapshot, fresh_layer, caplog):
    layer = get_channel_layer()
    channel = _listen(layer)
    caplog.set_level(logging.INFO, logger="switchboard.dashboard")

    control = controls.force_open(("op-a", "op-chat", "org:acme"), "op-admin", "acme's key rotated", 20)

    assert control.key == BYO and control.until is not None
    assert (
        current().breakers.state(BYO) is State.OPEN and current().breakers.state(SHARED) is State.CLOSED
    )  # its own breaker only
    message = async_to_sync(layer.receive)(channel)
    assert message["type"] == "control.apply" and message["origin"] == feed.PROCESS_ID
    assert message["control"]["key"] == ["op-a", "op-chat", "org:acme"]
    assert message["control"]["action"] == "force_open" and message["control"]["reason"] == "acme's key rotated"
    event = [e for e in feed.events() if e["kind"] == "control"][-1]
    assert event["link"] == "op-a/op-chat@acme" and event["user"] == "op-admin"
    row = BreakerAction.objects.get()
    assert (row.provider, row.model, row.action, row.user) == ("op-a", "op-chat@acme", "force_open", "op-admin")
    assert row.expires_at is not None
    assert "breaker force_open on op-a/op-chat@acme by op-admin" in caplog.text

    controls.reset(BYO, "op-admin")
    assert current().breakers.state(BYO) is State.CLOSED
    assert list(BreakerAction.objects.order_by("created_at").values_list("action", flat=True)) == [
        "force_open",
        "reset",
    ]


@pytest.mark.django_db
def test_an_audit_failure_does_not_undo_the_control(snapshot, fresh_layer, monkeypatch, caplog):
    def broken(user, control):
        raise RuntimeError("database away")

    monkeypatch.setattr(controls, "audit", broken)
    controls.force_open(SHARED, "op-admin", "maintenance")
    assert current().breakers.state(SHARED) is State.OPEN
    assert "could not record breaker action by op-admin" in caplog.text


def test_a_byo_control_from_another_process_reaches_the_byo_breaker(snapshot):
    with breaker_settings(current().breakers, 1, 60):
        current().breakers.record_failure(BYO, probe=False)
    control = controls.Control.from_wire({"action": "reset", "key": ["op-a", "op-chat", "org:acme"], "until": None})
    controls.apply_here(control)
    assert current().breakers.state(BYO) is State.CLOSED


@pytest.mark.django_db
def test_cli_sends_a_byo_control_without_touching_its_own_breakers(snapshot, fresh_layer, monkeypatch):
    from routing.config.store import import_document

    class SharedLayer(InMemoryChannelLayer):
        """Stands in for the Redis layer: same API, not the in-memory class name."""

    layer = SharedLayer()
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda *a, **k: layer)
    channel = _listen(layer)
    import_document(copy.deepcopy(DOCUMENT))

    call_command("breaker", "force-open", "op-a", "op-chat", "--org", "acme", "--reason", "acme maintenance")

    message = async_to_sync(layer.receive)(channel)
    assert message["control"]["key"] == ["op-a", "op-chat", "org:acme"]
    assert current().breakers.state(BYO) is State.CLOSED  # the command serves nothing; the servers apply it
    row = BreakerAction.objects.get()
    assert row.model == "op-chat@acme" and row.user.startswith("cli:") and row.reason == "acme maintenance"


@pytest.mark.django_db
def test_cli_without_a_shared_layer_stores_the_control_and_bumps_the_version(snapshot, fresh_layer):
    from routing.config import live
    from routing.config.store import import_document
    from routing.models import BreakerOverride

    import_document(copy.deepcopy(DOCUMENT))
    before = live.read_version()

    call_command("breaker", "force-open", "op-a", "op-chat", "--reason", "db maintenance", "--minutes", "30")

    row = BreakerOverride.objects.get()
    assert (row.provider, row.model, row.org, row.action, row.reason) == (
        "op-a",
        "op-chat",
        "",
        "force_open",
        "db maintenance",
    )
    assert row.user.startswith("cli:") and row.until is not None
    assert live.read_version() == before + 1 == row.revision  # every server reloads and applies it
    assert current().breakers.state(SHARED) is State.CLOSED  # the command serves nothing itself

    call_command("breaker", "reset", "op-a", "op-chat")
    row = BreakerOverride.objects.get()  # still one row per breaker: the last word
    assert row.action == "reset" and row.until is None and live.read_version() == before + 2
    overrides = live.load_snapshot().overrides
    assert [(o.key, o.action) for o in overrides] == [(SHARED, "reset")]


def test_stored_overrides_are_applied_once_per_revision(snapshot):
    import time

    from routing.config.overrides import Override

    known = {SHARED, BYO}
    forced = Override(SHARED, "force_open", "cli:op", "maintenance", None, 11)
    expired = Override(BYO, "force_open", "cli:op", "old", time.time() - 5, 12)
    gone = Override(BreakerKey("op-x", "gone"), "force_open", "cli:op", "", None, 13)
    controls._applied.clear()

    assert controls.apply_persisted((forced, expired, gone), known) == 1
    assert current().breakers.state(SHARED) is State.OPEN and current().breakers.state(BYO) is State.CLOSED
    assert current().breakers.state(BreakerKey("op-x", "gone")) is State.CLOSED

    current().breakers.reset(SHARED)  # e.g. the dashboard's reset broadcast: the same revision is not re-applied
    assert controls.apply_persisted((forced,), known) == 0 and current().breakers.state(SHARED) is State.CLOSED

    current().breakers.force_open(SHARED, "x", None)
    reset = Override(SHARED, "reset", "cli:op", "", None, 14)
    assert controls.apply_persisted((reset,), known) == 1 and current().breakers.state(SHARED) is State.CLOSED
    controls._applied.clear()
