"""Configuration as code: import, export and YAML (CONTRACT §9).

`import_document` is the one write path for a whole document: validate, then
apply in one transaction, saving only rows whose values change, so importing an
export saves nothing and fires no config-change signal. `errors_for_edit` lets the
admin validate one unsaved object against the rest of the configuration with the
same rules.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import yaml
from django.db import models as djm
from django.db import transaction

from policies.models import Agent, Org, OrgCredential, OrgPolicy
from providers.models import Alias, FallbackLink, Model, Provider
from routing.config.document import RESILIENCE_DEFAULTS, document_from_db
from routing.config.validation import ConfigError, validate_document
from routing.models import ResilienceSettings


class ConfigInvalid(Exception):
    """The document has errors; nothing was changed."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


@dataclass
class ImportResult:
    created: Counter[str] = field(default_factory=Counter)
    updated: Counter[str] = field(default_factory=Counter)
    deleted: Counter[str] = field(default_factory=Counter)
    plurals: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)

    def summary(self) -> str:
        if not self.changed:
            return "No changes: the database already matches the file."
        parts = []
        for verb, counts in (("created", self.created), ("updated", self.updated), ("deleted", self.deleted)):
            detail = ", ".join(f"{n} {kind if n == 1 else self.plurals[kind]}" for kind, n in sorted(counts.items()))
            parts.append(f"{sum(counts.values())} {verb}" + (f" ({detail})" if detail else ""))
        return "; ".join(parts) + "."


# YAML -----------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Lists of plain values in flow style ([chat, streaming]), everything else in indented block style."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = bool(data) and all(isinstance(v, (str, int, float, bool)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump_yaml(doc: dict[str, Any]) -> str:
    """Deterministic YAML of a document (its key and list order as given)."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)


def load_yaml(text: str, source: str = "<file>") -> Any:
    """Parse YAML; a syntax error becomes ConfigInvalid naming the line. An empty file is {}."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigInvalid(
            [ConfigError(source, f"YAML syntax error{where}: {problem}; fix the file and retry")]
        ) from exc
    return {} if doc is None else doc


def export_document() -> dict[str, Any]:
    return document_from_db()


# Import -----------------------------------------------------------------------------


def _dec(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _empty(value: Any) -> Any:
    """Blank text and NULL are the same configuration (the document omits both)."""
    return None if value == "" else value


def merge_documents(base: dict[str, Any], update: Any) -> Any:
    """`update` laid over `base` by name: what the database holds after a non-pruning import."""
    if not isinstance(update, dict):
        return update
    merged: dict[str, Any] = {
        **base,
        **{k: v for k, v in update.items() if k not in ("providers", "models", "orgs", "aliases")},
    }
    if "resilience" not in update:
        merged["resilience"] = base.get("resilience")
    for key, name in (("providers", "name"), ("models", "id"), ("orgs", "name")):
        new = update.get(key)
        if not isinstance(new, list):
            merged[key] = base.get(key, []) if new is None else new
            continue
        names = {item.get(name) for item in new if isinstance(item, dict)}
        kept = [item for item in base.get(key, []) if item.get(name) not in names]
        if key == "orgs":
            new = [_merge_org(item, base.get(key, [])) for item in new]
        merged[key] = new + kept  # file entries first, so error paths with indexes match the file
    aliases = update.get("aliases")
    merged["aliases"] = (
        {**base.get("aliases", {}), **aliases} if isinstance(aliases, dict) else (aliases or base.get("aliases", {}))
    )
    return merged


def _merge_org(item: Any, base_orgs: list[dict[str, Any]]) -> Any:
    """An org of the file over the database's: agents are added to, listed policies and
    credentials replace (mirrors what a non-pruning import does)."""
    old = (
        next((o for o in base_orgs if o.get("name") == (item or {}).get("name")), None)
        if isinstance(item, dict)
        else None
    )
    if old is None:
        return item
    merged = {**item}
    agents = item.get("agents")
    if isinstance(agents, list):
        names = {a.get("name") for a in agents if isinstance(a, dict)}
        merged["agents"] = agents + [a for a in old.get("agents", []) if a.get("name") not in names]
    elif agents is None and old.get("agents"):
        merged["agents"] = old["agents"]
    for nested in ("policies", "credentials"):
        if nested not in item and old.get(nested):
            merged[nested] = old[nested]
    return merged


class _Applier:
    """Makes the database match a valid document, saving only what differs."""

    def __init__(self, result: ImportResult, prune: bool = False) -> None:
        self.result = result
        self.pruning = prune

    def kind(self, obj: djm.Model) -> str:
        kind = str(obj._meta.verbose_name)
        self.result.plurals[kind] = str(obj._meta.verbose_name_plural)
        return kind

    def save(self, obj: djm.Model, values: dict[str, Any]) -> bool:
        kind = self.kind(obj)
        if obj._state.adding:
            for name, value in values.items():
                setattr(obj, name, value)
            obj.save()
            self.result.created[kind] += 1
            return True
        changed = [n for n, v in values.items() if _empty(getattr(obj, n)) != _empty(v)]
        if changed:
            for name in changed:
                setattr(obj, name, values[name])
            obj.save()
            self.result.updated[kind] += 1
        return bool(changed)

    def delete(self, objs: Iterable[djm.Model]) -> None:
        for obj in objs:
            self.result.deleted[self.kind(obj)] += 1
            obj.delete()

    def resilience(self, raw: dict[str, Any] | None) -> None:
        values = {**RESILIENCE_DEFAULTS, **(raw or {})}
        row = ResilienceSettings.objects.filter(pk=1).first()
        if row is None and values == RESILIENCE_DEFAULTS:
            return  # absent row already means defaults
        self.save(row or ResilienceSettings(pk=1), values)

    def providers(self, items: list[dict[str, Any]]) -> dict[str, Provider]:
        existing = {p.name: p for p in Provider.objects.all()}
        for item in items:
            obj = existing.get(item["name"]) or Provider()
            self.save(
                obj,
                {
                    "name": item["name"],
                    "dialect": item.get("dialect", "openai"),
                    "base_url": item["base_url"],
                    "api_key_env": item.get("api_key_env") or "",
                    "connect_timeout_ms": item.get("connect_timeout_ms"),
                    "first_token_timeout_ms": item.get("first_token_timeout_ms"),
                    "total_timeout_ms": item.get("total_timeout_ms"),
                    "health_check_path": item.get("health_check_path") or "",
                    "health_probe_enabled": bool(item.get("health_probe", False)),
                },
            )
            existing[obj.name] = obj
        return existing

    def models(self, items: list[dict[str, Any]], providers: dict[str, Provider]) -> dict[str, Model]:
        existing = {m.public_id: m for m in Model.objects.all()}
        for item in items:
            obj = existing.get(item["id"]) or Model()
            self.save(
                obj,
                {
                    "public_id": item["id"],
                    "provider_id": providers[item["provider"]].pk,
                    "upstream_model": item["upstream_model"],
                    "capabilities": list(item.get("capabilities") or []),
                    "context_window": item.get("context_window"),
                    "max_output_tokens": item.get("max_output_tokens"),
                    "residency": item.get("residency") or "",
                    "connect_timeout_ms": item.get("connect_timeout_ms"),
                    "first_token_timeout_ms": item.get("first_token_timeout_ms"),
                    "total_timeout_ms": item.get("total_timeout_ms"),
                    "fallback_on": list(item["fallback_on"]) if item.get("fallback_on") else None,
                    "input_price_per_mtok": _dec(item.get("input_price_per_mtok")),
                    "output_price_per_mtok": _dec(item.get("output_price_per_mtok")),
                },
            )
            existing[obj.public_id] = obj
        for item in items:  # every target exists now
            obj = existing[item["id"]]
            want = [existing[t].pk for t in item.get("fallbacks") or []]
            links = list(FallbackLink.objects.filter(model=obj).order_by("position", "id"))
            if [link.target_id for link in links] != want:
                self.delete(links)
                for position, target_id in enumerate(want):
                    self.save(FallbackLink(model=obj), {"target_id": target_id, "position": position})
        return existing

    def aliases(self, aliases: dict[str, str], models: dict[str, Model]) -> None:
        existing = {a.name: a for a in Alias.objects.all()}
        for name, target in aliases.items():
            self.save(existing.get(name) or Alias(), {"name": name, "target_id": models[target].pk})

    def orgs(self, items: list[dict[str, Any]], providers: dict[str, Provider]) -> None:
        existing = {o.name: o for o in Org.objects.all()}
        for item in items:
            org = existing.get(item["name"]) or Org()
            self.save(org, {"name": item["name"], "default_action": item.get("default_action", "allow")})
            # Agents carry API keys: without --prune an agent missing from the file is kept.
            self.by_key(
                Agent.objects.filter(org=org),
                lambda a: a.name,
                {
                    a["name"]: {"org": org, "name": a["name"], "default_model": a.get("default_model") or ""}
                    for a in item.get("agents") or []
                },
                Agent,
                delete_missing=self.pruning,
            )
            if "credentials" in item or self.pruning:
                self.by_key(
                    OrgCredential.objects.filter(org=org).select_related("provider"),
                    lambda c: c.provider.name,
                    {
                        c["provider"]: {
                            "org": org,
                            "provider": providers[c["provider"]],
                            "api_key_env": c.get("api_key_env") or "",
                            "base_url": c.get("base_url") or "",
                        }
                        for c in item.get("credentials") or []
                    },
                    OrgCredential,
                )
            if "policies" in item or self.pruning:
                self.policies(org, item.get("policies") or [])

    def by_key(
        self,
        rows: Any,
        key: Callable[[Any], str],
        wanted: dict[str, dict[str, Any]],
        model: type[djm.Model],
        delete_missing: bool = True,
    ) -> None:
        """Make an org's nested rows match `wanted` (natural key -> field values)."""
        current = {key(row): row for row in rows}
        if delete_missing:
            self.delete(row for k, row in current.items() if k not in wanted)
        for k, values in wanted.items():
            self.save(current.get(k) or model(), values)

    def policies(self, org: Org, items: list[dict[str, Any]]) -> None:
        """Policies have no natural key: keep identical rows, reuse the others, delete the rest."""

        def values(p: dict[str, Any]) -> dict[str, Any]:
            return {
                "org": org,
                "pattern": p["pattern"],
                "action": p.get("action", "allow"),
                "priority": p.get("priority", 100),
                "fallback_chain": p.get("fallback_chain"),
            }

        def same(row: OrgPolicy, v: dict[str, Any]) -> bool:
            return (row.pattern, row.action, row.priority, row.fallback_chain) == (
                v["pattern"],
                v["action"],
                v["priority"],
                v["fallback_chain"],
            )

        spare = list(OrgPolicy.objects.filter(org=org).order_by("priority", "id"))
        todo = []
        for v in map(values, items):
            match = next((row for row in spare if same(row, v)), None)
            if match is None:
                todo.append(v)
            else:
                spare.remove(match)
        for v in todo:
            self.save(spare.pop(0) if spare else OrgPolicy(), v)
        self.delete(spare)

    def prune(self, doc: dict[str, Any]) -> None:
        model_ids = {m["id"] for m in doc.get("models") or []}
        self.delete(Alias.objects.exclude(name__in=list(doc.get("aliases") or {})))
        self.delete(Org.objects.exclude(name__in=[o["name"] for o in doc.get("orgs") or []]))
        doomed = list(Model.objects.exclude(public_id__in=model_ids))
        self.delete(FallbackLink.objects.filter(model__in=doomed))  # PROTECT between doomed models
        self.delete(doomed)
        self.delete(Provider.objects.exclude(name__in=[p["name"] for p in doc.get("providers") or []]))


def import_document(doc: Any, *, prune: bool = False, dry_run: bool = False) -> ImportResult:
    """Validate the document and apply it in one transaction, or raise ConfigInvalid and change nothing.

    Objects in the file are created or updated; objects absent from the file are kept
    unless `prune`. An org's `policies` and `credentials` lists, when present, replace
    the org's; its agents (which own API keys) are only added or updated, and removed
    only with `prune`. Without prune the merged result is what gets validated, so a
    file may refer to objects that only exist in the database. A `resilience:`
    section resets the keys it leaves out to their defaults; no section keeps the row.
    With `prune`, deleting an agent absent from its org's list deletes its API keys.
    """
    with transaction.atomic():
        target = doc if prune else merge_documents(document_from_db(), doc)
        errors = validate_document(target)
        if errors:
            raise ConfigInvalid(errors)
        result = ImportResult()
        applier = _Applier(result, prune)
        if "resilience" in doc or prune:
            applier.resilience(doc.get("resilience"))
        providers = applier.providers(doc.get("providers") or [])
        models = applier.models(doc.get("models") or [], providers)
        applier.aliases(doc.get("aliases") or {}, models)
        applier.orgs(doc.get("orgs") or [], providers)
        if prune:
            applier.prune(doc)
        if dry_run:
            transaction.set_rollback(True)
    return result


# Admin support ---------------------------------------------------------------------


def in_scope(path: str, scope: str) -> bool:
    return path == scope or path.startswith((scope + ".", scope + "["))


def errors_for_edit(edit: Callable[[dict[str, Any]], None], scope: str) -> list[ConfigError]:
    """Validate the configuration with one unsaved edit applied to the database document.

    Returns the errors inside `scope` (the edited object's path) plus errors
    elsewhere that the edit introduces; problems that already existed elsewhere
    do not block an unrelated save.
    """
    before = document_from_db()
    after = copy.deepcopy(before)
    edit(after)
    old = set(validate_document(before))
    return [e for e in validate_document(after) if in_scope(e.path, scope) or e not in old]


def replace_item(items: list[dict[str, Any]], key: str, old: str | None, new: dict[str, Any]) -> None:
    """Replace the item whose `key` is `old` (or append it) in a document list, in place."""
    for i, item in enumerate(items):
        if old is not None and item.get(key) == old:
            items[i] = new
            return
    items.append(new)


def rename_references(doc: dict[str, Any], kind: str, old: str | None, new: str) -> None:
    """Follow a rename through foreign keys, as the database will once the edit is saved."""
    if old is None or old == new:
        return
    if kind == "provider":
        for m in doc["models"]:
            if m.get("provider") == old:
                m["provider"] = new
        for o in doc["orgs"]:
            for c in o.get("credentials", []):
                if c.get("provider") == old:
                    c["provider"] = new
    elif kind == "model":
        for m in doc["models"]:
            m["fallbacks"] = [new if t == old else t for t in m.get("fallbacks", [])]
        doc["aliases"] = {a: new if t == old else t for a, t in doc["aliases"].items()}


def find_org(doc: dict[str, Any], name: str | None) -> dict[str, Any] | None:
    return next((o for o in doc["orgs"] if name is not None and o.get("name") == name), None)
