"""`manage.py demo --no-serve`: the banner tells a new user everything the README's examples need."""

from __future__ import annotations

import os
import re
import signal
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


def test_the_readmes_worked_example_flaky_turns_red(tmp_path):
    """README "Worked example (against make demo)": five fallbacks, then `flaky`'s breaker opens for real.

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
        for _ in range(6):  # the README's loop of six curl calls
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
