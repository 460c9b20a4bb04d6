"""The bounded, fair waiting queue in front of one deployment (docs/overload.md#the-queue).

A request that finds its deployment at the adaptive limit (routing.core.concurrency) waits
here, ordered by priority class first, then by virtual-time fair queueing between
organisations within a class: each org's next request is tagged `max(vtime, org's last tag)
+ 1/weight` and the smallest tag goes first, so an org that floods the queue only pushes
its own requests back. A waiter waits under its own `asyncio.timeout`: whatever the
queue's bookkeeping does, it never holds a request past its deadline. A request that
cannot start in time is shed at once (the drain rate says so) or when its wait ends, with
503 `overloaded` and a Retry-After from the drain rate.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import time
from collections.abc import Callable, Mapping

from routing.core import errors
from routing.core.concurrency import AdaptiveLimit, LimitSettings

PRIORITIES: dict[str, int] = {"interactive": 0, "default": 1, "batch": 2}
CLASS_NAMES = tuple(PRIORITIES)


class Waiter:
    __slots__ = ("org", "priority", "tag", "seq", "future", "gone")

    def __init__(self, org: str, priority: int, future: asyncio.Future | None = None) -> None:
        self.org = org
        self.priority = priority
        self.tag = 0.0
        self.seq = 0
        self.future = future
        self.gone = False  # left (deadline, cancel, shed): skipped when popped


class FairQueue:
    """Priority, then weighted fair share between orgs; lazy removal of waiters that left."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Waiter]] = []
        self._vtime = [0.0] * len(PRIORITIES)
        self._finish: dict[tuple[int, str], float] = {}
        self._seq = itertools.count()
        self.counts = [0] * len(PRIORITIES)  # live waiters per class

    def __len__(self) -> int:
        return sum(self.counts)

    def push(self, w: Waiter, weight: float = 1.0) -> None:
        p = w.priority
        start = max(self._vtime[p], self._finish.get((p, w.org), 0.0))
        w.tag = start + 1.0 / max(weight, 1e-6)
        w.seq = next(self._seq)
        self._finish[(p, w.org)] = w.tag
        self.counts[p] += 1
        heapq.heappush(self._heap, (p, w.tag, w.seq, w))

    def pop(self) -> Waiter | None:
        heap = self._heap
        while heap:
            p, tag, _, w = heapq.heappop(heap)
            if w.gone:
                continue
            w.gone = True  # out of the queue: a later remove() does not count it twice
            self.counts[p] -= 1
            self._vtime[p] = tag
            if not heap:
                self._finish.clear()  # idle: nobody's history counts against it any more
                self._vtime = [0.0] * len(PRIORITIES)
            return w
        return None

    def remove(self, w: Waiter) -> None:
        if not w.gone:
            w.gone = True
            self.counts[w.priority] -= 1

    def ahead(self, priority: int) -> int:
        """Live waiters that go before a new request of `priority` (its class and better)."""
        return sum(self.counts[: priority + 1])

    def worst(self) -> Waiter | None:
        live = [e for e in self._heap if not e[3].gone]
        return max(live)[3] if live else None


class Gate:
    """One deployment's adaptive limit, in-flight count and fair queue."""

    def __init__(
        self,
        name: str,
        settings: LimitSettings,
        clock: Callable[[], float] = time.monotonic,
        on_shed: Callable[[str, str], None] | None = None,
        model_id: str = "",
    ) -> None:
        self.name = name
        self.model_id = model_id
        self.settings = settings
        self.limit = AdaptiveLimit(settings)
        self.inflight = 0
        self.queue = FairQueue()
        self.clock = clock
        self.on_shed = on_shed

    def reconfigure(self, settings: LimitSettings) -> None:
        """The operator changed the model's settings: keep what was learnt within the new bounds."""
        if settings != self.settings:
            self.settings = settings
            self.limit.reconfigure(settings)
            self._dispatch()

    def drain_rate(self) -> float:
        """Starts a second the deployment can take (Little's law: limit / recent latency); 0 unknown."""
        recent = self.limit.recent
        return self.limit.limit / recent if recent > 0 else 0.0

    def retry_after_s(self) -> float:
        rate = self.drain_rate()
        return (len(self.queue) + 1) / rate if rate > 0 else 1.0

    def _shed(self, reason: str, priority: int) -> errors.GatewayError:
        cls = CLASS_NAMES[priority]
        if self.on_shed is not None:
            self.on_shed(reason, cls)
        return errors.overloaded(self.name, self.retry_after_s(), cls, reason)

    async def acquire(self, org: str, priority: int, weight: float, wait_until: float) -> None:
        """Take a slot, waiting fairly until `wait_until` (this gate's clock) at most; raises `overloaded`."""
        if self.inflight < self.limit.limit and not len(self.queue):
            self.inflight += 1
            return
        now = self.clock()
        budget = wait_until - now
        rate = self.drain_rate()
        if budget <= 0 or (rate > 0 and self.queue.ahead(priority) / rate > budget):
            raise self._shed("deadline", priority)  # it could not start in time: say so now
        queue = self.queue
        if len(queue) >= self.settings.queue:
            worst = queue.worst()
            if worst is None or worst.priority <= priority:  # nobody lower to make room
                raise self._shed("queue_full", priority)
            queue.remove(worst)
            assert worst.future is not None
            if not worst.future.done():
                worst.future.set_exception(self._shed("queue_full", worst.priority))
        w = Waiter(org, priority, asyncio.get_running_loop().create_future())
        queue.push(w, weight)
        try:
            async with asyncio.timeout(budget):
                await w.future
        except BaseException as exc:
            queue.remove(w)
            fut = w.future
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release()  # granted just as the wait ended: give the slot on
            if isinstance(exc, TimeoutError):
                raise self._shed("deadline", priority) from None
            raise

    def release(self) -> None:
        self.inflight -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        queue = self.queue
        while self.inflight < self.limit.limit:
            w = queue.pop()
            if w is None:
                return
            assert w.future is not None
            if w.future.done():
                continue
            self.inflight += 1
            w.future.set_result(None)

    def sample(self, latency_s: float) -> None:
        self.limit.sample(latency_s, self.inflight, self.clock())
        self._dispatch()

    def dropped(self) -> None:
        self.limit.dropped(self.clock())


class Ticket:
    """Who is asking, for the queue: set once per request by the gateway (routing.ops.overload)."""

    __slots__ = ("org", "priority", "weight", "wait_until", "hedge", "tools")

    def __init__(
        self,
        org: str,
        priority: int,
        weight: float,
        wait_until: float | None,
        hedge: bool = False,
        tools: bool = False,
    ) -> None:
        self.org = org
        self.priority = priority
        self.weight = weight
        self.wait_until = wait_until  # X-Switchboard-Max-Wait on the gate's clock; None: the total deadline
        self.hedge = hedge  # may be hedged: its agent is not marked side_effects (docs/overload.md#hedging)
        self.tools = tools  # the request offers tools: hedged only where the model says they are safe


current: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("switchboard_overload_ticket", default=None)
_MARGIN_S = 0.05
_ANON = Ticket("", PRIORITIES["default"], 1.0, None)


class Gates:
    """Every configured deployment's gate, made on first use; `on` is False until one is configured."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.on = False
        self.clock = clock
        self.settings: dict[str, LimitSettings] = {}  # by model id
        self.gates: dict[object, Gate | None] = {}
        self.on_shed: Callable[[str, str], None] | None = None

    def configure(self, settings: Mapping[str, LimitSettings]) -> None:
        """New settings by model id (a config reload applies them in every process).

        A gate whose model keeps a limit stays, with its in-flight count, queue and learnt
        limit (new bounds clamp it); a gate whose model no longer has one is forgotten (its
        calls in flight release into it, its waiters start as they free); a model that gains
        a limit gets its gates on first use.
        """
        self.settings = dict(settings)
        kept: dict[object, Gate | None] = {}
        for key, gate in self.gates.items():
            s = None if gate is None else self.settings.get(gate.model_id)
            if gate is not None and s is not None:
                gate.reconfigure(s)
                kept[key] = gate
        self.gates = kept
        self.on = bool(settings)

    def gate(self, key: object, model_id: str, name: str) -> Gate | None:
        try:
            return self.gates[key]
        except KeyError:
            s = self.settings.get(model_id)
            g = self.gates[key] = None if s is None else Gate(name, s, self.clock, self.on_shed, model_id)
            return g

    async def enter(self, gate: Gate, deadline: float) -> None:
        """Wait for `gate` on behalf of the current request, at most until it could no longer be useful."""
        t = current.get() or _ANON
        # leave the upstream call a recent round-trip before the total deadline, and shed ahead of
        # the deadline's own timer, so the answer is `overloaded`, not `total_timeout`
        until = deadline - max(gate.limit.recent, _MARGIN_S)
        if t.wait_until is not None and t.wait_until < until:
            until = t.wait_until
        await gate.acquire(t.org, t.priority, t.weight, until)


gates = Gates()
