"""One message per value, shared by the document rules and the Django form field validators.

A `*_problem(value)` returns why a value is refused (None when it is fine); the admin's
model forms attach the same rule as a field validator (`FORM_VALIDATORS`,
`add_form_validators`), so a rule gives the same message in a form and in an import.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.core.exceptions import ValidationError

from policies.matcher import pattern_error
from routing.config.addresses import url_problem
from routing.config.identifiers import MAX_PATTERN, identifier_problem, path_problem
from routing.config.schema import DIALECTS, Entity
from routing.config.secrets import env_policy_problem, redact_url, userinfo_problem
from routing.config.validation_rules.errors import is_int, is_num, short_repr

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


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
    if is_int(value) and value > 0:
        return None
    return f"{value!r} is not a positive whole number of milliseconds: use e.g. 5000"


def env_name_problem(value: Any) -> str | None:
    if isinstance(value, str) and ENV_NAME.match(value):
        return env_policy_problem(value)
    return (
        f"{short_repr(value)} is not an environment variable name: give the NAME of the variable holding "
        "the key (letters, digits, _), never the key itself"
    )


def health_path_problem(value: Any) -> str | None:
    """A path the prober appends to base_url: '/', printable ASCII, no spaces (docs/security.md#identifiers)."""
    return path_problem(value)


def dialect_problem(value: Any) -> str | None:
    """The dialect table (routing.core.kinds.DIALECT_KINDS) is the only list of dialects."""
    if isinstance(value, str) and value in DIALECTS:
        return None
    return f"unknown dialect {short_repr(value)}: use one of {' | '.join(DIALECTS)}"


def ratio_problem(value: Any) -> str | None:
    if is_num(value) and 0 <= value <= 1:
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
