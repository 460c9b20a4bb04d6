"""The value rules the schema names (routing.config.schema `Field.check`): value, key, what -> message.

`CHECKS` maps a rule name to its function and check id. The compound rules (limits,
budgets, prices, concurrency, hedge, affinity, fallback_on) report per key from
routing.config.validation_rules.values; their entries here only mark the name as known.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from routing.config.schema import ACTIONS, MAX_CHAIN, PRIORITY_CLASSES, ROUTINGS
from routing.config.secrets import stored_ref_problem
from routing.config.validation_rules.errors import PATTERN, STRUCTURE, URL, VALUE, is_int, is_num, short_repr
from routing.config.validation_rules.problems import (
    base_url_problem,
    dialect_problem,
    env_name_problem,
    health_path_problem,
    pattern_problem,
    ratio_problem,
    timeout_problem,
)
from routing.core.dimensions import LIMIT_DIMENSIONS

UNITS = {d.key: d.unit for d in LIMIT_DIMENSIONS}  # "rpm" -> "requests per minute"
_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")

# Parsing a pattern is the costliest rule; patterns rarely change between rebuilds.
_pattern_problem = lru_cache(maxsize=1 << 16)(pattern_problem)


def _in_range(top: int) -> Callable[[Any, str, str], str | None]:
    def check(value: Any, key: str, what: str) -> str | None:
        return (
            None if is_int(value) and 0 <= value <= top else f"{key} {value!r} must be a whole number from 0 to {top}"
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
        if is_int(v)
        else f"{key} of {what} must be a whole number (lower is evaluated first), got {short_repr(v)}",
        STRUCTURE,
    ),
    "tokens": (
        lambda v, key, what: None
        if is_int(v) and v > 0
        else f"{key} of {what} must be a positive whole number of tokens, got {short_repr(v)}",
        VALUE,
    ),
    "ttl": (
        lambda v, key, what: None
        if is_int(v) and v > 0
        else f"{key} of {what} must be a positive whole number of seconds, got {short_repr(v)}: "
        "use e.g. 300, or remove it to turn the response cache off",
        VALUE,
    ),
    "price": (
        lambda v, key, what: None
        if is_num(v) and v >= 0
        else f"{key} of {what} must be a number of at least 0, got {short_repr(v)}",
        VALUE,
    ),
    "retries": (_in_range(100), VALUE),
    "depth": (_in_range(MAX_CHAIN), VALUE),
    "threshold": (
        lambda v, key, what: None
        if is_int(v) and v >= 1
        else f"breaker_failure_threshold {v!r} must be a whole number of at least 1, e.g. 5",
        VALUE,
    ),
    "cooldown": (
        lambda v, key, what: None
        if is_num(v) and v > 0
        else f"breaker_cooldown_s {v!r} must be a positive number of seconds, e.g. 30",
        VALUE,
    ),
    "park": (
        lambda v, key, what: None
        if is_num(v) and v > 0
        else f"quota_park_s {v!r} must be a positive number of seconds, e.g. 3600",
        VALUE,
    ),
    "min_per_s": (
        lambda v, key, what: None
        if is_num(v) and v >= 0
        else f"retry_budget_min_per_s {v!r} must be a number of at least 0, e.g. 10",
        VALUE,
    ),
    "routing": (
        lambda v, key, what: None
        if v in ROUTINGS or v == ""
        else f"routing of {what} is {short_repr(v)}: use one of {' | '.join(ROUTINGS)}",
        VALUE,
    ),
    "weight": (
        lambda v, key, what: None
        if is_int(v) and v > 0
        else f"weight of {what} must be a positive whole number (its share of the traffic), got {short_repr(v)}: "
        "use e.g. 1, or remove the deployment",
        VALUE,
    ),
    "capacity": (
        lambda v, key, what: None
        if is_int(v) and v > 0
        else f"{key} of {what} must be a positive whole number of "
        f"{UNITS[key]}, got {short_repr(v)}: use e.g. 600, "
        "or remove it for no limit",
        VALUE,
    ),
    "priority": (
        lambda v, key, what: None
        if v in PRIORITY_CLASSES or v == ""
        else f"priority of {what} is {short_repr(v)}: use one of {' | '.join(PRIORITY_CLASSES)} "
        "(docs/overload.md#configuration)",
        VALUE,
    ),
    "share": (
        lambda v, key, what: None
        if is_num(v) and 0 < v <= 1e6
        else f"weight of {what} must be a positive number (its share of a busy deployment against the other "
        f"orgs), got {short_repr(v)}: use e.g. 1 or 2.5, or remove it for 1",
        VALUE,
    ),
    "concurrency": (lambda v, key, what: None, VALUE),  # per-key paths: ValueRules.concurrency
    "hedge": (lambda v, key, what: None, VALUE),  # per-key paths: ValueRules.hedge
    "affinity": (lambda v, key, what: None, VALUE),  # per-key paths: ValueRules.affinity
    "fallback_on": (lambda v, key, what: None, VALUE),  # per-trigger paths: ValueRules.fallback_on
    "limits": (lambda v, key, what: None, VALUE),  # per-key paths: ValueRules.limits
    "budget": (lambda v, key, what: None, VALUE),  # per-key paths: ValueRules.budget
    "price_versions": (lambda v, key, what: None, VALUE),  # per-entry paths: ValueRules.price_versions
    "deployment_prices": (lambda v, key, what: None, VALUE),  # per-key paths: ValueRules.prices
    # Names: checked with their uniqueness by Report.name (what is the entity kind there).
    "slug": (
        lambda v, key, what: None
        if _SLUG.fullmatch(v)
        else f"{what} name {v!r} must be a slug (letters, digits, '-' or '_', at most 64): rename it",
        STRUCTURE,
    ),
}
