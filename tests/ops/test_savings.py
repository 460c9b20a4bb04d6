"""Dollars saved by the prompt caches and the response cache (docs/operations.md#savings): computed on the
analytics page and in the management API from the usage records, per model and org, within the viewer's orgs."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from django.utils import timezone

from policies.models import OperatorScope, Org
from policies.tokens import create_management_token
from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.models import UsageRecord
from routing.ops.controls import ensure_operators_group

# Claude Sonnet 4's prices: input $3, output $15, cache reads $0.30; from 2026-05-01 input $2.50, reads $0.25.
DOCUMENT = {
    "providers": [{"name": "sv-a", "dialect": "openai", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [
        {
            "id": "sv-chat",
            "provider": "sv-a",
            "upstream_model": "m1",
            "capabilities": ["chat"],
            "input_price_per_mtok": 3.0,
            "output_price_per_mtok": 15.0,
            "cache_read_price_per_mtok": 0.30,
            "prices": [{"effective_from": "2026-05-01", "input": 2.5, "cache_read": 0.25}],
        },
        {  # no cache-read price: cache reads were billed as input, nothing saved
            "id": "sv-plain",
            "provider": "sv-a",
            "upstream_model": "m2",
            "capabilities": ["chat"],
            "input_price_per_mtok": 1.0,
            "output_price_per_mtok": 2.0,
        },
    ],
    "orgs": [{"name": "acme"}, {"name": "globex"}],
}


@pytest.fixture
def priced():
    previous = live.current()
    live.swap(build_snapshot(DOCUMENT, [], os.environ, version=1, config_version=1))
    yield
    live.swap(previous)


def _record(n: int, **fields) -> None:
    row = {
        "request_id": f"sv-{n}",
        "created_at": timezone.now() - timedelta(minutes=1),
        "endpoint": "chat",
        "org": "acme",
        "model_used": "sv-chat",
        "provider": "sv-a",
        "status": 200,
        "prompt_tokens": 4404,
        "completion_tokens": 503,
        "cost": "0.01",
        **fields,
    }
    UsageRecord.objects.create(**row)


@pytest.fixture
def records(priced):
    # acme: 1800 tokens read from the cache at the undated prices: 1800 x (3 - 0.30) / 1e6 = $0.00486
    _record(1, cache_read_tokens=1800, price_version="")
    # globex: 1000 at the 2026-05-01 version: 1000 x (2.50 - 0.25) / 1e6 = $0.00225
    _record(2, org="globex", cache_read_tokens=1000, price_version="2026-05-01")
    # acme: a response-cache hit replaying 1000 + 100 tokens: (1000 x 3 + 100 x 15) / 1e6 = $0.0045
    _record(3, prompt_tokens=1000, completion_tokens=100, cost="0", cached=True, price_version="")
    # acme: cache reads on a model without a cache-read price, and a record without any cache: $0
    _record(4, model_used="sv-plain", cache_read_tokens=900, price_version="")
    _record(5)


def _data(client, query: str = "range=hour") -> dict:
    html = client.get(f"/dashboard/analytics/?{query}").content.decode()
    start = html.index('<script id="analytics-data" type="application/json">')
    return json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["range=hour", "range=day"], ids=["minutes", "hours"])
def test_the_analytics_page_shows_the_exact_dollars_each_cache_saved(records, admin_client, query):
    saved = _data(admin_client, query)["savings"]
    assert saved["totals"]["prompt_cache_usd"] == pytest.approx(0.00486 + 0.00225, abs=1e-12)
    assert saved["totals"]["response_cache_usd"] == pytest.approx(0.0045, abs=1e-12)
    assert saved["totals"]["cached_input_tokens"] == 1800 + 1000 + 900
    assert saved["totals"]["response_cache_hits"] == 1
    models = {row["model_used"]: row for row in saved["models"]}
    assert models["sv-chat"]["total_usd"] == pytest.approx(0.00486 + 0.00225 + 0.0045, abs=1e-12)
    assert models["sv-plain"]["total_usd"] == 0 and models["sv-plain"]["cached_input_tokens"] == 900
    orgs = {row["org"]: row for row in saved["orgs"]}
    assert orgs["acme"]["prompt_cache_usd"] == pytest.approx(0.00486, abs=1e-12)
    assert orgs["acme"]["response_cache_usd"] == pytest.approx(0.0045, abs=1e-12)
    assert orgs["globex"]["prompt_cache_usd"] == pytest.approx(0.00225, abs=1e-12)
    html = admin_client.get(f"/dashboard/analytics/?{query}").content.decode()
    assert 'id="t-saved">$0.011610<' in html and 'id="s-prompt">$0.007110<' in html
    assert 'id="s-response">$0.004500<' in html and 'data-saved-org="globex"' in html


@pytest.mark.django_db
def test_a_record_of_a_model_no_longer_configured_is_counted_not_priced(records, admin_client):
    _record(6, model_used="sv-gone", cache_read_tokens=500)
    saved = _data(admin_client)["savings"]["totals"]
    assert saved["unpriced_records"] == 1 and saved["cached_input_tokens"] == 1800 + 1000 + 900 + 500
    assert saved["prompt_cache_usd"] == pytest.approx(0.00711, abs=1e-12)


@pytest.mark.django_db
def test_an_org_scoped_operator_sees_only_its_orgs_savings(records, client, django_user_model):
    from django.contrib.auth.models import Permission

    for name in ("acme", "globex"):
        Org.objects.get_or_create(name=name)
    user = django_user_model.objects.create_user("sv-op", password="pw-sv-op-123", is_staff=True)
    user.groups.add(ensure_operators_group())
    user.user_permissions.add(Permission.objects.get(codename="view_usagerecord"))
    OperatorScope.objects.create(user=user).orgs.set([Org.objects.get(name="globex")])
    client.force_login(user)
    saved = _data(client)["savings"]
    assert [row["org"] for row in saved["orgs"]] == ["globex"]
    assert saved["totals"]["prompt_cache_usd"] == pytest.approx(0.00225, abs=1e-12)
    assert saved["totals"]["response_cache_usd"] == 0 and saved["totals"]["response_cache_hits"] == 0
    html = client.get("/dashboard/analytics/?range=hour").content.decode()
    assert "acme" not in html and 'id="t-saved">$0.002250<' in html


@pytest.mark.django_db
def test_the_management_apis_usage_rows_carry_the_savings(records, client):
    everyone = create_management_token(name="sv-all", scope="read")[1]
    response = client.get("/api/v1/usage?group_by=org", headers={"authorization": f"Bearer {everyone}"})
    rows = {row["org"]: row for row in response.json()["data"]}
    assert rows["acme"]["prompt_cache_saved_usd"] == pytest.approx(0.00486, abs=1e-12)
    assert rows["acme"]["response_cache_saved_usd"] == pytest.approx(0.0045, abs=1e-12)
    assert rows["globex"]["prompt_cache_saved_usd"] == pytest.approx(0.00225, abs=1e-12)
    by_model = client.get("/api/v1/usage?group_by=model", headers={"authorization": f"Bearer {everyone}"}).json()
    models = {row["model"]: row for row in by_model["data"]}
    assert models["sv-plain"]["prompt_cache_saved_usd"] == 0
    assert models["sv-chat"]["cached_input_tokens"] == 2800
    globex = Org.objects.get_or_create(name="globex")[0]
    scoped = create_management_token(name="sv-globex", scope="read", org=globex)[1]
    only = client.get("/api/v1/usage?group_by=org", headers={"authorization": f"Bearer {scoped}"}).json()["data"]
    assert [row["org"] for row in only] == ["globex"] and only[0]["prompt_cache_saved_usd"] == pytest.approx(0.00225)


def test_a_deployments_negotiated_prices_price_its_records():
    from routing.ops.usage.savings import prices_of

    document = {
        "providers": [
            {"name": "east", "base_url": "http://127.0.0.1:9/v1"},
            {"name": "west", "base_url": "http://127.0.0.1:9/v1"},
        ],
        "models": [
            {
                "id": "dep-chat",
                "capabilities": ["chat"],
                "input_price_per_mtok": 3.0,
                "output_price_per_mtok": 15.0,
                "cache_read_price_per_mtok": 0.3,
                "deployments": [
                    {"provider": "east", "upstream_model": "x"},
                    {"provider": "west", "upstream_model": "x", "prices": {"input": 2.0, "cache_read": 0.1}},
                ],
            }
        ],
    }
    snap = build_snapshot(document, [], os.environ, version=1, config_version=1)
    input_price, _, classes = prices_of(snap, "dep-chat", "west", "deployment", now=0.0)
    assert (input_price, classes.cache_read) == (2.0, 0.1)
    input_price, _, classes = prices_of(snap, "dep-chat", "east", "", now=0.0)
    assert (input_price, classes.cache_read) == (3.0, 0.3)
    assert prices_of(snap, "gone", "east", "", now=0.0) is None
