"""Operators' breaker controls as stored in the database (BreakerOverride rows).

Read with every snapshot (`live.load_from_db`), so a force-open or reset written by any
process — `manage.py breaker` without Redis included — reaches every serving process
through the configuration-version path, and a process that starts later still honours
a force-open. Applying them to breakers is the operations floor's job
(routing.ops.controls.apply_persisted). See docs/scale-out.md#controls.
"""

from __future__ import annotations

from dataclasses import dataclass

from routing.config import reload
from routing.core.breaker import BreakerKey
from routing.models import BreakerOverride, ConfigVersion

FORCE_OPEN = "force_open"
RESET = "reset"


@dataclass(frozen=True, slots=True)
class Override:
    """The last control written for one breaker; `revision` tells a process whether it applied it."""

    key: BreakerKey
    action: str
    user: str
    reason: str
    until: float | None  # epoch seconds; None: until reset
    revision: int


def read_overrides() -> tuple[Override, ...]:
    """Every stored control (one per breaker key), oldest revision first."""

    rows = BreakerOverride.objects.order_by("revision").values_list(
        "provider", "model", "org", "action", "user", "reason", "until", "revision"
    )
    return tuple(
        Override(
            BreakerKey(provider, model, org or None),
            action,
            user,
            reason,
            until.timestamp() if until is not None else None,
            revision,
        )
        for provider, model, org, action, user, reason, until, revision in rows
    )


def write_override(key: BreakerKey, action: str, user: str, reason: str, until: float | None) -> int:
    """Store the control for `key` and bump the configuration version (one transaction);
    returns the revision. Every serving process applies it on its next reload."""
    from datetime import UTC, datetime

    from django.db import transaction

    with transaction.atomic():
        reload.mark_changed(record=False)  # operations, not configuration: no history (docs/config-history.md#what)
        revision = ConfigVersion.objects.values_list("version", flat=True).get(pk=1)
        BreakerOverride.objects.update_or_create(
            provider=key.provider,
            model=key.model,
            org=key.org or "",
            defaults={
                "action": action,
                "user": user[:150],
                "reason": reason[:500],
                "until": datetime.fromtimestamp(until, tz=UTC) if until is not None else None,
                "revision": revision,
            },
        )
    return revision
