"""`make test` on a machine without Chromium: every test module still collects and each
browser test is reported as skipped with the reason, never as a collection error.

CI has Chromium, so the machine without one is made here: the suite is collected in a
child pytest with tests/e2e/hide_browser.py loaded, which looks the browser up with
nothing to find, and keeps only the browser tests to run (they skip at once).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.browser import NO_BROWSER_REASON
from tests.e2e.harness import ROOT


def browser_test_files() -> set[str]:
    """Every test module that drives a browser (they all start one through Playwright)."""
    return {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if path != Path(__file__) and "sync_playwright" in path.read_text(encoding="utf-8")
    }


def test_without_a_browser_the_suite_collects_and_browser_tests_skip_with_the_reason() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.e2e.hide_browser", "-p", "no:randomly", "-q", "-rs", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,  # collects the whole suite: ~15 s alone, minutes on a loaded machine
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b\d+ skipped\b", summary), summary
    assert not re.search(r"\b(passed|failed|errors?)\b", summary), summary
    skipped_files = set(
        re.findall(r"^SKIPPED \[\d+\] (tests/\S+?\.py):\d+: " + re.escape(NO_BROWSER_REASON), out, re.M)
    )
    expected = browser_test_files()
    assert len(expected) >= 6, expected
    assert skipped_files == expected, (skipped_files, expected)
