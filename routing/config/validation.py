"""The one validation of the configuration document (docs/configuration.md, docs/resilience.md#r1).

`validate_document(doc)` checks the plain-dict document of routing.config.document and
returns every problem as a `ConfigError(path, message)`; it never stops at the
first. The admin forms, `import_config`, the system check and the server boot all
call it, so a rule gives the same message everywhere. The small `validate_*`
functions wrap the same messages as Django field validators for model forms.

Each error carries a stable check id (`code`), one per rule family; see
routing.config.checks for the list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.core.exceptions import ValidationError

from policies.matcher import pattern_error
from routing.config.addresses import url_problem
from routing.config.alert_spec import secret_env_problem
from routing.config.identifiers import (
    MAX_KEY_PATTERNS,
    MAX_PATTERN,
    MAX_POLICIES,
    identifier_problem,
    path_problem,
)
from routing.config.schema import (
    ACTIONS,
    AFFINITY_KEYS,
    AFFINITY_MAX_S,
    AGENT,
    ALERT,
    ALERT_DESTINATIONS,
    ALERT_EVENTS,
    BUDGET_KEYS,
    BUDGET_PERIODS,
    CAPABILITIES,
    CONCURRENCY_KEYS,
    CREDENTIAL,
    DEPLOYMENT,
    DIALECTS,
    HEDGE_KEYS,
    MAX_CHAIN,
    MODEL,
    ORG,
    POLICY,
    PRIORITY_CLASSES,
    PROVIDER,
    RESILIENCE,
    ROUTINGS,
    TOP_KEYS,
    Entity,
)
from routing.config.secrets import env_policy_problem, redact_url, stored_ref_problem, userinfo_problem
from routing.core.dimensions import LIMIT_DIMENSIONS, LIMIT_KEYS
from routing.core.dimensions import describe as describe_limits
from routing.core.kinds import DIALECT_KINDS, ENDPOINT_KINDS
from routing.core.prices import PRICE_KEYS
from routing.core.resilience import FALLBACK_TRIGGERS

STRUCTURE = "routing.E001"
FALLBACK = "routing.E002"
CAPABILITY = "routing.E003"
PATTERN = "routing.E004"
URL = "routing.E005"
VALUE = "routing.E006"
_UNITS = {d.key: d.unit for d in LIMIT_DIMENSIONS}  # "rpm" -> "requests per minute"
ALIAS = "routing.E007"
REFERENCE = "routing.E008"


_SETS: dict[tuple[str, ...], frozenset[str]] = {}
_CAPABILITY_SET = frozenset(CAPABILITIES)
_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True, slots=True)
class ConfigError:
    """One problem: where (`models[chat-a].fallbacks[1]`) and what to do about it."""

    path: str
    message: str
    code: str = field(default=STRUCTURE, compare=False)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# Messages shared by the document rules and the form field validators --------------


def base_url_problem(value: Any) -> str | None:
    if isinstance(value, str) and not any(c.isspace() for c in value):
        try:
            parts = urlsplit(value)
            if parts.scheme in ("http", "https") and parts.hostname:
                return userinfo_problem(value) or url_problem(value)
        except ValueError:
            pass
    shown = redact_url(value) if isinstance(value, str) and "@" in value else value
    return f"{shown!r} is not an http(s) URL with a host: write it like http://127.0.0.1:9001/v1"


_AWS_RUNTIME_HOST = re.compile(r"^bedrock-runtime(?:-fips)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$")
_AWS_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d+$")


def bedrock_region(base_url: str) -> str | None:
    """The AWS region a bedrock base_url names: its `?region=`, else its bedrock-runtime host's."""
    parts = urlsplit(base_url)
    region = dict(parse_qsl(parts.query)).get("region")
    if not region:
        match = _AWS_RUNTIME_HOST.match(parts.hostname or "")
        region = match.group(1) if match else None
    return region


def bedrock_region_problem(base_url: str) -> str | None:
    """Why a bedrock base_url names no usable region (None when it does)."""
    region = bedrock_region(base_url)
    if region is None:
        return (
            "names no AWS region: use https://bedrock-runtime.<region>.amazonaws.com, "
            "or add ?region=<region> to any other URL (e.g. http://127.0.0.1:9001/bedrock?region=us-east-1)"
        )
    if not _AWS_REGION.match(region):
        return f"region {region!r} is not an AWS region name such as us-east-1"
    return None


def pattern_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return "the pattern is empty: give a Go filepath.Match pattern such as 'chat-*' or '*/*'"
    shape = identifier_problem(value, "the pattern", MAX_PATTERN)  # bounded before the parser sees it
    if shape is not None:
        return shape
    reason = pattern_error(value)
    return None if reason is None else f"malformed pattern {value!r}: {reason}"


def timeout_problem(value: Any) -> str | None:
    if _is_int(value) and value > 0:
        return None
    return f"{value!r} is not a positive whole number of milliseconds: use e.g. 5000"


def env_name_problem(value: Any) -> str | None:
    if isinstance(value, str) and _ENV_NAME.match(value):
        return env_policy_problem(value)
    return (
        f"{_short(value)} is not an environment variable name: give the NAME of the variable holding "
        "the key (letters, digits, _), never the key itself"
    )


def health_path_problem(value: Any) -> str | None:
    """A path the prober appends to base_url: '/', printable ASCII, no spaces (docs/security.md#identifiers)."""
    return path_problem(value)


def dialect_problem(value: Any) -> str | None:
    """The dialect table (routing.core.kinds.DIALECT_KINDS) is the only list of dialects."""
    if isinstance(value, str) and value in DIALECTS:
        return None
    return f"unknown dialect {_short(value)}: use one of {' | '.join(DIALECTS)}"


def ratio_problem(value: Any) -> str | None:
    if _is_num(value) and 0 <= value <= 1:
        return None
    return f"{value!r} must be a number between 0 and 1, e.g. 0.2"


def _field_validator(problem):  # type: ignore[no-untyped-def]
    def validate(value: Any) -> None:
        message = problem(value)
        if message:
            raise ValidationError(message)

    validate.__name__ = "validate_" + problem.__name__.removesuffix("_problem")
    validate.__doc__ = f"Django field validator sharing the message of {problem.__name__}."
    return validate


validate_base_url = _field_validator(base_url_problem)
validate_pattern = _field_validator(pattern_problem)
validate_timeout_ms = _field_validator(timeout_problem)
validate_env_name = _field_validator(env_name_problem)
validate_health_path = _field_validator(health_path_problem)
validate_ratio = _field_validator(ratio_problem)
validate_dialect = _field_validator(dialect_problem)

# The form field validator of each schema value rule that has one (the admin attaches them).
FORM_VALIDATORS = {
    "timeout": validate_timeout_ms,
    "base_url": validate_base_url,
    "env_name": validate_env_name,
    "health_path": validate_health_path,
    "ratio": validate_ratio,
    "pattern": validate_pattern,
    "dialect": validate_dialect,
}


def add_form_validators(form: Any, *entities: Entity) -> None:
    """Attach the field validators the schema names to a model form's fields (admin forms)."""
    for entity in entities:
        for f in entity:
            validator = FORM_VALIDATORS.get(f.check or "")
            if validator is not None and f.attr in form.fields:
                form.fields[f.attr].validators.append(validator)


# Helpers ----------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


# Value rules the schema names (routing.config.schema Field.check): value, key, what -> message.
# Parsing a pattern is the costliest rule; patterns rarely change between rebuilds.
_pattern_problem = lru_cache(maxsize=1 << 16)(pattern_problem)


def _in_range(top: int) -> Callable[[Any, str, str], str | None]:
    def check(value: Any, key: str, what: str) -> str | None:
        return (
            None if _is_int(value) and 0 <= value <= top else f"{key} {value!r} must be a whole number from 0 to {top}"
        )

    return check


def _prefixed(
    problem: Callable[[Any], str | None], resilience_plain: bool = False
) -> Callable[[Any, str, str], str | None]:
    def check(value: Any, key: str, what: str) -> str | None:
        message = problem(value)
        if message is None:
            return None
        if what == "resilience":
            return message if resilience_plain else f"{key} {message}"
        return f"{key} of {what}: {message}"

    return check


CHECKS: dict[str, tuple[Callable[[Any, str, str], str | None], str]] = {
    "timeout": (_prefixed(timeout_problem, resilience_plain=True), VALUE),
    "base_url": (_prefixed(lambda v: None if v in (None, "") else base_url_problem(v)), URL),
    "env_name": (_prefixed(lambda v: None if not v else env_name_problem(v)), VALUE),
    "stored_ref": (_prefixed(stored_ref_problem), VALUE),
    "health_path": (_prefixed(health_path_problem), VALUE),
    "ratio": (_prefixed(ratio_problem), VALUE),
    "pattern": (lambda v, key, what: None if (m := _pattern_problem(v)) is None else f"{what}: {m}", PATTERN),
    "dialect": (lambda v, key, what: None if (m := dialect_problem(v)) is None else f"{what}: {m}", VALUE),
    "action": (lambda v, key, what: None if v in ACTIONS else f"{key} of {what} is {v!r}: use allow or deny", VALUE),
    "bool": (lambda v, key, what: None if isinstance(v, bool) else f"{key} of {what} must be true or false", STRUCTURE),
    "int": (
        lambda v, key, what: None
        if _is_int(v)
        else f"{key} of {what} must be a whole number (lower is evaluated first), got {_short(v)}",
        STRUCTURE,
    ),
    "tokens": (
        lambda v, key, what: None
        if _is_int(v) and v > 0
        else f"{key} of {what} must be a positive whole number of tokens, got {_short(v)}",
        VALUE,
    ),
    "ttl": (
        lambda v, key, what: None
        if _is_int(v) and v > 0
        else f"{key} of {what} must be a positive whole number of seconds, got {_short(v)}: "
        "use e.g. 300, or remove it to turn the response cache off",
        VALUE,
    ),
    "price": (
        lambda v, key, what: None
        if _is_num(v) and v >= 0
        else f"{key} of {what} must be a number of at least 0, got {_short(v)}",
        VALUE,
    ),
    "retries": (_in_range(100), VALUE),
    "depth": (_in_range(MAX_CHAIN), VALUE),
    "threshold": (
        lambda v, key, what: None
        if _is_int(v) and v >= 1
        else f"breaker_failure_threshold {v!r} must be a whole number of at least 1, e.g. 5",
        VALUE,
    ),
    "cooldown": (
        lambda v, key, what: None
        if _is_num(v) and v > 0
        else f"breaker_cooldown_s {v!r} must be a positive number of seconds, e.g. 30",
        VALUE,
    ),
    "park": (
        lambda v, key, what: None
        if _is_num(v) and v > 0
        else f"quota_park_s {v!r} must be a positive number of seconds, e.g. 3600",
        VALUE,
    ),
    "min_per_s": (
        lambda v, key, what: None
        if _is_num(v) and v >= 0
        else f"retry_budget_min_per_s {v!r} must be a number of at least 0, e.g. 10",
        VALUE,
    ),
    "routing": (
        lambda v, key, what: None
        if v in ROUTINGS or v == ""
        else f"routing of {what} is {_short(v)}: use one of {' | '.join(ROUTINGS)}",
        VALUE,
    ),
    "weight": (
        lambda v, key, what: None
        if _is_int(v) and v > 0
        else f"weight of {what} must be a positive whole number (its share of the traffic), got {_short(v)}: "
        "use e.g. 1, or remove the deployment",
        VALUE,
    ),
    "capacity": (
        lambda v, key, what: None
        if _is_int(v) and v > 0
        else f"{key} of {what} must be a positive whole number of "
        f"{_UNITS[key]}, got {_short(v)}: use e.g. 600, "
        "or remove it for no limit",
        VALUE,
    ),
    "priority": (
        lambda v, key, what: None
        if v in PRIORITY_CLASSES or v == ""
        else f"priority of {what} is {_short(v)}: use one of {' | '.join(PRIORITY_CLASSES)} "
        "(docs/overload.md#configuration)",
        VALUE,
    ),
    "share": (
        lambda v, key, what: None
        if _is_num(v) and 0 < v <= 1e6
        else f"weight of {what} must be a positive number (its share of a busy deployment against the other "
        f"orgs), got {_short(v)}: use e.g. 1 or 2.5, or remove it for 1",
        VALUE,
    ),
    "concurrency": (lambda v, key, what: None, VALUE),  # per-key paths: _Validator.concurrency
    "hedge": (lambda v, key, what: None, VALUE),  # per-key paths: _Validator.hedge
    "affinity": (lambda v, key, what: None, VALUE),  # per-key paths: _Validator.affinity
    "fallback_on": (lambda v, key, what: None, VALUE),  # per-trigger paths: _Validator.fallback_on
    "limits": (lambda v, key, what: None, VALUE),  # per-key paths: _Validator.limits
    "budget": (lambda v, key, what: None, VALUE),  # per-key paths: _Validator.budget
    "price_versions": (lambda v, key, what: None, VALUE),  # per-entry paths: _Validator.price_versions
    "deployment_prices": (lambda v, key, what: None, VALUE),  # per-key paths: _Validator.prices
    # Names: checked with their uniqueness by _Validator.name (what is the entity kind there).
    "slug": (
        lambda v, key, what: None
        if _SLUG.fullmatch(v)
        else f"{what} name {v!r} must be a slug (letters, digits, '-' or '_', at most 64): rename it",
        STRUCTURE,
    ),
}


def endpoint_kinds(item: Mapping[str, Any]) -> set[str]:
    """The endpoint kinds (chat/embeddings/rerank/responses) a model item serves."""
    caps = item.get("capabilities")
    if not isinstance(caps, list):
        return set()
    return {c for c in caps if isinstance(c, str) and c in ENDPOINT_KINDS}


def fallback_cycles(models: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Each loop of two or more models through their `fallbacks` (a model listing itself is reported
    apart), once, starting at the model that comes first in the document."""
    # Only models with fallbacks can be on a loop; the hops are filtered as the walk meets them.
    graph = {
        model_id: hops for model_id, m in models.items() if (hops := m.get("fallbacks")) and isinstance(hops, list)
    }
    order: dict[str, int] = {}  # document position, built at the first cycle (rare)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []
    for root in graph:
        if root in state:
            continue
        path, stack = [root], [iter(graph[root])]
        state[root] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
            elif not isinstance(target, str) or target == path[-1] or target not in graph:
                continue
            elif state.get(target) == 1:
                loop = path[path.index(target) :]
                order = order or {model_id: i for i, model_id in enumerate(models)}
                first = min(range(len(loop)), key=lambda i: order[loop[i]])
                cycles.append(loop[first:] + loop[:first])
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(graph[target]))
    return cycles


class _Validator:
    def __init__(self) -> None:
        self.errors: list[ConfigError] = []
        self.dialects: dict[str, str] = {}  # provider name -> dialect, for the deployment rule

    def add(self, path: str, message: str, code: str = STRUCTURE) -> None:
        self.errors.append(ConfigError(path, message, code))

    # shape -------------------------------------------------------------------------

    def mapping(self, value: Any, path: str, what: str) -> bool:
        if isinstance(value, Mapping):
            return True
        self.add(path, f"{what} must be a mapping (key: value), got {_kind(value)}")
        return False

    def items(self, parent: Mapping[str, Any], key: str, path: str, what: str) -> list[tuple[int, dict[str, Any]]]:
        """The mapping entries of an optional list, reporting non-list / non-mapping entries."""
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.add(path, f"{key} must be a list of {what} entries, got {_kind(value)}")
            return []
        out = []
        for i, item in enumerate(value):
            if self.mapping(item, f"{path}[{i}]", f"each {what} entry"):
                out.append((i, item))
        return out

    def fields(
        self, item: Mapping[str, Any], path: str, what: str, allowed: tuple[str, ...], required: tuple[str, ...]
    ) -> None:
        allowed_set = _SETS.get(allowed) or _SETS.setdefault(allowed, frozenset(allowed))
        for key in item:
            if key not in allowed_set:
                self.add(
                    f"{path}.{key}", f"unknown field {key!r} for {what}: remove it (allowed: {', '.join(allowed)})"
                )
        for key in required:
            if item.get(key) in (None, ""):
                self.add(f"{path}.{key}", f"{what} is missing the required field {key!r}: add it")

    def string(self, item: Mapping[str, Any], key: str, path: str, what: str) -> str | None:
        value = item.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.add(f"{path}.{key}", f"{key} of {what} must be a string, got {_kind(value)}")
            return None
        return value

    def name(self, item: Mapping[str, Any], key: str, path: str, what: str, seen: dict[str, str]) -> str | None:
        """A slug name, unique among `seen`; returns it when usable."""
        value = self.string(item, key, path, what)
        if not value:
            return None
        rule, code = CHECKS["slug"]
        message = rule(value, key, what)
        if message:
            self.add(f"{path}.{key}", message, code)
        if value in seen:
            self.add(f"{path}.{key}", f"duplicate {what} name {value!r}: names must be unique, rename or remove one")
        seen[value] = path
        return value

    def label(self, item: Mapping[str, Any], key: str, index: int) -> str:
        value = item.get(key)
        return value if isinstance(value, str) and value else str(index)

    def check(self, path: str, problem: str | None, code: str, prefix: str = "") -> None:
        if problem:
            self.add(path, prefix + problem, code)

    def values(self, item: Mapping[str, Any], path: str, what: str, entity: Entity) -> None:
        """Run the value rule the schema names for each field the item sets."""
        checked = entity.checked
        for key, value in item.items():  # the item's few keys, not every field of the entity
            f = checked.get(key)
            if f is None or value is None or f.check == "slug":  # names: see name()
                continue
            if f.check == "fallback_on":
                self.fallback_on(value, f"{path}.{f.name}", what)
                continue
            if f.check == "limits":
                self.limits(value, f"{path}.{f.name}", what)
                continue
            if f.check == "budget":
                self.budget(value, f"{path}.{f.name}", what)
                continue
            if f.check in ("concurrency", "hedge", "affinity"):
                getattr(self, f.check)(value, f"{path}.{f.name}", what)
                continue
            if f.check == "price_versions":
                self.price_versions(value, f"{path}.{f.name}", what)
                continue
            if f.check == "deployment_prices":
                self.prices(value, f"{path}.{f.name}", what, ())
                continue
            rule, code = CHECKS[f.check]
            message = rule(value, f.name, what)
            if message:
                self.add(f"{path}.{f.name}" if path else f.name, message, code)

    def fallback_on(self, value: Any, path: str, what: str) -> None:
        if not isinstance(value, list):
            self.add(
                path, f"fallback_on of {what} must be a list such as [provider_error, timeout], got {_kind(value)}"
            )
            return
        for i, trigger in enumerate(value):
            if trigger not in FALLBACK_TRIGGERS:
                self.add(
                    f"{path}[{i}]",
                    f"unknown fallback trigger {trigger!r} in {what}: use one of {', '.join(FALLBACK_TRIGGERS)}",
                    VALUE,
                )

    def limits(self, value: Any, path: str, what: str) -> None:
        """An org's or agent's `limits: {rpm, tpm}` (docs/limits.md): positive whole numbers per minute."""
        if not isinstance(value, Mapping):
            self.add(path, f"limits of {what} must be a mapping such as {{rpm: 60, tpm: 100000}}, got {_kind(value)}")
            return
        for key, number in value.items():
            if key not in LIMIT_KEYS:
                self.add(
                    f"{path}.{key}",
                    f"unknown limit {key!r} of {what}: remove it (allowed: {describe_limits()})",
                )
            elif not (_is_int(number) and number > 0):
                self.add(
                    f"{path}.{key}",
                    f"{key} of {what} must be a positive whole number of {_UNITS[key]}, got {_short(number)}: "
                    "use e.g. 60, or remove it for no limit",
                    VALUE,
                )

    def concurrency(self, value: Any, path: str, what: str) -> None:
        """A model's `concurrency: {initial, min, max, queue}` (docs/overload.md#configuration): whole numbers
        of at least 1, with min <= initial <= max."""
        example = "{initial: 20, min: 1, max: 200, queue: 1000}"
        if not isinstance(value, Mapping):
            self.add(path, f"concurrency of {what} must be a mapping such as {example}, got {_kind(value)}")
            return
        for key, number in value.items():
            if key not in CONCURRENCY_KEYS:
                self.add(
                    f"{path}.{key}",
                    f"unknown concurrency setting {key!r} of {what}: remove it (allowed: {', '.join(CONCURRENCY_KEYS)})",
                )
            elif not (_is_int(number) and 1 <= number <= 1_000_000):
                self.add(
                    f"{path}.{key}",
                    f"concurrency {key} of {what} must be a whole number of at least 1, got {_short(number)}: "
                    f"write it like {example}",
                    VALUE,
                )
        low, start, top = (value.get(k) for k in ("min", "initial", "max"))
        if _is_int(low) and _is_int(top) and low > top:
            self.add(f"{path}.min", f"concurrency min {low} of {what} exceeds its max {top}: lower it", VALUE)
        elif _is_int(start) and ((_is_int(low) and start < low) or (_is_int(top) and start > top)):
            self.add(
                f"{path}.initial", f"concurrency initial {start} of {what} must lie between its min and max", VALUE
            )

    def hedge(self, value: Any, path: str, what: str) -> None:
        """A model's `hedge: {budget_pct, tools}` (docs/overload.md#hedging)."""
        if not isinstance(value, Mapping):
            self.add(path, f"hedge of {what} must be a mapping such as {{budget_pct: 5}}, got {_kind(value)}")
            return
        for key, setting in value.items():
            if key not in HEDGE_KEYS:
                self.add(
                    f"{path}.{key}", f"unknown hedge setting {key!r} of {what}: remove it (allowed: budget_pct, tools)"
                )
            elif key == "tools" and not isinstance(setting, bool):
                self.add(f"{path}.tools", f"hedge tools of {what} must be true or false", VALUE)
            elif key == "budget_pct" and not (_is_num(setting) and 0 < setting <= 100):
                self.add(
                    f"{path}.budget_pct",
                    f"hedge budget_pct of {what} must be a number more than 0 and at most 100 (extra calls, in % of "
                    f"the model's requests), got {_short(setting)}: use e.g. 5",
                    VALUE,
                )

    def affinity(self, value: Any, path: str, what: str) -> None:
        """A model's `affinity: {ttl_s}` (docs/deployments.md#affinity): seconds a pin lives since its last use."""
        if not isinstance(value, Mapping):
            self.add(path, f"affinity of {what} must be a mapping such as {{ttl_s: 300}}, got {_kind(value)}")
            return
        for key in value:
            if key not in AFFINITY_KEYS:
                self.add(f"{path}.{key}", f"unknown affinity setting {key!r} of {what}: remove it (allowed: ttl_s)")
        ttl = value.get("ttl_s")
        if not (_is_num(ttl) and 0 < ttl <= AFFINITY_MAX_S):
            self.add(
                f"{path}.ttl_s",
                f"affinity ttl_s of {what} must be a number of seconds more than 0 and at most {AFFINITY_MAX_S}, "
                f"got {_short(ttl)}: use about the provider's prompt-cache lifetime, e.g. 300",
                VALUE,
            )

    def prices(self, value: Any, path: str, what: str, extra: tuple[str, ...]) -> bool:
        """A price entry (docs/configuration.md#price-versions): USD per million tokens by class."""
        if not isinstance(value, Mapping):
            self.add(path, f"prices of {what} must be a mapping such as {{input: 3, output: 15}}, got {_kind(value)}")
            return False
        for key, number in value.items():
            if key in extra:
                continue
            if key not in PRICE_KEYS:
                self.add(f"{path}.{key}", f"unknown price {key!r} of {what}: use {', '.join(PRICE_KEYS)}")
            elif not (_is_num(number) and number >= 0):
                self.add(
                    f"{path}.{key}",
                    f"price {key} of {what} must be a number of at least 0 (USD per million tokens), "
                    f"got {_short(number)}",
                    VALUE,
                )
        return True

    def price_versions(self, value: Any, path: str, what: str) -> None:
        """A model's dated prices: a list of entries, each with its own `effective_from` date."""
        if not isinstance(value, list):
            self.add(path, f"prices of {what} must be a list such as [{{effective_from: 2026-01-01, input: 3}}]")
            return
        seen: set[str] = set()
        for i, entry in enumerate(value):
            here = f"{path}[{i}]"
            if not self.prices(entry, here, what, ("effective_from",)):
                continue
            day = entry.get("effective_from")
            text = day.isoformat() if isinstance(day, date) else day
            try:
                date.fromisoformat(text if isinstance(text, str) and len(text) == 10 else "")
            except ValueError:
                self.add(
                    f"{here}.effective_from",
                    f"effective_from of a price entry of {what} must be a date such as 2026-01-01, got {_short(day)}",
                    VALUE,
                )
                continue
            if text in seen:
                self.add(f"{here}.effective_from", f"two price entries of {what} start on {text}: merge them", VALUE)
            seen.add(text)

    def budget(self, value: Any, path: str, what: str) -> None:
        """An org's or agent's `budget: {usd, period}` (docs/limits.md#budgets): a positive amount, a known period."""
        example = "{usd: 100, period: month}"
        if not isinstance(value, Mapping):
            self.add(path, f"budget of {what} must be a mapping such as {example}, got {_kind(value)}")
            return
        for key in value:
            if key not in BUDGET_KEYS:
                self.add(
                    f"{path}.{key}",
                    f"unknown budget key {key!r} of {what}: remove it (allowed: usd = the amount, "
                    "period = day, month or total)",
                )
        for key in BUDGET_KEYS:
            if key not in value:
                self.add(f"{path}.{key}", f"budget of {what} has no {key}: write it as {example}")
        usd = value.get("usd")
        if "usd" in value and not (_is_num(usd) and 0 < usd < 1e12):
            self.add(
                f"{path}.usd",
                f"usd of the budget of {what} must be a positive number of US dollars, got {_short(usd)}: "
                "use e.g. 100 or 2.5, or remove the budget",
                VALUE,
            )
        period = value.get("period")
        if "period" in value and period not in BUDGET_PERIODS:
            self.add(
                f"{path}.period",
                f"unknown budget period {_short(period)} of {what}: use day, month (UTC calendar periods) or total "
                "(never resets)",
                VALUE,
            )

    def alerts(self, doc: Mapping[str, Any]) -> None:
        """`alerts:` (docs/alerts.md): a unique name, exactly one destination, known events, percentages."""
        seen: dict[str, str] = {}
        for i, a in self.items(doc, "alerts", "alerts", "alert"):
            path = f"alerts[{self.label(a, 'name', i)}]"
            what = f"alert {a.get('name', i)!r}"
            self.fields(a, path, what, ALERT.names, ALERT.required)
            self.name(a, "name", path, "alert", seen)
            kinds = [k for k in ALERT_DESTINATIONS if a.get(k) is not None]
            if len(kinds) != 1:
                self.add(path, f"{what} must have exactly one destination (webhook, slack or email), has {len(kinds)}")
            for kind in kinds:
                self.alert_destination(a[kind], f"{path}.{kind}", what, kind)
            events = a.get("events", [])
            if not isinstance(events, list) or any(e not in ALERT_EVENTS for e in events):
                self.add(f"{path}.events", f"events of {what} must be a list of {' | '.join(ALERT_EVENTS)}", VALUE)
            percents = a.get("budget_percent", [])
            if not isinstance(percents, list) or not all(_is_int(p) and 0 < p <= 1000 for p in percents):
                self.add(
                    f"{path}.budget_percent",
                    f"budget_percent of {what} must be a list of whole percentages from 1 to 1000, e.g. [80, 100]",
                    VALUE,
                )

    def alert_destination(self, dest: Any, path: str, what: str, kind: str) -> None:
        """A webhook or slack `{url}` (a webhook may add `secret_env`, as api_key_env), or an email `{to: [...]}`."""
        allowed = ALERT_DESTINATIONS[kind]
        if not self.mapping(dest, path, f"{kind} of {what}"):
            return
        for key in dest:
            if key not in allowed:
                self.add(
                    f"{path}.{key}", f"unknown {kind} key {key!r} of {what}: remove it (allowed: {', '.join(allowed)})"
                )
        if kind == "email":
            to = dest.get("to")
            if not isinstance(to, list) or not to or not all(isinstance(t, str) and "@" in t for t in to):
                self.add(f"{path}.to", f"to of {what} must be a list of e-mail addresses, e.g. [ops@example.com]")
            return
        self.check(f"{path}.url", base_url_problem(dest.get("url")), URL, f"url of {what}: ")
        name = dest.get("secret_env")
        if name:  # the api_key_env name rule, and the variables an alert may read (routing.config.alert_spec)
            problem = env_name_problem(name) if not isinstance(name, str) or not _ENV_NAME.match(name) else None
            self.check(f"{path}.secret_env", problem or secret_env_problem(name), VALUE, f"secret_env of {what}: ")

    # sections ----------------------------------------------------------------------

    def run(self, doc: Any) -> None:
        if not self.mapping(doc, "<document>", "the configuration"):
            return
        for key in doc:
            if key not in TOP_KEYS:
                self.add(str(key), f"unknown top-level key {key!r}: remove it (allowed: {', '.join(TOP_KEYS)})")
        if doc.get("resilience") is not None and self.mapping(doc["resilience"], "resilience", "resilience"):
            self.resilience(doc["resilience"])
        providers = self.providers(doc)
        models = self.models(doc, providers)
        aliases = self.aliases(doc, models)
        self.chains(models, aliases)
        self.orgs(doc, providers, models, aliases)
        self.alerts(doc)

    def resilience(self, res: Mapping[str, Any]) -> None:
        for key in res:
            if key not in RESILIENCE.names:
                self.add(
                    f"resilience.{key}",
                    f"unknown resilience setting {key!r}: remove it (allowed: {', '.join(RESILIENCE.names)})",
                )
        self.values(res, "resilience", "resilience", RESILIENCE)
        base, top = res.get("backoff_base_ms"), res.get("backoff_max_ms")
        if _is_int(base) and _is_int(top) and base > top:
            self.add(
                "resilience.backoff_base_ms",
                f"backoff_base_ms {base} exceeds backoff_max_ms {top}: lower it or raise the maximum",
                VALUE,
            )

    def providers(self, doc: Mapping[str, Any]) -> set[str]:
        seen: dict[str, str] = {}
        for i, p in self.items(doc, "providers", "providers", "provider"):
            path = f"providers[{self.label(p, 'name', i)}]"
            what = f"provider {p.get('name', i)!r}"
            self.fields(p, path, what, PROVIDER.names, PROVIDER.required)
            name = self.name(p, "name", path, "provider", seen)
            self.values(p, path, what, PROVIDER)
            dialect = p.get("dialect", PROVIDER["dialect"].default)
            if name:
                self.dialects[name] = dialect if isinstance(dialect, str) else ""
            if dialect == "bedrock":
                self.bedrock_region(p, path, what)
        return set(seen)

    def bedrock_region(self, p: Mapping[str, Any], path: str, what: str) -> None:
        """A bedrock provider signs for one region, which its base_url must name (docs/providers.md#bedrock)."""
        url = p.get("base_url")
        if isinstance(url, str) and base_url_problem(url) is None and (problem := bedrock_region_problem(url)):
            self.add(f"{path}.base_url", f"base_url of {what} {problem}", URL)

    def models(self, doc: Mapping[str, Any], providers: set[str]) -> dict[str, dict[str, Any]]:
        seen: dict[str, str] = {}
        models: dict[str, dict[str, Any]] = {}
        for i, m in self.items(doc, "models", "models", "model"):
            path = f"models[{self.label(m, 'id', i)}]"
            what = f"model {m.get('id', i)!r}"
            self.fields(m, path, what, MODEL.names, MODEL.required)
            model_id = self.string(m, "id", path, what)
            if model_id:
                if model_id in seen:
                    self.add(f"{path}.id", f"duplicate model id {model_id!r}: ids must be unique, rename or remove one")
                elif problem := identifier_problem(model_id, "model id"):
                    self.add(f"{path}.id", problem, VALUE)
                elif model_id != model_id.strip():
                    self.add(f"{path}.id", f"model id {model_id!r} has surrounding spaces: remove them")
                seen[model_id] = path
                models.setdefault(model_id, m)
            if m.get("deployments") is None:  # the one-deployment shorthand (docs/deployments.md)
                for key in ("provider", "upstream_model"):
                    if m.get(key) in (None, ""):
                        self.add(f"{path}.{key}", f"{what} is missing the required field {key!r}: add it")
            provider = self.string(m, "provider", path, what)
            if provider and provider not in providers:
                self.add(
                    f"{path}.provider",
                    f"{what} names unknown provider {provider!r}: define it under providers or fix the name",
                    REFERENCE,
                )
            upstream = self.string(m, "upstream_model", path, what)
            self.check(f"{path}.upstream_model", identifier_problem(upstream, f"upstream_model of {what}"), VALUE)
            self.deployments(m, path, what, providers)
            if m.get("affinity") is not None and len(m.get("deployments") or ()) < 2:
                self.add(
                    f"{path}.affinity",
                    f"{what} has affinity but fewer than two deployments: affinity picks one of several "
                    "deployments; list its deployments or remove affinity",
                    VALUE,
                )
            self.string(m, "residency", path, what)
            caps = m.get("capabilities")
            if caps is not None:
                if not isinstance(caps, list):
                    self.add(
                        f"{path}.capabilities",
                        f"capabilities of {what} must be a list such as [chat, streaming], got {_kind(caps)}",
                    )
                else:
                    for j, cap in enumerate(caps):
                        if not isinstance(cap, str) or cap not in _CAPABILITY_SET:
                            self.add(
                                f"{path}.capabilities[{j}]",
                                f"unknown capability {cap!r} of {what}: use one of {', '.join(CAPABILITIES)}",
                                CAPABILITY,
                            )
            self.values(m, path, what, MODEL)
            fallbacks = m.get("fallbacks")
            if fallbacks is not None and not isinstance(fallbacks, list):
                self.add(
                    f"{path}.fallbacks", f"fallbacks of {what} must be a list of model ids, got {_kind(fallbacks)}"
                )
        return models

    def deployments(self, m: Mapping[str, Any], model_path: str, model: str, providers: set[str]) -> None:
        """A model's `deployments` (docs/deployments.md#validation): known providers, one per provider,
        positive weight and capacity, a dialect that serves the model's endpoint kinds."""
        value = m.get("deployments")
        if value is None:
            return
        path = f"{model_path}.deployments"
        for key in ("provider", "upstream_model"):
            if m.get(key) not in (None, ""):
                self.add(
                    f"{model_path}.{key}",
                    f"{model} gives both {key!r} and deployments: the provider + upstream_model shorthand is one "
                    "deployment; move it into deployments or remove the deployments list",
                )
        if isinstance(value, list) and not value:
            self.add(path, f"deployments of {model} is empty: list at least one, or use provider + upstream_model")
            return
        kinds = endpoint_kinds(m)
        seen: set[str] = set()
        for i, d in self.items(m, "deployments", path, "deployment"):
            label = self.label(d, "provider", i)
            d_path = f"{path}[{label}]"
            what = f"deployment {label!r} of {model}"
            self.fields(d, d_path, what, DEPLOYMENT.names, DEPLOYMENT.required)
            provider = self.string(d, "provider", d_path, what)
            upstream = self.string(d, "upstream_model", d_path, what)
            self.check(f"{d_path}.upstream_model", identifier_problem(upstream, f"upstream_model of {what}"), VALUE)
            self.values(d, d_path, what, DEPLOYMENT)
            if not provider:
                continue
            if provider in seen:
                self.add(
                    f"{d_path}.provider",
                    f"{model} has two deployments on provider {provider!r}: at most one per provider, keep one",
                )
            seen.add(provider)
            if provider not in providers:
                self.add(
                    f"{d_path}.provider",
                    f"{what} names unknown provider {provider!r}: define it under providers or fix the name",
                    REFERENCE,
                )
                continue
            dialect = self.dialects.get(provider, "")
            cannot = sorted(kinds - DIALECT_KINDS.get(dialect, frozenset(kinds)))
            if cannot:
                self.add(
                    f"{d_path}.provider",
                    f"{what}: provider {provider!r} speaks the {dialect} dialect, which cannot serve "
                    f"{', '.join(cannot)} that the model serves: choose a provider whose dialect serves it",
                    CAPABILITY,
                )

    def aliases(self, doc: Mapping[str, Any], models: Mapping[str, Any]) -> dict[str, Any]:
        aliases = doc.get("aliases")
        if aliases is None or not self.mapping(aliases, "aliases", "aliases"):
            return {}
        for name, target in aliases.items():
            path = f"aliases[{name}]"
            if not isinstance(name, str) or not name or not isinstance(target, str) or not target:
                self.add(path, f"alias {name!r} must map a name to a model id string, got {_short(target)}")
            elif problem := identifier_problem(name, "alias"):
                self.add(path, problem, ALIAS)
            elif name in models:
                self.add(path, f"alias {name!r} has the same name as a model id: rename the alias", ALIAS)
            elif target in aliases and target not in models:
                self.add(
                    path,
                    f"alias {name!r} points to the alias {target!r}: an alias target must be a model id, point it at one",
                    ALIAS,
                )
            elif target not in models:
                self.add(
                    path,
                    f"alias {name!r} points to unknown model {target!r}: define the model or fix the target",
                    ALIAS,
                )
        return dict(aliases)

    def hop(self, path: str, target: Any, owner: str, models: Mapping[str, Any], aliases: Mapping[str, Any]) -> bool:
        """One model id of a chain; reports a non-id and returns whether it is a known model."""
        if not isinstance(target, str):
            self.add(path, f"{owner} must list model ids as strings, got {_kind(target)}")
        elif target in models:
            return True
        elif target in aliases:
            self.add(
                path, f"{owner} names the alias {target!r}: chains list model ids, use {aliases[target]!r}", FALLBACK
            )
        else:
            self.add(
                path,
                f"{owner} names unknown model {target!r}: define it under models or remove it from the chain",
                FALLBACK,
            )
        return False

    def chains(self, models: Mapping[str, dict[str, Any]], aliases: Mapping[str, Any]) -> None:
        for model_id, m in models.items():
            fallbacks = m.get("fallbacks")
            if not isinstance(fallbacks, list):
                continue
            path = f"models[{model_id}].fallbacks"
            owner = f"the fallback chain of model {model_id!r}"
            if len(fallbacks) > MAX_CHAIN:
                self.add(
                    path, f"{owner} has {len(fallbacks)} links; at most {MAX_CHAIN} are allowed: shorten it", FALLBACK
                )
            kinds = endpoint_kinds(m)
            seen: set[str] = set()
            for j, target in enumerate(fallbacks):
                hop_path = f"{path}[{j}]"
                if target == model_id:
                    self.add(hop_path, f"model {model_id!r} lists itself as a fallback: remove it", FALLBACK)
                elif isinstance(target, str) and target in seen:
                    self.add(hop_path, f"{target!r} appears twice in {owner}: remove the duplicate", FALLBACK)
                elif self.hop(hop_path, target, owner, models, aliases):
                    missing = sorted(kinds - endpoint_kinds(models[target]))
                    if missing:
                        self.add(
                            hop_path,
                            f"fallback {target!r} does not serve {', '.join(missing)}, which model {model_id!r} serves: "
                            f"add the capability to {target!r} or choose a fallback that has it",
                            CAPABILITY,
                        )
                if isinstance(target, str):
                    seen.add(target)
        for cycle in fallback_cycles(models):
            self.add(
                f"models[{cycle[0]}].fallbacks",
                f"fallback cycle {' -> '.join([*cycle, cycle[0]])}: these models fall back to one another in a "
                "loop, so none of them is the last resort; remove one of these links",
                FALLBACK,
            )

    def orgs(
        self, doc: Mapping[str, Any], providers: set[str], models: Mapping[str, Any], aliases: Mapping[str, Any]
    ) -> None:
        seen: dict[str, str] = {}
        for i, o in self.items(doc, "orgs", "orgs", "org"):
            path = f"orgs[{self.label(o, 'name', i)}]"
            what = f"org {o.get('name', i)!r}"
            self.fields(o, path, what, ORG.names, ORG.required)
            self.name(o, "name", path, "org", seen)
            self.values(o, path, what, ORG)
            self.agents(o, path, what, models, aliases)
            self.policies(o, path, what, models, aliases)
            self.credentials(o, path, what, providers)

    def agents(
        self, o: Mapping[str, Any], org_path: str, org: str, models: Mapping[str, Any], aliases: Mapping[str, Any]
    ) -> None:
        seen: dict[str, str] = {}
        for i, a in self.items(o, "agents", f"{org_path}.agents", "agent"):
            path = f"{org_path}.agents[{self.label(a, 'name', i)}]"
            what = f"agent {a.get('name', i)!r} of {org}"
            self.fields(a, path, what, AGENT.names, AGENT.required)
            self.name(a, "name", path, "agent", seen)
            self.values(a, path, what, AGENT)
            default = self.string(a, "default_model", path, what)
            if default and default not in models and default not in aliases:
                self.add(
                    f"{path}.default_model",
                    f"default_model {default!r} of {what} is neither a model id nor an alias: fix it or leave it empty",
                    REFERENCE,
                )

    def policies(
        self, o: Mapping[str, Any], org_path: str, org: str, models: Mapping[str, Any], aliases: Mapping[str, Any]
    ) -> None:
        listed = o.get("policies")
        if isinstance(listed, list) and len(listed) > MAX_POLICIES:
            self.add(
                f"{org_path}.policies",
                f"{org} has {len(listed)} policies; at most {MAX_POLICIES} are allowed: "
                "merge them with patterns such as 'gpt-*'",
                VALUE,
            )
            return
        for i, p in self.items(o, "policies", f"{org_path}.policies", "policy"):
            path = f"{org_path}.policies[{i}]"
            what = f"policy {i} ({p.get('pattern')!r}) of {org}"
            self.fields(p, path, what, POLICY.names, POLICY.required)
            self.values(p, path, what, POLICY)
            action = p.get("action")
            chain = p.get("fallback_chain")
            if chain is None:
                continue
            chain_path = f"{path}.fallback_chain"
            if action == "deny":
                self.add(
                    chain_path,
                    f"{what} is a deny policy with a fallback_chain: remove it, only allow policies replace the chain",
                    FALLBACK,
                )
            elif not isinstance(chain, list):
                self.add(
                    chain_path,
                    f"fallback_chain of {what} must be a list of model ids (empty disables fallback), got {_kind(chain)}",
                )
            else:
                if len(chain) > MAX_CHAIN:
                    self.add(
                        chain_path,
                        f"fallback_chain of {what} has {len(chain)} links; at most {MAX_CHAIN} are allowed: shorten it",
                        FALLBACK,
                    )
                for j, target in enumerate(chain):
                    self.hop(f"{chain_path}[{j}]", target, f"fallback_chain of {what}", models, aliases)

    def credentials(self, o: Mapping[str, Any], org_path: str, org: str, providers: set[str]) -> None:
        seen: set[str] = set()
        for i, c in self.items(o, "credentials", f"{org_path}.credentials", "credential"):
            path = f"{org_path}.credentials[{self.label(c, 'provider', i)}]"
            what = f"BYO credential {c.get('provider', i)!r} of {org}"
            self.fields(c, path, what, CREDENTIAL.names, CREDENTIAL.required)
            provider = self.string(c, "provider", path, what)
            if provider:
                if provider not in providers:
                    self.add(
                        f"{path}.provider",
                        f"{what} names unknown provider {provider!r}: define it under providers or fix the name",
                        REFERENCE,
                    )
                if provider in seen:
                    self.add(f"{path}.provider", f"{org} has two credentials for provider {provider!r}: keep one")
                seen.add(provider)
            self.values(c, path, what, CREDENTIAL)


def validate_document(doc: Any) -> list[ConfigError]:
    """Every problem of the configuration document, in document order (empty: valid)."""
    validator = _Validator()
    validator.run(doc)
    return validator.errors


def validate_key_controls(controls: Mapping[str, Any], what: str = "the API key") -> list[ConfigError]:
    """Problems of an API key's own controls (docs/limits.md#keys): `limits` and `budget` by the same
    rules as an org's or agent's, `models` a list of Go glob patterns as in org policies. The admin
    and the management API both validate here; absent or None values mean "none"."""
    validator = _Validator()
    if controls.get("limits") is not None:
        validator.limits(controls["limits"], "limits", what)
    if controls.get("budget") is not None:
        validator.budget(controls["budget"], "budget", what)
    priority = controls.get("priority")
    if priority is not None:  # docs/overload.md#configuration
        rule, code = CHECKS["priority"]
        validator.check("priority", rule(priority, "priority", what), code)
    allowed = controls.get("models")
    if allowed is not None:
        if not isinstance(allowed, list) or len(allowed) > MAX_KEY_PATTERNS:
            validator.add(
                "models",
                f"models of {what} must be a list of at most {MAX_KEY_PATTERNS} model patterns such as ['gpt-*']",
            )
        else:
            for i, pattern in enumerate(allowed):
                validator.check(f"models[{i}]", pattern_problem(pattern), VALUE)
    return validator.errors
