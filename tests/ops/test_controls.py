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

from routing.core.breaker import BreakerKey, State, registry
from routing.models import BreakerAction
from routing.ops import controls
from routing.ops.dashboard import feed
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
    assert registry.state(BYO) is State.OPEN and registry.state(SHARED) is State.CLOSED  # its own breaker only
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
    assert registry.state(BYO) is State.CLOSED
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
    assert registry.state(SHARED) is State.OPEN
    assert "could not record breaker action by op-admin" in caplog.text


def test_a_byo_control_from_another_process_reaches_the_byo_breaker(snapshot):
    registry.record_failure(BYO, probe=False, threshold=1, cooldown_s=60)
    control = controls.Control.from_wire({"action": "reset", "key": ["op-a", "op-chat", "org:acme"], "until": None})
    controls.apply_here(control)
    assert registry.state(BYO) is State.CLOSED


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
    assert registry.state(BYO) is State.CLOSED  # the command serves nothing; the servers apply it
    row = BreakerAction.objects.get()
    assert row.model == "op-chat@acme" and row.user.startswith("cli:") and row.reason == "acme maintenance"
