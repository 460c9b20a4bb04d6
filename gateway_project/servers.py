"""The command lines that serve `gateway_project.asgi:application`.

daphne is the documented ASGI server of the channels stack; uvicorn with uvloop
and httptools is the default run command because it measured faster on every
row of `make bench` (see the README's Performance section). Both serve the same
application object, websockets and background tasks included.
"""

from __future__ import annotations

import sys

APP = "gateway_project.asgi:application"
SERVERS = ("uvicorn", "daphne")
DEFAULT = "uvicorn"
# httptools with header limits (431 above them), deadlines and a connection cap: docs/security.md#server-edge
HTTP_PROTOCOL = "gateway_project.http_limits:LimitedHttpToolsProtocol"
# daphne with the same limits, and body limits before its buffering: docs/security.md#server-edge
DAPHNE = "gateway_project.daphne_limits"


def command(server: str, host: str, port: int) -> list[str]:
    """argv that serves the gateway on host:port with `server`."""
    if server == "uvicorn":
        return [
            sys.executable, "-m", "uvicorn", APP, "--host", host, "--port", str(port),
            "--loop", "uvloop", "--http", HTTP_PROTOCOL, "--ws", "wsproto",
            "--lifespan", "on", "--no-access-log", "--timeout-graceful-shutdown", "10",
        ]  # fmt: skip
    if server == "daphne":
        # -v 0: no access log; every request already has its JSON line on switchboard.requests.
        return [sys.executable, "-m", DAPHNE, "-v", "0", "-b", host, "-p", str(port), APP]
    raise ValueError(f"unknown server {server!r}; use one of {', '.join(SERVERS)}")


def worker_command(server: str, host: str, port: int, workers: int, fd: int | None = None) -> list[str]:
    """argv of `manage.py serve --workers N` (docs/scale-out.md#workers), built from `command`:
    uvicorn runs its own N workers; daphne serves the listening socket `fd` it inherits (one
    process per worker, the supervisor in gateway_project/workers.py starts N of them)."""
    argv = command(server, host, port)
    if server == "uvicorn":
        return [*argv, "--workers", str(workers)] if workers > 1 else argv
    if fd is None:
        return argv
    at = argv.index("-b")
    return [*argv[:at], "--fd", str(fd), *argv[at + 4 :]]  # "-b HOST -p PORT" → "--fd FD"
