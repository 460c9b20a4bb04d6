"""Explain how a hypothetical request would be routed (the `explain_route` command).

`explain` runs the same pure functions the request path runs (model selection,
org policy, chain, preflight) over a snapshot and reports every step, so an
operator can see why a request would be denied, which fallbacks exist and why a
link would be skipped. Secrets (API keys) are never part of the output.

Breaker states are what a request would meet, cluster-wide: the link's shared breaker
and the org's own view of it (docs/resilience.md#org-views). The ops floor's
`routing.runtime.cluster.breaker_sync.breaker_states()` reads them from where they are shared (the Redis state of routing.runtime.cluster.breaker_sync, and the
operators' force-opens in the snapshot), adding this process's registry when it serves
requests; a link open for the request is skipped as the executor would skip it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from policies.decision import decide
from routing.config.snapshot import Snapshot
from routing.core import errors
from routing.core.breaker import BreakerRegistry
from routing.core.errors import GatewayError
from routing.core.picking import Picker
from routing.plan import chain as chain_mod
from routing.plan import preflight

_SKIP_DETAIL = {
    "model_denied": "the org's policy denies this model",
    "model_not_found": "no model or alias with this id exists",
}


# Which state wins when two sources disagree: the one a request is the more likely to meet refused.
_RANK = {"closed": 0, "half_open": 1, "open": 2, "forced": 3}


@dataclass
class BreakerStates:
    """Breaker states to explain with: per link key, and per (link key, org) for org views.

    Each value is (state name, seconds of cooldown left); `source` says where they come from.
    `known`: False when they cannot be read (no REDIS_URL in a process that serves nothing, or
    Redis unreachable): a link with no entry is then "unknown", never assumed "closed".
    """

    source: str
    known: bool = True
    links: dict[tuple[str, ...], tuple[str, float]] = field(default_factory=dict)
    orgs: dict[tuple[tuple[str, ...], str], tuple[str, float]] = field(default_factory=dict)

    def put(self, key: tuple[str, ...], org: str | None, state: str, left: float) -> None:
        table: dict[Any, tuple[str, float]] = self.links if org is None else self.orgs
        where = key if org is None else (key, org)
        old = table.get(where)
        if old is None or _RANK[state] > _RANK[old[0]]:
            table[where] = (state, left)

    @property
    def unseen(self) -> str:
        """The state of a link (or org view) with no entry: closed when the states are known."""
        return "closed" if self.known else "unknown"

    def link(self, key: tuple[str, ...]) -> tuple[str, float]:
        return self.links.get(key, (self.unseen, 0.0))

    def org(self, key: tuple[str, ...], org: str | None) -> tuple[str, float]:
        return self.orgs.get((key, org), (self.unseen, 0.0)) if org is not None else ("closed", 0.0)


def local_states(registry: BreakerRegistry, states: BreakerStates | None = None) -> BreakerStates:
    """This process's breaker registry (links, org views, forced): truthful for the process serving."""
    states = states if states is not None else BreakerStates("this process")
    for view in registry.views():
        name = "forced" if view.forced_reason is not None else view.state.name.lower()
        states.put(tuple(view.key), None, name, view.cooldown_remaining_s)
    for ov in registry.org_views():
        states.put(tuple(ov.key), ov.org, ov.state.name.lower(), ov.cooldown_remaining_s)
    return states


def _error(exc: GatewayError) -> dict[str, Any]:
    return {"status": exc.status, "code": exc.code, "message": exc.message}


def explain(
    snapshot: Snapshot,
    org_name: str,
    model_name: str,
    stream: bool = False,
    tools: bool = False,
    tokens: int | None = None,
    kind: str = "chat",
    states: BreakerStates | None = None,
    registry: BreakerRegistry | None = None,
    picker: Picker | None = None,
) -> dict[str, Any]:
    """Describe the routing of a request by `org_name` for `model_name`.

    Raises ValueError for an unknown org. The result's `error` is the error the
    request would get (None when some link would be tried), `serves` the first
    link that would be tried: a link whose breaker (or the org's view of it) is open
    is skipped as a request would skip it. `states`: the breaker states to use
    (default: those of `registry`, the process's breakers); `picker`: the process's
    deployment picker, whose figures the deployments show.
    """
    org = snapshot.orgs.get(org_name)
    if org is None:
        known = ", ".join(sorted(snapshot.orgs)) or "none"
        raise ValueError(f"unknown org {org_name!r}; configured orgs: {known}")

    name = model_name.strip()
    model = snapshot.resolve(name)
    out: dict[str, Any] = {
        "org": org.name,
        "requested": name,
        "model": model.id if model else None,
        "alias": model is not None and model.id != name,
        "default_action": org.default_action,
        "policy": None,
        "allowed": None,
        "decision": None,
        "requirements": None,
        "chain": [],
        "serves": None,
        "error": None,
        "breakers_from": None,
        "states_known": None,
    }
    if model is None:
        out["error"] = _error(errors.model_not_found(name))
        return out

    decision = decide(snapshot, org, model.id)
    out["allowed"] = decision.allowed
    out["decision"] = decision.reason
    out["policy"] = _policy(decision.policy)
    req = preflight.Requirements(kind=kind, streaming=stream, tools=tools, known_tokens=tokens or 0)
    out["requirements"] = {"kind": kind, "needs": list(req.needs), "estimated_tokens": tokens}

    links = preflight.apply(chain_mod.build_chain(snapshot, org, model, name), req)
    states = states if states is not None else local_states(registry if registry is not None else BreakerRegistry())
    out["breakers_from"], out["states_known"] = states.source, states.known
    serves, open_left = _chain(links, states, req, org.name, out["chain"], picker)
    if not decision.allowed:
        out["error"] = _error(errors.model_denied(model.id))
    elif not preflight.servable(links):
        out["error"] = _error(preflight.no_link_error(links, req))
    elif serves is None:  # every kept link is open for this request
        out["error"] = _error(errors.circuit_open(model.id, min(open_left, default=0.0)))
    else:
        out["serves"] = serves
    return out


def _policy(p: Any) -> dict[str, Any] | None:
    """The org policy that decided, as explain shows it; None when the org's default action did."""
    if p is None:
        return None
    return {
        "pattern": p.pattern,
        "priority": p.priority,
        "action": p.action,
        "fallback_chain": None if p.fallback_chain is None else list(p.fallback_chain),
    }


def _chain(
    links: list[Any],
    states: BreakerStates,
    req: preflight.Requirements,
    org: str,
    entries: list[dict[str, Any]],
    picker: Picker | None,
) -> tuple[str | None, list[float]]:
    """Append one entry per link to `entries`; returns the model that would serve (None: none) and the
    cooldowns left of the kept links a request would find open."""
    # a forced breaker is an open one (the detail says who holds it)
    breakers = {key: "open" if state == "forced" else state for key, (state, _) in states.links.items()}
    unseen = states.unseen
    open_left: list[float] = []
    serves = None
    for position, link in enumerate(links):
        m = link.model
        state, left = states.link(link.breaker_key)
        view, view_left = states.org(link.breaker_key, link.org)
        entry = _entry(position, link, breakers, view, unseen)
        if link.skip_reason in (preflight.UNSUPPORTED, preflight.CONTEXT_LENGTH):
            entry["detail"] = _unfit(m, req) or entry["detail"]
        elif link.skip_reason is None and not link.deployments:
            refused = _refusal(state, left, view, view_left, org)
            if refused is not None:
                entry["detail"], wait = refused
                entry["open_for_request"] = True  # kept by preflight, skipped for its breaker
                open_left.append(wait)
            elif serves is None:
                serves = m.id
        elif link.skip_reason is None:
            serves = serves or m.id
        if link.deployments:
            entry["routing"] = link.routing
            entry["deployments"] = deployments(link, breakers, picker=picker, unseen=unseen)
        entries.append(entry)
    return serves, open_left


def _entry(position: int, link: Any, breakers: dict[Any, str], view: str, unseen: str = "closed") -> dict[str, Any]:
    """One link of the chain as explain shows it (no secrets: the credentials' owner, not the key).
    `unseen`: the state of a link the states do not list ("unknown" when they could not be read)."""
    m = link.model
    return {
        "position": position,
        "model": m.id,
        "provider": m.provider.name or None,
        "base_url": link.base_url or None,
        "credentials": "org" if link.breaker_key.org is not None else "platform",
        "breaker_key": link.breaker_key.wire(),
        "breaker": breakers.get(link.breaker_key, unseen) if link.skip_reason != "model_not_found" else None,
        "org_view": view if view not in ("closed", "unknown") else None,
        "kept": link.skip_reason is None,
        "skip_reason": link.skip_reason,
        "detail": _SKIP_DETAIL.get(link.skip_reason or ""),
    }


def _unfit(m: Any, req: preflight.Requirements) -> str | None:
    """Why preflight skipped the model for this request: the window, the output cap or a capability."""
    found = preflight.missing(m, req)
    if found is None:
        return None
    what = found[1]
    if what == "context_window":
        return f"estimated {req.estimated_tokens} tokens > context_window {m.context_window}"
    if what == "max_output_tokens":
        return f"requested output exceeds max_output_tokens {m.max_output_tokens}"
    return f"missing capability '{what}'"


def _refusal(state: str, left: float, view: str, view_left: float, org: str) -> tuple[str, float] | None:
    """(detail, seconds left) when a request of `org` would skip the link; None when it would try it."""
    if state == "forced":
        return "breaker open (forced by an operator): skipped until reset", left
    if state == "open":
        return f"breaker open: skipped for everyone until its cooldown ends ({left:.0f} s)", left
    if view == "open":
        return f"open for org {org} (its own view of the link): its requests skip it for {view_left:.0f} s", view_left
    if state == "half_open" or view == "half_open":
        return None  # the next request is admitted as the probe
    return None


def deployments(
    link: Any,
    breakers: dict[tuple[str, ...], str],
    rand: Any = None,
    picker: Picker | None = None,
    unseen: str = "closed",
) -> list[dict[str, Any]]:
    """Each deployment of a link with its live figures in this process, and which one the
    next try would pick (docs/deployments.md#visibility; `weighted` draws at random, so its
    `share` is the probability and `next` one draw)."""
    picker = picker if picker is not None else Picker()
    rows: list[dict[str, Any]] = []
    eligible = []
    for target in link.deployments:
        figures = picker.peek(target.key)
        state = breakers.get(target.key, unseen)
        full = picker.room_s(target, 0) > 0
        if state != "open" and not full:
            eligible.append(target)
        ewma = None if figures is None or figures.ewma_s is None else round(figures.ewma_s * 1000.0, 1)
        rows.append(
            {
                "provider": target.name,
                "upstream_model": target.link.model.upstream_model,
                "weight": target.weight,
                "rpm": target.rpm,
                "tpm": target.tpm,
                "breaker": state,
                "at_capacity": full,
                "in_flight": 0 if figures is None else figures.in_flight,
                "latency_ms": ewma,
                "share": None,
                "next": False,
            }
        )
    total = sum(t.weight for t in eligible)
    picked = picker.pick(link.routing, eligible, rand or random.random)
    for target, row in zip(link.deployments, rows, strict=True):
        if target in eligible and link.routing == "weighted":
            row["share"] = round(target.weight / total, 3)
        row["next"] = target is picked
    return rows


def render(result: dict[str, Any]) -> str:
    """A readable multi-line report of `explain`'s result."""
    lines = [f"org:       {result['org']} (default action: {result['default_action']})"]
    target = result["model"] or "-"
    alias = " (alias)" if result["alias"] else ""
    lines.append(f"requested: {result['requested']} -> model {target}{alias}")
    policy = result["policy"]
    if policy is not None:
        chain_note = ""
        if policy["fallback_chain"] is not None:
            chain_note = f", fallback_chain {policy['fallback_chain']}"
        lines.append(
            f"policy:    {policy['pattern']!r} priority {policy['priority']} -> {policy['action']}{chain_note}"
        )
    elif result["decision"] is not None:
        lines.append(f"policy:    none matched -> default action {result['default_action']}")
    if result["decision"] is not None:
        lines.append(f"decision:  {result['decision']}")
    req = result["requirements"]
    if req is not None:
        tokens = "not given" if req["estimated_tokens"] is None else f"~{req['estimated_tokens']}"
        lines.append(f"request:   {req['kind']}, needs {', '.join(req['needs'])}; prompt tokens {tokens}")
    if result["chain"]:
        header = ("#", "model", "provider", "credentials", "breaker", "result")
        rows = [header]
        for link in result["chain"]:
            if link.get("open_for_request"):
                verdict = f"skipped: circuit_open ({link['detail']})"
            elif link["kept"]:
                verdict = "kept" + (f" ({link['detail']})" if link["detail"] else "")
            else:
                verdict = f"skipped: {link['skip_reason']}" + (f" ({link['detail']})" if link["detail"] else "")
            rows.append(
                (
                    str(link["position"]),
                    link["model"],
                    link["provider"] or "-",
                    link["credentials"],
                    _breaker_cell(link, result["org"]),
                    verdict,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
        lines.append(f"chain (breaker states: {result.get('breakers_from') or 'this process'}):")
        for row, link in zip(rows, [None, *result["chain"]], strict=True):
            lines.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1])
            if link is not None and link.get("deployments"):
                lines.append(f"      deployments ({link['routing']}):")
                for d in link["deployments"]:
                    latency = "-" if d["latency_ms"] is None else f"{d['latency_ms']} ms"
                    share = "" if d["share"] is None else f", share {d['share']:.0%}"
                    lines.append(
                        f"      {'*' if d['next'] else ' '} {d['provider']}: {d['upstream_model']} weight {d['weight']}"
                        f"{share}, breaker {d['breaker']}{', AT CAPACITY' if d['at_capacity'] else ''}, "
                        f"in flight {d['in_flight']}, latency {latency}"
                    )
    lines.append(_result_line(result))
    return "\n".join(lines)


def _breaker_cell(link: dict[str, Any], org: str) -> str:
    """The breaker as this org's request meets it: its own view first when that is open."""
    state, view = link["breaker"] or "-", link.get("org_view")
    if view == "open":
        return f"open for {org} (link {state})"
    return state + (f", org view {view}" if view else "")


def _result_line(result: dict[str, Any]) -> str:
    """The verdict; with unknown breaker states it says which link would be tried, not who serves."""
    if result["error"] is not None:
        err = result["error"]
        return f"result:    {err['status']} {err['code']}: {err['message']}"
    if result.get("states_known") is False:
        return (
            f"result:    {result['serves']} would be tried first if its breaker is closed; the breaker states "
            "are unknown here, so a serving process may skip it or answer 503 circuit_open "
            "(set REDIS_URL to share them, or see the dashboard)"
        )
    return f"result:    served by {result['serves']} (unless its upstream fails)"
