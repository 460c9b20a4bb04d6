"""This process's dashboard state: every link with its breaker, providers with health, counters.

Built from memory only (the live snapshot, the breaker registry, the last probe
results, the rolling counters, the event feed), never the database, so a refresh
is cheap; `run_broadcaster` publishes it every SWITCHBOARD_DASHBOARD_REFRESH_S
while anyone may be watching.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.conf import settings

from routing.config import live
from routing.core.breaker import BreakerKey, State
from routing.runtime import overload
from routing.runtime.observe import feed, health
from routing.runtime.observe.counters import model_stats
from routing.runtime.process import current


def refresh_s() -> float:
    return float(getattr(settings, "SWITCHBOARD_DASHBOARD_REFRESH_S", 1.5))


def link_state(view: Any) -> str:
    if view is None:
        return "closed"
    if view.forced_reason is not None:
        return "forced"
    return feed.STATE_NAMES[int(view.state)]


def build_state() -> dict[str, Any]:
    """This process's view: every link with its breaker, providers with health, model counters."""
    snapshot = live.current()
    breakers = current().breakers
    views = {BreakerKey.of(v.key): v for v in breakers.views()}
    org_open: dict[BreakerKey, list[dict[str, Any]]] = {}  # org views of a link that refuse (or probe) that org
    for ov in breakers.org_views():
        if ov.state is not State.CLOSED:
            org_open.setdefault(BreakerKey.of(ov.key), []).append(
                {
                    "org": ov.org,
                    "state": feed.STATE_NAMES[int(ov.state)],
                    "failures": ov.consecutive_failures,
                    "cooldown_s": round(ov.cooldown_remaining_s, 3),
                }
            )
    links = []
    seen = set()
    for model in sorted(snapshot.models.values(), key=lambda m: (m.provider.name, m.id)):
        if model.deployments:  # one row per deployment, together under the model (docs/deployments.md)
            links += deployment_rows(model, views, seen)
            continue
        key = BreakerKey(model.provider.name, model.id)
        seen.add(key)
        links.append(link_entry(key, views.get(key), sorted(org_open.get(key, ()), key=lambda v: v["org"])))
    for key, view in sorted(views.items()):
        if key.org is not None and BreakerKey(key.provider, key.model) in seen:
            links.append(link_entry(key, view))
    providers = []
    for name in sorted(snapshot.providers):
        result = health.results().get(name)
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
        "process": feed.PROCESS_ID,
        "at": time.time(),
        "version": snapshot.config_version,
        "links": links,
        "providers": providers,
        "models": model_stats(),
        "feed": feed.events(),
    }


def scoped_state(message: dict[str, Any], orgs: frozenset[str] | None) -> dict[str, Any]:
    """A state (or events) message as an org-scoped operator seeing `orgs` gets it: the shared links as they
    are, but no other org's own breaker, org view or event (docs/operations.md#org-scoped-staff)."""
    if orgs is None:
        return message
    out = dict(message)
    if "links" in message:
        out["links"] = [_scoped_link(link, orgs) for link in message["links"] if link.get("org") in (None, *orgs)]
    for field in ("feed", "events"):
        if field in message:
            out[field] = [e for e in message[field] if e.get("org") in (None, *orgs)]
    return out


def _scoped_link(link: dict[str, Any], orgs: frozenset[str]) -> dict[str, Any]:
    views = [v for v in link.get("org_views") or () if v["org"] in orgs]
    return {**link, "org_views": views, "org_open": [v["org"] for v in views]}


def link_entry(key: BreakerKey, view: Any, org_views: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One row of the links table: the link, its breaker key (wire form) and the breaker's state.

    `org_views`: the orgs whose own view of the shared link is not closed, each with its state,
    failure count and cooldown left (docs/resilience.md#org-views); `org_open` names them."""
    parking = current().parking
    return {
        "link": key.link,
        "key": key.wire(),
        "provider": key.provider,
        "model": key.model,
        "org": key.org,
        "state": link_state(view),
        "failures": view.consecutive_failures if view else 0,
        "cooldown_s": round(view.cooldown_remaining_s, 3) if view else 0.0,
        "forced_reason": view.forced_reason if view else None,
        "forced_until": view.forced_until if view else None,
        "org_open": [v["org"] for v in org_views or ()],
        "org_views": org_views or [],
        "parked_s": round(parking.left_s(key), 1) if parking.until else 0.0,  # out of quota (docs/errors.md#upstream)
        "misconfigured": parking.misconfigured.get(key, ""),  # the provider refused the credentials
    }


def deployment_rows(model: Any, views: dict[BreakerKey, Any], seen: set[BreakerKey]) -> list[dict[str, Any]]:
    """The rows of a model's deployments, in configuration order, each saying which of how many it is."""

    picker = current().picker
    rows = []
    count = len(model.deployments)
    for index, d in enumerate(model.deployments):
        key = BreakerKey(d.provider.name, model.id)
        seen.add(key)
        row = link_entry(key, views.get(key))
        figures = picker.peek(key)
        row["deployment"] = {
            "index": index + 1,
            "of": count,
            "weight": d.weight,
            "routing": model.routing,
            "in_flight": figures.in_flight if figures is not None else 0,
            "overload": overload.figures(key),  # adaptive limit and queue (docs/overload.md); None: off
        }
        rows.append(row)
    return rows


def state_message() -> dict[str, Any]:
    """The channel-layer message carrying this process's state to every dashboard."""
    return {"type": "dashboard.state", "state": build_state()}


async def run_broadcaster() -> None:
    """Publish this process's state every refresh interval while anyone may be watching."""
    feed.install(current().breakers)
    while True:
        await asyncio.sleep(refresh_s())
        if feed.has_audience():
            await feed.publish(feed.DASHBOARD_GROUP, state_message())
