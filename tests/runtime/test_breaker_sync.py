"""Shared breaker transitions (docs/scale-out.md#shared-breakers): messages, apply, the probe gate.

Pure parts run against registries on simulated clocks; the last tests run two syncs
against a redis-server of their own (real pub/sub and a real SET NX PX lease).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from routing.config import live
from routing.core.breaker import BreakerKey, BreakerRegistry, State
from routing.runtime.cluster import breaker_sync
from routing.runtime.cluster.breaker_sync import CONFIRM_AFTER_S, BreakerSync, Transition, decode, encode
from tests.core.breakers import configured
from tests.core.fakes import FakeClock
from tests.e2e.harness import RedisServer

KEY = BreakerKey("mock", "chat")
BYO = BreakerKey("mock", "chat", "acme")
TH, CD = 2, 30.0
EPOCH = 1_700_000_000.0


def make(origin: str = "here:1", url: str = "redis://127.0.0.1:1/4") -> tuple[BreakerSync, FakeClock, FakeClock]:
    clock, wall = FakeClock(), FakeClock(EPOCH)
    reg = configured(BreakerRegistry(clock=clock, wall=wall), TH, CD)
    sync = BreakerSync(reg, origin, url, clock=clock, wall=wall)
    sync.install()
    return sync, clock, wall


def opened_elsewhere(
    at: float = EPOCH, left: float = 20.0, key: BreakerKey = KEY, origin: str = "there:2"
) -> Transition:
    return Transition(key, State.OPEN, at, at + left, CD, origin)


@pytest.mark.parametrize(("key", "org"), [(KEY, None), (BYO, None), (KEY, "acme")], ids=["shared", "byo", "org-view"])
def test_a_transition_survives_encode_and_decode(key, org) -> None:
    t = Transition(key, State.HALF_OPEN, EPOCH, 0.0, 12.5, "host:42", 7, org)
    assert decode(encode(t)) == t
    assert decode(encode(t).decode()) == t


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"{}",
        b'{"k": ["p"], "s": "open", "at": 1, "u": 0, "c": 1, "o": "x"}',
        b'{"k": ["p", "m"], "s": "ajar", "at": 1, "u": 0, "c": 1, "o": "x"}',
        b'{"k": ["p", "m"], "s": "open", "at": 1, "u": 0, "c": 1, "o": ""}',
    ],
)
def test_garbage_is_refused_with_a_reason(raw) -> None:
    with pytest.raises(ValueError, match="not a breaker transition"):
        decode(raw)


def test_the_channel_is_per_redis_database_and_cluster() -> None:
    from types import SimpleNamespace

    assert breaker_sync.channel_for("redis://h:6379/4") != breaker_sync.channel_for("redis://h:6379/5")
    assert breaker_sync.channel_for("redis://h:6379") == breaker_sync.channel_for("redis://h:6379/0")
    assert breaker_sync.channel_for("redis://h/4", "a") != breaker_sync.channel_for("redis://h/4", "b")

    def settings(cluster: str, name: str) -> SimpleNamespace:
        return SimpleNamespace(SWITCHBOARD_CLUSTER=cluster, DATABASES={"default": {"ENGINE": "pg", "NAME": name}})

    assert breaker_sync.cluster_of(settings("", "a")) == breaker_sync.cluster_of(settings("", "a"))
    assert breaker_sync.cluster_of(settings("", "a")) != breaker_sync.cluster_of(settings("", "b"))
    assert breaker_sync.cluster_of(settings("prod-eu", "a")) == "prod-eu"


def test_an_open_heard_from_another_process_opens_here_with_the_same_remaining_cooldown() -> None:
    sync, clock, wall = make()
    wall.advance(2.0)  # the message took 2 s to arrive: 18 s of the 20 are left
    assert sync.apply(opened_elsewhere(left=20.0))
    adm = sync.registry.admit(KEY)
    assert not adm.allowed and adm.retry_after_s == pytest.approx(18.0)
    assert sync.outbox == deque_of()  # an adopted transition is not published again


def deque_of(*items):
    from collections import deque

    return deque(items, maxlen=breaker_sync.OUTBOX_MAX)


def test_apply_is_idempotent_and_ignores_own_stale_and_unknown_messages() -> None:
    sync, clock, wall = make()
    first = opened_elsewhere()
    assert sync.apply(first)
    assert not sync.apply(first)  # the same message twice
    later = Transition(KEY, State.HALF_OPEN, EPOCH, 0.0, CD, "there:2", 1)
    assert sync.apply(later)  # the same origin's next transition, within the same clock tick
    assert not sync.apply(first)  # and its older one again
    assert not sync.apply(opened_elsewhere(origin="here:1"))  # our own
    closed = Transition(KEY, State.CLOSED, EPOCH + 5, 0.0, CD, "there:2", 2)
    assert sync.apply(closed)
    assert sync.registry.state(KEY) is State.CLOSED
    # an open older than the close (a re-publish after a reconnect) is stale
    assert not sync.apply(opened_elsewhere(at=EPOCH + 1, origin="third:3"))
    assert sync.registry.state(KEY) is State.CLOSED
    sync.known = {KEY}
    assert not sync.apply(opened_elsewhere(at=EPOCH + 9, key=BreakerKey("mock", "gone")))
    assert sync.registry.view(BreakerKey("mock", "gone")) is None


def test_local_transitions_are_queued_for_publishing_with_their_cooldown() -> None:
    sync, clock, wall = make()
    sync.connected = True
    for _ in range(TH):
        sync.registry.record_failure(KEY, 0)
    (t,) = sync.outbox
    assert (t.key, t.state, t.at, t.until, t.cooldown_s, t.origin) == (KEY, State.OPEN, EPOCH, EPOCH + CD, CD, "here:1")
    assert decode(encode(t)) == t


def test_org_views_are_shared_open_and_closed_but_probed_per_process() -> None:
    here, _, _ = make("here:1")
    there, _, wall = make("there:2")
    here.connected = True
    here.registry.admit(KEY, "beta")  # another org uses the link: acme's failures are acme's alone
    for _ in range(TH):
        here.registry.record_failure(KEY, 0, "acme")
    (opened,) = here.outbox
    assert (opened.org, opened.state, opened.until) == ("acme", State.OPEN, EPOCH + CD)
    wall.advance(1.0)
    assert there.apply(decode(encode(opened)))
    assert there.registry.org_state(KEY, "acme") is State.OPEN and there.registry.state(KEY) is State.CLOSED
    refused = there.registry.admit(KEY, "acme")
    assert not refused.allowed and refused.retry_after_s == pytest.approx(CD - 1.0)
    assert there.registry.admit(KEY, "beta").allowed
    assert not there.apply(opened)  # idempotent
    here.outbox.clear()
    here.registry.reset(KEY)
    closed = [t for t in here.outbox if t.org == "acme"]
    assert [t.state for t in closed] == [State.CLOSED]
    assert there.apply(closed[0]) and there.registry.org_state(KEY, "acme") is State.CLOSED


def test_forced_breakers_and_disconnected_processes_publish_nothing() -> None:
    sync, _, _ = make()
    for _ in range(TH):
        sync.registry.record_failure(KEY, 0)
    assert not sync.outbox  # Redis not connected: nothing queued
    sync.connected = True
    sync.registry.force_open(BreakerKey("mock", "other"), "maintenance", None)
    assert not sync.outbox


def test_the_gate_keeps_the_link_open_while_another_process_holds_the_probe_lease() -> None:
    sync, clock, _ = make()
    assert sync.apply(opened_elsewhere(left=1.0))
    clock.advance(1.0)
    # Redis down: this process probes on its own (fail-open)
    assert sync.gate(KEY, CD) == 0.0
    sync.connected = True
    # nobody known to hold the lease: ask for it, stay open a moment
    assert sync.gate(KEY, CD) == breaker_sync.LEASE_WAIT_S and KEY in sync.wanted
    refused = sync.registry.admit(KEY)
    assert not refused.allowed and sync.registry.state(KEY) is State.OPEN
    sync.leases[KEY] = (False, clock() + 7.0)  # another process won it
    refused = sync.registry.admit(KEY)
    assert not refused.allowed and refused.retry_after_s == pytest.approx(7.0)
    sync.leases[KEY] = (True, clock() + 7.0)  # this process won it
    probe = sync.registry.admit(KEY)
    assert probe.allowed and probe.probe
    sync.registry.record_success(KEY, probe.probe)
    assert KEY not in sync.leases and list(sync.releases) == [KEY]  # the lease is given back
    assert [t.state for t in sync.outbox] == [State.HALF_OPEN, State.CLOSED]


def test_a_half_open_heard_while_closed_here_keeps_the_link_open_for_the_probe_elsewhere() -> None:
    sync, clock, _ = make()
    sync.connected = True
    assert sync.apply(Transition(KEY, State.HALF_OPEN, EPOCH, 0.0, CD, "there:2"))
    assert sync.registry.state(KEY) is State.OPEN
    assert not sync.registry.admit(KEY).allowed


# ---------------------------------------------------------------- stopping, on a fake client


class SwallowingClient:
    """The Redis client's surface the sync uses; `publish` blocks until cancelled and then returns
    normally, as redis-py's can when its task is cancelled mid-call (the cancellation is lost)."""

    def __init__(self) -> None:
        self.publishing = asyncio.Event()
        self.closed = False

    def pubsub(self, **_: object) -> SwallowingClient:
        return self

    async def subscribe(self, channel: str) -> None:
        return None

    async def get_message(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    async def ping(self) -> bool:
        return True

    async def publish(self, channel: str, data: bytes) -> int:
        self.publishing.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass  # swallowed
        return 1

    def pipeline(self, transaction: bool = True) -> SwallowingClient:
        return self

    async def __aenter__(self) -> SwallowingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str):  # a pipeline's queued commands (hset, hdel, expire, hgetall)
        return lambda *args, **kwargs: None

    async def execute(self) -> list:
        return []

    async def aclose(self) -> None:
        self.closed = True


async def test_a_cancelled_sync_stops_even_when_a_client_call_swallows_the_cancellation() -> None:
    """Before, the writer kept looping after a publish swallowed its cancellation, so the session's
    teardown (which waits for the writer) never ended: the process's stop, or a test's, hung."""
    sync, _, _ = make()
    sync.timeout_s = 60.0  # no Redis timeout gets involved: the cancellation alone must stop it
    client = SwallowingClient()
    sync._client = lambda: client
    for _ in range(TH):
        sync.registry.record_failure(KEY, 0)  # an open breaker: published once connected
    task = asyncio.create_task(sync.run())
    try:
        async with asyncio.timeout(5):
            await client.publishing.wait()
        task.cancel()
        async with asyncio.timeout(5):
            await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() and client.closed and not sync.connected
    finally:
        task.cancel()


# ---------------------------------------------------------------- real Redis, two syncs in one loop


@pytest.fixture
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


async def stopped(*tasks: asyncio.Task, within: float = 10.0) -> None:
    """Cancel the syncs and wait for them, at most `within` seconds: a sync that does not stop fails
    its test here, by name, instead of hanging the teardown (docs/testing.md#hangs)."""
    for task in tasks:
        task.cancel()
    try:
        async with asyncio.timeout(within):
            await asyncio.gather(*tasks, return_exceptions=True)
    except TimeoutError:
        raise AssertionError(f"a breaker sync did not stop within {within} s of its cancellation") from None


async def wait_until(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_two_processes_share_an_open_and_take_one_probe_lease(redis_server, caplog) -> None:
    one, _, _ = make("one:1", redis_server.url)
    two, clock2, _ = make("two:2", redis_server.url)
    for sync in (one, two):
        sync.clock = sync.registry._clock = asyncio.get_running_loop().time  # real time: leases expire for real
        configured(sync.registry, TH, 0.3)
    tasks = [asyncio.create_task(s.run()) for s in (one, two)]
    try:
        await wait_until(lambda: one.connected and two.connected)
        for _ in range(TH):
            one.registry.record_failure(KEY, 0)
        await wait_until(lambda: two.registry.state(KEY) is State.OPEN)
        assert not two.registry.admit(KEY).allowed
        await asyncio.sleep(0.35)  # the cooldown is over in both
        first = [one.registry.admit(KEY).allowed, two.registry.admit(KEY).allowed]
        assert first == [False, False]  # both ask for the lease
        await wait_until(lambda: KEY in one.leases and KEY in two.leases)
        admitted = [one.registry.admit(KEY), two.registry.admit(KEY)]
        probes = [a for a in admitted if a.allowed]
        assert len(probes) == 1 and probes[0].probe  # one probe for the cluster
        winner = one if admitted[0].allowed else two
        other = two if winner is one else one
        winner.registry.record_success(KEY, probes[0].probe)
        await wait_until(lambda: other.registry.state(KEY) is State.CLOSED)
    finally:
        await stopped(*tasks)


async def test_redis_down_means_local_breakers_one_log_line_and_the_gauge(redis_server, caplog) -> None:
    events: list[tuple[str, bool]] = []
    live.degraded_listeners.append(lambda c, f: events.append((c, f)))
    one, _, _ = make("one:1", redis_server.url)
    one.timeout_s = 0.2
    task = asyncio.create_task(one.run())
    try:
        await wait_until(lambda: one.connected)
        caplog.set_level(logging.WARNING, logger="switchboard.breakers")
        redis_server.stop()
        await wait_until(lambda: one.degraded, timeout=5)
        await asyncio.sleep(2.0)  # several reconnect attempts fail meanwhile
        assert one.gate(KEY, CD) == 0.0  # fail-open: probe locally
        assert sum("unreachable" in r.message for r in caplog.records) == 1
        redis_server.start()
        await wait_until(lambda: one.connected, timeout=10)
        assert ("redis", True) in events and events[-1] == ("redis", False)
    finally:
        live.degraded_listeners.pop()
        await stopped(task)


async def test_an_org_alone_here_but_not_in_the_cluster_does_not_open_the_link(redis_server) -> None:
    """docs/resilience.md#org-views across processes: beta is served by process two while acme's
    bodies fail on process one. Process one alone would call acme the link's only user; it asks
    the cluster first, and the link stays closed. On a link nobody else uses, it opens everywhere."""
    one, _, _ = make("one:1", redis_server.url)
    two, _, _ = make("two:2", redis_server.url)
    for sync in (one, two):
        sync.clock = sync.registry._clock = asyncio.get_running_loop().time
    alone = BreakerKey("mock", "alone")
    tasks = [asyncio.create_task(s.run()) for s in (one, two)]
    try:
        await wait_until(lambda: one.connected and two.connected)
        assert two.registry.admit(KEY, "beta").allowed  # beta, on process two only
        for key in (KEY, alone):
            for _ in range(TH):
                adm = one.registry.admit(key, "acme")
                one.registry.record_failure(key, adm.probe, "acme")
            assert one.registry.org_state(key, "acme") is State.OPEN
            assert one.registry.state(key) is State.CLOSED  # not decided on this process's knowledge alone
        await wait_until(lambda: two.registry.state(alone) is State.OPEN, timeout=CONFIRM_AFTER_S + 3)
        assert one.registry.state(alone) is State.OPEN  # acme is that link's only user: an outage
        assert one.registry.state(KEY) is State.CLOSED and not one.outages  # beta uses KEY: acme's alone
        assert two.registry.admit(KEY, "beta").allowed
    finally:
        await stopped(*tasks)
