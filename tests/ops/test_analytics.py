"""The analytics page and the request log: aggregates over usage records, filters, permission, trail."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum

from routing.models import UsageRecord
from routing.ops.usage import analytics, browse
from routing.runtime import usage
from routing.runtime.usage import rollup

# A fixed "now" in the middle of a minute, so bucket arithmetic is exact.
NOW = datetime(2026, 6, 1, 12, 30, 30, tzinfo=UTC)


def rec(minutes_ago: float, **fields) -> UsageRecord:
    """One usage record, written as the gateway's usage writer writes it (aggregates included)."""
    defaults = {
        "request_id": f"r-{minutes_ago}-{fields.get('status', 200)}-{UsageRecord.objects.count()}",
        "created_at": NOW - timedelta(minutes=minutes_ago),
        "endpoint": "chat",
        "org": "acme",
        "agent": "bot",
        "key_prefix": "sk-abc",
        "requested_model": "op-chat",
        "model_used": "op-chat",
        "provider": "op-a",
        "status": 200,
        "latency_ms": 100.0,
    }
    defaults.update(fields)
    defaults.setdefault("record_id", defaults["request_id"][-32:])
    usage.db_insert([defaults])
    return UsageRecord.objects.get(record_id=defaults["record_id"])


def view(**params) -> analytics.View:
    return analytics.View.parse(params, now=NOW.timestamp())


@pytest.mark.django_db
def test_hourly_view_buckets_by_minute_with_errors_tokens_and_spend():
    rec(0, prompt_tokens=10, completion_tokens=5, cost="0.001")
    rec(0, status=502, error_code="upstream_unavailable", latency_ms=300.0)
    rec(2, fallback_reason="upstream_5xx", model_used="op-chat-b", provider="op-b", cost="0.002")
    rec(2, status=429)
    rec(90)  # outside the hour
    data = analytics.build(view(range="hour"))
    assert len(data["buckets"]) == 60 and data["step_s"] == 60
    assert data["buckets"][-1] == int(NOW.replace(second=0).timestamp())
    assert data["requests"][-1] == 2 and data["errors"][-1] == 1
    assert data["requests"][-3] == 2 and data["fallbacks"][-3] == 1 and data["client_errors"][-3] == 1
    assert sum(data["requests"]) == 4
    assert data["prompt_tokens"][-1] == 10 and data["completion_tokens"][-1] == 5
    assert data["cost"][-1] == pytest.approx(0.001) and data["cost"][-3] == pytest.approx(0.002)
    assert data["totals"]["requests"] == 4 and data["totals"]["error_rate"] == pytest.approx(0.25)
    # p50 of [100, 300] interpolates like percentile_cont; p95 lies near the top
    assert data["p50"][-1] == pytest.approx(200.0) and data["p95"][-1] == pytest.approx(290.0)
    assert data["p50"][0] is None  # an empty bucket has no latency, not zero


@pytest.mark.django_db
def test_filters_narrow_every_chart_and_the_top_tables():
    rec(1, cost="0.5")
    rec(1, org="globex", key_prefix="sk-glo", cost="2")
    rec(1, org="globex", key_prefix="sk-glo", model_used="op-chat-b", cost="1")
    only_globex = analytics.build(view(range="day", org="globex"))
    assert sum(only_globex["requests"]) == 2
    assert [r["model_used"] for r in only_globex["top"]["models"]] == ["op-chat", "op-chat-b"]
    everything = analytics.build(view(range="day"))
    assert [r["org"] for r in everything["top"]["orgs"]] == ["globex", "acme"]  # by spend
    assert everything["top"]["keys"][0]["key_prefix"] == "sk-glo" and everything["top"]["keys"][0]["cost"] == 3.0
    one_model = analytics.build(view(range="day", model="op-chat-b"))
    assert sum(one_model["requests"]) == 1 and one_model["totals"]["cost"] == 1.0


def test_percentile_matches_percentile_cont():
    assert analytics.percentile([], 0.5) is None
    assert analytics.percentile([7.0], 0.95) == 7.0
    assert analytics.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert analytics.percentile([float(i) for i in range(1, 101)], 0.95) == pytest.approx(95.05)


@pytest.mark.parametrize(
    ("params", "message"),
    [({"range": "year"}, "range must be one of hour, day, week, month"), ({"org": "x" * 201}, "org must be at most")],
)
def test_bad_view_parameters_name_the_parameter(params, message):
    with pytest.raises(analytics.ViewError, match=message):
        analytics.View.parse(params, now=0)


@pytest.mark.django_db
def test_analytics_page_needs_the_usage_permission(client, snapshot, staff_user, viewer_user, plain_user):
    assert client.get("/dashboard/analytics/").status_code == 302
    client.force_login(plain_user)
    assert client.get("/dashboard/analytics/").status_code == 403
    client.force_login(viewer_user)  # staff, but no routing.view_usagerecord
    response = client.get("/dashboard/analytics/")
    assert response.status_code == 403 and b"routing.view_usagerecord" in response.content
    client.force_login(staff_user)  # the Operators group holds it
    assert client.get("/dashboard/analytics/").status_code == 200


@pytest.mark.django_db
def test_analytics_page_embeds_the_series_and_vendored_uplot(client, snapshot, staff_user):
    from django.utils import timezone

    UsageRecord.objects.create(
        request_id="p1", created_at=timezone.now(), endpoint="chat", model_used="op-chat", status=200, cost="0.25"
    )
    client.force_login(staff_user)
    response = client.get("/dashboard/analytics/?range=hour")
    html = response.content.decode()
    start = html.index('<script id="analytics-data" type="application/json">')
    data = json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])
    assert sum(data["requests"]) == 1 and data["totals"]["cost"] == 0.25
    assert "/static/vendor/uplot-1.6.32/uPlot.iife.min.js" in html
    assert client.get("/static/vendor/uplot-1.6.32/uPlot.iife.min.js").status_code == 200
    assert client.get("/dashboard/analytics/?range=decade").status_code == 400


@pytest.mark.django_db
def test_csv_export_of_the_current_view(client, snapshot, staff_user):
    from django.utils import timezone

    for status in (200, 200, 503):
        UsageRecord.objects.create(
            request_id=f"c{status}", created_at=timezone.now(), endpoint="chat", org="acme", status=status
        )
    UsageRecord.objects.create(request_id="other", created_at=timezone.now(), endpoint="chat", org="zzz", status=200)
    client.force_login(staff_user)
    response = client.get("/dashboard/analytics/?range=hour&org=acme&format=csv")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["bucket_start_utc", "requests", "errors"] and len(rows) == 61
    assert sum(int(r[1]) for r in rows[1:]) == 3 and sum(int(r[2]) for r in rows[1:]) == 1


# --------------------------------------------------------------------------- request log


@pytest.mark.django_db
def test_request_log_filters_and_pages_newest_first():
    for i in range(5):
        rec(i, request_id=f"req-{i}")
    rec(0, request_id="boom", status=502, error_code="upstream_unavailable", org="globex")
    page = browse.find(browse.Search.parse({}), size=4)
    assert [r.request_id for r in page.records] == ["boom", "req-4", "req-3", "req-2"]
    older = browse.find(browse.Search.parse({"before": str(page.next_before)}), size=4)
    assert [r.request_id for r in older.records] == ["req-1", "req-0"] and older.next_before is None
    assert [r.request_id for r in browse.find(browse.Search.parse({"status": "5xx"})).records] == ["boom"]
    assert [r.request_id for r in browse.find(browse.Search.parse({"org": "globex"})).records] == ["boom"]
    assert [r.request_id for r in browse.find(browse.Search.parse({"request_id": "req-3"})).records] == ["req-3"]
    assert len(browse.find(browse.Search.parse({"status": "200", "key": "sk-abc"})).records) == 5


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "ok"}, "status must be a 3-digit HTTP status or one of 2xx, 4xx, 5xx, error"),
        ({"since": "3"}, "since must be one of"),
        ({"before": "x"}, "before must be a record number"),
    ],
)
def test_bad_search_parameters_name_the_parameter(params, message):
    with pytest.raises(browse.SearchError, match=message):
        browse.Search.parse(params)


@pytest.mark.django_db
def test_request_page_explains_the_trail(client, snapshot, staff_user):
    record = rec(
        0,
        request_id="trail-1",
        model_used="op-chat-b",
        fallback_reason="upstream_5xx",
        trail=[["op-chat", "upstream_5xx"], ["op-chat-b", "ok"]],
    )
    client.force_login(staff_user)
    listing = client.get("/dashboard/requests/?request_id=trail-1").content.decode()
    assert f'href="/dashboard/requests/{record.record_id}/"' in listing and "op-chat: upstream_5xx" in listing
    html = client.get(f"/dashboard/requests/{record.record_id}/").content.decode()
    assert 'data-model="op-chat" data-outcome="upstream_5xx" data-served="false"' in html
    assert 'data-model="op-chat-b" data-outcome="ok" data-served="true"' in html
    assert "on op-b" in html and "the provider answered 5xx" in html
    # by request id too, and a clear 404 otherwise
    assert client.get("/dashboard/requests/trail-1/").status_code == 200
    assert client.get("/dashboard/requests/nope/").status_code == 404
    assert client.get("/dashboard/requests/?status=teapot").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_the_usage_writer_stores_the_trail_it_is_handed():
    from routing.runtime import usage

    trail = [("op-chat", "circuit_open"), ("op-chat-b", "upstream_429"), ("op-chat-c", "ok")]
    base = {"created_at": NOW.timestamp(), "endpoint": "chat", "status": 200}
    usage.db_insert(
        [
            {**base, "record_id": "w1", "request_id": "w1", "trail": trail},
            {**base, "record_id": "w2", "request_id": "w2", "trail": [["bad\x00id", "ok"]]},
            {**base, "record_id": "w3", "request_id": "w3"},
        ]
    )
    stored = {r.record_id: r.trail for r in UsageRecord.objects.all()}
    assert stored == {"w1": [list(t) for t in trail], "w2": [["bad\\x00id", "ok"]], "w3": []}


# --------------------------------------------------------------------------- hourly aggregates


def rollup_table() -> list[tuple]:
    from routing.models import UsageRollup

    fields = ["grouping", "bucket", *rollup.DIMENSIONS, *rollup.COUNTERS, *rollup.LAT_FIELDS]
    return sorted(
        tuple(float(v) if hasattr(v, "as_tuple") else v for v in row)
        for row in UsageRollup.objects.values_list(*fields)
    )


@pytest.mark.django_db
def test_longer_ranges_read_the_hourly_aggregates_and_agree_with_the_records():
    latencies = [40.0, 80.0, 120.0, 250.0, 900.0, 1500.0, 3000.0]
    for i, ms in enumerate(latencies):
        rec(60 * 3 + i, latency_ms=ms, cost="0.01", prompt_tokens=10, completion_tokens=2)
    rec(60 * 5, status=503, org="globex", key_prefix="sb-globex1", model_used="op-chat-b", provider="op-b")
    rec(60 * 5, status=429, fallback_reason="upstream_5xx", org="globex", key_prefix="sb-globex1")
    day = view(range="day")
    assert day.uses_rollup and not view(range="hour").uses_rollup
    data = analytics.build(day)
    hours_ago = lambda h: data["buckets"].index(int(NOW.replace(minute=0, second=0).timestamp()) - h * 3600)  # noqa: E731
    i3, i5 = hours_ago(3), hours_ago(5)
    assert data["requests"][i3] == 7 and data["cost"][i3] == pytest.approx(0.07) and data["prompt_tokens"][i3] == 70
    assert data["requests"][i5] == 2 and data["errors"][i5] == 1 and data["client_errors"][i5] == 1
    assert data["fallbacks"][i5] == 1 and sum(data["requests"]) == 9
    # p50 / p95 from the histogram: within one of its buckets (x sqrt 2) of the exact 250 and 2550 ms
    assert data["p50"][i3] == pytest.approx(250.0, rel=0.42)
    assert data["p95"][i3] == pytest.approx(2550.0, rel=0.42)
    # filters pick a grouping that holds them
    globex = analytics.build(view(range="week", org="globex"))
    assert sum(globex["requests"]) == 2 and [r["key_prefix"] for r in globex["top"]["keys"]] == ["sb-globex1"]
    both = analytics.build(view(range="month", org="globex", model="op-chat-b"))
    assert sum(both["requests"]) == 1 and both["totals"]["errors"] == 1
    assert [r["org"] for r in data["top"]["orgs"]] == ["acme", "globex"]


def test_grouping_for_takes_the_smallest_that_holds_the_columns():
    assert rollup.grouping_for([]) == "all"
    assert rollup.grouping_for(["org"]) == "org"
    assert rollup.grouping_for(["agent"]) == "key"
    assert rollup.grouping_for(["key_prefix", "org", "agent"]) == "key"
    assert rollup.grouping_for(["provider"]) == "model"
    assert rollup.grouping_for(["org", "model_used"]) == "full"


def test_histogram_percentiles_stay_close_to_exact_ones():
    import random

    rng = random.Random(3)
    values = sorted(20 + rng.random() * rng.random() * 4000 for _ in range(5000))
    hist = [0] * rollup.LATENCY_BUCKETS
    for v in values:
        hist[rollup.latency_bucket(v)] += 1
    for p in (0.5, 0.95):
        assert rollup.hist_percentile(hist, p) == pytest.approx(analytics.percentile(values, p), rel=0.1)
    assert rollup.hist_percentile([0] * rollup.LATENCY_BUCKETS, 0.5) is None


@pytest.mark.django_db(transaction=True)
def test_replays_do_not_count_twice_and_rebuild_matches_what_the_writer_kept():
    rows = [
        {
            "record_id": f"rb{i}",
            "request_id": f"rb{i}",
            "created_at": (NOW - timedelta(minutes=37 * i)).timestamp(),
            "endpoint": "chat",
            "org": f"org{i % 3}",
            "key_prefix": f"sb-k{i % 4}",
            "model_used": f"m{i % 2}",
            "status": 200 if i % 5 else 502,
            "fallback_reason": "upstream_5xx" if i % 7 == 0 else "",
            "cost": 0.125,
            "prompt_tokens": i,
            "latency_ms": 10.0 * (i + 1),
        }
        for i in range(40)
    ]
    usage.db_insert(rows[:25])
    usage.db_insert(rows[20:])  # rows 20-24 replayed with the next batch
    kept = rollup_table()
    from routing.models import UsageRollup

    assert UsageRollup.objects.filter(grouping="all").aggregate(n=Sum("requests"))["n"] == 40
    assert rollup.rebuild() == len(kept)
    assert rollup_table() == kept


@pytest.mark.django_db
def test_usage_rollup_command_rebuilds_aggregates_lost_or_never_kept():
    from django.core.management import CommandError, call_command
    from django.utils import timezone

    from routing.models import UsageRollup

    now = timezone.now()
    for hours_ago in (2, 30):
        at = now - timedelta(hours=hours_ago)
        usage.db_insert(
            [
                {
                    "record_id": f"c{hours_ago}",
                    "request_id": "c",
                    "created_at": at,
                    "endpoint": "chat",
                    "org": "acme",
                    "agent": "bot",
                    "key_prefix": "sk-abc",
                    "model_used": "op-chat",
                    "status": 200,
                }
            ]
        )
    kept = rollup_table()
    UsageRollup.objects.all().delete()  # e.g. records from before the upgrade that added them
    out = io.StringIO()
    call_command("usage_rollup", stdout=out)
    assert rollup_table() == kept and "rebuilt 10 hourly aggregate rows from all usage records" in out.getvalue()
    UsageRollup.objects.filter(bucket__gte=now - timedelta(hours=3)).delete()
    call_command("usage_rollup", "--since-hours", "3", stdout=io.StringIO())
    assert len(rollup_table()) == len(kept)
    with pytest.raises(CommandError, match="--since-hours must be a positive number"):
        call_command("usage_rollup", "--since-hours", "0")


@pytest.mark.django_db
def test_stored_bodies_are_shown_to_superusers_only(client, snapshot, staff_user, django_user_model):
    record = rec(0, request_id="body-1", request_body='{"messages": "pelican"}', response_body='{"id": "r1"}')
    plain = rec(0, request_id="body-2")
    client.force_login(staff_user)  # an operator, not a superuser
    html = client.get(f"/dashboard/requests/{record.record_id}/").content.decode()
    assert 'id="bodies-hidden"' in html and "pelican" not in html
    assert 'id="no-bodies"' in client.get(f"/dashboard/requests/{plain.record_id}/").content.decode()
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw-root-123"))
    html = client.get(f"/dashboard/requests/{record.record_id}/").content.decode()
    assert 'id="request-body"' in html and "pelican" in html and "&quot;r1&quot;" in html


# --------------------------------------------------------------------------- figures against known records


@pytest.mark.django_db
@pytest.mark.parametrize("range_name", ["hour", "day"])
def test_an_embedding_without_a_completion_count_adds_its_prompt_tokens(range_name):
    rec(1, endpoint="embeddings", model_used="op-embed", prompt_tokens=8, completion_tokens=None, cost="0.001")
    rec(1, prompt_tokens=10, completion_tokens=5, cost="0.002")
    data = analytics.build(view(range=range_name))
    assert data["totals"]["prompt_tokens"] == 18 and data["totals"]["completion_tokens"] == 5
    tokens = {row["model_used"]: row["tokens"] for row in data["top"]["models"]}
    assert tokens == {"op-embed": 8, "op-chat": 15}
    assert [row["tokens"] for row in data["top"]["orgs"]] == [23]
    assert [row["tokens"] for row in data["top"]["keys"]] == [23]


@pytest.mark.django_db
@pytest.mark.parametrize("range_name", ["hour", "day", "week", "month"])
def test_millisecond_requests_read_as_milliseconds_at_every_granularity(range_name):
    for ms in (0.8, 0.9, 1.0, 1.1, 1.3) * 3:
        rec(3, latency_ms=ms)
    for _ in range(5):
        rec(3, latency_ms=40.0)  # the slow quarter: the p95
    data = analytics.build(view(range=range_name))
    p50 = [v for v in data["p50"] if v is not None]
    p95 = [v for v in data["p95"] if v is not None]
    assert len(p50) == 1 and len(p95) == 1
    # exact: 1.1 and 40 ms; from the histogram within one of its buckets (a factor sqrt 2)
    assert 1.1 / 1.42 <= p50[0] <= 1.1 * 1.42, p50
    assert 40 / 1.42 <= p95[0] <= 40 * 1.42, p95


def test_histogram_buckets_agree_with_the_bounds_at_the_bounds():
    for i, bound in enumerate(rollup.LATENCY_BOUNDS_MS):
        assert rollup.latency_bucket(bound) == i + 1  # a bound belongs to the bucket it opens
        assert rollup.latency_bucket(bound * 0.999) == i
    assert rollup.latency_bucket(0.0) == 0 and rollup.latency_bucket(10**9) == rollup.LATENCY_BUCKETS - 1
    assert rollup.LATENCY_BOUNDS_MS[0] == 0.25 and rollup.LATENCY_BOUNDS_MS[-1] == pytest.approx(131072.0)
