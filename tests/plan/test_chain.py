"""Chain construction: fallbacks, policy chains, depth cap, skipped hops, BYO credentials (R1, §6)."""

from __future__ import annotations

from routing.config.snapshot import Snapshot
from routing.plan.chain import build_chain
from tests.factories import model, snapshot


def _chain(snap: Snapshot, model_id: str, org: str = "acme"):
    return build_chain(snap, snap.orgs[org], snap.models[model_id], model_id)


def _ids(links) -> list[tuple[str, str | None]]:
    return [(link.model.id, link.skip_reason) for link in links]


FIVE = [
    model("m0", fallbacks=["m1", "m2", "m3", "m4"]),
    model("m1"),
    model("m2"),
    model("m3", provider="p2"),
    model("m4"),
]


def test_requested_model_first_then_its_fallbacks_in_order() -> None:
    snap = snapshot(models=FIVE)
    assert _ids(_chain(snap, "m0")) == [("m0", None), ("m1", None), ("m2", None), ("m3", None), ("m4", None)]


def test_hops_are_capped_at_fallback_max_depth() -> None:
    snap = snapshot(models=FIVE, resilience={"fallback_max_depth": 2})
    assert [m for m, _ in _ids(_chain(snap, "m0"))] == ["m0", "m1", "m2"]


def test_depth_zero_leaves_only_the_requested_model() -> None:
    snap = snapshot(models=FIVE, resilience={"fallback_max_depth": 0})
    assert _ids(_chain(snap, "m0")) == [("m0", None)]


def test_policy_fallback_chain_replaces_the_models_own_chain() -> None:
    snap = snapshot(
        models=FIVE, policies=[{"pattern": "m0", "action": "allow", "priority": 1, "fallback_chain": ["m4", "m2"]}]
    )
    assert [m for m, _ in _ids(_chain(snap, "m0"))] == ["m0", "m4", "m2"]


def test_empty_policy_fallback_chain_disables_fallback() -> None:
    snap = snapshot(models=FIVE, policies=[{"pattern": "m*", "action": "allow", "priority": 1, "fallback_chain": []}])
    assert _ids(_chain(snap, "m0")) == [("m0", None)]


def test_policy_without_fallback_chain_keeps_the_models_chain() -> None:
    snap = snapshot(models=FIVE, policies=[{"pattern": "m*", "action": "allow", "priority": 1}])
    assert len(_chain(snap, "m0")) == 5


def test_only_the_first_matching_policy_supplies_a_chain() -> None:
    policies = [
        {"pattern": "m0", "action": "allow", "priority": 1},
        {"pattern": "m*", "action": "allow", "priority": 2, "fallback_chain": []},
    ]
    snap = snapshot(models=FIVE, policies=policies)
    assert len(_chain(snap, "m0")) == 5


def test_policy_chain_is_capped_too() -> None:
    snap = snapshot(
        models=FIVE,
        resilience={"fallback_max_depth": 1},
        policies=[{"pattern": "m0", "action": "allow", "priority": 1, "fallback_chain": ["m4", "m3"]}],
    )
    assert [m for m, _ in _ids(_chain(snap, "m0"))] == ["m0", "m4"]


def test_denied_hop_is_kept_but_marked_model_denied() -> None:
    snap = snapshot(models=FIVE, policies=[{"pattern": "m2", "action": "deny", "priority": 1}])
    assert _ids(_chain(snap, "m0"))[2] == ("m2", "model_denied")
    assert _ids(_chain(snap, "m0"))[1] == ("m1", None)


def test_default_deny_marks_hops_not_explicitly_allowed() -> None:
    snap = snapshot(
        models=FIVE, default_action="deny", policies=[{"pattern": "m[01]", "action": "allow", "priority": 1}]
    )
    assert _ids(_chain(snap, "m0")) == [
        ("m0", None),
        ("m1", None),
        ("m2", "model_denied"),
        ("m3", "model_denied"),
        ("m4", "model_denied"),
    ]


def test_unknown_hop_in_policy_chain_is_marked_model_not_found() -> None:
    snap = snapshot(
        models=FIVE, policies=[{"pattern": "m0", "action": "allow", "priority": 1, "fallback_chain": ["ghost", "m1"]}]
    )
    links = _chain(snap, "m0")
    assert _ids(links) == [("m0", None), ("ghost", "model_not_found"), ("m1", None)]
    assert links[1].api_key is None and links[1].base_url == ""


def test_alias_hop_resolves_to_its_model() -> None:
    snap = snapshot(
        models=FIVE,
        aliases={"fast": "m3"},
        policies=[{"pattern": "m0", "action": "allow", "priority": 1, "fallback_chain": ["fast"]}],
    )
    assert _ids(_chain(snap, "m0")) == [("m0", None), ("m3", None)]


def test_repeated_hops_and_the_primary_itself_are_not_tried_twice() -> None:
    snap = snapshot(
        models=FIVE,
        policies=[{"pattern": "m0", "action": "allow", "priority": 1, "fallback_chain": ["m0", "m1", "m1"]}],
    )
    assert [m for m, _ in _ids(_chain(snap, "m0"))] == ["m0", "m1"]


def test_denied_primary_is_marked_for_explain() -> None:
    snap = snapshot(models=FIVE, policies=[{"pattern": "m0", "action": "deny", "priority": 1}])
    assert _ids(_chain(snap, "m0"))[0] == ("m0", "model_denied")


def test_platform_credentials_and_shared_breaker_key_by_default() -> None:
    snap = snapshot(models=FIVE)
    links = _chain(snap, "m0")
    assert links[0].breaker_key == ("p1", "m0")
    assert (links[0].base_url, links[0].api_key) == ("http://127.0.0.1:9001/v1", "platform-1")
    assert (links[3].base_url, links[3].api_key) == ("http://127.0.0.1:9002/v1", "platform-2")


def test_byo_credentials_apply_to_every_link_on_that_provider_with_an_org_breaker() -> None:
    snap = snapshot(
        models=FIVE,
        credentials=[
            {"provider": "p1", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME", "base_url": "http://127.0.0.1:9005/v1/"}
        ],
    )
    links = _chain(snap, "m0")
    primary, hop_same_provider, hop_other_provider = links[0], links[1], links[3]
    assert (primary.base_url, primary.api_key) == ("http://127.0.0.1:9005/v1", "acme-own")
    assert primary.breaker_key == ("p1", "m0", "org:acme")
    assert hop_same_provider.breaker_key == ("p1", "m1", "org:acme")
    assert hop_same_provider.api_key == "acme-own"
    assert hop_other_provider.breaker_key == ("p2", "m3")
    assert hop_other_provider.api_key == "platform-2"


def test_byo_key_only_keeps_the_provider_base_url() -> None:
    snap = snapshot(models=FIVE, credentials=[{"provider": "p1", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME"}])
    link = _chain(snap, "m0")[0]
    assert (link.base_url, link.api_key) == ("http://127.0.0.1:9001/v1", "acme-own")
    assert link.breaker_key == ("p1", "m0", "org:acme")


def test_byo_base_url_only_keeps_the_platform_key() -> None:
    snap = snapshot(models=FIVE, credentials=[{"provider": "p1", "base_url": "http://127.0.0.1:9005/v1"}])
    link = _chain(snap, "m0")[0]
    assert (link.base_url, link.api_key) == ("http://127.0.0.1:9005/v1", "platform-1")


def test_other_orgs_keep_the_shared_breaker() -> None:
    snap = snapshot(models=FIVE, credentials=[{"provider": "p1", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME"}])
    assert _chain(snap, "m0", org="other")[0].breaker_key == ("p1", "m0")


def test_chain_is_built_once_per_snapshot_and_rebuilt_with_a_new_one() -> None:
    snap = snapshot(models=FIVE)
    assert _chain(snap, "m0") is _chain(snap, "m0")
    newer = snapshot(models=FIVE, resilience={"fallback_max_depth": 1})
    assert len(_chain(newer, "m0")) == 2
    assert len(_chain(snap, "m0")) == 5


def test_breaker_keys_cover_every_link_a_chain_can_use() -> None:
    from routing.plan.chain import breaker_keys

    snap = snapshot(models=FIVE, credentials=[{"provider": "p1", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME"}])
    keys = breaker_keys(snap)
    for org in ("acme", "other"):
        for model_id in snap.models:
            assert {link.breaker_key for link in _chain(snap, model_id, org=org)} <= keys
    assert ("p1", "m0", "org:acme") in keys and ("p2", "m3", "org:acme") not in keys


def test_chain_keys_are_breaker_keys_labelled_with_the_org() -> None:
    """The chain is the one place a BYO key is made; everything else reads its label."""
    from routing.core.breaker import BreakerKey

    snap = snapshot(credentials=[{"provider": "p1", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME"}])
    links = _chain(snap, "chat-a")
    assert all(type(link.breaker_key) is BreakerKey for link in links)
    assert [link.breaker_key.label for link in links] == ["chat-a@acme", "chat-b"]
