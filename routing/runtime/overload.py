"""Overload control on the request path (docs/overload.md): the glue between a request and the gates.

`apply` configures the deployments' gates (routing.core.admission_queue) and hedging from
the snapshot's overload settings (routing.config.overload_spec), at boot and on every
reload. They are the process's (`Process.overload`): when nothing is configured its `on`
stays False and the request path pays one attribute test. When on, `admit` gives the
request its ticket (carried on its Call to the executor): its priority class (from the key, the agent or the org, lowered but
never raised by X-Switchboard-Priority), its org's weight and its X-Switchboard-Max-Wait.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge

from routing.config.overload_spec import OverloadSpec
from routing.core import errors
from routing.core.admission_queue import PRIORITIES, Gates, PriorityTicket
from routing.core.hedging import Hedges
from routing.runtime.process import installed

_NONE = OverloadSpec({}, {}, {}, {}, {}, {}, frozenset())

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


class Overload:
    """One process's overload control: its gates and hedging (the executor's), the overload settings of
    the snapshot serving, and `on`: the one test the request path pays when nothing is configured."""

    __slots__ = ("gates", "hedges", "spec", "on")

    def __init__(self, gates: Gates, hedges: Hedges) -> None:
        self.gates = gates
        self.hedges = hedges
        self.spec = _NONE
        self.on = False

    def apply(self, snapshot: Any) -> None:
        """Configure the gates and hedging from a snapshot's overload settings.

        The learnt limits, queues and first-token figures of the models that keep their settings stay.
        """
        spec: OverloadSpec | None = getattr(snapshot, "overload", None)
        self.spec = spec or _NONE
        gates, hedges = self.gates, self.hedges
        if gates.on_shed is None:  # the composition root may have set one that counts and alerts
            gates.on_shed = count_shed
        gates.configure(self.spec.limits)
        hedges.on_outcome = _count_hedge
        hedges.configure(self.spec.hedge)
        self.on = gates.on or hedges.on

    def admit(self, headers: Any, key: Any, body: dict | None = None) -> PriorityTicket:
        """This request's ticket for the gates and hedging (only called when `on`)."""
        spec = self.spec
        agent = key.agent
        org = agent.org.name
        who = (org, agent.name)
        rank = spec.key_classes.get(key.prefix)
        if rank is None:
            rank = spec.agent_classes.get(who)
        if rank is None:
            rank = spec.org_classes.get(org, PRIORITIES["default"])
        wait_until = None
        for name, value in headers:
            if name == b"x-switchboard-priority":
                rank = max(rank, _asked(value))  # lower only
            elif name == b"x-switchboard-max-wait":
                wait_until = self.gates.clock() + _max_wait(value)
        tools = body is not None and bool(body.get("tools"))
        hedge = self.hedges.on and who not in spec.never_hedge
        return PriorityTicket(org, rank, spec.weights.get(org, 1.0), wait_until, hedge, tools)

    def refresh_metrics(self) -> None:
        """Limit, in-flight and queue length of every gate into the gauges (scrape time or the refresher)."""
        for gate in list(self.gates.gates.values()):
            if gate is not None:
                LIMIT.labels(gate.name).set(gate.limit.limit)
                INFLIGHT.labels(gate.name).set(gate.inflight)
                QUEUE.labels(gate.name).set(len(gate.queue))

    def figures(self, key: Any) -> dict[str, int] | None:
        """The dashboard's figures of one deployment's gate; None when it has none."""
        gate = self.gates.gates.get(key) if self.on else None
        if gate is None:
            return None
        return {"limit": gate.limit.limit, "inflight": gate.inflight, "queued": len(gate.queue)}


def apply(snapshot: Any) -> None:
    """The swap listener (docs/overload.md#configuration): the current process applies each snapshot's
    overload settings with the reload that brings it; nothing without a process (a test's bare swap)."""
    process = installed()
    if process is not None and process.overload is not None:
        process.overload.apply(snapshot)


def count_shed(reason: str, priority: str) -> None:
    """The shed metric, per request shed with 503 overloaded."""
    SHED.labels(reason, priority).inc()


def _count_hedge(outcome: str) -> None:
    HEDGES.labels(outcome).inc()


def admit(headers: Any, key: Any, body: dict | None = None) -> PriorityTicket:
    """The current process's `Overload.admit` (the request path calls its own process's)."""
    return installed().overload.admit(headers, key, body)


def _asked(value: bytes) -> int:
    asked = PRIORITIES.get(value.decode("latin-1").strip().lower())
    if asked is None:
        raise errors.invalid_request(
            f"X-Switchboard-Priority must be one of {', '.join(PRIORITIES)}; a request may lower its "
            "class, never raise it.",
            "X-Switchboard-Priority",
        )
    return asked


def _max_wait(value: bytes) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (0 <= seconds < 86400):
        raise errors.invalid_request(
            "X-Switchboard-Max-Wait must be a number of seconds (0 or more) the request may wait for a free slot.",
            "X-Switchboard-Max-Wait",
        )
    return seconds


def refresh_metrics() -> None:
    """The current process's gates into the gauges (scrape time or the refresher)."""
    process = installed()
    if process is not None and process.overload is not None:
        process.overload.refresh_metrics()


def figures(key: Any) -> dict[str, int] | None:
    """The dashboard's figures of one deployment's gate in the current process; None when it has none."""
    process = installed()
    return process.overload.figures(key) if process is not None and process.overload is not None else None
