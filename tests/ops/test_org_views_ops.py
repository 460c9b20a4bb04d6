"""Org views (docs/resilience.md#org-views) where operators see them: dashboard state, feed, metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY

from routing.core.breaker import BreakerKey
from routing.ops.dashboard import state as dashboard_state
from routing.runtime.observe import feed, metrics
from routing.runtime.process import current

KEY = BreakerKey("op-a", "op-chat")


def test_an_open_org_view_is_shown_on_its_link_in_the_feed_and_in_metrics(snapshot) -> None:
    feed.install(current().breakers)
    resilience = snapshot.resilience
    # another org uses the link: acme's failures are acme's alone
    current().breakers.admit(KEY, "beta")
    for _ in range(resilience.breaker_failure_threshold):
        current().breakers.record_failure(KEY, 0, "acme")
    links = {link["link"]: link for link in dashboard_state.build_state()["links"]}
    assert links["op-a/op-chat"]["state"] == "closed"  # the link itself still serves everyone else
    assert links["op-a/op-chat"]["org_open"] == ["acme"]
    (view,) = links["op-a/op-chat"]["org_views"]  # with its count and cooldown, for the row's text
    assert (view["org"], view["state"], view["failures"]) == ("acme", "open", resilience.breaker_failure_threshold)
    assert 0 < view["cooldown_s"] <= resilience.breaker_cooldown_s
    event = feed.events()[-1]
    assert event["kind"] == "breaker" and event["org"] == "acme" and event["new"] == "open"
    assert event["link"] == "op-a/op-chat (org acme)"
    # the org label is a keyed hash unless SWITCHBOARD_METRICS_ORG_NAMES is on (docs/security.md#metrics)
    labels = {"provider": "op-a", "model": "op-chat", "org": metrics.org_label("acme")}
    assert REGISTRY.get_sample_value("switchboard_circuit_org_state", labels) == 1
    current().breakers.reset(KEY)
    assert REGISTRY.get_sample_value("switchboard_circuit_org_state", labels) == 0
    links = {link["link"]: link for link in dashboard_state.build_state()["links"]}
    assert links["op-a/op-chat"]["org_open"] == []


def test_a_parked_link_is_shown_on_the_dashboard_with_the_time_left(snapshot) -> None:
    """docs/errors.md#upstream: an out-of-quota link is shown parked, and no longer once its park is over."""
    from routing.runtime.process import current

    key = BreakerKey("op-a", "op-chat")
    now = [1000.0]
    clock, current().parking.clock = current().parking.clock, lambda: now[0]
    try:
        current().parking.park(key, 90, "out of quota")
        links = {link["link"]: link for link in dashboard_state.build_state()["links"]}
        assert links["op-a/op-chat"]["parked_s"] == 90.0
        assert REGISTRY.get_sample_value("switchboard_parked", {"provider": "op-a", "model": "op-chat"}) == 1
        now[0] += 91
        assert current().parking.parked_s(key) is None
        links = {link["link"]: link for link in dashboard_state.build_state()["links"]}
        assert links["op-a/op-chat"]["parked_s"] == 0.0
        assert REGISTRY.get_sample_value("switchboard_parked", {"provider": "op-a", "model": "op-chat"}) == 0
    finally:
        current().parking.clock = clock
        current().parking.until.clear()


def test_a_link_whose_provider_refuses_its_credentials_is_shown_misconfigured_until_it_serves(snapshot) -> None:
    from routing.runtime.process import current

    key = BreakerKey("op-a", "op-chat")
    try:
        current().parking.misconfigure(key, "the provider refused the gateway's credentials (HTTP 401)")
        links = {link["link"]: link for link in dashboard_state.build_state()["links"]}
        assert "refused" in links["op-a/op-chat"]["misconfigured"]
        current().parking.served(key)
        links = {link["link"]: link for link in dashboard_state.build_state()["links"]}
        assert links["op-a/op-chat"]["misconfigured"] == ""
    finally:
        current().parking.misconfigured.clear()
