"""Operator controls of circuit breakers: one implementation behind every button.

The dashboard socket, the admin's model actions and `manage.py breaker` all come
here. A control is validated once (`parse`: a known verb, a configured link or BYO
breaker, sane minutes) and performed once (`perform`):

1. applied to this process's breakers at once (`here=False` for the CLI, which serves nothing);
2. broadcast on CONTROL_GROUP, so `control_listener` applies it in every other
   serving process (the message's origin stops it being applied twice here);
3. put in the dashboard feed;
4. stored: the breaker's BreakerOverride row (who, why, until when), which bumps the
   configuration version, so every serving process (also without a shared channel
   layer, and one started later) applies it with its next snapshot (`apply_persisted`);
5. audited: one BreakerAction row saying who did what (steps 4-5 are best effort for a
   serving process, where the control is already applied; the CLI fails without them);
6. logged.

`apply(verb, key, user, ...)` (and `reset` / `force_open`) does both for synchronous
callers (admin, CLI); the consumer parses first, to answer a refused control with its
reason, then awaits `perform`. See docs/operations.md#breaker-controls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import async_to_sync
from channels import layers
from channels.db import database_sync_to_async

from routing.config import live
from routing.config.identifiers import text_problem
from routing.config.overrides import RESET, write_override
from routing.config.reload import shared_timeout_s
from routing.config.snapshot import Snapshot
from routing.core.breaker import BreakerKey
from routing.models import BreakerAction
from routing.ops import scope
from routing.ops.dashboard import state
from routing.runtime.observe import feed
from routing.runtime.process import current

log = logging.getLogger("switchboard.dashboard")

VERBS = ("reset", "force_open")
MAX_FORCE_MINUTES = 7 * 24 * 60
PERMISSION = "routing.control_breaker"  # BreakerAction.Meta.permissions
OPERATORS_GROUP = "Operators"
# What the group holds: breaker controls, and the analytics and request-log pages (docs/operations.md#analytics).
OPERATOR_PERMISSIONS = (PERMISSION, "routing.view_usagerecord")
REFUSED = "you may view the dashboard but not act on breakers: ask for the routing.control_breaker permission"


class ControlError(ValueError):
    """An operator control that cannot be applied (the message says why).

    `page_hint` / `cli_hint`: what to do next, in the words of where the control came from
    (a page whose list may be stale is reloaded; a command names the command that lists
    what exists): `for_page()` and `for_cli()` add them.
    """

    def __init__(self, message: str, page_hint: str = "", cli_hint: str = "") -> None:
        super().__init__(message)
        self.page_hint, self.cli_hint = page_hint, cli_hint

    def for_page(self) -> str:
        return f"{self}; {self.page_hint}" if self.page_hint else str(self)

    def for_cli(self) -> str:
        return f"{self}; {self.cli_hint}" if self.cli_hint else str(self)


@dataclass(frozen=True, slots=True)
class Control:
    """A validated control: what to do to which breaker, why, and until when (epoch s, None: until reset)."""

    action: str
    key: BreakerKey
    reason: str = ""
    until: float | None = None

    def wire(self) -> dict[str, Any]:
        """The channel-layer form other processes apply."""
        return {"action": self.action, "key": self.key.wire(), "reason": self.reason, "until": self.until}

    @classmethod
    def from_wire(cls, message: dict[str, Any]) -> Control:
        """A control broadcast by another process (already validated there against its snapshot)."""
        action = message["action"]
        if action not in VERBS:
            raise ControlError(f"unknown action {action!r}")
        until = message.get("until")
        return cls(action, BreakerKey.from_wire(message["key"]), str(message.get("reason") or ""), until)


def may_control(user: Any) -> bool:
    """Whether `user` may reset or force open breakers: active staff with PERMISSION.

    Viewing the dashboard only needs staff; a control changes what every process
    serves, so it needs the named permission (superusers have every permission).
    Reads the user's permissions (a query the first time): call it off the loop. An org-scoped operator
    never may: a shared breaker serves every org (docs/operations.md#org-scoped-staff).
    """
    return bool(
        user is not None
        and getattr(user, "is_authenticated", False)
        and user.is_active
        and user.is_staff
        and user.has_perm(PERMISSION)
        and not scope.is_scoped(user)
    )


def ensure_operators_group() -> Any:
    """The "Operators" group holding OPERATOR_PERMISSIONS (created, or completed, when needed)."""
    from django.contrib.auth.models import Group, Permission

    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    for permission in OPERATOR_PERMISSIONS:
        app_label, codename = permission.split(".")
        group.permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return group


def parse(content: dict[str, Any], snapshot: Snapshot | None = None) -> Control:
    """Validate a control (as the page sends it) against the snapshot (default: the live one)."""
    action = str(content.get("action") or "").replace("-", "_")
    if action not in VERBS:
        raise ControlError("unknown action: use 'reset' or 'force_open'")
    try:
        key = BreakerKey.from_wire(content.get("key"))
    except ValueError as exc:
        raise ControlError(str(exc)) from None
    snapshot = snapshot if snapshot is not None else live.current()
    model = snapshot.models.get(key.model)
    if model is None or (
        model.provider.name != key.provider and all(d.provider.name != key.provider for d in model.deployments)
    ):  # a one-provider model's link, or one of its deployments (docs/deployments.md)
        raise ControlError(
            f"no configured link {key.provider}/{key.model}",
            page_hint="reload the page",
            cli_hint="manage.py export_config lists the models and the providers that serve them",
        )
    if key.org is not None and key.org not in snapshot.orgs:
        raise ControlError(f"no organisation for breaker key {key.wire()[2]!r}")
    reason = str(content.get("reason") or "").strip()
    problem = text_problem(reason, "the reason")  # docs/security.md#identifiers: refused, never cut silently
    if problem:
        raise ControlError(problem)
    until = None
    if action == "force_open":
        minutes = content.get("minutes")
        if minutes not in (None, ""):
            try:
                minutes = float(minutes)
            except (TypeError, ValueError):
                raise ControlError("minutes must be a number (empty: until reset)") from None
            if not 0 < minutes <= MAX_FORCE_MINUTES:
                raise ControlError(f"minutes must be between 0 and {MAX_FORCE_MINUTES}")
            until = time.time() + minutes * 60
    return Control(action, key, reason, until)


def apply_here(control: Control) -> None:
    """Apply to this process's breakers (on the loop thread, which owns them)."""
    if control.action == "reset":
        current().breakers.reset(control.key)
    else:
        current().breakers.force_open(control.key, control.reason or "forced open from the dashboard", control.until)


async def perform(user: str, control: Control) -> None:
    """Apply here, tell every other process, put it in the feed, record who did it, log it."""
    await _announce(user, control)
    await database_sync_to_async(_record)(user, control)


def perform_sync(user: str, control: Control, here: bool = True) -> None:
    """`perform` from synchronous code: the same steps, the audit row on this thread's connection.

    The breaker part runs through async_to_sync, so on the serving loop when there is
    one (a Django view's thread under ASGI): the breakers are touched on the thread
    that owns them. `here=False` skips step 1 (a management command serves nothing) and
    makes storing the control mandatory: it is then the only way the servers learn of it.
    """
    async_to_sync(_announce)(user, control, here)
    _record(user, control, strict=not here)


async def _announce(user: str, control: Control, here: bool = True) -> None:
    if here:
        apply_here(control)
    feed.emit(
        "control",
        action=control.action,
        link=control.key.link,
        user=user,
        reason=control.reason,
        until=control.until,
    )
    message = {"type": "control.apply", "origin": feed.PROCESS_ID, "control": control.wire()}
    await feed.publish(feed.CONTROL_GROUP, message)


def _record(user: str, control: Control, strict: bool = False) -> None:
    try:
        persist(user, control)
        audit(user, control)
    except Exception:  # noqa: BLE001 - the action is applied here; storing it is best effort
        if strict:
            raise
        log.exception("could not record breaker action by %s", user)
    log.info("breaker %s on %s by %s", control.action, control.key.link, user)


def persist(user: str, control: Control) -> int:
    """Store the control as the breaker's current override (bumps the configuration version)."""

    return write_override(control.key, control.action, user, control.reason, control.until)


# Per process: the revision of each breaker's stored override already applied here.
_applied: dict[BreakerKey, int] = {}


def apply_persisted(overrides: tuple[Any, ...], known: set[BreakerKey] | frozenset[BreakerKey]) -> int:
    """Apply stored overrides this process has not applied yet (on the breakers' thread).

    Called with every snapshot swapped in (boot and each reload): a force-open that has not
    expired holds the breaker open, a reset closes it; a key the configuration no longer
    serves is skipped. Returns how many were applied.
    """

    now = time.time()
    applied = 0
    for override in overrides:
        if _applied.get(override.key) == override.revision:
            continue
        _applied[override.key] = override.revision
        if override.key not in known:
            continue
        if override.action == RESET:
            current().breakers.reset(override.key)
        elif override.until is None or override.until > now:
            current().breakers.force_open(
                override.key, override.reason or f"forced open by {override.user}", override.until
            )
        else:
            continue
        applied += 1
    return applied


def apply(
    verb: str,
    key: BreakerKey | tuple[str, ...] | list[str],
    user: str,
    reason: str = "",
    minutes: float | None = None,
    snapshot: Snapshot | None = None,
    here: bool = True,
) -> Control:
    """Validate and perform a control from synchronous code (admin action, CLI). Raises ControlError."""
    wire_key = key.wire() if isinstance(key, BreakerKey) else list(key)
    control = parse({"action": verb, "key": wire_key, "reason": reason, "minutes": minutes}, snapshot)
    perform_sync(user, control, here)
    return control


def reset(key: BreakerKey | tuple[str, ...], user: str, snapshot: Snapshot | None = None) -> Control:
    """Close a breaker in every process and forget its failures (also ends a forced open)."""
    return apply("reset", key, user, snapshot=snapshot)


def force_open(
    key: BreakerKey | tuple[str, ...],
    user: str,
    reason: str = "",
    minutes: float | None = None,
    snapshot: Snapshot | None = None,
) -> Control:
    """Hold a breaker open in every process (maintenance) for `minutes`, or until reset."""
    return apply("force_open", key, user, reason, minutes, snapshot)


def audit(user: str, control: Control) -> None:
    """One BreakerAction row: who, which link (BYO breakers as "<model>@<org>"), what, why, until."""

    BreakerAction.objects.create(
        user=user[:150],
        provider=control.key.provider,
        model=control.key.label,
        action=control.action,
        reason=control.reason,
        expires_at=datetime.fromtimestamp(control.until, tz=UTC) if control.until else None,
    )


async def control_listener() -> None:
    """Apply controls sent from any other process; answer a new page's "hello" with this state."""
    feed.install(current().breakers)
    layer = layers.get_channel_layer()
    if layer is None:
        return
    channel = await layer.new_channel()
    while True:
        # re-joined: group membership expires; bounded so a hung Redis restarts the task instead
        await asyncio.wait_for(layer.group_add(feed.CONTROL_GROUP, channel), shared_timeout_s())
        try:
            message = await asyncio.wait_for(layer.receive(channel), timeout=600)
        except TimeoutError:
            continue
        kind = message.get("type")
        if kind == "control.apply" and message.get("origin") != feed.PROCESS_ID:
            try:
                apply_here(Control.from_wire(message["control"]))
            except Exception:  # noqa: BLE001 - a bad message must not stop the listener
                log.exception("could not apply breaker control %r", message)
        elif kind == "control.hello" and feed.has_audience():
            await feed.publish(feed.DASHBOARD_GROUP, state.state_message())
