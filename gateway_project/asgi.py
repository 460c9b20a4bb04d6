"""ASGI entry point: `gateway_project.asgi:application`.

/v1/* and /health* go straight to the gateway's own async handler (routing.gateway.app):
Django's ASGIHandler costs over a millisecond a request in thread hops and sync
middleware, more than the whole overhead budget. Everything else (admin,
dashboard pages, /metrics) goes to Django; websockets go to the dashboard
consumer. The configuration is validated here, so a bad one stops the server.
"""

from __future__ import annotations

import gc
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

from gateway_project.edge import limit_page_bodies  # noqa: E402

# the Django side behind its body limit: refused while reading, never spooled (docs/security.md#server-edge)
django_application = limit_page_bodies(get_asgi_application())

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from gateway_project.process import build_process, make_gateway, make_lifespan, start  # noqa: E402
from routing.config import live  # noqa: E402
from routing.gateway.paths import is_gateway_path  # noqa: E402
from routing.ops.dashboard.consumer import websocket_urlpatterns  # noqa: E402

if settings.SWITCHBOARD_VALIDATE_ON_BOOT:
    live.boot()
# The composition root: every long-lived part, its listeners connected (tasks start on the loop).
process = build_process(settings)
gateway_application = make_gateway(process)

# Everything imported so far lives as long as the process: keep the cyclic GC from
# rescanning it on every full collection (those passes showed up as latency spikes).
gc.collect()
gc.freeze()
# Background threads (the usage writer) hand the GIL back to the event loop within 1 ms
# instead of the default 5 ms, which bounds the stall they can add to a request.
sys.setswitchinterval(0.001)


async def http_application(scope, receive, send) -> None:
    """Path dispatch: the gateway's paths first, Django as the catch-all."""
    path = scope["path"]
    if is_gateway_path(path):
        await gateway_application(scope, receive, send)
    else:
        start(process)
        await django_application(scope, receive, send)


_router = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        "lifespan": make_lifespan(process),
    }
)


async def application(scope, receive, send) -> None:
    if scope["type"] == "http":
        if is_gateway_path(scope["path"]):  # http_application's dispatch, inlined: one frame less per request
            await gateway_application(scope, receive, send)
        else:
            start(process)
            await django_application(scope, receive, send)
    else:
        start(process)
        await _router(scope, receive, send)
