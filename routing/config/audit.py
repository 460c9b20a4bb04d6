"""The audit log: one append-only AuditRecord per write and per login attempt (docs/audit.md).

Writes are caught where every path meets: the model signals of every configuration and
credential model (admin forms, the management API, commands and the shell all save through
the ORM), so a new admin page or API route cannot forget to audit. Who did it comes from the
innermost of: an explicit `acting()` scope (the admin middleware, the management API), the
configuration history's `recorder.change()` scope, a management command (its OS user), else
"system" from the shell. A bulk change (an import, a rollback) is one record, written when its
configuration revision is, not one per row. Records hold field *names*, never values, so no
secret reaches them. Nothing here runs on the gateway's request path: /v1 never saves a model.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.apps import apps
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Model

from routing.config import recorder
from routing.config.client_address import client_address
from routing.models import AuditRecord, BreakerAction

# Written by the gateway itself, or the audit's own rows: never audited row by row.
EXCLUDED = frozenset(
    {
        "routing.auditrecord",
        "routing.usagerecord",
        "routing.usagerollup",
        "routing.keyusage",
        "routing.configversion",
        "routing.configrevision",  # audited as the bulk change it records (`revision_saved`)
        "routing.breakeroverride",  # audited as its BreakerAction, which says who
        "routing.breakeraction",  # `breaker_action_saved`: one record, by the operator it names
        "routing.alertdelivery",  # written by the gateway itself, as usage records are (docs/alerts.md)
        "providers.providerprobe",
    }
)
AUDITED_APPS = ("policies", "providers", "routing")
AUDITED_AUTH = frozenset({"auth.user", "auth.group"})
BULK_SOURCES = frozenset({"import", "import_config", "rollback"})
LOGIN_FIELDS = frozenset({"last_login"})  # Django stamps it on every login: the login record says it


@dataclass(frozen=True, slots=True)
class Actor:
    name: str
    source: str
    remote_addr: str = ""


@dataclass(slots=True)
class _Change:
    """One row's change inside an `acting` block, kept (as it was then) until the block ends."""

    action: str
    object_type: str
    object_id: str
    object_repr: str
    org: str
    fields: list[str]

    @classmethod
    def of(cls, action: str, obj: Model, fields: list[str] | None = None) -> _Change:
        pk = "" if obj.pk is None else str(obj.pk)[:64]
        return cls(action, label_of(type(obj)), pk, str(obj)[:200], _org_of(obj)[:64], sorted(fields or []))


_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("switchboard_audit_actor", default=None)
_batch: contextvars.ContextVar[list[_Change] | None] = contextvars.ContextVar("switchboard_audit_batch", default=None)


@contextmanager
def acting(name: str, source: str, remote_addr: str = "") -> Iterator[Actor]:
    """Attribute the writes of this block to `name` from `source` (and the client's address), as
    ONE record: an admin form or an API call that saves an org and replaces its policies is one
    write. The record names the first row changed; the others are listed in its fields and detail.
    A block that raises records nothing (its transaction is rolled back too)."""
    actor = Actor(name[:150], source[:32], remote_addr[:64])
    changes: list[_Change] = []
    tokens = _actor.set(actor), _batch.set(changes)
    try:
        yield actor
        if changes:
            _write_batch(actor, changes)
    finally:
        _actor.reset(tokens[0])
        _batch.reset(tokens[1])


def _write_batch(actor: Actor, changes: list[_Change]) -> None:
    first, rest = changes[0], changes[1:]
    fields = set(first.fields)
    counts: dict[str, int] = {}
    for change in rest:
        what = f"{change.object_type} {change.action}"
        counts[what] = counts.get(what, 0) + 1
        fields.add(change.object_type.split(".", 1)[1])
    detail = "; ".join(f"{n} × {what}" if n > 1 else what for what, n in counts.items())
    _append(actor, first, sorted(fields), f"also: {detail}" if detail else "")


def _append(actor: Actor, change: _Change, fields: list[str], detail: str = "") -> AuditRecord:
    return AuditRecord.objects.create(
        at=datetime.now(UTC),
        actor=actor.name,
        source=actor.source,
        remote_addr=actor.remote_addr,
        action=change.action[:32],
        object_type=change.object_type[:64],
        object_id=change.object_id,
        object_repr=change.object_repr,
        org=change.org,
        fields=fields,
        detail=detail[:500],
    )


def current() -> Actor:
    """Who the writes happening now are by (see the module docstring for the order)."""
    actor = _actor.get()
    if actor is not None:
        return actor
    scope = recorder.current_scope()
    if scope is not None:
        return Actor(scope.author, scope.source)
    if len(sys.argv) > 1 and sys.argv[0].endswith("manage.py"):
        return Actor(recorder.command_author(), f"command {sys.argv[1]}"[:32])
    return Actor(recorder.SYSTEM, "shell")


def label_of(model: type[Model]) -> str:
    return model._meta.label_lower


def audited(model: type[Model]) -> bool:
    label = label_of(model)
    return label in AUDITED_AUTH or (model._meta.app_label in AUDITED_APPS and label not in EXCLUDED)


def audited_models() -> list[type[Model]]:
    return [m for m in apps.get_models() if audited(m)]


def write(
    action: str,
    *,
    actor: Actor | None = None,
    obj: Model | None = None,
    fields: list[str] | None = None,
    detail: str = "",
    object_type: str = "",
    object_repr: str = "",
) -> AuditRecord:
    """Append one record (in the caller's transaction: a write rolled back leaves no record)."""
    if obj is not None:
        change = _Change.of(action, obj, fields)
    else:
        change = _Change(action, object_type, "", object_repr[:200], "", sorted(fields or []))
    return _append(actor or current(), change, change.fields, detail)


def _org_of(obj: Model) -> str:
    """The org an object belongs to (an org itself, or through its org or agent), else ''."""
    try:
        return _org_name(obj)
    except ObjectDoesNotExist:  # the related row went first (a cascade)
        return ""


def _org_name(obj: Model) -> str:
    label = label_of(type(obj))
    if label == "policies.org":
        return str(getattr(obj, "name", ""))
    for path in ("org", "agent"):
        if not hasattr(obj, f"{path}_id"):
            continue
        related = getattr(obj, path, None)
        if related is None:
            continue
        return str(getattr(related, "name", "")) if path == "org" else str(getattr(related.org, "name", ""))
    return ""


def _values(obj: Model) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def _note(action: str, obj: Model, fields: list[str] | None = None) -> None:
    """A row changed: kept for the enclosing `acting` block's one record, else written now."""
    batch = _batch.get()
    if batch is not None:
        batch.append(_Change.of(action, obj, fields))
    else:
        write(action, obj=obj, fields=fields)


def _bulk() -> bool:
    scope = recorder.current_scope()
    return scope is not None and scope.source in BULK_SOURCES and _actor.get() is None


# --------------------------------------------------------------------------- signal receivers


def before_save(sender: type[Model], instance: Model, raw: bool = False, **kwargs: Any) -> None:
    """Keep the row as stored, so the save can say which fields it changed."""
    if raw or instance.pk is None or not audited(sender) or _bulk():
        return
    stored = sender._default_manager.filter(pk=instance.pk).values(*[f.attname for f in sender._meta.concrete_fields])
    instance._audit_before = stored.first()  # type: ignore[attr-defined]


def after_save(sender: type[Model], instance: Model, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if raw or not audited(sender) or _bulk():
        return
    update_fields = kwargs.get("update_fields")
    if update_fields and set(update_fields) <= LOGIN_FIELDS:
        return
    if created:
        _note("create", instance)
        return
    before = getattr(instance, "_audit_before", None) or {}
    now = _values(instance)
    changed = [name for name, value in now.items() if name in before and before[name] != value]
    if not changed:
        return
    _note(_verb(label_of(sender), changed, now), instance, [n.removesuffix("_id") for n in changed])


def _verb(label: str, changed: list[str], now: dict[str, Any]) -> str:
    """What an update of a credential was: rotate and revoke are told apart from an edit."""
    if label in ("policies.apikey", "policies.managementtoken"):
        if "key_hash" in changed or "token_hash" in changed:  # a new secret (the old may live on a while)
            return "rotate"
        if "revoked" in changed and now.get("revoked"):
            return "revoke"
    return "update"


def after_delete(sender: type[Model], instance: Model, **kwargs: Any) -> None:
    if audited(sender) and not _bulk():
        _note("delete", instance)


def revision_recorded(sender: Any, revision: dict[str, Any], **kwargs: Any) -> None:
    """An import or a rollback: one record for the whole change, with the revision it made."""
    source = str(revision["source"])
    if source not in BULK_SOURCES:
        return
    paths = [str(c.get("path", "")) for c in revision.get("changes") or () if isinstance(c, dict)]
    write(
        "rollback" if source == "rollback" else "import",
        actor=Actor(str(revision["author"]), source, (_actor.get() or Actor("", "")).remote_addr),
        object_type="configuration",
        object_repr=f"v{revision['version']}",
        fields=paths[:200],
        detail=str(revision.get("summary") or ""),
    )


def breaker_action_saved(sender: type[Model], instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    """A breaker reset or force-open: by the operator its BreakerAction names."""
    if raw or not created:
        return
    who = current()
    write(
        f"breaker_{instance.action}",
        actor=Actor(instance.user, who.source, who.remote_addr),
        object_type="breaker",
        object_repr=f"{instance.provider}/{instance.model}",
        detail=str(instance.reason or ""),
    )


def logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    write("login", actor=Actor(user.get_username(), "login", client_address(request)), object_type="auth.user")


def login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    """A failed login: the name tried, never the password."""
    name = str(credentials.get("username", ""))[:150]
    write("login_failed", actor=Actor(name, "login", client_address(request)), object_type="auth.user")


def connect() -> None:
    """Connect the receivers (routing.apps.RoutingConfig.ready)."""
    from django.contrib.auth.signals import user_logged_in, user_login_failed
    from django.db.models.signals import post_delete, post_save, pre_save

    pre_save.connect(before_save, dispatch_uid="switchboard-audit-pre-save")
    post_save.connect(after_save, dispatch_uid="switchboard-audit-post-save")
    post_delete.connect(after_delete, dispatch_uid="switchboard-audit-post-delete")
    recorder.revision_recorded.connect(revision_recorded, dispatch_uid="switchboard-audit-revision")
    post_save.connect(breaker_action_saved, sender=BreakerAction, dispatch_uid="switchboard-audit-breaker")
    user_logged_in.connect(logged_in, dispatch_uid="switchboard-audit-login")
    user_login_failed.connect(login_failed, dispatch_uid="switchboard-audit-login-failed")
