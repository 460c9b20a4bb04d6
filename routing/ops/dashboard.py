"""The live dashboard's engine: rolling counters, event fan-out and the websocket consumer.

Everything here reads memory only (never the database on a refresh):

- `note_request` / `note_fallback` / `note_probe` / the breaker listener feed small
  per-model rolling counters (1 s buckets over 5 minutes) and a bounded event feed;
- events leave in small batches (one channel-layer message per ~50 ms at most) to
  the group "switchboard.dashboard"; `run_broadcaster` publishes this process's full
  state there every SWITCHBOARD_DASHBOARD_REFRESH_S. Each message carries a process
  id, so with the Redis layer the page merges the processes it hears from;
- operator controls (reset / force open) arrive over the websocket from staff only,
  are applied here at once and broadcast on "switchboard.control" so that
  `control_listener` applies them in every other process; one BreakerAction row per
  action records who did it (written in a thread, off the loop).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.urls import path

from routing.config.reload import shared_timeout_s

log = logging.getLogger("switchboard.dashboard")

DASHBOARD_GROUP = "switchboard.dashboard"
CONTROL_GROUP = "switchboard.control"
PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}"
WINDOW_S = 300  # error and fallback rates
RATE_WINDOW_S = 60  # requests per second
FEED_SIZE = 60
MAX_FORCE_MINUTES = 7 * 24 * 60
STATE_NAMES = ("closed", "open", "half_open")

clock: Callable[[], float] = time.monotonic  # injectable for tests


def refresh_s() -> float:
    return float(getattr(settings, "SWITCHBOARD_DASHBOARD_REFRESH_S", 1.5))


# --------------------------------------------------------------------------- rolling counters


class Rolling:
    """Requests, errors (status >= 500) and fallbacks per second, over the last WINDOW_S seconds."""

    __slots__ = ("secs", "req", "err", "fb")

    def __init__(self) -> None:
        self.secs = [-1] * WINDOW_S
        self.req = [0] * WINDOW_S
        self.err = [0] * WINDOW_S
        self.fb = [0] * WINDOW_S

    def add(self, now_s: int, error: bool, fallback: bool) -> None:
        i = now_s % WINDOW_S
        if self.secs[i] != now_s:
            self.secs[i] = now_s
            self.req[i] = self.err[i] = self.fb[i] = 0
        self.req[i] += 1
        if error:
            self.err[i] += 1
        if fallback:
            self.fb[i] += 1

    def summary(self, now_s: int) -> dict[str, float]:
        window_start = now_s - WINDOW_S
        rate_start = now_s - RATE_WINDOW_S
        total = errors = fallbacks = recent = 0
        for sec, req, err, fb in zip(self.secs, self.req, self.err, self.fb, strict=True):
            if sec > window_start and sec <= now_s:
                total += req
                errors += err
                fallbacks += fb
                if sec > rate_start:
                    recent += req
        return {
            "rps": round(recent / RATE_WINDOW_S, 3),
            "requests": total,
            "errors": errors,
            "fallbacks": fallbacks,
            "error_rate": round(errors / total, 4) if total else 0.0,
            "fallback_rate": round(fallbacks / total, 4) if total else 0.0,
        }


_stats: dict[str, Rolling] = {}


def note_request(model_used: str, status: int, fallback_reason: str | None) -> None:
    """Count one finished request for its model (hot path: a dict hit and three list ops)."""
    if not model_used:
        return
    rolling = _stats.get(model_used)
    if rolling is None:
        if len(_stats) > 5000:  # model ids come from the configuration; this is only a guard
            return
        rolling = _stats[model_used] = Rolling()
    rolling.add(int(clock()), status >= 500, bool(fallback_reason))


def model_stats() -> dict[str, dict[str, float]]:
    now_s = int(clock())
    return {model: rolling.summary(now_s) for model, rolling in list(_stats.items())}


# --------------------------------------------------------------------------- event feed

_feed: deque[dict[str, Any]] = deque(maxlen=FEED_SIZE)
_outbox: deque[dict[str, Any]] = deque(maxlen=200)
_event_ids = itertools.count(1)
_flush_loop: asyncio.AbstractEventLoop | None = None  # the loop a batched flush is due on
_loop: asyncio.AbstractEventLoop | None = None
_tasks: set[asyncio.Task] = set()
viewers = 0  # websocket consumers connected to this process


def _emit(kind: str, **fields: Any) -> None:
    """Add an event to the feed and send it to the dashboards soon (batched)."""
    event = {"id": f"{PROCESS_ID}#{next(_event_ids)}", "kind": kind, "at": time.time(), **fields}
    _feed.append(event)
    _outbox.append(event)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        _schedule_flush(loop)
    elif _loop is not None and not _loop.is_closed():
        _loop.call_soon_threadsafe(_schedule_flush, _loop)


def _schedule_flush(loop: asyncio.AbstractEventLoop) -> None:
    global _flush_loop
    if _flush_loop is not None and not _flush_loop.is_closed():
        return  # a flush is already due
    _flush_loop = loop
    loop.call_later(0.05, _start_flush)


def _start_flush() -> None:
    global _flush_loop
    _flush_loop = None
    events = []
    while _outbox:
        events.append(_outbox.popleft())
    if not events or not _has_audience():
        return
    _spawn(_group_send(DASHBOARD_GROUP, {"type": "dashboard.events", "process": PROCESS_ID, "events": events}))


def _spawn(coro: Any) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def _has_audience() -> bool:
    """Worth publishing: a local viewer, or other processes may have some (not the in-memory layer)."""
    if viewers > 0:
        return True
    layer = get_channel_layer()
    return layer is not None and type(layer).__name__ != "InMemoryChannelLayer"


async def _group_send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await asyncio.wait_for(layer.group_send(group, message), shared_timeout_s())
    except Exception as exc:  # noqa: BLE001 - Redis down: the next state refresh catches up
        log.debug("dashboard publish to %s failed: %s", group, exc)


def link_name(key: tuple[str, ...]) -> str:
    """ "provider/model", or "provider/model@org" for a BYO breaker."""
    name = f"{key[0]}/{key[1]}"
    if len(key) > 2:
        org = key[2][4:] if key[2].startswith("org:") else key[2]
        name += f"@{org}"
    return name


def on_breaker_change(key: tuple[str, ...], old: Any, new: Any) -> None:
    """Breaker listener: every transition goes to the feed."""
    _emit("breaker", key=list(key), link=link_name(key), old=STATE_NAMES[int(old)], new=STATE_NAMES[int(new)])


def note_fallback(from_model: str, to_model: str, reason: str) -> None:
    _emit("fallback", from_model=from_model, to_model=to_model, reason=reason)


def note_probe(result: Any) -> None:
    """A health probe result (providers.health.ProbeResult)."""
    _emit(
        "probe",
        provider=result.name,
        status=result.status,
        latency_ms=result.latency_ms,
        checked_at=result.checked_at,
        detail=result.detail,
    )


# --------------------------------------------------------------------------- state


def current_snapshot() -> Any:
    from routing.config import live

    return live.current()


def _registry() -> Any:
    from routing.core.breaker import registry

    return registry


def link_state(view: Any) -> str:
    if view is None:
        return "closed"
    if view.forced_reason is not None:
        return "forced"
    return STATE_NAMES[int(view.state)]


def build_state() -> dict[str, Any]:
    """This process's view: every link with its breaker, providers with health, model counters."""
    from providers import health

    snapshot = current_snapshot()
    views = {tuple(v.key): v for v in _registry().views()}
    links = []
    seen = set()
    for model in sorted(snapshot.models.values(), key=lambda m: (m.provider.name, m.id)):
        key = (model.provider.name, model.id)
        seen.add(key)
        links.append(_link_entry(key, views.get(key)))
    for key, view in sorted(views.items()):
        if len(key) > 2 and key[:2] in seen:
            links.append(_link_entry(key, view))
    providers = []
    for name in sorted(snapshot.providers):
        result = health.results.get(name)
        providers.append(
            {
                "name": name,
                "status": result.status if result else "unknown",
                "latency_ms": result.latency_ms if result else None,
                "checked_at": result.checked_at if result else None,
                "detail": result.detail if result else "",
            }
        )
    return {
        "type": "state",
        "process": PROCESS_ID,
        "at": time.time(),
        "version": snapshot.version,
        "links": links,
        "providers": providers,
        "models": model_stats(),
        "feed": list(_feed),
    }


def _link_entry(key: tuple[str, ...], view: Any) -> dict[str, Any]:
    org = None
    if len(key) > 2:
        org = key[2][4:] if key[2].startswith("org:") else key[2]
    return {
        "link": link_name(key),
        "key": list(key),
        "provider": key[0],
        "model": key[1],
        "org": org,
        "state": link_state(view),
        "failures": view.consecutive_failures if view else 0,
        "cooldown_s": round(view.cooldown_remaining_s, 3) if view else 0.0,
        "forced_reason": view.forced_reason if view else None,
        "forced_until": view.forced_until if view else None,
    }


def call_on_loop(fn: Callable[[], Any], timeout_s: float = 2.0) -> Any:
    """Run fn on the serving loop's thread and wait for it (from a Django sync view's thread).

    Breakers are owned by the loop thread (they are lock-free); sync views under ASGI
    run in a worker thread, so they read breaker views through here. With no serving
    loop (tests, management commands) fn simply runs here.
    """
    loop = _loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return fn()
    try:
        if asyncio.get_running_loop() is loop:
            return fn()
    except RuntimeError:
        pass

    async def run() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout_s)


# --------------------------------------------------------------------------- controls


class ControlError(ValueError):
    """An operator control that cannot be applied (the message says why)."""


def parse_control(content: dict[str, Any], snapshot: Any = None) -> dict[str, Any]:
    """Validate a control message from the page into {action, key, reason, until}."""
    action = str(content.get("action") or "").replace("-", "_")
    if action not in ("reset", "force_open"):
        raise ControlError("unknown action: use 'reset' or 'force_open'")
    key = content.get("key")
    if isinstance(key, str):
        key = key.split("/", 1) if "/" in key else None
    if not isinstance(key, list) or not 2 <= len(key) <= 3 or not all(isinstance(k, str) and k for k in key):
        raise ControlError("key must be [provider, model] or [provider, model, 'org:<org>']")
    snapshot = snapshot if snapshot is not None else current_snapshot()
    model = snapshot.models.get(key[1])
    if model is None or model.provider.name != key[0]:
        raise ControlError(f"no configured link {key[0]}/{key[1]}; reload the page")
    if len(key) == 3 and (not key[2].startswith("org:") or key[2][4:] not in snapshot.orgs):
        raise ControlError(f"no organisation for breaker key {key[2]!r}")
    reason = str(content.get("reason") or "").strip()[:500]
    until = None
    if action == "force_open":
        minutes = content.get("minutes")
        if minutes not in (None, ""):
            try:
                minutes = float(minutes)
            except (TypeError, ValueError):
                raise ControlError("minutes must be a number (empty: until reset)") from None
            if not 0 < minutes <= MAX_FORCE_MINUTES:
                raise ControlError(f"minutes must be between 0 and {MAX_FORCE_MINUTES}")
            until = time.time() + minutes * 60
    return {"action": action, "key": key, "reason": reason, "until": until}


def apply_control(control: dict[str, Any]) -> None:
    """Apply a parsed control to this process's breakers (call on the loop thread)."""
    key = tuple(control["key"])
    registry = _registry()
    if control["action"] == "reset":
        registry.reset(key)
    else:
        registry.force_open(key, control.get("reason") or "forced open from the dashboard", control.get("until"))


def _log_action(user: str, control: dict[str, Any]) -> None:
    from routing.models import BreakerAction
    from routing.ops.metrics import link_labels

    provider, model = link_labels(tuple(control["key"]))
    until = control.get("until")
    BreakerAction.objects.create(
        user=user[:150],
        provider=provider,
        model=model,
        action=control["action"],
        reason=control.get("reason") or "",
        expires_at=datetime.fromtimestamp(until, tz=UTC) if until else None,
    )


log_action = database_sync_to_async(_log_action)


async def perform_control(user: str, control: dict[str, Any]) -> None:
    """Apply here, tell every other process, record who did it."""
    await _apply_and_broadcast(user, control)
    try:
        await log_action(user, control)
    except Exception:  # noqa: BLE001 - the action is applied; the audit row is best effort
        log.exception("could not record breaker action by %s", user)
    log.info("breaker %s on %s by %s", control["action"], link_name(tuple(control["key"])), user)


async def _apply_and_broadcast(user: str, control: dict[str, Any]) -> None:
    apply_control(control)
    _emit(
        "control",
        action=control["action"],
        link=link_name(tuple(control["key"])),
        user=user,
        reason=control["reason"],
        until=control["until"],
    )
    await _group_send(CONTROL_GROUP, {"type": "control.apply", "origin": PROCESS_ID, "control": control})


def control_from_sync(
    user: str, action: str, key: tuple[str, ...], reason: str = "", minutes: float | None = None
) -> None:
    """Apply an operator control from synchronous code (admin actions): the dashboard's own path,
    so it reaches every process and is audited the same way. Raises ControlError."""
    from asgiref.sync import async_to_sync

    control = parse_control({"action": action, "key": list(key), "reason": reason, "minutes": minutes})
    async_to_sync(_apply_and_broadcast)(user, control)  # on the serving loop, which owns the breakers
    _log_action(user, control)  # already in a sync thread with its own connection
    log.info("breaker %s on %s by %s", control["action"], link_name(tuple(control["key"])), user)


# --------------------------------------------------------------------------- background tasks

_installed = False


def install() -> None:
    """Register the breaker listeners (dashboard + metrics) once; remember the serving loop."""
    global _installed, _loop
    try:
        _loop = asyncio.get_running_loop()
    except RuntimeError:
        pass
    if _installed:
        return
    from routing.ops import metrics

    _registry().add_listener(on_breaker_change)
    metrics.install()
    _installed = True


async def control_listener() -> None:
    """Apply reset / force-open sent from any process's dashboard; answer state requests."""
    install()
    layer = get_channel_layer()
    if layer is None:
        return
    channel = await layer.new_channel()
    while True:
        # re-joined: group membership expires; bounded so a hung Redis restarts the task instead
        await asyncio.wait_for(layer.group_add(CONTROL_GROUP, channel), shared_timeout_s())
        try:
            message = await asyncio.wait_for(layer.receive(channel), timeout=600)
        except TimeoutError:
            continue
        kind = message.get("type")
        if kind == "control.apply" and message.get("origin") != PROCESS_ID:
            try:
                apply_control(message["control"])
            except Exception:  # noqa: BLE001 - a bad message must not stop the listener
                log.exception("could not apply breaker control %r", message)
        elif kind == "control.hello" and _has_audience():
            await _group_send(DASHBOARD_GROUP, {"type": "dashboard.state", "state": build_state()})


async def run_broadcaster() -> None:
    """Publish this process's state every refresh interval while anyone may be watching."""
    install()
    while True:
        await asyncio.sleep(refresh_s())
        if _has_audience():
            await _group_send(DASHBOARD_GROUP, {"type": "dashboard.state", "state": build_state()})


# --------------------------------------------------------------------------- consumer


def _is_staff(user: Any) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and user.is_active and user.is_staff)


def _same_origin(scope: dict[str, Any]) -> bool:
    """Browsers always send Origin; refuse cross-site sockets riding a staff session cookie."""
    headers = dict(scope.get("headers") or [])
    origin = headers.get(b"origin")
    if not origin:
        return True
    origin_s = origin.decode("latin-1")
    if origin_s in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        return True
    host = headers.get(b"host", b"").decode("latin-1")
    return bool(host) and urlsplit(origin_s).netloc == host


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """Staff-only socket: full state on connect, then events and state refreshes; controls in."""

    async def connect(self) -> None:
        global viewers
        if not _same_origin(self.scope):
            await self.close(code=4403)
            return
        if not _is_staff(self.scope.get("user")):
            # Accept first: a close before accept becomes an HTTP 403 and the page would only
            # see 1006; 4403 lets it say "sign in as staff" instead of retrying forever.
            await self.accept()
            await self.close(code=4403)
            return
        install()
        await self.accept()
        viewers += 1
        self._counted = True
        if self.channel_layer is not None:
            await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        await self.send_json(build_state())
        if self.channel_layer is not None and type(self.channel_layer).__name__ != "InMemoryChannelLayer":
            await _group_send(CONTROL_GROUP, {"type": "control.hello"})

    async def disconnect(self, code: int) -> None:
        global viewers
        if getattr(self, "_counted", False):
            viewers -= 1
            self._counted = False
        if self.channel_layer is not None:
            await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        user = self.scope.get("user")
        if not _is_staff(user):
            await self.close(code=4403)
            return
        if not isinstance(content, dict):
            await self.send_json({"type": "ack", "ok": False, "message": "send a JSON object"})
            return
        if content.get("action") == "state":
            await self.send_json(build_state())
            return
        try:
            control = parse_control(content)
        except ControlError as exc:
            await self.send_json({"type": "ack", "ok": False, "action": content.get("action"), "message": str(exc)})
            return
        await perform_control(user.get_username(), control)
        await self.send_json(
            {
                "type": "ack",
                "ok": True,
                "action": control["action"],
                "link": link_name(tuple(control["key"])),
                "message": f"{control['action'].replace('_', ' ')} applied to {link_name(tuple(control['key']))}",
            }
        )
        await self.send_json(build_state())

    async def dashboard_events(self, message: dict[str, Any]) -> None:
        await self.send_json({"type": "events", "process": message["process"], "events": message["events"]})

    async def dashboard_state(self, message: dict[str, Any]) -> None:
        await self.send_json(message["state"])


websocket_urlpatterns = [path("ws/dashboard/", DashboardConsumer.as_asgi())]
