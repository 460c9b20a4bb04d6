"""The live snapshot reference: built at boot, rebuilt on configuration change, swapped whole.

The request path calls `current()` once per request and never touches the database.
Rebuilds run off the event loop (in a thread) and only swap in a snapshot whose
document validates; a rejected configuration keeps the last good one serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
from collections.abc import Callable

from routing.config import lastgood
from routing.config.db_errors import describe
from routing.config.document import document_from_db, gc_paused, key_rows_from_db
from routing.config.overrides import read_overrides
from routing.config.secrets import stored_keys_from_db
from routing.config.snapshot import EMPTY, Snapshot, build_snapshot
from routing.config.validation import validate_document
from routing.models import ConfigRevision, ConfigVersion

log = logging.getLogger("switchboard.config")

_current: Snapshot = EMPTY
_rebuild_lock = threading.Lock()
last_error: str | None = None  # why the last rebuild was rejected (shown in the admin)
rejected_version: int | None = None  # the version that failed validation (not retried until it changes)
# Installed by the composition root (gateway_project.process): called with every snapshot swapped in,
# and with True/False after every rebuild. The configuration floor calls up through these only.
swap_listeners: list[Callable[[Snapshot], None]] = []
reload_listeners: list[Callable[[bool], None]] = []
# Degraded components (e.g. "database": serving the last good file) and who wants to know:
# routing.ops registers a listener that sets the switchboard_degraded gauge (config never imports ops).
degraded: dict[str, bool] = {}
degraded_listeners: list[Callable[[str, bool], None]] = []
# Who found each component unreachable: several subsystems share one Redis (breaker sync,
# limits, cache, heartbeats), and the component is degraded while ANY of them says so.
_degraded_by: dict[str, set[str]] = {}


def set_degraded(component: str, flag: bool, source: str = "") -> None:
    """Record what `source` sees of a component and tell every listener when the component's state changes
    (a failing listener is logged, never raised). See docs/metrics.md (switchboard_degraded)."""
    sources = _degraded_by.setdefault(component, set())
    if flag:
        sources.add(source)
    else:
        sources.discard(source)
    state = bool(sources)
    if degraded.get(component) == state and component in degraded:
        return
    degraded[component] = state
    for listener in list(degraded_listeners):
        try:
            listener(component, flag)
        except Exception:  # noqa: BLE001
            log.exception("degraded-state listener failed")


def current() -> Snapshot:
    return _current


def swap(snapshot: Snapshot) -> None:
    """Install a snapshot (tests use this directly) and keep breaker state of links that remain."""
    global _current
    _current = snapshot
    for listener in swap_listeners:
        listener(snapshot)


def read_version() -> int:
    row = ConfigVersion.objects.filter(pk=1).values_list("version", flat=True).first()
    return int(row or 0)


def read_config_version() -> int:
    """The newest recorded configuration version (docs/config-history.md#numbers), 0 when none is."""

    return int(ConfigRevision.objects.order_by("-version").values_list("version", flat=True).first() or 0)


def read_config_time() -> int:
    """When the configuration served was recorded, in Unix seconds (the `created` of /v1/models): the
    newest recorded version's time, else the reload counter's last change, 0 when neither exists."""
    when = ConfigRevision.objects.order_by("-version").values_list("created_at", flat=True).first()
    if when is None:
        when = ConfigVersion.objects.filter(pk=1).values_list("updated_at", flat=True).first()
    return int(when.timestamp()) if when is not None else 0


def load_from_db() -> tuple[Snapshot | None, list, int]:
    """Read and validate the configuration; return (snapshot, [], version) or (None, errors, version)."""

    with gc_paused():  # see gc_paused: a large rebuild is otherwise a third collector
        version = read_version()
        config_version = read_config_version()
        document = document_from_db()
        errors = validate_document(document)
        if errors:
            return None, errors, version
        key_rows, stored = key_rows_from_db(), stored_keys_from_db()
        snapshot = build_snapshot(
            document, key_rows, os.environ, version=version, stored_keys=stored, config_version=config_version
        )
        snapshot = dataclasses.replace(snapshot, overrides=read_overrides(), config_time=read_config_time())
    lastgood.save(document, key_rows, version, stored, config_version)
    return snapshot, [], version


def rebuild_from_db(reason: str = "") -> bool:
    """Rebuild synchronously (call from a thread); True when a new snapshot was swapped in."""
    global last_error, rejected_version
    with _rebuild_lock:
        snapshot, errors, version = load_from_db()
        _count_reload(snapshot is not None)
        if snapshot is None:
            rejected_version = version
            last_error = "; ".join(f"{e.path}: {e.message}" for e in errors)
            log.error("configuration rejected, still serving version %s: %s", _current.config_version, last_error)
            return False
        last_error = rejected_version = None
        swap(snapshot)
        if degraded.get("database"):
            log.warning("database reachable again: serving its configuration version %s", snapshot.config_version)
            set_degraded("database", False)
        log.info("configuration version %s loaded%s", snapshot.config_version, f" ({reason})" if reason else "")
        return True


async def rebuild(reason: str = "") -> bool:
    """Rebuild off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, _rebuild_in_thread, reason)


def _rebuild_in_thread(reason: str) -> bool:
    from django.db import close_old_connections

    close_old_connections()
    try:
        return rebuild_from_db(reason)
    finally:
        close_old_connections()


def _count_reload(ok: bool) -> None:
    for listener in reload_listeners:
        listener(ok)


def boot() -> Snapshot:
    """Build the first snapshot; raise ImproperlyConfigured when the configuration is invalid.

    Runs in a helper thread so it also works when the ASGI server imports the
    application from inside a running event loop (uvicorn does).
    """
    from django.core.exceptions import ImproperlyConfigured
    from django.db import DatabaseError

    result: dict = {}

    def work() -> None:
        from django.db import close_old_connections

        try:
            result["value"] = load_from_db()
        except DatabaseError as exc:
            result["db_error"] = exc
        finally:
            close_old_connections()

    thread = threading.Thread(target=work, name="switchboard-boot")
    thread.start()
    thread.join()
    if "db_error" in result:
        return _boot_from_last_good(result["db_error"])
    snapshot, errors, _ = result["value"]
    if snapshot is None:
        lines = "\n".join(f"  {e.path}: {e.message}" for e in errors)
        raise ImproperlyConfigured(f"The routing configuration is invalid; fix it before starting:\n{lines}")
    swap(snapshot)
    return snapshot


class InvalidConfiguration(ValueError):
    """The configuration in the database does not validate; `errors` lists every problem."""

    def __init__(self, errors: list) -> None:
        self.errors = errors
        listing = "; ".join(f"{e.path}: {e.message}" for e in errors)
        super().__init__(f"the configuration does not validate, fix it first: {listing}")


def load_snapshot() -> Snapshot:
    """The configuration in the database as a validated snapshot, for tools outside the serving
    path (management commands): the same read and checks as a rebuild, never swapped in.

    Raises InvalidConfiguration (its message lists every problem; a command re-raises it
    as a CommandError) rather than building a snapshot from an unvalidated document.
    """
    snapshot, errors, _ = load_from_db()
    if snapshot is None:
        raise InvalidConfiguration(errors)
    return snapshot


def _boot_from_last_good(db_error: Exception) -> Snapshot:
    """The database is unreachable at boot: serve the last good file, or refuse to start saying why."""
    from django.core.exceptions import ImproperlyConfigured

    saved = lastgood.load()
    if saved is None:
        raise ImproperlyConfigured(
            f"{describe(db_error)} There is no last good configuration at {lastgood.path()} to serve instead "
            "either (it is written by every successful start)."
        ) from db_error
    document, key_rows, version, stored, config_version = saved
    errors = validate_document(document)
    if errors:
        lines = "\n".join(f"  {e.path}: {e.message}" for e in errors)
        raise ImproperlyConfigured(
            f"Cannot read the configuration from the database ({db_error}) and the last good configuration "
            f"at {lastgood.path()} no longer validates:\n{lines}"
        )
    snapshot = build_snapshot(
        document, key_rows, os.environ, version=version, stored_keys=stored, config_version=config_version
    )
    # No database to ask when the version was recorded: the file was written when it was last served.
    snapshot = dataclasses.replace(snapshot, config_time=int(lastgood.path().stat().st_mtime))
    swap(snapshot)
    log.warning(
        "database unreachable at boot (%s): serving the last good configuration version %s from %s until it answers",
        db_error,
        config_version,
        lastgood.path(),
    )
    set_degraded("database", True)
    return snapshot
