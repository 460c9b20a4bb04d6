"""The dashboard's limits view: per org and agent, where each stands against its limits and budget.

Read from this serving process's buckets and budget accounts (the composition root's
Limiter and Budgets), on the serving loop's thread; nothing is written. With
REDIS_URL the figures are the cluster's as of the last lease round (docs/limits.md#dashboard).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from routing.config import live
from routing.config.snapshot import Snapshot
from routing.core.budget_accounts import Budgets, period_bounds
from routing.core.dimensions import LIMIT_DIMENSIONS
from routing.core.limiter import AGENT, ORG, Limiter
from routing.ops.dashboard.views import staff_only
from routing.ops.scope import org_visible, visible_orgs
from routing.runtime.observe import feed
from routing.runtime.process import current


def _bucket(limiter: Limiter, key: tuple[str, ...], limit: int | None) -> dict[str, Any] | None:
    if limit is None:
        return None
    peeked = limiter.peek(key)
    if peeked is None:  # not used since this process started: full
        return {"limit": limit, "remaining": limit, "used": 0, "full_in_s": 0.0}
    _, remaining, full_in = peeked
    remaining = max(0.0, remaining)
    return {"limit": limit, "remaining": int(remaining), "used": max(0, limit - int(remaining)), "full_in_s": full_in}


def _budget(budgets: Budgets, key: tuple[str, ...], budget: tuple[float, str] | None, now: float) -> dict | None:
    if budget is None:
        return None
    usd, period = budget
    account = budgets.find(key)
    spent = reserved = 0.0
    if account is not None and account.period == period and (account.end is None or now < account.end):
        spent, reserved = account.spend(), account.reserved
    _, end = period_bounds(period, now)
    return {
        "usd": usd,
        "period": period,
        "spent": spent,
        "reserved": reserved,
        "left": max(0.0, usd - spent - reserved),
        "percent": min(100, round(100 * (spent + reserved) / usd)) if usd else 0,
        "resets": datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d %H:%M UTC") if end else "never",
    }


def limits_rows(
    snapshot: Snapshot, limiter: Limiter, budgets: Budgets, now: float, orgs: frozenset[str] | None = None
) -> list[dict[str, Any]]:
    """One row per org (of `orgs`, the user's: scope.visible_orgs), then its agents, that has a limit or a
    budget (agents as the keys name them)."""
    agents: dict[str, dict[str, Any]] = {}
    for key in snapshot.keys.values():
        agent = key.agent
        if agent.limits is not None or agent.budget is not None:
            agents.setdefault(agent.org.name, {})[agent.name] = agent
    rows: list[dict[str, Any]] = []
    for org in sorted(snapshot.orgs.values(), key=lambda o: o.name):
        if not org_visible(orgs, org.name):
            continue
        entries = [(ORG, org.name, (ORG, org.name), org.limits, org.budget)] if org.limits or org.budget else []
        for name, agent in sorted(agents.get(org.name, {}).items()):
            entries.append((AGENT, f"{org.name}/{name}", (AGENT, org.name, name), agent.limits, agent.budget))
        for scope, label, key, limits, budget in entries:
            values = limits or (None,) * len(LIMIT_DIMENSIONS)
            buckets = [
                (d.key, _bucket(limiter, (*key, d.name), value))
                for d, value in zip(LIMIT_DIMENSIONS, values, strict=True)
            ]
            rows.append(
                {"scope": scope, "name": label, "limits": buckets, "budget": _budget(budgets, key, budget, now)}
            )
    return rows


@staff_only
def limits_view(request: HttpRequest) -> HttpResponse:
    """Requests and tokens against each limit, spend against each budget, of this process's view."""
    proc = current()
    now = datetime.now(UTC).timestamp()
    orgs = visible_orgs(request.user)
    rows = feed.call_on_loop(lambda: limits_rows(live.current(), proc.limiter, proc.budgets, now, orgs))
    return render(
        request,
        "dashboard/limits.html",
        {"rows": rows, "title": "Limits and budgets", "shared": proc.limiter.shared, "dimensions": LIMIT_DIMENSIONS},
    )


def budget_summary(key: tuple[str, ...], raw: Any) -> str:
    """One line for the admin: the budget's spend this period and what requests in flight hold.

    This serving process's view (with REDIS_URL, the cluster's as of the last lease round).
    """
    if not isinstance(raw, dict) or "usd" not in raw or "period" not in raw:
        return "no budget"
    budget = (float(raw["usd"]), str(raw["period"]))
    proc = current()
    now = datetime.now(UTC).timestamp()
    info = feed.call_on_loop(lambda: _budget(proc.budgets, key, budget, now))
    when = "in total" if info["period"] == "total" else f"this {info['period']} (resets {info['resets']})"
    return (
        f"${info['spent']:.4f} spent {when}, ${info['reserved']:.4f} held by requests in flight, "
        f"of ${info['usd']:g} ({info['percent']}%): this serving process's view (docs/limits.md#dashboard)."
    )
