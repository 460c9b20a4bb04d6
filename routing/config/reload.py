"""Configuration-change signals: bump the version, then broadcast after commit.

Any save or delete of a configuration model (admin, import_config, shell) bumps
ConfigVersion in the same transaction and, once committed, publishes
`config.changed` on the channel layer group. Every serving process listens
(routing.runtime.background) and rebuilds; a periodic version check catches writes whose
broadcast it could not receive (another process with the in-memory layer).
"""

from __future__ import annotations

import asyncio
import logging
import threading

from django.db import transaction
from django.db.models import F
from django.db.models.signals import post_delete, post_save

from policies.models import Agent, ApiKey, Org, OrgCredential, OrgPolicy
from providers.models import Alias, FallbackLink, Model, Provider
from routing.config import recorder
from routing.models import AlertRule, ConfigVersion, ResilienceSettings

log = logging.getLogger("switchboard.config")

CONFIG_GROUP = "switchboard.config"


def _config_models() -> tuple[type, ...]:
    return (
        Provider,
        Model,
        FallbackLink,
        Alias,
        Org,
        Agent,
        ApiKey,
        OrgPolicy,
        OrgCredential,
        ResilienceSettings,
        AlertRule,
    )


def bump_version() -> None:
    if not ConfigVersion.objects.filter(pk=1).update(version=F("version") + 1):
        ConfigVersion.objects.get_or_create(pk=1, defaults={"version": 1})


def shared_timeout_s() -> float:
    """Bound of one call to a shared component (Redis) off the request path; a save waits at most this."""
    from django.conf import settings

    return float(getattr(settings, "SWITCHBOARD_SHARED_TIMEOUT_S", 1.0))


# Set while publishing fails: a failing broadcast is said once per outage, not once per save (admin, commands).
_BROADCAST_FAILING = threading.Event()


def broadcast() -> None:
    """Publish config.changed to every serving process; failures only delay the reload.

    The publish runs on a daemon thread that the save waits for at most
    `shared_timeout_s()`: a hung Redis (stopped, blackholed) must not hold an admin
    save or an import. Processes that miss it pick the change up by polling.
    """
    outcome: list[BaseException | None] = []
    thread = threading.Thread(target=_publish, args=(outcome,), name="switchboard-config-broadcast", daemon=True)
    thread.start()
    thread.join(shared_timeout_s())
    problem = f"no answer within {shared_timeout_s():g}s" if not outcome else outcome[0]
    if problem is None:
        if _BROADCAST_FAILING.is_set():
            log.info("config change broadcast works again")
        _BROADCAST_FAILING.clear()
        return
    if not _BROADCAST_FAILING.is_set():
        log.warning("config change broadcast failed (%s); processes will pick it up by polling", problem)
    _BROADCAST_FAILING.set()


def _publish(outcome: list[BaseException | None]) -> None:
    # A loop of this thread's own (not async_to_sync: its executor thread is joined at
    # interpreter exit, so a hung send would hold the command's exit instead).
    try:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is not None:
            send = layer.group_send(CONFIG_GROUP, {"type": "config.changed"})
            asyncio.run(asyncio.wait_for(send, shared_timeout_s()))
        outcome.append(None)
    except Exception as exc:  # noqa: BLE001 - Redis down must not fail the admin save
        outcome.append(exc)


def _on_change(sender: type, **kwargs: object) -> None:
    if kwargs.get("raw") or sender not in _config_models():
        return
    # API keys are not in the configuration document: they reload, but leave no history.
    mark_changed(record=sender.__name__ != "ApiKey")


def mark_changed(record: bool = True) -> None:
    """Bump the version now and broadcast once the transaction commits.

    Saves and deletes call it through the signals; bulk writes (a large import), which
    send no signals, call it themselves once. With `record`, the change goes into the
    configuration history in the same transaction (routing.config.recorder); breaker
    controls and API keys, which are not configuration, pass False.
    """
    bump_version()
    if record:
        recorder.note_change()
    conn = transaction.get_connection()
    # One broadcast per transaction, however many rows it saved (an import saves many).
    if not any(entry[1] is broadcast for entry in conn.run_on_commit):
        transaction.on_commit(broadcast)


post_save.connect(_on_change, dispatch_uid="switchboard-config-save")
post_delete.connect(_on_change, dispatch_uid="switchboard-config-delete")
