"""BreakerKey: one type for "which breaker", built by the chain and read (never sliced) elsewhere."""

from __future__ import annotations

import copy
import pickle

import pytest

from routing.core.breaker import BreakerKey, BreakerRegistry, State
from tests.core.breakers import configured


def test_shared_and_byo_keys_carry_their_parts_and_labels() -> None:
    shared = BreakerKey("prov", "chat-a")
    byo = BreakerKey("prov", "chat-a", "acme")
    assert (shared.provider, shared.model, shared.org) == ("prov", "chat-a", None)
    assert (byo.provider, byo.model, byo.org) == ("prov", "chat-a", "acme")
    assert (shared.label, byo.label) == ("chat-a", "chat-a@acme")
    assert (shared.link, byo.link) == ("prov/chat-a", "prov/chat-a@acme")
    assert str(byo) == "prov/chat-a@acme"
    assert shared != byo and hash(shared) != hash(byo)


def test_wire_form_is_the_json_list_the_dashboard_always_sent() -> None:
    assert BreakerKey("prov", "m").wire() == ["prov", "m"]
    assert BreakerKey("prov", "m", "acme").wire() == ["prov", "m", "org:acme"]
    for key in (BreakerKey("prov", "m"), BreakerKey("prov", "m", "acme")):
        parsed = BreakerKey.from_wire(key.wire())
        assert parsed == key and type(parsed) is BreakerKey and parsed.label == key.label
    assert BreakerKey.from_wire("prov/m") == BreakerKey("prov", "m")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, "key must be [provider, model]"),
        (["prov"], "key must be [provider, model]"),
        (["prov", ""], "key must be [provider, model]"),
        (["prov", "m", "org:a", "x"], "key must be [provider, model]"),
        (["prov", 3], "key must be [provider, model]"),
        ("no-slash", "key must be [provider, model]"),
        (["prov", "m", "acme"], "organisation"),
        (["prov", "m", "org:"], "organisation"),
    ],
)
def test_from_wire_refuses_what_is_not_a_key(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[")):
        BreakerKey.from_wire(value)


def test_a_key_is_interchangeable_with_its_plain_tuple_in_the_registry() -> None:
    """Operators, tests and other processes may name a breaker by the plain tuple: same breaker."""
    reg = configured(BreakerRegistry(), 1, 30.0)
    reg.record_failure(BreakerKey("prov", "m", "acme"), False)
    assert reg.state(("prov", "m", "org:acme")) is State.OPEN
    assert reg.state(BreakerKey("prov", "m")) is State.CLOSED
    reg.reset(("prov", "m", "org:acme"))
    assert reg.state(BreakerKey("prov", "m", "acme")) is State.CLOSED
    assert BreakerKey.of(("prov", "m", "org:acme")).label == "m@acme"


def test_copies_and_pickles_stay_keys() -> None:
    key = BreakerKey("prov", "m", "acme")
    for clone in (copy.deepcopy(key), pickle.loads(pickle.dumps(key))):
        assert clone == key and type(clone) is BreakerKey and clone.org == "acme"
