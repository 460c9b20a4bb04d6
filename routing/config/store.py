"""Configuration as code: import, export and YAML (docs/configuration.md).

`import_document` is the one write path for a whole document: validate, then
apply in one transaction, saving only rows whose values change, so importing an
export saves nothing and fires no config-change signal. `errors_for_edit` lets the
admin validate one unsaved object against the rest of the configuration with the
same rules.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from django.db import models as djm
from django.db import transaction
from django.utils import timezone

from policies.models import Agent, Org, OrgCredential, OrgPolicy
from providers.models import Alias, Deployment, FallbackLink, Model, Provider
from routing.config import recorder
from routing.config.document import document_from_db
from routing.config.reload import mark_changed
from routing.config.schema import (
    AGENT,
    ALERT,
    CREDENTIAL,
    DEPLOYMENT,
    MODEL,
    ORG,
    POLICY,
    PROVIDER,
    RESILIENCE,
    resilience_values,
)
from routing.config.validation import ConfigError, validate_document
from routing.models import AlertRule, ResilienceSettings


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


# libyaml's safe loader parses a 10 000-model file in about a second, PyYAML's in fifteen.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Bounds of a configuration file (docs/security.md#identifiers). A 10 000-model export is about 2 MiB and
# nests 6 levels. libyaml builds the document recursively in C, so a file nested 100 000 levels deep
# overflows the stack (the process dies of signal 11): the depth is measured first, on the parser's events,
# which libyaml produces without recursion (about 15 % of the load's time).
MAX_YAML_BYTES = 10 * 1024 * 1024
MAX_YAML_DEPTH = 64
_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def dump_yaml(doc: dict[str, Any]) -> str:
    """Deterministic YAML of a document (its key and list order as given)."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)


def _too_deep(text: str) -> str | None:
    """Where `text` nests sequences and mappings past MAX_YAML_DEPTH (None when it does not)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, _OPENS):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        elif isinstance(event, _CLOSES):
            depth -= 1
    return None


def load_yaml(text: str, source: str = "<file>") -> Any:
    """Parse YAML; a syntax error becomes ConfigInvalid naming the line. An empty file is {}.

    A file over MAX_YAML_BYTES, or nested deeper than MAX_YAML_DEPTH, is refused before it is built."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigInvalid(
            [
                ConfigError(
                    source, f"the file is larger than {MAX_YAML_BYTES // 1048576} MiB: split it or remove content"
                )
            ]
        )
    try:
        where = _too_deep(text)
        if where is not None:
            raise ConfigInvalid(
                [
                    ConfigError(
                        source,
                        f"lists and mappings are nested more than {MAX_YAML_DEPTH} levels deep at {where}: "
                        "a configuration needs about 6, fix the file",
                    )
                ]
            )
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (libyaml's when built with it)
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


def _empty(value: Any) -> Any:
    """Blank text and NULL are the same configuration (the document omits both)."""
    return None if value == "" else value


def merge_documents(base: dict[str, Any], update: Any) -> Any:
    """`update` laid over `base` by name: what the database holds after a non-pruning import."""
    if not isinstance(update, dict):
        return update
    merged: dict[str, Any] = {
        **base,
        **{k: v for k, v in update.items() if k not in ("providers", "models", "orgs", "aliases", "alerts")},
    }
    if "resilience" not in update:
        merged["resilience"] = base.get("resilience")
    for key, name in (("providers", "name"), ("models", "id"), ("orgs", "name"), ("alerts", "name")):
        new = update.get(key)
        if not isinstance(new, list):
            merged[key] = base.get(key, []) if new is None else new
            continue
        names = {item.get(name) for item in new if isinstance(item, dict)}
        kept = [item for item in base.get(key, []) if item.get(name) not in names]
        if key == "orgs":
            by_name = {o.get("name"): o for o in base.get(key, [])}
            new = [_merge_org(item, by_name) for item in new]
        merged[key] = new + kept  # file entries first, so error paths with indexes match the file
    aliases = update.get("aliases")
    merged["aliases"] = (
        {**base.get("aliases", {}), **aliases} if isinstance(aliases, dict) else (aliases or base.get("aliases", {}))
    )
    return merged


def _merge_org(item: Any, base_orgs: dict[Any, dict[str, Any]]) -> Any:
    """An org of the file over the database's (by name): agents are added to, listed policies
    and credentials replace (mirrors what a non-pruning import does)."""
    name = item.get("name") if isinstance(item, dict) else None
    old = base_orgs.get(name) if isinstance(name, str) else None
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


# Rows of one kind written one by one (signals per row, as an admin save) up to this
# many; above it the kind is written with bulk_create / bulk_update in batches and
# the configuration version is bumped once (docs/configuration-at-scale.md#import).
SMALL_WRITE = 100
BATCH = 500

Progress = Callable[[str], None]


def _changed(current: dict[str, Any], values: dict[str, Any]) -> list[str]:
    return [name for name, value in values.items() if _empty(current.get(name)) != _empty(value)]


def _chunks(items: list[Any], size: int = BATCH) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _Applier:
    """Makes the database match a valid document, writing only what differs.

    Every table is read whole once (`.values()`), diffed in Python, then written per
    kind: row by row for a few changes, in bulk for many.
    """

    def __init__(self, result: ImportResult, prune: bool = False, progress: Progress | None = None) -> None:
        self.result = result
        self.pruning = prune
        self.progress = progress
        self.bulk_written = False  # bulk writes send no signals: bump the version once at the end

    def kind(self, model: type[djm.Model]) -> str:
        kind = str(model._meta.verbose_name)
        self.result.plurals[kind] = str(model._meta.verbose_name_plural)
        return kind

    def note(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    # writing ------------------------------------------------------------------------

    def write(
        self,
        model: type[djm.Model],
        creates: list[dict[str, Any]],
        updates: list[tuple[int, dict[str, Any], list[str]]],
    ) -> None:
        """Create rows (column values) and update rows (pk, values, changed columns)."""
        if not creates and not updates:
            return
        kind = self.kind(model)
        if creates:
            self.result.created[kind] += len(creates)
        if updates:
            self.result.updated[kind] += len(updates)
        label = str(model._meta.verbose_name_plural)
        self.note(f"writing {label}: {len(creates)} new, {len(updates)} changed")
        if len(creates) + len(updates) <= SMALL_WRITE:
            for values in creates:
                model(**values).save()
            if updates:
                objs = {}
                for chunk in _chunks([pk for pk, _, _ in updates]):
                    objs.update(model.objects.in_bulk(chunk))
                for pk, values, changed in updates:
                    obj = objs[pk]
                    for name in changed:
                        setattr(obj, name, values[name])
                    obj.save()
            return
        self.bulk_written = True
        auto_now = [f.attname for f in model._meta.concrete_fields if getattr(f, "auto_now", False)]
        for chunk in _chunks(creates):
            model.objects.bulk_create([model(**values) for values in chunk])
        if updates:
            fields = sorted({name for _, _, changed in updates for name in changed} | set(auto_now))
            now = timezone.now()
            objs = []
            for pk, values, _ in updates:
                obj = model(pk=pk, **{k: v for k, v in values.items() if k in fields})
                for name in auto_now:
                    setattr(obj, name, now)
                objs.append(obj)
            # A few columns per batch keeps each CASE expression small on SQLite.
            for chunk in _chunks(objs, 100):
                model.objects.bulk_update(chunk, fields)

    def remove(self, model: type[djm.Model], pks: list[int], leaf: bool = False) -> None:
        """Delete rows; `leaf` rows (nothing refers to them) go in bulk without signals when many."""
        if not pks:
            return
        self.result.deleted[self.kind(model)] += len(pks)
        if leaf and len(pks) > SMALL_WRITE:
            self.bulk_written = True
            for chunk in _chunks(pks):
                # No signal listener needs these rows: skip Django's per-row collection.
                model.objects.filter(pk__in=chunk)._raw_delete(model.objects.db)
            return
        for chunk in _chunks(pks):
            for obj in model.objects.filter(pk__in=chunk):
                obj.delete()

    def sync(
        self,
        model: type[djm.Model],
        existing: dict[Any, dict[str, Any]],
        wanted: dict[Any, dict[str, Any]],
    ) -> tuple[list[dict[str, Any]], list[tuple[int, dict[str, Any], list[str]]]]:
        """Diff wanted rows against existing ones by natural key; returns (creates, updates)."""
        creates, updates = [], []
        for key, values in wanted.items():
            current = existing.get(key)
            if current is None:
                creates.append(values)
                continue
            changed = _changed(current, values)
            if changed:
                updates.append((current["id"], values, changed))
        return creates, updates

    # sections -----------------------------------------------------------------------

    def resilience(self, raw: dict[str, Any] | None) -> None:
        merged = resilience_values(raw)
        values = {f.attr: f.to_db(merged[f.name]) for f in RESILIENCE}
        defaults = {f.attr: f.to_db(None) for f in RESILIENCE}
        row = ResilienceSettings.objects.filter(pk=1).values("id", *values).first()
        if row is None:
            if values != defaults:
                self.write(ResilienceSettings, [{"id": 1, **values}], [])
            return
        changed = _changed(row, values)
        self.write(ResilienceSettings, [], [(1, values, changed)] if changed else [])

    def providers(self, items: list[dict[str, Any]]) -> dict[str, int]:
        existing = {row["name"]: row for row in Provider.objects.values("id", *_attrs(PROVIDER))}
        wanted = {item["name"]: PROVIDER.row_values(item) for item in items}
        self.write(Provider, *self.sync(Provider, existing, wanted))
        return dict(Provider.objects.values_list("name", "id"))

    def models(self, items: list[dict[str, Any]], providers: dict[str, int]) -> dict[str, int]:
        existing = {row["public_id"]: row for row in Model.objects.values("id", "provider_id", *_attrs(MODEL))}
        wanted = {
            item["id"]: {
                **MODEL.row_values(item),
                "provider_id": providers[item["provider"]] if item.get("provider") else None,
            }
            for item in items
        }
        self.write(Model, *self.sync(Model, existing, wanted))
        ids = dict(Model.objects.values_list("public_id", "id"))
        self.deployments(items, ids, providers)
        chains: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for link_id, model_pk, target_pk, position in FallbackLink.objects.values_list(
            "id", "model_id", "target_id", "position"
        ):
            chains[model_pk].append((position, link_id, target_pk))
        doomed: list[int] = []
        creates: list[dict[str, Any]] = []
        for item in items:  # every target exists now
            model_pk = ids[item["id"]]
            want = [ids[t] for t in item.get("fallbacks") or []]
            links = sorted(chains.get(model_pk, ()))
            if [target for _, _, target in links] != want:
                doomed += [link_id for _, link_id, _ in links]
                creates += [
                    {"model_id": model_pk, "target_id": target, "position": position}
                    for position, target in enumerate(want)
                ]
        self.remove(FallbackLink, doomed, leaf=True)
        self.write(FallbackLink, creates, [])
        return ids

    def deployments(self, items: list[dict[str, Any]], ids: dict[str, int], providers: dict[str, int]) -> None:
        """A model's deployment rows follow its `deployments` list (none for the shorthand), in order."""
        names = ["provider_id", *_attrs(DEPLOYMENT)]
        current: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
        for row in Deployment.objects.values("id", "model_id", "position", *names):
            current[row["model_id"]].append((row["position"], row["id"], tuple(_empty(row[n]) for n in names)))
        doomed: list[int] = []
        creates: list[dict[str, Any]] = []
        for item in items:
            model_pk = ids[item["id"]]
            want = [
                {"provider_id": providers[d["provider"]], **DEPLOYMENT.row_values(d)}
                for d in item.get("deployments") or []
            ]
            rows = sorted(current.get(model_pk, ()))
            if [values for _, _, values in rows] != [tuple(_empty(w[n]) for n in names) for w in want]:
                doomed += [pk for _, pk, _ in rows]
                creates += [{"model_id": model_pk, "position": i, **w} for i, w in enumerate(want)]
        self.remove(Deployment, doomed, leaf=True)
        self.write(Deployment, creates, [])

    def aliases(self, aliases: dict[str, str], models: dict[str, int]) -> None:
        existing = {row["name"]: row for row in Alias.objects.values("id", "name", "target_id")}
        wanted = {name: {"name": name, "target_id": models[target]} for name, target in aliases.items()}
        self.write(Alias, *self.sync(Alias, existing, wanted))

    def orgs(self, items: list[dict[str, Any]], providers: dict[str, int]) -> None:
        existing = {row["name"]: row for row in Org.objects.values("id", *_attrs(ORG))}
        wanted = {item["name"]: ORG.row_values(item) for item in items}
        self.write(Org, *self.sync(Org, existing, wanted))
        org_ids = dict(Org.objects.values_list("name", "id"))

        # Agents carry API keys: without --prune an agent missing from the file is kept.
        current_agents = {
            (row["org_id"], row["name"]): row for row in Agent.objects.values("id", "org_id", *_attrs(AGENT))
        }
        wanted_agents = {
            (org_ids[item["name"]], a["name"]): {"org_id": org_ids[item["name"]], **AGENT.row_values(a)}
            for item in items
            for a in item.get("agents") or []
        }
        self.write(Agent, *self.sync(Agent, current_agents, wanted_agents))
        listed = {org_ids[item["name"]] for item in items}
        if self.pruning:
            self.remove(
                Agent, [r["id"] for k, r in current_agents.items() if k[0] in listed and k not in wanted_agents]
            )

        cred_orgs = {org_ids[item["name"]] for item in items if "credentials" in item or self.pruning}
        current_creds = {
            (row["org_id"], row["provider_id"]): row
            for row in OrgCredential.objects.values("id", "org_id", "provider_id", *_attrs(CREDENTIAL))
        }
        wanted_creds = {}
        for item in items:
            org_pk = org_ids[item["name"]]
            if org_pk in cred_orgs:
                for c in item.get("credentials") or []:
                    provider_pk = providers[c["provider"]]
                    wanted_creds[(org_pk, provider_pk)] = {
                        "org_id": org_pk,
                        "provider_id": provider_pk,
                        **CREDENTIAL.row_values(c),
                    }
        self.remove(
            OrgCredential,
            [r["id"] for k, r in current_creds.items() if k[0] in cred_orgs and k not in wanted_creds],
            leaf=True,
        )
        self.write(OrgCredential, *self.sync(OrgCredential, current_creds, wanted_creds))

        self.policies(
            {org_ids[item["name"]]: item.get("policies") or [] for item in items if "policies" in item or self.pruning}
        )

    def alerts(self, items: list[dict[str, Any]]) -> None:
        """Alert rules by name (docs/alerts.md); without --prune a rule missing from the file is kept."""
        existing = {row["name"]: row for row in AlertRule.objects.values("id", *_attrs(ALERT))}
        wanted = {item["name"]: ALERT.row_values(item) for item in items}
        self.write(AlertRule, *self.sync(AlertRule, existing, wanted))
        if self.pruning:
            self.remove(AlertRule, [row["id"] for name, row in existing.items() if name not in wanted], leaf=True)

    def policies(self, by_org: dict[int, list[dict[str, Any]]]) -> None:
        """Policies have no natural key: keep identical rows, reuse the others, delete the rest."""
        rows: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in OrgPolicy.objects.order_by("priority", "id").values("id", "org_id", *_attrs(POLICY)):
            if row["org_id"] in by_org:
                rows[row["org_id"]].append(row)
        names = [f.attr for f in POLICY.columns]
        creates, updates, doomed = [], [], []
        for org_pk, items in by_org.items():
            spare = rows.get(org_pk, [])
            by_values: dict[tuple[Any, ...], deque[int]] = defaultdict(deque)
            for index, row in enumerate(spare):
                by_values[_policy_key(row, names)].append(index)
            kept: set[int] = set()
            todo = []
            for item in items:
                values = {"org_id": org_pk, **POLICY.row_values(item)}
                same = by_values.get(_policy_key(values, names))
                if same:
                    kept.add(same.popleft())  # the first identical row, in priority order
                else:
                    todo.append(values)
            spare = [row for index, row in enumerate(spare) if index not in kept]
            for values in todo:
                if spare:
                    row = spare.pop(0)
                    updates.append((row["id"], values, _changed(row, values)))
                else:
                    creates.append(values)
            doomed += [row["id"] for row in spare]
        self.write(OrgPolicy, creates, updates)
        self.remove(OrgPolicy, doomed, leaf=True)

    def prune(self, doc: dict[str, Any]) -> None:
        aliases = set(doc.get("aliases") or {})
        self.remove(
            Alias, [pk for pk, name in Alias.objects.values_list("id", "name") if name not in aliases], leaf=True
        )
        orgs = {o["name"] for o in doc.get("orgs") or []}
        self.remove(Org, [pk for pk, name in Org.objects.values_list("id", "name") if name not in orgs])
        model_ids = {m["id"] for m in doc.get("models") or []}
        doomed = [pk for pk, public_id in Model.objects.values_list("id", "public_id") if public_id not in model_ids]
        doomed_set = set(doomed)
        # PROTECT between doomed models: their links go first.
        links = [pk for pk, model_pk in FallbackLink.objects.values_list("id", "model_id") if model_pk in doomed_set]
        self.remove(FallbackLink, links, leaf=True)
        self.remove(Model, doomed)
        providers = {p["name"] for p in doc.get("providers") or []}
        self.remove(Provider, [pk for pk, name in Provider.objects.values_list("id", "name") if name not in providers])


def _attrs(entity: Any) -> list[str]:
    return [f.attr for f in entity.columns]


def _policy_key(row: dict[str, Any], names: list[str]) -> tuple[Any, ...]:
    return tuple(repr(_empty(row.get(name))) for name in names)


def import_document(
    doc: Any, *, prune: bool = False, dry_run: bool = False, progress: Progress | None = None
) -> ImportResult:
    """Validate the document and apply it in one transaction, or raise ConfigInvalid and change nothing.

    Objects in the file are created or updated; objects absent from the file are kept
    unless `prune`. An org's `policies` and `credentials` lists, when present, replace
    the org's; its agents (which own API keys) are only added or updated, and removed
    only with `prune`. Without prune the merged result is what gets validated, so a
    file may refer to objects that only exist in the database. A `resilience:`
    section resets the keys it leaves out to their defaults; no section keeps the row.
    With `prune`, deleting an agent absent from its org's list deletes its API keys.
    Nothing is written when the database already matches (importing an export is a
    no-op). `progress` receives one line per phase (the command shows it on a terminal).
    """
    note = progress or (lambda message: None)
    with recorder.change(fallback_source="import"):  # one transaction, one history revision (docs/config-history.md)
        note("reading the current configuration")
        target = doc if prune else merge_documents(document_from_db(), doc)
        note("validating")
        errors = validate_document(target)
        if errors:
            raise ConfigInvalid(errors)
        result = ImportResult()
        applier = _Applier(result, prune, progress)
        if "resilience" in doc or prune:
            applier.resilience(doc.get("resilience"))
        note("providers")
        providers = applier.providers(doc.get("providers") or [])
        note("models and fallback chains")
        models = applier.models(doc.get("models") or [], providers)
        applier.aliases(doc.get("aliases") or {}, models)
        note("organisations, agents, policies, credentials")
        applier.orgs(doc.get("orgs") or [], providers)
        applier.alerts(doc.get("alerts") or [])
        if prune:
            applier.prune(doc)
        if applier.bulk_written:
            mark_changed()
        if dry_run:
            transaction.set_rollback(True)
    note("done")
    return result


# Admin support ---------------------------------------------------------------------


def in_scope(path: str, scope: str) -> bool:
    return path == scope or path.startswith((scope + ".", scope + "["))


def _copy(doc: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a plain-JSON document (orjson: about 7x faster than deepcopy at 10 000 models)."""
    try:
        return orjson.loads(orjson.dumps(doc))
    except TypeError:  # something not JSON (never from document_from_db)
        return copy.deepcopy(doc)


def errors_for_edit(edit: Callable[[dict[str, Any]], None], scope: str) -> list[ConfigError]:
    """Validate the configuration with one unsaved edit applied to the database document.

    Returns the errors inside `scope` (the edited object's path) plus errors
    elsewhere that the edit introduces; problems that already existed elsewhere
    do not block an unrelated save.
    """
    before = document_from_db()
    after = _copy(before)
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
            for d in m.get("deployments") or []:
                if d.get("provider") == old:
                    d["provider"] = new
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
