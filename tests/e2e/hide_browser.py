"""A pytest plugin (`-p tests.e2e.hide_browser`) that makes this run a machine without Chromium.

Loaded before any test module is imported, it looks the browser up again with the
Debian path pointed at nothing and an empty PATH, exactly as tests/e2e/browser.py
does on such a machine, so every `CHROMIUM` the test modules import is None.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e import browser

NOWHERE = os.devnull  # a PATH with no directory in it, and a Debian path under a file: nothing is found
browser.DEBIAN_CHROMIUM = Path(NOWHERE) / "chromium"
browser.CHROMIUM = browser.find_chromium(browser.DEBIAN_CHROMIUM, path=NOWHERE)
assert browser.CHROMIUM is None, browser.CHROMIUM
browser.needs_chromium = pytest.mark.skipif(True, reason=browser.NO_BROWSER_REASON)


def is_browser_test(item: pytest.Item) -> bool:
    """Whether the item carries the shared no-browser skip (module-wide or on the test)."""
    return any(mark.kwargs.get("reason") == browser.NO_BROWSER_REASON for mark in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the browser tests: the run is about them, and the rest need no hiding."""
    kept = [item for item in items if is_browser_test(item)]
    config.hook.pytest_deselected(items=[item for item in items if not is_browser_test(item)])
    items[:] = kept
