"""Circuit breaker transitions (docs/resilience.md#r5), in simulated time."""

from __future__ import annotations

import asyncio

from routing.core.breaker import Admission, BreakerRegistry, BreakerView, State
from tests.core.breakers import configured
from tests.core.fakes import FakeClock

KEY = ("local-a", "chat-a")
TH, CD = 3, 30.0


def make() -> tuple[BreakerRegistry, FakeClock, list[tuple[tuple[str, ...], State, State]]]:
    clock = FakeClock()
    wall = FakeClock(1_700_000_000.0)
    reg = configured(BreakerRegistry(clock=clock, wall=wall), TH, CD)
    reg.wall = wall  # type: ignore[attr-defined]
    events: list[tuple[tuple[str, ...], State, State]] = []
    reg.add_listener(lambda k, old, new: events.append((k, old, new)))
    return reg, clock, events


def trip(reg: BreakerRegistry) -> None:
    for _ in range(TH):
        assert reg.admit(KEY).allowed
        reg.record_failure(KEY, False)


def test_closed_admits_without_probe() -> None:
    reg, _, events = make()
    adm = reg.admit(KEY)
    assert adm.allowed and not adm.probe
    assert reg.state(KEY) is State.CLOSED
    assert events == []


def test_opens_after_threshold_consecutive_failures() -> None:
    reg, _, events = make()
    for _ in range(TH - 1):
        reg.record_failure(KEY, False)
    assert reg.state(KEY) is State.CLOSED
    reg.record_failure(KEY, False)
    assert reg.state(KEY) is State.OPEN
    assert events == [(KEY, State.CLOSED, State.OPEN)]


def test_success_resets_the_consecutive_count() -> None:
    reg, _, _ = make()
    for _ in range(TH - 1):
        reg.record_failure(KEY, False)
    reg.record_success(KEY, False)
    for _ in range(TH - 1):
        reg.record_failure(KEY, False)
    assert reg.state(KEY) is State.CLOSED


def test_open_rejects_with_remaining_cooldown() -> None:
    reg, clock, _ = make()
    trip(reg)
    clock.advance(10)
    adm = reg.admit(KEY)
    assert not adm.allowed
    assert adm.retry_after_s == 20.0


def test_half_open_after_cooldown_admits_one_probe_and_success_closes() -> None:
    reg, clock, events = make()
    trip(reg)
    clock.advance(CD)
    adm = reg.admit(KEY)
    assert adm.allowed and adm.probe
    assert reg.state(KEY) is State.HALF_OPEN
    other = reg.admit(KEY)
    assert not other.allowed and other.retry_after_s == CD
    reg.record_success(KEY, True)
    assert reg.state(KEY) is State.CLOSED
    assert [e[1:] for e in events] == [
        (State.CLOSED, State.OPEN),
        (State.OPEN, State.HALF_OPEN),
        (State.HALF_OPEN, State.CLOSED),
    ]
    assert reg.admit(KEY).allowed


def test_probe_failure_reopens_for_a_new_cooldown() -> None:
    reg, clock, events = make()
    trip(reg)
    clock.advance(CD)
    assert reg.admit(KEY).probe
    clock.advance(2)
    reg.record_failure(KEY, True)
    assert reg.state(KEY) is State.OPEN
    assert reg.admit(KEY).retry_after_s == CD
    clock.advance(CD - 0.5)
    assert not reg.admit(KEY).allowed
    clock.advance(0.5)
    assert reg.admit(KEY).probe
    assert events[-2][1:] == (State.HALF_OPEN, State.OPEN)


async def test_twenty_concurrent_requests_after_cooldown_send_exactly_one_probe_upstream() -> None:
    """Twenty requests run through the executor at once while the probe is still in flight
    (its upstream call is parked on an event), so refusals really interleave with it."""
    from routing.config.snapshot import Resilience
    from routing.core.executor import Executor
    from routing.core.retry_budget import RetryBudgets
    from tests.core.fakes import link

    reg, clock, _ = make()
    lk = link("chat-a")
    key = lk.breaker_key
    for _ in range(TH):
        assert reg.admit(key).allowed
        reg.record_failure(key, False)
    clock.advance(CD + 1)
    executor = Executor(reg, RetryBudgets(clock=clock), clock=clock, sleep=clock.sleep, rand=lambda: 0.5)
    resilience = Resilience(breaker_failure_threshold=TH, breaker_cooldown_s=CD, max_retries=0)
    upstream_calls = 0
    probe_in_flight = asyncio.Event()
    release_probe = asyncio.Event()

    async def attempt(_link, _deadline):
        nonlocal upstream_calls
        upstream_calls += 1
        probe_in_flight.set()
        await release_probe.wait()
        return "served"

    async def request():
        return await executor.run([lk], attempt, resilience, clock() + 60)

    tasks = [asyncio.create_task(request()) for _ in range(20)]
    await asyncio.wait_for(probe_in_flight.wait(), 5)

    async def all_but_the_probe_answered() -> None:
        while sum(t.done() for t in tasks) < 19:
            await asyncio.sleep(0)

    await asyncio.wait_for(all_but_the_probe_answered(), 5)  # while the probe is still in flight
    assert reg.state(key) is State.HALF_OPEN
    release_probe.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert upstream_calls == 1
    assert [o.result for o in outcomes].count("served") == 1
    assert sorted(o.error.code for o in outcomes if o.error is not None) == ["circuit_open"] * 19
    assert all(int(dict(o.error.headers)["Retry-After"]) >= 1 for o in outcomes if o.error is not None)
    assert reg.state(key) is State.CLOSED


def test_lost_probe_is_rearmed_after_one_cooldown() -> None:
    reg, clock, _ = make()
    trip(reg)
    clock.advance(CD)
    assert reg.admit(KEY).probe  # this probe never reports back
    clock.advance(CD - 1)
    refused = reg.admit(KEY)
    assert not refused.allowed and refused.retry_after_s == 1.0
    clock.advance(1)
    again = reg.admit(KEY)
    assert again.allowed and again.probe
    assert not reg.admit(KEY).allowed


def test_release_frees_the_probe_slot_without_charging() -> None:
    reg, clock, _ = make()
    trip(reg)
    clock.advance(CD)
    assert reg.admit(KEY).probe
    reg.release(KEY, True)
    assert reg.state(KEY) is State.HALF_OPEN
    assert reg.admit(KEY).probe


def test_release_of_non_probe_changes_nothing() -> None:
    reg, _, _ = make()
    reg.record_failure(KEY, False)
    reg.release(KEY, False)
    view = reg.views()[0]
    assert view.consecutive_failures == 1 and view.state is State.CLOSED


def test_force_open_holds_until_reset() -> None:
    reg, clock, events = make()
    reg.force_open(KEY, "maintenance", None)
    assert reg.state(KEY) is State.OPEN
    clock.advance(10 * CD)
    assert not reg.admit(KEY).allowed  # no probe while forced
    reg.record_success(KEY, True)
    assert reg.state(KEY) is State.OPEN
    (view,) = reg.views()
    assert view.forced_reason == "maintenance" and view.forced_until is None
    reg.reset(KEY)
    assert reg.state(KEY) is State.CLOSED
    assert reg.admit(KEY).allowed
    assert [e[1:] for e in events] == [(State.CLOSED, State.OPEN), (State.OPEN, State.CLOSED)]


def test_force_open_expires_at_its_epoch() -> None:
    reg, _, _ = make()
    wall = reg.wall  # type: ignore[attr-defined]
    reg.force_open(KEY, "upgrade", wall.t + 60)
    adm = reg.admit(KEY)
    assert not adm.allowed and adm.retry_after_s == 60
    wall.advance(60)
    assert reg.admit(KEY).allowed
    assert reg.state(KEY) is State.CLOSED
    assert reg.views()[0].forced_reason is None


def test_reset_closes_an_open_breaker() -> None:
    reg, _, _ = make()
    trip(reg)
    reg.reset(KEY)
    assert reg.state(KEY) is State.CLOSED
    assert reg.views()[0].consecutive_failures == 0


def test_views_report_cooldown_and_advance_to_half_open() -> None:
    reg, clock, events = make()
    trip(reg)
    clock.advance(12)
    (view,) = reg.views()
    assert view.state is State.OPEN and view.cooldown_remaining_s == 18 and view.consecutive_failures == TH
    clock.advance(18)
    assert reg.views()[0].state is State.HALF_OPEN
    assert reg.admit(KEY).probe
    assert events[-1][1:] == (State.OPEN, State.HALF_OPEN)


def test_a_failing_listener_does_not_break_transitions() -> None:
    reg, _, events = make()

    def broken(*_):
        raise RuntimeError("listener bug")

    reg.add_listener(broken)
    trip(reg)
    assert reg.state(KEY) is State.OPEN
    assert len(events) == 1


def test_retain_drops_removed_links_and_keeps_the_rest() -> None:
    reg, _, _ = make()
    other = ("local-b", "chat-b")
    trip(reg)
    reg.record_failure(other, False)
    reg.retain({KEY})
    assert reg.state(KEY) is State.OPEN
    assert [v.key for v in reg.views()] == [KEY]


def test_byo_key_is_independent_of_shared_key() -> None:
    reg, _, _ = make()
    byo = KEY + ("org:acme",)
    trip(reg)
    assert reg.admit(byo).allowed
    assert not reg.admit(KEY).allowed


# --- found by mutation testing (make mutation): each of these failed on a surviving mutant


def test_every_refusal_is_a_plain_refusal_with_the_exact_wait() -> None:
    reg, clock, _ = make()
    trip(reg)
    clock.advance(CD - 4)
    assert reg.admit(KEY) == Admission(False, False, 4.0)  # open
    clock.advance(4)
    assert reg.admit(KEY).probe
    clock.advance(10)
    assert reg.admit(KEY) == Admission(False, False, CD - 10)  # half-open, probe in flight
    reg.force_open(KEY, "maintenance", reg.wall.t + 7.5)  # type: ignore[attr-defined]
    assert reg.admit(KEY) == Admission(False, False, 7.5)  # forced until an epoch
    reg.wall.advance(7.25)  # type: ignore[attr-defined]
    assert reg.admit(KEY) == Admission(False, False, 0.25)
    reg.force_open(KEY, "maintenance", None)
    assert reg.admit(KEY) == Admission(False, False, CD)  # forced until reset: one cooldown


def test_listeners_are_told_which_link_changed_on_every_transition() -> None:
    reg, clock, events = make()
    trip(reg)
    clock.advance(CD)
    reg.admit(KEY)  # OPEN -> HALF_OPEN
    reg.record_failure(KEY, True)  # the probe fails: HALF_OPEN -> OPEN
    clock.advance(CD)
    reg.views()  # the dashboard's read moves it to HALF_OPEN too
    assert reg.admit(KEY).probe
    reg.record_success(KEY, True)  # HALF_OPEN -> CLOSED
    reg.force_open(KEY, "maintenance", None)
    reg.reset(KEY)
    assert events == [
        (KEY, State.CLOSED, State.OPEN),
        (KEY, State.OPEN, State.HALF_OPEN),
        (KEY, State.HALF_OPEN, State.OPEN),
        (KEY, State.OPEN, State.HALF_OPEN),
        (KEY, State.HALF_OPEN, State.CLOSED),
        (KEY, State.CLOSED, State.OPEN),
        (KEY, State.OPEN, State.CLOSED),
    ]


def test_only_the_probes_outcome_moves_a_half_open_breaker() -> None:
    reg, clock, _ = make()
    trip(reg)
    clock.advance(CD)
    assert reg.admit(KEY).probe
    reg.record_success(KEY, False)  # a request admitted before the trip finished late
    assert reg.state(KEY) is State.HALF_OPEN
    reg.record_failure(KEY, False)
    assert reg.state(KEY) is State.HALF_OPEN


def test_a_closed_breaker_needs_threshold_fresh_failures_after_a_successful_probe() -> None:
    reg, clock, _ = make()
    trip(reg)
    clock.advance(CD)
    assert reg.admit(KEY).probe
    reg.record_success(KEY, True)
    for _ in range(TH - 1):
        reg.record_failure(KEY, False)
    assert reg.state(KEY) is State.CLOSED
    reg.record_failure(KEY, False)
    assert reg.state(KEY) is State.OPEN


def test_releasing_a_probe_of_an_unknown_link_is_harmless() -> None:
    reg, _, _ = make()
    reg.release(("nowhere", "x"), True)
    assert reg.views() == []


def test_views_of_a_forced_breaker_and_of_a_cooldown_under_a_second() -> None:
    reg, clock, _ = make()
    for _ in range(2):
        reg.record_failure(KEY, False)
    until = reg.wall.t + 10  # type: ignore[attr-defined]
    reg.force_open(KEY, "", until)
    (view,) = reg.views()
    assert view == BreakerView(KEY, State.OPEN, 2, 10.0, "forced open", until)
    reg.reset(KEY)
    trip(reg)
    clock.advance(CD - 0.5)
    (view,) = reg.views()
    assert view.state is State.OPEN and view.cooldown_remaining_s == 0.5


def test_a_changed_cooldown_is_what_the_views_count_down() -> None:
    reg, clock, _ = make()
    trip(reg)
    configured(reg, TH, 10.0)  # the configuration now says 10 s
    reg.admit(KEY)
    clock.advance(4)
    assert reg.views()[0].cooldown_remaining_s == 6.0


def test_a_removed_listener_hears_nothing_and_removing_twice_is_harmless() -> None:
    reg, _, events = make()
    heard: list[tuple] = []

    def listener(*event) -> None:
        heard.append(event)

    reg.add_listener(listener)
    reg.remove_listener(listener)
    reg.remove_listener(listener)
    trip(reg)
    assert heard == [] and len(events) == 1  # the other listener still hears


def test_retain_accepts_any_iterable_of_keys() -> None:
    reg, _, _ = make()
    trip(reg)
    reg.record_failure(("local-b", "chat-b"), False)
    reg.retain([KEY])
    assert [v.key for v in reg.views()] == [KEY]


def test_views_end_an_expired_forced_open_and_report_no_wait_when_closed() -> None:
    reg, _, _ = make()
    reg.record_failure(KEY, False)
    (view,) = reg.views()
    assert view.state is State.CLOSED and view.cooldown_remaining_s == 0.0
    reg.force_open(KEY, "upgrade", reg.wall.t + 10)  # type: ignore[attr-defined]
    reg.wall.advance(10)  # type: ignore[attr-defined]
    (view,) = reg.views()  # the dashboard reads it before any request does
    assert (view.state, view.forced_reason, view.cooldown_remaining_s) == (State.CLOSED, None, 0.0)


def test_adopting_another_process_s_open_breaker_keeps_its_cooldown_end_and_says_what_changed() -> None:
    """Found by mutation testing (adopt_open, used by breaker sync): its clamp, its change test and its key."""
    reg, clock, events = make()
    assert reg.adopt_open(KEY, 12.0, CD) is True  # opened elsewhere 18 s ago: 12 s left here too
    assert events == [(KEY, State.CLOSED, State.OPEN)]
    assert reg.views()[0].cooldown_remaining_s == 12.0
    assert not reg.admit(KEY).allowed
    assert reg.adopt_open(KEY, 12.04, CD) is False  # the same opening heard again (within 0.05 s): no change
    assert reg.adopt_open(KEY, 13.0, CD) is True  # a later opening elsewhere: the cooldown ends later
    assert reg.views()[0].cooldown_remaining_s == 13.0
    assert reg.adopt_open(KEY, -5.0, CD) is True  # already over elsewhere: the probe is due at once here
    assert reg.views()[0].cooldown_remaining_s == 0.0
    other = ("local-b", "chat-b")
    assert reg.adopt_open(other, 999.0, 20.0) is True  # never more than its own cooldown
    assert {v.key: v.cooldown_remaining_s for v in reg.views()}[other] == 20.0
    clock.advance(20.0)
    configured(reg, TH, 20.0)  # the configuration says 20 s too
    assert reg.admit(other).allowed  # the adopted cooldown is the link's: its probe after 20 s


def test_adopting_an_opening_leaves_a_breaker_forced_open_by_the_operator_alone() -> None:
    reg, _, events = make()
    reg.force_open(KEY, "maintenance", None)
    assert reg.adopt_open(KEY, 5.0, CD) is False
    assert reg.views()[0].forced_reason == "maintenance"
