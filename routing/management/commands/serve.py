"""`manage.py serve [--server uvicorn|daphne] [--workers N] [--host H] [--port P]`.

Serves the gateway. With one worker (the default) it becomes the server process itself
(the same command line as `gateway_project.servers.command`); with N it runs N worker
processes sharing one listening socket and one metrics directory (gateway_project.workers,
docs/scale-out.md). About one worker per core.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gateway_project import workers as supervisor
from gateway_project.servers import DEFAULT, SERVERS, command


class Command(BaseCommand):
    help = "Serve the gateway with N worker processes sharing one listening socket (default 1)."
    requires_system_checks: list[str] = []  # the server validates the configuration at boot

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--server", choices=SERVERS, default=DEFAULT, help="ASGI server (default: %(default)s).")
        parser.add_argument("--workers", type=int, default=1, help="Worker processes (default 1; about one per core).")
        parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: %(default)s).")
        parser.add_argument("--port", type=int, default=8000, help="Port to listen on (default: %(default)s).")

    def handle(self, *args: Any, **options: Any) -> None:
        n, server, host, port = options["workers"], options["server"], options["host"], options["port"]
        if not 1 <= n <= 256:
            raise CommandError(f"--workers must be between 1 and 256 (got {n}); about one per core.")
        if not 0 <= port <= 65535:
            raise CommandError(f"--port must be between 0 and 65535 (got {port}).")
        refuse_insecure_secret_key(settings.SECRET_KEY, settings.DEBUG)
        refuse_loopback_only_hosts(host, settings.ALLOWED_HOSTS, settings.DEBUG)
        self.stdout.write(f"Serving the gateway on http://{host}:{port} with {server}, {n} worker(s)")
        self.stdout.flush()
        if n == 1:
            argv = command(server, host, port)
            os.execv(argv[0], argv)  # the server replaces this process, as it would be run by hand
        run = supervisor.supervise_uvicorn if server == "uvicorn" else supervisor.supervise_daphne
        try:
            code = run(host, port, n, lambda line: self.stderr.write(line))
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from None
        sys.exit(code)


def refuse_insecure_secret_key(key: str, debug: bool) -> None:
    """Production serving with the built-in development key (or any short or "insecure" one)
    would let anyone who read this repository forge admin sessions and CSRF tokens; the demo
    (`manage.py demo`) and DEBUG are for development and keep it (docs/security.md#secret-key)."""
    if debug or (len(key) >= 32 and "insecure" not in key):
        return
    raise CommandError(
        "SECRET_KEY is the development key (or shorter than 32 characters, or marked insecure): admin "
        "sessions and CSRF tokens could be forged. Set SECRET_KEY to a long random value, e.g. "
        "export SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
        "the same on every process of a cluster; or set DEBUG=true for development."
    )


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1", "testserver"})


def _is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def refuse_loopback_only_hosts(host: str, allowed_hosts: list[str], debug: bool) -> None:
    """Listening beyond loopback while ALLOWED_HOSTS names only loopback (the default) gives a half
    working gateway: /v1 and /health answer any Host, but the admin, dashboard and management API
    answer 400 to every real host name. Refuse, saying what to set (docs/production.md#hosts)."""
    if debug or _is_loopback(host) or any(not _is_loopback(h) for h in allowed_hosts):
        return
    raise CommandError(
        f"--host {host} listens beyond this machine, but ALLOWED_HOSTS names only loopback "
        f"({', '.join(allowed_hosts) or 'nothing'}): the admin, dashboard and management API would answer "
        "400 Bad Request to every real host name while /v1 answers. Set ALLOWED_HOSTS to the names clients "
        "use (comma-separated, e.g. ALLOWED_HOSTS=gateway.example.com; a leading dot allows subdomains) and "
        "CSRF_TRUSTED_ORIGINS to the admin's origin (e.g. https://gateway.example.com); or listen on "
        "127.0.0.1 behind a proxy on this machine."
    )
