"""What the caches saved (docs/operations.md#savings), group by group: the prices a record is charged at,
a prompt cache's reads against a response cache's replays, records that cannot be priced, and the sums."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from routing.config.snapshot import build_snapshot
from routing.core.prices import ClassPrices
from routing.models import UsageRecord
from routing.ops.usage.savings import Saved, _group_saved, prices_of, saved_by

MAY = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
DOCUMENT = {
    "providers": [
        {"name": "east", "base_url": "http://127.0.0.1:9/v1"},
        {"name": "west", "base_url": "http://127.0.0.1:9/v1"},
    ],
    "models": [
        {
            "id": "dated",
            "provider": "east",
            "upstream_model": "m1",
            "capabilities": ["chat"],
            "input_price_per_mtok": 3.0,
            "output_price_per_mtok": 15.0,
            "cache_read_price_per_mtok": 0.30,
            "prices": [
                {"effective_from": "2026-05-01", "input": 2.5, "cache_read": 0.25},
                {"effective_from": "2026-07-01", "input": 2.0, "output": 10.0, "cache_read": 0.2},
            ],
        },
        {
            "id": "deployed",
            "capabilities": ["chat"],
            "input_price_per_mtok": 3.0,
            "output_price_per_mtok": 15.0,
            "deployments": [
                {"provider": "east", "upstream_model": "x", "prices": {"input": 2.0, "cache_read": 0.1}},
                {"provider": "west", "upstream_model": "x", "prices": {"input": 1.0, "cache_read": 0.05}},
            ],
        },
        {"id": "free", "provider": "east", "upstream_model": "m3", "capabilities": ["chat"]},
    ],
    "orgs": [{"name": "acme"}, {"name": "globex"}],
}


@pytest.fixture(scope="module")
def snap():
    return build_snapshot(DOCUMENT, [], os.environ, version=1, config_version=1)


def _row(n: int = 1, cached: bool = False, **tokens) -> dict:
    row = {"n": n, "cached": cached, "prompt": None, "completion": None}
    row.update({name: None for name in ("cache_read", "cache_write", "cache_write_1h", "audio_input")})
    row.update({"reasoning": None, "audio_output": None, **tokens})
    return row


# the prices a record was charged at --------------------------------------------------------------------


def test_a_records_price_version_picks_its_prices(snap):
    assert prices_of(snap, "dated", "east", "", now=0.0)[:2] == (3.0, 15.0)
    input_price, output_price, classes = prices_of(snap, "dated", "east", "2026-05-01", now=0.0)
    assert (input_price, output_price, classes.cache_read) == (2.5, 15.0, 0.25)
    input_price, output_price, classes = prices_of(snap, "dated", "east", "2026-07-01", now=0.0)
    assert (input_price, output_price, classes.cache_read) == (2.0, 10.0, 0.2)


def test_a_version_no_longer_configured_is_priced_as_now(snap):
    june = MAY + 40 * 86400
    input_price, _, classes = prices_of(snap, "dated", "east", "2025-01-01", now=june)
    assert (input_price, classes.cache_read) == (2.5, 0.25)
    assert prices_of(snap, "dated", "east", "2025-01-01", now=0.0)[0] == 3.0  # before any version: the flat ones


def test_negotiated_prices_are_the_serving_deployments(snap):
    assert prices_of(snap, "deployed", "west", "deployment", now=0.0)[0] == 1.0
    assert prices_of(snap, "deployed", "east", "deployment", now=0.0)[0] == 2.0
    assert prices_of(snap, "deployed", "gone", "deployment", now=0.0)[0] == 3.0  # no such deployment: the model's
    assert prices_of(snap, "deployed", "west", "", now=0.0)[0] == 3.0  # not negotiated: the model's own
    assert prices_of(snap, "missing", "east", "", now=0.0) is None


# one group ---------------------------------------------------------------------------------------------


def test_prompt_cache_reads_save_the_difference_to_the_input_price():
    saved = _group_saved(_row(n=3, cache_read=2_000_000), (3.0, 15.0, ClassPrices(cache_read=0.5)))
    assert saved.as_dict() == {
        "prompt_cache_usd": 5.0,
        "response_cache_usd": 0.0,
        "total_usd": 5.0,
        "cached_input_tokens": 2_000_000,
        "response_cache_hits": 0,
        "unpriced_records": 0,
    }


@pytest.mark.parametrize("classes", [None, ClassPrices(), ClassPrices(cache_read=None, cache_write=1.0)])
def test_reads_without_a_cache_read_price_saved_nothing(classes):
    saved = _group_saved(_row(cache_read=1_000_000), (3.0, None, classes))
    assert (saved.prompt_cache_usd, saved.cached_input_tokens, saved.unpriced_records) == (0.0, 1_000_000, 0)


def test_a_cache_read_dearer_than_input_saved_nothing_rather_than_less():
    assert _group_saved(_row(cache_read=1_000_000), (1.0, None, ClassPrices(cache_read=2.0))).prompt_cache_usd == 0.0


@pytest.mark.parametrize("prices", [None, (None, 15.0, ClassPrices(cache_read=0.3))])
def test_reads_of_an_unpriced_model_are_counted_not_priced(prices):
    saved = _group_saved(_row(n=4, cache_read=700), prices)
    assert (saved.unpriced_records, saved.cached_input_tokens, saved.total_usd) == (4, 700, 0.0)


def test_a_group_without_any_reads_counts_zero():
    saved = _group_saved(_row(n=2), (3.0, 15.0, None))
    assert (saved.cached_input_tokens, saved.prompt_cache_usd, saved.unpriced_records) == (0, 0.0, 0)


def test_a_response_cache_hit_saved_what_its_answer_cost():
    row = _row(n=2, cached=True, prompt=1_000_000, completion=100_000, cache_read=400_000, reasoning=50_000)
    saved = _group_saved(row, (3.0, 15.0, ClassPrices(cache_read=0.5)))
    # 600k input x 3 + 400k cache reads x 0.5 + 100k output (50k of it reasoning, at the output price) x 15
    assert saved.response_cache_usd == pytest.approx(1.8 + 0.2 + 1.5, abs=1e-12)
    assert (saved.response_cache_hits, saved.cached_input_tokens, saved.unpriced_records) == (2, 0, 0)
    assert saved.prompt_cache_usd == 0.0


def test_a_hit_with_no_tokens_saved_nothing():
    saved = _group_saved(_row(n=1, cached=True), (3.0, 15.0, None))
    assert (saved.response_cache_usd, saved.response_cache_hits) == (0.0, 1)


@pytest.mark.parametrize("prices", [None, (None, 15.0, None)])
def test_a_hit_of_an_unpriced_model_is_counted_not_priced(prices):
    saved = _group_saved(_row(n=5, cached=True, prompt=1000, completion=10), prices)
    assert (saved.unpriced_records, saved.response_cache_hits, saved.response_cache_usd) == (5, 5, 0.0)


def test_a_hit_without_an_output_price_still_saves_its_input():
    saved = _group_saved(_row(cached=True, prompt=1_000_000, completion=1_000_000), (2.0, None, None))
    assert saved.response_cache_usd == pytest.approx(2.0, abs=1e-12)


# sums --------------------------------------------------------------------------------------------------


def test_savings_add_up_field_by_field():
    total = Saved(0.5, 0.25, 10, 1, 2)
    total.add(Saved(1.0, 2.0, 5, 3, 4))
    assert (total.prompt_cache_usd, total.response_cache_usd, total.total_usd) == (1.5, 2.25, 3.75)
    assert (total.cached_input_tokens, total.response_cache_hits, total.unpriced_records) == (15, 4, 6)


def test_dollars_are_rounded_to_eight_places():
    saved = Saved(0.123456784, 0.250000004).as_dict()
    assert (saved["prompt_cache_usd"], saved["response_cache_usd"], saved["total_usd"]) == (
        0.12345678,
        0.25,
        0.37345679,
    )


# the query ---------------------------------------------------------------------------------------------


def _record(n: int, **fields) -> None:
    row = {
        "request_id": f"svm-{n}",
        "created_at": timezone.now() - timedelta(minutes=1),
        "endpoint": "chat",
        "org": "acme",
        "model_used": "dated",
        "provider": "east",
        "status": 200,
        "prompt_tokens": 1_000_000,
        "completion_tokens": 0,
        "cost": "0.01",
        "price_version": "",
        **fields,
    }
    UsageRecord.objects.create(**row)


@pytest.mark.django_db
def test_savings_are_grouped_by_the_columns_asked(snap):
    _record(1, cache_read_tokens=1_000_000)  # 1e6 x (3 - 0.30)
    _record(2, cache_read_tokens=1_000_000, price_version="2026-05-01")  # 1e6 x (2.50 - 0.25)
    _record(3, org="globex", cache_read_tokens=2_000_000)  # 2e6 x (3 - 0.30)
    _record(4, org="globex", cached=True, cost="0")  # a hit: 1e6 x 3
    _record(5, org="globex", cache_read_tokens=500_000, model_used="gone")
    _record(6, org="initech")  # no cache: not a group
    _record(7, org="umbrella", cache_read_tokens=1, prompt_tokens=1)  # a single token read is a group
    by_org = saved_by(UsageRecord.objects.all(), snap, ["org"], now=0.0)
    assert set(by_org) == {("acme",), ("globex",), ("umbrella",)}
    assert by_org[("umbrella",)].prompt_cache_usd == pytest.approx(2.7e-6, abs=1e-12)
    assert by_org[("acme",)].prompt_cache_usd == pytest.approx(2.7 + 2.25, abs=1e-12)
    assert by_org[("acme",)].cached_input_tokens == 2_000_000
    globex = by_org[("globex",)]
    assert (globex.prompt_cache_usd, globex.response_cache_usd) == (
        pytest.approx(5.4, abs=1e-12),
        pytest.approx(3.0, abs=1e-12),
    )
    assert (globex.response_cache_hits, globex.unpriced_records, globex.cached_input_tokens) == (1, 1, 2_500_000)
    both = saved_by(UsageRecord.objects.all(), snap, ["org", "model_used"], now=0.0)
    assert set(both) == {("acme", "dated"), ("globex", "dated"), ("globex", "gone"), ("umbrella", "dated")}
    assert both[("globex", "gone")].unpriced_records == 1
    everything = saved_by(UsageRecord.objects.all(), snap, [], now=0.0)
    assert list(everything) == [()]
    assert everything[()].total_usd == pytest.approx(2.7 + 2.25 + 5.4 + 3.0 + 2.7e-6, abs=1e-12)


@pytest.mark.django_db
def test_a_record_of_a_price_version_no_longer_configured_is_priced_as_at_the_time_asked(snap):
    _record(1, cache_read_tokens=1_000_000, price_version="2025-01-01")
    june = MAY + 40 * 86400
    assert saved_by(UsageRecord.objects.all(), snap, [], now=june)[()].prompt_cache_usd == pytest.approx(
        2.25, abs=1e-12
    )
    assert saved_by(UsageRecord.objects.all(), snap, [], now=0.0)[()].prompt_cache_usd == pytest.approx(2.7, abs=1e-12)
