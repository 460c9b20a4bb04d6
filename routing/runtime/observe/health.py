"""Provider health probes: GET each provider's health URL, keep the last result in memory.

Only a 2xx answer is "up". A 401/403 means the provider is reachable but refuses our
key: that is "down" too (requests would fail), with a detail saying to check the key.
Results live in the process (`Process.probes`, read through `results()`); GET
/health/providers and the dashboard read them, never the network or the database. `run_prober` probes in the background
every SWITCHBOARD_HEALTH_INTERVAL_S: every provider when SWITCHBOARD_HEALTH_PROBES is
on, else only those with `health_probe: true`.

Results of a probe run elsewhere (`manage.py probe_providers`) are shared through the
database: `store_results` upserts one ProviderProbe row per provider, and the prober
of every serving process adopts rows newer than what it holds (`StoredResults.adopt`, every
SWITCHBOARD_HEALTH_SHARED_POLL_S, off the request path); with a shared channel layer
(Redis) the command also publishes them and `results_listener` adopts them at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson

from providers.models import ProviderProbe
from routing.config import live
from routing.config.secrets import redact_url
from routing.config.snapshot import ProviderSpec, Snapshot
from routing.core.breaker import BreakerRegistry, State
from routing.core.failures import UpstreamFailure
from routing.runtime.observe import metrics
from routing.runtime.observe.outage import Outage
from routing.runtime.process import installed
from routing.upstream.dialects import PreparedRequest, get_dialect
from routing.upstream.dialects.base import TokenSource
from routing.upstream.dialects.vertex import ServiceAccountTokens

log = logging.getLogger("switchboard.health")

UP, DOWN, UNKNOWN = "up", "down", "unknown"
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ProbeResult:
    name: str
    status: str  # up | down | unknown
    latency_ms: float | None
    checked_at: str | None  # ISO 8601, UTC
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def results() -> dict[str, ProbeResult]:
    """The current process's probe results (`Process.probes`); a throwaway dict when no process is installed
    (a one-off `manage.py probe_providers` stores and publishes its results instead)."""
    process = installed()
    return process.probes if process is not None else {}


# Called with each result whose status changed (the composition root adds the dashboard feed).
change_listeners: list[Callable[[ProbeResult], None]] = []


def health_url(provider: ProviderSpec) -> str:
    """The dialect's health URL (base URL + health_check_path, or the dialect's default)."""
    try:
        return get_dialect(provider.dialect).health_url(provider)
    except (ImportError, KeyError, LookupError, AttributeError, ValueError):
        path = provider.health_check_path
        if path and not path.startswith("/"):
            path = "/" + path
        return provider.base_url.rstrip("/") + path


def health_headers(provider: ProviderSpec) -> dict[str, str]:
    """The dialect's probe headers (its credentials), so a wrong key shows up as "down"."""

    return get_dialect(provider.dialect).probe_headers(provider)


async def _probe_credentials(provider: ProviderSpec, url: str, tokens: TokenSource) -> dict[str, str]:
    """health_headers, plus what a dialect that `authorizes` obtains per request (an access token, from
    the serving process's cache `tokens` when the prober runs in one)."""

    headers = health_headers(provider)
    dialect = get_dialect(provider.dialect)
    if not dialect.authorizes:
        return headers
    prepared = await dialect.authorize(PreparedRequest("GET", url, headers, b""), provider, provider.api_key, tokens)
    return prepared.headers


def _now_iso() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def probe_provider(
    provider: ProviderSpec,
    client: httpx.AsyncClient,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    tokens: TokenSource | None = None,
) -> ProbeResult:
    """One GET of the provider's health URL; never raises. `tokens`: the access-token cache to use (the
    process's transport's in a serving process; a fresh one for a one-off probe)."""
    url = health_url(provider)
    started = time.perf_counter()
    try:
        headers = await _probe_credentials(provider, url, tokens if tokens is not None else ServiceAccountTokens())
    except UpstreamFailure as exc:
        return ProbeResult(provider.name, DOWN, None, _now_iso(), exc.message)
    try:
        response = await client.get(url, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        return ProbeResult(
            provider.name, DOWN, None, _now_iso(), f"no answer from {redact_url(url)} within {timeout_s:g}s"
        )
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        return ProbeResult(provider.name, DOWN, None, _now_iso(), f"cannot reach {redact_url(url)}: {reason}")
    latency_ms = round((time.perf_counter() - started) * 1000, 2)
    status = response.status_code
    if 200 <= status < 300:
        return ProbeResult(provider.name, UP, latency_ms, _now_iso(), f"HTTP {status}")
    if status in (401, 403):
        env = provider.api_key_env or "api_key_env"
        detail = f"HTTP {status}: reachable, but the provider refused the credentials; check {env}"
    else:
        detail = f"HTTP {status} from {redact_url(url)}"
    return ProbeResult(provider.name, DOWN, latency_ms, _now_iso(), detail)


async def probe_all(
    snapshot: Snapshot,
    only: Iterable[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    client: httpx.AsyncClient | None = None,
    tokens: TokenSource | None = None,
) -> list[ProbeResult]:
    """Probe the given providers (all of the snapshot's by default) concurrently and record the results.
    Without `tokens` (a one-off run, `manage.py probe_providers`) the run's access tokens are its own."""
    names = list(only) if only is not None else sorted(snapshot.providers)
    providers = [snapshot.providers[n] for n in names if n in snapshot.providers]
    if not providers:
        return []
    own = client is None
    client = client or httpx.AsyncClient(follow_redirects=True)
    try:
        tokens = tokens if tokens is not None else ServiceAccountTokens()
        found = await asyncio.gather(*(_probe_guarded(p, client, timeout_s, tokens) for p in providers))
    finally:
        if own:
            await client.aclose()
    for result in found:
        record_result(result)
    return list(found)


async def _probe_guarded(
    provider: ProviderSpec, client: httpx.AsyncClient, timeout_s: float, tokens: TokenSource
) -> ProbeResult:
    """probe_provider, with any unexpected failure (a health URL httpx refuses, a dialect's bug) turned into
    that provider's "down" result: one bad provider never stops the others being probed."""
    try:
        return await probe_provider(provider, client, timeout_s, tokens)
    except Exception as exc:  # noqa: BLE001 - reported as this provider's result, the round goes on
        log.warning("could not probe provider %r", provider.name, exc_info=True)
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return ProbeResult(provider.name, DOWN, None, _now_iso(), f"could not probe: {reason}")


def record_result(result: ProbeResult) -> None:
    """Keep the result, set provider_up, and put status changes in the dashboard feed
    (every result still reaches the page through the periodic state refresh)."""
    probes = results()
    previous = probes.get(result.name)
    probes[result.name] = result
    metrics.provider_status(result.name, result.status == UP if result.status != UNKNOWN else None)
    if previous is not None and previous.status == result.status:
        return
    for listener in change_listeners:
        try:
            listener(result)
        except Exception:  # noqa: BLE001 - reporting must never stop probing
            log.exception("could not report probe result of %s", result.name)


def forget_missing(snapshot: Snapshot) -> None:
    """Drop results (and provider_up series) of providers no longer configured."""
    probes = results()
    for name in [n for n in probes if n not in snapshot.providers]:
        probes.pop(name, None)
        metrics.provider_status(name, None)


def probe_targets(snapshot: Snapshot, probe_everything: bool) -> list[str]:
    return sorted(n for n, p in snapshot.providers.items() if probe_everything or p.health_probe)


def store_results(found: Iterable[ProbeResult]) -> int:
    """Upsert one ProviderProbe row per result, for every serving process to adopt.

    Synchronous (a management command, or a thread). Returns the number of rows written.
    """

    rows = [
        ProviderProbe(
            provider=r.name,
            status=r.status,
            latency_ms=r.latency_ms,
            checked_at=_parse_iso(r.checked_at) or datetime.now(tz=UTC),
            detail=r.detail[:500],
        )
        for r in found
    ]
    if rows:
        ProviderProbe.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["provider"],
            update_fields=["status", "latency_ms", "checked_at", "detail", "updated_at"],
        )
    return len(rows)


SHARED_OVERLAP = timedelta(seconds=60)


class StoredResults:
    """The prober's view of the stored results: updated_at of the newest row adopted. Rows are re-read
    from a little before it, so a writer whose clock lags ours by up to SHARED_OVERLAP is not missed."""

    __slots__ = ("through",)

    def __init__(self) -> None:
        self.through: datetime | None = None

    def adopt(self, snapshot: Snapshot) -> list[ProbeResult]:
        """Take stored results newer than this process's own into `results` (synchronous: a thread).

        One indexed query of the rows written since the last call (all rows the first time);
        providers no longer configured are ignored. Returns the results adopted.
        """
        rows = ProviderProbe.objects.all()
        if self.through is not None:
            rows = rows.filter(updated_at__gte=self.through - SHARED_OVERLAP)
        adopted = []
        for row in rows:
            if self.through is None or row.updated_at > self.through:
                self.through = row.updated_at
            if row.provider not in snapshot.providers:
                continue
            checked_at = row.checked_at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            result = ProbeResult(row.provider, row.status, row.latency_ms, checked_at, row.detail)
            if adopt(result):
                adopted.append(result)
        return adopted


def adopt_stored(snapshot: Snapshot, stored: StoredResults | None = None) -> list[ProbeResult]:
    """Take stored results newer than this process's own (`StoredResults.adopt`; every row without `stored`)."""
    return (stored if stored is not None else StoredResults()).adopt(snapshot)


def adopt(result: ProbeResult) -> bool:
    """Record a result probed elsewhere unless ours is as new or newer (ISO 8601 UTC strings sort by time)."""
    mine = results().get(result.name)
    if mine is not None and (mine.checked_at or "") >= (result.checked_at or ""):
        return False
    record_result(result)
    return True


HEALTH_GROUP = "switchboard.health"  # channel-layer group of probe results from other processes


def publish_results(found: Iterable[ProbeResult]) -> bool:
    """Send results to every serving process at once over a shared (Redis) channel layer.

    Synchronous (the command). The database rows stay the durable path; this only makes
    them arrive sooner. False when there is no shared layer (in-memory reaches nobody)."""
    from asgiref.sync import async_to_sync
    from channels.layers import InMemoryChannelLayer, get_channel_layer

    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return False
    message = {"type": "health.results", "results": [r.as_dict() for r in found]}
    async_to_sync(layer.group_send)(HEALTH_GROUP, message)
    return True


async def results_listener() -> None:
    """Background task of a serving process: adopt results published by other processes."""
    from channels import layers

    layer = layers.get_channel_layer()
    if layer is None:
        return
    channel = await layer.new_channel()
    while True:
        await layer.group_add(HEALTH_GROUP, channel)  # re-joined: group membership expires
        try:
            message = await asyncio.wait_for(layer.receive(channel), timeout=600)
        except TimeoutError:
            continue
        if message.get("type") != "health.results":
            continue
        providers = live.current().providers
        for item in message.get("results") or []:
            try:
                result = ProbeResult(
                    str(item["name"]),
                    str(item["status"]),
                    item.get("latency_ms"),
                    item.get("checked_at"),
                    str(item.get("detail") or ""),
                )
            except (KeyError, TypeError):
                log.warning("ignored a malformed probe result %r", item)
                continue
            if result.name in providers and result.status in (UP, DOWN, UNKNOWN):
                adopt(result)


def _parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


async def run_prober(tokens: TokenSource | None = None) -> None:
    """Background loop of a serving process (started by gateway_project.process): probe its
    targets every SWITCHBOARD_HEALTH_INTERVAL_S, adopt stored results in between. `tokens`: the
    process's access-token cache, so probes and requests share one exchange per service account."""
    from django.conf import settings

    interval = float(settings.SWITCHBOARD_HEALTH_INTERVAL_S)
    shared_poll = float(getattr(settings, "SWITCHBOARD_HEALTH_SHARED_POLL_S", 2.0))
    next_probe = 0.0
    outage = Outage(log, "reading shared probe results", "keeping this process's own results")
    stored = StoredResults()
    async with httpx.AsyncClient(follow_redirects=True) as client:
        while True:
            snapshot = live.current()
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + interval
                forget_missing(snapshot)
                targets = probe_targets(snapshot, bool(settings.SWITCHBOARD_HEALTH_PROBES))
                if targets:
                    try:
                        await probe_all(
                            snapshot, targets, min(DEFAULT_TIMEOUT_S, interval), client=client, tokens=tokens
                        )
                    except Exception:  # noqa: BLE001 - keep probing next round
                        log.exception("health probe round failed")
            if shared_poll > 0:
                try:
                    await asyncio.to_thread(_adopt_closing, snapshot, stored)
                    outage.ok()
                except Exception as exc:  # noqa: BLE001 - database down: keep our own results
                    outage.failed(exc)
            pause = next_probe - time.monotonic()
            await asyncio.sleep(max(0.05, min(pause, shared_poll) if shared_poll > 0 else pause))


def _adopt_closing(snapshot: Snapshot, stored: StoredResults) -> None:
    """adopt_stored on a worker thread, closing that thread's connection if it went stale."""
    from django.db import close_old_connections

    close_old_connections()
    stored.adopt(snapshot)


def probe_mode(enabled: bool, probe_everything: bool) -> str:
    """How a provider is probed, in words (the admin list)."""
    if probe_everything:
        return "background (all providers)"
    return "background" if enabled else "on demand only (probe_providers)"


def last_probe(
    name: str, stored_status: str | None, stored_checked: datetime | None, stored_detail: str | None
) -> tuple[str, str | None, str]:
    """(status, checked_at, detail) of a provider: this process's newer result, else the stored one."""
    mine = results().get(name)
    stored_iso = None
    if stored_checked is not None:
        stored_iso = stored_checked.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    if mine is not None and (stored_iso is None or (mine.checked_at or "") >= stored_iso):
        return mine.status, mine.checked_at, mine.detail
    if stored_status:
        return stored_status, stored_iso, stored_detail or ""
    return UNKNOWN, None, "not probed yet"


def health_providers_payload(snapshot: Snapshot, breakers: BreakerRegistry) -> bytes:
    """Body of GET /health/providers: every configured provider, "unknown" until probed, with the
    breakers of its links that requests would find not closed. Memory only."""
    circuits = _circuits(breakers)
    probes = results()
    out = []
    for name in sorted(snapshot.providers):
        result = probes.get(name)
        if result is None:
            entry = {
                "name": name,
                "status": UNKNOWN,
                "latency_ms": None,
                "checked_at": None,
                "detail": "not probed yet",
            }
        else:
            entry = result.as_dict()
            entry["detail"] = public_detail(result.detail, snapshot.providers[name])
        entry["circuits"] = circuits.get(name, [])
        out.append(entry)
    return orjson.dumps({"providers": out})


def public_detail(detail: str, provider: ProviderSpec) -> str:
    """A probe's detail for /health/providers, which needs no login: the provider's URL left out.

    The dashboard (operators) shows the detail as probed, URL included (docs/security.md#urls).
    """
    url = redact_url(health_url(provider))
    return detail.replace(url, "its health URL") if url else detail


def _circuits(breakers: BreakerRegistry) -> dict[str, list[dict[str, Any]]]:
    """Per provider, its shared links whose breaker is not closed or that some org's own view refuses
    (docs/resilience.md#org-views): what requests meet, without naming organisations."""

    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for view in breakers.views():
        if view.key.org is not None or (view.state is State.CLOSED and view.forced_reason is None):
            continue
        state = "forced_open" if view.forced_reason is not None else view.state.name.lower()
        rows[(view.key.provider, view.key.model)] = {
            "model": view.key.model,
            "state": state,
            "cooldown_s": round(view.cooldown_remaining_s, 1),
            "org_views_open": 0,
        }
    for ov in breakers.org_views():
        if ov.state is State.CLOSED:
            continue
        row = rows.setdefault(
            (ov.key.provider, ov.key.model),
            {"model": ov.key.model, "state": "closed", "cooldown_s": 0.0, "org_views_open": 0},
        )
        row["org_views_open"] += 1
    out: dict[str, list[dict[str, Any]]] = {}
    for (provider, _), row in sorted(rows.items()):
        out.setdefault(provider, []).append(row)
    return out
