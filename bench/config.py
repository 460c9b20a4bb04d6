"""The benchmark's gateway configuration (the YAML of docs/configuration.md), generated at any size.

Every benchmark model points at the mock upstream; the one the latency scenario calls
has the same upstream model name the direct requests use, so the mock does the same
work on both paths. The org's policies are N-1 deny patterns that never match followed
by one allow, so the whole list has to be evaluated (or cached) for every request.
"""

from __future__ import annotations

from typing import Any

import orjson
import yaml

ORG = "bench"
AGENT = "bench-agent"

# public id -> upstream model name the mock sees (and is scripted on)
CHAT = ("bench", "bench-up")
STREAM = ("bench-stream", "bench-stream-up")
SLOW = ("bench-slow", "bench-slow-up")
STORM = ("bench-storm", "bench-storm-up")
STORM_TOTAL_TIMEOUT_MS = 15_000
BASE_MODELS = (CHAT, STREAM, SLOW, STORM)

# The feature-enabled scenario (docs/configuration.md): a model with two deployments (two
# providers, the same mock) and a response cache, called by an agent with rate limits and a
# budget high enough never to refuse. Its bodies vary per request (VARY), so every one is a
# cache miss and a store.
FEATURES = ("bench-features", "bench-up")
# The governed path: FEATURES' two deployments, limits and budget, without the response cache (make bench's
# "features no cache" side, so its added p99 and its share of plain's throughput count no Redis round trip).
GOVERNED = ("bench-governed", "bench-up")
FEATURE_AGENT = "bench-limited"
VARY = "@N@"
HUGE_LIMITS = {"rpm": 10**9, "tpm": 10**12}
HUGE_BUDGET = {"usd": 10**9, "period": "month"}

STREAM_FRAMES = 20
SLOW_FRAMES = 400
SLOW_FRAME_DELAY_MS = 500


def config_document(
    mock_url: str, models: int = 10, policies: int = 10, resilience: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The configuration with `models` models and `policies` org policies (both ≥ the fixed set)."""
    if models < len(BASE_MODELS):
        raise ValueError(f"need at least {len(BASE_MODELS)} models for the benchmark scenarios, got {models}")
    if policies < 1:
        raise ValueError("need at least one policy (the final allow)")
    caps = ["chat", "streaming"]
    model_list: list[dict[str, Any]] = []
    for public, upstream in BASE_MODELS:
        entry: dict[str, Any] = {
            "id": public,
            "provider": "mock",
            "upstream_model": upstream,
            "capabilities": caps,
            "context_window": 128000,
        }
        if public == STORM[0]:
            entry["total_timeout_ms"] = STORM_TOTAL_TIMEOUT_MS
        model_list.append(entry)
    for i in range(models - len(BASE_MODELS)):
        model_list.append(
            {
                "id": f"filler-{i:05d}",
                "provider": "mock",
                "upstream_model": f"filler-{i:05d}-up",
                "capabilities": caps,
                "context_window": 128000,
            }
        )
    policy_list: list[dict[str, Any]] = [
        {"pattern": f"deny-{i:05d}-*", "action": "deny", "priority": i + 1} for i in range(policies - 1)
    ]
    policy_list.append({"pattern": "*", "action": "allow", "priority": policies + 1})
    doc: dict[str, Any] = {
        "providers": [{"name": "mock", "dialect": "openai", "base_url": f"{mock_url}/v1"}],
        "models": model_list,
        "orgs": [
            {
                "name": ORG,
                "default_action": "deny",
                "agents": [{"name": AGENT}],
                "policies": policy_list,
            }
        ],
    }
    if resilience:
        doc["resilience"] = dict(resilience)
    return doc


def config_yaml(mock_url: str, models: int = 10, policies: int = 10, resilience: dict[str, Any] | None = None) -> str:
    return yaml.safe_dump(config_document(mock_url, models, policies, resilience), sort_keys=False)


def features_document(mock_url: str) -> dict[str, Any]:
    """The plain configuration plus the features' model and agent (the plain models stay)."""
    doc = config_document(mock_url)
    doc["providers"].append({"name": "mock-b", "dialect": "openai", "base_url": f"{mock_url}/v1"})
    doc["models"].append(
        {
            "id": FEATURES[0],
            "deployments": [
                {"provider": "mock", "upstream_model": FEATURES[1]},
                {"provider": "mock-b", "upstream_model": FEATURES[1]},
            ],
            "capabilities": ["chat", "streaming"],
            "context_window": 128000,
            "cache_ttl_s": 3600,
            "input_price_per_mtok": 2.5,
            "output_price_per_mtok": 10.0,
        }
    )
    governed = {k: v for k, v in doc["models"][-1].items() if k != "cache_ttl_s"}
    doc["models"].append({**governed, "id": GOVERNED[0]})
    org = doc["orgs"][0]
    org["limits"], org["budget"] = dict(HUGE_LIMITS), dict(HUGE_BUDGET)
    org["agents"].append({"name": FEATURE_AGENT, "limits": dict(HUGE_LIMITS), "budget": dict(HUGE_BUDGET)})
    return doc


def features_yaml(mock_url: str) -> str:
    return yaml.safe_dump(features_document(mock_url), sort_keys=False)


# The alerts scenario: the features' configuration plus an alert rule that wants every event and the
# budgets' 80 % and 100 % thresholds (docs/alerts.md). Its webhook is the mock upstream, which answers any
# JSON POST to /v1/embeddings with 200 (and records it under the model ""): a local sink. The budgets
# are never reached and nothing fails, so no alert is sent; what is measured is the cost of having them.
ALERT_EVENTS = ["breaker_open", "breaker_closed", "parked", "shedding", "degraded"]


def alerts_yaml(mock_url: str) -> str:
    doc = features_document(mock_url)
    hook = {"url": f"{mock_url}/v1/embeddings"}
    doc["alerts"] = [{"name": "bench", "webhook": hook, "events": ALERT_EVENTS, "budget_percent": [80, 100]}]
    return yaml.safe_dump(doc, sort_keys=False)


# The configuration-size scenario: 5 000 models, and as many policies as one org may have (the validation's
# bound), every one evaluated per request of the benchmark's org.
LARGE_MODELS = 5_000


def large_policies() -> int:
    from routing.config.identifiers import MAX_POLICIES

    return MAX_POLICIES


def large_yaml(mock_url: str) -> str:
    return config_yaml(mock_url, models=LARGE_MODELS, policies=large_policies())


# The realistic scenario: a configuration the size of a real deployment's (dozens of models on three
# providers, aliases, several orgs with policies and agents), the benchmark model among them.
REALISTIC_MODELS = 40
REALISTIC_POLICIES = 25
REALISTIC_ORGS = 6
REALISTIC_ALIASES = 8


def realistic_document(mock_url: str) -> dict[str, Any]:
    """The plain scenario's model inside a configuration of realistic size (same mock, same bodies)."""
    doc = config_document(mock_url, models=REALISTIC_MODELS, policies=REALISTIC_POLICIES)
    for name in ("mock-b", "mock-c"):
        doc["providers"].append({"name": name, "dialect": "openai", "base_url": f"{mock_url}/v1"})
    for i, entry in enumerate(doc["models"]):
        if entry["id"].startswith("filler-"):
            entry["provider"] = ("mock", "mock-b", "mock-c")[i % 3]
            entry["input_price_per_mtok"], entry["output_price_per_mtok"] = 1.0 + i % 5, 4.0 + i % 7
    fillers = [m["id"] for m in doc["models"] if m["id"].startswith("filler-")]
    doc["aliases"] = {f"alias-{i:02d}": fillers[i] for i in range(REALISTIC_ALIASES)}
    for o in range(1, REALISTIC_ORGS):
        doc["orgs"].append(
            {
                "name": f"org-{o:02d}",
                "default_action": "deny",
                "agents": [{"name": f"org-{o:02d}-agent-{a}"} for a in range(4)],
                "policies": [{"pattern": f"filler-{p:05d}", "action": "allow", "priority": p + 1} for p in range(10)],
            }
        )
    return doc


def realistic_yaml(mock_url: str) -> str:
    return yaml.safe_dump(realistic_document(mock_url), sort_keys=False)


def mock_scripts() -> list[dict[str, Any]]:
    """What the mock must answer for each scenario's upstream model (POST /_control/script)."""
    return [
        {"model": STREAM[1], "steps": [], "then": {"frames": STREAM_FRAMES}},
        {"model": SLOW[1], "steps": [], "then": {"frames": SLOW_FRAMES, "frame_delay_ms": SLOW_FRAME_DELAY_MS}},
        {"model": STORM[1], "steps": [], "then": {"status": 429}},
    ]


def one_model_document(orgs: list[dict[str, Any]]) -> dict[str, Any]:
    """An in-process benchmark's configuration: one priced chat model `m` on a provider `p` nobody
    calls (the micro-benchmarks time the request path's functions, not an upstream), and `orgs`."""
    return {
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:1/v1"}],
        "models": [
            {
                "id": "m",
                "provider": "p",
                "upstream_model": "m",
                "capabilities": ["chat"],
                "input_price_per_mtok": 2.5,
                "output_price_per_mtok": 10.0,
            }
        ],
        "orgs": orgs,
    }


def chat_body(model: str, stream: bool = False, vary: bool = False) -> str:
    """A small chat completion request body (the same bytes direct and through the gateway).

    With `vary`, the text holds the VARY marker, which the load generators replace with a
    per-request counter (a different cache key each time).
    """
    text = f"Say hello. {VARY}" if vary else "Say hello."
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}]}
    if stream:
        body["stream"] = True
    return orjson.dumps(body).decode()
