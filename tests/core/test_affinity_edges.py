"""Prompt-cache affinity at its edges (docs/deployments.md#affinity): which request fields name a conversation,
how a long prefix is sampled (the 320-character bound, the spread over the middle, the bounded size), and the
pins' expiry, re-pin, merge and outbox bounds on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from routing.core import affinity
from routing.core.affinity import Pins, key_of, stable_prefix

USER = {"role": "user", "content": "Plan a trip."}


def _chat(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "chat", "messages": list(messages), **extra}


def _summed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the samples the key sums, as they are summed."""
    summed: list[int] = []
    real = affinity.zlib.crc32
    monkeypatch.setattr(affinity.zlib, "crc32", lambda data: summed.append(len(data)) or real(data))
    return summed


# which field names the conversation ------------------------------------------------------------------------


def test_only_the_session_header_names_the_conversation_and_an_empty_one_is_none() -> None:
    headers = [(b"accept", b"*/*"), (b"x-switchboard-session", b"conv-1")]
    assert key_of(headers, {}) == "s:conv-1"
    empty = [(b"accept", b"*/*"), (b"x-switchboard-session", b"")]
    assert key_of(empty, {"prompt_cache_key": "pck"}) == "p:pck"


def test_empty_or_non_text_client_keys_fall_through_to_the_prefix() -> None:
    body = _chat(USER)
    prefix = key_of([], body)
    assert prefix is not None and prefix.startswith("h:")
    assert key_of([], {**body, "prompt_cache_key": ""}) == prefix
    assert key_of([], {**body, "prompt_cache_key": 42}) == prefix
    assert key_of([], body, {"metadata": "not an object"}) == prefix
    assert key_of([], body, {"metadata": {"user_id": 42}}) == prefix
    assert key_of([], body, {"metadata": {"user_id": ""}}) == prefix


def test_a_client_key_up_to_200_characters_is_kept_and_a_longer_one_hashed_apart() -> None:
    assert key_of([], {"prompt_cache_key": "k" * 200}) == "p:" + "k" * 200
    one, two = (key_of([(b"x-switchboard-session", c * 5000)], {}) for c in (b"a", b"b"))
    assert one != two  # the hash is of the key, not a constant
    assert one is not None and len(one) == len("s:") + 32  # 16 bytes, in hex


def test_the_same_prefix_with_its_fields_in_another_order_has_the_same_key() -> None:
    a = _chat({"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi", "name": "ann"})
    b = _chat({"content": "Be terse.", "role": "system"}, {"name": "ann", "content": "hi", "role": "user"})
    assert key_of([], a) == key_of([], b)


# the stable prefix -----------------------------------------------------------------------------------------


def test_the_stable_prefix_holds_the_tools_and_without_a_user_message_only_the_first() -> None:
    tools = [{"type": "function", "function": {"name": "search"}}]
    system, answer = {"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}
    assert stable_prefix(_chat(system, USER, tools=tools)) == [tools, [system, USER]]
    assert stable_prefix(_chat(system, answer)) == [None, [system]]
    assert stable_prefix({"instructions": "i", "input": [USER], "tools": tools}) == ["i", tools, [USER]]


def test_without_a_user_message_only_the_first_message_keys() -> None:
    system = {"role": "system", "content": "s"}
    one = key_of([], _chat(system, {"role": "assistant", "content": "a"}))
    assert one == key_of([], _chat(system, {"role": "assistant", "content": "b"}))


def test_a_responses_body_is_keyed_by_its_instructions_tools_and_input() -> None:
    base = {"instructions": "Be terse.", "input": [USER], "tools": [{"type": "web_search"}]}
    key = key_of([], base)
    assert key_of([], {**base, "instructions": "Be verbose."}) != key
    assert key_of([], {**base, "tools": [{"type": "file_search"}]}) != key
    assert key_of([], {**base, "input": [USER, {"role": "assistant", "content": "a"}, USER]}) == key  # a later turn
    assert key_of([], {"instructions": "i", "input": "hello"}) != key_of([], {"instructions": "i", "input": "bye"})


def test_input_items_without_content_and_plain_items_key_as_they_are() -> None:
    call = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    with_x = key_of([], {"input": [call, USER]})
    assert with_x != key_of([], {"input": [{**call, "output": "y"}, USER]})
    assert key_of([], {"input": ["hello"]}) != key_of([], {"input": ["bye"]})
    assert key_of([], {"input": ["a", USER]}) != key_of([], {"input": ["a", {"role": "user", "content": "other"}]})


# the tools -------------------------------------------------------------------------------------------------


def _fn(name: str, description: str = "") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description}}


def test_up_to_two_tools_key_whole_and_more_by_their_count_and_first_and_last_names() -> None:
    def key(tools: list[Any]) -> str | None:
        return key_of([], _chat(USER, tools=tools))

    assert key([_fn("a", "x"), _fn("b")]) != key([_fn("a", "y"), _fn("b")])  # two: schemas count
    three = [_fn("a"), _fn("b", "x"), _fn("c")]
    assert key(three) == key([_fn("a"), _fn("b", "y"), _fn("c")])  # more: a schema in between does not
    many = [_fn("a"), _fn("b"), _fn("c"), _fn("d")]
    assert key(many) != key([_fn("z"), *many[1:]])  # the first name
    assert key(many) != key([*many[:3], _fn("z")])  # the last name
    responses = [{"type": "function", "name": "a"}, {"type": "web_search"}, {"type": "function", "name": "c"}]
    assert key(responses) != key([{"type": "function", "name": "z"}, *responses[1:]])
    hosted = [{"type": "web_search"}, {"type": "x"}, {"type": "file_search"}]
    assert key(hosted) != key([{"type": "code_interpreter"}, *hosted[1:]])
    assert key(["a", "b", "c"]) != key(["z", "b", "c"])  # a tool that is not an object is itself


# the sample of long strings --------------------------------------------------------------------------------

SHORT = 2 * affinity._END + affinity._SPREAD  # 320: kept whole


def _variants(length: int, at: int, run: int = 1) -> tuple[str, str]:
    base = "a" * length
    return base, base[:at] + "b" * run + base[at + run :]


def _long_string_bodies() -> dict[str, Any]:
    """Where a long string is sampled: a message's content, a text part, instructions, a string input."""
    return {
        "content": lambda s: _chat({"role": "system", "content": s}, USER),
        "part": lambda s: _chat({"role": "user", "content": [{"type": "text", "text": s}]}),
        "instructions": lambda s: {"instructions": s, "input": [USER]},
        "input": lambda s: {"instructions": "i", "input": s},
    }


@pytest.mark.parametrize("where", list(_long_string_bodies()))
def test_a_string_of_320_characters_is_keyed_whole(where: str) -> None:
    body = _long_string_bodies()[where]
    same, other = _variants(SHORT, affinity._END + 1)
    assert key_of([], body(same)) != key_of([], body(other))


@pytest.mark.parametrize("where", list(_long_string_bodies()))
@pytest.mark.parametrize("length", [321, 350, 383, 384, 500])
def test_a_string_just_past_320_characters_is_sampled(where: str, length: int) -> None:
    body = _long_string_bodies()[where]
    one, two = _variants(length, 0)
    assert key_of([], body(one)) != key_of([], body(two))
    one, two = _variants(length, length - 1)
    assert key_of([], body(one)) != key_of([], body(two))


@pytest.mark.parametrize("where", list(_long_string_bodies()))
def test_a_change_over_a_64th_of_a_long_strings_middle_always_shows(where: str) -> None:
    body = _long_string_bodies()[where]
    length = 2 * affinity._END + 640  # a middle of 640 characters
    run = 640 // affinity._SPREAD + 1
    base = key_of([], body("a" * length))
    for at in range(affinity._END, length - affinity._END - run + 1):
        assert key_of([], body(_variants(length, at, run)[1])) != base, at


@pytest.mark.parametrize("where", list(_long_string_bodies()))
def test_the_sample_of_a_huge_string_stays_small(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    body = _long_string_bodies()[where]
    summed = _summed(monkeypatch)
    key_of([], body("x" * 200_000))
    assert summed and summed[0] < 2_000


def test_media_parts_are_sampled_too_and_tell_images_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    def image(fill: str) -> dict[str, Any]:
        return _chat({"role": "user", "content": [{"type": "input_image", "image_url": "data:," + fill * 300_000}]})

    def nested(fill: str) -> dict[str, Any]:
        part = {"type": "image_url", "image_url": {"url": "data:," + fill * 300_000}}
        return _chat({"role": "user", "content": [part]})

    summed = _summed(monkeypatch)
    assert key_of([], image("A")) != key_of([], image("B"))
    assert key_of([], nested("A")) != key_of([], nested("B"))
    assert summed and max(summed) < 2_000


def test_a_long_text_part_keys_by_its_text_alone_and_a_short_one_as_sent() -> None:
    def text(value: str, **extra: Any) -> dict[str, Any]:
        return _chat({"role": "user", "content": [{"type": "text", "text": value, **extra}]})

    long = "x" * 5_000
    assert key_of([], text(long)) == key_of([], text(long, cache_control={"type": "ephemeral"}))
    assert key_of([], text("x" * 4_000)) != key_of([], text(long))
    for short in ("hi", "x" * SHORT):
        assert key_of([], text(short)) != key_of([], text(short, cache_control={"type": "ephemeral"}))


def test_content_parts_that_are_not_objects_key_as_they_are() -> None:
    one = key_of([], _chat({"role": "user", "content": ["plain", None]}))
    assert one is not None and one != key_of([], _chat({"role": "user", "content": ["other", None]}))


# the pins --------------------------------------------------------------------------------------------------


def test_a_pin_is_gone_at_its_expiry_and_its_renewal_is_what_counts() -> None:
    pins = Pins()
    pins.put("chat", "k", "east", 100.0, 0.0)
    assert pins.get("chat", "k", 100.0) is None  # expired at exactly its TTL
    pins.put("chat", "k", "east", 100.0, 0.0)
    assert pins.get("chat", "k", 10.0) == "east"  # renewed to 110; its shared copy still ends at 100
    assert pins.get("chat", "k", 105.0) == "east"


def test_putting_the_same_deployment_again_renews_the_pin() -> None:
    pins = Pins()
    pins.put("chat", "k", "east", 10.0, 0.0)
    pins.put("chat", "k", "east", 10.0, 8.0)
    assert pins.get("chat", "k", 15.0) == "east"


def test_a_move_of_a_pin_renewed_by_a_put_is_a_repin_and_one_at_its_expiry_is_not() -> None:
    pins = Pins()
    moved: list[str] = []
    pins.on_repin = moved.append
    pins.put("chat", "k", "east", 10.0, 0.0)
    pins.put("chat", "k", "east", 10.0, 8.0)  # alive until 18
    pins.put("chat", "k", "west", 10.0, 12.0)
    assert moved == ["chat"]
    pins.put("chat", "j", "east", 10.0, 0.0)
    pins.put("chat", "j", "west", 10.0, 10.0)  # the old pin expired at 10
    assert moved == ["chat"]


def test_a_pin_is_shared_again_only_once_less_than_half_of_its_shared_copy_is_left() -> None:
    pins = Pins()
    pins.put("chat", "k", "east", 100.0, 0.0)
    pins.take_outbox()
    pins.get("chat", "k", 50.0)  # exactly half left: not yet
    assert pins.take_outbox() == {}
    pins.get("chat", "k", 50.5)
    assert pins.take_outbox() == {("chat", "k"): ("east", 150.5, 100.0)}


def test_the_outbox_is_bounded_and_still_renews_what_it_holds() -> None:
    pins = Pins()
    full = affinity._OUTBOX_MAX
    for i in range(full + 5):
        pins.put("chat", f"k{i}", "east", 100.0, 0.0)
    assert len(pins.outbox) == full and ("chat", f"k{full}") not in pins.outbox
    pins.get("chat", "k0", 60.0)  # less than half of its shared copy left: shared again, though the outbox is full
    assert pins.outbox[("chat", "k0")] == ("east", 160.0, 100.0)


def test_a_merged_pin_for_the_same_deployment_keeps_the_later_expiry() -> None:
    pins = Pins()
    pins.put("chat", "k", "east", 100.0, 0.0)
    pins.merge("chat", "k", "east", 50.0, 100.0)  # an older shared copy
    assert pins.get("chat", "k", 60.0) == "east"
    pins = Pins()
    pins.put("chat", "k", "east", 100.0, 0.0)
    pins.merge("chat", "k", "east", 200.0, 100.0)  # another process used it later
    assert pins.get("chat", "k", 150.0) == "east"
    pins = Pins()
    pins.put("chat", "k", "east", 100.0, 0.0)
    pins.get("chat", "k", 40.0)  # renewed to 140, its shared copy still ends at 100
    pins.merge("chat", "k", "east", 120.0, 100.0)
    assert pins.get("chat", "k", 130.0) == "east"


def test_a_merged_pin_for_another_deployment_replaces_and_merges_are_bounded_oldest_first() -> None:
    pins = Pins(max_size=2)
    pins.put("chat", "a", "east", 100.0, 0.0)
    pins.merge("chat", "b", "west", 100.0, 100.0)
    assert len(pins) == 2 and pins.get("chat", "a", 1.0) == "east"
    pins = Pins(max_size=1)
    pins.put("chat", "a", "east", 100.0, 0.0)
    pins.merge("chat", "b", "west", 100.0, 100.0)
    assert pins.get("chat", "b", 1.0) == "west" and pins.get("chat", "a", 1.0) is None


def test_clear_forgets_the_pins_and_the_outbox_and_pinning_goes_on() -> None:
    pins = Pins()
    pins.put("chat", "k", "east", 100.0, 0.0)
    pins.clear()
    assert len(pins) == 0 and pins.take_outbox() == {}
    pins.put("chat", "k", "west", 100.0, 1.0)
    assert pins.take_outbox() == {("chat", "k"): ("west", 101.0, 100.0)}
