"""The immutable in-memory configuration the request path reads (docs/resilience.md#r8).

`build_snapshot(document, key_rows, environ)` is a pure function: it turns the
configuration document (routing.config.document) and the active key rows into frozen
objects with every lookup the request path needs precomputed. The live
reference is swapped whole by routing.config.live; nothing here touches the database.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from policies.matcher import compile_pattern
from routing.config.alert_spec import AlertSpec, build_alerts
from routing.config.overload_spec import OverloadSpec, build_overload
from routing.config.schema import MODEL, ORG, POLICY, PROVIDER, core_resilience
from routing.config.secrets import resolve_key
from routing.core.dimensions import Limits, limits_of
from routing.core.prices import CLASSES as PRICE_CLASSES
from routing.core.prices import PRICE_KEYS, ClassPrices, PriceVersion, merged, version_of
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
    cache_ttl_s: int | None = None  # response cache (docs/cache.md); None: off
    # docs/deployments.md: how a try picks a deployment, and the deployments when the model lists
    # them (empty for the provider + upstream_model shorthand; then `provider` serves alone).
    # With deployments, `provider` / `upstream_model` are the first deployment's.
    routing: str = "weighted"
    deployments: tuple[DeploymentSpec, ...] = ()
    class_prices: ClassPrices | None = None  # docs/configuration.md#prices; None: none configured
    # Dated price versions (`prices`, sorted by start) and the label of the flat prices ("" or "deployment").
    price_versions: tuple[PriceVersion, ...] = ()
    price_label: str = ""
    affinity_s: float = 0.0  # docs/deployments.md#affinity: how long a pin lives since its last use; 0: off


@dataclass(frozen=True, slots=True)
class DeploymentSpec:
    """One deployment of a model: `model` is the model as this deployment serves it (its provider,
    upstream model and timeouts), so the request path treats it like any one-provider model."""

    model: ModelSpec
    weight: int
    rpm: int | None
    tpm: int | None

    @property
    def provider(self) -> ProviderSpec:
        return self.model.provider


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
    limits: Limits | None = None  # one value per LIMIT_DIMENSIONS row, docs/limits.md
    log_bodies: bool = False  # store bodies with usage records (docs/operations.md#bodies)
    budget: tuple[float, str] | None = None  # (usd, period), docs/limits.md#budgets


@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str
    org: OrgSpec
    default_model: str | None
    limits: Limits | None = None  # one value per LIMIT_DIMENSIONS row, docs/limits.md
    budget: tuple[float, str] | None = None  # (usd, period), docs/limits.md#budgets


@dataclass(frozen=True, slots=True)
class KeySpec:
    """A key as the request path sees it; its own controls narrow its agent's and org's (docs/limits.md#keys).

    `prefix` is the key's identity for its limits, budget and usage records: a rotated key keeps it.
    """

    prefix: str
    agent: AgentSpec
    expires_at: float | None  # epoch seconds
    enabled: bool = True
    limits: Limits | None = None  # one value per LIMIT_DIMENSIONS row
    budget: tuple[float, str] | None = None  # (usd, period)
    models: tuple[tuple[str, Any], ...] | None = None  # (pattern, compiled) allow-list; None: the org decides
    rotated: bool = False  # the previous secret of a rotated key, valid until expires_at

    def allows(self, *names: str) -> bool:
        """The key's allow-list lets one of `names` (the requested name, the model id) through."""
        if self.models is None:
            return True
        return any(regex.fullmatch(name) is not None for _, regex in self.models for name in names)


@dataclass(frozen=True)
class Snapshot:
    """One consistent view of the configuration; replaced whole, never mutated.

    `cache` holds per-snapshot memoised decisions (e.g. policy per (org, model));
    it dies with the snapshot, so a rebuild invalidates it for free.
    """

    version: int  # the reload counter (ConfigVersion): what processes compare to know they must rebuild
    resilience: Resilience
    providers: Mapping[str, ProviderSpec]
    models: Mapping[str, ModelSpec]
    aliases: Mapping[str, str]  # alias -> model id
    orgs: Mapping[str, OrgSpec]
    keys: Mapping[str, KeySpec]  # sha256 hex -> key
    # Operators' persisted breaker controls (routing.config.overrides.Override), read with the document.
    overrides: tuple[Any, ...] = ()
    # The configuration version an operator sees everywhere (history, dashboard, logs): the newest
    # recorded version (ConfigRevision) of the document this snapshot serves; 0 when none is recorded.
    config_version: int = 0
    # When that version was recorded (Unix seconds): the `created` of every model in /v1/models; the
    # reload counter's time when no version is recorded, the last good file's time when serving it.
    config_time: int = 0
    overload: OverloadSpec | None = None  # docs/overload.md#configuration; None: not configured
    # Some model has affinity (docs/deployments.md#affinity): only then does a request derive its key.
    affine: bool = False
    alerts: tuple[AlertSpec, ...] = ()  # docs/alerts.md; empty: no alerts configured
    cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def resolve(self, name: str) -> ModelSpec | None:
        """A model id or alias to its model (aliases resolve first to an immutable id)."""
        model = self.models.get(name)
        if model is not None:
            return model
        target = self.aliases.get(name)
        return self.models.get(target) if target is not None else None


EMPTY = Snapshot(version=0, resilience=Resilience(), providers={}, models={}, aliases={}, orgs={}, keys={})


_DIALECT = PROVIDER["dialect"].default
_DEFAULT_ACTION = ORG["default_action"].default
_ACTION = POLICY["action"].default
_PRIORITY = POLICY["priority"].default
_ROUTING = MODEL["routing"].choices[0]


def _deployments(
    spec: ModelSpec,
    listed: Any,
    providers: Mapping[str, ProviderSpec],
    m: Mapping[str, Any],
    timeouts_for: Any,
) -> tuple[DeploymentSpec, ...]:
    """A model's deployments, each with the model as that deployment serves it (R4: the model's
    timeout overrides beat the deployment's provider's, which beat the global ones)."""
    out = []
    for d in listed:
        provider = providers[d["provider"]]
        view = dataclasses.replace(
            spec, provider=provider, upstream_model=d["upstream_model"], timeouts=timeouts_for(m, provider.name)
        )
        deal = d.get("prices")
        if deal:  # negotiated prices of this deployment (docs/configuration.md#price-versions)
            flat = version_of(0.0, "deployment", merged(flat_prices(m), deal))
            view = dataclasses.replace(
                view,
                input_price_per_mtok=flat.input,
                output_price_per_mtok=flat.output,
                class_prices=flat.classes,
                price_versions=price_versions(m, deal),
                price_label="deployment",
            )
        weight = d.get("weight")
        out.append(
            DeploymentSpec(view, 1 if weight is None else int(weight), _opt_int(d.get("rpm")), _opt_int(d.get("tpm")))
        )
    return tuple(out)


class _PatternCache:
    """Compiled policy patterns carried from one build to the next, so a rebuild compiles
    only patterns that are new; it holds exactly the patterns of the last build."""

    def __init__(self) -> None:
        self._last: dict[str, re.Pattern[str]] = {}
        self._lock = threading.Lock()

    def compiler(self) -> Any:
        last, used = self._last, {}

        def regex(pattern: str) -> re.Pattern[str]:
            compiled = used.get(pattern)
            if compiled is None:
                compiled = last.get(pattern)
                if compiled is None:
                    compiled = compile_pattern(pattern)
                used[pattern] = compiled
            return compiled

        regex.used = used  # type: ignore[attr-defined]
        return regex

    def keep(self, regex: Any) -> None:
        with self._lock:
            self._last = regex.used


_patterns = _PatternCache()


def _key_models(allowed: Any, regex: Any) -> tuple[tuple[str, Any], ...] | None:
    """A key's allow-list compiled; a pattern that does not compile (written around the validation)
    allows nothing rather than everything: a key narrows, never widens."""
    if allowed is None:
        return None
    out = []
    for pattern in allowed:
        try:
            out.append((pattern, regex(pattern)))
        except ValueError:
            continue
    return tuple(out)


def class_prices(m: Mapping[str, Any]) -> ClassPrices | None:
    """A model's token-class prices (docs/configuration.md#prices); None when it sets none (no cost per request)."""
    found = {
        name: float(m[f"{name}_price_per_mtok"])
        for name in PRICE_CLASSES
        if m.get(f"{name}_price_per_mtok") is not None
    }
    return ClassPrices(**found) if found else None


def flat_prices(m: Mapping[str, Any]) -> dict[str, float | None]:
    """A model item's undated prices keyed by PRICE_KEYS (routing.core.prices)."""
    return {
        key: None if m.get(f"{key}_price_per_mtok") is None else float(m[f"{key}_price_per_mtok"]) for key in PRICE_KEYS
    }


def _starts(effective_from: Any) -> float:
    """UTC midnight of an `effective_from` date (a YAML date or its YYYY-MM-DD text), as epoch seconds."""
    day = effective_from if isinstance(effective_from, date) else date.fromisoformat(str(effective_from))
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def price_versions(m: Mapping[str, Any], deal: Mapping[str, Any] | None = None) -> tuple[PriceVersion, ...]:
    """A model's dated prices (docs/configuration.md#price-versions): each entry names what changes from
    the one before (the first: from the flat fields); a deployment's `deal` is applied over each."""
    entries = sorted(m.get("prices") or (), key=lambda e: _starts(e["effective_from"]))
    current = flat_prices(m)
    out = []
    for entry in entries:
        current = merged(current, entry)
        label = str(entry["effective_from"])
        prices = merged(current, deal) if deal else current
        out.append(version_of(_starts(entry["effective_from"]), f"{label}+deployment" if deal else label, prices))
    return tuple(out)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _budget(raw: Mapping[str, Any] | None) -> tuple[float, str] | None:
    """(usd, period) of a `budget` mapping, or None (the caller pays nothing)."""
    if not raw:
        return None
    return float(raw["usd"]), str(raw["period"])


def build_resilience(raw: Mapping[str, Any] | None) -> Resilience:
    """The executor's settings from the document's section (absent keys take the schema's defaults)."""
    return core_resilience(raw)


def _provider(p: Mapping[str, Any], environ: Mapping[str, str], stored_keys: Any) -> ProviderSpec:
    """One `providers` item (schema PROVIDER) with its key resolved."""
    key_env = p.get("api_key_env") or None
    return ProviderSpec(
        name=p["name"],
        dialect=p.get("dialect") or _DIALECT,
        base_url=p["base_url"].rstrip("/"),
        api_key=resolve_key(environ, key_env, stored_keys, ("provider", p["name"])),
        api_key_env=key_env,
        connect_timeout_ms=_opt_int(p.get("connect_timeout_ms")),
        first_token_timeout_ms=_opt_int(p.get("first_token_timeout_ms")),
        total_timeout_ms=_opt_int(p.get("total_timeout_ms")),
        health_check_path=p.get("health_check_path") or "",
        health_probe=bool(p.get("health_probe", False)),
    )


class _ModelBuilder:
    """Builds `models` items (schema MODEL); values many models share are built once: per-provider
    timeout defaults, Timeouts, capability sets (a 10 000-model rebuild is in
    docs/configuration-at-scale.md#rebuild)."""

    def __init__(self, res: Resilience, providers: Mapping[str, ProviderSpec]) -> None:
        self.res = res
        self.providers = providers
        self.provider_defaults = {
            name: tuple(res_value if own is None else own for own, res_value in zip(
                (p.connect_timeout_ms, p.first_token_timeout_ms, p.total_timeout_ms),
                (res.connect_timeout_ms, res.first_token_timeout_ms, res.total_timeout_ms),
                strict=True,
            ))
            for name, p in providers.items()
        }  # fmt: skip
        self.timeouts_of: dict[tuple[int, int, int], Timeouts] = {}
        self.frozen: dict[tuple[str, ...], frozenset[str]] = {}

    def timeouts_for(self, m: Mapping[str, Any], provider_name: str) -> Timeouts:
        """R4: the model's timeout overrides beat its provider's, which beat the global ones."""
        connect, first, total = self.provider_defaults[provider_name]
        value = m.get("connect_timeout_ms")
        connect = int(connect if value is None else value)
        value = m.get("first_token_timeout_ms")
        first = int(first if value is None else value)
        value = m.get("total_timeout_ms")
        total = int(total if value is None else value)
        timeouts = self.timeouts_of.get((connect, first, total))
        if timeouts is None:
            timeouts = self.timeouts_of[(connect, first, total)] = Timeouts(
                connect_ms=connect, first_token_ms=first, stream_idle_ms=self.res.stream_idle_timeout_ms, total_ms=total
            )
        return timeouts

    def _frozen(self, items: tuple[str, ...]) -> frozenset[str]:
        found = self.frozen.get(items)
        if found is None:
            found = self.frozen[items] = frozenset(items)
        return found

    def build(self, m: Mapping[str, Any]) -> ModelSpec:
        listed = m.get("deployments") or ()
        provider = self.providers[listed[0]["provider"] if listed else m["provider"]]
        fallback_on = self._frozen(tuple(m["fallback_on"])) if m.get("fallback_on") else self.res.fallback_on
        prices = (m.get("input_price_per_mtok"), m.get("output_price_per_mtok"))
        spec = ModelSpec(
            id=m["id"],
            provider=provider,
            upstream_model=listed[0]["upstream_model"] if listed else m["upstream_model"],
            capabilities=self._frozen(tuple(m.get("capabilities") or ())),
            context_window=_opt_int(m.get("context_window")),
            max_output_tokens=_opt_int(m.get("max_output_tokens")),
            residency=m.get("residency") or "",
            input_price_per_mtok=None if prices[0] is None else float(prices[0]),
            output_price_per_mtok=None if prices[1] is None else float(prices[1]),
            fallbacks=tuple(m.get("fallbacks") or ()),
            timeouts=self.timeouts_for(m, provider.name),
            fallback_on=fallback_on,
            cache_ttl_s=_opt_int(m.get("cache_ttl_s")),
            routing=m.get("routing") or _ROUTING,
            class_prices=class_prices(m),
            price_versions=price_versions(m),
            affinity_s=float((m.get("affinity") or {}).get("ttl_s") or 0.0),
        )
        if listed:
            deployments = _deployments(spec, listed, self.providers, m, self.timeouts_for)
            spec = dataclasses.replace(spec, deployments=deployments)
        return spec


def _org(o: Mapping[str, Any], regex: Any, environ: Mapping[str, str], stored_keys: Any) -> OrgSpec:
    """One `orgs` item (schema ORG) with its policies (POLICY, ascending priority) and credentials."""
    policies = sorted(o.get("policies") or [], key=lambda p: int(p.get("priority", _PRIORITY)))
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
    return OrgSpec(
        name=o["name"],
        default_action=o.get("default_action", _DEFAULT_ACTION),
        policies=tuple(
            PolicySpec(
                pattern=p["pattern"],
                regex=regex(p["pattern"]),
                action=p.get("action", _ACTION),
                priority=int(p.get("priority", _PRIORITY)),
                fallback_chain=None if p.get("fallback_chain") is None else tuple(p["fallback_chain"]),
            )
            for p in policies
        ),
        credentials=credentials,
        limits=limits_of(o.get("limits")),
        log_bodies=o.get("log_bodies") is True,
        budget=_budget(o.get("budget")),
    )


def _agent(a: Mapping[str, Any], org: OrgSpec) -> AgentSpec:
    """One of an org's `agents` (schema AGENT)."""
    return AgentSpec(
        name=a["name"],
        org=org,
        default_model=(a.get("default_model") or "").strip() or None,
        limits=limits_of(a.get("limits")),
        budget=_budget(a.get("budget")),
    )


def _key(row: Mapping[str, Any], agent: AgentSpec, regex: Any) -> KeySpec:
    """One API key row (the database's, not the document's) as the request path sees it."""
    return KeySpec(
        prefix=row["prefix"],
        agent=agent,
        expires_at=row.get("expires_at"),
        enabled=row.get("enabled", True) is not False,
        limits=limits_of(row.get("limits")),
        budget=_budget(row.get("budget")),
        models=_key_models(row.get("models"), regex),
        rotated=row.get("rotated", False) is True,
    )


def _keys(
    key_rows: list[Mapping[str, Any]],
    orgs: Mapping[str, OrgSpec],
    agents: Mapping[tuple[str, str], AgentSpec],
    regex: Any,
) -> dict[str, KeySpec]:
    """sha256 hex -> key; a key of an agent the document does not list gets a plain agent of its org,
    a key of an unknown org is left out."""
    keys: dict[str, KeySpec] = {}
    for row in key_rows:
        agent = agents.get((row["org"], row["agent"]))
        if agent is None:
            org = orgs.get(row["org"])
            if org is None:
                continue
            agent = AgentSpec(name=row["agent"], org=org, default_model=None)
        keys[row["key_hash"]] = _key(row, agent, regex)
    return keys


def build_snapshot(
    document: Mapping[str, Any],
    key_rows: list[Mapping[str, Any]],
    environ: Mapping[str, str],
    version: int = 0,
    stored_keys: Mapping[tuple[str, ...], str] | None = None,
    config_version: int = 0,
) -> Snapshot:
    """Build the frozen snapshot, one entity builder per schema entity. The document must already
    be valid (routing.config.validation)."""
    res = build_resilience(document.get("resilience"))
    providers = {p["name"]: _provider(p, environ, stored_keys) for p in document.get("providers") or []}
    model_builder = _ModelBuilder(res, providers)
    models = {m["id"]: model_builder.build(m) for m in document.get("models") or []}
    regex = _patterns.compiler()
    orgs: dict[str, OrgSpec] = {}
    agents: dict[tuple[str, str], AgentSpec] = {}
    for o in document.get("orgs") or []:
        org = orgs[o["name"]] = _org(o, regex, environ, stored_keys)
        for a in o.get("agents") or []:
            agents[(org.name, a["name"])] = _agent(a, org)
    keys = _keys(key_rows, orgs, agents, regex)
    _patterns.keep(regex)
    return Snapshot(
        version=version,
        config_version=config_version,
        resilience=res,
        providers=providers,
        models=models,
        aliases=dict(document.get("aliases") or {}),
        orgs=orgs,
        keys=keys,
        overload=build_overload(document, key_rows),
        affine=any(m.affinity_s for m in models.values()),
        alerts=build_alerts(document, environ),
    )
