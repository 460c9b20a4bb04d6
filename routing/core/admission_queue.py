"""The bounded, fair waiting queue in front of one deployment (docs/overload.md#the-queue).

A request that finds its deployment at the adaptive limit (routing.core.concurrency) waits
here, ordered by priority class first, then by virtual-time fair queueing between
organisations within a class: each org's next request is tagged `max(vtime, org's last tag)
+ 1/weight` and the smallest tag goes first, so an org that floods the queue only pushes
its own requests back. A waiter waits under its own `asyncio.timeout`: whatever the
queue's bookkeeping does, it never holds a request past its deadline. A request is shed
with 503 `overloaded` and a Retry-After from the drain rate as soon as the queue predicts
it cannot start in time: when it arrives (its place in line / the drain rate, against its
deadline), and again while it waits, whenever something pushes it back (a request of a
higher class or of a fairer org arriving, the limit falling); its own timeout is only
the last resort. A request that enters again after a failed call (a retry) goes to the
front of its class: it has waited its turn already.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from routing.core import errors
from routing.core.concurrency import AdaptiveLimit, LimitSettings
from routing.core.failures import FailureKind, UpstreamFailure

PRIORITIES: dict[str, int] = {"interactive": 0, "default": 1, "batch": 2}
CLASS_NAMES = tuple(PRIORITIES)


SWEEP_S = 0.01  # at most one re-check of the waiters' predicted starts per gate per this long
ARRIVAL_S = 1.0  # the classes' arrival rates are averaged over about this long
# Before any call has ended at a gate there is no drain rate to predict from: each call in flight is taken to
# hold its slot this long (a guess that errs long for a fast upstream, so a cold gate does not let everyone wait
# on nothing and shed them all at their deadlines); the first measured latency re-checks whoever waits on it.
COLD_HOLD_S = 1.0
# A request waits only if predicted to start within this share of its time: the rest is margin for the estimates'
# noise (the higher classes' arrivals come in bursts), so a request let in to wait is rarely shed later, slowly,
# after all. Measured on the two-process overload scenario (docs/overload.md#capacity-refusals): at 0.7 one shed
# in ten came after a wait (shed p99 0.65-0.77 s), at 0.4 0.2-0.46 s, at 0.3 20-38 ms, for 2-3 % of goodput.
ADMIT_SHARE = 0.3


class Waiter:
    __slots__ = ("org", "priority", "tag", "seq", "future", "gone", "until")

    def __init__(
        self, org: str, priority: int, future: asyncio.Future | None = None, until: float = float("inf")
    ) -> None:
        self.org = org
        self.priority = priority
        self.tag = 0.0
        self.seq = 0
        self.future = future
        self.gone = False  # left (deadline, cancel, shed): skipped when popped
        self.until = until  # the latest start that is still useful, on the gate's clock


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

    def push(self, w: Waiter, weight: float = 1.0, front: bool = False) -> None:
        """Queue `w` in fair order within its class; `front`: ahead of its class (a retry keeps its turn)."""
        p = w.priority
        w.seq = next(self._seq)
        if front:
            w.tag = self._vtime[p]
        else:
            start = max(self._vtime[p], self._finish.get((p, w.org), 0.0))
            w.tag = start + 1.0 / max(weight, 1e-6)
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

    def ahead(self, priority: int, front: bool = False) -> int:
        """Live waiters that go before a new request of `priority` (its class and better; `front`: better only)."""
        return sum(self.counts[: priority if front else priority + 1])

    def ordered(self) -> list[Waiter]:
        """The live waiters in the order they will start."""
        return [e[3] for e in sorted(self._heap) if not e[3].gone]

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
        ident: str = "",
    ) -> None:
        self.name = name
        self.model_id = model_id
        self.ident = ident or name  # the same in every process: its seats' name (docs/overload.md#processes)
        self.settings = settings
        self.limit = AdaptiveLimit(settings)
        self.inflight = 0
        self.queue = FairQueue()
        self.clock = clock
        self.on_shed = on_shed
        self._dirty = False  # something may have pushed waiters back since the last sweep
        self._swept_at = -1e18
        self._later: asyncio.TimerHandle | None = None  # a sweep put off by the SWEEP_S bound
        self._freed_at: float | None = None  # the last slot freed while requests waited
        self._hold = 0.0  # how long a slot is held, measured while requests wait; 0 unknown
        self._arrivals = [0.0] * len(PRIORITIES)  # recent arrivals a second, per class
        self._arrived_at = [0.0] * len(PRIORITIES)
        self.refused_seen: int | None = None  # the other processes' refusals at the last seats round
        self.level_seen = 0.0  # this gate's limit then

    def reconfigure(self, settings: LimitSettings) -> None:
        """The operator changed the model's settings: keep what was learnt within the new bounds."""
        if settings != self.settings:
            self.settings = settings
            self.limit.reconfigure(settings)
            self._dispatch()

    def reshare(self, settings: LimitSettings, learnt: bool = False) -> None:
        """This process's share of the cluster's bounds changed: the learnt limit keeps its ratio to it;
        `learnt` (the seats moved with demand): a limit below its share keeps what it learnt."""
        if settings != self.settings:
            lower = settings.max_limit < self.settings.max_limit
            self.settings = settings
            self.limit.rescale(settings, learnt)
            self._dirty = self._dirty or lower  # the waiters' predicted starts may have moved back
            self._dispatch()

    def drain_rate(self) -> float:
        """Starts a second the deployment can take; 0 unknown.

        Little's law: the limit over how long a slot is held. The hold is measured while
        requests wait (the interval between slots freed then, times the limit), so it counts
        everything a slot is held for: a whole stream, the gateway's own time around the
        call. Before any wait, the upstream's recent latency stands in for it.
        """
        hold = max(self._hold, self.limit.recent)  # a slot is held at least a round-trip
        return self.limit.limit / hold if hold > 0 else 0.0

    def wait_s(self, position: int, rate: float, priority: int) -> float:
        """Predicted wait of a request of `priority` `position`-th in line (1: next): the calls that must
        end before it can start (those beyond the free slots), at the share of the drain rate that the
        higher classes' arrivals leave it (they will keep going ahead of it)."""
        free = max(self.limit.limit - self.inflight, 0)
        if position <= free:
            return 0.0
        if rate <= 0:  # nothing measured yet
            return (position - free) * COLD_HOLD_S / max(self.limit.limit, 1)
        left = rate - sum(self._arrival_rate(p) for p in range(priority))
        return (position - free) / max(left, rate * 0.01)

    def _arrival_rate(self, priority: int) -> float:
        """Recent arrivals a second of one class (decaying over ARRIVAL_S)."""
        return self._arrivals[priority] * math.exp((self._arrived_at[priority] - self.clock()) / ARRIVAL_S)

    def _arrived(self, priority: int) -> None:
        now = self.clock()
        decayed = self._arrivals[priority] * math.exp((self._arrived_at[priority] - now) / ARRIVAL_S)
        self._arrivals[priority], self._arrived_at[priority] = decayed + 1.0 / ARRIVAL_S, now

    def retry_after_s(self) -> float:
        rate = self.drain_rate()
        return (len(self.queue) + 1) / rate if rate > 0 else 1.0

    def _shed(self, reason: str, priority: int) -> errors.GatewayError:
        cls = CLASS_NAMES[priority]
        if self.on_shed is not None:
            self.on_shed(reason, cls)
        return errors.overloaded(self.name, self.retry_after_s(), cls, reason)

    async def acquire(self, org: str, priority: int, weight: float, wait_until: float, front: bool = False) -> None:
        """Take a slot, waiting fairly until `wait_until` (this gate's clock) at most; raises `overloaded`
        at once when the queue predicts it cannot start by then. `front`: a retry, ahead of its class."""
        self._arrived(priority)
        if self.inflight < self.limit.limit and not len(self.queue):
            self.inflight += 1
            return
        now = self.clock()
        budget = wait_until - now
        rate = self.drain_rate()
        position = self.queue.ahead(priority, front) + 1
        if budget <= 0 or self.wait_s(position, rate, priority) > budget * ADMIT_SHARE:
            raise self._shed("deadline", priority)  # it could not start in time: say so now
        queue = self.queue
        if len(queue) >= self.settings.queue:
            worst = queue.worst()
            if worst is None or worst.priority <= priority:  # nobody lower to make room
                raise self._shed("queue_full", priority)
            self._evict(worst, "queue_full")
        w = Waiter(org, priority, asyncio.get_running_loop().create_future(), wait_until)
        queue.push(w, weight, front)
        self._dirty = True  # it may have gone ahead of others (a higher class, a fairer org)
        self._sweep(now)
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

    def _sweep_later(self) -> None:
        self._later = None
        self._sweep(self.clock(), due=True)

    def _evict(self, w: Waiter, reason: str) -> None:
        self.queue.remove(w)
        assert w.future is not None
        if not w.future.done():
            w.future.set_exception(self._shed(reason, w.priority))

    def _sweep(self, now: float, due: bool = False) -> None:
        """Shed at once the waiters that, pushed back, can no longer start before their deadline.

        At most once per SWEEP_S (a sweep sorts the queue); one asked for sooner runs SWEEP_S
        later. The waiters' own timeouts remain the last resort."""
        if not self._dirty or not len(self.queue):
            return
        if now - self._swept_at < SWEEP_S and not due:
            if self._later is not None:
                return
            try:
                self._later = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep_later)
                return
            except RuntimeError:  # a caller outside the event loop (a settlement's callback): sweep now
                pass
        self._dirty, self._swept_at = False, now
        rate = self.drain_rate()
        gone = 0
        for position, w in enumerate(self.queue.ordered(), 1):
            if now + self.wait_s(position - gone, rate, w.priority) > w.until:
                self._evict(w, "deadline")
                gone += 1

    def release(self) -> None:
        self.inflight -= 1
        if len(self.queue):  # a slot freed for someone waiting: one start of the drain
            now = self.clock()
            if self._freed_at is not None:
                hold = (now - self._freed_at) * max(self.limit.limit, 1)  # all slots busy: limit x the gap
                # Never seeded below the round-trip (a slot is held at least that long): calls that began together
                # end together, and a first gap of 1 ms read as a hold of 5 ms put the drain at 10x its rate for
                # hundreds of starts, letting batch requests wait for slots that were never going to come.
                self._hold = 0.99 * self._hold + 0.01 * hold if self._hold else max(hold, self.limit.recent)
            self._freed_at = now
        else:
            self._freed_at = None  # nobody waiting: the next wait measures afresh
        self._dispatch()

    def _dispatch(self) -> None:
        queue = self.queue
        while self.inflight < self.limit.limit:
            w = queue.pop()
            if w is None:
                break
            assert w.future is not None
            if w.future.done():
                continue
            self.inflight += 1
            w.future.set_result(None)
        if self._dirty:
            self._sweep(self.clock())

    def sample(self, latency_s: float) -> None:
        before, measured = self.limit.limit, self.limit.recent > 0
        self.limit.sample(latency_s, self.inflight, self.clock())
        if self.limit.limit < before or not measured:
            self._dirty = True  # a lower limit (latency), or the first measure: the waiters' predicted starts moved
        self._dispatch()

    def heard(self, now: float, refusals: int, best: int) -> None:
        """What the seats round says of the other processes on this gate: `refusals` (their running count)
        and `best` (the most important class waiting among them); see Gates.elsewhere. A limit lowered here
        re-sweeps the queue at once (a waiter that can no longer start in time is told now, not at its
        deadline); one let grow starts waiters."""
        before = self.limit.limit
        refused = self.refused_seen is not None and refusals > self.refused_seen
        if refused:
            self.limit.refused_elsewhere(now, refusals - self.refused_seen, self.level_seen)
        mine = self.best_waiting()
        if best < mine < len(PRIORITIES) and self.inflight >= self.limit.limit - 1:
            self.limit.lend(now)
        elif mine < best and not refused:
            self.limit.unhold()
        self.refused_seen, self.level_seen = refusals, self.limit.level
        if self.limit.limit < before:
            self._dirty = True  # the waiters' predicted starts moved back
        self._dispatch()

    def best_waiting(self) -> int:
        """The most important class with a request waiting here; len(PRIORITIES) when none waits."""
        return next((p for p, n in enumerate(self.queue.counts) if n > 0), len(PRIORITIES))

    def dropped(self) -> None:
        self.limit.dropped(self.clock())
        self._dirty = True  # a lower limit: the waiters' predicted starts moved back


class PriorityTicket:
    """Who is asking, for the queue: made once per request by the gateway (routing.runtime.overload) and
    carried on the request's Call, then its walk, to every gate it enters."""

    __slots__ = ("org", "priority", "weight", "wait_until", "hedge", "tools", "discard", "entered")

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
        # closes a result that lost a hedge race (a stream's, set by the stream path); None: a stream is
        # never hedged
        self.discard: Callable[[Any], Awaitable[None]] | None = None
        self.entered = False  # has taken a slot once: a retry goes to the front of its class


class Shed(UpstreamFailure):
    """A gate shed the request (docs/overload.md#shedding). Nothing was sent upstream: no breaker is
    charged and the link is not retried, but the chain moves on to its next model as after an
    upstream 429 (when `rate_limited` is in the model's fallback_on); a chain that ends on a shed
    answers the 503 `overloaded` with its Retry-After."""

    __slots__ = ("error",)

    def __init__(self, error: errors.GatewayError) -> None:
        retry = (error.headers or {}).get("Retry-After")
        super().__init__(FailureKind.UPSTREAM_429, error.message, 503, float(retry) if retry else None)
        self.error = error

    @property
    def is_retryable(self) -> bool:
        return False

    @property
    def is_provider_fault(self) -> bool:
        return False

    @property
    def charges_link(self) -> bool:
        return False

    @property
    def is_capacity(self) -> bool:
        return False  # the gate's own refusal: no upstream said anything

    @property
    def label(self) -> str:
        return "overloaded"

    @property
    def fallback_reason(self) -> str:
        return "overloaded"

    def to_gateway_error(self) -> errors.GatewayError:
        return self.error


_MARGIN_S = 0.05
_ANON = PriorityTicket("", PRIORITIES["default"], 1.0, None)


class Gates:
    """Every configured deployment's gate, made on first use; `on` is False until one is configured."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.on = False
        self.clock = clock
        self.settings: dict[str, LimitSettings] = {}  # by model id, as configured (the cluster's figures)
        self.gates: dict[object, Gate | None] = {}
        self.on_shed: Callable[[str, str], None] | None = None
        # Serving processes sharing the deployments (the shared limits' heartbeat, docs/overload.md#processes):
        # each gate's bounds are this process's share of the configured ones, an even share until the
        # cluster's seats (the shared limits' seats script) give it one by demand.
        self.processes = 1
        # by gate ident (its breaker key: a model's shared deployment and an org's own credentials for it
        # are two gates, and two pools of seats): this process's seats of the cluster's max
        self.seats: dict[str, int] = {}
        self.seated = False  # Redis grants seats: a new gate starts with none and asks for its share at once
        self.on_new: Callable[[], None] | None = None  # wakes the shared limits' round (a gate made while seated)

    def split(self, processes: int) -> None:
        """`processes` now serve (off the request path, from the heartbeat): bounds become a share each."""
        processes = max(1, processes)
        if processes != self.processes:
            self.processes = processes
            self._reshare()

    def seat(self, seats: Mapping[str, int] | None) -> None:
        """The cluster's seats by gate ident (off the request path, from the shared limits' round). None:
        Redis is unreachable, every gate goes back to an even share (no process is left with the one
        seat it had while idle)."""
        if seats is None:
            if self.seated or self.seats:
                self.seated = False
                self.seats.clear()
                self._reshare()
            return
        self.seated = True
        if seats:
            self.seats.update(seats)
            self._reshare(learnt=True)

    def hungry(self) -> bool:
        """A gate has requests waiting: its seats are worth asking again soon."""
        return any(gate is not None and len(gate.queue) for gate in self.gates.values())

    def claims(self) -> list[tuple[str, int, int, int, int, int]]:
        """Per gate: (ident, the cluster's max, demand = in flight + waiting, in flight, refusals seen here,
        the most important class waiting here), for the seats round."""
        return [
            (g.ident, s.max_limit, g.inflight + len(g.queue), g.inflight, g.limit.refused, g.best_waiting())
            for _, g, s in self._configured()
        ]

    def elsewhere(self, news: Mapping[str, tuple[int, int]]) -> None:
        """What the seats round says of the other live processes, by gate ident: (their refusals, the most
        important class waiting among them) (docs/overload.md#processes).

        Refusals: a gate whose others' count grew since the last round gives back what its limit grew
        since then and holds (routing.core.concurrency.AdaptiveLimit.refused_elsewhere). Priority: each
        process queues by class, but only what reaches it; a process whose limit is in use, with requests
        waiting but none as important as one waiting elsewhere, lends one call a round, and the process
        with the cluster's most important waiters probes into it at once, so an interactive request does
        not wait in one process while another starts batch calls."""
        now = self.clock()
        for _, gate, _s in self._configured():
            seen = news.get(gate.ident)
            if seen is not None:
                gate.heard(now, *seen)

    def _configured(self) -> list[tuple[object, Gate, LimitSettings]]:
        """(key, gate, its model's settings) of every gate whose model has a limit configured."""
        out = []
        for key, gate in self.gates.items():
            s = None if gate is None else self.settings.get(gate.model_id)
            if gate is not None and s is not None:
                out.append((key, gate, s))
        return out

    def _reshare(self, learnt: bool = False) -> None:
        for _, gate, s in self._configured():
            gate.reshare(self._share(s, self.seats.get(gate.ident)), learnt)

    def _share(self, s: LimitSettings, seats: int | None = None) -> LimitSettings:
        """This process's bounds: `max` its seats when the cluster gave some, else the configured initial and
        max split evenly (rounded up, so the cluster may run up to one call per process over a max that does
        not divide); the min never above the max."""
        n = self.processes
        if seats is None:
            if n == 1:
                return s
            seats = -(-s.max_limit // n)
        top = max(0, min(seats, s.max_limit))
        initial = min(-(-s.initial // n), top)
        if (top, initial) == (s.max_limit, s.initial) and s.min_limit <= top:
            return s
        return replace(s, initial=initial, max_limit=top, min_limit=min(s.min_limit, top))

    def configure(self, settings: Mapping[str, LimitSettings]) -> None:
        """New settings by model id (a config reload applies them in every process).

        A gate whose model keeps a limit stays, with its in-flight count, queue and learnt
        limit (new bounds clamp it); a gate whose model no longer has one is forgotten (its
        calls in flight release into it, its waiters start as they free); a model that gains
        a limit gets its gates on first use.
        """
        self.settings = dict(settings)
        kept: dict[object, Gate | None] = {}
        for key, gate, s in self._configured():
            gate.reconfigure(self._share(s, self.seats.get(gate.ident)))
            kept[key] = gate
        self.gates = kept
        self.on = bool(settings)

    def gate(self, key: object, model_id: str, name: str) -> Gate | None:
        try:
            return self.gates[key]
        except KeyError:
            return self._make(key, model_id, name)

    def _make(self, key: object, model_id: str, name: str) -> Gate | None:
        """A deployment's first call in this process: its gate; while seated, with the seats it had or none
        (its first requests wait) and the round woken at once to ask for its share of what the others leave."""
        s = self.settings.get(model_id)
        if s is None:
            self.gates[key] = None
            return None
        ident = "/".join(map(str, key)) if isinstance(key, tuple) else name  # a deployment's breaker key
        seats = self.seats.get(ident)
        if seats is None and self.seated:
            seats = 0
            if self.on_new is not None:
                self.on_new()
        g = self.gates[key] = Gate(name, self._share(s, seats), self.clock, self.on_shed, model_id, ident)
        return g

    async def enter(self, gate: Gate, deadline: float, ticket: PriorityTicket | None = None) -> None:
        """Wait for `gate` on behalf of the request `ticket` is for (None: one the gateway gave no class), at
        most until it could no longer be useful."""
        t = ticket or _ANON
        # leave the upstream call a recent round-trip before the total deadline, and shed ahead of
        # the deadline's own timer, so the answer is `overloaded`, not `total_timeout`
        until = deadline - max(gate.limit.recent, _MARGIN_S)
        if t.wait_until is not None and t.wait_until < until:
            until = t.wait_until
        try:
            await gate.acquire(t.org, t.priority, t.weight, until, t.entered)
        except errors.GatewayError as e:
            raise Shed(e) from None
        if t is not _ANON:
            t.entered = True
