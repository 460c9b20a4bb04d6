"""The operator screens' figures and filters: a tiny cost never reads as free, and the
analytics and the request log find requests by the model the client *requested* (an alias,
or a model that never served), through the Django test client."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from routing.models import UsageRecord
from routing.ops.money import usd

pytestmark = pytest.mark.django_db


def test_a_cost_below_the_shown_precision_reads_less_than_not_zero():
    assert usd(Decimal("0.00002")) == "< $0.0001"
    assert usd(0.00004) == "< $0.0001"
    assert usd(Decimal("0.00002"), 6) == "$0.000020"
    assert usd(0) == usd(Decimal("0E-8")) == "$0.0000"  # free stays free
    assert usd(Decimal("0.0001")) == "$0.0001" and usd(1234.5) == "$1,234.5000"


def record(request_id: str, requested: str, used: str, status: int = 200, cost: str | None = None, **extra):
    return UsageRecord.objects.create(
        request_id=request_id,
        created_at=timezone.now() - timedelta(minutes=5),
        org="acme",
        agent="bot",
        endpoint="chat",
        requested_model=requested,
        resolved_model=used,
        model_used=used,
        status=status,
        cost=cost,
        **extra,
    )


@pytest.fixture
def staff(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("figures", password="pw-figures-1"))
    return client


def test_usage_and_analytics_show_a_tiny_spend_as_less_than_a_tenth_of_a_cent(staff, snapshot):
    record("tiny", "op-chat", "op-chat", cost="0.00002", prompt_tokens=3, completion_tokens=1)
    usage = staff.get("/dashboard/usage/").content.decode()
    assert "&lt; $0.0001" in usage and "$0.0000" not in usage
    analytics = staff.get("/dashboard/analytics/?range=hour").content.decode()
    tile = re.search(r'<strong id="t-cost">(.*?)</strong>', analytics).group(1)
    assert tile == "&lt; $0.0001"


def test_the_request_log_filters_by_the_requested_model(staff, snapshot):
    record("by-alias", "fast", "op-chat")
    record("never-served", "ghost-model", "", status=404, error_code="model_not_found")
    record("other", "op-chat-b", "op-chat-b")
    page = staff.get("/dashboard/requests/?requested=ghost-model").content.decode()
    assert "never-served" in page and "by-alias" not in page and "other" not in page
    page = staff.get("/dashboard/requests/?requested=fast").content.decode()
    assert "by-alias" in page and "never-served" not in page
    assert 'name="requested"' in page and 'value="fast"' in page


@pytest.mark.parametrize("range_", ["hour", "day", "month"])
def test_analytics_filters_by_the_requested_model_over_every_range(staff, snapshot, range_):
    record("a", "ghost-model", "", status=404, error_code="model_not_found")
    record("b", "ghost-model", "", status=404, error_code="model_not_found")
    record("c", "op-chat", "op-chat", cost="0.5")
    response = staff.get(f"/dashboard/analytics/?range={range_}&requested=ghost-model")
    assert response.status_code == 200
    assert response.context["totals"]["requests"] == 2
    assert response.context["view"].filters == {"requested": "ghost-model"}
    everything = staff.get(f"/dashboard/analytics/?range={range_}&requested=")
    assert everything.context["totals"]["requests"] in (0, 3)  # longer ranges read the aggregates (none here)
