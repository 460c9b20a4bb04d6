"""Where the browser tests find Chromium, and the one skip mark they share.

Playwright drives a browser that is already installed and never downloads one:
Debian's binary at /usr/lib/chromium/chromium (its /usr/bin/chromium is a wrapper
script; CI installs the package), else any `chromium` / `chromium-browser` /
`google-chrome` on PATH. Where none is found, every browser test is *skipped* with
the reason below, so `make test` stays green on a machine with nothing but Python;
CI, which has Chromium, runs them all. tests/e2e/test_browser_absent.py proves it by
hiding the browser (tests/e2e/hide_browser.py) and collecting every browser test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

DEBIAN_CHROMIUM = Path("/usr/lib/chromium/chromium")
ON_PATH = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(debian: Path = DEBIAN_CHROMIUM, path: str | None = None) -> Path | None:
    """Debian's binary first, then the first of ON_PATH that `path` (default: $PATH) has; None when neither."""
    if debian.exists():
        return debian
    for name in ON_PATH:
        found = shutil.which(name, path=path)
        if found:
            return Path(found)
    return None


CHROMIUM = find_chromium()
NO_BROWSER_REASON = (
    f"no Chromium installed: neither {DEBIAN_CHROMIUM} nor {' / '.join(ON_PATH)} on PATH "
    "(apt-get install chromium to run the browser tests; CI does)"
)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER_REASON)
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
WAIT_MS = 5000


def with_superuser(gateway: Any, user: str, password: str) -> Any:
    """`gateway` (a make_gateway server) with a superuser to sign in as; returned for a fixture to yield."""
    gateway.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        f"get_user_model().objects.create_superuser({user!r}, {user + '@example.com'!r}, {password!r})",
    )
    return gateway


def shell_state(gateway: Any, script: str) -> dict:
    """What `script`, run by the gateway's `manage.py shell`, printed as JSON on a line starting `STATE `."""
    out = gateway.manage("shell", "-c", script).stdout
    return json.loads(next(line[6:] for line in out.splitlines() if line.startswith("STATE ")))
