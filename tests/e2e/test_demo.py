"""`manage.py demo --no-serve`: the banner tells a new user everything the README's examples need."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.harness import free_port

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
