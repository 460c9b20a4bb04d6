"""Dated prices and negotiated deployment prices (docs/configuration.md#price-versions): validated on the
one path, built into the snapshot, and the version in effect priced and named."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from routing.config.snapshot import build_snapshot
from routing.config.validation import validate_document
from routing.core.prices import prices_now
from routing.runtime.usage.pricing import priced_version

DOC = """
providers:
  - {name: p1, dialect: openai, base_url: "http://127.0.0.1:9/v1"}
  - {name: p2, dialect: openai, base_url: "http://127.0.0.1:9/v2"}
models:
  - id: m
    provider: p1
    upstream_model: m-up
    capabilities: [chat]
    input_price_per_mtok: 3
    output_price_per_mtok: 15
    prices:
      - {effective_from: 2026-03-01, output: 10}
      - {effective_from: 2026-01-01, input: 2.5, cache_read: 0.25}
  - id: d
    capabilities: [chat]
    input_price_per_mtok: 1
    output_price_per_mtok: 4
    deployments:
      - {provider: p1, upstream_model: d-up}
      - {provider: p2, upstream_model: d-up, prices: {output: 3}}
"""


def at(day: str) -> float:
    return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()


def snapshot():
    doc = yaml.safe_load(DOC)
    assert validate_document(doc) == []
    return build_snapshot(doc, [], {}, version=1)


def test_the_version_in_effect_on_the_day_prices_the_request_and_is_named() -> None:
    model = snapshot().models["m"]
    assert prices_now(model, at("2025-12-31T23:59:59"))[:3] == ("", 3.0, 15.0)  # before the first entry: flat
    label, input_price, output_price, classes = prices_now(model, at("2026-01-01T00:00:00"))
    assert (label, input_price, output_price, classes.cache_read) == ("2026-01-01", 2.5, 15.0, 0.25)
    # each entry names what changes from the one before
    label, input_price, output_price, classes = prices_now(model, at("2026-06-01T00:00:00"))
    assert (label, input_price, output_price, classes.cache_read) == ("2026-03-01", 2.5, 10.0, 0.25)
    assert priced_version(model, 1000, 1000, {"cache_read": 1000}, at("2026-06-01T00:00:00")) == (
        "2026-03-01",
        round((1000 * 0.25 + 1000 * 10) / 1e6, 8),
    )


def test_a_deployments_negotiated_prices_override_the_models_for_that_deployment_only() -> None:
    first, second = snapshot().models["d"].deployments
    assert prices_now(first.model, at("2026-01-01T00:00:00"))[:3] == ("", 1.0, 4.0)
    assert prices_now(second.model, at("2026-01-01T00:00:00"))[:3] == ("deployment", 1.0, 3.0)


@pytest.mark.parametrize(
    ("prices", "path", "words"),
    [
        ([{"effective_from": "March 1st", "input": 1}], "models[m].prices[0].effective_from", "a date such as"),
        ([{"effective_from": "2026-01-01", "inptu": 1}], "models[m].prices[0].inptu", "unknown price"),
        ([{"effective_from": "2026-01-01", "output": -1}], "models[m].prices[0].output", "at least 0"),
        (
            [{"effective_from": "2026-01-01", "input": 1}, {"effective_from": "2026-01-01", "output": 2}],
            "models[m].prices[1].effective_from",
            "merge them",
        ),
        ({"input": 1}, "models[m].prices", "must be a list"),
    ],
)
def test_a_bad_price_entry_is_refused_with_its_path_and_what_to_do(prices, path, words) -> None:
    doc = yaml.safe_load(DOC)
    doc["models"][0]["prices"] = prices
    problems = validate_document(doc)
    assert any(p.path == path and words in p.message for p in problems), problems
