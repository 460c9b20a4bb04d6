"""Org scope's rules one by one (docs/security.md#management-tokens-and-org-scope): which of an org's own
fields a change touches and what the refusal says, how a key's or agent's controls compare with the org's,
and who manages an org. The pure rules over a configuration document; who manages, over the real database."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from routing.ops import scope
from routing.ops.scope import MANAGE_ORG, bounds_of, child_refusals, denied_models, org_refusals

PRICEY = [f"pricey-{c}" for c in "abcdefg"]  # seven models the org's policy denies
DOC = {
    "models": [{"id": m} for m in ["cheap-a", *PRICEY]],
    "aliases": {"fast": "cheap-a", "best": "pricey-a"},
    "orgs": [
        {
            "name": "orga",
            "default_action": "deny",
            "limits": {"rpm": 5},
            "budget": {"usd": 1, "period": "month"},
            "policies": [
                {"pattern": "cheap-*", "action": "allow"},
                {"pattern": "free-*", "action": "allow", "fallback_chain": ["cheap-a"]},
            ],
        },
        {"name": "bare"},
    ],
}


def _bounds(org: str = "orga") -> scope.OrgBounds:
    bounds = bounds_of(DOC, org)
    assert bounds is not None
    return bounds


def _entry(org: str = "orga") -> dict[str, Any]:
    return next(o for o in DOC["orgs"] if o["name"] == org)


def test_bounds_evaluate_the_orgs_policies_in_priority_order_and_a_broken_pattern_matches_nothing() -> None:
    policies = [
        {"pattern": "[", "action": "allow", "priority": 1},  # stored before the pattern rule: matches nothing
        {"pattern": None, "action": "allow", "priority": 2},
        {"pattern": "pricey-*", "action": "allow", "priority": 20},
        {"pattern": "pricey-a", "action": "deny", "priority": 10},
    ]
    bounds = bounds_of({**DOC, "orgs": [{"name": "orgo", "default_action": "deny", "policies": policies}]}, "orgo")
    assert bounds is not None
    assert denied_models(bounds, "pricey-?") == ["pricey-a"]
    assert denied_models(bounds, "cheap-a") == ["cheap-a"]
    assert bounds_of(DOC, "no-such-org") is None


# the org's own fields ---------------------------------------------------------------------------------------


def test_empty_values_are_the_defaults_and_no_change() -> None:
    bare = _entry("bare")
    assert org_refusals(bare, {"limits": {}, "default_action": "", "policies": None, "budget": None}) == []


def test_an_unchanged_field_does_not_hide_a_changed_one_after_it() -> None:
    refused = org_refusals(_entry(), {"default_action": "deny", "limits": {"rpm": 50}})
    assert [r.param for r in refused] == ["limits"]
    assert refused[0].message.startswith("The limits of org 'orga' is set by the operators who manage the org")


def test_a_changed_chain_is_named_by_its_policy_and_any_other_policy_change_is_policies() -> None:
    policies = _entry()["policies"]
    chain = [policies[0], {**policies[1], "fallback_chain": ["pricey-a"]}]
    (refused,) = org_refusals(_entry(), {"policies": chain})
    assert refused.param == "policies[1].fallback_chain"
    assert refused.message.startswith("The fallback chain of a policy of org 'orga' ")
    assert refused.message.endswith("cannot change the org's own policies.")
    action = [policies[0], {**policies[1], "action": "deny"}]
    (refused,) = org_refusals(_entry(), {"policies": action})
    assert refused.param == "policies" and refused.message.startswith("The policies of org 'orga' ")


# a key's or an agent's controls -----------------------------------------------------------------------------


def test_the_budget_refusal_names_the_orgs_period_and_a_malformed_budget_is_left_to_validation() -> None:
    (refused,) = child_refusals(_bounds(), {"budget": {"usd": 5}}, {}, "key 'k'")
    assert refused.message == (
        "budget.usd 5 of key 'k' is above org 'orga''s budget of $1 per month: "
        "use at most 1, or leave it out (the org's budget applies anyway)."
    )
    assert child_refusals(_bounds(), {"budget": 5}, {}, "key 'k'") == []


def test_an_org_without_a_class_is_default_and_the_refusal_names_it() -> None:
    (refused,) = child_refusals(_bounds(), {"priority": "interactive"}, {}, "key 'k'")
    assert "above org 'orga''s class 'default': use 'default' or a lower class" in refused.message
    assert child_refusals(_bounds(), {"priority": "batch"}, {}, "key 'k'") == []


@pytest.mark.parametrize(
    ("ceiling", "allowed", "refused"),
    [("interactive", ["interactive", "default"], []), ("batch", ["batch"], ["default"]), ("no-such", ["default"], [])],
)
def test_a_key_takes_at_most_its_orgs_class_an_unknown_one_counting_as_default(ceiling, allowed, refused) -> None:
    doc = {**DOC, "orgs": [{"name": "orgp", "priority": ceiling}]}
    bounds = bounds_of(doc, "orgp")
    assert bounds is not None
    for priority in allowed:
        assert child_refusals(bounds, {"priority": priority}, {}, "key 'k'") == []
    for priority in [*refused, "interactive"] if ceiling != "interactive" else refused:
        (refusal,) = child_refusals(bounds, {"priority": priority}, {}, "key 'k'")
        assert refusal.message == (
            f"priority {priority!r} of key 'k' is above org 'orgp''s class {ceiling!r}: use {ceiling!r} "
            "or a lower class (higher ones take other orgs' share under overload)."
        )


def test_a_pattern_reaches_model_ids_as_well_as_alias_targets() -> None:
    assert denied_models(_bounds(), "pricey-a") == ["pricey-a"]
    assert denied_models(_bounds(), "pricey-*") == PRICEY  # no alias is named like that
    assert denied_models(_bounds(), "be*") == ["pricey-a"]  # through the alias "best"
    assert denied_models(_bounds(), "cheap-*") == []


def test_the_models_refusal_lists_five_denied_models_and_skips_what_is_not_a_pattern() -> None:
    (refused,) = child_refusals(_bounds(), {"models": [5, "", "pricey-*"]}, {}, "key 'k'")
    assert refused.message == (
        "models pattern 'pricey-*' of key 'k' reaches pricey-a, pricey-b, pricey-c, pricey-d, pricey-e, which org "
        "'orga''s policy denies: name only models the org allows."
    )
    assert child_refusals(_bounds(), {"models": [5, ""]}, {}, "key 'k'") == []


def test_a_long_pattern_is_quoted_to_200_characters() -> None:
    (refused,) = child_refusals(_bounds(), {"models": ["z" * 300]}, {}, "key 'k'")
    assert f"models pattern '{'z' * 200}' of key 'k'" in refused.message


def test_the_default_model_refusal_and_what_it_leaves_to_validation() -> None:
    (refused,) = child_refusals(_bounds(), {"default_model": "best"}, {}, "agent 'a'")
    assert refused.message == (
        "default_model 'best' of agent 'a' is pricey-a, which org 'orga''s policy denies: pick a model the org allows."
    )
    assert child_refusals(_bounds(), {"default_model": 5}, {}, "agent 'a'") == []
    assert child_refusals(_bounds(), {"default_model": "fast"}, {}, "agent 'a'") == []


# who manages an org -----------------------------------------------------------------------------------------


def _user(**fields: Any) -> SimpleNamespace:
    """A user as an authentication backend answers it: `grants` its permissions, `(perm, obj)` for one object."""
    grants = fields.pop("grants", set())
    attrs = {"pk": None, "is_authenticated": True, "is_active": True, "is_staff": True, "is_superuser": False}
    attrs.update(fields)
    return SimpleNamespace(**attrs, has_perm=lambda perm, obj=None: (perm, obj) in grants or (perm, None) in grants)


class _Org:
    """An org as a permission's object (identity, as Django's object permissions compare it)."""

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.django_db
def test_only_active_staff_manage_an_org_whatever_their_permissions() -> None:
    org = _Org("orga")
    everything = {(MANAGE_ORG, None)}
    assert scope.may_manage_org(_user(grants=everything), org)
    assert not scope.may_manage_org(_user(grants=everything, is_active=False, is_superuser=True), org)
    assert not scope.may_manage_org(_user(grants=everything, is_staff=False), org)
    assert not scope.may_manage_org(_user(grants=everything, is_staff=False, is_superuser=True), org)


@pytest.mark.django_db
def test_a_permission_for_one_org_manages_that_org_alone() -> None:
    orga, other = _Org("orga"), _Org("other")
    user = _user(grants={(MANAGE_ORG, orga)})
    assert scope.may_manage_org(user, orga) and not scope.may_manage_org(user, other)
    assert scope.managed_orgs(user, [orga, other]) == [orga]


@pytest.mark.django_db
def test_a_scoped_operators_managed_orgs_are_none_asked_once(django_user_model, django_assert_max_num_queries):
    from policies.models import OperatorScope, Org

    orgs = [Org.objects.create(name=f"org{i}") for i in range(5)]
    user = django_user_model.objects.create_user("op", password="x", is_staff=True)
    OperatorScope.objects.create(user=user).orgs.set(orgs[:2])
    with django_assert_max_num_queries(2):
        assert scope.managed_orgs(user, orgs) == []


@pytest.mark.django_db
def test_a_superuser_sees_every_org_even_with_a_scope(django_user_model) -> None:
    from policies.models import OperatorScope

    user = django_user_model.objects.create_superuser("root", password="x")
    OperatorScope.objects.create(user=user)
    assert scope.visible_orgs(user) is None and not scope.is_scoped(user)
    assert scope.visible_orgs(None) is None  # no user at all (no authentication in front): no scope either


@pytest.mark.django_db
def test_the_org_operators_group_holds_exactly_its_permissions() -> None:
    group = scope.ensure_org_operators_group()
    held = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}
    assert held == set(scope.ORG_OPERATOR_PERMISSIONS)
