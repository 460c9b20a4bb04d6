"""`manage.py demo --no-serve`: the banner tells a new user everything the README's examples need."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.harness import SERVER, SLACK_S, free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_banner_lists_the_models_and_exports_the_key(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}
    env.pop("REDIS_URL", None)
    out = subprocess.run(
        [sys.executable, "manage.py", "demo", "--no-serve", "--mock-port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    banner = out.stdout
    key = re.search(r"API key\s+(sb-\S+)", banner).group(1)
    assert (
        f"export KEY={key}"
        in banner.splitlines()[banner.splitlines().index("Try (the README's examples use $KEY):") + 1]
    )
    for model in ("chat-a", "chat-b", "flaky", "embed-a"):
        assert re.search(rf"^\s+{re.escape(model)}\s+\S", banner, re.M), f"{model} missing from the banner"
    assert "fast → chat-a" in banner
    assert "Bearer $KEY" in banner


def _demo_env(tmp_path: Path, database: str = "demo.sqlite3") -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / database}",
        "SWITCHBOARD_USAGE_SPOOL_DIR": str(tmp_path / "spool"),
    }
    env.pop("REDIS_URL", None)
    env.pop("DEMO_ADMIN_PASSWORD", None)
    return env


def _state(database: Path) -> tuple:
    """What a second demo must not change: the admin's password hash, the configuration
    (its history and where the providers point), the API keys."""
    with sqlite3.connect(database) as conn:
        return (
            conn.execute("SELECT password FROM auth_user WHERE username = 'admin'").fetchall(),
            conn.execute("SELECT version, digest FROM routing_configrevision ORDER BY version").fetchall(),
            conn.execute("SELECT name, base_url FROM providers_provider ORDER BY name").fetchall(),
            conn.execute("SELECT prefix FROM policies_apikey ORDER BY prefix").fetchall(),
        )


def _answers(port: int, key: str) -> tuple:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=20) as client:
        models = client.get("/v1/models")
        body = {"model": "fast", "messages": [{"role": "user", "content": "Hello"}]}
        chat = client.post("/v1/chat/completions", json=body)
    assert models.status_code == 200 and chat.status_code == 200, chat.text
    return (
        sorted(m["id"] for m in models.json()["data"]),
        chat.headers["x-switchboard-model-used"],
        chat.json()["choices"][0]["message"]["content"],
    )


def test_a_second_demo_while_one_runs_exits_1_and_the_first_keeps_serving_the_same(tmp_path, databases):
    # A migrated copy when the e2e databases are SQLite (the demo starts sooner); the demo's own SQLite file otherwise.
    database = Path(databases.new().removeprefix("sqlite:///")) if not databases.postgres else tmp_path / "demo.sqlite3"
    env = {**_demo_env(tmp_path), "DATABASE_URL": f"sqlite:///{database}"}
    port, mock_port = free_port(), free_port()
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115
    first = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(port), "--mock-port", str(mock_port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, first, timeout=120)
        key = re.search(r"API key\s+(sb-\S+)", (tmp_path / "first.log").read_text()).group(1)
        before, state = _answers(port, key), _state(database)

        def second(*ports: int) -> subprocess.CompletedProcess:
            argv = [sys.executable, "manage.py", "demo", "--port", str(ports[0]), "--mock-port", str(ports[1])]
            return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

        for ports in ((port, mock_port), (free_port(), free_port())):  # the same ports, and others
            again = second(*ports)
            assert again.returncode == 1, again.stdout + again.stderr
            assert "a demo is already running on this database" in again.stderr
            assert f"gateway on http://127.0.0.1:{port}" in again.stderr and "nothing was changed" in again.stderr
            assert "API key" not in again.stdout
        assert first.poll() is None
        assert _state(database) == state
        assert _answers(port, key) == before

        # Another database but the running demo's port: refused before anything is touched.
        other = tmp_path / "other.sqlite3"
        busy = subprocess.run(
            [sys.executable, "manage.py", "demo", "--port", str(port), "--mock-port", str(free_port())],
            cwd=ROOT,
            env=_demo_env(tmp_path, "other.sqlite3"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert busy.returncode == 1 and f"port {port} (the gateway's) is in use" in busy.stderr
        assert "make demo PORT=<port>" in busy.stderr
        assert not other.exists() or not sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall()
        assert _answers(port, key) == before
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
        log.close()


def test_the_readmes_worked_example_flaky_turns_red(tmp_path):
    """docs/guide.md "Worked example (against make demo)": five fallbacks, then `flaky`'s breaker opens for real.

    The demo has one organisation; `flaky`'s upstream answers 503 (a failure no body can
    cause), so the link itself opens: the sixth request skips it, the gauge reads 1 and the
    dashboard's process record lists the link open (the row turns red)."""
    port, mock_port, password = free_port(), free_port(), "demo-readme-pass-1"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}", "DEMO_ADMIN_PASSWORD": password}
    env.pop("REDIS_URL", None)
    log = tmp_path / "demo.log"
    with open(log, "w") as out:
        demo = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "demo",
                "--port",
                str(port),
                "--mock-port",
                str(mock_port),
                "--server",
                SERVER,
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the demo's server and mock upstream go with it
        )
    try:
        wait_for_port(port, demo, timeout=60)
        key = re.search(r"export KEY=(sb-\S+)", log.read_text()).group(1)
        base = f"http://127.0.0.1:{port}"
        seen = []
        for _ in range(6):  # the guide's loop of six curl calls
            answer = httpx.post(
                f"{base}/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={"model": "flaky", "messages": [{"role": "user", "content": "Hi"}]},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            seen.append((answer.headers["x-switchboard-attempts"], answer.headers["x-switchboard-fallback"]))
        assert seen == [("4", "upstream_5xx")] * 5 + [("1", "circuit_open")]
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert re.search(r'switchboard_circuit_state\{model="flaky",provider="mock-openai"\} 1\.0', metrics), [
            line for line in metrics.splitlines() if "circuit_state" in line
        ]
        with httpx.Client(base_url=base, timeout=10) as staff:
            page = staff.get("/admin/login/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            staff.post("/admin/login/", data={"username": "admin", "password": password, "csrfmiddlewaretoken": token})
            deadline = time.monotonic() + 5 + SLACK_S  # the next heartbeat carries it
            while "mock-openai/flaky" not in staff.get("/dashboard/processes/").json()["processes"][0]["open"]:
                assert time.monotonic() < deadline, "the dashboard never listed flaky open"
                time.sleep(0.2)
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        try:
            demo.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
