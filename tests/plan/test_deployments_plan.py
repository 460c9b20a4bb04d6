"""Chains and explain_route for models with deployments (docs/deployments.md)."""

from __future__ import annotations

import random

from routing.core.breaker import BreakerKey
from routing.plan.chain import breaker_keys, build_chain
from routing.plan.explain import explain, render
from routing.runtime.process import current
from tests.factories import snapshot

SPREAD = {
    "id": "chat-lb",
    "capabilities": ["chat", "streaming"],
    "routing": "weighted",
    "deployments": [
        {"provider": "p1", "upstream_model": "east-model", "weight": 3, "rpm": 600},
        {"provider": "p2", "upstream_model": "west-model"},
    ],
}


def _snap(**kwargs):
    return snapshot(models=[SPREAD], **kwargs)


def test_each_deployment_is_a_link_with_its_provider_credentials_and_breaker_key() -> None:
    snap = _snap()
    (link,) = build_chain(snap, snap.orgs["acme"], snap.models["chat-lb"])
    east, west = link.deployments
    assert (east.name, east.weight, east.rpm) == ("p1", 3, 600)
    assert east.link.breaker_key == BreakerKey("p1", "chat-lb") and west.link.breaker_key == BreakerKey("p2", "chat-lb")
    assert east.link.model.upstream_model == "east-model" and west.link.model.upstream_model == "west-model"
    assert west.link.base_url == "http://127.0.0.1:9002/v1" and west.link.api_key == "platform-2"
    assert link.routing == "weighted"


def test_byo_credentials_apply_to_that_providers_deployment_with_the_org_keyed_breaker() -> None:
    snap = _snap(credentials=[{"provider": "p2", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME"}])
    (link,) = build_chain(snap, snap.orgs["acme"], snap.models["chat-lb"])
    east, west = link.deployments
    assert east.link.api_key == "platform-1" and east.link.breaker_key == BreakerKey("p1", "chat-lb")
    assert west.link.api_key == "acme-own" and west.link.breaker_key == BreakerKey("p2", "chat-lb", "acme")
    assert {BreakerKey("p1", "chat-lb"), BreakerKey("p2", "chat-lb"), BreakerKey("p2", "chat-lb", "acme")} <= (
        breaker_keys(snap)
    )


def test_explain_lists_deployments_with_state_share_and_the_next_pick() -> None:
    snap = _snap()
    key = BreakerKey("p2", "chat-lb")
    current().breakers.force_open(key, "test", None)
    current().picker.observe(BreakerKey("p1", "chat-lb"), 0.120)
    try:
        result = explain(snap, "acme", "chat-lb", registry=current().breakers, picker=current().picker)
        text = render(result)
    finally:
        current().breakers.reset(key)
        current().picker.clear()
    (entry,) = result["chain"]
    assert entry["routing"] == "weighted"
    east, west = entry["deployments"]
    assert (east["provider"], east["weight"], east["breaker"], east["latency_ms"]) == ("p1", 3, "closed", 120.0)
    assert (west["provider"], west["breaker"], west["share"]) == ("p2", "open", None)
    assert east["share"] == 1.0 and east["next"] is True and west["next"] is False  # open is never next
    assert "* p1: east-model weight 3, share 100%, breaker closed" in text
    assert "p2: west-model weight 1, breaker open" in text


def test_explain_weighted_share_and_least_busy_next() -> None:
    result = explain(_snap(), "acme", "chat-lb")
    assert [d["share"] for d in result["chain"][0]["deployments"]] == [0.75, 0.25]
    busy = dict(SPREAD, routing="least_busy")
    snap = snapshot(models=[busy])
    current().picker.started(BreakerKey("p1", "chat-lb"))
    try:
        (entry,) = explain(snap, "acme", "chat-lb", picker=current().picker)["chain"]
    finally:
        current().picker.clear()
    east, west = entry["deployments"]
    assert east["in_flight"] == 1 and west["next"] is True


def test_seeded_next_pick_follows_the_weights() -> None:
    from routing.plan.explain import deployments

    snap = _snap()
    (link,) = build_chain(snap, snap.orgs["acme"], snap.models["chat-lb"])
    rng = random.Random(4)
    nexts = [next(d["provider"] for d in deployments(link, {}, rng.random) if d["next"]) for _ in range(400)]
    assert 250 < nexts.count("p1") < 350
