"""`make help` (and `make` alone) lists every target of the Makefile with a one-line description,
without creating the virtualenv or running anything else."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make (apt-get install make)")


def phony_targets() -> list[str]:
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith(".PHONY:"))
    return line.split(":", 1)[1].split()


@pytest.mark.parametrize("args", [["help"], []])
def test_make_help_lists_every_target_with_a_description(args):
    out = subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    listed = dict(re.findall(r"^  (\S+)\s+(\S.*)$", out.stdout, re.M))
    targets = phony_targets()
    assert {"help", "demo", "test", "bench", "cluster", "clean"} <= set(targets)
    for target in targets:
        assert len(listed.get(target, "")) > 5, f"{target} has no description in `make help`:\n{out.stdout}"
    assert "pip install" not in out.stdout and "venv" not in out.stdout  # nothing was set up
