"""With Redis unreachable, N processes together admit at most the limit (docs/limits.md#fail-open).

Each process enforces a local bucket of capacity ÷ N that refills at rate ÷ N, so over a
window of W seconds the cluster admits at most the limit's burst (the shares start full)
plus the limit's refill over W, and the shares are not stingy either. A property over
random clusters, limits, windows and arrival orders, on an injected clock: each
"process" is a Limiter + Syncer put into its outage share by the syncer's own code.
"""

from __future__ import annotations

import random
import types

import pytest

from routing.config import live
from routing.core.budget_accounts import Budgets
from routing.core.limiter import Limiter, Refused
from routing.runtime.cluster import shared_leases as leases
from routing.runtime.cluster import shared_limits
from routing.runtime.cluster import shared_recovery as recovery
from routing.runtime.cluster.shared_limits import Syncer

SEEDS = range(24)


class Clock:
    def __init__(self) -> None:
        self.now = 5_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    # The syncer stamps the outage share with time.monotonic: the same injected clock.
    for module in (leases, recovery):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=clock, time=clock))
    yield clock
    live.set_degraded("redis", False, "limits")


def cluster_in_outage(clock: Clock, n: int, rpm: int) -> list[Limiter]:
    """N processes whose rounds fail: each puts its buckets on the outage share (Syncer._fail_open)."""
    limiters = []
    for _ in range(n):
        limiter = Limiter(clock)
        syncer = Syncer(Budgets(clock), limiter, "redis://127.0.0.1:1/0", clock=clock)
        syncer.processes = n  # the heartbeats seen before Redis went away
        with pytest.raises(Refused):  # no share leased yet: the bucket exists, empty
            limiter.admit("acme", None, "bot", (rpm, None), lambda: 0)
        syncer._fail_open([], [bucket for _, bucket in limiter.items()], ConnectionError("Redis is gone"))
        limiters.append(limiter)
    return limiters


@pytest.mark.parametrize("seed", SEEDS)
def test_n_processes_without_redis_admit_at_most_the_limit_over_a_window(clock, seed):
    rng = random.Random(seed)
    n, rpm, window_s = rng.randint(2, 5), rng.choice([10, 60, 120, 600]), rng.choice([30.0, 60.0, 150.0])
    limiters = cluster_in_outage(clock, n, rpm)
    start, admitted, asked = clock.now, 0, 0
    mean_gap = 60.0 / rpm / 4  # the clients ask four times faster than the limit allows
    while clock.now - start < window_s:
        clock.now += rng.expovariate(1 / mean_gap)
        try:
            rng.choice(limiters).admit("acme", None, "bot", (rpm, None), lambda: 0)
        except Refused:
            pass
        else:
            admitted += 1
        asked += 1
    allowed = rpm + rpm * (clock.now - start) / 60.0  # the burst, then the limit's rate
    context = f"{n} processes, rpm {rpm}, {clock.now - start:.0f} s: {admitted} admitted of {asked}"
    assert admitted <= allowed + n, f"over the limit: {context}, at most {allowed:.0f} allowed"
    assert admitted >= allowed - 2 * n, f"shares too small: {context}, {allowed:.0f} allowed"


def admitted(limiter: Limiter, rpm: int, asked: int) -> int:
    n = 0
    for _ in range(asked):
        try:
            limiter.admit("acme", None, "bot", (rpm, None), lambda: 0)
        except Refused:
            continue
        n += 1
    return n


def test_an_idle_process_without_redis_holds_no_more_than_its_share(clock):
    """Found by mutation testing: the share's cap is what bounds a burst after an idle spell."""
    (one, _, _) = cluster_in_outage(clock, 3, 60)
    assert admitted(one, 60, 100) == 20  # the full share: 60 ÷ 3
    clock.now += 600.0  # ten idle minutes refill it, but only up to the share
    assert admitted(one, 60, 100) == 20
    clock.now += 3.0  # then 1 request every 3 s: rate 1 a second ÷ 3
    assert admitted(one, 60, 100) == 1


def test_a_limit_changed_during_the_outage_changes_the_share_and_its_rate(clock):
    (one, _) = cluster_in_outage(clock, 2, 60)
    assert admitted(one, 60, 100) == 30
    clock.now += 600.0
    assert admitted(one, 120, 100) == 60  # the new limit's share: 120 ÷ 2
    clock.now += 1.0
    assert admitted(one, 120, 100) == 1  # its rate: 2 a second ÷ 2


def test_each_process_without_redis_takes_an_even_share_of_what_was_left_of_a_budget_once(clock):
    """Found by mutation testing (`_fail_open`'s budget half): N processes, $10 budget of
    which the cluster had counted $4, each may spend at most $2 more until Redis is back."""
    from routing.core.budget_accounts import Account

    syncer = Syncer(Budgets(clock), Limiter(clock), "redis://127.0.0.1:1/0", clock=clock)
    syncer.processes = 3
    known = Account(("acme",), 10.0, "month", clock.now, base=1.0)
    known.cluster = 4.0  # the cluster counter's last value wins over this process's own base + spent
    known.owed = 0.25  # spent before Redis went away, not yet counted: still owed after
    local = Account(("acme", "bot"), 10.0, "month", clock.now, base=1.0)
    local.spent = 2.5  # never synced: base + spent is what is known
    spent_out = Account(("beta",), 5.0, "month", clock.now, base=0.0)
    spent_out.cluster = 7.0  # already over: no share, never a negative one
    syncer._fail_open([known, local, spent_out], [], ConnectionError("Redis is gone"))
    assert known.lease == pytest.approx(2.0) and known.owed == pytest.approx(2.25)
    assert local.lease == pytest.approx((10.0 - 3.5) / 3) and local.owed == pytest.approx((10.0 - 3.5) / 3)
    assert spent_out.lease == 0.0 and spent_out.owed == 0.0
    assert syncer.degraded and live.degraded.get("redis") is True
    syncer._fail_open([known, local, spent_out], [], ConnectionError("still gone"))  # the next failed round
    assert known.lease == pytest.approx(2.0), "a second failed round must not lease the share again"


def test_a_budget_s_lease_round_asks_for_a_share_ahead_of_use_only_while_it_is_used_and_the_cluster_has_room(clock):
    """Found by mutation testing (`_plan_account`, a real gap): the share ahead of use, its give-back and
    the waiters it never takes from. Amounts in µUSD, as the Lua script takes them."""
    from routing.core.budget_accounts import Account

    syncer = Syncer(Budgets(clock), Limiter(clock), "redis://127.0.0.1:1/0", clock=clock)
    syncer.processes = 2

    def account(**fields) -> Account:
        acct = Account(("acme",), 10.0, "day", clock.now, base=1.0)
        acct.lease, acct.used_at, acct.peak = 0.0, clock.now, 0.01
        for name, value in fields.items():
            setattr(acct, name, value)
        return acct

    used = account(spent=0.5, reserved=0.25, owed=0.125)
    assert syncer._plan_account(used, clock.now) == (500_000, 125_000, 1_750_000)  # 5 % of $10 ahead; owed; seed
    assert syncer._plan_account(account(peak=0.8), clock.now)[0] == 800_000  # one request's worst case, if larger
    assert syncer._plan_account(account(need=0.3), clock.now)[0] == 800_000  # waiters: what they need + a share
    assert syncer._plan_account(account(need=0.3, cluster=9.0), clock.now)[0] == 300_000  # $0.70 beyond: no more
    assert syncer._plan_account(account(), clock.now, ahead=False)[0] == 0  # a re-run: nothing ahead of use
    assert syncer._plan_account(account(cluster=9.2), clock.now)[0] == 0  # $0.80 left < 2 processes x $0.50
    assert syncer._plan_account(account(cluster=9.0, lease=0.5), clock.now)[0] == 0  # our $0.50 counts as left
    assert syncer._plan_account(account(peak=0.8000004), clock.now)[0] == 800_001  # never short of a request
    just = account(used_at=clock.now - shared_limits.IDLE_S)  # used IDLE_S ago exactly: still in use
    assert syncer._plan_account(just, clock.now)[0] == 500_000
    idle = account(lease=0.5, used_at=clock.now - shared_limits.IDLE_S - 0.1)
    assert syncer._plan_account(idle, clock.now)[0] == -500_000 and idle.lease == 0.0  # given back when idle
    held = account(lease=0.5, used_at=clock.now - shared_limits.IDLE_S - 0.1, waiting=0.2)
    assert syncer._plan_account(held, clock.now)[0] == -300_000 and held.lease == pytest.approx(0.2)  # not theirs


def test_a_round_s_grants_are_applied_and_a_give_back_refused_during_a_rebuild_is_restored(clock):
    """Found by mutation testing (`_apply`, a real gap): what the counters answered, per budget and bucket.
    Amounts in µUSD and tokens, as the Lua script answers them; -1 for a counter being rebuilt."""
    from routing.core.buckets import SharedBucket
    from routing.core.budget_accounts import Account

    syncer = Syncer(Budgets(clock), Limiter(clock), "redis://127.0.0.1:1/0", clock=clock)

    def account(**fields) -> Account:
        acct = Account(("acme",), 10.0, "day", clock.now, base=0.0)
        acct.lease = 0.5
        for name, value in fields.items():
            setattr(acct, name, value)
        return acct

    granted = account(spent=2.0, owed=0.3, floor=True)
    gave_back = account(lease=0.2)  # it gave $0.30 back this round, but the counter was being rebuilt
    rolled = account(lease=0.2)  # the same, but its period rolled meanwhile: that counter was the old one's
    rolled_start = rolled.start - 86400.0
    waiting = account(need=0.0)  # its waiters asked for $0.40 during a rebuild: asked again next round
    stale = account(spent=1.0)  # answered for the old period: ignored
    shared, local, gave = SharedBucket(600, clock.now), SharedBucket(600, clock.now), SharedBucket(600, clock.now)
    shared.level, local.level, local.divisor, gave.level = 3.0, 7.0, 2, 2.0
    syncer._apply(
        [
            (granted, granted.start, 100_000, 300_000, 0),
            (gave_back, gave_back.start, -300_000, 0, 0),
            (rolled, rolled_start, -300_000, 0, 0),
            (waiting, waiting.start, 400_000, 0, 0),
            (stale, stale.start - 86400.0, 100_000, 0, 0),
        ],
        [(shared, 5.0, 0.0), (local, 5.0, 0.0), (gave, -3.0, 0.0)],
        [(100_000, 4_200_000), (0, -1), (0, -1), (0, -1), (100_000, 9_000_000), (5, 250), (4, 300), (-3, 90)],
        clock.now + 1.0,
    )
    assert granted.lease == pytest.approx(0.6) and granted.cluster == pytest.approx(4.2)
    assert granted.owed == pytest.approx(0.0) and granted.synced == 2.0 and granted.floor is False
    assert gave_back.lease == pytest.approx(0.5) and gave_back.cluster is None  # restored; nothing else happened
    assert rolled.lease == pytest.approx(0.2)  # not restored into the new period
    assert waiting.need == pytest.approx(0.4) and waiting.lease == pytest.approx(0.5)
    assert stale.lease == pytest.approx(0.5) and stale.cluster is None and stale.synced == 0.0
    assert (shared.level, shared.pool, shared.pool_at) == (8.0, 250.0, clock.now + 1.0)  # its share grows
    assert (local.level, local.divisor, local.pool) == (4.0, 0, 300.0)  # back from a local share: replaced
    assert (gave.level, gave.pool) == (2.0, 90.0)  # a give-back's answer grants nothing (never below zero)


async def test_a_degraded_syncer_keeps_knocking_with_nothing_to_share_and_recovers_when_redis_answers(clock):
    """Found by mutation testing (`_sync_round`, a real gap): the degraded round's heartbeat, and a quiet
    process that is not degraded making no Redis call at all. The pipeline's reply is scripted."""
    syncer = Syncer(Budgets(clock), Limiter(clock), "redis://127.0.0.1:1/0", clock=clock)
    sent: list[int] = []

    async def send(now, account_plans, buckets, bucket_plans, seat_plans=()):
        sent.append(len(account_plans) + len(bucket_plans))
        return [1, 0, 3, b"epoch-1"]  # the heartbeat counted 3 processes; the counters' marker

    syncer._send = send
    syncer.epoch = "epoch-1"
    assert await syncer._sync_round() is False
    assert sent == []  # nothing due, not degraded: no Redis traffic
    syncer.degraded, syncer._outage = True, {("acme",)}
    live.set_degraded("redis", True, "limits")
    assert await syncer._sync_round() is False
    assert sent == [0]  # degraded: the round runs with nothing to share, to learn Redis is back
    assert syncer.degraded is False and syncer._outage == set() and live.degraded.get("redis") is False
    assert syncer.processes == 3
