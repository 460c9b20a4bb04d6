"""Org views of a shared breaker (docs/resilience.md#org-views), in simulated time.

One org's failures open only that org's view of the link while another org uses it; the
shared breaker opens when the run of failures reaching the threshold is mixed (another org,
or traffic with no org, failed too), when the orgs whose views are open are all those that
used the link in the last cooldown, or at once for failures no body can cause; any
success on the link ends the run. Each view half-opens on its own and admits its own probe.
"""

from __future__ import annotations

import pytest

from routing.core.breaker import PROBE_LINK, PROBE_ORG, BreakerKey, BreakerRegistry, State
from tests.core.breakers import configured
from tests.core.fakes import FakeClock

KEY = BreakerKey("mock", "chat")
TH, CD = 3, 30.0


def make() -> tuple[BreakerRegistry, FakeClock, list[tuple[str | None, State, State]]]:
    clock = FakeClock()
    reg = configured(BreakerRegistry(clock=clock, wall=FakeClock(1_700_000_000.0)), TH, CD)
    events: list[tuple[str | None, State, State]] = []
    reg.add_listener(lambda k, old, new: events.append((None, old, new)))
    reg.add_org_listener(lambda k, org, old, new: events.append((org, old, new)))
    return reg, clock, events


def request(reg: BreakerRegistry, org: str | None, ok: bool) -> bool:
    """One request of `org` on the link; False when the breaker refused it."""
    adm = reg.admit(KEY, org)
    if not adm.allowed:
        return False
    if ok:
        reg.record_success(KEY, adm.probe, org)
    else:
        reg.record_failure(KEY, adm.probe, org)
    return True


# (sequence of (org, ok) requests, shared state after, {org: its view's state after})
TABLE = [
    pytest.param(
        [("b", True)] + [("a", False)] * TH,
        State.CLOSED,
        {"a": State.OPEN, "b": State.CLOSED},
        id="one-org-opens-its-view-only-while-another-uses-the-link",
    ),
    pytest.param([("a", False)] * TH, State.OPEN, {"a": State.OPEN}, id="the-only-org-using-the-link-sees-an-outage"),
    pytest.param(
        [(None, True)] + [("a", False)] * TH,
        State.CLOSED,
        {"a": State.OPEN},
        id="traffic-without-an-org-is-another-user",
    ),
    pytest.param(
        [("a", False), ("b", False), ("a", False)],
        State.OPEN,
        {"a": State.CLOSED, "b": State.CLOSED},
        id="two-orgs-open-the-shared-breaker",
    ),
    pytest.param(
        [("a", False), ("b", True), ("a", False), ("b", True), ("a", False), ("b", True)],
        State.CLOSED,
        {"a": State.OPEN, "b": State.CLOSED},
        id="one-org-failing-while-another-succeeds",
    ),
    pytest.param(
        [("b", True)] + [("a", False)] * TH + [("b", False)],
        State.OPEN,
        {"a": State.OPEN, "b": State.CLOSED},
        id="other-traffic-fails-after-one-orgs-run",
    ),
    pytest.param(
        [("a", False), (None, False), ("a", False)],
        State.OPEN,
        {"a": State.CLOSED},
        id="traffic-without-an-org-counts-as-other",
    ),
    pytest.param([(None, False)] * TH, State.OPEN, {}, id="no-org-at-all-is-the-old-rule"),
    pytest.param(
        [("b", True)] + [("a", False)] * TH + [("b", True)] + [("b", False)] * TH,
        State.OPEN,
        {"a": State.OPEN, "b": State.OPEN},
        id="a-second-org-reaching-its-threshold-while-the-first-is-open",
    ),
    pytest.param(
        [("c", True)] + [("a", False)] * TH + [("c", True), ("b", False), ("c", True), ("b", False), ("b", False)],
        State.CLOSED,
        {"a": State.OPEN, "b": State.OPEN},
        id="but-not-when-the-links-other-traffic-succeeds-in-between",
    ),
    pytest.param(
        [("a", False), ("a", False), ("a", True), ("a", False), ("a", False)],
        State.CLOSED,
        {"a": State.CLOSED},
        id="an-orgs-success-resets-its-own-count",
    ),
]


@pytest.mark.parametrize(("requests", "shared", "orgs"), TABLE)
def test_who_failed_decides_which_view_opens(requests, shared, orgs) -> None:
    reg, _, _ = make()
    for org, ok in requests:
        assert request(reg, org, ok), f"{org} was refused mid-sequence"
    assert reg.state(KEY) is shared
    for org, state in orgs.items():
        assert reg.org_state(KEY, org) is state, org


def test_an_org_that_used_the_link_more_than_a_cooldown_ago_no_longer_counts() -> None:
    reg, clock, _ = make()
    request(reg, "b", True)
    clock.advance(CD + 1)
    for _ in range(TH):
        request(reg, "a", False)
    assert reg.state(KEY) is State.OPEN  # a is the only org using the link: an outage
    assert not reg.admit(KEY, "b").allowed  # b arriving now does not pay the threshold again


@pytest.mark.parametrize("org", ["a", None])
def test_a_failure_no_body_can_cause_charges_the_link_at_once(org) -> None:
    reg, _, _ = make()
    request(reg, "b", True)  # another org was served: attribution would keep a 500 run off the link
    for _ in range(TH):
        adm = reg.admit(KEY, org)
        reg.record_failure(KEY, adm.probe, org, charges_link=True)
    assert reg.state(KEY) is State.OPEN
    assert reg.org_state(KEY, "a") is State.CLOSED  # not held against the org


def test_an_open_org_view_refuses_only_that_org() -> None:
    reg, _, events = make()
    request(reg, "b", True)  # another org uses the link: a's failures are a's alone
    for _ in range(TH):
        request(reg, "a", False)
    refused = reg.admit(KEY, "a")
    assert not refused.allowed and refused.retry_after_s == CD
    assert reg.admit(KEY, "b").allowed
    assert reg.admit(KEY).allowed  # no org: the shared breaker only
    assert events == [("a", State.CLOSED, State.OPEN)]


def test_half_open_probing_per_org_view() -> None:
    reg, clock, events = make()
    request(reg, "b", True)  # another org uses the link: a's failures are a's alone
    for _ in range(TH):
        request(reg, "a", False)
    clock.advance(CD)
    probe = reg.admit(KEY, "a")
    assert probe.allowed and probe.probe == PROBE_ORG  # the org's probe, not the link's
    assert reg.org_state(KEY, "a") is State.HALF_OPEN
    assert not reg.admit(KEY, "a").allowed  # one probe at a time
    assert reg.admit(KEY, "b").allowed  # others are not affected
    reg.record_failure(KEY, probe.probe, "a")
    assert reg.org_state(KEY, "a") is State.OPEN  # failed probe: a new cooldown
    assert reg.state(KEY) is State.CLOSED
    clock.advance(CD)
    probe = reg.admit(KEY, "a")
    reg.record_success(KEY, probe.probe, "a")
    assert reg.org_state(KEY, "a") is State.CLOSED
    assert reg.admit(KEY, "a").allowed
    assert [e for e in events if e[0] == "a"] == [
        ("a", State.CLOSED, State.OPEN),
        ("a", State.OPEN, State.HALF_OPEN),
        ("a", State.HALF_OPEN, State.OPEN),
        ("a", State.OPEN, State.HALF_OPEN),
        ("a", State.HALF_OPEN, State.CLOSED),
    ]
    assert reg.org_views() == []  # a closed view with no failures is forgotten


def test_half_open_probing_of_the_shared_breaker_with_orgs() -> None:
    reg, clock, _ = make()
    for org, ok in [("a", False), ("b", False), ("a", False)]:
        request(reg, org, ok)
    assert reg.state(KEY) is State.OPEN
    assert not reg.admit(KEY, "c").allowed  # open for everyone
    clock.advance(CD)
    probe = reg.admit(KEY, "c")
    assert probe.allowed and probe.probe == PROBE_LINK
    assert not reg.admit(KEY, "b").allowed  # one probe for the link
    reg.record_success(KEY, probe.probe, "c")
    assert reg.state(KEY) is State.CLOSED
    assert reg.admit(KEY, "b").allowed


def test_an_org_whose_view_is_open_does_not_take_the_links_probe() -> None:
    reg, clock, _ = make()
    for org, ok in [("a", False), ("b", False), ("a", False)]:
        request(reg, org, ok)
    assert reg.state(KEY) is State.OPEN
    clock.advance(CD / 2)
    reg.record_failure(KEY, 0, "a")  # a request of a's admitted before the trip fails late
    assert reg.org_state(KEY, "a") is State.OPEN
    clock.advance(CD / 2)  # the link may probe now, a's view may not yet
    assert not reg.admit(KEY, "a").allowed
    probe = reg.admit(KEY, "b")
    assert probe.allowed and probe.probe == PROBE_LINK
    clock.advance(CD / 2)  # a's view half-opens, but the link's probe is still out
    assert not reg.admit(KEY, "a").allowed
    reg.record_success(KEY, probe.probe, "b")
    assert reg.state(KEY) is State.CLOSED
    own = reg.admit(KEY, "a")  # a's probe slot was not held by its refused request
    assert own.allowed and own.probe == PROBE_ORG
    reg.release(KEY, own.probe, "a")  # cancelled: the slot is free again
    again = reg.admit(KEY, "a")
    assert again.allowed and again.probe == PROBE_ORG
    reg.record_success(KEY, again.probe, "a")
    assert reg.org_state(KEY, "a") is State.CLOSED


def test_both_probes_at_once() -> None:
    reg, clock, _ = make()
    for org in ("a", "a", "a", "b"):
        request(reg, org, False)
    assert reg.state(KEY) is State.OPEN and reg.org_state(KEY, "a") is State.OPEN
    clock.advance(CD)
    both = reg.admit(KEY, "a")
    assert both.allowed and both.probe == PROBE_LINK | PROBE_ORG
    reg.record_failure(KEY, both.probe, "a")
    assert reg.state(KEY) is State.OPEN and reg.org_state(KEY, "a") is State.OPEN


def test_refused_by_the_shared_breaker_frees_the_orgs_probe_slot() -> None:
    reg, clock, _ = make()
    request(reg, "b", True)  # another org uses the link: a's failures are a's alone
    for _ in range(TH):
        request(reg, "a", False)
    clock.advance(CD)  # a's view may probe now
    for org, ok in [("b", False), ("c", False), ("b", False)]:
        request(reg, org, ok)
    assert reg.state(KEY) is State.OPEN
    assert not reg.admit(KEY, "a").allowed  # the shared breaker refuses a
    assert reg.org_views()[0].state is State.HALF_OPEN
    clock.advance(CD)
    probe = reg.admit(KEY, "a")  # a's slot was not held by the refused request
    assert probe.allowed and probe.probe & PROBE_ORG


def test_reset_closes_every_org_view() -> None:
    reg, _, events = make()
    request(reg, "b", True)  # another org uses the link: a's failures are a's alone
    for _ in range(TH):
        request(reg, "a", False)
    reg.reset(KEY)
    assert reg.org_state(KEY, "a") is State.CLOSED and reg.org_views() == []
    assert events[-1] == ("a", State.OPEN, State.CLOSED)


def test_closed_admission_allocates_nothing() -> None:
    reg, _, _ = make()
    request(reg, "a", False)  # the breaker and a's view exist, both closed
    first = reg.admit(KEY, "b")
    assert reg.admit(KEY, "a") is first and reg.admit(KEY, None) is first


def test_the_org_views_listed_say_whose_view_what_state_how_many_failures_and_how_long_left() -> None:
    """Found by mutation testing: org_views (the dashboard's and the metrics' rows) could lose any field."""
    from routing.core.breaker import OrgView

    reg, clock, events = make()
    request(reg, "b", True)  # another org uses the link: a's failures are a's alone
    for _ in range(TH):
        request(reg, "a", False)
    request(reg, "b", False)  # then b: one failure, its view still closed
    clock.advance(10.0)
    views = sorted(reg.org_views(), key=lambda v: v.org)
    assert views == [OrgView(KEY, "a", State.OPEN, TH, CD - 10.0), OrgView(KEY, "b", State.CLOSED, 1, 0.0)]
    clock.advance(CD - 10.0)  # a's cooldown is over: listing the views half-opens a's, with nothing left
    assert sorted(reg.org_views(), key=lambda v: v.org)[0] == OrgView(KEY, "a", State.HALF_OPEN, TH, 0.0)
    assert events[-1] == ("a", State.OPEN, State.HALF_OPEN)
    probe = reg.admit(KEY, "a")
    assert probe.allowed and probe.probe & PROBE_ORG  # half-open by the listing: a's probe goes
