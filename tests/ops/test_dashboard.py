"""The live dashboard: staff-only pages and socket, state, events, controls, counters."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.auth import AuthMiddlewareStack
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client

from routing.core.breaker import State
from routing.models import BreakerAction, UsageRecord
from routing.ops import controls
from routing.ops.dashboard import consumer
from routing.ops.dashboard import state as dashboard_state
from routing.runtime.observe import counters, feed
from routing.runtime.process import current
from tests.core.breakers import breaker_settings

APP = URLRouter(consumer.websocket_urlpatterns)


# --------------------------------------------------------------------------- pages


@pytest.mark.django_db
def test_dashboard_page_is_for_staff_only(client, snapshot, staff_user, plain_user):
    response = client.get("/dashboard/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/?next=/dashboard/")
    client.force_login(plain_user)
    assert client.get("/dashboard/").status_code == 403
    client.force_login(staff_user)
    response = client.get("/dashboard/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-ws-path="/ws/dashboard/"' in html and 'id="link-rows"' in html


@pytest.mark.django_db
def test_dashboard_page_carries_the_current_state(client, snapshot, staff_user):
    current().breakers.force_open(("op-b", "op-chat-b"), "provider maintenance", None)
    client.force_login(staff_user)
    html = client.get("/dashboard/").content.decode()
    start = html.index('<script id="initial-state" type="application/json">') + len(
        '<script id="initial-state" type="application/json">'
    )
    state = json.loads(html[start : html.index("</script>", start)])
    links = {link["link"]: link for link in state["links"]}
    assert links["op-a/op-chat"]["state"] == "closed"
    assert (
        links["op-b/op-chat-b"]["state"] == "forced"
        and links["op-b/op-chat-b"]["forced_reason"] == "provider maintenance"
    )
    assert {p["name"]: p["status"] for p in state["providers"]} == {"op-a": "unknown", "op-b": "unknown"}


@pytest.mark.django_db
def test_usage_summary_is_staff_only_and_aggregates_per_model(client, staff_user, plain_user):
    from django.utils import timezone

    now = timezone.now()
    UsageRecord.objects.create(
        request_id="u1",
        created_at=now,
        endpoint="chat",
        model_used="op-chat",
        status=200,
        prompt_tokens=10,
        completion_tokens=4,
        cost="0.5",
        cache_read_tokens=4,
    )
    UsageRecord.objects.create(
        request_id="u2",
        created_at=now,
        endpoint="chat",
        model_used="op-chat",
        status=502,
        fallback_reason="upstream_5xx",
    )
    UsageRecord.objects.create(
        request_id="u3",
        created_at=now,
        endpoint="chat",
        model_used="op-chat-b",
        status=200,
        prompt_tokens=1,
        completion_tokens=1,
    )
    assert client.get("/dashboard/usage/").status_code == 302
    client.force_login(plain_user)
    assert client.get("/dashboard/usage/").status_code == 403
    client.force_login(staff_user)
    response = client.get("/dashboard/usage/")
    rows = {r["model_used"]: r for r in response.context["rows"]}
    assert rows["op-chat"]["requests"] == 2 and rows["op-chat"]["errors"] == 1 and rows["op-chat"]["fallbacks"] == 1
    assert rows["op-chat"]["prompt_tokens"] == 10 and float(rows["op-chat"]["cost"]) == 0.5
    assert response.context["totals"]["requests"] == 3
    assert rows["op-chat"]["cached_pct"] == "40 %" and rows["op-chat"]["unpriced"] == 0
    assert rows["op-chat-b"]["unpriced"] == 1  # served, tokens, no cost: flagged (docs/metrics.md#spend)
    assert 'data-role="unpriced">1 ⚠' in response.content.decode()
    assert 'data-model="op-chat-b"' in response.content.decode()


@pytest.mark.django_db
def test_admin_index_links_to_the_dashboard(client, django_user_model):
    admin = django_user_model.objects.create_superuser("op-admin", password="pw-admin-123")
    client.force_login(admin)
    html = client.get("/admin/").content.decode()
    assert 'id="dashboard-link" href="/dashboard/"' in html


# --------------------------------------------------------------------------- counters


def test_rolling_counters_give_rates_over_the_window(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(counters, "clock", lambda: now[0])
    model = "rolling-test-model"
    current().counters.stats.pop(model, None)
    for i in range(60):
        counters.note_request(model, 200 if i % 4 else 502, "upstream_5xx" if i % 3 == 0 else None)
    stats = counters.model_stats()[model]
    assert stats["requests"] == 60 and stats["errors"] == 15 and stats["fallbacks"] == 20
    assert stats["rps"] == 1.0 and stats["error_rate"] == 0.25
    now[0] += 120  # two minutes later: out of the req/s window, still in the 5-minute one
    stats = counters.model_stats()[model]
    assert stats["rps"] == 0 and stats["requests"] == 60
    now[0] += 400  # past the window: forgotten
    assert counters.model_stats()[model]["requests"] == 0
    current().counters.stats.pop(model, None)


def test_request_metrics_feed_the_dashboard_counters(snapshot):
    from types import SimpleNamespace

    from routing.runtime import accounting

    for model in ("op-chat", "op-chat-b"):
        current().counters.stats.pop(model, None)
    ctx = accounting.Context("r", 0.0, "chat")
    ctx.requested = ctx.resolved = "op-chat"
    ctx.status = 200
    served = SimpleNamespace(model=snapshot.models["op-chat-b"])
    ctx.outcome = SimpleNamespace(link=served, fallback_reason="upstream_429", error=None, upstream_s=0.0)
    accounting.observe(ctx, 0.25, current().counters)  # the request path hands in its own process's counters
    stats = counters.model_stats()
    # counted for the link that served (chat-b carried the fallback), not the one asked for
    assert "op-chat" not in stats
    assert stats["op-chat-b"]["requests"] == 1 and stats["op-chat-b"]["fallbacks"] == 1
    assert sum(stats["op-chat-b"]["spark"]["req"]) == 1


def test_sparklines_give_requests_errors_and_p50_per_minute(monkeypatch):
    now = [1_000_020.0]  # 20 s into a minute
    monkeypatch.setattr(counters, "clock", lambda: now[0])
    model = "spark-test-model"
    current().counters.stats.pop(model, None)
    for latency_ms in (10, 20, 30, 40, 1000):  # median 30
        counters.note_request(model, 200, None, latency_ms / 1000)
    now[0] += 60 * 3  # three minutes later
    counters.note_request(model, 502, None, 2.0)
    counters.note_request(model, 200, None, None)  # a request without a latency still counts
    spark = counters.model_stats()[model]["spark"]
    assert len(spark["req"]) == counters.SPARK_MINUTES and spark["t0"] % 60 == 0
    assert spark["req"][-4:] == [5, 0, 0, 2] and spark["err"][-4:] == [0, 0, 0, 1]
    assert spark["p50"][-3:-1] == [None, None]  # no traffic, no latency (not zero)
    assert spark["p50"][-4] == pytest.approx(30, rel=0.13) and spark["p50"][-1] == pytest.approx(2000, rel=0.13)
    now[0] += 60 * counters.SPARK_MINUTES  # the whole window later: all forgotten
    assert sum(counters.model_stats()[model]["spark"]["req"]) == 0
    current().counters.stats.pop(model, None)


# --------------------------------------------------------------------------- websocket


async def connect_as(user, headers=None):
    communicator = WebsocketCommunicator(APP, "/ws/dashboard/", headers=headers or [])
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    return communicator, connected, code


async def next_message(communicator, kind, predicate=lambda m: True, tries=20):
    for _ in range(tries):
        message = await communicator.receive_json_from(timeout=2)
        if message["type"] == kind and predicate(message):
            return message
    raise AssertionError(f"no {kind} message")


@pytest.mark.django_db(transaction=True)
async def test_anonymous_and_non_staff_sockets_are_rejected(snapshot, fresh_layer, plain_user):
    from django.contrib.auth.models import AnonymousUser

    for user in (AnonymousUser(), plain_user, None):
        communicator, connected, _ = await connect_as(user)
        # Accepted only to be closed at once with 4403, so the page can say "sign in as staff";
        # no state is ever sent.
        assert connected
        assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_cross_origin_socket_is_rejected(snapshot, fresh_layer, staff_user):
    communicator, connected, code = await connect_as(
        staff_user, [(b"origin", b"http://evil.example"), (b"host", b"gateway.local")]
    )
    assert not connected and code == 4403
    communicator, connected, _ = await connect_as(
        staff_user, [(b"origin", b"http://gateway.local"), (b"host", b"gateway.local")]
    )
    assert connected
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_staff_gets_state_then_breaker_transitions_as_events(snapshot, fresh_layer, staff_user):
    communicator, connected, _ = await connect_as(staff_user)
    assert connected
    state = await communicator.receive_json_from(timeout=2)
    assert state["type"] == "state" and state["process"] == feed.PROCESS_ID
    assert {link["link"]: link["state"] for link in state["links"]} == {
        "op-a/op-chat": "closed",
        "op-b/op-chat-b": "closed",
    }

    for _ in range(3):
        with breaker_settings(current().breakers, 3, 30):
            current().breakers.record_failure(("op-a", "op-chat"), probe=False)
    message = await next_message(communicator, "events", lambda m: any(e["kind"] == "breaker" for e in m["events"]))
    event = next(e for e in message["events"] if e["kind"] == "breaker")
    assert event["link"] == "op-a/op-chat" and event["old"] == "closed" and event["new"] == "open"
    assert message["process"] == feed.PROCESS_ID

    feed.note_fallback("op-chat", "op-chat-b", "circuit_open")
    message = await next_message(communicator, "events", lambda m: any(e["kind"] == "fallback" for e in m["events"]))
    assert message["events"][-1]["to_model"] == "op-chat-b"
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_reset_from_the_socket_resets_the_breaker_and_is_audited(snapshot, fresh_layer, staff_user):
    key = ("op-a", "op-chat")
    with breaker_settings(current().breakers, 1, 60):
        current().breakers.record_failure(key, probe=False)
    assert current().breakers.state(key) is State.OPEN
    communicator, connected, _ = await connect_as(staff_user)
    assert connected
    await communicator.receive_json_from(timeout=2)

    await communicator.send_json_to({"action": "reset", "key": ["op-a", "op-chat"]})
    ack = await next_message(communicator, "ack")
    assert ack["ok"] is True and ack["link"] == "op-a/op-chat"
    assert current().breakers.state(key) is State.CLOSED
    state = await next_message(communicator, "state")
    assert {link["link"]: link["state"] for link in state["links"]}["op-a/op-chat"] == "closed"
    actions = await asyncio.to_thread(lambda: list(BreakerAction.objects.values("user", "provider", "model", "action")))
    assert actions == [{"user": "op-staff", "provider": "op-a", "model": "op-chat", "action": "reset"}]
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_force_open_with_reason_and_minutes(snapshot, fresh_layer, staff_user):
    communicator, connected, _ = await connect_as(staff_user)
    await communicator.receive_json_from(timeout=2)
    await communicator.send_json_to(
        {"action": "force-open", "key": ["op-b", "op-chat-b"], "reason": "vendor incident", "minutes": "15"}
    )
    ack = await next_message(communicator, "ack")
    assert ack["ok"] is True
    view = next(v for v in current().breakers.views() if v.key == ("op-b", "op-chat-b"))
    assert view.forced_reason == "vendor incident" and 14 * 60 < view.cooldown_remaining_s <= 15 * 60
    row = await asyncio.to_thread(lambda: BreakerAction.objects.get())
    assert row.action == "force_open" and row.reason == "vendor incident" and row.expires_at is not None
    state = await next_message(communicator, "state")
    assert {link["link"]: link["state"] for link in state["links"]}["op-b/op-chat-b"] == "forced"
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_bad_controls_are_refused_with_a_reason(snapshot, fresh_layer, staff_user):
    communicator, connected, _ = await connect_as(staff_user)
    await communicator.receive_json_from(timeout=2)
    for bad, words in (
        ({"action": "reset", "key": ["op-a", "nope"]}, "no configured link op-a/nope; reload the page"),
        ({"action": "explode", "key": ["op-a", "op-chat"]}, "unknown action"),
        ({"action": "force_open", "key": ["op-a", "op-chat"], "minutes": "-3"}, "minutes"),
        ({"action": "reset", "key": ["op-a", "op-chat", "org:ghost"]}, "organisation"),
    ):
        await communicator.send_json_to(bad)
        ack = await next_message(communicator, "ack")
        assert ack["ok"] is False and words in ack["message"]
    assert await asyncio.to_thread(BreakerAction.objects.count) == 0
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_real_session_cookie_through_auth_middleware(snapshot, fresh_layer, staff_user, plain_user):
    def cookie_for(user):
        c = Client()
        c.force_login(user)
        return c.cookies["sessionid"].value

    staff_cookie, plain_cookie = (
        await asyncio.to_thread(cookie_for, staff_user),
        await asyncio.to_thread(cookie_for, plain_user),
    )
    app = AuthMiddlewareStack(APP)
    ok = WebsocketCommunicator(app, "/ws/dashboard/", headers=[(b"cookie", f"sessionid={staff_cookie}".encode())])
    connected, _ = await ok.connect()
    assert connected and (await ok.receive_json_from(timeout=2))["type"] == "state"
    await ok.disconnect()
    refused = WebsocketCommunicator(app, "/ws/dashboard/", headers=[(b"cookie", f"sessionid={plain_cookie}".encode())])
    connected, _ = await refused.connect()
    assert connected
    assert await refused.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}


async def test_control_listener_applies_controls_from_other_processes(snapshot, fresh_layer):
    key = ("op-a", "op-chat")
    with breaker_settings(current().breakers, 1, 60):
        current().breakers.record_failure(key, probe=False)
    listener = asyncio.create_task(controls.control_listener())
    try:
        layer = get_channel_layer()
        for _ in range(100):  # wait until the listener has joined its group
            if layer.groups.get(feed.CONTROL_GROUP):
                break
            await asyncio.sleep(0.01)
        await layer.group_send(
            feed.CONTROL_GROUP,
            {
                "type": "control.apply",
                "origin": "other-host:1",
                "control": {"action": "reset", "key": list(key), "reason": "", "until": None},
            },
        )
        for _ in range(100):
            if current().breakers.state(key) is State.CLOSED:
                break
            await asyncio.sleep(0.01)
        assert current().breakers.state(key) is State.CLOSED
    finally:
        listener.cancel()


async def test_broadcaster_publishes_state_to_viewers(snapshot, fresh_layer, settings):
    settings.SWITCHBOARD_DASHBOARD_REFRESH_S = 0.01
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(feed.DASHBOARD_GROUP, channel)
    current().feed.viewers = 1
    task = asyncio.create_task(dashboard_state.run_broadcaster())
    try:
        message = await asyncio.wait_for(layer.receive(channel), timeout=2)
    finally:
        task.cancel()
    assert message["type"] == "dashboard.state" and message["state"]["process"] == feed.PROCESS_ID
    assert {link["link"] for link in message["state"]["links"]} == {"op-a/op-chat", "op-b/op-chat-b"}


@pytest.mark.django_db
def test_breaker_command_fails_when_the_database_cannot_store_the_control(fresh_layer, monkeypatch):
    """Without Redis the stored override is the only way servers learn of it: no silent success."""
    import copy

    from django.core.management import CommandError, call_command
    from django.db import OperationalError

    from routing.config.store import import_document
    from routing.ops import controls
    from tests.ops.conftest import DOCUMENT

    import_document(copy.deepcopy(DOCUMENT))

    def broken(user, control):
        raise OperationalError("database is locked")

    monkeypatch.setattr(controls, "persist", broken)
    with pytest.raises(CommandError) as exc:
        call_command("breaker", "reset", "op-a", "op-chat")
    assert exc.value.returncode == 1 and "could not store the control" in str(exc.value)
    assert "database is locked" in str(exc.value)


@pytest.mark.django_db
def test_breaker_command_publishes_a_validated_control(fresh_layer, monkeypatch):
    from asgiref.sync import async_to_sync
    from channels.layers import InMemoryChannelLayer
    from django.core.management import CommandError, call_command

    from providers.models import Model, Provider

    class SharedLayer(InMemoryChannelLayer):
        """Stands in for the Redis layer: same API, not the in-memory class name."""

    layer = SharedLayer()
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda *a, **k: layer)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(feed.CONTROL_GROUP, channel)
    provider = Provider.objects.create(name="cli-p", dialect="openai", base_url="http://127.0.0.1:9/v1")
    Model.objects.create(public_id="cli-m", provider=provider, upstream_model="x", capabilities=["chat"])

    call_command("breaker", "force-open", "cli-p", "cli-m", "--reason", "planned", "--minutes", "10")
    message = async_to_sync(layer.receive)(channel)
    assert message["type"] == "control.apply"
    assert message["control"]["action"] == "force_open" and message["control"]["key"] == ["cli-p", "cli-m"]
    action = BreakerAction.objects.get()
    assert action.user.startswith("cli:") and action.reason == "planned"

    with pytest.raises(CommandError) as exc:
        call_command("breaker", "reset", "cli-p", "missing")
    assert exc.value.returncode == 2
    # a command has no page to reload: it names the command that lists what exists
    assert str(exc.value).startswith("no configured link cli-p/missing; manage.py export_config lists")
    assert "page" not in str(exc.value)


def test_sync_views_read_breakers_on_the_serving_loop_thread(monkeypatch):
    import threading

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(current().feed, "loop", loop)
    try:
        assert feed.call_on_loop(threading.get_ident) == thread.ident != threading.get_ident()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert feed.call_on_loop(threading.get_ident) == threading.get_ident()  # no serving loop: run here


@pytest.mark.django_db(transaction=True)
async def test_staff_without_the_breaker_permission_may_watch_but_not_act(snapshot, fresh_layer, viewer_user):
    key = ("op-a", "op-chat")
    with breaker_settings(current().breakers, 1, 60):
        current().breakers.record_failure(key, probe=False)
    communicator, connected, _ = await connect_as(viewer_user)
    assert connected
    state = await communicator.receive_json_from(timeout=2)
    assert state["type"] == "state"  # viewing stays staff-only

    for control in ({"action": "reset", "key": list(key)}, {"action": "force_open", "key": ["op-b", "op-chat-b"]}):
        await communicator.send_json_to(control)
        ack = await next_message(communicator, "ack")
        assert ack["ok"] is False and "routing.control_breaker" in ack["message"]
    assert current().breakers.state(key) is State.OPEN
    assert current().breakers.state(("op-b", "op-chat-b")) is State.CLOSED
    assert not await asyncio.to_thread(BreakerAction.objects.exists)

    def grant():
        viewer_user.groups.add(controls.ensure_operators_group())

    await asyncio.to_thread(grant)
    await communicator.disconnect()
    operator = await asyncio.to_thread(lambda: type(viewer_user).objects.get(pk=viewer_user.pk))
    communicator, connected, _ = await connect_as(operator)
    await communicator.receive_json_from(timeout=2)
    await communicator.send_json_to({"action": "reset", "key": list(key)})
    ack = await next_message(communicator, "ack")
    assert ack["ok"] is True
    assert current().breakers.state(key) is State.CLOSED
    await communicator.disconnect()


@pytest.mark.django_db
def test_dashboard_page_disables_controls_for_viewers_only(client, snapshot, staff_user, viewer_user):
    client.force_login(viewer_user)
    assert 'data-can-control="false"' in client.get("/dashboard/").content.decode()
    client.force_login(staff_user)
    assert 'data-can-control="true"' in client.get("/dashboard/").content.decode()
