"""The executor's retry / fallback / breaker / deadline behaviour (docs/resilience.md, rules R1–R7), in simulated time."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import replace
from typing import Any

import pytest

from routing.config.snapshot import Resilience
from routing.core.breaker import BreakerRegistry, State
from routing.core.errors import unsupported_capability
from routing.core.executor import Executor, Link
from routing.core.failures import FailureKind as K
from routing.core.failures import UpstreamFailure
from routing.core.retry_budget import RetryBudgets
from tests.core.breakers import configured
from tests.core.fakes import FakeClock, link

RES = Resilience()
ALL = frozenset({"provider_error", "rate_limited", "timeout", "circuit_open"})


def fail(
    kind: K, status: int | None = None, retry_after: float | None = None, body: bytes | None = None
) -> UpstreamFailure:
    return UpstreamFailure(kind, f"{kind.value} from fake", status=status, retry_after_s=retry_after, body=body)


E500 = fail(K.UPSTREAM_5XX, 500)
E503 = fail(K.UPSTREAM_5XX, 503)


class Recorder:
    def __init__(self) -> None:
        self.attempts: list[tuple[str, str]] = []
        self.fallbacks: list[tuple[str, str, str]] = []

    def attempt(self, link: Link, outcome_label: str) -> None:
        self.attempts.append((link.model.id, outcome_label))

    def fallback(self, from_model: str, to_model: str, reason: str) -> None:
        self.fallbacks.append((from_model, to_model, reason))


class Harness:
    def __init__(self, plan: dict[str, list[Any]] | None = None, cost_s: float = 0.0) -> None:
        self.clock = FakeClock()
        self.breakers = configured(
            BreakerRegistry(clock=self.clock), RES.breaker_failure_threshold, RES.breaker_cooldown_s
        )
        self.budgets = RetryBudgets(clock=self.clock)
        self.obs = Recorder()
        self.ex = Executor(
            self.breakers, self.budgets, clock=self.clock, sleep=self.clock.sleep, rand=lambda: 0.5, observer=self.obs
        )
        self.plan = plan or {}
        self.cost_s = cost_s
        self.calls: list[tuple[str, float]] = []

    async def attempt(self, lk: Link, deadline: float) -> Any:
        self.calls.append((lk.model.id, self.clock()))
        self.clock.advance(self.cost_s)
        steps = self.plan[lk.model.id]
        step = steps.pop(0) if len(steps) > 1 else steps[0]
        if isinstance(step, BaseException):
            raise step
        return step

    async def run(self, chain: list[Link], res: Resilience = RES, deadline_in: float = 600.0):
        return await self.ex.run(chain, self.attempt, res, self.clock() + deadline_in)

    def failures(self, lk: Link) -> int:
        for v in self.breakers.views():
            if v.key == lk.breaker_key:
                return v.consecutive_failures
        return 0


async def test_two_5xx_then_success_on_the_same_link() -> None:
    a = link("chat-a")
    h = Harness({"chat-a": [E500, E500, "answer"]})
    out = await h.run([a])
    assert out.result == "answer" and out.error is None
    assert out.attempts == 3 and len(h.calls) == 3
    assert out.link is a and out.fallback_reason is None
    assert h.clock.sleeps == [pytest.approx(0.075), pytest.approx(0.15)]  # equal jitter, rand 0.5, base 100 ms
    assert h.failures(a) == 0 and h.breakers.state(a.breaker_key) is State.CLOSED
    assert h.obs.attempts == [("chat-a", "upstream_5xx"), ("chat-a", "upstream_5xx"), ("chat-a", "ok")]


async def test_4xx_is_returned_at_once_without_retry_fallback_or_breaker_charge() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness(
        {"chat-a": [fail(K.UPSTREAM_4XX, 400, body=b'{"error": {"message": "bad", "code": "x"}}')], "chat-b": ["b"]}
    )
    out = await h.run([a, b])
    assert len(h.calls) == 1 and out.attempts == 1
    assert out.error is not None and (out.error.status, out.error.code) == (400, "upstream_client_error")
    assert h.failures(a) == 0
    assert h.obs.fallbacks == []


async def test_persistent_5xx_fails_over_and_the_fallback_serves() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [E503], "chat-b": ["from b"]})
    out = await h.run([a, b])
    assert out.result == "from b"
    assert out.link is b
    assert out.attempts == 4  # three on a, one on b
    assert out.fallback_reason == "upstream_5xx"
    assert h.failures(a) == 1  # one request, one failure, whatever its retries
    assert h.obs.fallbacks == [("chat-a", "chat-b", "upstream_5xx")]
    assert out.trail == [("chat-a", "upstream_5xx"), ("chat-b", "ok")]


async def test_open_primary_is_skipped_without_upstream_call() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [E503], "chat-b": ["from b"]})
    for _ in range(RES.breaker_failure_threshold):
        assert (await h.run([a, b])).result == "from b"
    assert h.breakers.state(a.breaker_key) is State.OPEN
    h.calls.clear()
    out = await h.run([a, b])
    assert h.calls == [("chat-b", h.clock())]
    assert out.result == "from b" and out.fallback_reason == "circuit_open" and out.attempts == 1


async def test_open_breaker_without_fallback_answers_circuit_open_with_rounded_retry_after() -> None:
    a = link("chat-a")
    h = Harness({"chat-a": [E503]})
    for _ in range(RES.breaker_failure_threshold):
        out = await h.run([a])
        assert out.error.code == "upstream_error"
    h.clock.advance(12.3)
    h.calls.clear()
    out = await h.run([a])
    assert h.calls == []
    assert out.attempts == 0
    assert (out.error.status, out.error.code) == (503, "circuit_open")
    assert out.error.headers == {"Retry-After": "18"}  # 17.7 s left, rounded up


async def test_open_primary_ends_the_request_when_circuit_open_is_not_a_trigger() -> None:
    a = link("chat-a", fallback_on=frozenset({"provider_error"}))
    b = link("chat-b")
    h = Harness({"chat-a": ["a"], "chat-b": ["b"]})
    h.breakers.force_open(a.breaker_key, "maintenance", None)
    out = await h.run([a, b])
    assert h.calls == []
    assert out.error.code == "circuit_open" and out.error.status == 503


async def test_429_ends_with_upstream_rate_limited_when_rate_limited_is_not_a_trigger() -> None:
    a = link("chat-a", fallback_on=frozenset({"provider_error", "timeout", "circuit_open"}))
    b = link("chat-b")
    h = Harness({"chat-a": [fail(K.UPSTREAM_429, 429, retry_after=1.0)], "chat-b": ["b"]})
    out = await h.run([a, b])
    assert [c[0] for c in h.calls] == ["chat-a"] * 3
    assert (out.error.status, out.error.code) == (429, "upstream_rate_limited")
    assert out.error.headers == {"Retry-After": "1"}
    assert h.clock.sleeps == [1.0, 1.0]  # Retry-After beats the shorter backoff


async def test_retry_after_is_honoured_before_the_retry() -> None:
    a = link("chat-a")
    h = Harness({"chat-a": [fail(K.UPSTREAM_429, 429, retry_after=3.0), "ok"]})
    out = await h.run([a])
    assert out.result == "ok"
    assert h.clock.sleeps == [3.0]
    assert h.calls[1][1] - h.calls[0][1] >= 3.0


async def test_invalid_body_is_charged_but_never_retried_or_failed_over() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [fail(K.INVALID_BODY)], "chat-b": ["b"]})
    out = await h.run([a, b])
    assert len(h.calls) == 1
    assert (out.error.status, out.error.code) == (502, "upstream_error")
    assert h.failures(a) == 1
    assert h.clock.sleeps == []


async def test_total_deadline_passed_during_attempts_answers_total_timeout() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [fail(K.FIRST_TOKEN_TIMEOUT)], "chat-b": ["b"]}, cost_s=4.0)
    out = await h.run([a, b], deadline_in=3.0)
    assert (out.error.status, out.error.code) == (504, "total_timeout")
    assert [c[0] for c in h.calls] == ["chat-a"]
    assert h.failures(a) == 0  # a timeout cut by the deadline proves nothing about the link


async def test_backoff_that_would_pass_the_deadline_abandons_the_link_instead_of_sleeping() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [fail(K.UPSTREAM_429, 429, retry_after=30.0)], "chat-b": ["b"]})
    start = h.clock()
    out = await h.run([a, b], deadline_in=10.0)
    assert h.clock.sleeps == []
    assert out.result == "b" and out.fallback_reason == "upstream_429"
    assert h.clock() - start < 10.0


async def test_never_sleeps_past_the_deadline() -> None:
    a = link("chat-a")
    h = Harness({"chat-a": [E500]}, cost_s=0.4)
    deadline = h.clock() + 0.9
    out = await h.ex.run([a], h.attempt, RES, deadline)
    assert h.clock() <= deadline
    assert len(h.calls) == 2  # 0.4 + 0.075 + 0.4, then a 0.15 s backoff would pass 0.9
    assert out.error.code == "upstream_error"


async def test_hung_attempt_is_cut_at_the_total_deadline() -> None:
    a = link("chat-a")
    h = Harness()
    started = asyncio.Event()

    async def hang(lk: Link, deadline: float) -> Any:
        started.set()
        await asyncio.Event().wait()

    out = await asyncio.wait_for(h.ex.run([a], hang, RES, h.clock() + 0.02), 5)
    assert started.is_set()
    assert (out.error.status, out.error.code) == (504, "total_timeout")
    assert h.failures(a) == 0
    assert h.obs.attempts == [("chat-a", "total_timeout")]
    assert out.trail == [("chat-a", "total_timeout")]


async def test_capability_skip_becomes_the_fallback_reason() -> None:
    a, b = link("chat-a", skip_reason="unsupported_capability"), link("chat-b")
    h = Harness({"chat-b": ["b"]})
    out = await h.run([a, b])
    assert [c[0] for c in h.calls] == ["chat-b"]
    assert out.result == "b" and out.fallback_reason == "unsupported_capability"
    assert out.trail[0] == ("chat-a", "unsupported_capability")


async def test_context_length_skip_becomes_the_fallback_reason() -> None:
    a, b = link("chat-a", skip_reason="context_length"), link("chat-b")
    out = await Harness({"chat-b": ["b"]}).run([a, b])
    assert out.fallback_reason == "context_length"


async def test_denied_and_unknown_hops_are_skipped_silently() -> None:
    a, c, d, e = (
        link("chat-a"),
        link("chat-c", skip_reason="model_denied"),
        link("chat-d", skip_reason="model_not_found"),
        link("chat-e"),
    )
    h = Harness({"chat-a": [E500], "chat-e": ["e"]})
    out = await h.run([a, c, d, e])
    assert out.result == "e" and out.fallback_reason == "upstream_5xx"
    assert [x[0] for x in h.calls] == ["chat-a"] * 3 + ["chat-e"]
    assert h.obs.fallbacks == [("chat-a", "chat-e", "upstream_5xx")]


async def test_every_link_skipped_by_preflight_answers_the_skip_error() -> None:
    out = await Harness().run(
        [link("chat-a", skip_reason="unsupported_capability"), link("chat-b", skip_reason="model_denied")]
    )
    assert (out.error.status, out.error.code) == (400, "unsupported_capability")
    assert out.attempts == 0


async def test_cancellation_releases_the_probe_and_charges_nothing() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-b": ["b"]})
    for _ in range(RES.breaker_failure_threshold):
        h.breakers.record_failure(a.breaker_key, False)
    h.clock.advance(RES.breaker_cooldown_s)
    entered = asyncio.Event()
    aborted = []

    async def hang(lk: Link, deadline: float) -> Any:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            aborted.append(lk.model.id)
            raise

    task = asyncio.create_task(h.ex.run([a, b], hang, RES, h.clock() + 600))
    await asyncio.wait_for(entered.wait(), 5)
    assert h.breakers.state(a.breaker_key) is State.HALF_OPEN
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert aborted == ["chat-a"]
    assert h.failures(a) == RES.breaker_failure_threshold  # not charged
    assert h.breakers.admit(a.breaker_key).probe  # slot freed


async def test_cancellation_during_backoff_sleep_charges_nothing() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [E500], "chat-b": ["b"]})

    async def cancelled_sleep(seconds: float) -> None:
        raise asyncio.CancelledError

    h.ex.sleep = cancelled_sleep
    with pytest.raises(asyncio.CancelledError):
        await h.run([a, b])
    assert [c[0] for c in h.calls] == ["chat-a"]
    assert h.failures(a) == 0


async def test_upstream_unavailable_lists_each_link_and_why() -> None:
    a, b, c = link("chat-a"), link("chat-b"), link("chat-c")
    h = Harness({"chat-a": [E500], "chat-c": [fail(K.CONNECT_TIMEOUT)]})
    h.breakers.force_open(b.breaker_key, "maintenance", None)
    out = await h.run([a, b, c])
    assert (out.error.status, out.error.code) == (503, "upstream_unavailable")
    msg = out.error.message
    assert "chat-a: upstream_5xx after 3 attempts" in msg
    assert "chat-b: circuit_open" in msg
    assert "chat-c: connect_timeout after 3 attempts" in msg
    assert out.attempts == 6
    assert out.link is c


async def test_all_links_open_answers_circuit_open_with_the_earliest_retry() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness()
    h.breakers.force_open(a.breaker_key, "m", h.breakers._wall() + 100)
    for _ in range(RES.breaker_failure_threshold):
        h.breakers.record_failure(b.breaker_key, False)
    h.clock.advance(0.5)
    out = await h.run([a, b])
    assert out.error.code == "circuit_open"
    assert out.error.headers == {"Retry-After": "30"}  # 29.5 s on chat-b, rounded up


async def test_single_link_error_is_the_links_own_error() -> None:
    out = await Harness({"chat-a": [fail(K.CONNECT_TIMEOUT)]}).run([link("chat-a")])
    assert (out.error.status, out.error.code) == (504, "connect_timeout")
    out = await Harness({"chat-a": [fail(K.EMPTY_STREAM)]}).run([link("chat-a")])
    assert (out.error.status, out.error.code) == (502, "upstream_stream_error")


async def test_retry_budget_refusal_moves_on_as_if_retries_were_spent() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [E500], "chat-b": ["b"]})
    res = replace(RES, retry_budget_ratio=0.0, retry_budget_min_per_s=0.0)
    out = await h.run([a, b], res=res)
    assert [c[0] for c in h.calls] == ["chat-a", "chat-b"]
    assert out.result == "b" and out.attempts == 2
    assert h.failures(a) == 1


async def test_half_open_probe_answered_with_4xx_closes_the_breaker() -> None:
    a = link("chat-a")
    h = Harness({"chat-a": [fail(K.UPSTREAM_4XX, 400)]})
    for _ in range(RES.breaker_failure_threshold):
        h.breakers.record_failure(a.breaker_key, False)
    h.clock.advance(RES.breaker_cooldown_s)
    out = await h.run([a])
    assert out.error.code == "upstream_client_error"
    assert h.breakers.state(a.breaker_key) is State.CLOSED


async def test_half_open_probe_failure_reopens() -> None:
    a = link("chat-a")
    h = Harness({"chat-a": [E500]})
    for _ in range(RES.breaker_failure_threshold):
        h.breakers.record_failure(a.breaker_key, False)
    h.clock.advance(RES.breaker_cooldown_s)
    await h.run([a])
    assert len(h.calls) == 3
    assert h.breakers.state(a.breaker_key) is State.OPEN


async def test_context_length_failure_fails_over_only_when_opted_in() -> None:
    body = b'{"error": {"message": "too long", "code": "context_length_exceeded"}}'
    cl = fail(K.CONTEXT_LENGTH, 400, body=body)
    opted = link("chat-a", fallback_on=ALL | {"context_length"})
    h = Harness({"chat-a": [cl], "chat-b": ["b"]})
    b = link("chat-b")
    larger = dataclasses.replace(b, model=dataclasses.replace(b.model, context_window=16000))  # than chat-a's 8000
    out = await h.run([opted, larger])
    assert out.result == "b" and out.fallback_reason == "context_length"
    assert h.failures(opted) == 0 and out.attempts == 2

    h = Harness({"chat-a": [cl], "chat-b": ["b"]})
    out = await h.run([link("chat-a"), link("chat-b")])
    assert (out.error.status, out.error.code) == (400, "upstream_client_error")
    assert out.error.error_object["code"] == "context_length_exceeded"
    assert len(h.calls) == 1


async def test_upstream_time_is_measured_apart_from_backoff() -> None:
    h = Harness({"chat-a": [E500, E500, "ok"]}, cost_s=0.25)
    out = await h.run([link("chat-a")])
    assert out.upstream_s == pytest.approx(0.75)


async def test_gateway_error_from_attempt_is_returned_as_is() -> None:
    h = Harness({"chat-a": [unsupported_capability("chat-a", "tools")], "chat-b": ["b"]})
    out = await h.run([link("chat-a"), link("chat-b")])
    assert out.error.code == "unsupported_capability"
    assert out.attempts == 0


async def test_max_retries_zero_means_one_call_per_link() -> None:
    h = Harness({"chat-a": [E500], "chat-b": [E500]})
    out = await h.run([link("chat-a"), link("chat-b")], res=replace(RES, max_retries=0))
    assert [c[0] for c in h.calls] == ["chat-a", "chat-b"]
    assert out.error.code == "upstream_unavailable"
    assert "chat-a: upstream_5xx after 1 attempt;" in out.error.message


# --- found by mutation testing (make mutation): the answer when no link was even tried


@pytest.mark.parametrize(
    ("reason", "status", "code"),
    [
        ("context_length", 400, "context_length_exceeded"),
        ("model_denied", 403, "model_denied"),
        ("model_not_found", 404, "model_not_found"),
        ("unsupported_capability", 400, "unsupported_capability"),
    ],
)
async def test_a_chain_skipped_entirely_answers_the_skip_naming_the_model(reason: str, status: int, code: str) -> None:
    out = await Harness().run([link("chat-only", skip_reason=reason)])
    assert (out.error.status, out.error.code) == (status, code)
    assert "chat-only" in out.error.message
    assert out.attempts == 0 and out.trail == [("chat-only", reason)]


async def test_a_preflight_skip_is_reported_rather_than_a_later_silent_one() -> None:
    out = await Harness().run(
        [link("chat-a", skip_reason="model_denied"), link("chat-b", skip_reason="context_length")]
    )
    assert out.error.code == "context_length_exceeded" and "chat-b" in out.error.message


async def test_after_a_context_length_failure_only_links_with_a_larger_window_are_tried() -> None:
    """docs/errors.md#upstream: a fallback with the same or a smaller context window would refuse the same prompt."""
    body = b'{"error": {"message": "too long", "code": "context_length_exceeded"}}'
    opted = ALL | {"context_length"}
    a = link("chat-a", fallback_on=opted)  # 8000 tokens
    same = link("chat-same", fallback_on=opted)  # 8000 too: skipped without a call
    small = dataclasses.replace(
        link("chat-small"), model=dataclasses.replace(link("chat-small").model, context_window=4000)
    )
    big = dataclasses.replace(
        link("chat-big"), model=dataclasses.replace(link("chat-big").model, context_window=128000)
    )
    h = Harness({"chat-a": [fail(K.CONTEXT_LENGTH, 400, body=body)], "chat-big": ["big"]})
    out = await h.run([a, same, small, big])
    assert out.result == "big"
    assert [model_id for model_id, _ in h.calls] == ["chat-a", "chat-big"]
    assert out.trail == [
        ("chat-a", "context_length"),
        ("chat-same", "context_length"),
        ("chat-small", "context_length"),
        ("chat-big", "ok"),
    ]


# Found by mutation testing (routing.core.executor's _retry_delay): the budget's key, the
# backoff's cap and the deadline's boundary were each replaceable without a test failing.


async def test_each_link_spends_its_own_retry_budget_and_the_answer_says_it_was_spent() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [E500], "chat-b": [E500]})
    one_retry_a_window = replace(RES, retry_budget_ratio=0.0, retry_budget_min_per_s=0.1)  # 0.1/s x 10 s
    out = await h.run([a, b], one_retry_a_window)
    assert [c[0] for c in h.calls] == ["chat-a", "chat-a", "chat-b", "chat-b"]  # b's budget is not a's
    assert out.error.code == "upstream_unavailable"
    assert "chat-a: upstream_5xx after 2 attempts, retry budget spent;" in out.error.message
    assert "chat-b: upstream_5xx after 2 attempts, retry budget spent)" in out.error.message


async def test_the_backoff_grows_then_stays_at_backoff_max_ms() -> None:
    a = link("chat-a")
    h = Harness({"chat-a": [E500, E500, E500, "ok"]})
    out = await h.run([a], replace(RES, max_retries=3, backoff_base_ms=400, backoff_max_ms=500))
    assert out.result == "ok"
    # equal jitter at rand 0.5: 3/4 of min(base x 2^n, max): 0.4 -> 0.3, then the 0.5 cap -> 0.375 twice
    assert h.clock.sleeps == pytest.approx([0.3, 0.375, 0.375], rel=1e-9)


async def test_a_backoff_ending_exactly_at_the_deadline_is_not_slept_the_next_link_answers() -> None:
    a, b = link("chat-a"), link("chat-b")
    h = Harness({"chat-a": [E500, "a"], "chat-b": ["b"]})
    # a 1 s base backs off 0.75 s at rand 0.5 (exact in binary): the retry would start at the deadline itself
    out = await h.run([a, b], replace(RES, backoff_base_ms=1000), deadline_in=0.75)
    assert h.clock.sleeps == []
    assert out.result == "b" and out.fallback_reason == "upstream_5xx"


async def test_a_5xx_whose_retry_finds_the_deadline_passed_charges_the_link_with_its_own_settings() -> None:
    """Found by mutation testing: the deadline branch charged the breaker with any arguments."""
    a = link("chat-a")
    h = Harness({"chat-a": [E500]}, cost_s=4.0)  # the call fails after 4 s, past the 3 s deadline
    configured(h.breakers, 1, 5.0)  # the configuration's breaker settings
    out = await h.run([a], deadline_in=3.0)
    assert (out.error.status, out.error.code) == (504, "total_timeout")
    assert out.trail == [("chat-a", "total_timeout")]
    assert h.failures(a) == 1 and h.breakers.state(a.breaker_key) is State.OPEN  # a 5xx is the provider's fault
    h.plan["chat-a"] = ["ok"]
    h.clock.advance(4.0)
    assert (await h.run([a])).error.code == "circuit_open"
    h.clock.advance(1.0)  # this link's own cooldown has passed: a probe goes through
    assert (await h.run([a])).result == "ok"


async def test_an_attempt_that_times_out_by_itself_is_a_read_timeout_retried_and_its_time_counted() -> None:
    """Found by mutation testing: the attempt's own TimeoutError path (not the total deadline)."""
    a = link("chat-a")
    h = Harness({"chat-a": [E500, TimeoutError(), "ok"]}, cost_s=0.5)
    out = await h.run([a])
    assert out.result == "ok"
    assert h.obs.attempts == [("chat-a", "upstream_5xx"), ("chat-a", "read_timeout"), ("chat-a", "ok")]
    assert out.upstream_s == pytest.approx(1.5)  # the three calls' 0.5 s, the timed-out one included; not the backoff
    assert h.failures(a) == 0  # served in the end: the link's breaker is not charged
