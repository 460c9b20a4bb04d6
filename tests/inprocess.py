"""The in-process gateway of the tests: the root's `make_gateway` over the current process.

tests/conftest.py builds the session's process (no background tasks); a test that builds
its own (the `process` fixture) is served by it, as a server would serve the one it built.
"""

from __future__ import annotations

from typing import Any

from gateway_project.process import make_gateway
from routing.runtime.process import Process, current

apps: dict[int, tuple[Process, Any]] = {}  # id(process) -> (process, its ASGI callable)


def app_of(process: Process) -> Any:
    held = apps.get(id(process))
    if held is None or held[0] is not process:
        held = apps[id(process)] = (process, make_gateway(process))
    return held[1]


async def gateway_application(scope: dict, receive: Any, send: Any) -> None:
    await app_of(current())(scope, receive, send)
