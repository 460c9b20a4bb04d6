"""Recording configuration history: one revision per committed change (docs/config-history.md#recording).

Every committed change of the configuration document records a ConfigRevision in
the same transaction. The hook is the version bump (`reload.mark_changed`), which
every configuration write already goes through (signals for row saves, one call for
bulk writes):

- inside a `change()` scope (an import, an admin POST, a rollback) the bump only
  marks the scope, and the scope records one revision for the whole transaction as
  it closes, attributed to its author and source;
- outside any scope (a save in `manage.py shell`), the bump records at once; further
  saves in the same transaction update that same revision.

A revision holds the whole document as `export_config` prints it (secrets only by
reference), its SHA-256 and the changes from the previous revision; a write that
leaves the document as it was (an API key, a stored key replaced by another, a
breaker control) records nothing. Breaker controls are operations, not
configuration: audited in BreakerAction, never recorded or rolled back here.

The operator verbs over the recorded revisions (list, diff, rollback) are
routing.config.history's.
"""

from __future__ import annotations

import contextvars
import getpass
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from django.dispatch import Signal

from routing.config.diff import diff_documents, summarise
from routing.config.document import document_from_db
from routing.models import ConfigRevision, ConfigVersion

DEFAULT_KEEP = 100
SYSTEM = "system"
# Sent in the transaction of each revision recorded (not the baseline), with `revision` (its fields):
# the audit log records an import or a rollback as one write (routing.config.audit).
revision_recorded = Signal()


@dataclass
class _Scope:
    author: str
    source: str
    note: str = ""
    dirty: bool = False
    baseline: dict[str, Any] | None = None  # the document before the first ever recorded change
    recorded: int | None = None  # the version recorded when the scope closed


_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("switchboard_config_scope", default=None)


def current_scope() -> _Scope | None:
    """The `change()` scope the current code runs in (its author and source), or None."""
    return _scope.get()


def keep() -> int:
    """How many revisions are kept (SWITCHBOARD_CONFIG_HISTORY_KEEP); 0 turns recording off."""
    from django.conf import settings

    return max(0, int(getattr(settings, "SWITCHBOARD_CONFIG_HISTORY_KEEP", DEFAULT_KEEP)))


def command_author() -> str:
    """Who runs a management command: the OS login name (a container without one: 'command')."""
    try:
        return getpass.getuser() or "command"
    except (KeyError, OSError):
        return "command"


def _is_empty(doc: dict[str, Any]) -> bool:
    return not diff_documents(None, doc)


@contextmanager
def change(
    author: str | None = None, source: str | None = None, note: str | None = None, *, fallback_source: str = "shell"
) -> Iterator[_Scope]:
    """A transaction whose configuration writes record one revision when it closes.

    A nested scope records its own revision as it closes (a rollback started from
    an admin page is one revision, by the rollback); what it leaves unsaid (author,
    source) it inherits. A scope that raises, or whose transaction is marked for
    rollback (a dry run), records nothing. `fallback_source` names the source when
    neither this scope nor an outer one says (an import called from code: "import").
    """
    from django.db import transaction

    outer = _scope.get()
    with transaction.atomic():
        scope = _Scope(
            author or (outer.author if outer else SYSTEM),
            source or (outer.source if outer else fallback_source),
            note if note is not None else (outer.note if outer else ""),
        )
        if outer is not None:
            scope.baseline = outer.baseline
        elif keep():
            if not ConfigRevision.objects.exists():
                before = document_from_db()
                scope.baseline = None if _is_empty(before) else before
        token = _scope.set(scope)
        try:
            yield scope
            if scope.dirty and not transaction.get_rollback() and keep():
                scope.recorded = _record(scope.author, scope.source, scope.note, baseline=scope.baseline)
                if outer is not None and scope.recorded is not None:
                    outer.baseline, outer.recorded = None, scope.recorded
        finally:
            _scope.reset(token)


class _Pending:
    """An on-commit marker carrying the revision written by this transaction outside any scope."""

    def __init__(self, pk: int) -> None:
        self.pk = pk

    def __call__(self) -> None:  # nothing to do at commit: the revision is already in it
        return None


def note_change() -> None:
    """Called by every configuration version bump (routing.config.reload.mark_changed)."""
    scope = _scope.get()
    if scope is not None:
        scope.dirty = True
        return
    if not keep():
        return
    from django.db import transaction

    conn = transaction.get_connection()
    if not conn.in_atomic_block:
        with transaction.atomic():
            _record(SYSTEM, "shell", "")
        return
    pending = next((entry[1] for entry in conn.run_on_commit if isinstance(entry[1], _Pending)), None)
    if pending is not None:
        _rewrite(pending.pk)
        return
    version = _record(SYSTEM, "shell", "")
    if version is not None:
        transaction.on_commit(_Pending(ConfigRevision.objects.values_list("pk", flat=True).get(version=version)))


# --------------------------------------------------------------------------- recording


def _dump(doc: dict[str, Any]) -> tuple[str, str]:
    text = orjson.dumps(doc).decode()
    return text, hashlib.sha256(text.encode()).hexdigest()


def _config_version() -> int:
    return ConfigVersion.objects.filter(pk=1).values_list("version", flat=True).first() or 0


def _summary(changes: list[dict[str, Any]], note: str) -> str:
    text = summarise(changes)
    return (f"{note}: {text}" if note else text)[:500]


def _record(author: str, source: str, note: str, baseline: dict[str, Any] | None = None) -> int | None:
    """Write the revision of the current document (in the caller's transaction); its version, or None if unchanged.

    The configuration writer has bumped ConfigVersion already, which on PostgreSQL
    locks that row until commit: concurrent recorders are serialised, so the next
    version number and the predecessor read here are the committed latest.
    """
    from django.utils import timezone

    doc = document_from_db()
    text, digest = _dump(doc)
    last = ConfigRevision.objects.order_by("-version").values("version", "digest", "document").first()
    if last is not None and last["digest"] == digest:
        return None
    if last is None and baseline is not None:
        base_text, base_digest = _dump(baseline)
        if base_digest == digest:
            return None
        changes = diff_documents(None, baseline)
        _insert(
            version=1,
            created_at=timezone.now(),
            author=SYSTEM,
            source="baseline",
            summary="the configuration before the first recorded change",
            changes=changes,
            document=base_text,
            digest=base_digest,
            config_version=0,
        )
        last = {"version": 1, "digest": base_digest, "document": base_text}
    previous = orjson.loads(last["document"]) if last is not None else None
    changes = diff_documents(previous, doc)
    version = (last["version"] if last is not None else 0) + 1
    revision = {
        "version": version,
        "created_at": timezone.now(),
        "author": author[:150],
        "source": source[:32],
        "summary": _summary(changes, note),
        "changes": changes,
    }
    _insert(**revision, document=text, digest=digest, config_version=_config_version())
    revision_recorded.send(sender=ConfigRevision, revision=revision)
    prune(keep())
    return version


def _insert(**values: Any) -> None:
    """Insert a revision without model signals (history is not configuration; nothing listens for it)."""

    ConfigRevision.objects.bulk_create([ConfigRevision(**values)])


def _rewrite(pk: int) -> None:
    """Bring a revision written earlier in this transaction up to the current document."""

    revision = ConfigRevision.objects.only("version").get(pk=pk)
    doc = document_from_db()
    text, digest = _dump(doc)
    previous = (
        ConfigRevision.objects.filter(version__lt=revision.version).order_by("-version").values("document").first()
    )
    changes = diff_documents(orjson.loads(previous["document"]) if previous else None, doc)
    ConfigRevision.objects.filter(pk=pk).update(
        document=text,
        digest=digest,
        changes=changes,
        summary=_summary(changes, ""),
        config_version=_config_version(),
    )


def prune(kept: int) -> int:
    """Delete all but the newest `kept` revisions; returns how many went."""

    newest = ConfigRevision.objects.order_by("-version").values_list("version", flat=True).first()
    if newest is None or kept <= 0:
        return 0
    doomed = ConfigRevision.objects.filter(version__lte=newest - kept)
    return doomed._raw_delete(doomed.db)  # no signals: nothing refers to a revision
