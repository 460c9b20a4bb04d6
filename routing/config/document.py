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

import gc
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import orjson
from django.apps import apps

from policies.models import ApiKey
from routing.config.db_errors import ConfigReadError
from routing.config.schema import (
    AGENT,
    ALERT,
    CREDENTIAL,
    DECIMAL,
    DEPLOYMENT,
    MODEL,
    ORG,
    POLICY,
    PROVIDER,
    RESILIENCE,
    RESILIENCE_DEFAULTS,
)

__all__ = [
    "RESILIENCE_DEFAULTS",
    "child_item",
    "deployment_item",
    "document_from_db",
    "key_rows_from_db",
    "model_item",
    "provider_item",
]


def _readers() -> dict[str, Any]:
    """Each entity's row serialiser for one read (JSON texts decoded once per distinct value)."""
    seen: dict[str, Any] = {}

    def decode(text: str) -> Any:
        value = seen.get(text)
        if value is None:
            value = seen[text] = orjson.loads(text)
        return list(value) if isinstance(value, list) else value  # each item owns its list

    return {
        "provider": PROVIDER.reader("api_key", decode=decode),
        "model": MODEL.reader("provider", "deployments", "fallbacks", decode=decode),
        "deployment": DEPLOYMENT.reader("provider", decode=decode),
        "agent": AGENT.reader(decode=decode),
        "policy": POLICY.reader(decode=decode),
        "credential": CREDENTIAL.reader("provider", "api_key", decode=decode),
        "org": ORG.reader("agents", "policies", "credentials", decode=decode),
        "alert": ALERT.reader(decode=decode),
    }


@cache
def _select(entity: Any) -> tuple[Any, ...]:
    """The columns of an entity as selected by the reader: JSON and decimals as text.

    Django's per-value converters (json.loads, Decimal quantize) were most of the
    read time at 10 000 models; the casts work the same on SQLite and PostgreSQL.
    """
    from django.db.models import TextField
    from django.db.models.functions import Cast

    out: list[Any] = []
    for f in entity.columns:
        if f.type == "list":
            out.append(Cast(f.attr, TextField()))
        elif f.store == DECIMAL:
            out.append(Cast(f.attr, TextField()))  # a numeric output field brings a converter back
        else:
            out.append(f.attr)
    return tuple(out)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a whole configuration is built.

    Building tens of thousands of small dicts and tuples triggers full collections
    that walk the whole heap; at 10 000 models they were a third of a rebuild. Nothing
    built here is cyclic garbage, and the collector runs as usual right after.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def document_from_db() -> dict[str, Any]:
    """Read every configuration table once (ten queries, whatever the size) into the canonical document.

    A failing query raises routing.config.db_errors.ConfigReadError (a DatabaseError)
    naming the table and keeping the database's message.
    """
    from django.db import DatabaseError

    with gc_paused():
        try:
            return _read_document()
        except ConfigReadError:
            raise
        except DatabaseError as exc:
            raise ConfigReadError(_reading.table, exc) from exc


class _Reading:
    """Which table the reader is on, for the error message (one reader per thread)."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def table(self) -> str:
        return getattr(self._local, "table", "the configuration tables")

    def at(self, queryset: Any) -> Any:
        self._local.table = queryset.model._meta.db_table
        return queryset


_reading = _Reading()


def _model(label: str) -> Any:
    """A model class by its label, from Django's app registry: the apps' models are not imported here."""
    return apps.get_model(label)


def _read_document() -> dict[str, Any]:
    read = _readers()
    resilience = _read_resilience()
    providers, provider_names = _read_providers(read)
    models, model_ids = _read_models(read, provider_names)
    aliases = {
        name: model_ids[target]
        for name, target in _reading.at(_model("providers.Alias").objects.order_by("name")).values_list(
            "name", "target_id"
        )
    }
    orgs = _read_orgs(read, provider_names)
    document = {
        "resilience": resilience,
        "providers": providers,
        "models": models,
        "aliases": aliases,
        "orgs": orgs,
    }
    alerts = [
        read["alert"](tuple(row))
        for row in _reading.at(_model("routing.AlertRule").objects.order_by("name")).values_list(*_select(ALERT))
    ]
    if alerts:  # docs/alerts.md: a document without alerts has no `alerts:` key
        document["alerts"] = alerts
    return document


def _read_resilience() -> dict[str, Any]:
    settings_row = (
        _reading.at(_model("routing.ResilienceSettings").objects.filter(pk=1)).values(*RESILIENCE.column_attrs).first()
    )
    resilience = {}
    for f in RESILIENCE:
        value = settings_row[f.attr] if settings_row else f.default
        resilience[f.name] = list(value) if isinstance(value, list) else f.to_doc(value)
    return resilience


def _read_providers(read: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The `providers` items, and each provider's name by pk (the other entities refer to it)."""
    provider_names: dict[int, str] = {}
    providers = []
    read_provider = read["provider"]
    for pk, secret, *row in _reading.at(_model("providers.Provider").objects.order_by("name")).values_list(
        "id", "api_key_encrypted", *_select(PROVIDER)
    ):
        item = read_provider(tuple(row), "stored" if secret else None)  # a reference, never the secret
        provider_names[pk] = item["name"]
        providers.append(item)
    return providers, provider_names


def _read_models(read: dict[str, Any], provider_names: dict[int, str]) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The `models` items with their deployments and fallbacks, and each model's public id by pk."""
    model_rows = _reading.at(_model("providers.Model").objects.order_by("public_id")).values_list(
        "id", "provider_id", *_select(MODEL)
    )
    model_rows = list(model_rows)
    model_ids = {row[0]: row[2] for row in model_rows}  # public_id is the first column
    chains: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for link_id, model_pk, target_pk, position in (
        _reading.at(_model("providers.FallbackLink").objects.all())
        .values_list("id", "model_id", "target_id", "position")
        .order_by()
    ):
        chains[model_pk].append((position, link_id, target_pk))
    read_model = read["model"]
    deployments = _deployments(read["deployment"], provider_names, _model("providers.Deployment"))
    models = []
    no_links: list[tuple[int, int, int]] = []
    for pk, provider_pk, *row in model_rows:
        links = chains.get(pk, no_links)
        if len(links) > 1:
            links.sort()
        deps = deployments.get(pk)
        models.append(
            read_model(
                tuple(row),
                None if provider_pk is None else provider_names[provider_pk],
                None if deps is None else [d for _, _, d in sorted(deps, key=_first_two)],
                [model_ids[target] for _, _, target in links],
            )
        )
    return models, model_ids


def _read_orgs(read: dict[str, Any], provider_names: dict[int, str]) -> list[dict[str, Any]]:
    """The `orgs` items with their agents, policies (by priority) and credentials (references, never secrets)."""
    agent_model, org_model, credential_model, policy_model = (
        _model(f"policies.{name}") for name in ("Agent", "Org", "OrgCredential", "OrgPolicy")
    )
    read_agent, read_policy, read_credential = read["agent"], read["policy"], read["credential"]
    agents: dict[int, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for org_pk, *row in _reading.at(agent_model.objects.order_by()).values_list("org_id", *_select(AGENT)):
        item = read_agent(tuple(row))
        agents[org_pk].append((item["name"], item))
    policies: dict[int, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for pk, org_pk, *row in _reading.at(policy_model.objects.order_by()).values_list("id", "org_id", *_select(POLICY)):
        item = read_policy(tuple(row))
        policies[org_pk].append((item["priority"], pk, item))
    credentials: dict[int, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for org_pk, provider_pk, secret, *row in _reading.at(credential_model.objects.order_by()).values_list(
        "org_id", "provider_id", "api_key_encrypted", *_select(CREDENTIAL)
    ):
        provider = provider_names[provider_pk]
        credentials[org_pk].append((provider, read_credential(tuple(row), provider, "stored" if secret else None)))

    read_org = read["org"]
    return [
        read_org(
            tuple(row),
            [item for _, item in sorted(agents.get(pk, ()), key=_first)],
            [item for _, _, item in sorted(policies.get(pk, ()), key=_first_two)],
            [item for _, item in sorted(credentials.get(pk, ()), key=_first)],
        )
        for pk, *row in _reading.at(org_model.objects.order_by("name")).values_list("id", *_select(ORG))
    ]


def _deployments(read: Any, provider_names: dict[int, str], table: Any) -> dict[int, list[Any]]:
    """Each model's deployment entries as (position, id, item), by model pk (one query)."""
    out: dict[int, list[Any]] = defaultdict(list)
    rows = _reading.at(table.objects.order_by()).values_list(
        "id", "model_id", "provider_id", "position", *_select(DEPLOYMENT)
    )
    for pk, model_pk, provider_pk, position, *row in rows:
        out[model_pk].append((position, pk, read(tuple(row), provider_names[provider_pk])))
    return out


def _first(entry: tuple[Any, ...]) -> Any:
    return entry[0]


def _first_two(entry: tuple[Any, ...]) -> Any:
    return entry[:2]


def _row(obj: Any, entity: Any) -> dict[str, Any]:
    return {f.attr: getattr(obj, f.attr) for f in entity.columns}


def _stored_ref(obj: Any) -> str | None:
    """ "stored" when the row holds an encrypted key: a reference, the secret never enters the document."""
    return "stored" if getattr(obj, "api_key_encrypted", "") else None


def provider_item(p: Any) -> dict[str, Any]:
    """One Provider object as its document entry (also used by the admin for unsaved edits)."""
    return PROVIDER.serialise(_row(p, PROVIDER), api_key=_stored_ref(p))


def model_item(m: Any, fallbacks: list[str], deployments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One model object as its document entry; `fallbacks` are the target ids in order.

    With `deployments` (document entries, docs/deployments.md) the entry lists them instead
    of the provider + upstream_model shorthand.
    """
    provider = m.provider.name if m.provider_id else None
    return MODEL.serialise(
        _row(m, MODEL), provider=provider, deployments=list(deployments or ()), fallbacks=list(fallbacks)
    )


def deployment_item(d: Any) -> dict[str, Any]:
    """One Deployment object as its document entry (the admin's unsaved inline rows)."""
    return DEPLOYMENT.serialise(_row(d, DEPLOYMENT), provider=d.provider.name if d.provider_id else None)


def child_item(kind: str, obj: Any) -> dict[str, Any]:
    """An org's agent, policy or credential object as its document entry."""
    if kind == "agents":
        return AGENT.serialise(_row(obj, AGENT))
    if kind == "policies":
        return POLICY.serialise(_row(obj, POLICY))
    provider = obj.provider.name if obj.provider_id else None
    return CREDENTIAL.serialise(_row(obj, CREDENTIAL), provider=provider, api_key=_stored_ref(obj))


def key_rows_from_db() -> list[dict[str, Any]]:
    """Active API keys as plain rows for the snapshot, in one query: hash, prefix, org, agent, expiry and the
    key's own controls (docs/limits.md#keys); a rotated key's previous secret as a second row until its grace ends."""

    fields = ("key_hash", "prefix", "agent__org__name", "agent__name", "expires_at", "enabled", "limits", "budget")
    rows: list[dict[str, Any]] = []
    for *values, priority in ApiKey.objects.filter(revoked=False).values_list(
        *fields, "allowed_models", "previous_hash", "previous_expires_at", "priority"
    ):
        key_hash, prefix, org, agent, expires_at, enabled, limits, budget, allowed, previous, previous_until = values
        row = {
            "key_hash": key_hash,
            "prefix": prefix,
            "org": org,
            "agent": agent,
            "expires_at": expires_at.timestamp() if expires_at else None,
            "enabled": enabled,
            "limits": limits,
            "budget": budget,
            "models": allowed,
            "priority": priority,  # docs/overload.md#configuration; "" when the agent's applies
        }
        rows.append(row)
        if previous and previous_until is not None:
            until = previous_until.timestamp()
            if expires_at is not None:
                until = min(until, expires_at.timestamp())
            rows.append({**row, "key_hash": previous, "expires_at": until, "rotated": True})
    return rows
