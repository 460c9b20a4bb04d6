"""The live dashboard: what an operator sees of this process, from memory only.

- `counters`: per-model rolling counters (requests, errors, fallbacks per second);
- `feed`: events (breaker transitions, fallbacks, probes, controls), batched out to
  the "switchboard.dashboard" group, and the serving loop sync views read through;
- `state`: this process's full state (links with breakers, providers, counters,
  feed) and the broadcaster that publishes it;
- `consumer`: the staff-only websocket; `views` / `urls`: the pages.

Operator controls (reset / force open) are routing.ops.controls. Code imports the
submodules; this package also answers for their public names
(`routing.ops.dashboard.build_state`, `dashboard.viewers = 0`, ...), loading the
owning submodule on first use and assigning through to it, so the package holds no
state of its own and importing it does no work.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_OWNERS = {
    "routing.ops.dashboard.counters": (
        "WINDOW_S",
        "RATE_WINDOW_S",
        "clock",
        "Rolling",
        "_stats",
        "note_request",
        "model_stats",
    ),
    "routing.ops.dashboard.feed": (
        "DASHBOARD_GROUP",
        "CONTROL_GROUP",
        "PROCESS_ID",
        "FEED_SIZE",
        "STATE_NAMES",
        "_feed",
        "_outbox",
        "_flush_loop",
        "_loop",
        "viewers",
        "emit",
        "events",
        "has_audience",
        "publish",
        "on_breaker_change",
        "note_fallback",
        "note_probe",
        "install",
        "call_on_loop",
    ),
    "routing.ops.dashboard.state": ("refresh_s", "build_state", "link_state", "link_entry", "run_broadcaster"),
    "routing.ops.dashboard.consumer": ("DashboardConsumer", "websocket_urlpatterns"),
    "routing.ops.controls": ("control_listener", "ControlError", "MAX_FORCE_MINUTES"),
}
_OWNER = {name: module for module, names in _OWNERS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _OWNER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_OWNER})


class _Package(types.ModuleType):
    """Assigning a submodule's name on the package assigns it in that submodule."""

    def __setattr__(self, name: str, value: Any) -> None:
        module = _OWNER.get(name)
        if module is None:
            super().__setattr__(name, value)
        else:
            setattr(importlib.import_module(module), name, value)


sys.modules[__name__].__class__ = _Package
