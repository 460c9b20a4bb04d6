"""Overload control on the request path (docs/overload.md): the glue between a request and the gates.

`install` reads SWITCHBOARD_OVERLOAD once per process and configures the deployments' gates
(routing.core.admission_queue). When nothing is configured `ON` stays False and the
request path pays one global test. When on, `admit` gives the request its ticket: its
priority class (from the agent, the org or the key, lowered but never raised by
X-Switchboard-Priority), its org's weight and its X-Switchboard-Max-Wait.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import Counter, Gauge

from routing.core import errors
from routing.core.admission_queue import PRIORITIES, Ticket, current, gates
from routing.core.concurrency import LimitSettings

ON = False
_classes: dict[str, int] = {}  # "org/agent", "org" or a key prefix -> class rank
_weights: dict[str, float] = {}  # org -> weight (1 by default)

LIMIT = Gauge(
    "switchboard_concurrency_limit",
    "Adaptive concurrency limit per deployment (docs/overload.md), in this process.",
    ["model"],
    multiprocess_mode="livesum",
)
INFLIGHT = Gauge(
    "switchboard_inflight", "Requests in flight per limited deployment.", ["model"], multiprocess_mode="livesum"
)
QUEUE = Gauge(
    "switchboard_queue_length", "Requests waiting per limited deployment.", ["model"], multiprocess_mode="livesum"
)
SHED = Counter("switchboard_shed_total", "Requests shed with 503 overloaded.", ["reason", "priority"])

_LIMIT_FIELDS = {"initial": "initial", "min": "min_limit", "max": "max_limit", "queue": "queue"}


def _fail(what: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"SWITCHBOARD_OVERLOAD: {what} (see docs/overload.md#configuration)")


def parse(text: str) -> tuple[dict[str, LimitSettings], dict[str, int], dict[str, float]]:
    """The operator's document as (limits by model id, classes, org weights); raises with what to fix."""
    if not text.strip():
        return {}, {}, {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise _fail(f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _fail("must be a JSON object with 'models', 'classes' and 'org_weights'")
    unknown = set(doc) - {"models", "classes", "org_weights"}
    if unknown:
        raise _fail(f"unknown key(s) {sorted(unknown)}")
    limits: dict[str, LimitSettings] = {}
    for model, spec in (doc.get("models") or {}).items():
        if not isinstance(spec, dict) or set(spec) - set(_LIMIT_FIELDS):
            raise _fail(f"models.{model} must be an object of {sorted(_LIMIT_FIELDS)}")
        values = {}
        for name, field in _LIMIT_FIELDS.items():
            if name in spec:
                v = spec[name]
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise _fail(f"models.{model}.{name} must be a whole number of at least 1")
                values[field] = v
        limits[model] = LimitSettings(**values)
    classes = {}
    for who, name in (doc.get("classes") or {}).items():
        if name not in PRIORITIES:
            raise _fail(f"classes.{who} is {name!r}; use one of {list(PRIORITIES)}")
        classes[who] = PRIORITIES[name]
    weights = {}
    for org, w in (doc.get("org_weights") or {}).items():
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not w > 0 or math.isinf(w):
            raise _fail(f"org_weights.{org} must be a positive number")
        weights[org] = float(w)
    return limits, classes, weights


def install() -> None:
    """Configure this process's gates from the settings (the composition root calls it once)."""
    global ON, _classes, _weights
    limits, _classes, _weights = parse(getattr(settings, "SWITCHBOARD_OVERLOAD", ""))
    gates.configure(limits)
    gates.on_shed = _count_shed
    ON = gates.on


def _count_shed(reason: str, priority: str) -> None:
    SHED.labels(reason, priority).inc()


def admit(headers: Any, key: Any) -> None:
    """Give this request its ticket for the gates (only called when ON)."""
    agent = key.agent
    org = agent.org.name
    rank = _classes.get(f"{org}/{agent.name}")
    if rank is None:
        rank = _classes.get(key.prefix)
    if rank is None:
        rank = _classes.get(org, PRIORITIES["default"])
    wait_until = None
    for name, value in headers:
        if name == b"x-switchboard-priority":
            asked = PRIORITIES.get(value.decode("latin-1").strip().lower())
            if asked is None:
                raise errors.invalid_request(
                    f"X-Switchboard-Priority must be one of {', '.join(PRIORITIES)}; a request may lower its "
                    "class, never raise it.",
                    "X-Switchboard-Priority",
                )
            rank = max(rank, asked)  # lower only
        elif name == b"x-switchboard-max-wait":
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if not (0 <= seconds < 86400):
                raise errors.invalid_request(
                    "X-Switchboard-Max-Wait must be a number of seconds (0 or more) the request may wait for "
                    "a free slot.",
                    "X-Switchboard-Max-Wait",
                )
            wait_until = gates.clock() + seconds
    current.set(Ticket(org, rank, _weights.get(org, 1.0), wait_until))


def refresh_metrics() -> None:
    """Limit, in-flight and queue length of every gate into the gauges (scrape time or the refresher)."""
    for gate in list(gates.gates.values()):
        if gate is not None:
            LIMIT.labels(gate.name).set(gate.limit.limit)
            INFLIGHT.labels(gate.name).set(gate.inflight)
            QUEUE.labels(gate.name).set(len(gate.queue))


def figures(key: Any) -> dict[str, int] | None:
    """The dashboard's figures of one deployment's gate; None when it has none."""
    gate = gates.gates.get(key) if ON else None
    if gate is None:
        return None
    return {"limit": gate.limit.limit, "inflight": gate.inflight, "queued": len(gate.queue)}
