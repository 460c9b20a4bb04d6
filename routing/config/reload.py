"""Configuration-change signals: bump the version, then broadcast after commit.

Any save or delete of a configuration model (admin, import_config, shell) bumps
ConfigVersion in the same transaction and, once committed, publishes
`config.changed` on the channel layer group. Every serving process listens
(routing.ops.background) and rebuilds; a periodic version check catches writes whose
broadcast it could not receive (another process with the in-memory layer).
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import F
from django.db.models.signals import post_delete, post_save

log = logging.getLogger("switchboard.config")

CONFIG_GROUP = "switchboard.config"


def _config_models() -> tuple[type, ...]:
    from policies.models import Agent, ApiKey, Org, OrgCredential, OrgPolicy
    from providers.models import Alias, FallbackLink, Model, Provider
    from routing.models import ResilienceSettings

    return (Provider, Model, FallbackLink, Alias, Org, Agent, ApiKey, OrgPolicy, OrgCredential, ResilienceSettings)


def bump_version() -> None:
    from routing.models import ConfigVersion

    if not ConfigVersion.objects.filter(pk=1).update(version=F("version") + 1):
        ConfigVersion.objects.get_or_create(pk=1, defaults={"version": 1})


def broadcast() -> None:
    """Publish config.changed to every serving process; failures only delay the reload."""
    try:
        from asgiref.sync import async_to_sync
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(CONFIG_GROUP, {"type": "config.changed"})
    except Exception as exc:  # noqa: BLE001 - Redis down must not fail the admin save
        log.warning("config change broadcast failed (%s); processes will pick it up by polling", exc)


def _on_change(sender: type, **kwargs: object) -> None:
    if kwargs.get("raw") or sender not in _config_models():
        return
    mark_changed()


def mark_changed() -> None:
    """Bump the version now and broadcast once the transaction commits.

    Saves and deletes call it through the signals; bulk writes (a large import), which
    send no signals, call it themselves once.
    """
    bump_version()
    conn = transaction.get_connection()
    # One broadcast per transaction, however many rows it saved (an import saves many).
    if not any(entry[1] is broadcast for entry in conn.run_on_commit):
        transaction.on_commit(broadcast)


post_save.connect(_on_change, dispatch_uid="switchboard-config-save")
post_delete.connect(_on_change, dispatch_uid="switchboard-config-delete")
