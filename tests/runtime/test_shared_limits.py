"""Cluster leases of budgets and rate limits on a real Redis, two "processes" in one test (docs/limits.md#shared).

Each process is its own Budgets + Limiter + Syncer; the rounds are driven by hand
(`sync_once`, what the background task runs every interval), the wall clock is injected.
"""

from __future__ import annotations

import uuid

import pytest

from routing.config import live
from routing.core.budget_accounts import Budgets, Exhausted
from routing.core.limiter import Limiter, Refused
from routing.runtime.cluster.shared_limits import Syncer, account_key
from tests.e2e.harness import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 1_780_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def cluster(redis_url):
    clock = Clock()
    made: list[Syncer] = []
    namespace = uuid.uuid4().hex[:12]  # this test's cluster: no marker, lock or process list of another test

    def process(seed_wait_s: float = 0) -> Syncer:
        syncer = Syncer(Budgets(clock), Limiter(), redis_url, clock=clock, namespace=namespace, seed_wait_s=seed_wait_s)
        syncer.connect()
        made.append(syncer)
        return syncer

    yield clock, process
    for syncer in made:
        await syncer.close()


def org_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


async def admit_budget(p: Syncer, org: str, budget, amount: float):
    """What the request path does: admit; when the lease is short, one round, then once more."""
    try:
        return p.budgets.admit(org, None, "bot", budget, amount)
    except Exhausted:
        await p.sync_once()
    try:
        return p.budgets.admit(org, None, "bot", budget, amount)
    except Exhausted:
        return None


async def admit_budget_org(p: Syncer, org: str, amount: float):
    """`admit_budget` on the org's budget of $0.01 (total)."""
    try:
        return p.budgets.admit(org, (0.01, "total"), "bot", None, amount)
    except Exhausted:
        await p.sync_once()
    try:
        return p.budgets.admit(org, (0.01, "total"), "bot", None, amount)
    except Exhausted:
        return None


async def test_a_budget_leased_by_two_processes_never_admits_more_than_it_holds(cluster):
    clock, process = cluster
    p1, p2 = process(), process()
    org, budget = org_name(), (1.0, "day")
    admitted = 0
    for p in (p1, p2) * 4:  # without sharing each would admit 3 worst cases of $0.3
        hold = await admit_budget(p, org, budget, 0.3)
        if hold is not None:
            admitted += 1
            hold.settle(0.3)
    # At most what fits ($0.9); at most one lease ($0.3, held by the other process) refused too early.
    assert 2 <= admitted <= 3
    counter = int(await p1._redis.get(account_key(p1.budgets.find(("agent", org, "bot")), p1.prefix))) / 1e6
    assert counter <= 1.0

    clock.now += 3  # idle leases are given back, so the whole budget can be used
    await p1.sync_once()
    await p2.sync_once()
    while (hold := await admit_budget(p1, org, budget, 0.3)) is not None:
        admitted += 1
        hold.settle(0.3)
    assert admitted == 3
    await p1.sync_once()
    account = p1.budgets.find(("agent", org, "bot"))
    assert account.spend() == pytest.approx(0.9)  # the cluster's spend, as this process sees it


async def test_spend_beyond_the_lease_is_owed_to_the_counter(cluster):
    _, process = cluster
    p1, p2 = process(), process()
    org, budget = org_name(), (1.0, "month")
    hold = await admit_budget(p1, org, budget, 0.1)
    account = p1.budgets.find(("agent", org, "bot"))
    assert account.lease == pytest.approx(0.05)  # the round it waited for leased its $0.1 and 5 % of $1 ahead
    hold.settle(0.5)  # the estimate was far short: $0.35 beyond what it reserved and the lease
    assert account.owed == pytest.approx(0.35) and account.lease == 0
    await p1.sync_once()
    assert account.owed == 0
    assert account.cluster >= 0.5
    # p2 sees what is left: $1 - $0.5 spent (- what p1 leases ahead, if it still does so near the end).
    assert await admit_budget(p2, org, budget, 0.55) is None
    assert await admit_budget(p2, org, budget, 0.3) is not None


async def test_after_an_idle_give_back_one_round_leases_for_the_agent_and_its_org(cluster):
    """Both budgets short at once: the first request after a quiet spell waits one round, not one per budget."""
    clock, process = cluster
    p = process()
    org, budget = org_name(), (1000.0, "month")

    async def admit():
        try:
            return p.budgets.admit(org, budget, "bot", budget, 0.01)
        except Exhausted:
            await p.sync_once()  # the one round the request path waits for
        try:
            return p.budgets.admit(org, budget, "bot", budget, 0.01)
        except Exhausted:
            return None

    (await admit()).settle(0.01)
    clock.now += 3  # idle: both leases are given back
    await p.sync_once()
    assert p.budgets.find(("agent", org, "bot")).lease == 0
    assert p.budgets.find(("org", org)).lease == 0
    hold = await admit()
    assert hold is not None  # refused (402) when only the agent's lease came back from the round
    hold.settle(0.01)


async def test_one_round_leases_every_short_share_a_request_needs(cluster):
    """rpm and tpm both short (a first request, or after an idle give-back) and the request's tokens
    above the usual 5 % share: the one round the request waits for leases what it needs on both."""
    clock, process = cluster
    p = process()
    org, limits = org_name(), (100, 10_000)

    async def admit():
        try:
            return p.limiter.admit(org, None, "bot", limits, lambda: 1_500)
        except Refused:
            await p.sync_once()  # the one round the request path waits for
        try:
            return p.limiter.admit(org, None, "bot", limits, lambda: 1_500)
        except Refused:
            return None

    assert await admit() is not None  # 429 when only the rpm share was asked for what it needed
    clock.now += 3
    await p.sync_once()
    assert await admit() is not None


async def test_a_cluster_rpm_bucket_holds_across_two_processes(cluster):
    _, process = cluster
    p1, p2 = process(), process()
    org = org_name()
    limits = (10, None)
    admitted = 0
    for p in (p1, p2) * 10:
        for attempt in range(2):
            try:
                p.limiter.admit(org, None, "bot", limits, lambda: 0)
            except Refused as refused:
                refused.bucket.need = max(refused.bucket.need, 1)
                if attempt == 0:
                    await p.sync_once()
                continue
            admitted += 1
            break
    # The cluster bucket holds 10 (plus what refills in the test's fraction of a second); shares are 1 each.
    assert 10 <= admitted <= 12, admitted
    ticket_headers = None
    try:
        p1.limiter.admit(org, None, "bot", limits, lambda: 0)
    except Refused as refused:
        ticket_headers = dict(refused.ticket.headers())
    assert ticket_headers is not None
    assert ticket_headers[b"x-ratelimit-limit-requests"] == b"10"
    assert int(ticket_headers[b"x-ratelimit-remaining-requests"]) <= 1


async def test_redis_down_each_process_carries_on_with_an_even_share_and_recovers(cluster):
    clock, process = cluster
    p1, p2 = process(), process()
    org, budget = org_name(), (1.0, "day")
    (await admit_budget(p1, org, budget, 0.1)).settle(0.1)
    (await admit_budget(p2, org, budget, 0.1)).settle(0.1)
    await p1.sync_once()
    assert p1.processes >= 2
    p1.processes = 2  # other tests' processes may still be listed as alive
    account = p1.budgets.find(("agent", org, "bot"))
    counter_before = account.cluster

    live_redis = p1._redis
    p1.redis_url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    p1.connect()
    await p1.sync_once()
    assert p1.degraded
    assert live.degraded["redis"] is True  # switchboard_degraded{component="redis"}
    # An even share of what was left, on top of the lease it held: never a refusal because Redis is down.
    assert account.left() == pytest.approx(account.lease)
    assert account.left() >= (1.0 - counter_before) / 2 - 1e-9
    admitted = 0
    while (hold := p1.budgets.admit(org, None, "bot", budget, 0.05)) is not None:
        admitted += 1
        hold.settle(0.05)
        if admitted == 4:
            break
    assert admitted == 4

    await p1.close()
    p1._redis = live_redis  # Redis is back
    p1._lease = live_redis.register_script(p1._lease.script)
    p1._take = live_redis.register_script(p1._take.script)
    await p1.sync_once()
    assert not p1.degraded
    assert live.degraded["redis"] is False
    assert account.owed == 0
    # The outage's spend ($0.2) is in the counter now; the unused share went back.
    clock.now += 3
    await p1.sync_once()
    counter = int(await live_redis.get(account_key(account, p1.prefix))) / 1e6
    assert 0.4 - 1e-6 <= counter <= 0.4 + 0.1 + 1e-6  # spend $0.4, and p2 may still hold its $0.1 lease


async def test_the_first_limited_request_of_a_process_waits_for_a_syncer_not_yet_begun(cluster):
    """daphne sends no lifespan: the first request spawns the syncer and is admitted before it runs."""
    import asyncio

    from routing.runtime.cluster import shared_limits

    _, process = cluster
    p = process()
    org, limits = org_name(), (10, None)
    task = asyncio.get_running_loop().create_task(p.run())  # spawned, not begun
    shared_limits.install(p)
    try:
        with pytest.raises(Refused):
            p.limiter.admit(org, None, "bot", limits, lambda: 0)  # no share yet
        assert shared_limits.wake(p)  # not refused for want of a running syncer
        assert await shared_limits.wait_round(p, 2.0)
        p.limiter.admit(org, None, "bot", limits, lambda: 0)
    finally:
        shared_limits.install(None)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_process_stopped_while_rebuilding_frees_the_lock_for_another_at_once(cluster):
    """docs/limits.md#reseed: a process stopping (a rolling deploy) during its rebuild of an empty Redis frees
    the rebuild lock, so another process rebuilds at its next round; before, every process granted no
    budget lease until the lock expired (15 s of false `budget_exceeded`)."""
    import asyncio

    _, process = cluster
    stopping, other = process(seed_wait_s=30.0), process()  # the first is still waiting for records when stopped
    await other.hello()  # alive, and never reports its records written: the rebuild waits for it
    org, budget = org_name(), (1.0, "day")
    with pytest.raises(Exhausted):
        stopping.budgets.admit(org, None, "bot", budget, 0.1)  # a budget to lease: its round finds no marker
    task = asyncio.get_running_loop().create_task(stopping.run())
    lock = stopping.prefix + "seeding"
    for _ in range(200):  # bounded: the round and the rebuild's lock come within a few ms
        if await other._redis.get(lock) is not None:
            break
        await asyncio.sleep(0.01)
    assert await other._redis.get(lock) == stopping.id.encode()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await other._redis.get(lock) is None
    hold = await admit_budget(other, org, budget, 0.1)  # rebuilt by the other process in its own round
    assert hold is not None
    hold.settle(0.1)


async def test_a_rebuild_that_finds_the_counters_rebuilt_meanwhile_frees_its_lock_at_once(cluster):
    """docs/limits.md#reseed: a process whose round saw no marker takes the rebuild lock, then finds another
    process rebuilt the counters meanwhile; it must free the lock, or the next rebuild (Redis emptied again)
    waits for the lock to expire, every process granting no budget lease until then (found by mutation
    testing: a missing `await` on the delete)."""
    _, process = cluster
    late, other = process(), process()
    lock, marker = late.prefix + "seeding", late.prefix + "epoch"
    await other._redis.set(marker, "rebuilt-by-another")
    await late._reseed()
    assert await other._redis.get(lock) is None
    await other._redis.delete(marker)  # Redis restarted empty once more
    await other._reseed()
    assert await other._redis.get(marker) not in (None, b"rebuilt-by-another")  # rebuilt at once


async def test_a_burst_of_waiters_is_admitted_up_to_the_cluster_bucket_by_the_request_path(cluster):
    """The request path's own admission (routing.gateway.limiting) with the syncer's task running on a
    real Redis: 30 concurrent requests on rpm 60 are all admitted; of 100 more, the 30 left are, and the
    rest get 429 `rate_limited` with the cluster bucket's Retry-After."""
    import asyncio

    from routing.config.snapshot import build_snapshot
    from routing.core.errors import GatewayError
    from routing.gateway import limiting
    from routing.plan import preflight
    from routing.runtime.accounting import Context
    from routing.runtime.cluster import shared_limits

    _, process = cluster
    p = process()
    org = org_name()
    doc = {
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:1/v1"}],
        "models": [{"id": "m", "provider": "p", "upstream_model": "m", "capabilities": ["chat"]}],
        "orgs": [{"name": org, "limits": {"rpm": 60}, "agents": [{"name": "bot"}]}],
    }
    snap = build_snapshot(doc, [{"key_hash": "k", "prefix": "k", "org": org, "agent": "bot"}], {})
    agent, model = snap.keys["k"].agent, snap.models["m"]
    req = preflight.requirements("chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})

    async def one() -> int | float:
        ctx = Context("r", 0.0, "chat")
        try:
            try:
                limiting.admit(p.limiter, ctx, agent, model, req, p)
            except limiting.LeaseNeeded:
                await limiting.admit_after_lease(p.limiter, ctx, agent, model, req, p)
        except GatewayError as error:
            assert error.code == "rate_limited"
            return float(dict(error.headers)["Retry-After"])
        return 200

    task = asyncio.get_running_loop().create_task(p.run())
    shared_limits.install(p)
    try:
        first = await asyncio.gather(*(one() for _ in range(30)))
        assert first == [200] * 30  # before: a few (its round asked for the largest need, one request)
        second = await asyncio.gather(*(one() for _ in range(100)))
        assert 30 <= second.count(200) <= 31  # what was left, and what refilled meanwhile
        assert {w for w in second if w != 200} == {1.0}  # one request a second comes back
    finally:
        shared_limits.install(None)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_flushed_redis_is_rebuilt_from_every_process_s_records_plus_what_each_holds(cluster, monkeypatch):
    """docs/limits.md#reseed: not from one process's view, which misses the others' spend."""
    from routing.runtime.cluster import shared_spend

    _, process = cluster
    p1, p2 = process(), process()
    org, budget = org_name(), (1.0, "total")
    key = ("agent", org, "bot")
    (await admit_budget(p1, org, budget, 0.2)).settle(0.2)
    (await admit_budget(p2, org, budget, 0.2)).settle(0.2)
    in_flight = await admit_budget(p2, org, budget, 0.1)
    await p1.sync_once()
    await p2.sync_once()
    # The usage records of both processes (and of a process gone since): $0.5 in all.
    monkeypatch.setattr(shared_spend, "query_spend", lambda starts, until=None: {(key, 0.0): 0.5})
    counter = account_key(p1.budgets.find(key), p1.prefix)
    await p1._redis.delete(p1.prefix + "epoch", counter)  # Redis restarted empty

    await p1.sync_once()  # finds no marker: rebuilds from the records, then adds what it holds
    await p2.sync_once()  # a new marker: adds what it holds and what is in flight
    a1, a2 = p1.budgets.find(key), p2.budgets.find(key)
    rebuilt = int(await p1._redis.get(counter)) / 1e6
    assert rebuilt == pytest.approx(0.5 + a1.lease + a2.lease + 0.1)
    assert p1.epoch == p2.epoch is not None
    in_flight.settle(0.1)
    # What is left for anyone: $1 - $0.6 spent - the leases held; never the $0.6 again.
    left = 1.0 - 0.6 - a1.lease - a2.lease
    assert await admit_budget(p1, org, budget, left + a1.lease + 0.01) is None


async def test_what_a_round_leased_for_budget_waiters_is_theirs_when_the_next_round_begins_first(cluster):
    """The request path's budget admission (routing.gateway.limiting.reserve) on a real Redis, its rounds
    driven here as the syncer's task runs them when requests arrive during a round: the next round begins
    at once, before the waiters the first one leased for have resumed. It must not give their lease back
    as held ahead of use: $0.01 of requests of $0.00007, 300 at once: all 142 that fit are admitted when
    they resume, the rest refused `budget_exceeded`."""
    import asyncio

    from routing.config.snapshot import build_snapshot
    from routing.core.errors import GatewayError
    from routing.gateway import limiting
    from routing.plan import chain, preflight
    from routing.runtime.cluster import shared_limits

    _, process = cluster
    p = process()
    p.interval_s = 0.02  # the refused ones' confirming wait (1.5 intervals) stays short
    org, amount = org_name(), 0.00007
    doc = {
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:1/v1"}],
        "models": [
            {"id": "m", "provider": "p", "upstream_model": "m", "capabilities": ["chat"], "output_price_per_mtok": 10}
        ],
        "orgs": [{"name": org, "budget": {"usd": 0.01, "period": "total"}, "agents": [{"name": "bot"}]}],
    }
    snap = build_snapshot(doc, [{"key_hash": "k", "prefix": "k", "org": org, "agent": "bot"}], {})
    agent = snap.keys["k"].agent
    req = preflight.requirements(
        "chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7}
    )
    links = preflight.apply(chain.build_chain(snap, agent.org, snap.resolve("m"), "m"), req)
    assert limiting.worst_cost(links, req) == pytest.approx(amount)
    # one request first, through a round of its own: the counter exists, the seed marker is this process's
    assert await admit_budget_org(p, org, amount) is not None

    loop = asyncio.get_running_loop()
    p._wake, p._round, p.running = asyncio.Event(), loop.create_future(), True

    async def one_round() -> None:  # Syncer.run's loop body
        done, p._round = p._round, loop.create_future()
        await p.sync_once()
        done.set_result(None)

    async def one() -> int | str:
        try:
            await limiting.reserve(p.budgets, agent, links, req, p)
        except GatewayError as error:
            return error.code
        return 200

    shared_limits.install(p)
    try:
        requests = [loop.create_task(one()) for _ in range(300)]
        await asyncio.sleep(0)  # 7 are admitted from the share the first one's round leased ahead ($0.0005)
        await asyncio.sleep(0)  # the rest are short of the lease and wait for a round
        assert sum(r.done() for r in requests) == 7
        await one_round()  # leases what the waiters need, as far as the counter has it
        await one_round()  # woken meanwhile: begins before they resume
        for _ in range(10):
            await asyncio.sleep(0)
        served = sum(r.done() and r.result() == 200 for r in requests)
        assert served == 141  # every one that fits (with the first request, 142), the 7 of the share included
        for _ in range(500):  # each is answered within its 2.5 s wait
            if all(r.done() for r in requests):
                break
            await asyncio.sleep(0.01)
            await one_round()
        answers = [r.result() for r in requests]
        assert answers.count(200) == 141 and set(answers) == {200, "budget_exceeded"}
    finally:
        shared_limits.install(None)
        p.running = False
    account = p.budgets.find(("org", org))
    assert account.waiting == pytest.approx(0.0, abs=1e-12)  # nothing held for waiters gone
    assert int(await p._redis.get(account_key(account, p.prefix))) <= 10_000


def _seated_processes(redis_url: str, initial: int = 10, max_limit: int = 10) -> list:
    """Two processes on one Redis, each with a gate for deployment `m/east` of model `m` (the cluster's max)."""
    from routing.core.admission_queue import Gates
    from routing.core.concurrency import LimitSettings

    namespace = uuid.uuid4().hex[:12]
    made = []
    for _ in range(2):
        gates = Gates()
        gates.configure({"m": LimitSettings(initial=initial, max_limit=max_limit)})
        syncer = Syncer(Budgets(), Limiter(), redis_url, namespace=namespace, gates=gates, seed_wait_s=0)
        syncer.connect()
        made.append((syncer, gates, gates.gate("k", "m", "m/east")))
    return made


async def _beat(*syncers: Syncer) -> None:
    """One round of each, in turn, heartbeat due."""
    for p in syncers:
        p._beat_at = -1e18  # its next heartbeat is due (a round beats at most once a second when nothing waits)
        await p.sync_once()


async def test_two_processes_split_a_deployment_s_concurrency_limit_and_one_stopping_gives_its_share_back(redis_url):
    """docs/overload.md#processes: the heartbeat of the shared limits counts the serving processes, with no
    limit or budget to share; two idle processes end up with half the configured max each (never more than
    the max between them on the way), and a process that stops leaves the count and its seats."""
    import asyncio

    (p1, gates1, gate1), (p2, gates2, gate2) = _seated_processes(redis_url)
    for _ in range(3):
        await _beat(p1, p2)
        assert gate1.settings.max_limit + gate2.settings.max_limit <= 10
    assert (gates1.processes, gates2.processes) == (2, 2)
    assert (gate1.settings.max_limit, gate2.settings.max_limit) == (5, 5)
    assert gate1.limit.limit + gate2.limit.limit == 10

    task = asyncio.get_running_loop().create_task(p2.run())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _beat(p1)
    assert gates1.processes == 1 and gate1.settings.max_limit == 10
    await p1.close()


async def test_a_busy_process_takes_the_seats_an_idle_one_leaves_and_gives_back_its_fair_share(redis_url):
    """docs/overload.md#processes: the max is shared by demand, not evenly. A process whose clients queue
    takes the seats the idle process does not use; when the other's clients queue too, it gives back down
    to an equal share as its calls end. At no step do the two have more than the max in flight."""
    import asyncio
    import time

    (p1, _, gate1), (p2, _, gate2) = _seated_processes(redis_url)
    await _beat(p1, p2, p1, p2)
    assert (gate1.limit.limit, gate2.limit.limit) == (5, 5)
    assert not p2._beat_due(time.monotonic())  # idle, uncontended: its next round in a second
    gate1.limit.sample(0.1, 1, time.monotonic())  # gate 1 has seen a call: its limit follows its share

    def demand(gate, n):
        return [asyncio.ensure_future(gate.acquire("org", 1, 1.0, time.monotonic() + 60)) for _ in range(n)]

    def check() -> None:
        assert gate1.inflight + gate2.inflight <= 10

    busy = demand(gate1, 9)
    await asyncio.sleep(0)
    assert (gate1.inflight, len(gate1.queue)) == (5, 4)
    for _ in range(2):
        await _beat(p1, p2)
        await asyncio.sleep(0)
        check()
    assert (gate1.settings.max_limit, gate2.settings.max_limit) == (10, 0)  # the idle process wants none
    assert p2._beat_due(time.monotonic())  # idle, but the processes want more than the max: every round
    # the seats are a ceiling, not a target: the limit grows into them by probing as its calls answer
    assert (gate1.limit.limit, gate1.inflight, len(gate1.queue)) == (5, 5, 4)
    base = time.monotonic()
    for round_trip in range(1, 7):
        for _ in range(5):
            gate1.limit.sample(0.1, gate1.inflight, base + 0.2 * round_trip)
    gate1._dispatch()
    assert (gate1.inflight, len(gate1.queue)) == (9, 0)  # the 4 that waited started on the idle process's seats

    late = demand(gate2, 6)  # now the other process's clients queue: it gets an equal share as seats free
    await asyncio.sleep(0)
    assert (gate2.inflight, len(gate2.queue)) == (0, 6)  # no seat: they wait (within their deadline)
    await _beat(p2, p1)
    check()
    assert gate1.settings.max_limit == 5 and gate1.limit.limit == 5  # its share, while 9 calls still run
    assert gate2.settings.max_limit == 0  # nothing free yet
    for _ in range(4):  # four of its calls end
        gate1.release()
    await _beat(p1, p2)
    await asyncio.sleep(0)
    check()
    assert (gate1.inflight, gate2.inflight, len(gate2.queue)) == (5, 5, 1)
    assert (gate1.settings.max_limit, gate2.settings.max_limit) == (5, 5)
    for f in (*busy, *late):
        f.cancel()
    await asyncio.gather(*busy, *late, return_exceptions=True)
    await p1.close()
    await p2.close()


async def test_seats_are_max_min_fair_over_what_the_live_processes_demand_and_never_more_than_the_max(redis_url):
    """docs/overload.md#processes, the seats script itself: a process wanting less than an equal share gets
    what it wants (its demand and a quarter more), the others split the rest, seats nobody wants go evenly
    to every live process; nobody gets what another holds (calls in flight included), and a process that
    left the processes set is forgotten."""
    import time

    from routing.runtime.cluster.shared_seats import refusals_key, seats_key

    p = Syncer(Budgets(), Limiter(), redis_url, namespace=uuid.uuid4().hex[:12])
    p.connect()
    processes, key = p.prefix + "processes", seats_key("m/east", p.prefix)
    await p._redis.zadd(processes, dict.fromkeys(("a", "b", "c"), time.time()))

    refused_key = refusals_key("m/east", p.prefix)

    async def ask(me: str, inflight: int, demand: int) -> int:
        seats, contended, *_ = await p._seats(
            keys=[key, processes, refused_key], args=[me, inflight, demand, 30, 60, 0, 0]
        )
        wanted.append(contended)
        return int(seats)

    wanted: list[int] = []

    assert await ask("a", 0, 0) == 10  # wants nothing; the 30 nobody wants split three ways (c has not called yet)
    assert await ask("b", 0, 4) == 14  # wants 5, and its part of what is left
    assert await ask("a", 10, 40) == 16  # floods: fair 25 (b wants 5), but b holds 14 for now
    assert await ask("b", 4, 4) == 5  # contended: b gets what it wants, no more
    assert await ask("a", 16, 40) == 25
    assert await ask("c", 0, 10) == 0  # c's turn: an equal share (13) of what b leaves, none free yet
    assert await ask("a", 25, 40) == 13  # a's share now; its 25 calls in flight still hold their seats
    assert await ask("c", 0, 10) == 0
    assert await ask("a", 13, 40) == 13  # 12 of its calls ended: they are free
    assert await ask("c", 0, 10) == 12
    held = {k.decode(): int(v.decode().split(":")[0]) for k, v in (await p._redis.hgetall(key)).items()}
    assert held == {"a": 13, "b": 5, "c": 12} and sum(held.values()) == 30
    await p._redis.zrem(processes, "b")  # b stopped
    assert await ask("c", 12, 10) == 13
    assert set(await p._redis.hkeys(key)) == {b"a", b"c"}
    assert wanted == [0, 0, *[1] * 9]  # from a's flood on, the processes want more than the 30 seats
    await p.close()


async def test_a_refusal_one_process_meets_holds_the_other_process_s_growth(redis_url):
    """docs/overload.md#processes: the upstream's capacity is one for the processes calling it, and it refuses
    whichever call comes when it is full. A process whose probe was answered by a 429 on the other process
    learns of it in the next seats round, gives back what it grew since the round before and holds; without
    it, it saw no refusal, doubled its step each round-trip and pushed the other down call by call."""
    import time

    (p1, _, gate1), (p2, _, gate2) = _seated_processes(redis_url, initial=4, max_limit=40)
    await _beat(p1, p2, p1, p2)
    now = time.monotonic()
    for gate in (gate1, gate2):
        gate.limit.sample(0.1, gate.limit.limit, now)

    def grows(gate) -> bool:
        before = gate.limit._limit
        gate.limit.sample(0.1, gate.limit.limit, time.monotonic() + 0.5)
        return gate.limit._limit > before

    await _beat(p2, p1)  # a round: the level process 1's growth is counted from
    level = gate1.limit.level
    assert grows(gate1) and grows(gate2)  # both full, no refusal: both probe
    grown = gate1.limit.level
    gate2.limit.dropped(time.monotonic())  # the upstream refused one of process 2's calls
    await _beat(p2, p1)
    # process 1's probe may be what was refused there: what it grew since the last round goes back, and it holds
    assert grown > level and gate1.limit.level == level and not grows(gate1)
    assert not grows(gate2)  # process 2 holds after its own refusal, as before
    await _beat(p2, p1)
    gate1.limit._hold_until = -1e18  # its hold over: with no new refusal anywhere, a round does not renew it
    await _beat(p2, p1)
    assert gate1.limit._hold_until == -1e18
    await p1.close()
    await p2.close()
