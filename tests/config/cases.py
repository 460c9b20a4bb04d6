"""One broken variant of the valid document per validation rule.

Each case: (id, mutate(doc), expected error path, message fragment, check id).
Used through validate_document and through import_config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Doc = dict[str, Any]


def _provider(doc: Doc) -> Doc:
    return doc["providers"][0]


def _model(doc: Doc, model_id: str) -> Doc:
    return next(m for m in doc["models"] if m["id"] == model_id)


def _org(doc: Doc) -> Doc:
    return doc["orgs"][0]


def _nine_models(doc: Doc) -> list[str]:
    ids = [f"spare-{i}" for i in range(9)]
    doc["models"] += [{"id": i, "provider": "local-a", "upstream_model": "x", "capabilities": ["chat"]} for i in ids]
    return ids


def _set(target: Callable[[Doc], Any], key: Any, value: Any) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        target(doc)[key] = value

    return mutate


def _do(fn: Callable[[Doc], Any]) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        fn(doc)

    return mutate


# fmt: off
CASES: list[tuple[str, Callable[[Doc], None], str, str, str]] = [
    ("unknown-top-level-key", _set(lambda d: d, "colour", "blue"), "colour", "unknown top-level key 'colour'", "routing.E001"),
    ("wrong-type", _set(lambda d: d, "providers", {"local-a": {}}), "providers", "providers must be a list", "routing.E001"),
    ("provider-missing-base-url", _do(lambda d: _provider(d).pop("base_url")), "providers[local-a].base_url", "missing the required field 'base_url'", "routing.E001"),
    ("provider-missing-name", _do(lambda d: _provider(d).pop("name")), "providers[0].name", "missing the required field 'name'", "routing.E001"),
    ("model-missing-upstream", _do(lambda d: _model(d, "chat-b").pop("upstream_model")), "models[chat-b].upstream_model", "missing the required field 'upstream_model'", "routing.E001"),
    ("model-unknown-field", _set(lambda d: _model(d, "chat-a"), "colour", "red"), "models[chat-a].colour", "unknown field 'colour'", "routing.E001"),
    ("unknown-dialect", _set(_provider, "dialect", "grpc"), "providers[local-a].dialect", "unknown dialect 'grpc'", "routing.E006"),
    ("base-url-scheme", _set(_provider, "base_url", "ftp://example.com/v1"), "providers[local-a].base_url", "is not an http(s) URL", "routing.E005"),
    ("base-url-no-host", _set(_provider, "base_url", "http:///v1"), "providers[local-a].base_url", "is not an http(s) URL with a host", "routing.E005"),
    ("provider-timeout-zero", _set(_provider, "connect_timeout_ms", 0), "providers[local-a].connect_timeout_ms", "positive whole number of milliseconds", "routing.E006"),
    ("model-timeout-negative", _set(lambda d: _model(d, "chat-a"), "total_timeout_ms", -5), "models[chat-a].total_timeout_ms", "positive whole number of milliseconds", "routing.E006"),
    ("resilience-timeout-zero", _set(lambda d: d["resilience"], "first_token_timeout_ms", 0), "resilience.first_token_timeout_ms", "positive whole number", "routing.E006"),
    ("cooldown-zero", _set(lambda d: d["resilience"], "breaker_cooldown_s", 0), "resilience.breaker_cooldown_s", "positive number of seconds", "routing.E006"),
    ("ratio-above-one", _set(lambda d: d["resilience"], "retry_budget_ratio", 1.5), "resilience.retry_budget_ratio", "between 0 and 1", "routing.E006"),
    ("negative-retries", _set(lambda d: d["resilience"], "max_retries", -1), "resilience.max_retries", "whole number from 0", "routing.E006"),
    ("unknown-resilience-key", _set(lambda d: d["resilience"], "retries", 3), "resilience.retries", "unknown resilience setting 'retries'", "routing.E001"),
    ("bad-fallback-on", _set(lambda d: d["resilience"], "fallback_on", ["timeout", "bad_luck"]), "resilience.fallback_on[1]", "unknown fallback trigger 'bad_luck'", "routing.E006"),
    ("unknown-capability", _set(lambda d: _model(d, "chat-a"), "capabilities", ["chat", "telepathy"]), "models[chat-a].capabilities[1]", "unknown capability 'telepathy'", "routing.E003"),
    ("duplicate-provider", _do(lambda d: d["providers"].append(dict(_provider(d)))), "providers[local-a].name", "duplicate provider name 'local-a'", "routing.E001"),
    ("duplicate-model", _do(lambda d: d["models"].append(dict(_model(d, "chat-b")))), "models[chat-b].id", "duplicate model id 'chat-b'", "routing.E001"),
    ("model-unknown-provider", _set(lambda d: _model(d, "chat-b"), "provider", "nowhere"), "models[chat-b].provider", "unknown provider 'nowhere'", "routing.E008"),
    ("unknown-fallback", _set(lambda d: _model(d, "chat-a"), "fallbacks", ["chat-z"]), "models[chat-a].fallbacks[0]", "unknown model 'chat-z'", "routing.E002"),
    ("self-fallback", _set(lambda d: _model(d, "chat-a"), "fallbacks", ["chat-b", "chat-a"]), "models[chat-a].fallbacks[1]", "lists itself as a fallback", "routing.E002"),
    ("duplicate-link", _set(lambda d: _model(d, "chat-a"), "fallbacks", ["chat-b", "chat-b"]), "models[chat-a].fallbacks[1]", "appears twice", "routing.E002"),
    ("chain-too-long", lambda d: _model(d, "chat-a").update(fallbacks=_nine_models(d)), "models[chat-a].fallbacks", "at most 8", "routing.E002"),
    ("capability-mismatch", _set(lambda d: _model(d, "chat-b"), "capabilities", ["embeddings"]), "models[chat-a].fallbacks[0]", "'chat-b' does not serve chat", "routing.E003"),
    ("alias-unknown-model", _set(lambda d: d["aliases"], "fast", "chat-z"), "aliases[fast]", "unknown model 'chat-z'", "routing.E007"),
    ("alias-collides-with-model", _set(lambda d: d["aliases"], "chat-b", "chat-a"), "aliases[chat-b]", "same name as a model id", "routing.E007"),
    ("alias-to-alias", _set(lambda d: d["aliases"], "quick", "fast"), "aliases[quick]", "points to the alias 'fast'", "routing.E007"),
    ("alias-cycle", lambda d: d["aliases"].update(a="b", b="a"), "aliases[a]", "an alias target must be a model id", "routing.E007"),
    ("org-default-action", _set(_org, "default_action", "maybe"), "orgs[acme].default_action", "use allow or deny", "routing.E006"),
    ("policy-action", _set(lambda d: _org(d)["policies"][1], "action", "block"), "orgs[acme].policies[1].action", "use allow or deny", "routing.E006"),
    ("malformed-pattern", _set(lambda d: _org(d)["policies"][0], "pattern", "chat-["), "orgs[acme].policies[0].pattern", "malformed pattern 'chat-[': unterminated character class", "routing.E004"),
    ("policy-chain-too-long", lambda d: _org(d)["policies"][0].update(fallback_chain=_nine_models(d)), "orgs[acme].policies[0].fallback_chain", "at most 8", "routing.E002"),
    ("policy-chain-unknown", _set(lambda d: _org(d)["policies"][0], "fallback_chain", ["chat-z"]), "orgs[acme].policies[0].fallback_chain[0]", "unknown model 'chat-z'", "routing.E002"),
    ("policy-chain-on-deny", _set(lambda d: _org(d)["policies"][1], "fallback_chain", ["chat-b"]), "orgs[acme].policies[1].fallback_chain", "deny policy with a fallback_chain", "routing.E002"),
    ("credential-unknown-provider", _set(_org, "credentials", [{"provider": "nowhere", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME"}]), "orgs[acme].credentials[nowhere].provider", "unknown provider 'nowhere'", "routing.E008"),
    ("credential-base-url", _set(_org, "credentials", [{"provider": "local-a", "base_url": "localhost:9005"}]), "orgs[acme].credentials[local-a].base_url", "is not an http(s) URL", "routing.E005"),
    ("agent-default-model", _set(lambda d: _org(d)["agents"][0], "default_model", "chat-z"), "orgs[acme].agents[support-bot].default_model", "neither a model id nor an alias", "routing.E008"),
    ("duplicate-agent", _do(lambda d: _org(d)["agents"].append({"name": "support-bot"})), "orgs[acme].agents[support-bot].name", "duplicate agent name 'support-bot'", "routing.E001"),
    ("model-cache-ttl-zero", _set(lambda d: _model(d, "chat-a"), "cache_ttl_s", 0), "models[chat-a].cache_ttl_s", "cache_ttl_s of model 'chat-a' must be a positive whole number of seconds, got 0", "routing.E006"),
    ("model-cache-ttl-string", _set(lambda d: _model(d, "chat-a"), "cache_ttl_s", "5m"), "models[chat-a].cache_ttl_s", "got '5m'", "routing.E006"),
    ("org-limits-unknown-key", _set(_org, "limits", {"rph": 5}), "orgs[acme].limits.rph", "unknown limit 'rph' of org 'acme'", "routing.E001"),
    ("org-limits-not-mapping", _set(_org, "limits", 60), "orgs[acme].limits", "limits of org 'acme' must be a mapping", "routing.E001"),
    ("org-limits-zero", _set(_org, "limits", {"rpm": 0}), "orgs[acme].limits.rpm", "rpm of org 'acme' must be a positive whole number of requests per minute, got 0", "routing.E006"),
    ("agent-limits-negative", _set(lambda d: _org(d)["agents"][0], "limits", {"tpm": -1}), "orgs[acme].agents[support-bot].limits.tpm", "tpm of agent 'support-bot' of org 'acme' must be a positive whole number of tokens", "routing.E006"),
    ("agent-limits-fraction", _set(lambda d: _org(d)["agents"][0], "limits", {"rpm": 1.5}), "orgs[acme].agents[support-bot].limits.rpm", "got 1.5", "routing.E006"),
    ("agent-limits-bool", _set(lambda d: _org(d)["agents"][0], "limits", {"rpm": True}), "orgs[acme].agents[support-bot].limits.rpm", "got True", "routing.E006"),
    ("agent-limits-string", _set(lambda d: _org(d)["agents"][0], "limits", {"tpm": "1000"}), "orgs[acme].agents[support-bot].limits.tpm", "got '1000'", "routing.E006"),
    ("org-budget-not-mapping", _set(_org, "budget", 100), "orgs[acme].budget", "budget of org 'acme' must be a mapping", "routing.E001"),
    ("org-budget-unknown-key", _set(_org, "budget", {"usd": 5, "period": "day", "eur": 3}), "orgs[acme].budget.eur", "unknown budget key 'eur' of org 'acme'", "routing.E001"),
    ("org-budget-no-period", _set(_org, "budget", {"usd": 5}), "orgs[acme].budget.period", "budget of org 'acme' has no period", "routing.E001"),
    ("org-budget-period", _set(_org, "budget", {"usd": 5, "period": "week"}), "orgs[acme].budget.period", "unknown budget period 'week' of org 'acme'", "routing.E006"),
    ("agent-budget-zero", _set(lambda d: _org(d)["agents"][0], "budget", {"usd": 0, "period": "day"}), "orgs[acme].agents[support-bot].budget.usd", "usd of the budget of agent 'support-bot' of org 'acme' must be a positive number", "routing.E006"),
    ("agent-budget-string", _set(lambda d: _org(d)["agents"][0], "budget", {"usd": "5", "period": "month"}), "orgs[acme].agents[support-bot].budget.usd", "got '5'", "routing.E006"),
]
# fmt: on

CASE_IDS = [c[0] for c in CASES]
