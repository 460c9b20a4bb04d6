"""Prompt-cache affinity (docs/deployments.md#affinity): the conversation key, the pins, and the executor's
pick over deployments, on a fake clock."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

from routing.config.snapshot import Resilience
from routing.core import affinity
from routing.core.affinity import Pins, conversation, key_of, stable_prefix
from routing.core.breaker import State
from routing.core.executor import Link
from tests.core.deployments_fakes import multi
from tests.core.fakes import FakeClock
from tests.core.test_executor_deployments import E500, RES, Harness

SYSTEM = {"role": "system", "content": "You are terse."}
FIRST = {"role": "user", "content": "Plan a trip."}
TOOLS = [{"type": "function", "function": {"name": "search"}}]


def _turns(n: int) -> dict[str, Any]:
    """A conversation after `n` turns: its prefix grows, its start stays."""
    messages: list[Any] = [SYSTEM, FIRST]
    for i in range(n):
        messages += [{"role": "assistant", "content": f"answer {i}"}, {"role": "user", "content": f"more {i}"}]
    return {"model": "chat", "messages": messages, "tools": TOOLS}


# the key ---------------------------------------------------------------------------------------------


def test_the_session_header_comes_first() -> None:
    body = {**_turns(0), "prompt_cache_key": "pck"}
    assert key_of([(b"x-switchboard-session", b"conv-1")], body) == "s:conv-1"


def test_prompt_cache_key_then_anthropic_user_id() -> None:
    body = {**_turns(0), "prompt_cache_key": "pck"}
    assert key_of([], body, {"metadata": {"user_id": "u1"}}) == "p:pck"
    assert key_of([], _turns(0), {"metadata": {"user_id": "u1"}}) == "u:u1"


def test_the_prefix_hash_is_the_same_over_the_turns_and_differs_by_system_tools_or_first_message() -> None:
    key = key_of([], _turns(0))
    assert key is not None and key.startswith("h:")
    assert all(key_of([], _turns(n)) == key for n in range(1, 20))
    assert key_of([], {**_turns(3), "tools": []}) != key
    other_system = _turns(3)
    other_system["messages"] = [{"role": "system", "content": "Be verbose."}, *other_system["messages"][1:]]
    assert key_of([], other_system) != key
    other_first = _turns(0)
    other_first["messages"] = [SYSTEM, {"role": "user", "content": "Plan a dinner."}]
    assert key_of([], other_first) != key


def test_responses_bodies_and_bodies_without_a_prompt() -> None:
    items = [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}, {"role": "user", "content": "v"}]
    assert stable_prefix({"instructions": "i", "input": items}) == [
        "i",
        None,
        items[:2],
    ]
    assert key_of([], {"instructions": "i", "input": "hello"}) is not None
    assert key_of([], {"model": "e", "input": "text"}) is None  # embeddings: not pinned


def _agent(
    turns: int, system: str = "Follow the conventions. " * 600, first: str = "Fix the test:\n" + "x = 1\n" * 400
):
    """A coding agent's request: 40 tools with schemas, a 14 kB system prompt, a pasted file, tool results."""
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": "Does a thing. " * 40, "parameters": {}}}
        for i in range(40)
    ]
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    for t in range(turns):
        call = {"id": f"c{t}", "type": "function", "function": {"name": "tool_1", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": "output\n" * 1500},
        ]
    return {"model": "chat", "messages": messages, "tools": tools}


def test_an_agents_large_prefix_is_summed_from_a_bounded_sample(monkeypatch) -> None:
    summed: list[int] = []
    real = affinity.zlib.crc32
    monkeypatch.setattr(affinity.zlib, "crc32", lambda data: summed.append(len(data)) or real(data))
    key = key_of([], _agent(0))
    assert summed and summed[0] < 2_000  # of a ~40 kB prefix (its tools' schemas, the prompt, the file)
    assert all(key_of([], _agent(n)) == key for n in (1, 5, 20))  # the growing conversation keeps its key
    longer = "Follow the conventions. " * 300 + "Working directory: /src/other. " + "Follow the conventions. " * 300
    assert key_of([], _agent(3, system=longer)) != key  # a prompt that differs inside, by its length
    assert key_of([], _agent(3, system="Be brief. " + "Follow the conventions. " * 600)) != key  # at its start
    assert key_of([], _agent(3, first="Fix the build:\n" + "x = 1\n" * 400)) != key  # another first message
    as_parts = _agent(2)
    as_parts["messages"][1] = {
        "role": "user",
        "content": [{"type": "text", "text": as_parts["messages"][1]["content"]}],
    }
    assert key_of([], as_parts) == key_of([], {**as_parts, "messages": [*as_parts["messages"], FIRST]})
    assert key_of([], {**_agent(0), "tools": _agent(0)["tools"][:39]}) != key  # another tool set


def test_the_key_covers_exactly_the_bodies_that_have_a_stable_prefix() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 300_000}}
    bodies = [
        _turns(2),
        {"instructions": "i", "input": "hello"},
        {"instructions": "i", "input": None},
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "u" * 5000}]}]},
        {"model": "e", "input": "text"},
        {"model": "e", "input": ["a", "b"]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}]},
        {"model": "x"},
    ]
    for body in bodies:
        assert (key_of([], body) is None) == (stable_prefix(body) is None), body
    other = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {**image, "image_url": {"url": "data:image/png;base64," + "B" * 300_000}},
                ],
            }
        ]
    }
    assert key_of([], other) != key_of([], bodies[6])  # another image


def test_a_long_client_key_is_hashed() -> None:
    key = key_of([(b"x-switchboard-session", b"x" * 5000)], {})
    assert key is not None and key.startswith("s:") and len(key) < 100


# the pins --------------------------------------------------------------------------------------------


def test_a_pin_slides_with_use_and_expires_after_its_ttl_unused() -> None:
    pins = Pins()
    pins.put("chat", "k", "east", 300.0, 0.0)
    assert pins.get("chat", "k", 299.0) == "east"
    assert pins.get("chat", "k", 598.0) == "east"  # renewed at 299
    assert pins.get("chat", "k", 898.1) is None
    assert len(pins) == 0


def test_pins_are_bounded_least_recently_used_first_out() -> None:
    pins = Pins(max_size=2)
    pins.put("chat", "a", "east", 300.0, 0.0)
    pins.put("chat", "b", "east", 300.0, 1.0)
    pins.get("chat", "a", 2.0)
    pins.put("chat", "c", "west", 300.0, 3.0)
    assert pins.get("chat", "b", 4.0) is None
    assert pins.get("chat", "a", 4.0) == "east" and pins.get("chat", "c", 4.0) == "west"


def test_a_repin_is_counted_only_when_a_live_pin_moves() -> None:
    pins = Pins()
    moved: list[str] = []
    pins.on_repin = moved.append
    pins.put("chat", "k", "east", 10.0, 0.0)
    pins.put("chat", "k", "east", 10.0, 1.0)
    pins.put("chat", "k", "west", 10.0, 2.0)
    pins.put("chat", "k", "east", 10.0, 100.0)  # the old pin had expired: a new pin, not a move
    assert moved == ["chat"]


def test_the_outbox_holds_new_pins_and_pins_whose_shared_copy_is_half_gone() -> None:
    pins = Pins()
    pins.put("chat", "k", "east", 100.0, 0.0)
    assert pins.take_outbox() == {("chat", "k"): ("east", 100.0, 100.0)}
    pins.get("chat", "k", 10.0)
    assert pins.take_outbox() == {}  # the shared copy has 90 s of 100 left
    pins.get("chat", "k", 60.0)
    assert pins.take_outbox() == {("chat", "k"): ("east", 160.0, 100.0)}
    pins.merge("chat", "j", "west", 50.0, 100.0)
    assert pins.take_outbox() == {} and pins.get("chat", "j", 20.0) == "west"


# the executor's pick -----------------------------------------------------------------------------------


def _affine(link: Link, ttl_s: float = 300.0) -> Link:
    return replace(link, model=replace(link.model, affinity_s=ttl_s))


async def _run(h: Harness, lk: Link, key: str | None, res: Resilience = RES) -> Any:
    token = conversation.set(key)  # as the gateway sets it per request
    try:
        return await h.ex.run([lk], h.attempt, res, h.clock() + 600.0)
    finally:
        conversation.reset(token)


async def test_a_conversation_stays_on_one_deployment_and_others_spread() -> None:
    lk = _affine(multi("chat", ("a", "b", "c")))
    h = Harness({"a": ["a"], "b": ["b"], "c": ["c"]}, seed=3)
    served: dict[str, set[str]] = {}
    for _turn in range(20):
        for conv in range(30):
            out = await _run(h, lk, f"conv-{conv}")
            served.setdefault(f"conv-{conv}", set()).add(out.result)
        h.clock.t += 5.0
    assert all(len(s) == 1 for s in served.values())
    spread = Counter(next(iter(s)) for s in served.values())
    assert len(spread) == 3  # the conversations themselves are spread by the strategy


async def test_without_affinity_on_the_model_the_key_changes_nothing() -> None:
    lk = multi("chat", ("a", "b", "c"))
    h = Harness({"a": ["a"], "b": ["b"], "c": ["c"]}, seed=3)
    results = {(await _run(h, lk, "conv")).result for _ in range(60)}
    assert len(results) == 3
    assert len(h.picker.pins) == 0


async def test_a_pinned_deployment_whose_breaker_opens_gets_no_more_requests_and_the_conversation_repins() -> None:
    lk = _affine(multi("chat", ("a", "b", "c")))
    h = Harness({"a": ["a"], "b": ["b"], "c": ["c"]}, seed=5)
    moved: list[str] = []
    h.picker.pins.on_repin = moved.append
    first = (await _run(h, lk, "conv")).result
    pinned = next(t for t in lk.deployments if t.name == first)
    for _ in range(RES.breaker_failure_threshold):
        h.breakers.record_failure(pinned.key, False)
    assert h.breakers.state(pinned.key) is State.OPEN
    h.calls.clear()
    after = {(await _run(h, lk, "conv")).result for _ in range(20)}
    assert first not in h.calls  # 0 requests to the open deployment
    assert len(after) == 1 and first not in after  # re-pinned once, then stays
    assert moved == ["chat"]


async def test_a_full_pinned_deployment_repins_and_a_failure_moves_the_pin() -> None:
    lk = _affine(multi("chat", ("a", "b"), rpm={"a": 1, "b": 1000}))
    h = Harness({"a": ["a"], "b": ["b"]}, seed=1)
    results = [(await _run(h, lk, f"c{i}")).result for i in range(10)]
    assert results.count("a") == 1  # a's one request a minute; the other conversations pinned to b
    lk2 = _affine(multi("chat", ("x", "y")))
    for seed in range(6):  # whichever deployment is picked first
        h2 = Harness({"x": [E500], "y": ["y"]}, seed=seed)
        assert {(await _run(h2, lk2, "conv")).result for _ in range(10)} == {"y"}
        assert h2.calls.count("x") <= 1  # a failed pinned deployment: the pin moved to the one that served


def test_clock_is_the_pickers() -> None:
    clock = FakeClock()
    from routing.core.picking import Picker

    b = Picker(clock=clock)
    lk = _affine(multi("chat", ("a", "b")), ttl_s=10.0)
    closed = lambda key: True  # noqa: E731
    first = b.pick_pinned(lk, lk.deployments, random.Random(1).random, "k", closed)
    clock.t += 9.0
    assert b.pick_pinned(lk, lk.deployments, random.Random(2).random, "k", closed) is first
    clock.t += 11.0  # unused for longer than its ttl: a fresh pick
    picks = {b.pick_pinned(lk, lk.deployments, random.Random(s).random, f"n{s}", closed).name for s in range(20)}
    assert picks == {"a", "b"}
