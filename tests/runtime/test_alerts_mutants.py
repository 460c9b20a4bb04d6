"""Alerts, pinned down where the broader tests in test_alerts.py leave room: the exact text a webhook,
Slack channel or mailbox receives, the event keys and claims that make delivery exactly-once, the
dedupe window's edges, the retry schedule, and what each hand-off does from another thread."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading
from types import SimpleNamespace

import httpx
import orjson
import pytest
from django.core import mail
from django.db import DatabaseError

from routing.config.alert_spec import AlertSpec
from routing.core.breaker import BreakerKey, State
from routing.core.budget_accounts import ORG, Account
from routing.models import AlertDelivery
from routing.runtime.cluster import process_list
from routing.runtime.observe import alerts
from routing.runtime.observe.alerts import Alerts, Event, budget_events, payload, request_for, sign, slack_text

EPOCH = 1_780_000_000.0  # 2026-05-28T20:26:40Z
HOOK = AlertSpec(name="ops", kind="webhook", url="http://hooks.test/x?token=t", events=frozenset({"breaker_open"}))
MAIL = AlertSpec(name="mail", kind="email", to=("a@example.com", "b@example.com"), events=frozenset({"parked"}))


def settings(**extra: object) -> SimpleNamespace:
    base = {"REDIS_URL": "", "SWITCHBOARD_ALERT_DEDUPE_S": 60.0, "SWITCHBOARD_ALERT_ATTEMPTS": 3}
    return SimpleNamespace(**{**base, "SWITCHBOARD_ALERT_BACKOFF_S": 1.0, **extra})


def hub_for(*rules: AlertSpec, clock: list[float] | None = None, **extra: object) -> Alerts:
    times = clock if clock is not None else [EPOCH]
    return Alerts(lambda: rules, clock=lambda: times[0], settings=settings(**extra), sleep=Waits())


class Waits:
    """The retry pauses a delivery asked for, without waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class Destination:
    """Stands in for the network: each attempt's data, answering from `answers` (then "")."""

    def __init__(self, *answers: str) -> None:
        self.sent: list[dict] = []
        self.rules: list[AlertSpec] = []
        self.answers = list(answers)

    async def __call__(self, rule: AlertSpec, data: dict) -> str:
        self.sent.append(data)
        self.rules.append(rule)
        return self.answers.pop(0) if self.answers else ""


def queued(hub: Alerts) -> list[Event]:
    out = []
    while not hub.queue.empty():
        out.append(hub.queue.get_nowait())
    return out


# --- what a destination receives ------------------------------------------------------------------


def test_the_payload_slack_text_and_signature_are_exact():
    event = Event("breaker_open", EPOCH + 0.5, {"provider": "p", "model": "m"}, {"n": 1, "why": "x"}, "k", 60)
    assert event.claim == "k"  # no claim given: the key is the claim
    data = payload(event)
    assert data == {
        "event": "breaker_open",
        "at": "2026-05-28T20:26:40.500000Z",
        "subject": {"provider": "p", "model": "m"},
        "detail": {"n": 1, "why": "x"},
    }
    assert (
        slack_text(data)
        == "*Switchboard: breaker_open* provider=p, model=m (n=1, why=x) at 2026-05-28T20:26:40.500000Z"
    )
    bare = {**data, "detail": {}}
    assert slack_text(bare) == "*Switchboard: breaker_open* provider=p, model=m at 2026-05-28T20:26:40.500000Z"
    body = b'{"a":1}'
    assert sign("s3cret", body) == "sha256=" + __import__("hmac").new(b"s3cret", body, hashlib.sha256).hexdigest()


def test_request_headers_for_a_webhook_and_a_slack_channel():
    data = payload(Event("parked", EPOCH, {"provider": "p"}, {}, "k", 60))
    body, headers = request_for(HOOK, data)
    assert orjson.loads(body) == data
    assert headers == {"Content-Type": "application/json", "User-Agent": "switchboard-alerts"}
    signed = AlertSpec(name="s", kind="webhook", url="http://h/x", secret="k3y")
    body, headers = request_for(signed, data)
    assert headers == {
        "Content-Type": "application/json",
        "User-Agent": "switchboard-alerts",
        "X-Switchboard-Signature": sign("k3y", body),
    }
    slack = AlertSpec(name="s", kind="slack", url="http://h/s", secret="ignored")
    body, headers = request_for(slack, data)
    assert orjson.loads(body) == {"text": slack_text(data)}
    assert headers == {"Content-Type": "application/json"}


def test_an_email_alert_names_the_event_and_subject_and_carries_the_json(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.DEFAULT_FROM_EMAIL = "gateway@example.com"
    mail.outbox.clear()
    data = payload(Event("parked", EPOCH, {"provider": "p", "model": "m" * 300}, {"n": 2}, "k", 60))
    alerts.send_email(MAIL, data)
    [message] = mail.outbox
    assert message.subject == ("[Switchboard] parked: p, " + "m" * 300)[:200]
    assert message.body == orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    assert message.to == ["a@example.com", "b@example.com"]
    assert message.from_email == "gateway@example.com"


def test_a_delivery_key_is_the_event_key_and_the_rule_within_the_column():
    event = Event("budget", EPOCH, {}, {}, "k" * 300, 60)
    assert alerts.delivery_key(Event("x", EPOCH, {}, {}, "key", 60), HOOK) == "key|ops"
    assert alerts.delivery_key(event, HOOK) == "k" * 255


# --- budget thresholds ------------------------------------------------------------------------------


def test_a_budget_event_names_its_account_threshold_and_period_exactly():
    account = Account(("agent", "acme", "bot"), 10.0, "month", EPOCH, 0.0)
    account.spent = 8.00000012
    now = EPOCH + 5
    [event] = budget_events([account], [80, 80], set(), now)
    assert (event.event, event.at, event.subject) == ("budget", now, {"kind": "agent", "name": "acme/bot"})
    assert event.detail == {"threshold_percent": 80, "spent_usd": 8.0, "budget_usd": 10.0, "period": "month"}
    assert event.key == event.claim == f"budget|agent/acme/bot|80|{int(account.start)}"
    assert event.ttl_s == account.end - now + 3600  # the claim outlives the period by an hour


def test_a_budget_claim_lives_at_least_a_minute_and_a_total_budget_for_400_days():
    month = Account((ORG, "acme"), 10.0, "month", EPOCH, 9.0)
    [late] = budget_events([month], [80], set(), month.end + 3600 - 30)  # checked just after the period, not rolled yet
    assert late.ttl_s == 60.0
    total = Account((ORG, "acme"), 10.0, "total", EPOCH, 9.0)
    [forever] = budget_events([total], [80], set(), EPOCH)
    assert forever.ttl_s == 400 * 86400


def test_thresholds_are_reported_lowest_first_exactly_at_the_mark_and_not_below():
    account = Account((ORG, "acme"), 10.0, "month", EPOCH, 0.0)
    account.spent = 7.95  # 79.5 %
    assert budget_events([account], [80], set(), EPOCH) == []
    tiny = Account((ORG, "tiny"), 0.3, "month", EPOCH, 0.24)  # 80 % up to floating point
    assert [e.detail["threshold_percent"] for e in budget_events([tiny], [80], set(), EPOCH)] == [80]
    account.spent = 10.0
    levels = [e.detail["threshold_percent"] for e in budget_events([account], [64, 7], set(), EPOCH)]
    assert levels == [7, 64]


def test_an_account_without_a_budget_amount_reports_nothing_and_others_still_do():
    free = Account((ORG, "free"), 0.0, "month", EPOCH, 5.0)
    paid = Account((ORG, "paid"), 1.0, "month", EPOCH, 5.0)
    events = budget_events([free, paid], [80], set(), EPOCH)
    assert [e.subject["name"] for e in events] == ["paid"]


# --- the hand-off --------------------------------------------------------------------------------


def test_settings_the_hub_reads_and_their_defaults():
    hub = Alerts(lambda: (), settings=SimpleNamespace())
    assert (hub.dedupe_s, hub.attempts, hub.backoff_s, hub.timeout_s, hub.budget_check_s) == (60.0, 5, 1.0, 5.0, 0.5)
    assert hub.redis_url == "" and hub.queue.maxsize == 1000 and hub.dropped == 0
    hub = Alerts(
        lambda: (),
        settings=SimpleNamespace(
            REDIS_URL=None,
            SWITCHBOARD_ALERT_DEDUPE_S="30",
            SWITCHBOARD_ALERT_ATTEMPTS="2",
            SWITCHBOARD_ALERT_BACKOFF_S="0.25",
            SWITCHBOARD_ALERT_TIMEOUT_S="3",
            SWITCHBOARD_ALERT_BUDGET_CHECK_S="0.1",
            SWITCHBOARD_ALERT_QUEUE="7",
        ),
    )
    assert (hub.dedupe_s, hub.attempts, hub.backoff_s, hub.timeout_s, hub.budget_check_s) == (30.0, 2, 0.25, 3.0, 0.1)
    assert hub.redis_url == "" and hub.queue.maxsize == 7


def test_the_default_rules_are_the_live_snapshots():
    from dataclasses import replace

    from routing.config import live

    before = live.current()
    live.swap(replace(before, alerts=(HOOK,)))
    try:
        assert Alerts(settings=settings()).rules() == (HOOK,)
    finally:
        live.swap(before)


def test_an_event_is_keyed_by_subject_and_window_and_repeats_wait_out_the_window():
    clock = [EPOCH]
    every = AlertSpec(name="all", kind="webhook", url="http://h", events=frozenset(alerts.ALERT_EVENTS))
    hub = hub_for(every, clock=clock)
    hub.emit("shedding", {"reason": "queue_full", "lane": "b"})
    clock[0] += 59.9
    hub.emit("shedding", {"reason": "queue_full", "lane": "b"})  # inside the window: dropped here
    clock[0] = EPOCH + 60.0
    hub.emit("shedding", {"reason": "queue_full", "lane": "b"}, {"priority": "low"})  # the window's end: again
    hub.emit("shedding", {"reason": "queue_full", "lane": "b"}, episode="ep-7")  # still in the new window
    first, second = queued(hub)
    window = math.floor(EPOCH / 60.0)
    assert (first.event, first.at, first.subject, first.detail) == ("shedding", EPOCH, first.subject, {})
    assert first.key == f"shedding|reason=queue_full|lane=b|{window}"
    assert first.claim == "shedding|reason=queue_full|lane=b" and first.ttl_s == 60.0
    assert second.key == f"shedding|reason=queue_full|lane=b|{math.floor((EPOCH + 60) / 60.0)}"
    assert second.detail == {"priority": "low"}
    clock[0] += 600
    hub.emit("degraded", {"component": "db"}, episode="ep-7")
    [third] = queued(hub)
    assert third.key == "degraded|component=db|ep-7"


def test_a_full_queue_drops_the_event_counts_it_and_says_so(caplog):
    every = AlertSpec(name="all", kind="webhook", url="http://h", events=frozenset(alerts.ALERT_EVENTS))
    hub = hub_for(every, SWITCHBOARD_ALERT_QUEUE=1)
    caplog.set_level(logging.WARNING, "switchboard.alerts")
    hub.emit("degraded", {"component": "redis"})
    hub.emit("shedding", {"reason": "x"})
    hub.emit("parked", {"link": "y"})
    assert hub.queue.qsize() == 1 and hub.dropped == 2
    assert "alert queue full: dropped the parked alert (2 dropped so far)" in caplog.messages


def test_listeners_turn_transitions_into_events():
    every = AlertSpec(name="all", kind="webhook", url="http://h", events=frozenset(alerts.ALERT_EVENTS))
    hub = hub_for(every)
    key = BreakerKey("p", "m")
    hub.breaker_changed(key, State.CLOSED, State.HALF_OPEN)
    hub.breaker_changed(key, State.HALF_OPEN, State.OPEN)
    hub.breaker_changed(BreakerKey("p", "m", "org:acme"), State.CLOSED, State.OPEN)
    hub.breaker_changed(key, State.OPEN, State.CLOSED)
    hub.breaker_changed("solo", State.HALF_OPEN, State.CLOSED)
    hub.breaker_changed(("only",), State.CLOSED, State.CLOSED)
    hub.parking_changed(key, "PARKED", 0)
    hub.parking_changed(key, "WAITING", 1)
    hub.parking_changed(("q",), "PARKED", 1)
    hub.degraded("redis", False)
    hub.degraded("database", True)
    hub.shed("queue_full", "high")
    assert [(e.event, e.subject, e.detail) for e in queued(hub)] == [
        ("breaker_open", {"provider": "p", "model": "m"}, {}),
        ("breaker_closed", {"provider": "p", "model": "m"}, {}),
        ("breaker_closed", {"link": "solo"}, {}),
        ("parked", {"link": "('q',)"}, {}),
        ("degraded", {"component": "database"}, {}),
        ("shedding", {"reason": "queue_full"}, {"priority": "high"}),
    ]


def test_an_emit_from_another_thread_waits_for_the_serving_loop_and_one_after_it_closed_is_queued():
    hub = hub_for(HOOK)
    loop = asyncio.new_event_loop()

    async def bind() -> None:
        hub.bind()

    loop.run_until_complete(bind())
    assert hub.loop is loop and hub.thread == threading.get_ident()

    def elsewhere(model: str) -> None:
        worker = threading.Thread(target=hub.breaker_changed, args=(BreakerKey("p", model), State.CLOSED, State.OPEN))
        worker.start()
        worker.join(5)

    try:
        elsewhere("a")
        assert hub.queue.empty()  # handed to the loop, not touched from the other thread
        loop.run_until_complete(asyncio.sleep(0))
        assert [e.subject["model"] for e in queued(hub)] == ["a"]
        hub.breaker_changed(BreakerKey("p", "b"), State.CLOSED, State.OPEN)  # the loop's own thread: at once
        assert [e.subject["model"] for e in queued(hub)] == ["b"]
    finally:
        loop.close()
    elsewhere("c")  # the loop is gone: straight into the queue
    assert [e.subject["model"] for e in queued(hub)] == ["c"]


# --- the background task ----------------------------------------------------------------------------


def test_the_task_delivers_queued_events_and_checks_budgets_once_per_crossing():
    rule = AlertSpec(name="ops", kind="webhook", url="http://h", events=frozenset({"parked"}), budget_percent=(50,))
    quiet = AlertSpec(name="quiet", kind="webhook", url="http://q")
    account = Account((ORG, "acme"), 1.0, "month", EPOCH, 0.9)
    budgets = SimpleNamespace(accounts=lambda: [account])
    hub = hub_for(rule, quiet, SWITCHBOARD_ALERT_BUDGET_CHECK_S=0.01)
    delivered: list[tuple[str, str]] = []

    async def deliver(spec: AlertSpec, event: Event) -> bool:
        delivered.append((spec.name, event.event))
        return True

    hub.deliver = deliver  # type: ignore[method-assign]

    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(hub.run(budgets))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)  # nothing queued: the budgets are checked all the same
        hub.parking_changed(("p", "m"), "PARKED", 1)
        await asyncio.sleep(0.1)
        assert hub.loop is asyncio.get_running_loop() and hub.thread == threading.get_ident()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not hub.tasks  # each delivery task forgets itself when done

    asyncio.run(scenario())
    assert delivered == [("ops", "budget"), ("ops", "parked")]


def test_the_task_without_budgets_only_delivers():
    hub = hub_for(HOOK, SWITCHBOARD_ALERT_BUDGET_CHECK_S=0.01)

    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(hub.run())
        await asyncio.sleep(0.05)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_budgets_are_not_read_when_no_rule_has_a_threshold():
    hub = hub_for(HOOK)
    hub.check_budgets(SimpleNamespace(accounts=lambda: pytest.fail("read without a threshold")))  # type: ignore[arg-type]


# --- delivery ------------------------------------------------------------------------------------


def claiming(hub: Alerts, answer: bool | None) -> list[tuple[str, float]]:
    asked: list[tuple[str, float]] = []

    async def claim(key: str, ttl_s: float) -> bool | None:
        asked.append((key, ttl_s))
        return answer

    hub.claim = claim  # type: ignore[method-assign]
    return asked


def event_for(model: str = "m") -> Event:
    return Event(
        "breaker_open", EPOCH, {"provider": "p", "model": model}, {}, f"breaker_open|{model}|1", 90, claim=model
    )


@pytest.mark.django_db(transaction=True)
def test_a_lost_claim_sends_nothing_and_a_won_one_sends_once_with_its_row():
    hub = hub_for(HOOK)
    asked = claiming(hub, False)
    hub.send = Destination()  # type: ignore[method-assign]
    assert asyncio.run(hub.deliver(HOOK, event_for())) is False
    assert asked == [("m|ops", 90)] and hub.send.sent == [] and not AlertDelivery.objects.exists()

    claiming(hub, True)
    assert asyncio.run(hub.deliver(HOOK, event_for())) is True
    assert len(hub.send.sent) == 1 and hub.send.rules == [HOOK]
    row = AlertDelivery.objects.get()
    assert (row.event_key, row.status, row.attempts, row.last_error) == ("breaker_open|m|1|ops", "sent", 1, "")
    assert row.destination == "webhook:http://hooks.test/x" and row.sent_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_won_claim_still_sends_when_the_database_is_down():
    hub = hub_for(HOOK)
    claiming(hub, True)
    hub.send = Destination()  # type: ignore[method-assign]

    async def down(fn, *args):
        raise DatabaseError("gone")

    hub.in_thread = down  # type: ignore[method-assign]
    assert asyncio.run(hub.deliver(HOOK, event_for())) is True
    assert len(hub.send.sent) == 1


@pytest.mark.django_db(transaction=True)
def test_without_a_claim_a_taken_event_key_means_someone_else_delivers():
    AlertDelivery.objects.create(event_key="breaker_open|m|1|ops", event="x", rule="ops", destination="d",
                                 created_at="2026-01-01T00:00:00Z")  # fmt: skip
    hub = hub_for(HOOK)
    claiming(hub, None)
    hub.send = Destination()  # type: ignore[method-assign]
    assert asyncio.run(hub.deliver(HOOK, event_for())) is False
    assert hub.send.sent == []


@pytest.mark.django_db(transaction=True)
def test_retries_back_off_exponentially_up_to_five_minutes_and_the_last_failure_is_logged(caplog):
    hub = hub_for(HOOK, SWITCHBOARD_ALERT_ATTEMPTS=5, SWITCHBOARD_ALERT_BACKOFF_S=100.0)
    claiming(hub, True)
    hub.send = Destination(*["HTTP 500 from x"] * 9)  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, "switchboard.alerts")
    assert asyncio.run(hub.deliver(HOOK, event_for())) is True
    assert len(hub.send.sent) == 5
    assert hub.sleep.waits == [100.0, 200.0, 300.0, 300.0]  # type: ignore[attr-defined]
    row = AlertDelivery.objects.get()
    assert (row.status, row.attempts, row.last_error, row.sent_at) == ("failed", 5, "HTTP 500 from x", None)
    assert "alert breaker_open to ops failed after 5 attempts: HTTP 500 from x" in caplog.messages


@pytest.mark.django_db(transaction=True)
def test_a_delivery_that_succeeds_on_a_retry_logs_nothing(caplog):
    hub = hub_for(HOOK, SWITCHBOARD_ALERT_ATTEMPTS=3)
    claiming(hub, None)
    hub.send = Destination("HTTP 502 from x")  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, "switchboard.alerts")
    assert asyncio.run(hub.deliver(HOOK, event_for())) is True
    assert len(hub.send.sent) == 2 and hub.sleep.waits == [1.0]  # type: ignore[attr-defined]
    assert hub.send.rules == [HOOK, HOOK]
    row = AlertDelivery.objects.get()
    assert (row.status, row.attempts, row.last_error) == ("sent", 2, "")
    assert "failed after" not in caplog.text


class FakeRedis:
    def __init__(self, answer: object = True) -> None:
        self.answer = answer
        self.calls: list[tuple] = []
        self.closed = False

    async def set(self, name: str, value: str, nx: bool, ex: int) -> object:
        if isinstance(self.answer, Exception):
            raise self.answer
        self.calls.append((name, value, nx, ex))
        return self.answer

    async def aclose(self) -> None:
        self.closed = True


def test_a_redis_claim_is_set_nx_with_the_ttl_rounded_up_under_the_clusters_name(monkeypatch):
    import redis.asyncio as aioredis

    made: list[tuple[str, dict]] = []
    fake = FakeRedis(True)

    def from_url(url: str, **kwargs: object) -> FakeRedis:
        made.append((url, kwargs))
        return fake

    monkeypatch.setattr(aioredis.Redis, "from_url", from_url)
    hub = hub_for(HOOK, REDIS_URL="redis://r:6379/0", SWITCHBOARD_ALERT_TIMEOUT_S=2.5)
    assert asyncio.run(hub.claim("k|ops", 59.2)) is True
    fake.answer = None  # NX: someone holds it
    assert asyncio.run(hub.claim("k|ops", 0.2)) is False
    assert made == [("redis://r:6379/0", {"socket_timeout": 2.5, "socket_connect_timeout": 2.5})]
    name = f"switchboard:alerts:{process_list.cluster_name()}:{hashlib.sha256(b'k|ops').hexdigest()}"
    assert fake.calls == [(name, "1", True, 60), (name, "1", True, 1)]
    asyncio.run(hub.close())
    assert fake.closed


def test_redis_down_leaves_the_claim_to_the_database(caplog):
    hub = hub_for(HOOK, REDIS_URL="redis://r:6379/0")
    hub.redis = FakeRedis(ConnectionError("refused"))
    caplog.set_level(logging.WARNING, "switchboard.alerts")
    assert asyncio.run(hub.claim("k", 60)) is None
    assert caplog.messages == ["alert claim in Redis failed (refused): the database decides"]
    assert asyncio.run(hub_for(HOOK).claim("k", 60)) is None  # no Redis configured


def client_answering(status: int | Exception, seen: list[httpx.Request]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if isinstance(status, Exception):
            raise status
        return httpx.Response(status)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def test_a_webhook_attempt_posts_the_body_and_reads_the_status():
    data = payload(event_for())
    seen: list[httpx.Request] = []
    hub = hub_for(HOOK)
    hub.client = client_answering(299, seen)
    assert asyncio.run(hub.send(HOOK, data)) == ""
    assert str(seen[0].url) == HOOK.url and seen[0].method == "POST"
    assert orjson.loads(seen[0].content) == data and seen[0].headers["User-Agent"] == "switchboard-alerts"
    hub.client = client_answering(300, seen)
    assert asyncio.run(hub.send(HOOK, data)) == "HTTP 300 from webhook:http://hooks.test/x"
    hub.client = client_answering(httpx.ConnectError("refused " + "x" * 600), seen)
    error = asyncio.run(hub.send(HOOK, data))
    assert error.startswith("ConnectError: refused x") and len(error) == 500


def test_one_http_client_with_the_alert_timeout():
    hub = hub_for(HOOK, SWITCHBOARD_ALERT_TIMEOUT_S=2.5)
    client = hub.http()
    assert client is hub.http() and client.timeout == httpx.Timeout(2.5)
    asyncio.run(hub.close())
    assert client.is_closed


@pytest.mark.django_db
def test_an_email_attempt_runs_off_the_loop_and_two_can_run_at_once(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()
    hub = hub_for(MAIL)
    barrier = threading.Barrier(2, timeout=5)

    def meet() -> str:
        barrier.wait()
        return threading.current_thread().name

    async def scenario() -> tuple[str, list[str]]:
        sent = await hub.send(MAIL, payload(event_for()))
        names = await asyncio.gather(hub.in_thread(meet), hub.in_thread(meet))
        await hub.close()
        return sent, names

    sent, names = asyncio.run(scenario())
    assert sent == "" and len(mail.outbox) == 1
    assert all(name.startswith("switchboard-alerts") for name in names)
    with pytest.raises(RuntimeError):
        hub.pool.submit(print)  # type: ignore[union-attr] - shut down by close()


def test_a_row_the_database_cannot_write_is_logged_and_skipped(caplog):
    hub = hub_for(HOOK)

    def fails() -> None:
        raise DatabaseError("no such table")

    caplog.set_level(logging.WARNING, "switchboard.alerts")
    assert asyncio.run(hub.record(fails)) is None
    assert caplog.messages == ["could not record an alert delivery (no such table): the database is unreachable"]


def test_close_cancels_the_delivery_tasks_in_flight():
    hub = hub_for(HOOK)

    async def scenario() -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(asyncio.sleep(30))
        hub.tasks.add(task)
        await hub.close()
        await asyncio.sleep(0)
        return task

    assert asyncio.run(scenario()).cancelled()


@pytest.mark.django_db
def test_a_long_destination_is_cut_to_its_column():
    long = AlertSpec(name="ops", kind="webhook", url="http://h/" + "p" * 400)
    row = alerts._insert("k|ops", event_for(), long, {"a": 1})
    assert row is not None and len(row.destination) == 300 and row.destination.startswith("webhook:http://h/p")
    assert alerts._insert("k|ops", event_for(), long, {"a": 1}) is None  # the key is taken


# --- the admin's test alert -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_failed_test_alert_is_recorded_with_its_error(monkeypatch):
    sent: list[dict] = []

    async def refused(self: Alerts, rule: AlertSpec, data: dict) -> str:
        sent.append(data)
        return "HTTP 404 from webhook:http://hooks.test/x"

    monkeypatch.setattr(Alerts, "send", refused)
    row = alerts.send_test(HOOK)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error, row.sent_at) == (
        "failed", 1, "HTTP 404 from webhook:http://hooks.test/x", None,
    )  # fmt: skip
    assert sent[0]["subject"] == {"rule": "ops"} and sent[0]["detail"] == {"note": "a test alert sent from the admin"}
    assert row.event == "test" and row.event_key.startswith("test|") and row.event_key.endswith("|ops")


@pytest.mark.django_db
def test_an_email_test_alert_is_sent_now_and_its_failure_kept(settings, monkeypatch):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()
    row = alerts.send_test(MAIL)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == ("sent", 1, "")
    assert mail.outbox[0].subject == "[Switchboard] test: mail"

    def broken(rule: AlertSpec, data: dict) -> None:
        raise OSError("smtp down " + "y" * 600)

    monkeypatch.setattr(alerts, "send_email", broken)
    row = alerts.send_test(MAIL)
    row.refresh_from_db()
    assert row.status == "failed" and row.last_error.startswith("OSError: smtp down y") and len(row.last_error) == 500
