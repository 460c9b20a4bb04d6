"""The usage writer benchmark runs both paths against a real PostgreSQL and prints their ratio (bench/usage_writer_bench.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]


def test_both_paths_are_measured_and_compared(postgres_url: str) -> None:
    url = urlparse(postgres_url)._replace(path=f"/sbtest_{uuid.uuid4().hex[:8]}").geturl()  # its own throwaway database
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "gateway_project.settings"}
    out = subprocess.run(
        [sys.executable, "-m", "bench.usage_writer_bench", "--sizes", "30", "--repeat", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "(120 rows stored" in lines[0]  # warm-up + 1 drain, per path, 30 rows each: all written
    rows = {tuple(line.split()[:2]) for line in lines[3:]}
    assert {("30", "python"), ("30", "statement"), ("30", "ratio")} <= rows
