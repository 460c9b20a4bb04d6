"""Org scope: what an org-limited writer may change (docs/security.md#management-tokens-and-org-scope).

An org-limited management token, and an admin user who may not manage the org itself, manage that org's
keys and agents **within the org's bounds**: the operator's controls on the org stay the operator's. The
rule, once, for the management API (routing.ops.api), the admin (policies.admin) and the playground:

- the org's own fields (`ORG_OWN`: limits, budget, policies with their fallback chains, default action,
  priority, weight, body logging) are never changed; sending the value they already have is no change;
- a key's or agent's own `limits` and `budget` are at most the org's (per limit, and in US$), its priority
  class no higher than the org's, its model patterns and default model only models the org's policy allows.

Plain functions over the configuration document (routing.config.document.document_from_db), answering
`Refusal`s (field, message): the API turns the first into 403 `forbidden`, the admin each into a form error.

Org-scoped staff (docs/operations.md#org-scoped-staff): a staff user with an `OperatorScope` sees only its
orgs. `visible_orgs` is the one answer every staff page asks (None: every org), `within` the one filter of a
queryset by it; such a user never manages an org itself, so it edits its orgs' keys and agents within bounds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import QuerySet

from policies.decision import evaluate
from policies.matcher import BadPattern, compile_pattern
from policies.models import OperatorScope, Org
from routing.config.schema import ORG, POLICY
from routing.config.snapshot import OrgSpec, PolicySpec
from routing.core.admission_queue import PRIORITIES
from routing.core.dimensions import LIMIT_DIMENSIONS

# The fields of an org that only an operator who manages it may change (the management API's ORG_FIELDS).
ORG_OWN = ("default_action", "limits", "budget", "log_bodies", "policies", "priority", "weight")
# Who manages an org in the admin and the playground: this Django permission, model-wide (every org) or,
# from an authentication backend with object permissions, for that org alone. Superusers hold it.
MANAGE_ORG = "policies.change_org"
_DEFAULT_PRIORITY = "default"  # the class of an org that sets none (docs/overload.md#configuration)
_POLICY_DEFAULTS = {"action": POLICY["action"].default, "priority": POLICY["priority"].default, "fallback_chain": None}
_ORG_DEFAULTS = {"default_action": ORG["default_action"].default, "log_bodies": False, "policies": []}


@dataclass(frozen=True, slots=True)
class Refusal:
    """One change past the org's bounds: `param` the field (as the management API names it), and why."""

    param: str
    message: str


@dataclass(frozen=True, slots=True)
class OrgBounds:
    """What an org has, to compare a key's or agent's controls with: its document entry, its policy (as the
    request path evaluates it) and the model ids and aliases a pattern could reach."""

    entry: Mapping[str, Any]
    policy: OrgSpec
    models: frozenset[str]
    aliases: Mapping[str, str]

    @property
    def name(self) -> str:
        return str(self.entry["name"])


def bounds_of(document: Mapping[str, Any], org: str) -> OrgBounds | None:
    """The bounds of `org` in a configuration document, or None when it has no such org."""
    entry = next((o for o in document.get("orgs") or [] if o.get("name") == org), None)
    if entry is None:
        return None
    policies = []
    for p in map(_policy, entry.get("policies") or []):
        try:
            regex = compile_pattern(p["pattern"])
        except (BadPattern, TypeError):
            regex = re.compile(r"(?!)")  # a stored pattern that does not compile matches nothing
        policies.append(PolicySpec(p["pattern"], regex, p["action"], int(p["priority"]), None))
    policies.sort(key=lambda p: p.priority)  # ascending, as the request path evaluates them
    spec = OrgSpec(org, entry.get("default_action", _ORG_DEFAULTS["default_action"]), tuple(policies), {})
    models = frozenset(m["id"] for m in document.get("models") or [])
    aliases = dict(document.get("aliases") or {})  # the canonical document's aliases: name -> model id
    return OrgBounds(entry, spec, models, aliases)


# The org's own fields ---------------------------------------------------------------------------------------


def _policy(p: Any) -> Any:
    """A policy as compared: the schema's defaults filled in."""
    if not isinstance(p, Mapping):
        return p
    return {"pattern": p.get("pattern"), **{k: p.get(k, default) for k, default in _POLICY_DEFAULTS.items()}}


def _own_value(field: str, value: Any) -> Any:
    """A field's value as compared: absent, null, empty and the schema's default are one value."""
    if field == "policies" and isinstance(value, list):
        return [_policy(p) for p in value]
    if value is None or value == {} or value == "":
        return _ORG_DEFAULTS.get(field)
    return value


def _changed_policy_field(current: list[Any], sent: Any) -> str:
    """`policies[i].fallback_chain` when only a policy's chain differs, else `policies`."""
    if not isinstance(sent, list) or len(sent) != len(current):
        return "policies"
    for i, (old, new) in enumerate(zip(current, sent, strict=True)):
        if old == new:
            continue
        if isinstance(new, Mapping) and {**old, "fallback_chain": None} == {**new, "fallback_chain": None}:
            return f"policies[{i}].fallback_chain"
        return "policies"
    return "policies"


def org_refusals(entry: Mapping[str, Any], changes: Mapping[str, Any]) -> list[Refusal]:
    """Each of the org's own fields `changes` would change (a value equal to the current one is no change)."""
    refusals = []
    for field in ORG_OWN:
        if field not in changes:
            continue
        current, sent = _own_value(field, entry.get(field)), _own_value(field, changes[field])
        if current == sent:
            continue
        param = _changed_policy_field(current, sent) if field == "policies" else field
        what = "fallback chain of a policy" if param.endswith("fallback_chain") else field
        refusals.append(
            Refusal(
                param,
                f"The {what} of org '{entry['name']}' is set by the operators who manage the org; a writer limited "
                f"to the org manages its keys and agents within it, and cannot change the org's own {field}.",
            )
        )
    return refusals


# A key's or an agent's controls ------------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _limit_refusals(bounds: OrgBounds, limits: Any, what: str) -> list[Refusal]:
    own = bounds.entry.get("limits") or {}
    if not isinstance(limits, Mapping):
        return []
    out = []
    for dim in LIMIT_DIMENSIONS:
        top, asked = own.get(dim.key), limits.get(dim.key)
        if _number(top) and _number(asked) and asked > top:
            out.append(
                Refusal(
                    "limits",
                    f"limits.{dim.key} {asked} of {what} is above org '{bounds.name}''s {top} {dim.unit}: "
                    f"use at most {top}, or leave it out (the org's limit applies anyway).",
                )
            )
    return out


def _budget_refusals(bounds: OrgBounds, budget: Any, what: str) -> list[Refusal]:
    own = bounds.entry.get("budget") or {}
    top = own.get("usd")
    asked = budget.get("usd") if isinstance(budget, Mapping) else None
    if not (_number(top) and _number(asked) and asked > top):
        return []
    return [
        Refusal(
            "budget",
            f"budget.usd {asked} of {what} is above org '{bounds.name}''s budget of ${top} per {own.get('period')}: "
            f"use at most {top}, or leave it out (the org's budget applies anyway).",
        )
    ]


def _priority_refusals(bounds: OrgBounds, priority: Any, what: str) -> list[Refusal]:
    ceiling = bounds.entry.get("priority") or _DEFAULT_PRIORITY
    if priority not in PRIORITIES or PRIORITIES[priority] >= PRIORITIES.get(ceiling, 1):
        return []
    return [
        Refusal(
            "priority",
            f"priority {priority!r} of {what} is above org '{bounds.name}''s class {ceiling!r}: use {ceiling!r} "
            "or a lower class (higher ones take other orgs' share under overload).",
        )
    ]


def denied_models(bounds: OrgBounds, pattern: str) -> list[str]:
    """The models a key pattern reaches that the org's policy denies: every configured model id it matches,
    and the target of every alias whose name it matches; a pattern matching none is itself judged as a name."""
    try:
        regex = compile_pattern(pattern)
    except BadPattern:
        return []  # not a pattern: the one validation answers 400 for it
    reached = {m for m in bounds.models if regex.fullmatch(m)}
    reached |= {t for a, t in bounds.aliases.items() if regex.fullmatch(a) and t in bounds.models}
    names = sorted(reached) or [pattern]
    return [n for n in names if not evaluate(bounds.policy, n).allowed]


def _model_refusals(bounds: OrgBounds, patterns: Any, what: str) -> list[Refusal]:
    if not isinstance(patterns, list):
        return []
    for pattern in patterns:
        denied = denied_models(bounds, pattern) if isinstance(pattern, str) and pattern else []
        if denied:
            return [
                Refusal(
                    "models",
                    f"models pattern {pattern[:200]!r} of {what} reaches {', '.join(denied[:5])}, which org "
                    f"'{bounds.name}''s policy denies: name only models the org allows.",
                )
            ]
    return []


def _default_model_refusals(bounds: OrgBounds, name: Any, what: str) -> list[Refusal]:
    if not isinstance(name, str) or not name.strip():
        return []
    model = bounds.aliases.get(name.strip(), name.strip())
    if model not in bounds.models or evaluate(bounds.policy, model).allowed:
        return []  # an unknown name is the one validation's 400
    return [
        Refusal(
            "default_model",
            f"default_model {name!r} of {what} is {model}, which org '{bounds.name}''s policy denies: pick a model "
            "the org allows.",
        )
    ]


_CHECKS = {
    "limits": _limit_refusals,
    "budget": _budget_refusals,
    "priority": _priority_refusals,
    "models": _model_refusals,
    "default_model": _default_model_refusals,
}


def child_refusals(
    bounds: OrgBounds, changes: Mapping[str, Any], current: Mapping[str, Any], what: str
) -> list[Refusal]:
    """A key's or agent's controls in `changes` (management API names: limits, budget, priority, models,
    default_model) that would give it more than its org has; a value equal to `current`'s is no change."""
    refusals: list[Refusal] = []
    for field, check in _CHECKS.items():
        if field in changes and changes[field] is not None and changes[field] != current.get(field):
            refusals.extend(check(bounds, changes[field], what))
    return refusals


# Who manages an org -------------------------------------------------------------------------------------------


def visible_orgs(user: Any) -> frozenset[str] | None:
    """The names of the orgs `user` may see on staff pages: None for every org (superusers and unscoped
    staff), else those of its OperatorScope (possibly none). One query; callers ask once per request."""
    if not getattr(user, "is_authenticated", False) or user.is_superuser:
        return None
    try:
        operator = OperatorScope.objects.get(user_id=user.pk)
    except ObjectDoesNotExist:
        return None
    return frozenset(operator.orgs.values_list("name", flat=True))


def is_scoped(user: Any) -> bool:
    """The user is an org-scoped operator (sees only some orgs, manages none of them itself)."""
    return visible_orgs(user) is not None


def within(queryset: QuerySet[Any], org_path: str, orgs: frozenset[str] | None) -> QuerySet[Any]:
    """`queryset` narrowed to rows whose `org_path` (a lookup ending at an org's name) is in `orgs`."""
    return queryset if orgs is None else queryset.filter(**{f"{org_path}__in": sorted(orgs)})


def org_visible(orgs: frozenset[str] | None, name: str | None) -> bool:
    """A row or an entry naming org `name` may be shown to a user seeing `orgs`."""
    return orgs is None or name in orgs


# The group `manage.py create_operator` puts an org-scoped operator in unless told others: its orgs' keys
# and agents (add, change, view), the rest of its orgs and the catalogue to view, and the usage pages.
ORG_OPERATORS_GROUP = "Org operators"
ORG_OPERATOR_PERMISSIONS = (
    *(f"policies.{verb}_{model}" for model in ("apikey", "agent") for verb in ("add", "change", "view")),
    *(f"policies.view_{model}" for model in ("org", "orgpolicy", "orgcredential")),
    *(f"providers.view_{model}" for model in ("provider", "model", "alias")),
    "routing.view_usagerecord",
    "routing.view_auditrecord",
)


def ensure_org_operators_group() -> Any:
    """The ORG_OPERATORS_GROUP holding ORG_OPERATOR_PERMISSIONS (created, or completed, when needed)."""
    group, _ = Group.objects.get_or_create(name=ORG_OPERATORS_GROUP)
    for permission in ORG_OPERATOR_PERMISSIONS:
        app_label, codename = permission.split(".")
        group.permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return group


def may_manage_org(user: Any, org: Org) -> bool:
    """The user may change `org` itself (so spend it, and set its keys and agents past its bounds).
    An org-scoped operator never does: it runs its orgs' keys and agents within the orgs' bounds."""
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return False
    if is_scoped(user):
        return False
    return bool(user.has_perm(MANAGE_ORG) or user.has_perm(MANAGE_ORG, org))


def managed_orgs(user: Any, orgs: Iterable[Org]) -> list[Org]:
    """The orgs among `orgs` that `user` manages (a superuser: all of them; an org-scoped operator: none)."""
    if is_scoped(user):
        return []  # asked once, not once per org
    return [org for org in orgs if may_manage_org(user, org)]
