"""Which upstream errors mean "out of quota or credit", per dialect (docs/errors.md#upstream).

A 429 can mean "slow down for a second" or "out of credit until the month ends"; a 400 can be a
credit-balance refusal. Retrying the second kind burns the retry budget and churns the breaker
for nothing, so the table below, from each provider's documented error bodies, tells them apart;
every other answer keeps the classification of routing.core.failures.failure_from_response (rate
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

from routing.core.failures import FailureKind, UpstreamFailure

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
    # ServiceQuotaExceededException (HTTP 400), named in x-amzn-ErrorType; ThrottlingException stays a rate limit
    "bedrock": [(frozenset({400, 429}), frozenset({"servicequotaexceededexception"}), ())],
}

# The provider refused the gateway's credentials (any dialect): 401, or a 403 naming the key or a permission.
AUTH_STATUSES = frozenset({401, 403})
AUTH_CODES = frozenset(
    {
        "invalid_api_key",  # OpenAI, Azure OpenAI
        "authentication_error",  # Anthropic 401
        "permission_error",  # Anthropic 403
        "unauthenticated",  # Gemini / Vertex 401
        "permission_denied",  # Gemini / Vertex 403 (API_KEY_INVALID, SERVICE_DISABLED)
        "accessdeniedexception",  # Bedrock 403
        "unrecognizedclientexception",  # Bedrock 403: unknown access key
        "api_key_invalid",  # Gemini 400 INVALID_ARGUMENT with ErrorInfo reason API_KEY_INVALID
        "401",  # Azure: {"error": {"code": "401", "message": "Access denied due to invalid subscription key ..."}}
    }
)

_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _codes(err: Mapping[str, Any], raw: Mapping[str, Any]) -> set[str]:
    codes = {str(err.get(k)).lower() for k in ("code", "type", "status", "__type") if isinstance(err.get(k), str)}
    if isinstance(raw.get("__type"), str):  # Bedrock's exception name
        codes.add(raw["__type"].rsplit("#", 1)[-1].lower())
    for detail in err.get("details") or ():
        if isinstance(detail, dict) and isinstance(detail.get("reason"), str):  # google.rpc.ErrorInfo
            codes.add(detail["reason"].lower())
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
    rules = QUOTA_RULES.get(dialect) or []
    auth = status in AUTH_STATUSES or (status == 400 and b"API_KEY_INVALID" in body)
    if not (auth or any(status in statuses for statuses, _, _ in rules)):
        return failure
    if status == 401:
        return _authentication(failure, status, body)
    try:
        raw = orjson.loads(failure.body or body)  # a dialect may have named the error (bedrock's exception type)
    except orjson.JSONDecodeError:
        return failure
    if not isinstance(raw, dict):
        return failure
    err = raw.get("error") if isinstance(raw.get("error"), dict) else raw
    codes = _codes(err, raw)
    if auth and codes & AUTH_CODES:
        return _authentication(failure, status, body)
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


def _authentication(failure: UpstreamFailure, status: int, body: bytes) -> UpstreamFailure:
    return UpstreamFailure(
        FailureKind.AUTHENTICATION,
        f"the provider refused the gateway's credentials (HTTP {status}): an operator must fix the provider's "
        "API key or its permissions",
        status,
        None,
        body,
    )
