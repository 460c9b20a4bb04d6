"""The usage writer benchmark runs both paths against a real PostgreSQL, or a SQLite file, and prints their ratio (bench/usage_writer_bench.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]


def _run(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.usage_writer_bench", "--sizes", "30", "--repeat", "1", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _check(out: subprocess.CompletedProcess, database: str) -> None:
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert (
        f"per batch, {database}" in lines[0] and "(120 rows stored" in lines[0]
    )  # warm-up + 1 drain, per path, 30 rows each: all written
    rows = {tuple(line.split()[:2]) for line in lines[3:]}
    assert {("30", "python"), ("30", "statement"), ("30", "ratio")} <= rows


def test_both_paths_are_measured_and_compared(postgres_url: str) -> None:
    url = urlparse(postgres_url)._replace(path=f"/sbtest_{uuid.uuid4().hex[:8]}").geturl()  # its own throwaway database
    _check(
        _run({**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "gateway_project.settings"}), "PostgreSQL"
    )


def test_the_sqlite_writer_is_measured_on_a_throwaway_file() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings"}
    _check(_run(env, "--database", "sqlite"), "SQLite")
