"""Token buckets of routing.core.limiter with an injected clock (docs/limits.md)."""

from __future__ import annotations

import pytest

from routing.core.limiter import Limiter, Refused, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def headers(ticket) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in ticket.headers()}


def test_burst_is_the_per_minute_amount_then_refusal_with_the_wait(clock):
    limiter = Limiter(clock)
    for _ in range(5):
        limiter.admit("acme", None, "bot", (5, None), lambda: 0)
    with pytest.raises(Refused) as refused:
        limiter.admit("acme", None, "bot", (5, None), lambda: 0)
    assert (refused.value.scope, refused.value.limit, refused.value.value) == ("agent", "requests", 5)
    assert refused.value.retry_after_s == pytest.approx(12.0)  # one request per 12 s at 5 rpm


def test_refill_is_continuous(clock):
    limiter = Limiter(clock)
    for _ in range(5):
        limiter.admit("acme", None, "bot", (5, None), lambda: 0)
    clock.now += 11.9
    with pytest.raises(Refused):
        limiter.admit("acme", None, "bot", (5, None), lambda: 0)
    clock.now += 0.2  # 12.1 s: one request refilled
    ticket = limiter.admit("acme", None, "bot", (5, None), lambda: 0)
    assert headers(ticket)["x-ratelimit-remaining-requests"] == "0"
    clock.now += 600  # never above the burst
    ticket = limiter.admit("acme", None, "bot", (5, None), lambda: 0)
    assert headers(ticket)["x-ratelimit-remaining-requests"] == "4"


def test_a_refusal_takes_nothing_from_any_bucket(clock):
    limiter = Limiter(clock)
    limiter.admit("acme", (100, 1000), "bot", (10, None), lambda: 900)
    with pytest.raises(Refused) as refused:
        limiter.admit("acme", (100, 1000), "bot", (10, None), lambda: 200)
    assert (refused.value.scope, refused.value.limit) == ("org", "tokens")
    ticket = limiter.admit("acme", (100, 1000), "bot", (10, None), lambda: 100)
    got = headers(ticket)
    assert got["x-ratelimit-remaining-requests"] == "8"  # agent's 10 - 2 admitted, the refusal took none
    assert got["x-ratelimit-remaining-tokens"] == "0"


def test_a_request_larger_than_the_limit_is_refused_even_when_full(clock):
    limiter = Limiter(clock)
    with pytest.raises(Refused) as refused:
        limiter.admit("acme", (None, 1000), "bot", None, lambda: 1001)
    assert refused.value.amount == 1001
    assert refused.value.retry_after_s == 0.0  # nothing to wait for: the request itself must shrink


def test_settle_corrects_the_reservation_with_real_usage(clock):
    limiter = Limiter(clock)
    ticket = limiter.admit("acme", (None, 1000), "bot", None, lambda: 600)
    assert headers(ticket)["x-ratelimit-remaining-tokens"] == "400"
    ticket.settle(50)  # refund 550
    later = limiter.admit("acme", (None, 1000), "bot", None, lambda: 0)
    assert headers(later)["x-ratelimit-remaining-tokens"] == "950"
    later.settle(300)  # charge 300 more than reserved
    assert headers(later)["x-ratelimit-remaining-tokens"] == "650"
    later.settle(0)  # settles once only
    assert headers(later)["x-ratelimit-remaining-tokens"] == "650"


def test_refund_on_error_or_cancel_gives_the_whole_reservation_back(clock):
    limiter = Limiter(clock)
    ticket = limiter.admit("acme", (10, 1000), "bot", None, lambda: 700)
    ticket.refund()
    again = limiter.admit("acme", (10, 1000), "bot", None, lambda: 700)
    got = headers(again)
    assert got["x-ratelimit-remaining-tokens"] == "300"
    assert got["x-ratelimit-remaining-requests"] == "8"  # requests are never refunded


def test_unknown_usage_keeps_the_reservation(clock):
    limiter = Limiter(clock)
    ticket = limiter.admit("acme", (None, 1000), "bot", None, lambda: 700)
    ticket.settle(None)
    assert headers(limiter.admit("acme", (None, 1000), "bot", None, lambda: 0))["x-ratelimit-remaining-tokens"] == "300"


def test_buckets_are_per_agent_and_per_org_by_name(clock):
    limiter = Limiter(clock)
    limiter.admit("acme", None, "a", (1, None), lambda: 0)
    limiter.admit("acme", None, "b", (1, None), lambda: 0)  # another agent: its own bucket
    limiter.admit("other", None, "a", (1, None), lambda: 0)  # same agent name in another org
    with pytest.raises(Refused):
        limiter.admit("acme", None, "a", (1, None), lambda: 0)


def test_a_changed_limit_applies_from_the_next_request(clock):
    limiter = Limiter(clock)
    for _ in range(3):
        limiter.admit("acme", (10, None), "bot", None, lambda: 0)
    ticket = limiter.admit("acme", (5, None), "bot", None, lambda: 0)  # lowered: level kept, capped
    assert headers(ticket)["x-ratelimit-limit-requests"] == "5"
    assert headers(ticket)["x-ratelimit-remaining-requests"] == "4"
    ticket = limiter.admit("acme", (60, None), "bot", None, lambda: 0)  # raised: refills toward the new cap
    assert headers(ticket)["x-ratelimit-remaining-requests"] == "3"


def test_the_token_estimate_is_not_computed_without_a_tpm_limit(clock):
    def boom() -> int:
        raise AssertionError("estimated without a tpm limit")

    Limiter(clock).admit("acme", (10, None), "bot", (5, None), boom)


def test_headers_report_the_tightest_bucket(clock):
    limiter = Limiter(clock)
    ticket = limiter.admit("acme", (100, None), "bot", (3, None), lambda: 0)
    got = headers(ticket)
    assert (got["x-ratelimit-limit-requests"], got["x-ratelimit-remaining-requests"]) == ("3", "2")
    assert got["x-ratelimit-reset-requests"] == "20s"  # one request at 3 rpm


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.02, "20ms"),
        (0.0001, "1ms"),
        (1, "1s"),
        (1.5, "1.5s"),
        (17.28, "17.28s"),
        (360, "6m0s"),
        (61.5, "1m1.5s"),
    ],
)
def test_reset_format_is_openais(seconds, text):
    assert format_duration(seconds) == text


def test_the_headers_name_the_tightest_bucket_with_its_limit_what_is_left_and_when_it_is_full(clock):
    """Found by mutation testing (LimitTicket.headers, Bucket.reset_s): the exact x-ratelimit-* values."""
    limiter = Limiter(clock)
    for _ in range(3):  # the agent: 60 rpm, 3 used; the org: 10 rpm, 3 used (the tighter one left)
        ticket = limiter.admit("acme", (10, 1000), "bot", (60, None), lambda: 100)
    assert headers(ticket) == {
        "x-ratelimit-limit-requests": "10",  # the org's bucket: 7 left against the agent's 57
        "x-ratelimit-remaining-requests": "7",
        "x-ratelimit-reset-requests": "18s",  # 3 requests at 10 a minute
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "700",
        "x-ratelimit-reset-tokens": "18s",  # 300 tokens at 1000 a minute
    }
    clock.now += 17.5
    got = headers(limiter.admit("acme", (10, 1000), "bot", (60, None), lambda: 0))
    assert got["x-ratelimit-remaining-requests"] == "8"  # 9.92 refilled, one taken: rounded down
    assert got["x-ratelimit-reset-requests"] == "6.5s" and got["x-ratelimit-reset-tokens"] == "500ms"
