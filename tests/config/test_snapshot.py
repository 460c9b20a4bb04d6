"""The snapshot builder: what a model ends up with when several levels configure it."""

from __future__ import annotations

from routing.config.snapshot import build_snapshot


def _document() -> dict:
    return {
        "resilience": {"connect_timeout_ms": 1111, "first_token_timeout_ms": 2222, "total_timeout_ms": 3333},
        "providers": [
            {
                "name": "prov",
                "dialect": "openai",
                "base_url": "http://127.0.0.1:9/v1",
                "connect_timeout_ms": 444,
                "first_token_timeout_ms": 555,
                "total_timeout_ms": 666,
            },
            {"name": "plain", "dialect": "openai", "base_url": "http://127.0.0.1:9/v1"},
        ],
        "models": [
            # every timeout on both the model and its provider: the model's values
            {
                "id": "both",
                "provider": "prov",
                "upstream_model": "m",
                "connect_timeout_ms": 7,
                "first_token_timeout_ms": 8000,
                "total_timeout_ms": 9,
            },
            # one on the model, the rest from the provider
            {"id": "some", "provider": "prov", "upstream_model": "m", "first_token_timeout_ms": 8000},
            # nothing on the model: the provider's
            {"id": "none", "provider": "prov", "upstream_model": "m"},
            # nothing on the model nor its provider: the global resilience values
            {"id": "global", "provider": "plain", "upstream_model": "m"},
        ],
        "orgs": [{"name": "acme"}],
    }


def _timeouts(model_id: str) -> tuple[int, int, int]:
    t = build_snapshot(_document(), [], {}).models[model_id].timeouts
    return (t.connect_ms, t.first_token_ms, t.total_ms)


def test_a_models_timeout_wins_over_its_providers_whether_longer_or_shorter() -> None:
    assert _timeouts("both") == (7, 8000, 9)


def test_each_timeout_falls_back_on_its_own() -> None:
    assert _timeouts("some") == (444, 8000, 666)


def test_a_providers_timeout_wins_over_the_global_one() -> None:
    assert _timeouts("none") == (444, 555, 666)


def test_the_global_timeouts_apply_when_neither_model_nor_provider_sets_one() -> None:
    assert _timeouts("global") == (1111, 2222, 3333)
