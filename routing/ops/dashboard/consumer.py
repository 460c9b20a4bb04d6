"""The dashboard's websocket: staff only, same origin; state and events out, controls in."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.urls import path

from routing.ops import controls
from routing.ops import scope as org_scope
from routing.ops.dashboard.state import build_state, scoped_state
from routing.runtime.observe import feed
from routing.runtime.process import current


def _is_staff(user: Any) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and user.is_active and user.is_staff)


def _same_origin(scope: dict[str, Any]) -> bool:
    """Browsers always send Origin; refuse cross-site sockets riding a staff session cookie."""
    headers = dict(scope.get("headers") or [])
    origin = headers.get(b"origin")
    if not origin:
        return True
    origin_s = origin.decode("latin-1")
    if origin_s in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        return True
    host = headers.get(b"host", b"").decode("latin-1")
    return bool(host) and urlsplit(origin_s).netloc == host


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """Staff-only socket: full state on connect, then events and state refreshes; controls in."""

    _orgs: frozenset[str] | None = frozenset()  # the user's orgs (scope.visible_orgs), set on connect

    async def connect(self) -> None:
        if not _same_origin(self.scope):
            await self.close(code=4403)
            return
        if not _is_staff(self.scope.get("user")):
            # Accept first: a close before accept becomes an HTTP 403 and the page would only
            # see 1006; 4403 lets it say "sign in as staff" instead of retrying forever.
            await self.accept()
            await self.close(code=4403)
            return
        # An org-scoped operator's socket carries its orgs' breakers and events only (asked once, here).
        self._orgs = await database_sync_to_async(org_scope.visible_orgs)(self.scope.get("user"))
        feed.install(current().breakers)
        await self.accept()
        current().feed.viewers += 1
        self._counted = True
        if self.channel_layer is not None:
            await self.channel_layer.group_add(feed.DASHBOARD_GROUP, self.channel_name)
        await self.send_json(scoped_state(build_state(), self._orgs))
        if self.channel_layer is not None and feed.shared_layer():
            await feed.publish(feed.CONTROL_GROUP, {"type": "control.hello"})

    async def disconnect(self, code: int) -> None:
        if getattr(self, "_counted", False):
            current().feed.viewers -= 1
            self._counted = False
        if self.channel_layer is not None:
            await self.channel_layer.group_discard(feed.DASHBOARD_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        user = self.scope.get("user")
        if not _is_staff(user):
            await self.close(code=4403)
            return
        if not isinstance(content, dict):
            await self.send_json({"type": "ack", "ok": False, "message": "send a JSON object"})
            return
        if content.get("action") == "state":
            await self.send_json(scoped_state(build_state(), self._orgs))
            return
        if not await database_sync_to_async(controls.may_control)(user):
            await self.send_json(
                {"type": "ack", "ok": False, "action": content.get("action"), "message": controls.REFUSED}
            )
            return
        try:
            control = controls.parse(content)
        except controls.ControlError as exc:
            message = exc.for_page()
            await self.send_json({"type": "ack", "ok": False, "action": content.get("action"), "message": message})
            return
        await controls.perform(user.get_username(), control)
        link = control.key.link
        await self.send_json(
            {
                "type": "ack",
                "ok": True,
                "action": control.action,
                "link": link,
                "message": f"{control.action.replace('_', ' ')} applied to {link}",
            }
        )
        await self.send_json(scoped_state(build_state(), self._orgs))

    async def dashboard_events(self, message: dict[str, Any]) -> None:
        events = {"type": "events", "process": message["process"], "events": message["events"]}
        await self.send_json(scoped_state(events, self._orgs))

    async def dashboard_state(self, message: dict[str, Any]) -> None:
        await self.send_json(scoped_state(message["state"], self._orgs))


websocket_urlpatterns = [path("ws/dashboard/", DashboardConsumer.as_asgi())]
