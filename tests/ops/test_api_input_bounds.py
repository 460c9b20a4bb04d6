"""Hostile input on the management API (docs/security.md#identifiers): a clean 400 and nothing changed."""

from __future__ import annotations

import time

import pytest

from policies.models import ApiKey
from tests.ops.test_management_api import client_for, new_key, setup  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_800_kb_key_pattern_is_refused_fast(setup):  # noqa: F811
    started = time.perf_counter()
    refused = new_key(client_for(), models=["[" + "a-" * 400_000 + "]"])
    elapsed = time.perf_counter() - started
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert error["code"] == "invalid_request" and "at most 256" in error["message"]
    assert elapsed < 2.0 and ApiKey.objects.count() == 0


def test_a_key_pattern_with_a_newline_is_refused(setup):  # noqa: F811
    refused = new_key(client_for(), models=["gpt-*\nX"])
    assert refused.status_code == 400 and "U+000A" in refused.json()["error"]["message"]


@pytest.mark.parametrize("depth", [40, 1000])
def test_deeply_nested_metadata_is_a_400_naming_the_field(setup, depth):  # noqa: F811
    deep = b"[" * depth + b"]" * depth
    answer = client_for().post(
        "/api/v1/keys",
        b'{"org": "acme", "agent": "bot", "metadata": {"x": ' + deep + b"}}",
        content_type="application/json",
    )
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == "metadata" and "32 levels" in error["message"]
    assert ApiKey.objects.count() == 0


def test_a_breaker_reason_past_500_characters_or_with_escapes_is_refused(setup, process):  # noqa: F811
    from routing.config import live

    live.rebuild_from_db("test")
    api = client_for(name="oncall")
    for reason, fragment in (("x" * 900_000, "at most 500"), ("\x1b]0;owned\x07", "control character U+001B")):
        refused = api.post(
            "/api/v1/breakers/force-open",
            {"key": ["mock", "chat-a"], "reason": reason},
            content_type="application/json",
        )
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "reason"
        assert fragment in refused.json()["error"]["message"]
    assert api.get("/api/v1/breakers").json()["data"][0]["state"] == "closed"


def test_whole_numbers_written_with_a_zero_fraction_are_integers_and_fractions_are_still_refused(setup):  # noqa: F811
    api = client_for()
    created = new_key(api, limits={"rpm": 10.0, "tpm": 1000.0}, metadata={"ratio": 1.0})
    assert created.status_code == 201, created.content
    row = ApiKey.objects.get()
    assert row.limits == {"rpm": 10, "tpm": 1000} and type(row.limits["rpm"]) is int
    assert row.metadata == {"ratio": 1.0}  # metadata is the client's own data: kept as sent
    refused = new_key(api, limits={"rpm": 10.5})
    assert refused.status_code == 400 and "got 10.5" in refused.json()["error"]["message"]
