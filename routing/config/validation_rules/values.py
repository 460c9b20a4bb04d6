"""The value rules of an entry's fields, including the compound ones checked key by key.

`ValueRules.values` runs the rule the schema names for each field an entry sets; limits,
budgets, prices, concurrency, hedge, affinity and fallback_on report each bad key on its
own path (docs/limits.md, docs/overload.md#configuration, docs/configuration.md#price-versions).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from routing.config.schema import (
    AFFINITY_KEYS,
    AFFINITY_MAX_S,
    BUDGET_KEYS,
    BUDGET_PERIODS,
    CONCURRENCY_KEYS,
    HEDGE_KEYS,
    Entity,
)
from routing.config.validation_rules.errors import VALUE, is_int, is_num, kind_of, short_repr
from routing.config.validation_rules.report import Report
from routing.config.validation_rules.schema_rules import CHECKS, UNITS
from routing.core.dimensions import LIMIT_KEYS
from routing.core.dimensions import describe as describe_limits
from routing.core.prices import PRICE_KEYS
from routing.core.resilience import FALLBACK_TRIGGERS


class ValueRules(Report):
    """The schema's value rule of each field an entry sets."""

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
                path, f"fallback_on of {what} must be a list such as [provider_error, timeout], got {kind_of(value)}"
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
            self.add(path, f"limits of {what} must be a mapping such as {{rpm: 60, tpm: 100000}}, got {kind_of(value)}")
            return
        for key, number in value.items():
            if key not in LIMIT_KEYS:
                self.add(
                    f"{path}.{key}",
                    f"unknown limit {key!r} of {what}: remove it (allowed: {describe_limits()})",
                )
            elif not (is_int(number) and number > 0):
                self.add(
                    f"{path}.{key}",
                    f"{key} of {what} must be a positive whole number of {UNITS[key]}, got {short_repr(number)}: "
                    "use e.g. 60, or remove it for no limit",
                    VALUE,
                )

    def concurrency(self, value: Any, path: str, what: str) -> None:
        """A model's `concurrency: {initial, min, max, queue}` (docs/overload.md#configuration): whole numbers
        of at least 1, with min <= initial <= max."""
        example = "{initial: 20, min: 1, max: 200, queue: 1000}"
        if not isinstance(value, Mapping):
            self.add(path, f"concurrency of {what} must be a mapping such as {example}, got {kind_of(value)}")
            return
        for key, number in value.items():
            if key not in CONCURRENCY_KEYS:
                self.add(
                    f"{path}.{key}",
                    f"unknown concurrency setting {key!r} of {what}: remove it (allowed: {', '.join(CONCURRENCY_KEYS)})",
                )
            elif not (is_int(number) and 1 <= number <= 1_000_000):
                self.add(
                    f"{path}.{key}",
                    f"concurrency {key} of {what} must be a whole number of at least 1, got {short_repr(number)}: "
                    f"write it like {example}",
                    VALUE,
                )
        low, start, top = (value.get(k) for k in ("min", "initial", "max"))
        if is_int(low) and is_int(top) and low > top:
            self.add(f"{path}.min", f"concurrency min {low} of {what} exceeds its max {top}: lower it", VALUE)
        elif is_int(start) and ((is_int(low) and start < low) or (is_int(top) and start > top)):
            self.add(
                f"{path}.initial", f"concurrency initial {start} of {what} must lie between its min and max", VALUE
            )

    def hedge(self, value: Any, path: str, what: str) -> None:
        """A model's `hedge: {budget_pct, tools}` (docs/overload.md#hedging)."""
        if not isinstance(value, Mapping):
            self.add(path, f"hedge of {what} must be a mapping such as {{budget_pct: 5}}, got {kind_of(value)}")
            return
        for key, setting in value.items():
            if key not in HEDGE_KEYS:
                self.add(
                    f"{path}.{key}", f"unknown hedge setting {key!r} of {what}: remove it (allowed: budget_pct, tools)"
                )
            elif key == "tools" and not isinstance(setting, bool):
                self.add(f"{path}.tools", f"hedge tools of {what} must be true or false", VALUE)
            elif key == "budget_pct" and not (is_num(setting) and 0 < setting <= 100):
                self.add(
                    f"{path}.budget_pct",
                    f"hedge budget_pct of {what} must be a number more than 0 and at most 100 (extra calls, in % of "
                    f"the model's requests), got {short_repr(setting)}: use e.g. 5",
                    VALUE,
                )

    def affinity(self, value: Any, path: str, what: str) -> None:
        """A model's `affinity: {ttl_s}` (docs/deployments.md#affinity): seconds a pin lives since its last use."""
        if not isinstance(value, Mapping):
            self.add(path, f"affinity of {what} must be a mapping such as {{ttl_s: 300}}, got {kind_of(value)}")
            return
        for key in value:
            if key not in AFFINITY_KEYS:
                self.add(f"{path}.{key}", f"unknown affinity setting {key!r} of {what}: remove it (allowed: ttl_s)")
        ttl = value.get("ttl_s")
        if not (is_num(ttl) and 0 < ttl <= AFFINITY_MAX_S):
            self.add(
                f"{path}.ttl_s",
                f"affinity ttl_s of {what} must be a number of seconds more than 0 and at most {AFFINITY_MAX_S}, "
                f"got {short_repr(ttl)}: use about the provider's prompt-cache lifetime, e.g. 300",
                VALUE,
            )

    def prices(self, value: Any, path: str, what: str, extra: tuple[str, ...]) -> bool:
        """A price entry (docs/configuration.md#price-versions): USD per million tokens by class."""
        if not isinstance(value, Mapping):
            self.add(path, f"prices of {what} must be a mapping such as {{input: 3, output: 15}}, got {kind_of(value)}")
            return False
        for key, number in value.items():
            if key in extra:
                continue
            if key not in PRICE_KEYS:
                self.add(f"{path}.{key}", f"unknown price {key!r} of {what}: use {', '.join(PRICE_KEYS)}")
            elif not (is_num(number) and number >= 0):
                self.add(
                    f"{path}.{key}",
                    f"price {key} of {what} must be a number of at least 0 (USD per million tokens), "
                    f"got {short_repr(number)}",
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
                    f"effective_from of a price entry of {what} must be a date such as 2026-01-01, got {short_repr(day)}",
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
            self.add(path, f"budget of {what} must be a mapping such as {example}, got {kind_of(value)}")
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
        if "usd" in value and not (is_num(usd) and 0 < usd < 1e12):
            self.add(
                f"{path}.usd",
                f"usd of the budget of {what} must be a positive number of US dollars, got {short_repr(usd)}: "
                "use e.g. 100 or 2.5, or remove the budget",
                VALUE,
            )
        period = value.get("period")
        if "period" in value and period not in BUDGET_PERIODS:
            self.add(
                f"{path}.period",
                f"unknown budget period {short_repr(period)} of {what}: use day, month (UTC calendar periods) or total "
                "(never resets)",
                VALUE,
            )
