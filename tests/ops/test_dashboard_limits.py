"""The dashboard's limits view: each org and agent against its limits and budget (docs/limits.md#dashboard)."""

from __future__ import annotations

import copy
import os
import re

import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.ops.conftest import DOCUMENT


@pytest.fixture
def limited():
    doc = copy.deepcopy(DOCUMENT)
    org = doc["orgs"][0]
    org["limits"] = {"rpm": 100}
    org["budget"] = {"usd": 10, "period": "month"}
    org["agents"] = [{"name": "bot", "limits": {"rpm": 5, "tpm": 1000}, "budget": {"usd": 2, "period": "day"}}]
    keys = [{"key_hash": "h", "prefix": "p", "org": "acme", "agent": "bot"}]
    previous = live.current()
    live.swap(build_snapshot(doc, keys, os.environ, version=8))
    proc = current()
    proc.limiter.forget()
    proc.budgets.forget()
    yield proc
    proc.limiter.forget()
    proc.budgets.forget()
    live.swap(previous)


def row(html: str, name: str) -> str:
    match = re.search(rf'<tr data-name="{re.escape(name)}"[^>]*>(.*?)</tr>', html, re.S)
    assert match, f"no row for {name}"
    return re.sub(r"\s+", " ", match.group(1))


@pytest.mark.django_db
def test_limits_view_is_staff_only_and_shows_usage_against_limits_and_budgets(client, staff_user, plain_user, limited):
    assert client.get("/dashboard/limits/").status_code == 302
    client.force_login(plain_user)
    assert client.get("/dashboard/limits/").status_code == 403

    for _ in range(3):  # three requests of 200 tokens, each reserving $0.25 on both budgets
        limited.limiter.admit("acme", (100, None), "bot", (5, 1000), lambda: 200)
        limited.budgets.admit("acme", (10.0, "month"), "bot", (2.0, "day"), 0.25).settle(0.25)
    limited.budgets.admit("acme", (10.0, "month"), "bot", (2.0, "day"), 0.5)  # in flight

    client.force_login(staff_user)
    html = client.get("/dashboard/limits/").content.decode()
    bot = row(html, "acme/bot")
    assert "2 / 5" in bot  # requests left of rpm 5 (refills one every 12 s)
    tokens_left = int(re.search(r"(\d+) / 1000", bot).group(1))
    assert 400 <= tokens_left < 450  # tokens left of tpm 1000 (refilling 16.7 a second)
    assert "$0.7500 ($0.5000) / $2.00 per day · 62%" in bot
    assert "UTC" in bot
    org = row(html, "acme")
    assert "97 / 100" in org and "$0.7500 ($0.5000) / $10.00 per month" in org
    assert "–" in org  # no tpm on the org
    assert 'id="limits-link"' in client.get("/dashboard/").content.decode()
