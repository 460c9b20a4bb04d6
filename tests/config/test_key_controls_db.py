"""An API key's controls from the database to the snapshot: validation, rotation, spend per key
(docs/limits.md#keys)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from policies.keys import KeyProblems, create_api_key, hash_key, rotate_key, update_key
from policies.models import Agent, ApiKey, Org
from routing.config.document import key_rows_from_db
from routing.config.snapshot import build_snapshot
from routing.models import UsageRecord
from routing.runtime.cluster.shared_limits import query_spend

pytestmark = pytest.mark.django_db
DOC = {"orgs": [{"name": "acme", "agents": [{"name": "bot"}]}]}


@pytest.fixture
def agent():
    return Agent.objects.create(org=Org.objects.create(name="acme"), name="bot")


def snapshot():
    return build_snapshot(DOC, key_rows_from_db(), {}, version=1)


def test_a_keys_controls_reach_the_snapshot(agent):
    key, secret = create_api_key(
        agent=agent, label="ci", limits={"rpm": 10}, budget={"usd": 0.5, "period": "day"}, models=["gpt-*"]
    )
    spec = snapshot().keys[hash_key(secret)]
    assert (spec.prefix, spec.limits, spec.budget) == (key.prefix, (10, None), (0.5, "day"))
    assert spec.allows("gpt-4o") and not spec.allows("claude")
    update_key(key, {"enabled": False, "models": None})
    spec = snapshot().keys[hash_key(secret)]
    assert not spec.enabled and spec.models is None


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"limits": {"rpm": 0}}, "limits.rpm"),
        ({"limits": {"rpx": 3}}, "limits.rpx"),
        ({"budget": {"usd": 5}}, "budget.period"),
        ({"models": ["[a-"]}, "models[0]"),
        ({"models": "gpt-*"}, "models"),
        ({"metadata": [1]}, "metadata"),
        ({"enabled": "yes"}, "enabled"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_controls_are_refused_by_the_one_validation_naming_the_field(agent, changes, path):
    key, _ = create_api_key(agent=agent)
    with pytest.raises(KeyProblems) as refused:
        update_key(key, changes)
    assert path in [p for p, _ in refused.value.problems]


def test_rotation_keeps_the_prefix_and_the_old_secret_for_its_grace_only(agent):
    key, old = create_api_key(agent=agent)
    new = rotate_key(key, grace_s=60)
    assert new.startswith(key.prefix) and new != old
    keys = snapshot().keys
    assert keys[hash_key(new)].prefix == keys[hash_key(old)].prefix == key.prefix
    assert keys[hash_key(old)].rotated and keys[hash_key(old)].expires_at <= timezone.now().timestamp() + 60
    newest = rotate_key(ApiKey.objects.get(pk=key.pk), grace_s=0)
    keys = snapshot().keys
    assert set(keys) == {hash_key(newest)}  # no grace: both earlier secrets are gone


def test_a_rotated_keys_old_secret_dies_with_the_key_when_the_key_expires_within_the_grace(agent):
    """The grace never outlives the key: rotating a key that expires in a minute with an hour's grace
    leaves its old secret valid until the key's expiry, not an hour (found by mutation testing)."""
    from routing.core.errors import GatewayError
    from routing.gateway.request import authenticate

    expires = timezone.now() + dt.timedelta(minutes=1)
    key, old = create_api_key(agent=agent, expires_at=expires)
    rotate_key(key, grace_s=3600)
    spec = snapshot().keys[hash_key(old)]
    assert spec.rotated and spec.expires_at == pytest.approx(expires.timestamp(), abs=0.001)
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))  # it expired
    with pytest.raises(GatewayError) as refused:
        authenticate(snapshot(), f"Bearer {old}".encode())
    assert refused.value.status == 401 and "expired" in str(refused.value)


def test_a_revoked_key_leaves_the_snapshot_with_its_rotated_secret(agent):
    key, old = create_api_key(agent=agent)
    rotate_key(key, grace_s=60)
    ApiKey.objects.filter(pk=key.pk).update(revoked=True)
    assert snapshot().keys == {}


def test_the_spend_of_the_usage_records_is_read_per_key(agent, monkeypatch):
    import django.db

    monkeypatch.setattr(django.db, "close_old_connections", lambda: None)  # the test's own transaction
    key, _ = create_api_key(agent=agent)
    now = timezone.now()
    for prefix, cost in ((key.prefix, "0.25"), (key.prefix, "0.5"), ("sb-other00", "1")):
        UsageRecord.objects.create(
            created_at=now, org="acme", agent="bot", key_prefix=prefix, endpoint="chat", status=200, cost=Decimal(cost)
        )
    start = (now - dt.timedelta(hours=1)).timestamp()
    spend = query_spend([start])
    assert spend[(("key", key.prefix), start)] == pytest.approx(0.75)
    assert spend[(("agent", "acme", "bot"), start)] == pytest.approx(1.75)
    assert spend[(("org", "acme"), start)] == pytest.approx(1.75)
