"""Configuration history and rollback: one function per operator verb (docs/config-history.md).

The revisions are recorded by routing.config.recorder as the configuration changes;
here they are listed, compared and restored. `config_history`, `config_rollback`
and the admin's history pages are thin shells over these functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from policies.models import ApiKey
from routing.config.diff import diff_documents, render
from routing.config.document import document_from_db
from routing.config.recorder import change, keep
from routing.config.store import ConfigInvalid, import_document
from routing.models import ConfigRevision


class HistoryError(Exception):
    """A history request that cannot be answered or a rollback that was refused (nothing changed)."""


class KeysWouldBeRemoved(HistoryError):
    """A rollback that would delete agents whose API keys are live, asked without `force`.

    Clients using those keys would start getting 401s: the operator confirms it (the
    admin's confirmation box, `config_rollback --force`); nothing was changed."""

    def __init__(self, version: int, agents: list[str], keys: int) -> None:
        self.version, self.agents, self.keys = version, agents, keys
        super().__init__(
            f"rolling back to version {version} removes agent(s) {', '.join(agents)} and their {keys} active "
            "API key(s), which then stop working; nothing was changed"
        )


@dataclass(frozen=True)
class Revision:
    """One recorded version as the commands and the admin show it."""

    version: int
    created_at: datetime
    author: str
    source: str
    summary: str
    changes: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "created_at": self.created_at.isoformat(),
            "author": self.author,
            "source": self.source,
            "summary": self.summary,
            "diff": self.changes,
        }

    def diff_lines(self) -> list[str]:
        return render(self.changes)


def _revision(row: Any) -> Revision:
    return Revision(row.version, row.created_at, row.author, row.source, row.summary, list(row.changes or []))


def list_revisions(limit: int | None = None) -> list[Revision]:
    """The recorded versions, newest first (at most `limit`)."""

    rows = ConfigRevision.objects.defer("document").order_by("-version")
    if limit is not None:
        if limit < 1:
            raise HistoryError(f"--limit must be a positive number of versions, not {limit}")
        rows = rows[:limit]
    return [_revision(row) for row in rows]


def _missing(version: int) -> HistoryError:
    oldest = ConfigRevision.objects.order_by("version").values_list("version", flat=True).first()
    newest = ConfigRevision.objects.order_by("-version").values_list("version", flat=True).first()
    if oldest is None:
        return HistoryError(f"no configuration version {version}: nothing has been recorded yet")
    return HistoryError(
        f"no configuration version {version}: the recorded versions are {oldest}..{newest} "
        f"(older ones are pruned beyond SWITCHBOARD_CONFIG_HISTORY_KEEP={keep()}); `config_history` lists them"
    )


def get_revision(version: int) -> Revision:
    row = ConfigRevision.objects.defer("document").filter(version=version).first()
    if row is None:
        raise _missing(version)
    return _revision(row)


def revision_document(version: int) -> dict[str, Any]:
    """The configuration document recorded as `version` (what `export_config` printed then)."""

    text = ConfigRevision.objects.filter(version=version).values_list("document", flat=True).first()
    if text is None:
        raise _missing(version)
    return orjson.loads(text)


def diff_versions(old: int, new: int) -> list[dict[str, Any]]:
    """The changes from version `old` to version `new`."""
    return diff_documents(revision_document(old), revision_document(new))


# --------------------------------------------------------------------------- rollback


@dataclass
class RollbackResult:
    """What a rollback did (or, in a dry run, would do)."""

    target: int
    changes: list[dict[str, Any]]
    warnings: list[str]
    dry_run: bool
    version: int | None = None  # the revision the rollback recorded (None: dry run or nothing to do)
    removed_keys: int = 0  # active API keys of the agents it removes: needs the operator's confirmation

    def diff_lines(self) -> list[str]:
        return render(self.changes)


def _stored_key_problems(target: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Stored (encrypted) keys are never in a revision: a target that needs one the database no longer holds fails."""
    problems = []
    have = {p["name"] for p in current.get("providers", []) if p.get("api_key")}
    for p in target.get("providers", []):
        if p.get("api_key") and p.get("name") not in have:
            problems.append(
                f"providers[{p.get('name')}].api_key: this version used a stored key that the database no longer "
                "holds (keys are never kept in the history); store it again in the admin, then roll back"
            )
    creds = {
        (o.get("name"), c.get("provider")) for o in current.get("orgs", []) for c in o.get("credentials", [])
        if c.get("api_key")
    }  # fmt: skip
    for o in target.get("orgs", []):
        for c in o.get("credentials", []):
            if c.get("api_key") and (o.get("name"), c.get("provider")) not in creds:
                problems.append(
                    f"orgs[{o.get('name')}].credentials[{c.get('provider')}].api_key: this version used a stored "
                    "key that the database no longer holds; store it again in the admin, then roll back"
                )
    return problems


def _removed_agents(target: dict[str, Any], current: dict[str, Any]) -> tuple[list[str], int]:
    """The agents ("org/agent") that restoring `target` deletes, and their active API keys."""

    kept = {o.get("name"): {a.get("name") for a in o.get("agents", [])} for o in target.get("orgs", [])}
    doomed = [
        (o.get("name"), a.get("name"))
        for o in current.get("orgs", [])
        for a in o.get("agents", [])
        if a.get("name") not in kept.get(o.get("name"), set())
    ]
    keys = sum(
        ApiKey.objects.filter(agent__org__name=org, agent__name=agent, revoked=False).count() for org, agent in doomed
    )
    return [f"{org}/{agent}" for org, agent in doomed], keys


def _warnings(target: dict[str, Any], current: dict[str, Any]) -> list[str]:
    out = []
    agents, keys = _removed_agents(target, current)
    if agents:
        out.append(f"removes agent(s) {', '.join(agents)} and their {keys} active API key(s)")
    stored = [p.get("name") for p in current.get("providers", []) if p.get("api_key")]
    listed = {p.get("name") for p in target.get("providers", []) if p.get("api_key")}
    for name in stored:
        if name not in listed and name in {p.get("name") for p in target.get("providers", [])}:
            out.append(f"providers[{name}] keeps its stored key (a rollback never removes one: clear it in the admin)")
    return out


def rollback(
    version: int, *, author: str, source: str = "rollback", dry_run: bool = False, force: bool = False
) -> RollbackResult:
    """Make the configuration what it was at `version`, through the import's validation, as a new version.

    The whole document is applied (as `import_config --prune`): objects created since
    are deleted, including agents and their API keys (listed in the warnings). Deleting
    agents with active keys needs `force` (the operator's confirmation), else
    KeysWouldBeRemoved and nothing changes; a dry run reports them in `removed_keys`. A
    version that no longer validates (a fallback to a model removed from the code, an
    environment variable no longer allowed, a stored key no longer held) is refused
    with every error and changes nothing.
    """

    target = revision_document(version)
    current = document_from_db()
    problems = _stored_key_problems(target, current)
    if problems:
        raise HistoryError(
            f"version {version} cannot be restored; nothing was changed:\n" + "\n".join(f"  {p}" for p in problems)
        )
    changes = diff_documents(current, target)
    warnings = _warnings(target, current)
    agents, keys = _removed_agents(target, current)
    if keys and not (force or dry_run):
        raise KeysWouldBeRemoved(version, agents, keys)
    result = RollbackResult(version, changes, warnings, dry_run, removed_keys=keys)
    try:
        with change(author=author, source=source, note=f"rollback to v{version}") as scope:
            import_document(target, prune=True, dry_run=dry_run)
    except ConfigInvalid as exc:
        lines = "\n".join(f"  {error}" for error in exc.errors)
        raise HistoryError(
            f"version {version} no longer validates ({len(exc.errors)} error(s)); nothing was changed:\n{lines}"
        ) from exc
    result.version = None if dry_run else scope.recorded
    return result
