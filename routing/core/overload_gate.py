"""One upstream call within a deployment's adaptive concurrency limit (docs/overload.md).

The gate (routing.core.admission_queue) admits the call or queues it by priority; the
call's outcome is the limit's signal: a capacity refusal or an upstream timeout lowers it
(`dropped`), a success gives a latency sample. The slot stays the caller's on success (a
stream holds it until it ends), and is freed here on any failure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from routing.core.admission_queue import Gate, PriorityTicket
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.parts import ExecutorParts
from routing.core.walk import Link

# Timeouts lower a deployment's adaptive limit as its capacity refusals do (docs/overload.md), but
# still charge its breaker: a silent upstream may be a sick one.
_DROPS = frozenset({FailureKind.READ_TIMEOUT, FailureKind.FIRST_TOKEN_TIMEOUT})


async def within_limit(
    parts: ExecutorParts,
    gate: Gate,
    attempt: Callable[[Link, float], Awaitable[Any]],
    link: Link,
    deadline: float,
    priority: PriorityTicket | None = None,
) -> Any:
    """One attempt within the deployment's adaptive limit, queued by the request's `priority` ticket; the
    slot is the caller's on success."""
    await parts.gates.enter(gate, deadline, priority)
    started = parts.clock()
    try:
        result = await attempt(link, deadline)
    except UpstreamFailure as f:
        if f.is_capacity or f.kind in _DROPS:
            gate.dropped()
        gate.release()
        raise
    except TimeoutError:
        if parts.clock() < deadline:  # the upstream's timeout, not the request's own
            gate.dropped()
        gate.release()
        raise
    except BaseException:
        gate.release()
        raise
    gate.sample(parts.clock() - started)  # a stream's attempt ends at its first content frame
    return result
