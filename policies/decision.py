"""Which model a request asks for, and whether its organisation may use it (docs/configuration.md#policies).

Pure functions over the snapshot. A decision depends only on (org, model id) and
the snapshot, so it is memoised in `snapshot.cache`: the first request pays for
the pattern scan, later ones a dict lookup, and a configuration rebuild (a new
snapshot) forgets every decision at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from routing.config.snapshot import AgentSpec, OrgSpec, PolicySpec, Snapshot
from routing.core import errors


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of the org policy for one model id.

    `policy` is the policy that matched (None when the org's default action applied);
    `reason` is a short human sentence for logs and `explain_route`.
    """

    allowed: bool
    policy: PolicySpec | None
    reason: str


def select_model_name(body_model: Any, agent: AgentSpec) -> str:
    """The trimmed `model` of the body, else the agent's default model.

    Raises 400 `invalid_request` (param "model") for a non-string model and
    400 `model_required` when neither the body nor the agent names one.
    """
    if body_model is not None:
        if not isinstance(body_model, str):
            raise errors.model_not_string(type(body_model).__name__)
        name = body_model.strip()
        if name:
            return name
    if agent.default_model:
        return agent.default_model
    raise errors.model_required(agent.name)


def evaluate(org: OrgSpec, model_id: str) -> Decision:
    """Uncached policy evaluation: the first policy (ascending priority) whose pattern matches wins."""
    for policy in org.policies:
        if policy.regex.fullmatch(model_id) is not None:
            allowed = policy.action == "allow"
            verb = "allowed" if allowed else "denied"
            return Decision(allowed, policy, f"{verb} by policy {policy.pattern!r} (priority {policy.priority})")
    allowed = org.default_action != "deny"
    verb = "allowed" if allowed else "denied"
    return Decision(allowed, None, f"{verb} by the default action of org {org.name!r} (no policy matched)")


def decide(snapshot: Snapshot, org: OrgSpec, model_id: str) -> Decision:
    """The org's decision for a model id, memoised per snapshot.

    Only ids of configured models are memoised, so arbitrary names sent by
    clients cannot grow the cache.
    """
    cache_key = ("decision", org.name, model_id)
    cached = snapshot.cache.get(cache_key)
    if cached is not None:
        return cached
    decision = evaluate(org, model_id)
    if model_id in snapshot.models:
        snapshot.cache[cache_key] = decision
    return decision
