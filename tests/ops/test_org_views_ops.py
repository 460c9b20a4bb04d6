"""Org views (docs/resilience.md#org-views) where operators see them: dashboard state, feed, metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY

from routing.core.breaker import BreakerKey, registry
from routing.ops import metrics
from routing.ops.dashboard import feed
from routing.ops.dashboard import state as dashboard_state

KEY = BreakerKey("op-a", "op-chat")


def test_an_open_org_view_is_shown_on_its_link_in_the_feed_and_in_metrics(snapshot) -> None:
    feed.install()
    resilience = snapshot.resilience
    # another org uses the link: acme's failures are acme's alone
    registry.admit(KEY, resilience.breaker_failure_threshold, resilience.breaker_cooldown_s, "beta")
    for _ in range(resilience.breaker_failure_threshold):
        registry.record_failure(KEY, 0, resilience.breaker_failure_threshold, resilience.breaker_cooldown_s, "acme")
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
    registry.reset(KEY)
    assert REGISTRY.get_sample_value("switchboard_circuit_org_state", labels) == 0
    links = {link["link"]: link for link in dashboard_state.build_state()["links"]}
    assert links["op-a/op-chat"]["org_open"] == []
