"""Which upstream errors mean "out of quota or credit", per dialect (docs/errors.md#upstream).

A 429 can mean "slow down for a second" or "out of credit until the month ends"; a 400 can be a
credit-balance refusal. Retrying the second kind burns the retry budget and churns the breaker
for nothing, so the table below, from each provider's documented error bodies, tells them apart;
every other answer keeps the classification of routing.core.errors.failure_from_response (rate
limit, overloaded, context length, content filter, ...). It is data: a dialect's row is a list
of rules, each (HTTP statuses, the error object's code/type/status values, phrases of its
message); a rule matches when the status is listed and a code or a phrase matches.

`refine` turns a matching failure into QUOTA_EXHAUSTED, with the reset time the body gives
(Gemini's RetryInfo `retryDelay`) or the Retry-After the failure already carries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from routing.core.errors import FailureKind, UpstreamFailure

Rule = tuple[frozenset[int], frozenset[str], tuple[str, ...]]

_OPENAI: list[Rule] = [(frozenset({429}), frozenset({"insufficient_quota"}), ("exceeded your current quota",))]
QUOTA_RULES: dict[str, list[Rule]] = {
    "openai": _OPENAI,
    "azure_openai": _OPENAI,
    # "Your credit balance is too low to access the Anthropic API" (400 invalid_request_error)
    "anthropic": [(frozenset({400, 402}), frozenset(), ("credit balance is too low",))],
    # RESOURCE_EXHAUSTED with a QuotaFailure detail whose violation is a daily quota (a per-minute one is a
    # rate limit, whatever its message says)
    "gemini": [(frozenset({429}), frozenset({"quota_failure_daily"}), ())],
    "vertex": [(frozenset({429}), frozenset({"quota_failure_daily"}), ())],
}

_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _codes(err: Mapping[str, Any], raw: Mapping[str, Any]) -> set[str]:
    codes = {str(err.get(k)).lower() for k in ("code", "type", "status", "__type") if isinstance(err.get(k), str)}
    if isinstance(raw.get("__type"), str):  # Bedrock's exception name
        codes.add(raw["__type"].rsplit("#", 1)[-1].lower())
    for detail in err.get("details") or ():
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith("QuotaFailure"):
            continue
        for violation in detail.get("violations") or ():
            quota = str(violation.get("quotaId", "")) if isinstance(violation, dict) else ""
            if "PerDay" in quota:
                codes.add("quota_failure_daily")
    return codes


def _reset_s(err: Mapping[str, Any]) -> float | None:
    """Gemini's RetryInfo `retryDelay` ("23s"), when the body gives the reset time."""
    for detail in err.get("details") or ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            match = _DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def refine(dialect: str, failure: UpstreamFailure, status: int, body: bytes) -> UpstreamFailure:
    """`failure` as QUOTA_EXHAUSTED when the dialect's table says the body is a quota or credit refusal."""
    rules = QUOTA_RULES.get(dialect)
    if not rules or not body or not any(status in statuses for statuses, _, _ in rules):
        return failure
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError:
        return failure
    if not isinstance(raw, dict):
        return failure
    err = raw.get("error") if isinstance(raw.get("error"), dict) else raw
    codes = _codes(err, raw)
    text = str(err.get("message") or raw.get("message") or "").lower()
    for statuses, names, phrases in rules:
        if status in statuses and (codes & names or any(p in text for p in phrases)):
            reset = _reset_s(err)
            return UpstreamFailure(
                FailureKind.QUOTA_EXHAUSTED,
                f"upstream answered HTTP {status}: out of quota or credit",
                status,
                reset if reset is not None else failure.retry_after_s,
                body,
            )
    return failure
