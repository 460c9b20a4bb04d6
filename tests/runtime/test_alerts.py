"""Alerts (docs/alerts.md): the `alerts:` section, the payload and its signature, exactly-once delivery
between processes (a real Redis claim, the database's unique key), retries, budget thresholds."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from types import SimpleNamespace

import orjson
import pytest

from routing.config.alert_spec import AlertSpec, build_alerts
from routing.config.store import export_document, import_document
from routing.config.validation import validate_document
from routing.core.breaker import BreakerKey, State
from routing.core.budget_accounts import ORG, Account
from routing.models import AlertDelivery
from routing.runtime.observe import alerts
from routing.runtime.observe.alerts import Alerts, Event, budget_events, payload, request_for
from tests.core.breakers import breaker_settings

EPOCH = 1_780_000_000.0
RULE = AlertSpec(name="ops", kind="webhook", url="http://hooks.test/x", events=frozenset({"breaker_open"}))


def settings(**extra: object) -> SimpleNamespace:
    base = {"REDIS_URL": "", "SWITCHBOARD_ALERT_DEDUPE_S": 60.0, "SWITCHBOARD_ALERT_ATTEMPTS": 3}
    return SimpleNamespace(**{**base, "SWITCHBOARD_ALERT_BACKOFF_S": 1.0, **extra})


def doc(*items: dict) -> dict:
    return {"alerts": list(items)}


# --- the configuration section -------------------------------------------------------------


def test_a_valid_alerts_section_passes_and_every_mistake_is_named():
    ok = {
        "name": "ops",
        "webhook": {"url": "https://hooks.example/x", "secret_env": "SWITCHBOARD_ALERT_SECRET"},
        "events": ["breaker_open", "parked", "shedding", "degraded"],
        "budget_percent": [80, 100],
    }
    assert validate_document(doc(ok)) == []
    errors = validate_document(
        doc(
            {"name": "two", "webhook": {"url": "https://a.example"}, "slack": {"url": "https://b.example"}},
            {"name": "bad", "email": {"to": "ops"}, "events": ["breaker_opened"], "budget_percent": [0, "x"]},
            {"name": "key", "webhook": {"url": "https://a.example", "secret_env": "SECRET_KEY"}},
            {"name": "ops", "slack": {"url": "not a url"}},
        )
    )
    paths = {e.path for e in errors}
    assert "alerts[two]" in paths  # two destinations
    assert {"alerts[bad].email.to", "alerts[bad].events", "alerts[bad].budget_percent"} <= paths
    assert "alerts[key].webhook.secret_env" in paths  # the api_key_env rule: SECRET_KEY may not be read
    assert "alerts[ops].slack.url" in paths
    assert any("exactly one destination" in e.message for e in errors)


@pytest.mark.django_db
def test_alert_rules_import_export_and_the_snapshot_reads_the_secret_from_its_variable():
    rule = {
        "name": "ops",
        "webhook": {"url": "https://hooks.example/x", "secret_env": "SWITCHBOARD_ALERT_SECRET"},
        "events": ["breaker_open"],
        "budget_percent": [80, 100],
    }
    result = import_document({"alerts": [rule, {"name": "mail", "email": {"to": ["ops@example.com"]}}]})
    assert result.created["alert rule"] == 2
    exported = export_document()["alerts"]
    assert exported[1] == rule and exported[0] == {"name": "mail", "email": {"to": ["ops@example.com"]}}
    assert not import_document({"alerts": exported}).changed  # importing an export changes nothing
    specs = build_alerts(export_document(), {"SWITCHBOARD_ALERT_SECRET": "s3cret"})
    assert specs[1].secret == "s3cret" and "s3cret" not in repr(specs[1])
    assert specs[1].wants("budget") and specs[1].wants("breaker_open") and not specs[1].wants("parked")
    import_document({"alerts": [rule]}, prune=True)
    assert [a["name"] for a in export_document()["alerts"]] == ["ops"]


# --- payload and signature ------------------------------------------------------------------


def test_a_webhook_body_is_the_event_json_signed_with_hmac_sha256_of_the_exact_bytes():
    event = Event("breaker_open", EPOCH, {"provider": "p", "model": "m"}, {"n": 1}, "k", 60)
    data = payload(event)
    assert data == {"event": "breaker_open", "at": "2026-05-28T20:26:40Z", "subject": event.subject, "detail": {"n": 1}}
    signed = AlertSpec(name="ops", kind="webhook", url="http://h/x", secret="s3cret")
    body, headers = request_for(signed, data)
    assert json.loads(body) == data
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Switchboard-Signature"] == expected
    assert "s3cret" not in body.decode()
    _, unsigned = request_for(RULE, data)
    assert "X-Switchboard-Signature" not in unsigned  # no secret, no signature
    slack = AlertSpec(name="s", kind="slack", url="http://h/s")
    text = json.loads(request_for(slack, data)[0])["text"]
    assert "breaker_open" in text and "provider=p" in text


# --- exactly once -----------------------------------------------------------------------------


class Recorder:
    """A destination standing in for the network: what each process sent, failing the first `fail` tries."""

    def __init__(self, fail: int = 0) -> None:
        self.sent: list[dict] = []
        self.fail = fail

    async def __call__(self, rule: AlertSpec, data: dict) -> str:
        if self.fail:
            self.fail -= 1
            return "HTTP 503 from the receiver"
        self.sent.append(data)
        return ""


def process_like(rules: tuple[AlertSpec, ...], destination: Recorder, clock: list[float], **extra: object) -> Alerts:
    hub = Alerts(lambda: rules, clock=lambda: clock[0], settings=settings(**extra), sleep=_no_wait)
    hub.send = destination  # type: ignore[method-assign]
    return hub


async def _no_wait(seconds: float) -> None:
    _no_wait.waits.append(seconds)  # type: ignore[attr-defined]


_no_wait.waits = []  # type: ignore[attr-defined]


async def _deliver_all(hub: Alerts) -> list[bool]:
    results = []
    while not hub.queue.empty():
        event = hub.queue.get_nowait()
        for rule in hub.rules():
            if rule.wants(event.event):
                results.append(await hub.deliver(rule, event))
    return results


@pytest.mark.django_db(transaction=True)
def test_two_processes_that_see_one_breaker_open_deliver_one_alert_through_the_database():
    clock = [EPOCH]
    sent = Recorder()
    a, b = process_like((RULE,), sent, clock), process_like((RULE,), sent, clock)
    key = BreakerKey("mock", "chat")
    a.breaker_changed(key, State.CLOSED, State.OPEN)
    a.breaker_changed(key, State.CLOSED, State.OPEN)  # a second transition in the window: not queued again
    clock[0] += 1
    b.breaker_changed(key, State.CLOSED, State.OPEN)
    b.breaker_changed(key, State.HALF_OPEN, State.OPEN)  # a failed probe re-opens: not a new alert
    assert a.queue.qsize() == 1 and b.queue.qsize() == 1

    async def both() -> list[bool]:
        return [*await _deliver_all(a), *await _deliver_all(b)]

    assert sorted(asyncio.run(both())) == [False, True]
    assert len(sent.sent) == 1 and sent.sent[0]["subject"] == {"provider": "mock", "model": "chat"}
    row = AlertDelivery.objects.get()
    assert (row.status, row.attempts, row.event, row.rule) == ("sent", 1, "breaker_open", "ops")
    assert row.payload == sent.sent[0]


@pytest.mark.django_db(transaction=True)
def test_a_redis_claim_lets_one_of_many_concurrent_processes_deliver(redis_url):
    clock = [EPOCH]
    sent = Recorder()
    hubs = [process_like((RULE,), sent, clock, REDIS_URL=redis_url) for _ in range(5)]
    event = Event("breaker_open", EPOCH, {"provider": "mock", "model": "x"}, {}, f"breaker_open|x|{EPOCH}", 60)

    async def race() -> list[bool]:
        try:
            return list(await asyncio.gather(*(hub.deliver(RULE, event) for hub in hubs)))
        finally:
            for hub in hubs:
                await hub.close()

    assert sorted(asyncio.run(race())) == [False] * 4 + [True]
    assert len(sent.sent) == 1
    assert AlertDelivery.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_failing_destination_is_retried_with_exponential_backoff_and_each_attempt_recorded():
    clock = [EPOCH]
    _no_wait.waits.clear()  # type: ignore[attr-defined]
    flaky = Recorder(fail=2)
    hub = process_like((RULE,), flaky, clock, SWITCHBOARD_ALERT_ATTEMPTS=4)
    hub.emit("breaker_open", {"provider": "p", "model": "m"})
    asyncio.run(_deliver_all(hub))
    row = AlertDelivery.objects.get()
    assert (row.status, row.attempts, row.last_error) == ("sent", 3, "")
    assert _no_wait.waits == [1.0, 2.0]  # type: ignore[attr-defined]

    down = Recorder(fail=99)
    hub = process_like((RULE,), down, clock, SWITCHBOARD_ALERT_ATTEMPTS=3)
    hub.emit("breaker_open", {"provider": "p", "model": "other"})
    asyncio.run(_deliver_all(hub))
    row = AlertDelivery.objects.get(event_key__contains="other")
    assert (row.status, row.attempts, row.last_error) == ("failed", 3, "HTTP 503 from the receiver")


def test_nothing_is_queued_when_no_rule_wants_the_event():
    hub = Alerts(lambda: (), settings=settings())
    hub.breaker_changed(BreakerKey("p", "m"), State.CLOSED, State.OPEN)
    hub.shed("queue_full", "default")
    hub.degraded("redis", True)
    assert hub.queue.empty()
    only_parked = AlertSpec(name="p", kind="webhook", url="http://h", events=frozenset({"parked"}))
    hub = Alerts(lambda: (only_parked,), settings=settings())
    hub.breaker_changed(BreakerKey("p", "m"), State.CLOSED, State.OPEN)
    hub.parking_changed(BreakerKey("p", "m"), "PARKED", 1)
    assert hub.queue.qsize() == 1 and hub.queue.get_nowait().event == "parked"


# --- budget thresholds -----------------------------------------------------------------------


def test_each_budget_threshold_is_reported_once_per_period_whatever_the_checks():
    account = Account((ORG, "acme"), 10.0, "month", EPOCH, 0.0)
    seen: set = set()
    account.spent = 7.9
    assert budget_events([account], [80, 100], seen, EPOCH) == []
    account.spent = 8.0
    first = budget_events([account], [80, 100], seen, EPOCH)
    assert [(e.subject, e.detail["threshold_percent"]) for e in first] == [({"kind": "org", "name": "acme"}, 80)]
    assert budget_events([account], [80, 100], seen, EPOCH + 1) == []
    account.spent = 12.0
    assert [e.detail["threshold_percent"] for e in budget_events([account], [80, 100], seen, EPOCH)] == [100]
    # Another process's view of the same crossing names the same event key: the claim dedupes it.
    other = budget_events([account], [80, 100], set(), EPOCH)
    assert {e.key for e in other} == {first[0].key, first[0].key.replace("|80|", "|100|")}
    # A new period is a new event.
    account.roll(10.0, "month", EPOCH + 40 * 86400, lambda key, start: 9.0)
    assert [e.detail["threshold_percent"] for e in budget_events([account], [80], seen, EPOCH + 40 * 86400)] == [80]


@pytest.mark.django_db
def test_the_admin_test_alert_is_sent_and_recorded(monkeypatch):
    calls = []

    async def fake_send(self: Alerts, rule: AlertSpec, data: dict) -> str:
        calls.append(orjson.dumps(data))
        return ""

    monkeypatch.setattr(Alerts, "send", fake_send)
    row = alerts.send_test(RULE)
    assert row.status == "sent" and row.event == "test" and len(calls) == 1


# --- the admin -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_checks_a_rule_sends_a_test_alert_and_lists_deliveries_read_only(admin_client, monkeypatch):
    from django.urls import reverse

    from routing.models import AlertRule

    add = reverse("admin:routing_alertrule_add")
    refused = admin_client.post(add, {"name": "ops", "webhook": '{"url": "http://h/x"}', "slack": '{"url": "http://h/s"}',
                                      "events": '["breaker_open"]', "budget_percent": "[]"})  # fmt: skip
    assert refused.status_code == 200 and "exactly one destination" in refused.content.decode()
    assert not AlertRule.objects.exists()
    created = admin_client.post(add, {"name": "ops", "webhook": '{"url": "http://h/x"}', "slack": "null",
                                      "email": "null", "events": '["breaker_open"]', "budget_percent": "[80]"})  # fmt: skip
    assert created.status_code == 302, created.content.decode()[:2000]
    rule = AlertRule.objects.get()
    sent = []

    async def fake_send(self: Alerts, spec: AlertSpec, data: dict) -> str:
        sent.append((spec.url, data["event"]))
        return ""

    monkeypatch.setattr(Alerts, "send", fake_send)
    changelist = reverse("admin:routing_alertrule_changelist")
    answer = admin_client.post(changelist, {"action": "send_test_alert", "_selected_action": [rule.pk]}, follow=True)
    assert "Test alert sent to ops" in answer.content.decode()
    assert sent == [("http://h/x", "test")]
    row = AlertDelivery.objects.get()
    listing = admin_client.get(reverse("admin:routing_alertdelivery_changelist")).content.decode()
    assert "sent" in listing and "webhook:http://h/x" in listing
    assert admin_client.get(reverse("admin:routing_alertdelivery_add")).status_code == 403
    assert admin_client.post(reverse("admin:routing_alertdelivery_delete", args=[row.pk])).status_code == 403


# --- the composition root's wiring ------------------------------------------------------------


def test_the_process_hands_every_kind_of_event_to_its_alerts_queue(process):
    from dataclasses import replace

    from routing.config import live

    every = AlertSpec(name="all", kind="webhook", url="http://h", events=frozenset(alerts.ALERT_EVENTS))
    before = live.current()
    live.swap(replace(before, alerts=(every,)))
    try:
        key = BreakerKey("mock", "chat")
        with breaker_settings(process.breakers, 1, 30.0):
            process.breakers.record_failure(key, 0, charges_link=True)  # threshold 1: open
        process.parking.park(BreakerKey("mock", "quota"), 60.0, "quota exhausted")
        process.gates.on_shed("queue_full", "default")
        live.set_degraded("redis", True, "alerts-test")
        queued = []
        while not process.alerts.queue.empty():
            queued.append(process.alerts.queue.get_nowait())
        assert [(e.event, e.subject) for e in queued] == [
            ("breaker_open", {"provider": "mock", "model": "chat"}),
            ("parked", {"provider": "mock", "model": "quota"}),
            ("shedding", {"reason": "queue_full"}),
            ("degraded", {"component": "redis"}),
        ]
    finally:
        live.set_degraded("redis", False, "alerts-test")
        live.swap(before)


@pytest.mark.django_db(transaction=True)
def test_a_budget_alert_waits_for_settled_spend_not_leases_and_comes_once_across_processes(redis_url, monkeypatch):
    """Two processes' syncers on one real Redis: one leases most of the budget for a request in flight. The
    budget counter then holds 85 % (leased, not spent) and no 80 % alert may come; once the bills cross 80 %,
    exactly one does, from whichever process sees it first (the Redis claim drops the other's)."""
    import uuid

    from routing.core.budget_accounts import Budgets
    from routing.core.limiter import Limiter
    from routing.runtime.cluster import shared_spend
    from routing.runtime.cluster.shared_limits import Syncer

    monkeypatch.setattr(shared_spend, "query_spend", lambda starts, until=None: {})  # no usage records yet
    clock, namespace, org = [EPOCH], uuid.uuid4().hex[:12], f"a{uuid.uuid4().hex[:10]}"
    rule = AlertSpec(name="fin", kind="webhook", url="http://hooks.test/b", budget_percent=(80,))
    sent = Recorder()

    def process() -> tuple[Syncer, Alerts]:
        syncer = Syncer(Budgets(lambda: clock[0]), Limiter(), redis_url, clock=lambda: clock[0], namespace=namespace)
        syncer.connect()
        return syncer, process_like((rule,), sent, clock, REDIS_URL=redis_url)

    async def admit(p: Syncer, amount: float):
        for _ in range(3):  # as the request path: a round when the lease is short (the first rebuilds the counters)
            try:
                return p.budgets.admit(org, (1.0, "total"), "bot", None, amount)
            except Exception:  # noqa: BLE001 - Exhausted (short): one more round
                await p.sync_once()
        raise AssertionError("not admitted")

    async def check(*processes: tuple[Syncer, Alerts]) -> list[dict]:
        for p, hub in processes:
            await p.sync_once()
            hub.check_budgets(p.budgets)
            await asyncio.gather(*hub.tasks)
        return list(sent.sent)

    async def scenario() -> None:
        a, b = process(), process()
        try:
            big = await admit(a[0], 0.85)  # A leases $0.85 for one request in flight
            small = await admit(b[0], 0.1)
            assert b[0].budgets.find(("org", org)).spend() >= 0.8  # the budget counter: leased, not spent
            assert await check(a, b, a) == []  # nothing billed: no alert
            big.settle(0.5)
            small.settle(0.25)
            assert await check(a, b, a) == []  # $0.75 billed: 75 %, still no alert
            small2 = await admit(b[0], 0.1)
            small2.settle(0.1)  # $0.85 billed
            alerts = await check(b, a, b, a)
            assert len(alerts) == 1, alerts
            assert alerts[0]["detail"]["threshold_percent"] == 80
            assert alerts[0]["detail"]["spent_usd"] == pytest.approx(0.85)
        finally:
            for p, hub in (a, b):
                await p.close()
                await hub.close()

    asyncio.run(scenario())
    assert AlertDelivery.objects.count() == 1


def test_a_budget_threshold_compares_billed_spend_never_leases_or_reservations():
    """Shared mode: the budget counter (spend + leases out) says 100 %, the settled counter 50 % and this process
    settled 25 % since its last round: 75 %, no 80 % alert; 5 % more settled here, and it comes. Without a
    settled counter seen (no round yet this period, no Redis) the records plus this process's spend count."""
    account = Account((ORG, "acme"), 10.0, "month", EPOCH, 2.0)
    account.lease, account.reserved, account.cluster = 1.0, 1.0, 10.0
    assert budget_events([account], [80], set(), EPOCH) == []  # no settled counter seen: $2 of the records
    account.settled, account.spent, account.reported = 5.0, 3.0, 0.5
    assert account.spend() >= 8.0 and account.billed() == pytest.approx(7.5)
    assert budget_events([account], [80], set(), EPOCH) == []
    account.spent += 0.5
    [event] = budget_events([account], [80], set(), EPOCH)
    assert event.detail["spent_usd"] == pytest.approx(8.0)
    account.roll(10.0, "month", EPOCH + 40 * 86400, lambda key, start: 0.0)  # a new period: nothing seen yet
    assert account.settled is None and account.billed() == 0.0
