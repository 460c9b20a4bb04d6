"""Model selection and org policy decisions (docs/configuration.md#policies)."""

from __future__ import annotations

import pytest

from policies.decision import decide, select_model_name
from routing.config.snapshot import AgentSpec, build_snapshot
from routing.core.errors import GatewayError
from tests.factories import ENV, document, model, snapshot


def _agent(default_model: str | None = None) -> AgentSpec:
    org = snapshot().orgs["acme"]
    return AgentSpec(name="bot", org=org, default_model=default_model)


def test_body_model_is_trimmed() -> None:
    assert select_model_name("  chat-a \n", _agent("chat-b")) == "chat-a"


@pytest.mark.parametrize("body_model", [None, "", "   "])
def test_agent_default_model_is_used_when_body_has_none(body_model: object) -> None:
    assert select_model_name(body_model, _agent("fast")) == "fast"


@pytest.mark.parametrize("body_model", [None, "  "])
def test_no_model_anywhere_is_model_required(body_model: object) -> None:
    with pytest.raises(GatewayError) as info:
        select_model_name(body_model, _agent(None))
    assert info.value.status == 400
    assert info.value.code == "model_required"
    assert "default_model" in info.value.message


@pytest.mark.parametrize("body_model", [42, ["chat-a"], {"id": "chat-a"}, True])
def test_non_string_model_is_invalid_request_naming_the_param(body_model: object) -> None:
    with pytest.raises(GatewayError) as info:
        select_model_name(body_model, _agent("chat-a"))
    assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_request", "model")


def _decide(policies: list[dict], model_id: str, default_action: str = "allow"):
    models = [model("chat-a"), model("chat-b"), model("openai/gpt-4"), model("embed-a", caps=("embeddings",))]
    snap = snapshot(models=models, policies=policies, default_action=default_action)
    return decide(snap, snap.orgs["acme"], model_id)


def test_no_policies_uses_default_allow() -> None:
    d = _decide([], "chat-a")
    assert d.allowed and d.policy is None
    assert "default" in d.reason


def test_no_matching_policy_uses_default_deny() -> None:
    d = _decide([{"pattern": "embed-*", "action": "allow", "priority": 1}], "chat-a", default_action="deny")
    assert not d.allowed and d.policy is None


def test_lowest_priority_number_wins_whatever_the_listed_order() -> None:
    policies = [
        {"pattern": "chat-*", "action": "allow", "priority": 50},
        {"pattern": "chat-a", "action": "deny", "priority": 10},
    ]
    d = _decide(policies, "chat-a")
    assert not d.allowed
    assert d.policy is not None and d.policy.pattern == "chat-a"
    assert _decide(policies, "chat-b").allowed


def test_deny_with_lower_priority_vetoes_a_later_allow() -> None:
    policies = [
        {"pattern": "*/*", "action": "deny", "priority": 5},
        {"pattern": "openai/*", "action": "allow", "priority": 10},
    ]
    assert not _decide(policies, "openai/gpt-4").allowed


def test_allow_before_deny_lets_the_model_through() -> None:
    policies = [
        {"pattern": "openai/*", "action": "allow", "priority": 10},
        {"pattern": "*/*", "action": "deny", "priority": 100},
    ]
    d = _decide(policies, "openai/gpt-4")
    assert d.allowed and d.policy is not None and d.policy.pattern == "openai/*"
    assert "priority 10" in d.reason


def test_star_policy_does_not_cover_ids_with_a_slash() -> None:
    d = _decide([{"pattern": "*", "action": "deny", "priority": 1}], "openai/gpt-4")
    assert d.allowed and d.policy is None


def test_decision_is_per_org() -> None:
    snap = snapshot(policies=[{"pattern": "*", "action": "deny", "priority": 1}])
    assert not decide(snap, snap.orgs["acme"], "chat-a").allowed
    assert decide(snap, snap.orgs["other"], "chat-a").allowed


def test_decision_is_cached_per_snapshot_and_a_rebuild_sees_new_policies() -> None:
    doc = document(policies=[{"pattern": "chat-*", "action": "allow", "priority": 1}], default_action="deny")
    first = build_snapshot(doc, [], ENV)
    d1 = decide(first, first.orgs["acme"], "chat-a")
    assert d1.allowed
    assert decide(first, first.orgs["acme"], "chat-a") is d1  # memoised

    doc["orgs"][0]["policies"][0]["action"] = "deny"
    second = build_snapshot(doc, [], ENV)
    assert not decide(second, second.orgs["acme"], "chat-a").allowed
    assert decide(first, first.orgs["acme"], "chat-a").allowed  # the old snapshot keeps its view


def test_unknown_model_names_are_not_cached() -> None:
    snap = snapshot()
    for i in range(50):
        decide(snap, snap.orgs["acme"], f"no-such-{i}")
    assert not any(k[0] == "decision" for k in snap.cache if isinstance(k, tuple) and k[2].startswith("no-such"))


# --- found by mutation testing (make mutation): the sentences operators read in explain_route


@pytest.mark.parametrize(
    ("policies", "default_action", "reason"),
    [
        (
            [{"pattern": "chat-*", "action": "allow", "priority": 10}],
            "deny",
            "allowed by policy 'chat-*' (priority 10)",
        ),
        ([{"pattern": "chat-a", "action": "deny", "priority": 3}], "allow", "denied by policy 'chat-a' (priority 3)"),
        ([], "allow", "allowed by the default action of org 'acme' (no policy matched)"),
        ([], "deny", "denied by the default action of org 'acme' (no policy matched)"),
    ],
)
def test_the_reason_says_what_decided_and_which_way(policies: list, default_action: str, reason: str) -> None:
    assert _decide(policies, "chat-a", default_action=default_action).reason == reason


def test_the_model_errors_name_the_field_and_what_to_send() -> None:
    with pytest.raises(GatewayError) as missing:
        select_model_name(None, _agent(None))
    assert missing.value.param == "model"
    assert "agent 'bot' has no default model" in missing.value.message
    assert "GET /v1/models" in missing.value.message
    with pytest.raises(GatewayError) as wrong_type:
        select_model_name(42, _agent("chat-a"))
    assert "got int" in wrong_type.value.message and "as a string" in wrong_type.value.message
