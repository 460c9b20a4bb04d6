"""Gateway metrics (docs/metrics.md#prometheus-metrics) as prometheus_client objects in the default registry.

django-prometheus's /metrics view exports the default registry, so these appear
next to its Django metrics. The /v1 path records with these objects directly (the
django-prometheus middleware is sync and far too slow for it); `.labels()` children
are cached in dicts keyed by label tuples so a hot-path observation is a dict hit
and an increment.

Breaker keys of BYO credentials are exported with the model label
"<model>@<org>" (`BreakerKey.label`): each such breaker is separate (docs/resilience.md#r5) and an
operator needs to see which org's link is open; their number is bounded by the
configured credentials. /metrics is often public, and org names are tenant names, so
every org label is `org_label(name)`: a keyed hash unless the operator turned
SWITCHBOARD_METRICS_ORG_NAMES on (docs/security.md#metrics).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Any

from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram

from routing.config import live
from routing.core.breaker import BreakerKey, BreakerRegistry
from routing.core.dimensions import LIMIT_DIMENSIONS
from routing.runtime import overload

CIRCUIT_STATE = Gauge(
    "switchboard_circuit_state",
    "Circuit breaker state per link: 0 closed, 1 open (also when forced open), 2 half-open.",
    ["provider", "model"],
    multiprocess_mode="livemax",  # serve --workers: the worst state any live worker sees
)
CIRCUIT_ORG_STATE = Gauge(
    "switchboard_circuit_org_state",
    "An organisation's own view of a shared link (docs/resilience.md#org-views): 0 closed, 1 open, 2 half-open.",
    ["provider", "model", "org"],
    multiprocess_mode="livemax",
)
PARKED = Gauge(
    "switchboard_parked",
    "1 while a link is parked: its provider said it is out of quota or credit (docs/errors.md#upstream).",
    ["provider", "model"],
    multiprocess_mode="livemax",
)
MISCONFIGURED = Gauge(
    "switchboard_misconfigured",
    "1 while a link's provider refuses the gateway's credentials (401/403), until a call through it succeeds.",
    ["provider", "model"],
    multiprocess_mode="livemax",
)
PROVIDER_UP = Gauge(
    "switchboard_provider_up",
    "Last health probe: 1 up, 0 down (absent: unknown).",
    ["provider"],
    multiprocess_mode="livemin",  # down as soon as one live worker's probe says so
)
REQUESTS = Counter(
    "switchboard_requests_total",
    "Proxied requests by endpoint, requested model, model that served and HTTP status.",
    ["endpoint", "model", "model_used", "status"],
)
ATTEMPTS = Counter(
    "switchboard_upstream_attempts_total",
    "Upstream attempts by provider, model and outcome.",
    ["provider", "model", "outcome"],
)
FALLBACKS = Counter(
    "switchboard_fallbacks_total",
    "Moves from one link of a chain to the next, with the reason.",
    ["from_model", "to_model", "reason"],
)
OVERHEAD = Histogram(
    "switchboard_overhead_seconds",
    "Time spent in the gateway itself (total minus upstream time).",
    buckets=(0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05),
)
CONFIG_RELOADS = Counter("switchboard_config_reloads_total", "Snapshot rebuilds by result.", ["result"])
USAGE_BACKLOG = Gauge(
    "switchboard_usage_backlog",
    "Usage records not yet in the database (memory + spool).",
    multiprocess_mode="livesum",
)
DEGRADED = Gauge(
    "switchboard_degraded",
    "1 while a component is unavailable and the process serves without it (database: the last good config file).",
    ["component"],
    multiprocess_mode="livemax",
)


def set_degraded_gauge(component: str, flag: bool) -> None:
    """Listener of routing.config.live.set_degraded."""
    DEGRADED.labels(component=component).set(1 if flag else 0)


for _result in ("ok", "rejected"):
    CONFIG_RELOADS.labels(_result)

# Rate limits and budgets (docs/limits.md): scope org|agent, limit rpm|tpm|budget.
LIMIT_PROCESSES = Gauge(
    "switchboard_limit_processes",
    "Serving processes seen sharing the rate limits and budgets through Redis: the fail-open share's divisor.",
    multiprocess_mode="livemax",
)
RATE_LIMITED = Counter(
    "switchboard_rate_limited_total",
    "Requests refused by an org's, agent's or API key's own rate limit or budget (docs/limits.md).",
    ["scope", "limit"],
)
_LIMIT_LABEL = {**{d.name: d.key for d in LIMIT_DIMENSIONS}, "budget": "budget"}
_rate_limited = {
    (s, k): RATE_LIMITED.labels(s, label) for s in ("org", "agent", "key") for k, label in _LIMIT_LABEL.items()
}


def rate_limited(scope: str, limit: str) -> None:
    """One request refused by the `scope` (org|agent|key) `limit` (requests|tokens|budget), exported as rpm|tpm|budget."""
    _rate_limited[(scope, limit)].inc()


# Response cache (docs/cache.md): per cached model, hit | miss | bypass | coalesced.
CACHE = Counter(
    "switchboard_cache_total",
    "Requests to models with a response cache, by result: hit, miss, bypass, coalesced (docs/cache.md).",
    ["model", "result"],
)
_cache: dict[tuple[str, str], Any] = {}


def cache_result(model: str, result: str) -> None:
    """One request to a cached model (resolved id: configured models only, a bounded label set)."""
    key = (model, result)
    child = _cache.get(key)
    if child is None:
        child = _cache[key] = CACHE.labels(model, result)
    child.inc()


# Spend (docs/metrics.md#spend): prompt-cache affinity and prices.
AFFINITY_REPINS = Counter(
    "switchboard_affinity_repins_total",
    "Conversations moved off the deployment they were pinned to: it was open, parked, full or failed "
    "(docs/deployments.md#affinity).",
    ["model"],
)
INPUT_TOKENS = Counter(
    "switchboard_input_tokens_total",
    "Prompt tokens the providers reported per model and deployment (provider), all (kind=total) and those read "
    "from the provider's prompt cache (kind=cached): their ratio is the cached-input ratio.",
    ["model", "provider", "kind"],
)
UNPRICED = Counter(
    "switchboard_unpriced_total",
    "Served requests whose cost is unknown (a model or token class without any price) or zero although tokens "
    "were used (docs/configuration.md#prices).",
    ["model"],
)
_repins: dict[str, Any] = {}
_input_tokens: dict[tuple[str, str], tuple[Any, Any]] = {}
_unpriced: dict[str, Any] = {}


def affinity_repin(model: str) -> None:
    """routing.core.affinity.Pins's observer: one conversation re-pinned (a configured model: bounded labels)."""
    child = _repins.get(model)
    if child is None:
        child = _repins[model] = AFFINITY_REPINS.labels(model)
    child.inc()


def input_tokens(model: str, provider: str, total: int, cached: int) -> None:
    """One served request's prompt tokens and the cached part of them, per deployment."""
    pair = _input_tokens.get((model, provider))
    if pair is None:
        pair = _input_tokens[(model, provider)] = (
            INPUT_TOKENS.labels(model, provider, "total"),
            INPUT_TOKENS.labels(model, provider, "cached"),
        )
    pair[0].inc(total)
    if cached:
        pair[1].inc(cached)


def unpriced(model: str) -> None:
    """One served request of `model` priced at nothing (a configured model: bounded labels)."""
    child = _unpriced.get(model)
    if child is None:
        child = _unpriced[model] = UNPRICED.labels(model)
    child.inc()


# serve --workers (docs/scale-out.md#metrics): values live in shared files, a function is never
# read there, so run_refresher sets them instead.
MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR" in os.environ


def watch_backlog(backlog: Callable[[], int]) -> None:
    """The usage backlog gauge reads the process's sink at scrape time (the composition root calls it)."""
    if not MULTIPROCESS:
        USAGE_BACKLOG.set_function(lambda: float(backlog()))


_requests: dict[tuple[str, str, str, int], Any] = {}
_attempts: dict[tuple[str, str, str], Any] = {}
_fallbacks: dict[tuple[str, str, str], Any] = {}
_circuits: dict[tuple[str, str], Any] = {}
_observe_overhead = OVERHEAD.observe


# Called per finished request with (the model that served, else the last one tried; status;
# fallback reason; latency s); the composition root adds the dashboard's counters.
request_listeners: list[Callable[[str, int, str | None, float | None], None]] = []


def observe_request(
    endpoint: str,
    model: str,
    model_used: str,
    status: int,
    overhead_s: float | None,
    fallback_reason: str | None = None,
    latency_s: float | None = None,
) -> None:
    """Count one finished request and its gateway overhead, and tell the request listeners."""
    key = (endpoint, model, model_used, status)
    child = _requests.get(key)
    if child is None:
        child = _request_child(endpoint, model, model_used, status)
    child.inc()
    if overhead_s is not None and overhead_s >= 0:
        _observe_overhead(overhead_s)
    if model_used:
        # Per link that served: "how much does chat-b carry, fallbacks included, and how fast".
        for listener in request_listeners:
            listener(model_used, status, fallback_reason, latency_s)


UNKNOWN_MODEL = "(unknown)"


def _request_child(endpoint: str, model: str, model_used: str, status: int) -> Any:
    """Create (and cache) a requests_total child. A requested name that is no configured
    model or alias is labelled "(unknown)" and not cached, so clients sending random
    model names cannot grow the label set or this cache."""

    if model and live.current().resolve(model) is None:
        key = (endpoint, UNKNOWN_MODEL, model_used, status)
        child = _requests.get(key)
        if child is None:
            child = _requests[key] = REQUESTS.labels(endpoint, UNKNOWN_MODEL, model_used, str(status))
        return child
    key = (endpoint, model, model_used, status)
    child = _requests[key] = REQUESTS.labels(endpoint, model, model_used, str(status))
    return child


class MetricsObserver:
    """The executor's observer: attempt outcomes and fallbacks, into metrics."""

    __slots__ = ()

    def attempt(self, link: Any, outcome_label: str) -> None:
        model = link.model
        key = (model.provider.name, model.id, outcome_label)
        child = _attempts.get(key)
        if child is None:
            child = _attempts[key] = ATTEMPTS.labels(*key)
        child.inc()

    def fallback(self, from_model: str, to_model: str, reason: str) -> None:
        key = (from_model, to_model, reason)
        child = _fallbacks.get(key)
        if child is None:
            child = _fallbacks[key] = FALLBACKS.labels(*key)
        child.inc()


def org_label(org: str) -> str:
    """An organisation as a metric label: its name when SWITCHBOARD_METRICS_ORG_NAMES is on, else
    "org-" and 12 hex digits of HMAC-SHA256(SECRET_KEY, name): stable across the processes and
    restarts of one deployment, and not reversible from a list of likely names without the key."""
    if settings.SWITCHBOARD_METRICS_ORG_NAMES:
        return org
    digest = hmac.new(settings.SECRET_KEY.encode(), org.encode(), hashlib.sha256).hexdigest()
    return f"org-{digest[:12]}"


def link_labels(key: tuple[str, ...]) -> tuple[str, str]:
    """(provider, model label) of a breaker key; BYO keys label the model "<model>@<org label>"."""
    key = BreakerKey.of(key)
    org = key.org
    return key.provider, key.model if org is None else f"{key.model}@{org_label(org)}"


def set_circuit(key: tuple[str, ...], state: int) -> None:
    labels = link_labels(key)
    child = _circuits.get(labels)
    if child is None:
        child = _circuits[labels] = CIRCUIT_STATE.labels(*labels)
    child.set(int(state))


def on_breaker_change(key: tuple[str, ...], old: Any, new: Any) -> None:
    """Breaker listener: the circuit gauge follows every transition."""
    set_circuit(key, int(new))


def on_org_breaker_change(key: tuple[str, ...], org: str, old: Any, new: Any) -> None:
    """Org-view listener: a series per (link, org) whose view ever left closed; bounded by the
    configured orgs and links."""
    provider, model = link_labels(key)
    CIRCUIT_ORG_STATE.labels(provider, model, org_label(org)).set(int(new))


def refresh_circuits(snapshot: Any, views: list[Any]) -> None:
    """Make the gauge match now: every configured link (closed unless its breaker says
    otherwise), BYO breakers that exist, and no series for links that are gone.
    Called at scrape time, off the request path."""
    wanted: dict[tuple[str, str], int] = {}
    for model in snapshot.models.values():
        wanted[(model.provider.name, model.id)] = 0
        for d in model.deployments:  # one series per deployment (docs/deployments.md#visibility)
            wanted[(d.provider.name, model.id)] = 0
    for view in views:
        try:
            key = BreakerKey.of(view.key)
        except ValueError:
            continue
        labels = link_labels(key)
        if key.org is None and labels not in wanted:
            continue  # a breaker of a link no longer configured
        state = 1 if getattr(view, "forced_reason", None) else int(view.state)
        wanted[labels] = state
    for labels in list(_circuits):
        if labels not in wanted:
            try:
                CIRCUIT_STATE.remove(*labels)
            except KeyError:
                pass
            _circuits.pop(labels, None)
    for labels, state in wanted.items():
        child = _circuits.get(labels)
        if child is None:
            child = _circuits[labels] = CIRCUIT_STATE.labels(*labels)
        child.set(state)


def config_reloaded(ok: bool) -> None:
    CONFIG_RELOADS.labels("ok" if ok else "rejected").inc()


def provider_status(name: str, up: bool | None) -> None:
    """Set provider_up; None (unknown, or the provider is gone) removes its series."""
    if up is None:
        try:
            PROVIDER_UP.remove(name)
        except KeyError:
            pass
        return
    PROVIDER_UP.labels(name).set(1 if up else 0)


_installed: set[int] = set()  # ids of the registries listened to


def install(breakers: BreakerRegistry) -> None:
    """Register the breaker listener once per registry (idempotent)."""
    if id(breakers) in _installed:
        return
    breakers.add_listener(on_breaker_change)
    breakers.add_org_listener(on_org_breaker_change)
    _installed.add(id(breakers))


REFRESH_S = 1.0


async def run_refresher(breakers: BreakerRegistry, backlog: Callable[[], int]) -> None:
    """serve --workers only: every REFRESH_S, write this worker's usage backlog and circuit
    states to the shared metric files, so a scrape of any worker shows them (a scrape-time
    refresh reaches the scraped worker only). A background task of gateway_project.process."""
    if not MULTIPROCESS:
        return

    while True:
        USAGE_BACKLOG.set(float(backlog()))
        refresh_circuits(live.current(), breakers.views())
        overload.refresh_metrics()
        await asyncio.sleep(REFRESH_S)


def parking_changed(key: Any, name: str, value: int) -> None:
    """routing.core.parking's observer: `switchboard_parked` / `switchboard_misconfigured` per link."""
    (PARKED if name == "PARKED" else MISCONFIGURED).labels(provider=key[0], model=key[1]).set(value)
