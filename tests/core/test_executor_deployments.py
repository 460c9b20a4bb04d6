"""The executor over a model with several deployments (docs/deployments.md#retry-and-fallback), simulated time."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from routing.config.snapshot import Resilience
from routing.core.breaker import BreakerRegistry, State
from routing.core.executor import Executor, Link
from routing.core.failures import FailureKind as K
from routing.core.failures import UpstreamFailure
from routing.core.picking import Picker
from routing.core.retry_budget import RetryBudgets
from tests.core.deployments_fakes import multi
from tests.core.fakes import FakeClock
from tests.core.fakes import link as single

RES = Resilience()
E500 = UpstreamFailure(K.UPSTREAM_5XX, "500 from fake", status=500)
E400 = UpstreamFailure(K.UPSTREAM_4XX, "400 from fake", status=400)


class Harness:
    """Answers per provider name (deployments) or model id (single links): a list of steps, the last repeats."""

    def __init__(self, plan: dict[str, list[Any]], seed: int = 1) -> None:
        self.clock = FakeClock()
        self.breakers = BreakerRegistry(clock=self.clock)
        self.breakers.configure(RES)
        self.picker = Picker(clock=self.clock)
        self.ex = Executor(
            self.breakers,
            RetryBudgets(clock=self.clock),
            clock=self.clock,
            sleep=self.clock.sleep,
            rand=random.Random(seed).random,
            picker=self.picker,
        )
        self.plan = plan
        self.calls: list[str] = []

    async def attempt(self, lk: Link, deadline: float) -> Any:
        name = lk.model.provider.name
        key = name if name in self.plan else lk.model.id
        self.calls.append(key)
        steps = self.plan[key]
        step = steps.pop(0) if len(steps) > 1 else steps[0]
        if isinstance(step, BaseException):
            raise step
        return step

    async def run(self, chain: list[Link], res: Resilience = RES, tokens: int = 0):
        return await self.ex.run(chain, self.attempt, res, self.clock() + 600.0, tokens=tokens)


async def test_weights_spread_requests_and_the_serving_deployment_is_the_outcome_link() -> None:
    lk = multi("chat", ("east", "west"), weights=(3, 1))
    h = Harness({"east": ["e"], "west": ["w"]})
    served = Counter()
    for _ in range(2000):
        out = await h.run([lk])
        assert out.error is None
        assert out.result == {"east": "e", "west": "w"}[out.link.model.provider.name]
        served[out.link.model.provider.name] += 1
    assert abs(served["east"] - 1500) < 90 and abs(served["west"] - 500) < 90


async def test_a_retry_moves_to_another_deployment_without_backoff() -> None:
    lk = multi("chat", ("east", "west"))
    h = Harness({"east": [E500], "west": ["ok"]})
    for _ in range(20):
        h.calls.clear()
        out = await h.run([lk])
        assert out.error is None and out.link.model.provider.name == "west"
        assert h.calls in (["west"], ["east", "west"])  # never east twice while west admits
    assert h.clock.sleeps == []


async def test_every_deployment_gets_a_try_before_the_chain_falls_back_even_with_no_retries() -> None:
    lk = multi("chat", ("a", "b", "c"))
    nxt = single("chat-b")
    h = Harness({"a": [E500], "b": [E500], "c": [E500], "chat-b": ["fallback"]})
    out = await h.run([lk, nxt], Resilience(max_retries=0))
    assert out.result == "fallback" and out.fallback_reason == "upstream_5xx"
    assert sorted(h.calls[:3]) == ["a", "b", "c"] and h.calls[3:] == ["chat-b"]
    for name in "abc":  # each deployment's breaker charged once
        assert _failures(h, name, "chat") == 1


async def test_the_last_deployment_standing_spends_the_model_retries() -> None:
    lk = multi("chat", ("a", "b"))
    h = Harness({"a": [E500], "b": [E500]})
    out = await h.run([lk], Resilience(max_retries=2))
    assert out.error is not None and out.error.code == "upstream_error"
    assert len(h.calls) == 3  # 1 + max_retries calls for the model, as a one-provider model
    first, *rest = h.calls
    assert rest == [rest[0]] * 2 and rest[0] != first
    assert len(h.clock.sleeps) == 1  # the one retry on the same deployment backs off


async def test_open_deployments_are_never_picked() -> None:
    lk = multi("chat", ("east", "west"))
    h = Harness({"east": ["e"], "west": ["w"]})
    for _ in range(RES.breaker_failure_threshold):
        h.breakers.record_failure(lk.deployments[0].key, False)
    assert h.breakers.state(lk.deployments[0].key) is State.OPEN
    for _ in range(200):
        out = await h.run([lk])
        assert out.link.model.provider.name == "west"
    assert "east" not in h.calls


async def test_all_deployments_open_falls_back_with_reason_circuit_open() -> None:
    lk = multi("chat", ("east", "west"))
    h = Harness({"east": ["e"], "west": ["w"], "chat-b": ["b"]})
    for t in lk.deployments:
        for _ in range(RES.breaker_failure_threshold):
            h.breakers.record_failure(t.key, False)
    out = await h.run([lk, single("chat-b")])
    assert out.result == "b" and out.fallback_reason == "circuit_open"
    assert h.calls == ["chat-b"]
    out = await h.run([lk])
    assert out.error.code == "circuit_open" and out.error.status == 503
    assert int(out.error.headers["Retry-After"]) == 30
    assert "The circuit breaker for 'chat' is open" in out.error.message  # the model, by name (mutation testing)


async def test_full_deployments_are_skipped_and_capacity_alone_answers_429() -> None:
    lk = multi("chat", ("east", "west"), rpm={"east": 5})
    h = Harness({"east": ["e"], "west": ["w"]})
    served = Counter()
    for _ in range(40):
        served[(await h.run([lk])).link.model.provider.name] += 1
    assert served["east"] == 5 and served["west"] == 35
    capped = multi("solo", ("east2",), rpm={"east2": 2})
    h2 = Harness({"east2": ["e"]})
    assert (await h2.run([capped])).error is None
    assert (await h2.run([capped])).error is None
    out = await h2.run([capped])
    assert out.error.code == "upstream_rate_limited" and out.error.status == 429
    assert int(out.error.headers["Retry-After"]) == 30  # one request frees in 60 / 2 s
    assert "Every deployment of 'solo' is at its configured capacity" in out.error.message  # (mutation testing)
    assert h2.calls == ["east2", "east2"]  # the third was never sent


async def test_capacity_full_model_falls_back_as_rate_limited() -> None:
    lk = multi("chat", ("east",), rpm={"east": 1})
    h = Harness({"east": ["e"], "chat-b": ["b"]})
    await h.run([lk, single("chat-b")])
    out = await h.run([lk, single("chat-b")])
    assert out.result == "b" and out.fallback_reason == "upstream_429"


async def test_a_client_error_is_returned_at_once_without_moving() -> None:
    lk = multi("chat", ("east", "west"))
    h = Harness({"east": [E400], "west": [E400]})
    out = await h.run([lk])
    assert out.error.code == "upstream_client_error" and len(h.calls) == 1


async def test_in_flight_returns_to_zero_and_latency_is_observed() -> None:
    lk = multi("chat", ("east", "west"), routing="latency")
    h = Harness({"east": ["e"], "west": ["w"]})
    for _ in range(10):
        await h.run([lk])
    for t in lk.deployments:
        f = h.picker.peek(t.key)
        assert f is None or f.in_flight == 0


def _failures(h: Harness, provider: str, model_id: str) -> int:
    for v in h.breakers.views():
        if v.key[:2] == (provider, model_id):
            return v.consecutive_failures
    return 0


async def test_a_stream_stays_in_flight_until_it_is_settled() -> None:
    lk = multi("chat", ("east", "west"), routing="least_busy")
    h = Harness({"east": ["e"], "west": ["w"]})
    out = await h.ex.run([lk], h.attempt, RES, h.clock() + 600.0, settle_later=True)
    served = out.link.breaker_key
    assert h.picker.peek(served).in_flight == 1
    out2 = await h.ex.run([lk], h.attempt, RES, h.clock() + 600.0, settle_later=True)
    assert out2.link.breaker_key != served  # least busy: the other one
    out.settlement.success()
    out.settlement.release()  # settles once: the count does not go below zero twice
    assert h.picker.peek(served).in_flight == 0
    out2.settlement.failure()
    assert h.picker.peek(out2.link.breaker_key).in_flight == 0


async def test_the_chain_failure_message_names_each_deployment() -> None:
    lk = multi("chat", ("east", "west"))
    h = Harness({"east": [E500], "west": [E500], "chat-b": [E500]})
    out = await h.run([lk, single("chat-b")], Resilience(max_retries=1))
    assert out.error.code == "upstream_unavailable"
    message = out.error.message
    assert "chat@east: upstream_5xx after 1 attempt" in message or "chat@west: upstream_5xx after 1 attempt" in message
    assert "chat-b: upstream_5xx after 2 attempts" in message


async def test_latency_figures_come_from_single_calls_and_steer_latency_routing() -> None:
    lk = multi("chat", ("east", "west"), routing="latency")
    h = Harness({"east": ["e"], "west": ["w"]}, seed=3)
    cost = {"east": 0.300, "west": 0.020}

    async def timed(link: Link, deadline: float) -> Any:
        h.clock.advance(cost[link.model.provider.name])
        return await h.attempt(link, deadline)

    served = Counter()
    for _ in range(400):
        out = await h.ex.run([lk], timed, RES, h.clock() + 600.0)
        served[out.link.model.provider.name] += 1
    east, west = lk.deployments
    assert abs(h.picker.latency_of(east.key) - 0.300) < 1e-9 and abs(h.picker.latency_of(west.key) - 0.020) < 1e-9
    assert served["west"] > 360 and served["east"] >= 3  # the slow one still gets the exploration share
