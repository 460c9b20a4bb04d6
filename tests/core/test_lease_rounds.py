"""Shares of cluster buckets and budgets in bursts, pure (docs/limits.md#shared): what a short request
records for the lessor, when it is refused at once, and what a round asks the cluster for.

No Redis and no event loop: the clocks are injected, and a round's planning is the Syncer's own
(`_plan_bucket`, `_plan_account`, which touch no Redis); the cluster's answer is applied by hand as the
Lua scripts would. Real rounds on a real Redis are tests/runtime/test_shared_limits.py; real processes are
tests/e2e/test_limit_bursts_e2e.py.
"""

from __future__ import annotations

import math

import pytest

from routing.core.buckets import SharedBucket
from routing.core.budget_accounts import Budgets, Exhausted
from routing.core.limiter import Limiter, Refused
from routing.runtime.cluster.shared_limits import Syncer


class Clock:
    def __init__(self, now: float = 1_780_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def syncer(processes: int = 2) -> Syncer:
    """A Syncer for its planning only (it connects to nothing until `run`)."""
    s = Syncer(Budgets(Clock()), Limiter(), "redis://127.0.0.1:9/0")
    s.processes = processes
    return s


def grant(bucket: SharedBucket, want: float, cluster: float, now: float) -> float:
    """The cluster bucket's side of one round (BUCKET_SCRIPT): grant up to `want` whole tokens; the new level."""
    granted = math.floor(min(want, cluster)) if want > 0 else want
    granted = max(granted, 0.0) if want > 0 else granted
    cluster -= granted
    bucket.level += max(granted, 0.0)
    bucket.pool, bucket.pool_at = cluster, now
    return cluster


def test_short_requests_add_up_what_they_need_for_the_next_round() -> None:
    bucket = SharedBucket(60, now=0.0)  # a new share: empty, its cluster bucket presumed full
    for _ in range(30):
        assert bucket.short(1.0)
    assert bucket.need == 30.0  # the round asks for all 30 waiters, not for the largest one
    bucket.level = 0.5
    assert not bucket.short(0.4)  # its share has it: not short
    assert not bucket.short(61.0)  # more than the whole limit: never fits, no round can help


def test_the_cluster_level_as_last_seen_refills_until_the_next_round() -> None:
    bucket = SharedBucket(60, now=100.0)
    bucket.pool, bucket.pool_at = 0.0, 100.0  # the last round left the cluster bucket empty
    assert not bucket.may_lease(1.0) and bucket.wait(1.0) == pytest.approx(1.0)
    bucket.refill(102.5, 60)  # 2.5 s later: 2.5 requests back in the cluster bucket
    assert bucket.cluster_level() == pytest.approx(2.5)
    assert bucket.remaining() == pytest.approx(2.5)  # the headers' remaining: share + cluster
    assert bucket.may_lease(2.0) and not bucket.may_lease(3.0)
    bucket.refill(1000.0, 60)
    assert bucket.cluster_level() == 60.0  # never above the capacity


def test_a_request_short_only_on_shares_records_its_need_on_each_and_waits() -> None:
    limiter = Limiter(Clock(0.0))
    limiter.shared = True
    with pytest.raises(Refused) as refused:
        limiter.admit("acme", (60, 10_000), "bot", (10, None), lambda: 1_500)
    assert refused.value.short  # wait for a round: the cluster buckets may have it
    needs = {key: bucket.need for key, bucket in limiter.items()}
    assert needs == {
        ("agent", "acme", "bot", "requests"): 1.0,
        ("org", "acme", "requests"): 1.0,
        ("org", "acme", "tokens"): 1_500.0,
    }


def test_a_request_a_cluster_bucket_lacks_is_refused_at_once_without_asking() -> None:
    clock = Clock(0.0)
    limiter = Limiter(clock)
    limiter.shared = True
    with pytest.raises(Refused):
        limiter.admit("acme", (60, 10_000), "bot", None, lambda: 1_000)
    tokens = dict(limiter.items())[("org", "acme", "tokens")]
    requests = dict(limiter.items())[("org", "acme", "requests")]
    requests.need = tokens.need = 0.0
    tokens.pool = 400.0  # the last round saw 400 tokens left in the cluster tpm bucket
    with pytest.raises(Refused) as refused:
        limiter.admit("acme", (60, 10_000), "bot", None, lambda: 1_000)
    assert not refused.value.short and refused.value.limit == "tokens"
    assert refused.value.retry_after_s == pytest.approx(600 / (10_000 / 60))  # the cluster bucket's wait
    assert requests.need == 0.0 and tokens.need == 0.0  # nothing asked of a round
    assert [b for b, _ in refused.value.lacking] == [requests, tokens]  # what a confirming round would ask


def test_a_round_with_waiters_asks_for_their_need_and_a_share_ahead_unless_near_the_end() -> None:
    s = syncer(processes=2)

    def waiting(n: int) -> SharedBucket:
        bucket = SharedBucket(60, now=0.0)
        for _ in range(n):
            bucket.short(1.0)
        return bucket

    bucket = waiting(30)
    want, owed = s._plan_bucket(bucket, now=0.1)
    assert (want, owed) == (33.0, 0.0)  # 30 left beyond the need: room for a share of 3 per process
    assert bucket.need == 0.0  # taken by this round: later waiters ask the next one
    grant(bucket, want, 60.0, now=0.1)
    assert bucket.level == 33.0  # the 30 waiters are admitted from it; the next 3 requests without a round
    assert s._plan_bucket(waiting(56), now=0.1)[0] == 56.0  # 4 left beyond the need < 2 shares: nothing ahead


def test_under_a_steady_load_far_from_the_end_requests_do_not_wait_for_rounds() -> None:
    """One round every 0.2 s, 40 requests between rounds (200 a second), a limit of 10⁹ a minute: after
    the first round every request is admitted from the share (they all waited for rounds when a round
    with waiters asked for their need alone: the next request found the share empty again)."""
    s = syncer(processes=2)
    bucket = SharedBucket(10**9, now=0.0)
    cluster, waited = float(10**9), 0
    for step in range(1, 11):
        waiting = 0
        for _ in range(40):
            if bucket.level >= 1.0:
                bucket.level -= 1.0
            else:
                assert bucket.short(1.0)
                waiting += 1
        want, _ = s._plan_bucket(bucket, now=step * 0.2)
        cluster = grant(bucket, want, cluster, now=step * 0.2)
        bucket.level -= waiting  # the round's grant admits them
        waited += waiting
    assert waited == 40  # the first 40, before the first round


def test_a_burst_over_two_processes_is_served_up_to_the_cluster_bucket() -> None:
    """Two processes, 100 waiters each, a cluster bucket of 60: rounds alternate; 60 are served."""
    s = syncer(processes=2)
    shares = [SharedBucket(60, now=0.0), SharedBucket(60, now=0.0)]
    cluster, served, refused = 60.0, 0, 0
    waiting = [100, 100]
    while any(waiting):
        for i, bucket in enumerate(shares):
            if not waiting[i]:
                continue
            for _ in range(waiting[i]):
                bucket.short(1.0)
            want, _ = s._plan_bucket(bucket, now=0.1)
            cluster = grant(bucket, want, cluster, now=0.1)
            while waiting[i] and bucket.level >= 1.0:
                bucket.level -= 1.0
                waiting[i] -= 1
                served += 1
            while waiting[i] and not bucket.may_lease(1.0):  # the round saw the cluster bucket lack it
                waiting[i] -= 1
                refused += 1
    assert (served, refused) == (60, 140)
    assert cluster == 0.0 and shares[0].level == shares[1].level == 0.0  # nothing held idle


def test_without_waiters_a_share_is_held_ahead_until_the_cluster_nears_its_end() -> None:
    s = syncer(processes=2)
    bucket = SharedBucket(60, now=0.0)
    bucket.pool = 60.0
    assert s._plan_bucket(bucket, now=0.1) == (3.0, 0.0)  # 5 % of 60 ahead of use: the fast path
    bucket.level, bucket.pool = 3.0, 2.0  # 5 left in the cluster: less than a share per process
    want, _ = s._plan_bucket(bucket, now=0.2)
    assert want == -3.0 and bucket.level == 0.0  # given back: a waiter elsewhere may need it
    bucket.level, bucket.used_at = 3.0, 0.0
    bucket.pool = 60.0
    want, _ = s._plan_bucket(bucket, now=2.5)  # unused for more than 2 s: given back too
    assert want == -3.0 and bucket.level == 0.0


def test_refunds_beyond_the_share_go_back_at_the_next_round() -> None:
    s = syncer(processes=2)
    bucket = SharedBucket(10_000, now=0.0)
    bucket.pool, bucket.peak = 10_000.0, 1_000.0
    bucket.level = 2_900.0  # a tpm share of 1 000 and the refunds of two answers smaller than reserved
    want, _ = s._plan_bucket(bucket, now=0.1)
    assert want == -1_900.0 and bucket.level == 1_000.0


def test_budget_waiters_are_summed_and_a_round_leases_exactly_that() -> None:
    clock = Clock()
    budgets = Budgets(clock)
    budgets.shared = True
    budgets.starved = lambda account: None
    for _ in range(5):
        with pytest.raises(Exhausted) as refused:
            budgets.admit("acme", (0.01, "total"), "bot", None, 0.00007)
        assert refused.value.short
    account = budgets.find(("org", "acme"))
    assert account.need == pytest.approx(0.00035)
    s = syncer(processes=2)
    s.budgets = budgets
    want, owed, seed = s._plan_account(account, clock.now)
    assert (want, owed, seed) == (850, 0, 0)  # µUSD: five worst cases and 5 % of $0.01 ahead
    account.lease, account.cluster = 0.00085, 0.00085
    for _ in range(12):  # the five waiters and the seven that follow, without a round
        budgets.admit("acme", (0.01, "total"), "bot", None, 0.00007)
    assert account.lease == pytest.approx(0.00001, abs=1e-12)
    account.need, account.cluster = 0.00035, 0.0097  # five waiters, $0.0003 left beyond what this one holds
    assert s._plan_account(account, clock.now) == (340, 0, 840)  # near the end: their need only


def test_a_budget_the_cluster_counter_lacks_is_refused_at_once() -> None:
    clock = Clock()
    budgets = Budgets(clock)
    budgets.shared = True
    budgets.starved = lambda account: None
    with pytest.raises(Exhausted):
        budgets.admit("acme", (0.01, "total"), "bot", None, 0.00007)
    account = budgets.find(("org", "acme"))
    account.need = 0.0
    account.cluster = 0.00996  # the counter as last seen: $0.00004 left, less than this request
    with pytest.raises(Exhausted) as refused:
        budgets.admit("acme", (0.01, "total"), "bot", None, 0.00007)
    assert not refused.value.short and refused.value.lacking == [account]
    assert account.need == 0.0


def test_a_lease_that_holds_exactly_the_last_requests_admits_them_all() -> None:
    """Two rounds lease $0.0005 then $0.00349 for requests of $0.00007: 57 fit in the sum exactly. The
    float arithmetic of the lease leaves the last one some 1e-18 short of a request; it is admitted."""
    budgets = Budgets(Clock())
    budgets.shared = True
    budgets.starved = lambda account: None
    with pytest.raises(Exhausted):
        budgets.admit("acme", (0.01, "total"), "bot", None, 0.00007)
    account = budgets.find(("org", "acme"))
    served = 0
    for granted in (0.0005, 0.00349):
        account.need = 0.0
        account.lease += granted
        account.cluster = 0.00399
        while True:
            try:
                budgets.admit("acme", (0.01, "total"), "bot", None, 0.00007)
            except Exhausted:
                break
            served += 1
    assert served == 57  # 56 before: the last one was refused for want of 6e-19 dollars
