"""Provider health: /health/providers payload, probes, and the probe_providers command."""

from __future__ import annotations

import http.server
import io
import threading

import httpx
import orjson
import pytest
from django.core.management import CommandError, call_command

from providers.models import Provider
from routing.runtime.observe import feed, health, metrics
from routing.runtime.process import current


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        status = {"/v1/ok": 200, "/v1/models": 200, "/v1/broken": 503, "/v1/auth": 401}.get(self.path, 404)
        if self.path == "/v1/auth" and self.headers.get("Authorization") == "Bearer right-key":
            status = 200
        body = b'{"data": []}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def upstream():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(autouse=True)
def clean_results():
    health.results().clear()
    yield
    for name in list(health.results()):
        metrics.provider_status(name, None)
    health.results().clear()


def test_payload_lists_every_provider_as_unknown_before_probing(snapshot):
    data = orjson.loads(health.health_providers_payload(snapshot, current().breakers))
    assert data == {
        "providers": [
            {
                "name": "op-a",
                "status": "unknown",
                "latency_ms": None,
                "checked_at": None,
                "detail": "not probed yet",
                "circuits": [],
            },
            {
                "name": "op-b",
                "status": "unknown",
                "latency_ms": None,
                "checked_at": None,
                "detail": "not probed yet",
                "circuits": [],
            },
        ]
    }


def _spec(snapshot, name, base_url, path="", key=None):
    from dataclasses import replace

    return replace(snapshot.providers[name], base_url=base_url, health_check_path=path, api_key=key)


async def test_probe_statuses(snapshot, upstream, closed_port):
    async with httpx.AsyncClient() as client:
        up = await health.probe_provider(_spec(snapshot, "op-a", upstream, "/ok"), client, 2)
        broken = await health.probe_provider(_spec(snapshot, "op-a", upstream, "/broken"), client, 2)
        wrong_key = await health.probe_provider(_spec(snapshot, "op-a", upstream, "/auth", key="wrong"), client, 2)
        right_key = await health.probe_provider(_spec(snapshot, "op-a", upstream, "/auth", key="right-key"), client, 2)
        default_path = await health.probe_provider(_spec(snapshot, "op-a", upstream), client, 2)
        refused = await health.probe_provider(_spec(snapshot, "op-a", f"http://127.0.0.1:{closed_port}/v1"), client, 2)
    assert up.status == "up" and up.latency_ms is not None and up.checked_at.endswith("Z")
    assert broken.status == "down" and "503" in broken.detail
    assert wrong_key.status == "down" and "credentials" in wrong_key.detail
    assert right_key.status == "up"
    assert default_path.status == "up"  # openai dialect default: GET base_url + /models
    assert refused.status == "down" and refused.latency_ms is None and "cannot reach" in refused.detail


async def test_the_public_payload_says_what_failed_without_the_providers_url(snapshot, upstream, closed_port):
    from dataclasses import replace

    dead = _spec(snapshot, "op-b", f"http://127.0.0.1:{closed_port}/v1")
    broken = _spec(snapshot, "op-a", upstream, "/broken")
    snap = replace(snapshot, providers={"op-a": broken, "op-b": dead})
    await health.probe_all(snap, timeout_s=2)
    assert f"127.0.0.1:{closed_port}" in health.results()["op-b"].detail  # the dashboard's copy: for operators
    text = health.health_providers_payload(snap, current().breakers).decode()
    assert str(closed_port) not in text and upstream not in text and "http" not in text
    rows = {row["name"]: row for row in orjson.loads(text)["providers"]}
    assert rows["op-b"]["status"] == "down" and rows["op-b"]["detail"].startswith("cannot reach its health URL")
    assert rows["op-a"]["detail"] == "HTTP 503 from its health URL"


async def test_probe_all_records_results_metrics_and_dashboard_event(snapshot, upstream, closed_port, fresh_layer):
    from dataclasses import replace

    snap = replace(
        snapshot,
        providers={
            "op-a": _spec(snapshot, "op-a", upstream, "/ok"),
            "op-b": _spec(snapshot, "op-b", f"http://127.0.0.1:{closed_port}/v1"),
        },
    )
    found = await health.probe_all(snap, timeout_s=2)
    assert {r.name: r.status for r in found} == {"op-a": "up", "op-b": "down"}
    payload = orjson.loads(health.health_providers_payload(snap, current().breakers))
    assert [p["status"] for p in payload["providers"]] == ["up", "down"]
    assert metrics.PROVIDER_UP.labels("op-a")._value.get() == 1
    assert metrics.PROVIDER_UP.labels("op-b")._value.get() == 0
    probes = [e for e in feed.events() if e["kind"] == "probe" and e["provider"] in ("op-a", "op-b")]
    assert {e["provider"] for e in probes[-2:]} == {"op-a", "op-b"}


def test_probe_targets_respect_the_switches(snapshot):
    assert health.probe_targets(snapshot, probe_everything=True) == ["op-a", "op-b"]
    assert health.probe_targets(snapshot, probe_everything=False) == []


def _provider(name, base_url, path):
    Provider.objects.create(name=name, dialect="openai", base_url=base_url, health_check_path=path)


@pytest.mark.django_db
def test_probe_providers_exit_0_when_all_up(upstream):
    _provider("alpha", upstream, "/ok")
    out = io.StringIO()
    call_command("probe_providers", "--json", stdout=out)
    data = orjson.loads(out.getvalue())
    assert [(r["name"], r["status"]) for r in data] == [("alpha", "up")]
    assert set(data[0]) == {"name", "status", "latency_ms", "checked_at", "detail"}


@pytest.mark.django_db
def test_probe_providers_exit_1_when_one_is_down(upstream):
    _provider("alpha", upstream, "/ok")
    _provider("beta", upstream, "/broken")
    out = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        call_command("probe_providers", stdout=out)
    assert exc.value.code == 1
    table = out.getvalue()
    assert "PROVIDER" in table and "alpha" in table and "beta" in table and "down" in table and "HTTP 503" in table


@pytest.mark.django_db
def test_probe_providers_only_the_named_provider(upstream):
    _provider("alpha", upstream, "/ok")
    _provider("beta", upstream, "/broken")
    out = io.StringIO()
    call_command("probe_providers", "--provider", "alpha", "--json", stdout=out)
    assert [r["name"] for r in orjson.loads(out.getvalue())] == ["alpha"]


@pytest.mark.django_db
def test_probe_providers_unknown_name_is_a_usage_error(upstream):
    _provider("alpha", upstream, "/ok")
    with pytest.raises(CommandError) as exc:
        call_command("probe_providers", "--provider", "nope")
    assert exc.value.returncode == 2
    assert "unknown provider nope" in str(exc.value) and "alpha" in str(exc.value)


@pytest.mark.django_db
def test_stored_results_are_upserted_and_adopted_only_when_newer(snapshot):
    from providers.models import ProviderProbe

    older = health.ProbeResult("op-a", health.DOWN, None, "2026-01-01T10:00:00Z", "cannot reach it")
    assert health.store_results([older, health.ProbeResult("gone", health.UP, 1.0, "2026-01-01T10:00:00Z", "")]) == 2
    newer = health.ProbeResult("op-a", health.UP, 3.5, "2026-01-01T10:05:00Z", "HTTP 200")
    health.store_results([newer])
    assert ProviderProbe.objects.filter(provider="op-a").count() == 1  # one row per provider

    adopted = health.adopt_stored(snapshot)
    assert adopted == [newer]  # "gone" is not configured: ignored
    assert health.results()["op-a"] == newer
    assert orjson.loads(health.health_providers_payload(snapshot, current().breakers))["providers"][0]["status"] == "up"

    own = health.ProbeResult("op-a", health.DOWN, None, "2026-01-01T10:09:00Z", "HTTP 503")
    health.record_result(own)  # this process probed since
    health.store_results([older])
    assert health.adopt_stored(snapshot) == [] and health.results()["op-a"] == own


@pytest.mark.django_db
def test_probe_providers_stores_its_results_for_the_servers(upstream):
    from providers.models import ProviderProbe

    _provider("alpha", upstream, "/ok")
    call_command("probe_providers", "--json", stdout=io.StringIO())
    row = ProviderProbe.objects.get()
    assert (row.provider, row.status, row.detail) == ("alpha", "up", "HTTP 200")


@pytest.mark.django_db(transaction=True)
async def test_results_published_by_another_process_are_adopted_at_once(snapshot, fresh_layer):
    import asyncio

    from channels.layers import get_channel_layer

    assert health.publish_results([]) is False  # the in-memory layer reaches no other process
    task = asyncio.create_task(health.results_listener())
    try:
        await asyncio.sleep(0.05)  # joined the group
        published = health.ProbeResult("op-b", health.DOWN, None, "2026-01-01T10:00:00Z", "HTTP 503")
        stale = health.ProbeResult("op-a", health.UP, 1.0, "2026-01-01T09:00:00Z", "HTTP 200")
        health.record_result(health.ProbeResult("op-a", health.DOWN, None, "2026-01-01T09:30:00Z", "mine"))
        message = {"type": "health.results", "results": [published.as_dict(), stale.as_dict(), {"bad": 1}]}
        await get_channel_layer().group_send(health.HEALTH_GROUP, message)
        for _ in range(100):
            if "op-b" in health.results():
                break
            await asyncio.sleep(0.02)
        assert health.results()["op-b"] == published
        assert health.results()["op-a"].detail == "mine"  # ours is newer
    finally:
        task.cancel()


def test_health_providers_shows_the_links_requests_find_open_without_naming_orgs(snapshot):
    """docs/api.md#get-healthproviders: an open link, and a link that some org's own view refuses."""
    from routing.core.breaker import BreakerKey

    registry = current().breakers

    threshold, cooldown = snapshot.resilience.breaker_failure_threshold, snapshot.resilience.breaker_cooldown_s
    link, viewed = BreakerKey("op-a", "op-chat"), BreakerKey("op-b", "op-other")
    for _ in range(threshold):
        registry.record_failure(link, 0, None, charges_link=True)
    registry.admit(viewed, "beta")  # beta uses it: acme's failures stay acme's
    for _ in range(threshold):
        registry.record_failure(viewed, 0, "acme")
    try:
        raw = health.health_providers_payload(snapshot, current().breakers)
    finally:
        registry.reset(link)
        registry.reset(viewed)
    by_name = {p["name"]: p for p in orjson.loads(raw)["providers"]}
    (opened,) = by_name["op-a"]["circuits"]
    assert opened["model"] == "op-chat" and opened["state"] == "open" and 0 < opened["cooldown_s"] <= cooldown
    assert by_name["op-b"]["circuits"] == [
        {"model": "op-other", "state": "closed", "cooldown_s": 0.0, "org_views_open": 1}
    ]
    assert b"acme" not in raw  # a public endpoint: no tenant names


async def test_one_provider_whose_health_url_cannot_be_sent_does_not_stop_the_others(snapshot, upstream):
    """A health path with CR/LF (stored before validation refused it) is that provider's "down", not a
    traceback that leaves every provider unprobed."""
    from dataclasses import replace

    snap = replace(
        snapshot,
        providers={
            "op-a": _spec(snapshot, "op-a", upstream, "/ok\r\nX-Injected: 1"),
            "op-b": _spec(snapshot, "op-b", upstream, "/ok"),
        },
    )
    found = {r.name: r for r in await health.probe_all(snap, timeout_s=2)}
    assert found["op-b"].status == "up"
    assert found["op-a"].status == "down" and found["op-a"].detail.startswith("could not probe")
    assert health.results()["op-b"].status == "up"
