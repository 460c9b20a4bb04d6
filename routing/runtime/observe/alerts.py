"""Alerts: events the gateway already knows, delivered exactly once to each rule's destination (docs/alerts.md).

The parts that know an event (breaker transitions, quota parking, shedding, degraded
components, the budget accounts) call `Alerts.emit`, a dict look-up and a bounded
`put_nowait` (nothing at all when no rule wants the event): nothing on the request path
waits for an alert, and a full queue drops the event with a log line. The background
task `Alerts.run` of the composition root takes events off the queue, checks the budget
accounts against their thresholds, and delivers each (event, rule) once across every
process and replica:

1. a Redis claim, `SET <event key> NX EX <ttl>`, with REDIS_URL (the first process wins);
2. the database's unique `AlertDelivery.event_key`: the insert that wins delivers (the
   fallback without Redis, and a second guard with it);
3. the delivery itself on async httpx (webhook, Slack) or a worker thread (e-mail),
   retried with exponential backoff, bounded, each attempt's result on the row.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import orjson
from django.conf import settings as django_settings
from django.db import DatabaseError, IntegrityError

from routing.config import live
from routing.config.alert_spec import AlertSpec
from routing.config.schema import ALERT_EVENTS
from routing.core.breaker import State
from routing.core.budget_accounts import Account, Budgets
from routing.models import AlertDelivery
from routing.runtime.cluster import process_list as processes

log = logging.getLogger("switchboard.alerts")
__all__ = ["ALERT_EVENTS", "Alerts", "Event", "payload", "send_test", "sign"]

SIGNATURE_HEADER = "X-Switchboard-Signature"
CLAIM_PREFIX = "switchboard:alerts:"  # + the cluster's name and the event key's digest
TOTAL_TTL_S = 400 * 86400  # a claim of a `total` budget (never resets) outlives any realistic run


class Event:
    """One thing that happened, named the same by every process that sees it.

    `claim` is the Redis claim's name (event, subject; threshold and period for a budget), held
    `ttl_s`; `key` the database's unique event key: the claim plus the dedupe window the event fell
    in, for when Redis is not there to decide."""

    __slots__ = ("event", "at", "subject", "detail", "key", "ttl_s", "claim")

    def __init__(
        self, event: str, at: float, subject: dict, detail: dict, key: str, ttl_s: float, claim: str = ""
    ) -> None:
        self.event = event
        self.at = at
        self.subject = subject
        self.detail = detail
        self.key = key
        self.ttl_s = ttl_s
        self.claim = claim or key


def payload(event: Event) -> dict[str, Any]:
    """The JSON a webhook receives (and the row keeps): never a secret."""
    at = datetime.fromtimestamp(event.at, UTC).isoformat().replace("+00:00", "Z")
    return {"event": event.event, "at": at, "subject": event.subject, "detail": event.detail}


def sign(secret: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of the exact body bytes with the webhook's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def slack_text(data: dict[str, Any]) -> str:
    subject = ", ".join(f"{k}={v}" for k, v in data["subject"].items())
    detail = ", ".join(f"{k}={v}" for k, v in data["detail"].items())
    return f"*Switchboard: {data['event']}* {subject}" + (f" ({detail})" if detail else "") + f" at {data['at']}"


def request_for(rule: AlertSpec, data: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """The body and headers a webhook or Slack destination is sent."""
    if rule.kind == "slack":
        return orjson.dumps({"text": slack_text(data)}), {"Content-Type": "application/json"}
    body = orjson.dumps(data)
    headers = {"Content-Type": "application/json", "User-Agent": "switchboard-alerts"}
    if rule.secret:
        headers[SIGNATURE_HEADER] = sign(rule.secret, body)
    return body, headers


def send_email(rule: AlertSpec, data: dict[str, Any]) -> None:
    """Through Django's mail settings (EMAIL_BACKEND, EMAIL_HOST, DEFAULT_FROM_EMAIL)."""
    from django.core.mail import send_mail

    subject = f"[Switchboard] {data['event']}: " + ", ".join(str(v) for v in data["subject"].values())
    send_mail(subject[:200], orjson.dumps(data, option=orjson.OPT_INDENT_2).decode(), None, list(rule.to))


def delivery_key(event: Event, rule: AlertSpec) -> str:
    return f"{event.key}|{rule.name}"[:255]


def budget_events(accounts: Iterable[Account], thresholds: Iterable[int], seen: set, now: float) -> list[Event]:
    """Each threshold an account's settled spend has reached this period and this process has not reported yet.

    Settled (billed) spend, `Account.billed`: with Redis, the cluster's settled-spend counter as this process
    last saw it plus its own spend since, never the budget counter, which also holds the allowance leased to
    processes for requests in flight (an 80 % alert must mean 80 % was spent)."""
    out = []
    levels = sorted(set(thresholds))
    for account in accounts:
        if account.usd <= 0:
            continue
        billed = account.billed()
        percent = 100.0 * billed / account.usd
        for level in levels:
            mark = (account.key, level, account.start)
            if percent + 1e-9 < level or mark in seen:
                continue
            seen.add(mark)
            ttl = TOTAL_TTL_S if account.end is None else max(60.0, account.end - now + 3600)
            subject = {"kind": account.key[0], "name": "/".join(account.key[1:])}
            detail = {
                "threshold_percent": level,
                "spent_usd": round(billed, 6),
                "budget_usd": account.usd,
                "period": account.period,
            }
            key = f"budget|{'/'.join(account.key)}|{level}|{int(account.start)}"
            out.append(Event("budget", now, subject, detail, key, ttl))
    return out


class Alerts:
    """The process's alert hand-off (`emit`) and delivery task (`run`); see the module docstring."""

    def __init__(
        self,
        rules: Callable[[], tuple[AlertSpec, ...]] = lambda: live.current().alerts,
        *,
        clock: Callable[[], float] = time.time,
        settings: Any = django_settings,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.rules = rules
        self.clock = clock
        self.sleep = sleep
        self.dedupe_s = float(getattr(settings, "SWITCHBOARD_ALERT_DEDUPE_S", 60.0))
        self.attempts = int(getattr(settings, "SWITCHBOARD_ALERT_ATTEMPTS", 5))
        self.backoff_s = float(getattr(settings, "SWITCHBOARD_ALERT_BACKOFF_S", 1.0))
        self.timeout_s = float(getattr(settings, "SWITCHBOARD_ALERT_TIMEOUT_S", 5.0))
        self.budget_check_s = float(getattr(settings, "SWITCHBOARD_ALERT_BUDGET_CHECK_S", 0.5))
        self.redis_url = getattr(settings, "REDIS_URL", "") or ""
        self.queue: asyncio.Queue[Event] = asyncio.Queue(
            maxsize=int(getattr(settings, "SWITCHBOARD_ALERT_QUEUE", 1000))
        )
        self.recent: dict[str, float] = {}  # event key -> until when this process already queued it
        self.budget_seen: set = set()  # (account, threshold, period start) reported by this process
        self.dropped = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = 0  # the serving loop's thread: emits from other threads hop onto it
        self.pool: ThreadPoolExecutor | None = None  # database rows and e-mail, off the loop
        self.redis: Any = None
        self.tasks: set[asyncio.Task] = set()
        self.client: Any = None  # httpx.AsyncClient, made on the first delivery

    # --- the hand-off (any thread, never blocks) ------------------------------------

    def wanted(self, event: str) -> bool:
        return any(rule.wants(event) for rule in self.rules())

    def emit(self, event: str, subject: dict, detail: dict | None = None, episode: str = "") -> None:
        """Hand one event to the delivery task; repeats within the dedupe window are dropped here already.

        `episode` makes the event key unique across processes (default: the dedupe window it falls in)."""
        if not self.wanted(event):
            return
        now = self.clock()
        name = "|".join(f"{k}={v}" for k, v in subject.items())
        local = f"{event}|{name}"
        if self.recent.get(local, 0.0) > now:
            return
        self.recent[local] = now + self.dedupe_s
        window = episode or str(math.floor(now / self.dedupe_s))
        item = Event(event, now, subject, detail or {}, f"{local}|{window}", self.dedupe_s, claim=local)
        loop = self.loop
        if loop is not None and threading.get_ident() != self.thread and not loop.is_closed():
            loop.call_soon_threadsafe(self._put, item)
        else:
            self._put(item)

    def _put(self, item: Event) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("alert queue full: dropped the %s alert (%d dropped so far)", item.event, self.dropped)

    # --- listeners of the parts that know the events -------------------------------

    def breaker_changed(self, key: Any, old: State, new: State) -> None:
        """A breaker registry listener: closed → open is `breaker_open`, half-open → closed `breaker_closed`."""
        if new is State.OPEN and old is State.CLOSED:
            self.emit("breaker_open", _link(key))
        elif new is State.CLOSED and old is not State.CLOSED:
            self.emit("breaker_closed", _link(key))

    def parking_changed(self, key: Any, name: str, value: int) -> None:
        """routing.core.parking's observer: a link parked for exhausted quota."""
        if name == "PARKED" and value:
            self.emit("parked", _link(key))

    def shed(self, reason: str, priority: str) -> None:
        """The gates' shed hook (routing.runtime.overload): the gateway answers 503 overloaded."""
        self.emit("shedding", {"reason": reason}, {"priority": priority})

    def degraded(self, component: str, flag: bool) -> None:
        """routing.config.live's degraded listener: a component (Redis, the database) became unreachable."""
        if flag:
            self.emit("degraded", {"component": component})

    # --- the background task ---------------------------------------------------------

    def bind(self) -> None:
        """Remember the serving loop (emits from other threads hop onto it)."""
        self.loop = asyncio.get_running_loop()
        self.thread = threading.get_ident()

    async def run(self, budgets: Budgets | None = None) -> None:
        """Deliver queued events; every `budget_check_s`, report budget thresholds crossed."""
        self.bind()
        while True:
            try:
                event = await asyncio.wait_for(self.queue.get(), self.budget_check_s)
            except TimeoutError:
                event = None
            if event is not None:
                self.dispatch(event)
            if budgets is not None:
                self.check_budgets(budgets)

    def check_budgets(self, budgets: Budgets) -> None:
        thresholds = {p for rule in self.rules() for p in rule.budget_percent}
        if thresholds:
            for event in budget_events(budgets.accounts(), thresholds, self.budget_seen, self.clock()):
                self.dispatch(event)

    def dispatch(self, event: Event) -> None:
        """One delivery task per rule that wants the event."""
        for rule in self.rules():
            if rule.wants(event.event):
                task = asyncio.get_running_loop().create_task(self.deliver(rule, event))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def deliver(self, rule: AlertSpec, event: Event) -> bool:
        """Claim, record, send with retries; False when another process or replica has it.

        A won Redis claim sends at once, the row written alongside; without one the row's insert
        decides first (the database's unique key)."""
        key = delivery_key(event, rule)
        claimed = await self.claim(f"{event.claim}|{rule.name}", event.ttl_s)
        if claimed is False:
            return False
        data = payload(event)
        if claimed:
            row, error = await asyncio.gather(self.record(_insert, key, event, rule, data), self.send(rule, data))
            attempt = 1
        else:
            row, error, attempt = await self.record(_insert, key, event, rule, data), None, 0
            if row is None:
                return False  # the database's unique key: someone else delivers it (or no database to decide)
        while True:
            if error is None:
                attempt += 1
                error = await self.send(rule, data)
            if row is not None:
                await self.record(_update, row, attempt, error)
            if not error or attempt >= self.attempts:
                break
            await self.sleep(min(self.backoff_s * 2 ** (attempt - 1), 300.0))
            error = None
        if error:
            log.warning("alert %s to %s failed after %d attempts: %s", event.event, rule.name, attempt, error)
        return True

    async def claim(self, key: str, ttl_s: float) -> bool | None:
        """`SET key NX EX ttl` in Redis: True won, False lost; None without Redis (or Redis down): the
        database decides alone."""
        if not self.redis_url:
            return None
        try:
            if self.redis is None:
                import redis.asyncio as aioredis

                self.redis = aioredis.Redis.from_url(
                    self.redis_url, socket_timeout=self.timeout_s, socket_connect_timeout=self.timeout_s
                )
            digest = hashlib.sha256(key.encode()).hexdigest()
            name = f"{CLAIM_PREFIX}{processes.cluster_name()}:{digest}"  # each cluster its own claims in a shared Redis
            return bool(await self.redis.set(name, "1", nx=True, ex=max(1, math.ceil(ttl_s))))
        except Exception as exc:  # noqa: BLE001 - Redis down: the database's unique key still holds
            log.warning("alert claim in Redis failed (%s): the database decides", exc)
            return None

    async def send(self, rule: AlertSpec, data: dict[str, Any]) -> str:
        """One attempt; the error text, "" when delivered."""
        try:
            if rule.kind == "email":
                await self.in_thread(send_email, rule, data)
                return ""
            body, headers = request_for(rule, data)
            response = await self.http().post(rule.url, content=body, headers=headers)
            if response.status_code >= 300:
                return f"HTTP {response.status_code} from {rule.destination}"
            return ""
        except Exception as exc:  # noqa: BLE001 - recorded on the row and retried
            return f"{type(exc).__name__}: {exc}"[:500]

    async def record(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A delivery row's write; the database unreachable is logged, and the delivery goes on (None)."""
        try:
            return await self.in_thread(fn, *args)
        except DatabaseError as exc:
            log.warning("could not record an alert delivery (%s): the database is unreachable", exc)
            return None

    def http(self) -> Any:
        """One async client for every delivery, with the alert timeout."""
        if self.client is None:
            import httpx

            self.client = httpx.AsyncClient(timeout=self.timeout_s)
        return self.client

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="switchboard-alerts")
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.redis is not None:
            await self.redis.aclose()
        if self.client is not None:
            await self.client.aclose()
        if self.pool is not None:
            self.pool.shutdown(wait=False)


def _link(key: Any) -> dict[str, str]:
    if isinstance(key, tuple) and len(key) >= 2:
        return {"provider": str(key[0]), "model": str(key[1])}
    return {"link": str(key)}


def _insert(key: str, event: Event, rule: AlertSpec, data: dict[str, Any]) -> AlertDelivery | None:
    """The row of this delivery, or None when the unique event key is taken (delivered elsewhere)."""
    from django.db import transaction
    from django.utils import timezone

    try:
        with transaction.atomic():
            return AlertDelivery.objects.create(
                event_key=key,
                event=event.event,
                rule=rule.name,
                destination=rule.destination[:300],
                payload=data,
                created_at=timezone.now(),
            )
    except IntegrityError:
        return None


def _update(row: AlertDelivery, attempt: int, error: str) -> None:
    from django.utils import timezone

    row.attempts = attempt
    row.last_error = error
    row.status = AlertDelivery.SENT if not error else AlertDelivery.FAILED
    row.sent_at = timezone.now() if not error else None
    row.save(update_fields=["attempts", "last_error", "status", "sent_at"])


def send_test(rule: AlertSpec) -> AlertDelivery:
    """The admin's "send test alert": one `test` event to the rule's destination now, recorded as any other."""
    now = time.time()
    event = Event("test", now, {"rule": rule.name}, {"note": "a test alert sent from the admin"}, f"test|{now}", 60)
    alerts = Alerts(lambda: (rule,))
    data = payload(event)
    row = _insert(delivery_key(event, rule), event, rule, data)
    if row is None:  # pragma: no cover - a key with the wall clock's microseconds
        raise RuntimeError("a test alert with this key exists already: try again")
    error = asyncio.run(_send_once(alerts, rule, data)) if rule.kind != "email" else _email_now(rule, data)
    _update(row, 1, error)
    return row


async def _send_once(alerts: Alerts, rule: AlertSpec, data: dict[str, Any]) -> str:
    try:
        return await alerts.send(rule, data)
    finally:
        await alerts.close()


def _email_now(rule: AlertSpec, data: dict[str, Any]) -> str:
    try:
        send_email(rule, data)
        return ""
    except Exception as exc:  # noqa: BLE001 - shown to the operator and kept on the row
        return f"{type(exc).__name__}: {exc}"[:500]
