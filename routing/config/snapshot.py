"""The immutable in-memory configuration the request path reads (CONTRACT R8).

`build_snapshot(document, key_rows, environ)` is a pure function: it turns the
configuration document (routing.config.document) and the active key rows into frozen
objects with every lookup the request path needs precomputed. The live
reference is swapped whole by routing.config.live; nothing here touches the database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.matcher import compile_pattern
from routing.config.document import RESILIENCE_DEFAULTS
from routing.config.secrets import resolve_key
from routing.core.resilience import Resilience, Timeouts


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    name: str
    dialect: str
    base_url: str
    api_key: str | None  # read from the env var named in the config, at build time
    api_key_env: str | None
    connect_timeout_ms: int | None
    first_token_timeout_ms: int | None
    total_timeout_ms: int | None
    health_check_path: str
    health_probe: bool


@dataclass(frozen=True, slots=True)
class ModelSpec:
    id: str
    provider: ProviderSpec
    upstream_model: str
    capabilities: frozenset[str]
    context_window: int | None
    max_output_tokens: int | None
    residency: str
    input_price_per_mtok: float | None
    output_price_per_mtok: float | None
    fallbacks: tuple[str, ...]
    timeouts: Timeouts
    fallback_on: frozenset[str]


@dataclass(frozen=True, slots=True)
class PolicySpec:
    pattern: str
    regex: re.Pattern[str]
    action: str  # "allow" | "deny"
    priority: int
    fallback_chain: tuple[str, ...] | None  # None: keep the model's chain; (): no fallback


@dataclass(frozen=True, slots=True)
class CredentialSpec:
    """An org's BYO override of one provider's key and/or base URL."""

    provider: str
    api_key: str | None
    api_key_env: str | None
    base_url: str | None
    overrides_key: bool = False  # the org has a key of its own (env or stored): never fall back to the platform's


@dataclass(frozen=True, slots=True)
class OrgSpec:
    name: str
    default_action: str
    policies: tuple[PolicySpec, ...]  # ascending priority
    credentials: Mapping[str, CredentialSpec]  # provider name -> override


@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str
    org: OrgSpec
    default_model: str | None


@dataclass(frozen=True, slots=True)
class KeySpec:
    prefix: str
    agent: AgentSpec
    expires_at: float | None  # epoch seconds


@dataclass(frozen=True)
class Snapshot:
    """One consistent view of the configuration; replaced whole, never mutated.

    `cache` holds per-snapshot memoised decisions (e.g. policy per (org, model));
    it dies with the snapshot, so a rebuild invalidates it for free.
    """

    version: int
    resilience: Resilience
    providers: Mapping[str, ProviderSpec]
    models: Mapping[str, ModelSpec]
    aliases: Mapping[str, str]  # alias -> model id
    orgs: Mapping[str, OrgSpec]
    keys: Mapping[str, KeySpec]  # sha256 hex -> key
    cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def resolve(self, name: str) -> ModelSpec | None:
        """A model id or alias to its model (aliases resolve first to an immutable id)."""
        model = self.models.get(name)
        if model is not None:
            return model
        target = self.aliases.get(name)
        return self.models.get(target) if target is not None else None


EMPTY = Snapshot(version=0, resilience=Resilience(), providers={}, models={}, aliases={}, orgs={}, keys={})


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def build_resilience(raw: Mapping[str, Any] | None) -> Resilience:
    merged = {**RESILIENCE_DEFAULTS, **(raw or {})}
    return Resilience(
        max_retries=int(merged["max_retries"]),
        backoff_base_ms=int(merged["backoff_base_ms"]),
        backoff_max_ms=int(merged["backoff_max_ms"]),
        connect_timeout_ms=int(merged["connect_timeout_ms"]),
        first_token_timeout_ms=int(merged["first_token_timeout_ms"]),
        stream_idle_timeout_ms=int(merged["stream_idle_timeout_ms"]),
        total_timeout_ms=int(merged["total_timeout_ms"]),
        breaker_failure_threshold=int(merged["breaker_failure_threshold"]),
        breaker_cooldown_s=float(merged["breaker_cooldown_s"]),
        fallback_max_depth=int(merged["fallback_max_depth"]),
        fallback_on=frozenset(merged["fallback_on"]),
        retry_budget_ratio=float(merged["retry_budget_ratio"]),
        retry_budget_min_per_s=float(merged["retry_budget_min_per_s"]),
    )


def build_snapshot(
    document: Mapping[str, Any],
    key_rows: list[Mapping[str, Any]],
    environ: Mapping[str, str],
    version: int = 0,
    stored_keys: Mapping[tuple[str, ...], str] | None = None,
) -> Snapshot:
    """Build the frozen snapshot. The document must already be valid (routing.config.validation)."""
    res = build_resilience(document.get("resilience"))

    providers: dict[str, ProviderSpec] = {}
    for p in document.get("providers") or []:
        key_env = p.get("api_key_env") or None
        providers[p["name"]] = ProviderSpec(
            name=p["name"],
            dialect=p.get("dialect", "openai"),
            base_url=p["base_url"].rstrip("/"),
            api_key=resolve_key(environ, key_env, stored_keys, ("provider", p["name"])),
            api_key_env=key_env,
            connect_timeout_ms=_opt_int(p.get("connect_timeout_ms")),
            first_token_timeout_ms=_opt_int(p.get("first_token_timeout_ms")),
            total_timeout_ms=_opt_int(p.get("total_timeout_ms")),
            health_check_path=p.get("health_check_path") or "",
            health_probe=bool(p.get("health_probe", False)),
        )

    models: dict[str, ModelSpec] = {}
    for m in document.get("models") or []:
        provider = providers[m["provider"]]

        def pick(name: str, _m: Mapping[str, Any] = m, _p: ProviderSpec = provider) -> int:
            value = _m.get(name)
            if value is None:
                value = getattr(_p, name, None)
            if value is None:
                value = getattr(res, name)
            return int(value)

        timeouts = Timeouts(
            connect_ms=pick("connect_timeout_ms"),
            first_token_ms=pick("first_token_timeout_ms"),
            stream_idle_ms=res.stream_idle_timeout_ms,
            total_ms=pick("total_timeout_ms"),
        )
        prices = (m.get("input_price_per_mtok"), m.get("output_price_per_mtok"))
        models[m["id"]] = ModelSpec(
            id=m["id"],
            provider=provider,
            upstream_model=m["upstream_model"],
            capabilities=frozenset(m.get("capabilities") or ()),
            context_window=_opt_int(m.get("context_window")),
            max_output_tokens=_opt_int(m.get("max_output_tokens")),
            residency=m.get("residency") or "",
            input_price_per_mtok=None if prices[0] is None else float(prices[0]),
            output_price_per_mtok=None if prices[1] is None else float(prices[1]),
            fallbacks=tuple(m.get("fallbacks") or ()),
            timeouts=timeouts,
            fallback_on=frozenset(m["fallback_on"]) if m.get("fallback_on") else res.fallback_on,
        )

    aliases = dict(document.get("aliases") or {})

    orgs: dict[str, OrgSpec] = {}
    agents: dict[tuple[str, str], AgentSpec] = {}
    for o in document.get("orgs") or []:
        policies = sorted(o.get("policies") or [], key=lambda p: int(p.get("priority", 100)))
        credentials = {}
        for c in o.get("credentials") or []:
            key_env = c.get("api_key_env") or None
            credentials[c["provider"]] = CredentialSpec(
                provider=c["provider"],
                api_key=resolve_key(environ, key_env, stored_keys, ("credential", o["name"], c["provider"])),
                api_key_env=key_env,
                base_url=(c.get("base_url") or "").rstrip("/") or None,
                overrides_key=bool(key_env or c.get("api_key")),
            )
        org = OrgSpec(
            name=o["name"],
            default_action=o.get("default_action", "allow"),
            policies=tuple(
                PolicySpec(
                    pattern=p["pattern"],
                    regex=compile_pattern(p["pattern"]),
                    action=p.get("action", "allow"),
                    priority=int(p.get("priority", 100)),
                    fallback_chain=None if p.get("fallback_chain") is None else tuple(p["fallback_chain"]),
                )
                for p in policies
            ),
            credentials=credentials,
        )
        orgs[org.name] = org
        for a in o.get("agents") or []:
            agents[(org.name, a["name"])] = AgentSpec(
                name=a["name"], org=org, default_model=(a.get("default_model") or "").strip() or None
            )

    keys: dict[str, KeySpec] = {}
    for row in key_rows:
        agent = agents.get((row["org"], row["agent"]))
        if agent is None:
            org = orgs.get(row["org"])
            if org is None:
                continue
            agent = AgentSpec(name=row["agent"], org=org, default_model=None)
        keys[row["key_hash"]] = KeySpec(prefix=row["prefix"], agent=agent, expires_at=row.get("expires_at"))

    return Snapshot(
        version=version,
        resilience=res,
        providers=providers,
        models=models,
        aliases=aliases,
        orgs=orgs,
        keys=keys,
    )
