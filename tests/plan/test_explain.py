"""explain_route: why a request would be routed, denied or skipped."""

from __future__ import annotations

import io
import time

import orjson
import pytest
from django.core.management import CommandError, call_command

from routing.plan.explain import explain, render
from routing.runtime.process import current
from tests.factories import document, model, snapshot

MODELS = [
    model("chat-a", caps=("chat", "streaming"), context_window=1000, fallbacks=["chat-b", "chat-c", "ghost-free"]),
    model("chat-b", provider="p2", caps=("chat", "streaming", "tools"), context_window=500),
    model("chat-c", caps=("chat", "streaming", "tools"), context_window=100_000),
    model("ghost-free", provider="p2"),
    model("openai/gpt-4", provider="p2"),
]


def _snap(**kwargs):
    kwargs.setdefault("models", MODELS)
    kwargs.setdefault("aliases", {"fast": "chat-a"})
    return snapshot(**kwargs)


def test_alias_resolution_policy_and_every_link_with_its_reason() -> None:
    snap = _snap(
        policies=[
            {"pattern": "ghost-*", "action": "deny", "priority": 1},
            {"pattern": "chat-*", "action": "allow", "priority": 10},
        ],
        credentials=[{"provider": "p1", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME"}],
    )
    result = explain(snap, "acme", "fast", stream=True, tools=True, tokens=800)
    assert (result["requested"], result["model"], result["alias"]) == ("fast", "chat-a", True)
    assert result["policy"] == {"pattern": "chat-*", "priority": 10, "action": "allow", "fallback_chain": None}
    assert result["allowed"] is True
    assert result["requirements"]["needs"] == ["chat", "streaming", "tools"]
    rows = [(link["model"], link["kept"], link["skip_reason"], link["detail"]) for link in result["chain"]]
    assert rows == [
        ("chat-a", False, "unsupported_capability", "missing capability 'tools'"),
        ("chat-b", False, "context_length", "estimated 800 tokens > context_window 500"),
        ("chat-c", True, None, None),
        ("ghost-free", False, "model_denied", "the org's policy denies this model"),
    ]
    assert result["chain"][0]["credentials"] == "org"
    assert result["chain"][1]["credentials"] == "platform"
    assert result["serves"] == "chat-c"
    assert result["error"] is None
    dumped = orjson.dumps(result).decode()
    assert "acme-own" not in dumped and "platform-1" not in dumped  # no secrets


def test_denied_model_reports_403_and_the_policy() -> None:
    snap = _snap(policies=[{"pattern": "*/*", "action": "deny", "priority": 100}])
    result = explain(snap, "acme", "openai/gpt-4")
    assert result["allowed"] is False
    assert result["policy"]["pattern"] == "*/*"
    assert result["error"]["code"] == "model_denied"


def test_default_action_when_no_policy_matches() -> None:
    result = explain(_snap(default_action="deny"), "acme", "chat-a")
    assert result["policy"] is None and result["allowed"] is False
    assert "default action" in result["decision"]


def test_unknown_model_is_404() -> None:
    result = explain(_snap(), "acme", "nope")
    assert result["model"] is None and result["error"]["code"] == "model_not_found"


def test_no_servable_link_shows_the_client_error() -> None:
    result = explain(
        _snap(policies=[{"pattern": "chat-a", "action": "allow", "priority": 1, "fallback_chain": []}]),
        "acme",
        "chat-a",
        tools=True,
    )
    assert [link["model"] for link in result["chain"]] == ["chat-a"]
    assert result["error"]["code"] == "unsupported_capability"
    assert "'tools'" in result["error"]["message"]


def test_unknown_hop_and_open_breaker_are_shown() -> None:
    snap = _snap(
        policies=[{"pattern": "chat-a", "action": "allow", "priority": 1, "fallback_chain": ["missing", "chat-c"]}]
    )
    key = ("p1", "chat-c")
    current().breakers.force_open(key, "test", None)
    try:
        result = explain(snap, "acme", "chat-a", registry=current().breakers)
    finally:
        current().breakers.reset(key)
    assert [(link["model"], link["skip_reason"]) for link in result["chain"]] == [
        ("chat-a", None),
        ("missing", "model_not_found"),
        ("chat-c", None),
    ]
    assert result["chain"][2]["breaker"] == "open"
    assert "breaker open" in result["chain"][2]["detail"]


def test_unknown_org_raises_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="acme"):
        explain(_snap(), "nobody", "chat-a")


def test_render_is_a_readable_table() -> None:
    text = render(explain(_snap(), "acme", "fast", tools=True, tokens=800))
    assert "requested: fast -> model chat-a (alias)" in text
    assert "default action allow" in text
    lines = text.splitlines()
    header = next(line for line in lines if "provider" in line and "breaker" in line)
    assert header.split()[:5] == ["#", "model", "provider", "credentials", "breaker"]
    assert any("chat-b" in line and "skipped: context_length" in line for line in lines)
    assert any("chat-c" in line and line.rstrip().endswith("kept") for line in lines)
    assert "served by chat-c" in lines[-1]


@pytest.fixture
def configured_db(db):
    from routing.config.store import import_document

    doc = document(
        models=MODELS, aliases={"fast": "chat-a"}, policies=[{"pattern": "chat-*", "action": "allow", "priority": 10}]
    )
    import_document(doc)


def test_command_prints_table(configured_db, settings) -> None:
    settings.REDIS_URL = ""  # the command serves nothing: without Redis it cannot know the breakers
    out = io.StringIO()
    call_command("explain_route", "--org", "acme", "--model", "fast", "--tools", "--tokens", "800", stdout=out)
    text = out.getvalue()
    assert "model chat-a (alias)" in text
    assert "'chat-*' priority 10 -> allow" in text
    assert "chat-c would be tried first if its breaker is closed" in text
    assert "served by" not in text and " closed " not in text.split("chain (", 1)[1].split("result:")[0]


def test_command_json(configured_db, settings) -> None:
    settings.REDIS_URL = ""
    out = io.StringIO()
    call_command("explain_route", "--org", "acme", "--model", "chat-a", "--stream", "--json", stdout=out)
    data = orjson.loads(out.getvalue())
    assert data["serves"] == "chat-a" and data["states_known"] is False
    assert data["chain"][0]["breaker"] == "unknown"
    assert data["requirements"]["needs"] == ["chat", "streaming"]


def test_command_unknown_org_is_a_command_error(configured_db) -> None:
    with pytest.raises(CommandError, match="unknown org"):
        call_command("explain_route", "--org", "ghost", "--model", "chat-a", stdout=io.StringIO())


def test_a_link_open_for_the_org_is_skipped_as_requests_skip_it() -> None:
    """docs/resilience.md#org-views: explain says what a request of that org meets, not "closed, kept"."""
    from routing.plan.explain import BreakerStates

    snap = _snap()
    states = BreakerStates("cluster")
    states.put(("p1", "chat-a"), "acme", "open", 12.0)
    result = explain(snap, "acme", "chat-a", states=states)
    first = result["chain"][0]
    assert first["breaker"] == "closed" and first["org_view"] == "open"
    assert "open for org acme" in first["detail"]
    assert result["serves"] == "chat-b" and result["breakers_from"] == "cluster"
    assert "open for acme (link closed)" in render(result) and "breaker states: cluster" in render(result)

    for key in (("p1", "chat-a"), ("p2", "chat-b"), ("p1", "chat-c"), ("p2", "ghost-free")):
        states.put(key, None, "open", 5.0)
    result = explain(snap, "acme", "chat-a", states=states)
    assert result["serves"] is None
    assert result["error"]["code"] == "circuit_open" and result["error"]["status"] == 503


def test_with_unknown_states_nothing_is_called_closed_or_said_to_serve() -> None:
    """No REDIS_URL and a process that serves nothing: the table says "unknown" and the result
    names the link that would be tried first, never "closed" or "served by"."""
    from routing.plan.explain import BreakerStates

    states = BreakerStates("unknown: without REDIS_URL ...", known=False)
    result = explain(_snap(), "acme", "chat-a", states=states)
    assert {link["breaker"] for link in result["chain"] if link["kept"]} == {"unknown"}
    text = render(result)
    assert "closed" not in text.replace("if its breaker is closed", "") and "served by" not in text
    assert text.splitlines()[-1].startswith("result:    chat-a would be tried first")
    assert "503 circuit_open" in text.splitlines()[-1]  # what it may meet, said as a possibility

    states.put(("p1", "chat-a"), None, "forced", 0.0)  # force-opens are known even so
    assert explain(_snap(), "acme", "chat-a", states=states)["chain"][0]["breaker"] == "open"


def test_a_link_the_org_is_refused_reads_open_for_the_org_and_skipped() -> None:
    from routing.plan.explain import BreakerStates

    states = BreakerStates("cluster")
    for key in (("p1", "chat-a"), ("p2", "chat-b"), ("p1", "chat-c"), ("p2", "ghost-free")):
        states.put(key, "acme", "open", 7.0)
    result = explain(_snap(), "acme", "chat-a", states=states)
    assert result["error"]["code"] == "circuit_open"
    rows = [line for line in render(result).splitlines() if line.startswith("  ") and "chat-" in line]
    assert rows and all("open for acme (link closed)" in row and "skipped: circuit_open" in row for row in rows)
    assert not any(row.rstrip().endswith(")") and " kept" in row for row in rows)


def test_a_process_serving_nothing_reads_the_clusters_breakers_from_redis(settings, redis_url) -> None:
    """manage.py explain_route serves nothing: it reads what the serving processes shared."""
    import redis

    from routing.core.breaker import BreakerKey, State
    from routing.runtime.cluster import breaker_sync
    from routing.runtime.cluster.breaker_sync import breaker_states

    settings.REDIS_URL = redis_url
    settings.SWITCHBOARD_CLUSTER = "explain-test"
    client = redis.Redis.from_url(redis_url)
    name = breaker_sync.state_key(breaker_sync.cluster_of(settings))
    now = time.time()
    shared, ended = BreakerKey("p1", "chat-a"), BreakerKey("p2", "chat-b")
    for key, org, until in ((shared, None, now + 20), (ended, None, now - 1), (shared, "acme", now + 9)):
        t = breaker_sync.Transition(key, State.OPEN, now - 10, until, 30, "elsewhere:1", 1, org)
        client.hset(name, breaker_sync.state_field(key, org), breaker_sync.encode(t))
    try:
        states = breaker_states(_snap(), serving=False)
    finally:
        client.delete(name)
        client.close()
    assert states.source == "cluster"
    state, left = states.link(shared)
    assert state == "open" and 18 < left <= 20
    assert states.link(ended)[0] == "half_open"  # cooldown over: the next request is the probe
    assert states.org(shared, "acme")[0] == "open" and states.org(shared, "beta")[0] == "closed"


def test_without_redis_a_process_serving_nothing_says_it_cannot_know(settings) -> None:
    from routing.runtime.cluster.breaker_sync import breaker_states

    settings.REDIS_URL = ""
    states = breaker_states(_snap(), serving=False)
    assert states.source.startswith("unknown") and not states.links
