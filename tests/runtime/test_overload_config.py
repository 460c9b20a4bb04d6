"""A request's ticket from the configuration, and a configuration change applied by the reload
(docs/overload.md#configuration)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from routing.config.overload_spec import build_overload
from routing.core.admission_queue import PRIORITIES
from routing.core.breaker import BreakerKey
from routing.core.errors import GatewayError
from routing.runtime import overload
from routing.runtime.process import current as current_process

DOC = {
    "models": [
        {"id": "m", "concurrency": {"initial": 8, "max": 64}, "hedge": {"budget_pct": 3}},
        {"id": "n"},
    ],
    "orgs": [
        {
            "name": "acme",
            "weight": 2,
            "agents": [
                {"name": "bot", "priority": "interactive"},
                {"name": "other"},
                {"name": "payments", "side_effects": True},
            ],
        },
        {"name": "globex", "priority": "batch"},
    ],
}
KEYS = [{"prefix": "sb-batchy", "priority": "batch"}]


def key(org: str = "acme", agent: str = "bot", prefix: str = "sb-xyz") -> SimpleNamespace:
    return SimpleNamespace(prefix=prefix, agent=SimpleNamespace(name=agent, org=SimpleNamespace(name=org)))


def snapshot(doc: dict, keys: list | None = None) -> SimpleNamespace:
    return SimpleNamespace(overload=build_overload(doc, keys or []))


@pytest.fixture
def configured():
    overload.apply(snapshot(DOC, KEYS))
    yield
    overload.apply(snapshot({}))


def test_nothing_configured_is_off():
    overload.apply(snapshot({}))
    assert (
        current_process().overload.on is False
        and current_process().gates.on is False
        and current_process().hedges.on is False
    )


def test_the_key_then_the_agent_then_the_org_sets_the_class_and_a_header_only_lowers_it(configured):
    t = overload.admit([], key())
    assert t.priority == PRIORITIES["interactive"] and t.weight == 2.0
    t = overload.admit([], key(agent="other"))
    assert t.priority == PRIORITIES["default"]
    t = overload.admit([], key(org="globex", agent="x"))
    assert t.priority == PRIORITIES["batch"] and t.weight == 1.0
    t = overload.admit([(b"x-switchboard-priority", b"batch")], key())
    assert t.priority == PRIORITIES["batch"]
    t = overload.admit([(b"x-switchboard-priority", b"interactive")], key(prefix="sb-batchy"))
    assert t.priority == PRIORITIES["batch"]  # the key's class: not raised


def test_a_bad_priority_header_is_a_400_naming_it(configured):
    with pytest.raises(GatewayError) as err:
        overload.admit([(b"x-switchboard-priority", b"urgent")], key())
    assert err.value.status == 400 and err.value.param == "X-Switchboard-Priority"


def test_hedging_is_never_for_agents_with_side_effects_and_tools_only_where_the_model_allows(configured):
    t = overload.admit([], key(), {"messages": []})
    assert t.hedge is True and t.tools is False
    t = overload.admit([], key(agent="payments"), {"messages": []})
    assert t.hedge is False
    t = overload.admit([], key(), {"messages": [], "tools": [{"type": "function"}]})
    assert t.tools is True
    for _ in range(30):
        current_process().hedges.observe("k", 0.05)
    assert (
        current_process().hedges.delay("m", "k", tools=True) is None
    )  # the model's hedge says nothing of tools: not hedged
    assert current_process().hedges.delay("m", "k", tools=False) == 0.05


def test_a_reload_keeps_what_a_gate_learnt_and_applies_new_bounds(configured):
    gate = current_process().gates.gate(BreakerKey("p", "m"), "m", "m@p")
    gate.inflight = 5
    gate.limit._limit = 30.0
    changed = copy.deepcopy(DOC)
    changed["models"][0]["concurrency"] = {"initial": 8, "max": 12}
    overload.apply(snapshot(changed))
    again = current_process().gates.gate(BreakerKey("p", "m"), "m", "m@p")
    assert again is gate and gate.inflight == 5  # the calls in flight still count
    assert gate.limit.limit == 12  # clamped into the new bounds
    assert current_process().gates.gate(BreakerKey("p", "n"), "n", "n@p") is None

    changed["models"][1]["concurrency"] = {"initial": 3}
    changed["models"][0].pop("concurrency")
    overload.apply(snapshot(changed))
    assert current_process().gates.gate(BreakerKey("p", "m"), "m", "m@p") is None  # off for m now
    assert current_process().gates.gate(BreakerKey("p", "n"), "n", "n@p").limit.limit == 3  # on for n
