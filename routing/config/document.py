"""The configuration document: the one plain-data shape of the whole configuration.

It is exactly the YAML of `import_config` / `export_config` (CONTRACT §9). The
database is read into it (`document_from_db`), validation runs over it
(`routing.config.validation`), the snapshot is built from it (`routing.config.snapshot`), so
admin, import, the system check and the server all see the same thing.
API keys are not part of it: they are secrets, created with `create_api_key`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

RESILIENCE_DEFAULTS: dict[str, Any] = {
    "max_retries": 2,
    "backoff_base_ms": 100,
    "backoff_max_ms": 5000,
    "connect_timeout_ms": 5000,
    "first_token_timeout_ms": 30000,
    "stream_idle_timeout_ms": 60000,
    "total_timeout_ms": 600000,
    "breaker_failure_threshold": 5,
    "breaker_cooldown_s": 30,
    "fallback_max_depth": 8,
    "fallback_on": ["provider_error", "rate_limited", "timeout", "circuit_open"],
    "retry_budget_ratio": 0.2,
    "retry_budget_min_per_s": 10,
}

PROVIDER_OPTIONAL = (
    "api_key_env",
    "connect_timeout_ms",
    "first_token_timeout_ms",
    "total_timeout_ms",
    "health_check_path",
    "health_probe",
)
MODEL_OPTIONAL = (
    "context_window",
    "max_output_tokens",
    "residency",
    "fallbacks",
    "connect_timeout_ms",
    "first_token_timeout_ms",
    "total_timeout_ms",
    "fallback_on",
    "input_price_per_mtok",
    "output_price_per_mtok",
)


def _num(value: Any) -> Any:
    """Decimals and whole floats as plain YAML numbers, so export is stable."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def document_from_db() -> dict[str, Any]:
    """Read every configuration table once into the canonical document."""
    from policies.models import Org
    from providers.models import Alias, Model, Provider
    from routing.models import ResilienceSettings

    settings_row = ResilienceSettings.objects.filter(pk=1).first()
    resilience = {}
    for key, default in RESILIENCE_DEFAULTS.items():
        resilience[key] = _num(getattr(settings_row, key)) if settings_row else default

    providers = [provider_item(p) for p in Provider.objects.order_by("name")]

    models = []
    for m in Model.objects.select_related("provider").prefetch_related("fallback_links__target").order_by("public_id"):
        links = sorted(m.fallback_links.all(), key=lambda link: (link.position, link.id))
        models.append(model_item(m, [link.target.public_id for link in links]))

    aliases = {a.name: a.target.public_id for a in Alias.objects.select_related("target").order_by("name")}

    orgs = []
    for o in Org.objects.prefetch_related("agents", "policies", "credentials__provider").order_by("name"):
        item = {"name": o.name, "default_action": o.default_action}
        agents = [child_item("agents", a) for a in sorted(o.agents.all(), key=lambda a: a.name)]
        if agents:
            item["agents"] = agents
        policies = [child_item("policies", p) for p in sorted(o.policies.all(), key=lambda p: (p.priority, p.id))]
        if policies:
            item["policies"] = policies
        credentials = [child_item("credentials", c) for c in sorted(o.credentials.all(), key=lambda c: c.provider.name)]
        if credentials:
            item["credentials"] = credentials
        orgs.append(item)

    return {"resilience": resilience, "providers": providers, "models": models, "aliases": aliases, "orgs": orgs}


def provider_item(p: Any) -> dict[str, Any]:
    """One Provider row as its document entry (also used by the admin for unsaved edits)."""
    item: dict[str, Any] = {"name": p.name, "dialect": p.dialect, "base_url": p.base_url}
    if p.api_key_env:
        item["api_key_env"] = p.api_key_env
    if getattr(p, "api_key_encrypted", ""):
        item["api_key"] = "stored"  # a reference: the secret never enters the document
    for key in ("connect_timeout_ms", "first_token_timeout_ms", "total_timeout_ms"):
        if getattr(p, key) is not None:
            item[key] = getattr(p, key)
    if p.health_check_path:
        item["health_check_path"] = p.health_check_path
    if p.health_probe_enabled:
        item["health_probe"] = True
    return item


def model_item(m: Any, fallbacks: list[str]) -> dict[str, Any]:
    """One model as its document entry; `fallbacks` are the target ids in order."""
    item: dict[str, Any] = {
        "id": m.public_id,
        "provider": m.provider.name,
        "upstream_model": m.upstream_model,
        "capabilities": list(m.capabilities or []),
    }
    for key in (
        "context_window",
        "max_output_tokens",
        "connect_timeout_ms",
        "first_token_timeout_ms",
        "total_timeout_ms",
    ):
        if getattr(m, key) is not None:
            item[key] = getattr(m, key)
    if m.residency:
        item["residency"] = m.residency
    if fallbacks:
        item["fallbacks"] = list(fallbacks)
    if m.fallback_on:
        item["fallback_on"] = list(m.fallback_on)
    for key in ("input_price_per_mtok", "output_price_per_mtok"):
        if getattr(m, key) is not None:
            item[key] = _num(getattr(m, key))
    return item


def child_item(kind: str, obj: Any) -> dict[str, Any]:
    """An org's agent, policy or credential as its document entry."""
    if kind == "agents":
        return {"name": obj.name, **({"default_model": obj.default_model} if obj.default_model else {})}
    if kind == "policies":
        item = {"pattern": obj.pattern, "action": obj.action, "priority": obj.priority}
        return item if obj.fallback_chain is None else {**item, "fallback_chain": obj.fallback_chain}
    item = {"provider": obj.provider.name if obj.provider_id else None}
    if getattr(obj, "api_key_encrypted", ""):
        item["api_key"] = "stored"  # a reference: the secret never enters the document
    return {**item, **{k: getattr(obj, k) for k in ("api_key_env", "base_url") if getattr(obj, k)}}


def key_rows_from_db() -> list[dict[str, Any]]:
    """Active API keys as plain rows for the snapshot (hash, prefix, org, agent, expiry)."""
    from policies.models import ApiKey

    rows = []
    for k in ApiKey.objects.filter(revoked=False).select_related("agent__org"):
        rows.append(
            {
                "key_hash": k.key_hash,
                "prefix": k.prefix,
                "org": k.agent.org.name,
                "agent": k.agent.name,
                "expires_at": k.expires_at.timestamp() if k.expires_at else None,
            }
        )
    return rows
