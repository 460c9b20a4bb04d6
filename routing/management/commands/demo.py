"""`manage.py demo`: a working gateway on embedded defaults, in one command.

Migrates the SQLite database, starts the mock upstream on 127.0.0.1:9001, loads
the demo configuration, creates an admin user and an API key, prints both, and
serves the gateway on 127.0.0.1:8000 (uvicorn by default, `--server daphne` for daphne).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from gateway_project.servers import DEFAULT, SERVERS, command

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


class Command(BaseCommand):
    help = "Run the gateway with a demo configuration against a local mock upstream."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--mock-port", type=int, default=9001)
        parser.add_argument("--no-serve", action="store_true", help="Set up and print credentials, but do not serve.")
        parser.add_argument("--server", choices=SERVERS, default=DEFAULT, help="ASGI server (default: %(default)s).")

    def handle(self, *args: Any, **options: Any) -> None:
        from django.contrib.auth import get_user_model

        from policies.models import Agent
        from routing.config.store import import_document, load_yaml

        call_command("migrate", verbosity=0)
        mock = self._start_mock(options["mock_port"])
        os.environ.setdefault("SWITCHBOARD_UPSTREAM_DEMO", "demo-upstream-key")
        if "SWITCHBOARD_UPSTREAM_DEMO_VERTEX" not in os.environ:
            os.environ["SWITCHBOARD_UPSTREAM_DEMO_VERTEX"] = self._vertex_account(options["mock_port"])
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
        from routing.ops.controls import ensure_operators_group

        admin.groups.add(ensure_operators_group())  # the group to give other operators

        from policies.keys import create_api_key

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
            server.wait()
        except KeyboardInterrupt:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=15)
        finally:
            mock.terminate()

    def _start_mock(self, port: int) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-m", "providers.mock.upstream", "--port", str(port)], cwd=settings.BASE_DIR
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
        from providers.mock.clouds import new_service_account

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
