"""Provider health probes: GET each provider's health URL, keep the last result in memory.

Only a 2xx answer is "up". A 401/403 means the provider is reachable but refuses our
key: that is "down" too (requests would fail), with a detail saying to check the key.
Results live in `results` (per process); GET /health/providers and the dashboard
read them, never the network or the database. `run_prober` probes in the background
every SWITCHBOARD_HEALTH_INTERVAL_S: every provider when SWITCHBOARD_HEALTH_PROBES is
on, else only those with `health_probe: true`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson

from routing.config.secrets import redact_url
from routing.config.snapshot import ProviderSpec, Snapshot
from routing.ops import metrics

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


results: dict[str, ProbeResult] = {}
# Called with each result whose status changed (the composition root adds the dashboard feed).
change_listeners: list[Callable[[ProbeResult], None]] = []


def health_url(provider: ProviderSpec) -> str:
    """The dialect's health URL (base URL + health_check_path, or the dialect's default)."""
    try:
        from providers.dialects import get_dialect

        return get_dialect(provider.dialect).health_url(provider)
    except (ImportError, KeyError, LookupError, AttributeError, ValueError):
        path = provider.health_check_path
        if path and not path.startswith("/"):
            path = "/" + path
        return provider.base_url.rstrip("/") + path


def health_headers(provider: ProviderSpec) -> dict[str, str]:
    """The dialect's probe headers (its credentials), so a wrong key shows up as "down"."""
    from providers.dialects import get_dialect

    return get_dialect(provider.dialect).probe_headers(provider)


def _now_iso() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def probe_provider(
    provider: ProviderSpec, client: httpx.AsyncClient, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ProbeResult:
    """One GET of the provider's health URL; never raises."""
    url = health_url(provider)
    started = time.perf_counter()
    try:
        response = await client.get(url, headers=health_headers(provider), timeout=timeout_s)
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
) -> list[ProbeResult]:
    """Probe the given providers (all of the snapshot's by default) concurrently and record the results."""
    names = list(only) if only is not None else sorted(snapshot.providers)
    providers = [snapshot.providers[n] for n in names if n in snapshot.providers]
    if not providers:
        return []
    own = client is None
    client = client or httpx.AsyncClient(follow_redirects=True)
    try:
        found = await asyncio.gather(*(probe_provider(p, client, timeout_s) for p in providers))
    finally:
        if own:
            await client.aclose()
    for result in found:
        record_result(result)
    return list(found)


def record_result(result: ProbeResult) -> None:
    """Keep the result, set provider_up, and put status changes in the dashboard feed
    (every result still reaches the page through the periodic state refresh)."""
    previous = results.get(result.name)
    results[result.name] = result
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
    for name in [n for n in results if n not in snapshot.providers]:
        results.pop(name, None)
        metrics.provider_status(name, None)


def probe_targets(snapshot: Snapshot, probe_everything: bool) -> list[str]:
    return sorted(n for n, p in snapshot.providers.items() if probe_everything or p.health_probe)


async def run_prober() -> None:
    """Background loop of a serving process (started by routing.ops.wiring)."""
    from django.conf import settings

    from routing.config import live

    interval = float(settings.SWITCHBOARD_HEALTH_INTERVAL_S)
    async with httpx.AsyncClient(follow_redirects=True) as client:
        while True:
            snapshot = live.current()
            forget_missing(snapshot)
            targets = probe_targets(snapshot, bool(settings.SWITCHBOARD_HEALTH_PROBES))
            if targets:
                try:
                    await probe_all(snapshot, targets, timeout_s=min(DEFAULT_TIMEOUT_S, interval), client=client)
                except Exception:  # noqa: BLE001 - keep probing next round
                    log.exception("health probe round failed")
            await asyncio.sleep(interval)


def health_providers_payload(snapshot: Snapshot) -> bytes:
    """Body of GET /health/providers: every configured provider, "unknown" until probed. Memory only."""
    out = []
    for name in sorted(snapshot.providers):
        result = results.get(name)
        if result is None:
            out.append(
                {"name": name, "status": UNKNOWN, "latency_ms": None, "checked_at": None, "detail": "not probed yet"}
            )
        else:
            out.append(result.as_dict())
    return orjson.dumps({"providers": out})
