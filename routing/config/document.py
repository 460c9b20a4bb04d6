"""The configuration document: the one plain-data shape of the whole configuration.

It is exactly the YAML of `import_config` / `export_config` (docs/configuration-at-scale.md).
The database is read into it (`document_from_db`), validation runs over it
(`routing.config.validation`), the snapshot is built from it (`routing.config.snapshot`), so
admin, import, the system check and the server all see the same thing. Which keys
an entry has, and when, is routing.config.schema's table.
API keys are not part of it: they are secrets, created with `create_api_key`.

The reader does a fixed number of queries whatever the size: each table is read
whole as plain `.values()` rows and joined here in one pass, so there is never an
IN list or an expression that grows with the configuration (SQLite refuses those
past 1 000 terms).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from routing.config.schema import AGENT, CREDENTIAL, MODEL, ORG, POLICY, PROVIDER, RESILIENCE, RESILIENCE_DEFAULTS

__all__ = ["RESILIENCE_DEFAULTS", "child_item", "document_from_db", "key_rows_from_db", "model_item", "provider_item"]


def _attrs(entity: Any, *extra: str) -> list[str]:
    return [f.attr for f in entity.columns] + list(extra)


def document_from_db() -> dict[str, Any]:
    """Read every configuration table once (nine queries) into the canonical document."""
    from policies.models import Agent, Org, OrgCredential, OrgPolicy
    from providers.models import Alias, FallbackLink, Model, Provider
    from routing.models import ResilienceSettings

    settings_row = ResilienceSettings.objects.filter(pk=1).values(*_attrs(RESILIENCE)).first()
    resilience = {}
    for f in RESILIENCE:
        value = settings_row[f.attr] if settings_row else f.default
        resilience[f.name] = f.to_doc(value) if not isinstance(value, list) else list(value)

    provider_names: dict[int, str] = {}
    providers = []
    for row in Provider.objects.order_by("name").values("id", *_attrs(PROVIDER)):
        provider_names[row["id"]] = row["name"]
        providers.append(PROVIDER.serialise(row))

    model_rows = list(Model.objects.order_by("public_id").values("id", "provider_id", *_attrs(MODEL)))
    model_ids = {row["id"]: row["public_id"] for row in model_rows}
    chains: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for link_id, model_pk, target_pk, position in FallbackLink.objects.values_list(
        "id", "model_id", "target_id", "position"
    ):
        chains[model_pk].append((position, link_id, target_pk))
    models = []
    for row in model_rows:
        links = sorted(chains.get(row["id"], ()))
        models.append(
            MODEL.serialise(
                row,
                provider=provider_names[row["provider_id"]],
                fallbacks=[model_ids[target] for _, _, target in links],
            )
        )

    aliases = {
        name: model_ids[target] for name, target in Alias.objects.order_by("name").values_list("name", "target_id")
    }

    agents: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in Agent.objects.order_by("org_id", "name").values("org_id", *_attrs(AGENT)):
        agents[row["org_id"]].append(AGENT.serialise(row))
    policies: dict[int, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for row in OrgPolicy.objects.values("id", "org_id", *_attrs(POLICY)):
        policies[row["org_id"]].append((row["priority"], row["id"], POLICY.serialise(row)))
    credentials: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in OrgCredential.objects.values("org_id", "provider_id", *_attrs(CREDENTIAL)):
        credentials[row["org_id"]].append(CREDENTIAL.serialise(row, provider=provider_names[row["provider_id"]]))

    orgs = []
    for row in Org.objects.order_by("name").values("id", *_attrs(ORG)):
        org_pk = row["id"]
        orgs.append(
            ORG.serialise(
                row,
                agents=sorted(agents.get(org_pk, ()), key=lambda a: a["name"]),
                policies=[item for _, _, item in sorted(policies.get(org_pk, ()), key=lambda p: p[:2])],
                credentials=sorted(credentials.get(org_pk, ()), key=lambda c: c["provider"]),
            )
        )

    return {"resilience": resilience, "providers": providers, "models": models, "aliases": aliases, "orgs": orgs}


def _row(obj: Any, entity: Any) -> dict[str, Any]:
    return {f.attr: getattr(obj, f.attr) for f in entity.columns}


def provider_item(p: Any) -> dict[str, Any]:
    """One Provider object as its document entry (also used by the admin for unsaved edits)."""
    return PROVIDER.serialise(_row(p, PROVIDER))


def model_item(m: Any, fallbacks: list[str]) -> dict[str, Any]:
    """One model object as its document entry; `fallbacks` are the target ids in order."""
    return MODEL.serialise(_row(m, MODEL), provider=m.provider.name, fallbacks=list(fallbacks))


def child_item(kind: str, obj: Any) -> dict[str, Any]:
    """An org's agent, policy or credential object as its document entry."""
    if kind == "agents":
        return AGENT.serialise(_row(obj, AGENT))
    if kind == "policies":
        return POLICY.serialise(_row(obj, POLICY))
    return CREDENTIAL.serialise(_row(obj, CREDENTIAL), provider=obj.provider.name if obj.provider_id else None)


def key_rows_from_db() -> list[dict[str, Any]]:
    """Active API keys as plain rows for the snapshot (hash, prefix, org, agent, expiry), in one query."""
    from policies.models import ApiKey

    return [
        {
            "key_hash": key_hash,
            "prefix": prefix,
            "org": org,
            "agent": agent,
            "expires_at": expires_at.timestamp() if expires_at else None,
        }
        for key_hash, prefix, org, agent, expires_at in ApiKey.objects.filter(revoked=False).values_list(
            "key_hash", "prefix", "agent__org__name", "agent__name", "expires_at"
        )
    ]
