"""The one validation of the configuration document (docs/configuration.md, docs/resilience.md#r1).

`validate_document(doc)` checks the plain-dict document of routing.config.document and
returns every problem as a `ConfigError(path, message)`; it never stops at the
first. The admin forms, `import_config`, the system check and the server boot all
call it, so a rule gives the same message everywhere. The small `validate_*`
functions wrap the same messages as Django field validators for model forms.

Each error carries a stable check id (`code`), one per rule family; see
routing.config.checks for the list.

The rules live in routing.config.validation_rules by what they validate: `problems` (one
value, shared with the form field validators), `schema_rules` (the schema's named value
rules), `report` (the error list and shape checks), `values` (limits, budgets, prices,
concurrency, hedge, affinity), `catalogue` (providers, models, deployments, aliases,
chains), `orgs` (orgs, agents, policies, credentials) and `alerts`; this module holds the
entry points and re-exports the names callers use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.config.identifiers import MAX_KEY_PATTERNS
from routing.config.schema import RESILIENCE, TOP_KEYS
from routing.config.validation_rules.alerts import AlertRules
from routing.config.validation_rules.catalogue import endpoint_kinds, fallback_cycles
from routing.config.validation_rules.errors import (
    ALIAS,
    CAPABILITY,
    FALLBACK,
    PATTERN,
    REFERENCE,
    STRUCTURE,
    URL,
    VALUE,
    ConfigError,
    is_int,
)
from routing.config.validation_rules.orgs import OrgRules
from routing.config.validation_rules.problems import (
    FORM_VALIDATORS,
    add_form_validators,
    base_url_problem,
    bedrock_region,
    bedrock_region_problem,
    dialect_problem,
    env_name_problem,
    health_path_problem,
    pattern_problem,
    ratio_problem,
    timeout_problem,
    validate_base_url,
    validate_dialect,
    validate_env_name,
    validate_health_path,
    validate_pattern,
    validate_ratio,
    validate_timeout_ms,
)
from routing.config.validation_rules.schema_rules import CHECKS

__all__ = [
    "ALIAS",
    "CAPABILITY",
    "CHECKS",
    "FALLBACK",
    "FORM_VALIDATORS",
    "PATTERN",
    "REFERENCE",
    "STRUCTURE",
    "URL",
    "VALUE",
    "ConfigError",
    "add_form_validators",
    "base_url_problem",
    "bedrock_region",
    "bedrock_region_problem",
    "dialect_problem",
    "endpoint_kinds",
    "env_name_problem",
    "fallback_cycles",
    "health_path_problem",
    "pattern_problem",
    "ratio_problem",
    "timeout_problem",
    "validate_base_url",
    "validate_dialect",
    "validate_document",
    "validate_env_name",
    "validate_health_path",
    "validate_key_controls",
    "validate_pattern",
    "validate_ratio",
    "validate_timeout_ms",
]


class _Validator(OrgRules, AlertRules):
    """One run over a whole document: its sections in the order they refer to one another."""

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
        if is_int(base) and is_int(top) and base > top:
            self.add(
                "resilience.backoff_base_ms",
                f"backoff_base_ms {base} exceeds backoff_max_ms {top}: lower it or raise the maximum",
                VALUE,
            )


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
