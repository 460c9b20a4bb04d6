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
from routing.core.admission_queue import PRIORITIES, Gates, Ticket, current
from routing.core.concurrency import LimitSettings
from routing.core.hedging import Hedges, HedgeSettings

ON = False
_classes: dict[str, int] = {}  # "org/agent", "org" or a key prefix -> class rank
_weights: dict[str, float] = {}  # org -> weight (1 by default)
_never_hedge: frozenset[str] = frozenset()  # "org/agent", key prefixes or orgs marked non-idempotent
_hedge_tools = False  # hedge requests that offer tools (their calls may have side effects)

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
HEDGES = Counter(
    "switchboard_hedges_total",
    "Hedged first tokens by outcome: won (the hedge committed first), lost, failed, budget_spent.",
    ["outcome"],
)

_LIMIT_FIELDS = {"initial": "initial", "min": "min_limit", "max": "max_limit", "queue": "queue"}


def _fail(what: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"SWITCHBOARD_OVERLOAD: {what} (see docs/overload.md#configuration)")


class Config:
    """The operator's document, read: limits, classes, weights and hedging."""

    def __init__(self) -> None:
        self.limits: dict[str, LimitSettings] = {}
        self.classes: dict[str, int] = {}
        self.weights: dict[str, float] = {}
        self.hedge: dict[str, HedgeSettings] = {}
        self.never_hedge: frozenset[str] = frozenset()
        self.hedge_tools = False


def parse(text: str) -> Config:
    """The operator's document (docs/overload.md#configuration); raises with what to fix."""
    config = Config()
    if not text.strip():
        return config
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise _fail(f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _fail("must be a JSON object with 'models', 'classes' and 'org_weights'")
    unknown = set(doc) - {"models", "classes", "org_weights", "hedge"}
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
    config.limits, config.classes, config.weights = limits, classes, weights
    _parse_hedge(doc.get("hedge") or {}, config)
    return config


def _parse_hedge(doc: Any, config: Config) -> None:
    if not isinstance(doc, dict) or set(doc) - {"models", "never", "tools"}:
        raise _fail("hedge must be an object of 'models', 'never' and 'tools'")
    for model, spec in (doc.get("models") or {}).items():
        pct = spec.get("budget_pct", 5.0) if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or set(spec) - {"budget_pct"} or not isinstance(pct, (int, float)):
            raise _fail(f"hedge.models.{model} must be an object with 'budget_pct' (a number, default 5)")
        if not 0 < pct <= 100:
            raise _fail(f"hedge.models.{model}.budget_pct must be more than 0 and at most 100")
        config.hedge[model] = HedgeSettings(float(pct))
    never = doc.get("never") or []
    if not isinstance(never, list) or not all(isinstance(n, str) for n in never):
        raise _fail("hedge.never must be a list of 'org/agent', key prefixes or org names")
    config.never_hedge = frozenset(never)
    if not isinstance(doc.get("tools", False), bool):
        raise _fail("hedge.tools must be true or false")
    config.hedge_tools = doc.get("tools", False)


_gates: Gates | None = None  # the process's, set by install(): admit, the gauges and the dashboard read them
_hedges: Hedges | None = None


def install(gates: Gates, hedges: Hedges) -> None:
    """Configure the process's gates and hedges from the settings (the composition root calls it once)."""
    global ON, _classes, _weights, _never_hedge, _hedge_tools, _gates, _hedges
    _gates, _hedges = gates, hedges
    config = parse(getattr(settings, "SWITCHBOARD_OVERLOAD", ""))
    _classes, _weights = config.classes, config.weights
    _never_hedge, _hedge_tools = config.never_hedge, config.hedge_tools
    gates.configure(config.limits)
    gates.on_shed = _count_shed
    hedges.configure(config.hedge)
    hedges.on_outcome = _count_hedge
    ON = gates.on or hedges.on


def _count_shed(reason: str, priority: str) -> None:
    SHED.labels(reason, priority).inc()


def _count_hedge(outcome: str) -> None:
    HEDGES.labels(outcome).inc()


def admit(headers: Any, key: Any, body: dict | None = None) -> None:
    """Give this request its ticket for the gates and hedging (only called when ON)."""
    agent = key.agent
    org = agent.org.name
    who = f"{org}/{agent.name}"
    hedge = _hedges.on and not (
        who in _never_hedge
        or key.prefix in _never_hedge
        or org in _never_hedge
        or (not _hedge_tools and body is not None and body.get("tools"))
    )
    rank = _classes.get(who)
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
            wait_until = _gates.clock() + seconds
    current.set(Ticket(org, rank, _weights.get(org, 1.0), wait_until, bool(hedge)))


def refresh_metrics() -> None:
    """Limit, in-flight and queue length of every gate into the gauges (scrape time or the refresher)."""
    for gate in list(_gates.gates.values()) if _gates is not None else ():
        if gate is not None:
            LIMIT.labels(gate.name).set(gate.limit.limit)
            INFLIGHT.labels(gate.name).set(gate.inflight)
            QUEUE.labels(gate.name).set(len(gate.queue))


def figures(key: Any) -> dict[str, int] | None:
    """The dashboard's figures of one deployment's gate; None when it has none."""
    gate = _gates.gates.get(key) if ON and _gates is not None else None
    if gate is None:
        return None
    return {"limit": gate.limit.limit, "inflight": gate.inflight, "queued": len(gate.queue)}
