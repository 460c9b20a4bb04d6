"""The fallback chain of a request (docs/resilience.md#r1, docs/configuration.md#policies): links the executor walks in order.

`build_chain` is a pure function of (snapshot, org, model), so its result is
memoised in `snapshot.cache` and shared by every request for that pair; a
configuration rebuild (a new snapshot) drops it. Per-request marks (preflight)
are applied on top with `dataclasses.replace`, never by mutating the cached chain.

Decisions:
- The chain is the requested model, then its own `fallbacks`, unless the first
  policy that matches the requested model is an allow policy carrying
  `fallback_chain`: that list replaces the fallbacks (an empty list disables
  fallback). Hops are capped at `resilience.fallback_max_depth`.
- Every hop passes the org's policy itself: a denied hop stays in the chain
  with skip_reason "model_denied", an unknown one with "model_not_found", so
  explain_route and the fallback trail can show them; the executor skips them
  without an upstream call. A hop that repeats an earlier link is dropped (it
  already had its retries). The primary link is marked "model_denied" too when
  the org denies it, though callers answer 403 before building a chain.
- BYO credentials: docs/resilience.md#r5 says requests on an org's own credentials use a
  breaker of their own keyed by org. An override belongs to a provider, so it is
  applied to *every* link on that provider (primary or fallback): that link uses
  the org's base URL and/or API key (the provider's for the part not overridden)
  and the breaker key (provider, model, "org:<org>"). Links on other providers
  use the platform credentials and the shared key (provider, model). This keeps
  an org's traffic on its own key from ever being charged to, or blocked by, the
  platform's breaker, and never sends the org's requests on the platform's key
  to a provider it pays for itself.
- A link on the shared key carries the org's name, so the breaker also keeps the org's own
  view of it (docs/resilience.md#org-views): one org's failures open only its view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from policies.decision import decide
from routing.config.snapshot import ModelSpec, OrgSpec, ProviderSpec, Snapshot, Timeouts
from routing.core.breaker import BreakerKey
from routing.core.executor import Link
from routing.core.picking import Target


def policy_hops(snapshot: Snapshot, org: OrgSpec, model: ModelSpec) -> tuple[str, ...]:
    """The configured fallback names for the model in this org, before the depth cap."""
    decision = decide(snapshot, org, model.id)
    policy = decision.policy
    if decision.allowed and policy is not None and policy.fallback_chain is not None:
        return policy.fallback_chain
    return model.fallbacks


def link_for(org: OrgSpec, model: ModelSpec, skip_reason: str | None = None) -> Link:
    """One link with the org's BYO credentials applied when it overrides the model's provider.

    A model with deployments (docs/deployments.md) gets one link whose `deployments` are a
    link per deployment, each built the same way (BYO applies to the deployments on the
    org's provider, with the org-keyed breaker); the executor picks among them per try.
    """
    if model.deployments:
        targets = tuple(Target(_one_link(org, d.model), d.weight, d.rpm, d.tpm) for d in model.deployments)
        first = targets[0].link
        return Link(
            model, first.breaker_key, first.base_url, first.api_key, skip_reason, targets, model.routing, first.org
        )
    return _one_link(org, model, skip_reason)


def _one_link(org: OrgSpec, model: ModelSpec, skip_reason: str | None = None) -> Link:
    provider = model.provider
    cred = org.credentials.get(provider.name)
    if cred is None:
        return Link(
            model, BreakerKey(provider.name, model.id), provider.base_url, provider.api_key, skip_reason, org=org.name
        )
    base_url = cred.base_url or provider.base_url
    api_key = cred.api_key if cred.overrides_key else provider.api_key
    return Link(model, BreakerKey(provider.name, model.id, org.name), base_url, api_key, skip_reason)


def unknown_model(name: str) -> ModelSpec:
    """A stand-in for a hop that names no configured model (it is never called)."""
    provider = ProviderSpec(
        name="",
        dialect="",
        base_url="",
        api_key=None,
        api_key_env=None,
        connect_timeout_ms=None,
        first_token_timeout_ms=None,
        total_timeout_ms=None,
        health_check_path="",
        health_probe=False,
    )
    return ModelSpec(
        id=name,
        provider=provider,
        upstream_model=name,
        capabilities=frozenset(),
        context_window=None,
        max_output_tokens=None,
        residency="",
        input_price_per_mtok=None,
        output_price_per_mtok=None,
        fallbacks=(),
        timeouts=Timeouts(connect_ms=0, first_token_ms=0, stream_idle_ms=0, total_ms=0),
        fallback_on=frozenset(),
    )


def build_chain(snapshot: Snapshot, org: OrgSpec, model: ModelSpec, requested_name: str = "") -> tuple[Link, ...]:
    """The org's chain for a resolved model: primary first, then the fallback hops.

    Returns an immutable tuple shared through the snapshot cache; do not mutate it.
    `requested_name` (the alias or id the client sent) does not change the chain:
    aliases resolve to a model id before the chain is built.
    """
    cache_key = ("chain", org.name, model.id)
    cached = snapshot.cache.get(cache_key)
    if cached is not None:
        return cached

    primary_denied = not decide(snapshot, org, model.id).allowed
    links = [link_for(org, model, "model_denied" if primary_denied else None)]
    seen = {model.id}
    hops = policy_hops(snapshot, org, model)
    for name in hops[: max(0, snapshot.resilience.fallback_max_depth)]:
        hop = snapshot.resolve(name)
        if hop is None:
            if name not in seen:
                seen.add(name)
                links.append(Link(unknown_model(name), BreakerKey("", name), "", None, "model_not_found"))
            continue
        if hop.id in seen:
            continue
        seen.add(hop.id)
        denied = not decide(snapshot, org, hop.id).allowed
        links.append(link_for(org, hop, "model_denied" if denied else None))

    chain = tuple(links)
    snapshot.cache[cache_key] = chain
    return chain


def breaker_keys(snapshot: Snapshot) -> set[BreakerKey]:
    """Every breaker key a chain of this snapshot can use (shared and org-keyed BYO).

    For `BreakerRegistry.retain` on a rebuild, so BYO breakers keep their state too.
    """
    pairs = [(m.provider.name, m.id) for m in snapshot.models.values()]
    pairs += [(d.provider.name, m.id) for m in snapshot.models.values() for d in m.deployments]
    keys: set[BreakerKey] = {BreakerKey(provider, model_id) for provider, model_id in pairs}
    for org in snapshot.orgs.values():
        for provider in org.credentials:
            keys.update(BreakerKey(provider, model_id, org.name) for p, model_id in pairs if p == provider)
    return keys


def narrow_to_key(links: tuple[Link, ...], allows: Callable[[str], bool]) -> tuple[Link, ...]:
    """The chain for a key with its own model list (docs/limits.md#keys): a fallback the list does not
    allow is skipped as `model_denied`, so a key never reaches a model outside its list."""
    out = [links[0]]
    for link in links[1:]:
        if link.skip_reason is None and not allows(link.model.id):
            link = replace(link, skip_reason="model_denied")
        out.append(link)
    return tuple(out)
