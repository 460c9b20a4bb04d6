"""Our commands piped into a reader that stops early (`manage.py config_history | head`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.harness import ROOT, manage


@pytest.mark.parametrize("argv", [["config_history"], ["export_config"]])
def test_a_reader_that_closes_the_pipe_gets_no_traceback(databases, tmp_path, argv):
    database = databases.new()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", "DATABASE_URL": database}
    config = tmp_path / "c.yaml"
    config.write_text(
        "providers:\n  - {name: p, dialect: openai, base_url: 'http://127.0.0.1:9/v1'}\n"
        + "models:\n"
        + "".join(f"  - {{id: m{i}, provider: p, upstream_model: u{i}, capabilities: [chat]}}\n" for i in range(300))
    )
    manage(["import_config", str(config)], {"DATABASE_URL": database})
    reader, writer = os.pipe()
    os.close(reader)  # `head` that has already exited: every write finds no reader
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", *argv], cwd=ROOT, env=env, stdout=writer, stderr=subprocess.PIPE, timeout=120
        )
    finally:
        os.close(writer)
    assert "Traceback" not in done.stderr.decode() and "BrokenPipe" not in done.stderr.decode(), done.stderr
    assert done.returncode == 1
