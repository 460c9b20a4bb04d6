"""`manage.py demo`: a working gateway on embedded defaults, in one command.

Migrates the SQLite database, starts the mock upstream on 127.0.0.1:9001, loads
the demo configuration, creates an admin user and an API key, prints both, and
serves the gateway on 127.0.0.1:8000 (uvicorn by default, `--server daphne` for daphne).

Safe to run twice (docs/commands.md#demo): before touching anything it takes the
demo lock of its database (var/demo-<database>.lock, held while it runs) and checks
that both ports are free; when a demo already runs it says so and exits 1, leaving
that demo's database, admin password and configuration as they were.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
import orjson
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from gateway_project.servers import DEFAULT, SERVERS, command
from policies.keys import create_api_key
from policies.models import Agent
from routing.config.store import import_document, load_yaml
from routing.ops.controls import ensure_operators_group
from tools.mock.bedrock import demo_credentials
from tools.mock.clouds import new_service_account

DEMO_FILE = Path(__file__).resolve().parents[2] / "fixtures" / "demo.yaml"


def _models_lines(document: dict[str, Any]) -> str:
    """The demo's models (with their fallbacks) and aliases, as the banner lists them."""
    models = document.get("models", [])
    width = max((len(m["id"]) for m in models), default=0)
    lines = ["  models"]
    for model in models:
        fallbacks = model.get("fallbacks") or []
        then = f"  → falls back to {', '.join(fallbacks)}" if fallbacks else ""
        lines.append(f"    {model['id']:<{width}}  {', '.join(model.get('capabilities', []))}{then}")
    aliases = document.get("aliases") or {}
    if aliases:
        lines.append("  aliases    " + ", ".join(f"{name} → {target}" for name, target in aliases.items()))
    return "\n".join(lines)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _port_busy(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def lock_path() -> Path:
    """The demo lock of this process's database: two demos on one database would fight over it."""
    db = settings.DATABASES["default"]
    identity = f"{db['ENGINE']}|{db.get('HOST', '')}|{db.get('PORT', '')}|{db['NAME']}"
    return Path(settings.VAR_DIR) / f"demo-{hashlib.sha256(identity.encode()).hexdigest()[:12]}.lock"


def take_lock(port: int, mock_port: int) -> IO[str]:
    """Hold the database's demo lock for this process's life (the kernel drops it when the process
    ends, however it ends); CommandError naming the running demo when another one holds it."""
    path = lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held until the process exits
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        try:
            other = json.loads(handle.read() or "{}")
        except ValueError:
            other = {}
        handle.close()
        where = f" (pid {other.get('pid')}, gateway on http://127.0.0.1:{other.get('port')})" if other else ""
        raise CommandError(
            f"a demo is already running on this database{where}; nothing was changed. Use that one, "
            "or stop it (Ctrl-C in its terminal) and run make demo again."
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "port": port, "mock_port": mock_port}))
    handle.flush()
    return handle


def check_ports(port: int, mock_port: int) -> None:
    """Both ports free, or a CommandError that says which is taken and how to choose others."""
    for value in (port, mock_port):
        if not 1 <= value <= 65535:
            raise CommandError(f"port {value} is not a TCP port: choose one in 1..65535")
    if port == mock_port:
        raise CommandError(f"the gateway and the mock upstream cannot share port {port}; choose another MOCK_PORT=")
    for name, value, variable in (("gateway", port, "PORT"), ("mock upstream", mock_port, "MOCK_PORT")):
        if _port_busy(value):
            raise CommandError(
                f"port {value} (the {name}'s) is in use on 127.0.0.1, by a running demo or another program; "
                f"nothing was changed. Stop it, or choose another port: make demo {variable}=<port> "
                f"(manage.py demo --{'port' if variable == 'PORT' else 'mock-port'} <port>)."
            )


class Command(BaseCommand):
    help = "Run the gateway with a demo configuration against a local mock upstream."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=8000, help="The gateway's port (default: %(default)s).")
        parser.add_argument(
            "--mock-port", type=int, default=9001, help="The mock upstream's port (default: %(default)s)."
        )
        parser.add_argument("--no-serve", action="store_true", help="Set up and print credentials, but do not serve.")
        parser.add_argument("--server", choices=SERVERS, default=DEFAULT, help="ASGI server (default: %(default)s).")

    def handle(self, *args: Any, **options: Any) -> None:
        from django.contrib.auth import get_user_model

        # Before anything is touched: a running demo keeps its database, password and configuration.
        self._lock = take_lock(options["port"], options["mock_port"])
        check_ports(options["port"], options["mock_port"])
        call_command("migrate", verbosity=0)
        mock = self._start_mock(options["mock_port"])
        os.environ.setdefault("SWITCHBOARD_UPSTREAM_DEMO", "demo-upstream-key")
        if "SWITCHBOARD_UPSTREAM_DEMO_VERTEX" not in os.environ:
            os.environ["SWITCHBOARD_UPSTREAM_DEMO_VERTEX"] = self._vertex_account(options["mock_port"])
        os.environ.setdefault("SWITCHBOARD_UPSTREAM_DEMO_BEDROCK", demo_credentials())  # the mock's AWS key
        demo_yaml = DEMO_FILE.read_text().replace("127.0.0.1:9001", f"127.0.0.1:{options['mock_port']}")
        demo_document = load_yaml(demo_yaml)
        import_document(demo_document)
        self._script_flaky(options["mock_port"])

        password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        User = get_user_model()
        admin, _ = User.objects.get_or_create(username="admin", defaults={"is_staff": True, "is_superuser": True})
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()

        admin.groups.add(ensure_operators_group())  # the group to give other operators

        agent = Agent.objects.get(org__name="demo", name="demo-agent")
        _, key = create_api_key(agent=agent, label="demo")

        base = f"http://127.0.0.1:{options['port']}"
        self.stdout.write(
            f"""
Switchboard demo
  gateway    {base}   (mock upstream on 127.0.0.1:{options["mock_port"]})
  admin      {base}/admin/   user: admin   password: {password}
  dashboard  {base}/dashboard/
  API key    {key}
{_models_lines(demo_document)}
Try (the README's examples use $KEY):
  export KEY={key}
  curl -s {base}/v1/chat/completions -H "Authorization: Bearer $KEY" \\
       -H "Content-Type: application/json" -d '{{"model": "fast", "messages": [{{"role": "user", "content": "Hello"}}]}}'
  # "flaky" always fails upstream: watch it fall back, then its breaker open
  curl -si {base}/v1/chat/completions -H "Authorization: Bearer $KEY" \\
       -H "Content-Type: application/json" -d '{{"model": "flaky", "messages": [{{"role": "user", "content": "Hi"}}]}}'
"""
        )
        if options["no_serve"]:
            mock.terminate()
            return
        self.stdout.flush()
        server = subprocess.Popen(command(options["server"], "127.0.0.1", options["port"]))
        signal.signal(signal.SIGTERM, _interrupt)  # stop the server and the mock on SIGTERM too
        try:
            code = server.wait()
        except KeyboardInterrupt:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=15)
            code = 0
        finally:
            mock.terminate()
        if code != 0:  # e.g. the port was taken between the check and the bind
            raise CommandError(f"the gateway server exited with status {code} (see its output above)")

    def _start_mock(self, port: int) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-m", "tools.mock.upstream", "--port", str(port)], cwd=settings.BASE_DIR
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return process
            if process.poll() is not None:
                raise SystemExit(f"The mock upstream could not start on port {port}; is the port in use?")
            time.sleep(0.1)
        process.terminate()
        raise SystemExit(f"The mock upstream did not listen on port {port} within 10 s.")

    def _vertex_account(self, port: int) -> str:
        """A service account made for this run, whose key the mock's token endpoint trusts (vertex demo)."""

        account, public = new_service_account(f"http://127.0.0.1:{port}/vertex/token")
        email = orjson.loads(account)["client_email"]
        httpx.post(
            f"http://127.0.0.1:{port}/_control/vertex", json={"client_email": email, "public_key": public}, timeout=5
        )
        return account

    def _script_flaky(self, port: int) -> None:
        httpx.post(
            f"http://127.0.0.1:{port}/_control/script",
            json={"model": "demo-flaky", "steps": [], "then": {"status": 503}},
            timeout=5,
        )
