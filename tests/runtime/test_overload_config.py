"""SWITCHBOARD_OVERLOAD and a request's ticket (docs/overload.md#configuration)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from django.core.exceptions import ImproperlyConfigured

from routing.core.admission_queue import PRIORITIES, current
from routing.core.errors import GatewayError
from routing.runtime import overload
from routing.runtime.process import current as current_process

DOC = {
    "models": {"m": {"initial": 8, "max": 64}},
    "classes": {"acme/bot": "interactive", "acme": "default", "sk-abc": "batch"},
    "org_weights": {"acme": 2},
    "hedge": {"models": {"m": {"budget_pct": 3}}, "never": ["acme/payments"]},
}


def key(org: str = "acme", agent: str = "bot", prefix: str = "sk-xyz") -> SimpleNamespace:
    return SimpleNamespace(prefix=prefix, agent=SimpleNamespace(name=agent, org=SimpleNamespace(name=org)))


@pytest.fixture
def configured(settings):
    settings.SWITCHBOARD_OVERLOAD = json.dumps(DOC)
    overload.install(current_process().gates, current_process().hedges)
    yield
    settings.SWITCHBOARD_OVERLOAD = ""
    overload.install(current_process().gates, current_process().hedges)


def test_the_document_is_read_into_limits_classes_and_weights() -> None:
    config = overload.parse(json.dumps(DOC))
    assert (config.limits["m"].initial, config.limits["m"].max_limit) == (8, 64)
    assert config.classes == {"acme/bot": 0, "acme": 1, "sk-abc": 2}
    assert config.weights == {"acme": 2.0}
    assert config.hedge["m"].budget_pct == 3 and config.never_hedge == {"acme/payments"}


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ("{", "not valid JSON"),
        ('{"model": {}}', "unknown key"),
        ('{"models": {"m": {"initial": 0}}}', "models.m.initial"),
        ('{"models": {"m": {"burst": 3}}}', "models.m must be"),
        ('{"classes": {"acme": "urgent"}}', "classes.acme"),
        ('{"org_weights": {"acme": -1}}', "org_weights.acme"),
        ('{"hedge": {"models": {"m": {"budget_pct": 0}}}}', "budget_pct"),
        ('{"hedge": {"never": "acme"}}', "hedge.never"),
    ],
)
def test_a_bad_document_is_refused_with_what_to_fix(doc: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=says):
        overload.parse(doc)


def test_nothing_configured_is_off(settings) -> None:
    settings.SWITCHBOARD_OVERLOAD = ""
    overload.install(current_process().gates, current_process().hedges)
    assert overload.ON is False


def test_the_agent_class_applies_and_a_header_may_lower_it_never_raise_it(configured) -> None:
    overload.admit([], key())
    assert current.get().priority == PRIORITIES["interactive"] and current.get().weight == 2.0
    overload.admit([(b"x-switchboard-priority", b"batch")], key())
    assert current.get().priority == PRIORITIES["batch"]
    overload.admit([(b"x-switchboard-priority", b"interactive")], key(prefix="sk-abc", agent="other"))
    assert current.get().priority == PRIORITIES["batch"]  # the key's class: not raised


def test_a_bad_priority_header_is_a_400_naming_it(configured) -> None:
    with pytest.raises(GatewayError) as err:
        overload.admit([(b"x-switchboard-priority", b"urgent")], key())
    assert err.value.status == 400 and err.value.param == "X-Switchboard-Priority"


def test_hedging_is_never_for_requests_marked_non_idempotent_nor_offering_tools(configured) -> None:
    overload.admit([], key(), {"messages": []})
    assert current.get().hedge is True
    overload.admit([], key(agent="payments"), {"messages": []})
    assert current.get().hedge is False
    overload.admit([], key(), {"messages": [], "tools": [{"type": "function"}]})
    assert current.get().hedge is False
