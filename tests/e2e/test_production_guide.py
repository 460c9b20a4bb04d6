"""docs/production.md's single-machine sequence, followed literally from an empty database:
migrate, the first admin without a terminal, import deploy/switchboard.yaml, a key, serve on
every address with a real host name in ALLOWED_HOSTS — then /health, /v1/models with the key,
and the admin login page through that host name all answer, and an unknown host is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx

from tests.e2e.harness import ROOT, SECRET_KEY, free_port, manage, wait_for_port

HOST = "gateway.example.com"


def test_the_guides_sequence_serves_the_api_and_the_admin_on_a_real_host_name(tmp_path):
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'prod.sqlite3'}",
        "SWITCHBOARD_USAGE_SPOOL_DIR": str(tmp_path / "spool"),
        "SECRET_KEY": SECRET_KEY,
        "ALLOWED_HOSTS": HOST,
        "CSRF_TRUSTED_ORIGINS": f"https://{HOST}",
        "REDIS_URL": "",
        "DJANGO_SUPERUSER_PASSWORD": "prod-guide-Admin-pw-1",
    }
    manage(["migrate", "--noinput"], env)
    assert manage(["migrate", "--check", "--skip-checks"], env).returncode == 0  # what the init container waits for
    manage(["createsuperuser", "--noinput", "--username", "admin", "--email", "ops@example.com"], env)
    manage(["import_config", "deploy/switchboard.yaml"], env)
    key = manage(["create_api_key", "--org", "example", "--agent", "app"], env).stdout.strip().splitlines()[-1]

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--host", "0.0.0.0", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, **env},
    )
    try:
        wait_for_port(port, server, timeout=60)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            assert client.get("/health").json() == {"status": "ok"}
            models = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert {m["id"] for m in models.json()["data"]} == {"gpt-4o-mini", "gpt-4o", "default"}
            login = client.get("/admin/login/", headers={"Host": HOST})
            assert login.status_code == 200 and "csrfmiddlewaretoken" in login.text
            assert client.get("/admin/login/", headers={"Host": "elsewhere.example"}).status_code == 400
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=15)
