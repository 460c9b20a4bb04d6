"""A restart while the database is unreachable serves the last good configuration.

The database is a SQLite file whose directory is moved away (connecting fails
like an unreachable server) and moved back (the database "returns"). Real server
processes, either server of the e2e pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway_project.servers import command
from tests.e2e.harness import ROOT, SERVER, Gateway, free_port, manage, wait_for_port

CONFIG = """
providers:
  - name: mock
    base_url: http://127.0.0.1:9/v1
models:
  - id: {model}
    provider: mock
    upstream_model: up
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


def degraded(url: str) -> float | None:
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == "switchboard_degraded" and sample.labels.get("component") == "database":
                return sample.value
    return None


def models(url: str, key: str) -> list[str]:
    response = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["data"]]


def serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    with open(log, "w") as out:
        process = subprocess.Popen(
            command(SERVER, "127.0.0.1", port),
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return process, port


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


def test_restart_during_outage_serves_last_good_then_follows_the_database():
    work = Path(tempfile.mkdtemp(prefix="switchboard-boot-"))
    db_dir, away = work / "db", work / "db-away"
    db_dir.mkdir()
    url = f"sqlite:///{db_dir / 'gw.sqlite3'}"
    manage(["migrate", "-v0"], {"DATABASE_URL": url})
    gw = Gateway(database_url=url, config_yaml=CONFIG.format(model="m-one"), workdir=work)
    gw.start()  # a good start writes the last good file beside the usage spool
    key = gw.api_key
    gw.stop()
    assert (work / "spool" / "last-good-config.json").exists()

    db_dir.rename(away)  # the database is unreachable
    process, port = serve(gw.env, work / "degraded.log")
    try:
        wait_for_port(port, process)
        base = f"http://127.0.0.1:{port}"
        assert models(base, key) == ["m-one"]
        assert degraded(base) == 1
        assert "last good configuration" in (work / "degraded.log").read_text()

        # a change made while this process could not see it, then the database returns
        away_url = f"sqlite:///{away / 'gw.sqlite3'}"
        path = work / "two.yaml"
        path.write_text(CONFIG.format(model="m-two"))
        manage(["import_config", str(path)], {"DATABASE_URL": away_url})
        away.rename(db_dir)
        wait_until(lambda: "m-two" in models(base, key), 10, "the database's configuration")
        assert degraded(base) == 0
    finally:
        process.terminate()
        process.wait(timeout=15)

    # no database and no last good file: refuses to start, saying both
    (work / "spool" / "last-good-config.json").unlink()
    db_dir.rename(away)
    process, port = serve(gw.env, work / "refused.log")
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired as exc:
        process.kill()
        raise AssertionError("the server started without a database and without a last good configuration") from exc
    text = (work / "refused.log").read_text()
    assert process.returncode != 0
    # the database was never reached: it says so, and nothing about a schema it never saw
    assert "Cannot reach the database" in text and "no last good" in text and "schema" not in text
    shutil.rmtree(work, ignore_errors=True)
