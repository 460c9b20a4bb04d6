"""Explain how a hypothetical request would be routed (the `explain_route` command).

`explain` runs the same pure functions the request path runs (model selection,
org policy, chain, preflight) over a snapshot and reports every step, so an
operator can see why a request would be denied, which fallbacks exist and why a
link would be skipped. Secrets (API keys) are never part of the output.
"""

from __future__ import annotations

from typing import Any

from policies.decision import decide
from routing.config.snapshot import Snapshot
from routing.core import errors
from routing.core.errors import GatewayError
from routing.plan import chain as chain_mod
from routing.plan import preflight

_SKIP_DETAIL = {
    "model_denied": "the org's policy denies this model",
    "model_not_found": "no model or alias with this id exists",
}


def _breaker_states() -> dict[tuple[str, ...], str]:
    """Breaker state per key as this process sees it."""
    from routing.core.breaker import registry

    return {view.key: view.state.name.lower() for view in registry.views()}


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
) -> dict[str, Any]:
    """Describe the routing of a request by `org_name` for `model_name`.

    Raises ValueError for an unknown org. The result's `error` is the error the
    request would get (None when some link would be tried), `serves` the first
    link that would be tried.
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
    }
    if model is None:
        out["error"] = _error(errors.model_not_found(name))
        return out

    decision = decide(snapshot, org, model.id)
    out["allowed"] = decision.allowed
    out["decision"] = decision.reason
    if decision.policy is not None:
        p = decision.policy
        out["policy"] = {
            "pattern": p.pattern,
            "priority": p.priority,
            "action": p.action,
            "fallback_chain": None if p.fallback_chain is None else list(p.fallback_chain),
        }

    req = preflight.Requirements(kind=kind, streaming=stream, tools=tools, known_tokens=tokens or 0)
    out["requirements"] = {"kind": kind, "needs": list(req.needs), "estimated_tokens": tokens}

    links = preflight.apply(chain_mod.build_chain(snapshot, org, model, name), req)
    breakers = _breaker_states()
    for position, link in enumerate(links):
        m = link.model
        byo = link.breaker_key.org is not None
        entry: dict[str, Any] = {
            "position": position,
            "model": m.id,
            "provider": m.provider.name or None,
            "base_url": link.base_url or None,
            "credentials": "org" if byo else "platform",
            "breaker_key": link.breaker_key.wire(),
            "breaker": breakers.get(link.breaker_key, "closed") if link.skip_reason != "model_not_found" else None,
            "kept": link.skip_reason is None,
            "skip_reason": link.skip_reason,
            "detail": _SKIP_DETAIL.get(link.skip_reason or ""),
        }
        if link.skip_reason in (preflight.UNSUPPORTED, preflight.CONTEXT_LENGTH):
            found = preflight.missing(m, req)
            if found is not None:
                what = found[1]
                if what == "context_window":
                    entry["detail"] = f"estimated {req.estimated_tokens} tokens > context_window {m.context_window}"
                elif what == "max_output_tokens":
                    entry["detail"] = f"requested output exceeds max_output_tokens {m.max_output_tokens}"
                else:
                    entry["detail"] = f"missing capability '{what}'"
        elif link.skip_reason is None and entry["breaker"] == "open":
            entry["detail"] = "breaker open: skipped until its cooldown ends"
        if link.deployments:
            entry["routing"] = link.routing
            entry["deployments"] = deployments(link, breakers)
        out["chain"].append(entry)

    if not decision.allowed:
        out["error"] = _error(errors.model_denied(model.id))
    elif not preflight.servable(links):
        out["error"] = _error(preflight.no_link_error(links, req))
    else:
        out["serves"] = next(link.model.id for link in links if link.skip_reason is None)
    return out


def deployments(link: Any, breakers: dict[tuple[str, ...], str], rand: Any = None) -> list[dict[str, Any]]:
    """Each deployment of a link with its live figures in this process, and which one the
    next try would pick (docs/deployments.md#visibility; `weighted` draws at random, so its
    `share` is the probability and `next` one draw)."""
    import random

    from routing.core.balance import balancer

    rows: list[dict[str, Any]] = []
    eligible = []
    for target in link.deployments:
        figures = balancer.peek(target.key)
        state = breakers.get(target.key, "closed")
        full = balancer.room_s(target, 0) > 0
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
    picked = balancer.pick(link.routing, eligible, rand or random.random)
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
            if link["kept"]:
                verdict = "kept" + (f" ({link['detail']})" if link["detail"] else "")
            else:
                verdict = f"skipped: {link['skip_reason']}" + (f" ({link['detail']})" if link["detail"] else "")
            rows.append(
                (
                    str(link["position"]),
                    link["model"],
                    link["provider"] or "-",
                    link["credentials"],
                    link["breaker"] or "-",
                    verdict,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
        lines.append("chain (breaker state as seen by this process):")
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
    if result["error"] is not None:
        err = result["error"]
        lines.append(f"result:    {err['status']} {err['code']}: {err['message']}")
    else:
        lines.append(f"result:    served by {result['serves']} (unless its upstream fails)")
    return "\n".join(lines)
