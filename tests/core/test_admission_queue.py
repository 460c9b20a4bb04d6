"""The fair queue and gate in front of a deployment (docs/overload.md#the-queue)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from routing.core.admission_queue import PRIORITIES, SWEEP_S, FairQueue, Gate, Waiter
from routing.core.concurrency import LimitSettings
from routing.core.errors import GatewayError
from tests.core.fakes import FakeClock

HI, D, B = PRIORITIES["interactive"], PRIORITIES["default"], PRIORITIES["batch"]


def drain(q: FairQueue, n: int | None = None) -> list[Waiter]:
    out = []
    while n is None or len(out) < n:
        w = q.pop()
        if w is None:
            break
        out.append(w)
    return out


def test_a_higher_class_always_goes_first() -> None:
    q = FairQueue()
    for _ in range(5):
        q.push(Waiter("a", B))
    q.push(Waiter("b", D))
    q.push(Waiter("c", HI))
    assert [w.priority for w in drain(q, 3)] == [HI, D, B]


def test_one_orgs_flood_cannot_starve_another_org_of_the_same_class() -> None:
    q = FairQueue()
    for _ in range(100):
        q.push(Waiter("flood", D))
    q.push(Waiter("small", D))
    q.push(Waiter("small", D))
    first = [w.org for w in drain(q, 5)]
    assert first.count("small") == 2  # served among the first, not after the flood's 100


def test_equal_weights_share_equally_and_weights_share_in_proportion() -> None:
    q = FairQueue()
    for _ in range(300):
        q.push(Waiter("a", D))
        q.push(Waiter("b", D), weight=2.0)
        q.push(Waiter("c", D))
    served = Counter(w.org for w in drain(q, 400))
    assert served["b"] == pytest.approx(2 * served["a"], abs=2)
    assert served["a"] == pytest.approx(served["c"], abs=1)


def test_waiters_that_left_are_skipped_and_not_counted() -> None:
    q = FairQueue()
    gone, kept = Waiter("a", D), Waiter("b", D)
    q.push(gone)
    q.push(kept)
    q.remove(gone)
    assert len(q) == 1
    assert drain(q) == [kept]


def gate(clock: FakeClock | None = None, **kw: int) -> Gate:
    settings = LimitSettings(**{"initial": 1, "queue": 10, **kw})
    return Gate("m@dep", settings, clock=clock or FakeClock())


async def test_a_request_that_cannot_start_before_its_deadline_is_shed_at_once_with_retry_after() -> None:
    clock = FakeClock()
    g = gate(clock, max_limit=1)
    shed: list[tuple[str, str]] = []
    g.on_shed = lambda reason, cls: shed.append((reason, cls))
    await g.acquire("a", D, 1.0, clock() + 5)
    g.sample(2.0)  # one slot, 2 s per call: a drain rate of 0.5 starts a second
    queued = [asyncio.ensure_future(g.acquire("a", D, 1.0, clock() + 60)) for _ in range(3)]
    await asyncio.sleep(0)
    with pytest.raises(GatewayError) as err:
        await g.acquire("b", D, 1.0, clock() + 1.0)  # 3 ahead at 0.5/s: 6 s > 1 s
    assert err.value.status == 503 and err.value.code == "overloaded"
    assert err.value.headers == {"Retry-After": "8"}  # (3 queued + itself) / 0.5 per second
    assert shed == [("deadline", "default")]
    with pytest.raises(GatewayError):
        await g.acquire("b", HI, 1.0, clock() - 0.001)  # already past its deadline
    for t in queued:
        t.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    assert len(g.queue) == 0 and g.inflight == 1


async def test_a_waiter_leaves_at_its_deadline_even_if_no_slot_ever_frees() -> None:
    g = gate()  # no drain rate known: it waits, bounded by its own timeout
    await g.acquire("a", D, 1.0, g.clock() + 5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(GatewayError) as err:
        await g.acquire("b", D, 1.0, g.clock() + 0.05)
    assert err.value.code == "overloaded"
    assert loop.time() - started < 5  # shed at its 50 ms deadline, not held
    assert len(g.queue) == 0


async def test_a_freed_slot_goes_to_the_highest_class_waiting() -> None:
    g = gate()
    await g.acquire("a", D, 1.0, g.clock() + 5)
    order: list[str] = []

    async def wait(org: str, cls: int) -> None:
        await g.acquire(org, cls, 1.0, g.clock() + 30)
        order.append(org)

    tasks = [asyncio.ensure_future(wait("batch", B)), asyncio.ensure_future(wait("inter", HI))]
    await asyncio.sleep(0)
    g.release()
    await asyncio.sleep(0)
    assert order == ["inter"]
    g.release()
    await asyncio.gather(*tasks)
    assert order == ["inter", "batch"]
    assert g.inflight == 1


async def test_a_full_queue_sheds_its_lowest_class_to_make_room_for_a_higher_one() -> None:
    g = gate(queue=2)
    await g.acquire("a", D, 1.0, g.clock() + 5)
    batch = [asyncio.ensure_future(g.acquire("a", B, 1.0, g.clock() + 30)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(GatewayError):  # nothing lower to make room for another batch request
        await g.acquire("a", B, 1.0, g.clock() + 30)
    inter = asyncio.ensure_future(g.acquire("b", HI, 1.0, g.clock() + 30))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    done = [t for t in batch if t.done()]
    assert len(done) == 1 and done[0].exception().code == "overloaded"
    g.release()
    await inter
    for t in batch:
        t.cancel()
    await asyncio.gather(*batch, return_exceptions=True)
    assert len(g.queue) == 0


async def test_a_waiter_cancelled_as_its_slot_arrives_passes_the_slot_on() -> None:
    g = gate()
    await g.acquire("a", D, 1.0, g.clock() + 5)
    first = asyncio.ensure_future(g.acquire("a", D, 1.0, g.clock() + 30))
    second = asyncio.ensure_future(g.acquire("b", D, 1.0, g.clock() + 30))
    await asyncio.sleep(0)
    g.release()  # grants `first`...
    first.cancel()  # ...which is cancelled before it runs
    await asyncio.gather(first, return_exceptions=True)
    await second
    assert g.inflight == 1
    assert len(g.queue) == 0  # counted once, though it left after its slot was granted


async def test_a_waiter_pushed_back_by_higher_classes_is_shed_at_once_not_at_its_deadline() -> None:
    clock = FakeClock()
    g = gate(clock, max_limit=1)
    await g.acquire("a", B, 1.0, clock() + 60)
    g.sample(1.0)  # one slot, 1 s per call: one start a second
    batch = asyncio.ensure_future(g.acquire("b", B, 1.0, clock() + 3.5))  # next in line: starts in ~1 s
    await asyncio.sleep(0)
    assert not batch.done()
    inter = []
    for _ in range(2):
        clock.advance(SWEEP_S)
        inter.append(asyncio.ensure_future(g.acquire("c", HI, 1.0, clock() + 60)))
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # the batch request's task takes its answer
    # two interactive requests went ahead, and more arrive at that pace: it would start past its 3.5 s; told
    # now, not in 3.5 s
    assert batch.done() and batch.exception().code == "overloaded"
    assert batch.exception().headers == {"Retry-After": "3"}
    assert len(g.queue) == 2
    for t in inter:
        t.cancel()
    await asyncio.gather(*inter, return_exceptions=True)


async def test_a_retry_goes_to_the_front_of_its_class() -> None:
    g = gate()
    await g.acquire("a", D, 1.0, g.clock() + 5)
    order: list[str] = []

    async def wait(org: str, cls: int, front: bool = False) -> None:
        await g.acquire(org, cls, 1.0, g.clock() + 30, front)
        order.append(org)
        g.release()

    tasks = [asyncio.ensure_future(wait(f"org{i}", D)) for i in range(3)]
    await asyncio.sleep(0)
    tasks.append(asyncio.ensure_future(wait("retry", D, front=True)))
    tasks.append(asyncio.ensure_future(wait("inter", HI)))
    await asyncio.sleep(0)
    g.release()
    await asyncio.gather(*tasks)
    assert order[:2] == ["inter", "retry"]  # a higher class still goes first


async def test_a_sweep_put_off_by_its_bound_still_runs_soon_after() -> None:
    clock = FakeClock()
    g = gate(clock, max_limit=1)
    await g.acquire("a", B, 1.0, clock() + 60)
    g.sample(10.0)  # one start every 10 s
    batch = asyncio.ensure_future(g.acquire("b", B, 1.0, clock() + 35))  # next in line: starts in ~10 s
    await asyncio.sleep(0)
    inter = [asyncio.ensure_future(g.acquire("c", HI, 1.0, clock() + 60)) for _ in range(3)]  # same instant
    await asyncio.sleep(0)
    assert not batch.done()  # within SWEEP_S of the last sweep: put off...
    await asyncio.wait({batch}, timeout=20)  # ...to soon after, not to its deadline 35 s away
    assert batch.exception().code == "overloaded"
    for t in inter:
        t.cancel()
    await asyncio.gather(*inter, return_exceptions=True)


async def test_a_lower_class_is_shed_at_once_when_the_higher_classes_arriving_take_the_drain() -> None:
    clock = FakeClock()
    g = gate(clock, initial=2, max_limit=2)
    await g.acquire("a", B, 1.0, clock() + 60)
    await g.acquire("a", B, 1.0, clock() + 60)
    g.sample(0.1)  # two slots, 100 ms per call: 20 starts a second
    inter = []
    for _ in range(57):  # for 3 s, interactive requests arrive at 19 a second: about 1 start a second is left
        clock.advance(1 / 19)
        inter.append(asyncio.ensure_future(g.acquire("c", HI, 1.0, clock() + 60)))
        await asyncio.sleep(0)
        g.release()  # one call ends: the interactive request takes its slot
        await asyncio.sleep(0)
    assert len(g.queue) == 0  # nobody is waiting now...
    batch = asyncio.ensure_future(g.acquire("b", B, 1.0, clock() + 0.5))
    await asyncio.sleep(0)
    assert batch.done()  # ...but next in line it would wait ~1 s for its turn: shed on arrival, not in 0.5 s
    assert batch.exception().code == "overloaded"
    waiter = asyncio.ensure_future(g.acquire("b", B, 1.0, clock() + 10))  # a 10 s wait is long enough
    await asyncio.sleep(0)
    assert not waiter.done()
    g.release()
    await waiter
    await asyncio.gather(*inter)


async def test_the_drain_rate_counts_how_long_slots_are_held_not_only_the_first_token() -> None:
    clock = FakeClock()
    g = gate(clock, max_limit=1, queue=100)
    await g.acquire("a", D, 1.0, clock() + 60)
    g.sample(0.1)  # a stream's first token after 100 ms...
    waiters = [asyncio.ensure_future(g.acquire("a", D, 1.0, clock() + 600)) for _ in range(40)]
    await asyncio.sleep(0)
    for _ in range(30):  # ...but each stream holds its slot for 2 s
        clock.advance(2.0)
        g.release()
        await asyncio.sleep(0)
    assert 0.4 < g.drain_rate() < 0.6  # one start every 2 s, not 10 a second
    late = asyncio.ensure_future(g.acquire("b", D, 1.0, clock() + 5))  # 10 ahead: ~20 s, not ~1 s
    await asyncio.sleep(0)
    assert late.done() and late.exception().code == "overloaded"
    for t in waiters:
        t.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


async def test_a_request_predicted_to_need_nearly_all_its_wait_is_shed_at_once_not_later() -> None:
    clock = FakeClock()
    g = gate(clock, max_limit=1)
    await g.acquire("a", D, 1.0, clock() + 60)
    g.sample(1.0)  # one start a second
    ahead = asyncio.ensure_future(g.acquire("a", D, 1.0, clock() + 60))
    await asyncio.sleep(0)
    tight = asyncio.ensure_future(g.acquire("b", D, 1.0, clock() + 2.2))  # predicted to start in ~2 s of its 2.2
    await asyncio.sleep(0)
    assert tight.done() and tight.exception().code == "overloaded"
    roomy = asyncio.ensure_future(g.acquire("b", D, 1.0, clock() + 8))  # ~2 s of 8: it waits
    await asyncio.sleep(0)
    assert not roomy.done()
    for t in (ahead, roomy):
        t.cancel()
    await asyncio.gather(ahead, roomy, return_exceptions=True)


def test_processes_sharing_a_deployment_each_take_an_even_share_of_its_limit() -> None:
    """docs/overload.md#processes: `max: 40` is the cluster's; with 3 processes serving, each gate admits at
    most 14 (rounded up); back to one process, the whole 40 again, the learnt limit keeping its ratio to it."""
    from routing.core.admission_queue import Gates

    clock = FakeClock()
    gates = Gates(clock=clock)
    gates.configure({"m": LimitSettings(initial=40, min_limit=5, max_limit=40)})
    gate = gates.gate("k", "m", "m/east")
    assert gate is not None and gate.limit.limit == 40
    gate.limit.sample(0.1, 1, clock())  # it has seen a call: what it learns is kept
    gates.split(3)
    assert (gate.limit.limit, gate.settings.max_limit, gate.settings.min_limit) == (14, 14, 5)
    later = gates.gate("k2", "m", "m/west")  # a gate made after the split starts from the share too
    assert later is not None and (later.limit.limit, later.settings.initial) == (14, 14)
    for _ in range(4):  # the upstream refuses: the limit learns 7 of the share of 14
        clock.advance(2.0)
        gate.limit.dropped(clock())
    assert gate.limit.limit == 10
    gates.split(1)
    assert gate.settings.max_limit == 40 and gate.limit.limit == 28  # 10/14 of the share, as before
    assert later.limit.limit == 40  # no call seen yet: the configured initial
    gates.configure({"m": LimitSettings(initial=8, max_limit=8)})
    gates.split(2)
    assert gate.limit.limit == 4


def test_the_cluster_s_seats_set_each_gate_s_share_and_a_new_gate_waits_for_its_own() -> None:
    """docs/overload.md#processes: with Redis, the seats the shared limits' round brings set a gate's max
    (they bound the limit, which grows into them by probing, never jumps to them); a deployment first called while seated starts with none (its requests wait) and wakes the round at
    once; Redis unreachable, every gate goes back to an even share."""
    from routing.core.admission_queue import Gates

    clock = FakeClock()
    woken = []
    gates = Gates(clock=clock)
    gates.on_new = lambda: woken.append(1)
    gates.configure({"m": LimitSettings(initial=10, max_limit=40)})
    gates.split(2)
    east = gates.gate("k", "m", "m/east")
    assert east is not None and east.settings.max_limit == 20 and not woken  # not seated: an even share
    east.limit.sample(0.1, 1, clock())
    gates.seat({"m/east": 30})
    # the seats follow the processes' demand: a limit learnt below its share stays what the upstream taught
    assert gates.seated and east.settings.max_limit == 30 and east.limit.limit == 5
    gates.seat({"m/east": 4})
    assert east.limit.limit == 4  # within the new share
    gates.seat({"m/east": 30})
    # the seats held it at 4; given 30 it does not jump there (30 calls at once could meet an upstream that
    # takes 10: the seats are a ceiling, not a target): it grows by probing, a quarter a round-trip at most
    assert east.limit.limit == 4
    for _ in range(4):
        clock.advance(0.2)
        for _ in range(east.limit.limit):
            east.limit.sample(0.1, east.limit.limit, clock())
    assert 6 <= east.limit.limit <= 10
    west = gates.gate("k2", "m", "m/west")
    assert west is not None and (west.settings.max_limit, west.limit.limit) == (0, 0) and woken == [1]
    assert gates.claims() == [("m/east", 40, 0, 0, 0, 3), ("m/west", 40, 0, 0, 0, 3)]
    gates.seat({"m/west": 8})
    assert (west.settings.max_limit, west.limit.limit) == (8, 5)  # the initial's even share, within its seats
    gates.seat(None)  # Redis unreachable
    assert not gates.seated and (east.settings.max_limit, west.settings.max_limit) == (20, 20)
    assert gates.gate("k3", "m", "m/north").settings.max_limit == 20 and woken == [1]


def test_a_model_s_shared_deployment_and_an_org_s_own_credentials_for_it_are_two_pools_of_seats() -> None:
    """The seats are named by the breaker key (the same in every process), not by the model's label:
    an org's BYO credentials for a model have a gate of their own, and their own upstream capacity."""
    from routing.core.admission_queue import Gates
    from routing.core.breaker import BreakerKey

    gates = Gates(clock=FakeClock())
    gates.configure({"m": LimitSettings(initial=4, max_limit=8)})
    shared = gates.gate(BreakerKey("openai", "m"), "m", "m")
    own = gates.gate(BreakerKey("openai", "m", "acme"), "m", "m")
    assert [c[0] for c in gates.claims()] == ["openai/m", "openai/m/org:acme"]
    gates.seat({"openai/m": 2, "openai/m/org:acme": 8})
    assert (shared.settings.max_limit, own.settings.max_limit) == (2, 8)


async def test_a_gate_reports_its_demand_and_hunger_to_the_seats_round() -> None:
    """The round asks for seats by demand (calls in flight + requests waiting) and runs every interval
    while requests wait (docs/overload.md#processes)."""
    from routing.core.admission_queue import Gates

    clock = FakeClock()
    gates = Gates(clock=clock)
    gates.configure({"m": LimitSettings(initial=2, max_limit=2)})
    gate = gates.gate("k", "m", "m/east")
    waits = [asyncio.ensure_future(gate.acquire("org", D, 1.0, clock() + 60)) for _ in range(5)]
    await asyncio.sleep(0)
    assert gates.claims() == [("m/east", 2, 5, 2, 0, 1)] and gates.hungry()
    for w in waits:
        w.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    gate.release()
    gate.release()
    assert gates.claims() == [("m/east", 2, 0, 0, 0, 3)] and not gates.hungry()


async def test_a_process_serving_batch_lends_a_call_to_one_whose_interactive_requests_wait() -> None:
    """docs/overload.md#processes: each process queues by class only what reaches it. When the seats round says
    an interactive request waits in another process, a process whose limit is in use with only batch waiting
    lends one call (its limit 1 down, holding); the process with the cluster's most important waiters probes
    into it at once instead of sitting out a hold. Nothing waiting here: nothing is lent."""
    from routing.core.admission_queue import PRIORITIES, Gates

    clock = FakeClock()
    east, west = Gates(clock=clock), Gates(clock=clock)
    for gates in (east, west):
        gates.configure({"m": LimitSettings(initial=12, max_limit=40)})
        gates.split(2)
    a, b = east.gate("k", "m", "m/x"), west.gate("k", "m", "m/x")
    a.limit.sample(0.1, 1, clock())
    b.limit.sample(0.1, 1, clock())
    b.limit.dropped(clock())  # west met a refusal: it holds
    batch = [asyncio.ensure_future(a.acquire("org", PRIORITIES["batch"], 1.0, clock() + 60)) for _ in range(8)]
    inter = [asyncio.ensure_future(b.acquire("org", PRIORITIES["interactive"], 1.0, clock() + 60)) for _ in range(8)]
    await asyncio.sleep(0)
    assert (a.inflight, len(a.queue), b.inflight, len(b.queue)) == (6, 2, 5, 3)
    east.elsewhere({"m/x": (0, b.best_waiting())})
    west.elsewhere({"m/x": (0, a.best_waiting())})
    assert a.limit.limit == 5  # lent one call
    before = b.limit.level
    b.limit.sample(0.1, b.inflight, clock() + 0.2)
    assert b.limit.level > before  # probes at once, its hold lifted
    idle = Gates(clock=clock)
    idle.configure({"m": LimitSettings(initial=12, max_limit=40)})
    c = idle.gate("k", "m", "m/x")
    c.limit.sample(0.1, 1, clock())
    idle.elsewhere({"m/x": (0, PRIORITIES["interactive"])})
    assert c.limit.limit == 12  # nothing waits here: its limit is not what keeps the other waiting
    for f in (*batch, *inter):
        f.cancel()
    await asyncio.gather(*batch, *inter, return_exceptions=True)


async def test_a_call_lent_to_another_process_tells_a_waiter_that_can_no_longer_start_in_time_at_once() -> None:
    """docs/overload.md#processes: lending a call lowers this process's limit, so the waiters' predicted starts
    move back; one that can no longer start before its deadline is shed by the round itself (a 429 with
    Retry-After now, when the client can still go elsewhere), not left to time out at its deadline."""
    from routing.core.admission_queue import Gates

    clock = FakeClock()
    gates = Gates(clock=clock)
    gates.configure({"m": LimitSettings(initial=6, max_limit=40)})
    gate = gates.gate("k", "m", "m/x")
    gate.limit.sample(0.1, 1, clock())  # 0.1 s a call: 60 starts a second at a limit of 6
    assert gate.limit.limit == 6
    running = [asyncio.ensure_future(gate.acquire("org", B, 1.0, clock() + 60)) for _ in range(6)]
    waiting = [asyncio.ensure_future(gate.acquire("org", B, 1.0, clock() + 1.0)) for _ in range(10)]
    await asyncio.sleep(0)
    assert (gate.inflight, len(gate.queue)) == (6, 10)
    clock.advance(0.82)  # 0.18 s left: the 10th starts in 10/60 s at 6 calls, 10/50 s at 5
    gates.elsewhere({"m/x": (0, HI)})
    await asyncio.sleep(0)
    assert gate.limit.limit == 5
    assert waiting[-1].done() and isinstance(waiting[-1].exception(), GatewayError)
    assert not any(w.done() for w in waiting[:8])
    for f in (*running, *waiting):
        f.cancel()
    await asyncio.gather(*running, *waiting, return_exceptions=True)


async def test_a_cold_gate_lets_wait_only_what_could_start_if_a_call_held_its_slot_a_second() -> None:
    """docs/overload.md#the-queue: before any call has ended there is no drain rate to predict from. A cold gate
    used to let every request wait on nothing, and a burst at a process's start waited out its whole max wait
    before a 429; now a call is taken to hold its slot COLD_HOLD_S until measured, and the first measured
    latency re-checks whoever waits."""
    g = gate(initial=2, max_limit=2)
    for _ in range(2):
        await g.acquire("a", B, 1.0, g.clock() + 60)
    tries = [asyncio.ensure_future(g.acquire("a", B, 1.0, g.clock() + 2.0)) for _ in range(10)]
    await asyncio.sleep(0)
    shed = [t for t in tries if t.done()]
    assert len(shed) == 9 and all(isinstance(t.exception(), GatewayError) for t in shed)  # 2 s, 2 slots: 1 waits
    (waiting,) = [t for t in tries if not t.done()]
    g.clock.advance(1.5)
    g.sample(3.0)  # the first call ended: 3 s a call, the waiter cannot start in the 0.5 s it has left
    await asyncio.sleep(0)
    assert waiting.done() and isinstance(waiting.exception(), GatewayError)


async def test_calls_that_end_together_do_not_read_as_a_fast_drain() -> None:
    """docs/overload.md#shedding: the drain rate is the limit over how long a slot is held, measured from the gaps
    between slots freed while requests wait. Calls that began together end together: a first gap of 0.2 ms read
    as a hold of 1 ms put the drain at 100x its rate, and batch requests were let in to wait for slots that were
    never going to come (shed at their deadlines, the scenario's slowest sheds). A slot is held at least a
    round-trip."""
    clock = FakeClock()
    g = gate(clock, initial=5, max_limit=5, queue=100)
    for _ in range(5):
        await g.acquire("a", D, 1.0, clock() + 60)
    g.sample(0.1)  # 100 ms a call: 50 starts a second
    waiting = [asyncio.ensure_future(g.acquire("a", D, 1.0, clock() + 60)) for _ in range(20)]
    await asyncio.sleep(0)
    for _ in range(5):  # the five calls end within a millisecond
        clock.advance(0.0002)
        g.release()
    await asyncio.sleep(0)
    assert 40 < g.drain_rate() <= 50
    late = asyncio.ensure_future(g.acquire("b", B, 1.0, clock() + 1.0))  # 16 ahead: ~0.3 s at 50 a second
    await asyncio.sleep(0)
    assert late.done() and late.exception().code == "overloaded"
    for t in waiting:
        t.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
