"""Quota and credit refusals told apart from rate limits and overload (docs/errors.md#upstream), per dialect,
on error bodies recorded in the providers' documented shapes (tests/fixtures/errors/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from routing.core.failures import FailureKind as K
from routing.core.parking import Parking
from routing.upstream.dialects import get_dialect
from routing.upstream.dialects.error_classes import refine

FIXTURES = Path(__file__).parent.parent / "fixtures" / "errors"


@pytest.mark.parametrize(
    ("dialect", "status", "fixture", "kind", "reset"),
    [
        ("openai", 429, "openai_insufficient_quota.json", K.QUOTA_EXHAUSTED, None),
        ("openai", 429, "openai_rate_limit.json", K.UPSTREAM_429, None),
        ("azure_openai", 429, "azure_insufficient_quota.json", K.QUOTA_EXHAUSTED, None),
        ("anthropic", 400, "anthropic_credit_balance.json", K.QUOTA_EXHAUSTED, None),
        ("anthropic", 529, "anthropic_overloaded.json", K.UPSTREAM_5XX, None),  # a breaker failure, retried
        ("gemini", 429, "gemini_quota_daily.json", K.QUOTA_EXHAUSTED, 23.0),  # RetryInfo: the reset
        ("gemini", 429, "gemini_quota_per_minute.json", K.UPSTREAM_429, None),
        ("vertex", 429, "gemini_quota_daily.json", K.QUOTA_EXHAUSTED, 23.0),
        ("openai", 401, "openai_invalid_api_key.json", K.AUTHENTICATION, None),
        ("azure_openai", 401, "openai_invalid_api_key.json", K.AUTHENTICATION, None),
        ("anthropic", 401, "anthropic_authentication.json", K.AUTHENTICATION, None),
        ("anthropic", 403, "anthropic_permission.json", K.AUTHENTICATION, None),
        ("gemini", 403, "gemini_permission_denied.json", K.AUTHENTICATION, None),
        ("gemini", 400, "gemini_api_key_invalid.json", K.AUTHENTICATION, None),
    ],
)
def test_each_dialect_classifies_its_providers_documented_error_bodies(dialect, status, fixture, kind, reset) -> None:
    body = (FIXTURES / fixture).read_bytes()
    failure = refine(dialect, get_dialect(dialect).failure(status, {}, body), status, body)
    assert failure.kind is kind, failure
    if kind is K.AUTHENTICATION:  # the operator's fix: not retried, not the breaker's; the provider's refusal relayed
        assert not failure.is_retryable and not failure.is_provider_fault
        assert failure.to_gateway_error().status == status and "operator" in failure.message
    if kind is K.QUOTA_EXHAUSTED:
        assert not failure.is_retryable and not failure.is_provider_fault  # never retried, the breaker untouched
        assert failure.retry_after_s == reset
        assert failure.to_gateway_error().status == 429


def test_a_quota_body_from_another_dialect_is_not_taken_for_this_ones() -> None:
    body = (FIXTURES / "anthropic_credit_balance.json").read_bytes()
    assert refine("openai", get_dialect("openai").failure(400, {}, body), 400, body).kind is K.UPSTREAM_4XX


def test_a_park_runs_its_period_is_extended_never_shortened_and_lifts_itself() -> None:
    now = [100.0]
    parking = Parking(lambda: now[0])
    key = ("mock", "m")
    parking.park(key, 60, "out of quota")
    parking.park(key, 10, "out of quota")  # shorter: the park in force stands
    now[0] += 59
    assert parking.parked_s(key) == pytest.approx(1.0)
    now[0] += 1.5
    assert parking.parked_s(key) is None and not parking.until


def test_a_403_that_names_no_credential_stays_a_plain_client_error() -> None:
    body = b'{"error": {"message": "This model is not available in your region", "code": "unsupported_country"}}'
    assert refine("openai", get_dialect("openai").failure(403, {}, body), 403, body).kind is K.UPSTREAM_4XX


@pytest.mark.parametrize(
    ("status", "exception", "kind"),
    [
        (400, "ServiceQuotaExceededException", K.QUOTA_EXHAUSTED),
        (429, "ThrottlingException", K.UPSTREAM_429),
        (403, "AccessDeniedException", K.AUTHENTICATION),
        (403, "UnrecognizedClientException", K.AUTHENTICATION),
    ],
)
def test_bedrock_errors_are_classified_by_the_exception_it_names_in_its_header(status, exception, kind) -> None:
    headers = {"x-amzn-ErrorType": f"{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    body = b'{"message": "The request was refused."}'
    failure = refine("bedrock", get_dialect("bedrock").failure(status, headers, body), status, body)
    assert failure.kind is kind, failure
