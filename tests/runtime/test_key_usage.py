"""Per-key requests, spend and last use: added by the usage writer per batch, shown in the key list."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from routing.models import KeyUsage, UsageRecord
from routing.runtime import usage

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC).timestamp()


def row(n: int, prefix: str = "sb-abcdefg", **fields):
    return {
        "record_id": f"k{prefix}{n}",
        "request_id": f"k{n}",
        "created_at": T0 + n,
        "endpoint": "chat",
        "org": "acme",
        "agent": "bot",
        "key_prefix": prefix,
        "status": 200,
        "cost": 0.25,
        **fields,
    }


@pytest.mark.django_db(transaction=True)
def test_batches_add_up_per_key_and_replays_do_not_count_twice():
    usage.db_insert([row(1), row(2, cost=None), row(3, prefix="sb-zzzzzzz"), row(4, key_prefix="")])
    usage.db_insert([row(5, cost="0.5"), row(2, cost=None)])  # row 2 replayed (after an outage, say)
    usage.db_insert([row(1), row(5, cost="0.5")])  # a whole batch replayed
    mine = KeyUsage.objects.get(key_prefix="sb-abcdefg", org="acme", agent="bot")
    assert mine.requests == 3 and mine.spend == Decimal("0.75")
    assert mine.last_used_at == datetime.fromtimestamp(T0 + 5, tz=UTC)
    assert KeyUsage.objects.get(key_prefix="sb-zzzzzzz").requests == 1
    assert KeyUsage.objects.count() == 2  # the row without a key counts for no key
    # the totals are exactly what the records say
    assert UsageRecord.objects.filter(key_prefix="sb-abcdefg").count() == mine.requests


@pytest.mark.django_db(transaction=True)
def test_an_older_batch_does_not_move_last_used_back():
    usage.db_insert([row(10)])
    usage.db_insert([row(3)])  # spooled during an outage, written later
    assert KeyUsage.objects.get().last_used_at == datetime.fromtimestamp(T0 + 10, tz=UTC)


@pytest.mark.django_db
def test_key_list_shows_last_used_requests_and_spend(client, django_user_model):
    from policies.keys import create_api_key
    from policies.models import Agent, Org

    org = Org.objects.create(name="acme")
    agent = Agent.objects.create(org=org, name="bot")
    used, _ = create_api_key(agent=agent, label="used-key")
    create_api_key(agent=agent, label="idle-key")
    KeyUsage.objects.create(
        key_prefix=used.prefix,
        org="acme",
        agent="bot",
        requests=42,
        spend=Decimal("1.5"),
        last_used_at=datetime(2026, 5, 4, 3, 2, tzinfo=UTC),
    )
    KeyUsage.objects.create(key_prefix=used.prefix, org="other", agent="bot", requests=7)  # same prefix elsewhere
    admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw-root-123")
    client.force_login(admin)
    html = client.get("/admin/policies/apikey/").content.decode()
    rows = {label: tr for tr in html.split("<tr")[1:] for label in ("used-key", "idle-key") if label in tr}
    assert '<td class="field-requests">42</td>' in rows["used-key"]
    assert '<td class="field-spend">$1.5000</td>' in rows["used-key"]
    assert '<td class="field-last_used">2026-05-04 03:02</td>' in rows["used-key"]
    assert '<td class="field-last_used">never</td>' in rows["idle-key"]
    assert '<td class="field-requests">0</td>' in rows["idle-key"]
    page = client.get(f"/admin/policies/apikey/{used.pk}/change/").content.decode()
    assert "42" in page and "$1.5000" in page
