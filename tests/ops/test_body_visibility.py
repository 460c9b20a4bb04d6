"""Stored request and response bodies are shown to superusers only, on every page (docs/security.md#bodies).

The operator here is a real staff user who signs in with a password and holds
`routing.view_usagerecord` through the Operators group, exactly what the analytics and
request-log pages need: everything about a record but its bodies.
"""

from __future__ import annotations

import pytest

from routing.models import UsageRecord
from routing.runtime import usage

pytestmark = pytest.mark.django_db

SECRET_PROMPT = "pelican-prompt-7731"
SECRET_ANSWER = "heron-answer-4410"


@pytest.fixture
def record() -> UsageRecord:
    usage.db_insert(
        [
            {
                "request_id": "bodies-visible-1",
                "record_id": "bodies-visible-1",
                "endpoint": "chat",
                "org": "acme",
                "agent": "bot",
                "model_used": "op-chat",
                "status": 200,
                "request_body": f'{{"messages": [{{"role": "user", "content": "{SECRET_PROMPT}"}}]}}',
                "response_body": f'{{"choices": [{{"message": {{"content": "{SECRET_ANSWER}"}}}}]}}',
            }
        ]
    )
    return UsageRecord.objects.get(record_id="bodies-visible-1")


@pytest.fixture
def operator(client, staff_user):
    assert staff_user.has_perm("routing.view_usagerecord") and not staff_user.is_superuser
    assert client.login(username="op-staff", password="pw-staff-123")
    return client


@pytest.fixture
def root(client, django_user_model):
    django_user_model.objects.create_superuser("body-root", "r@example.com", "pw-root-123")
    assert client.login(username="body-root", password="pw-root-123")
    return client


def change_page(client, record: UsageRecord) -> str:
    response = client.get(f"/admin/routing/usagerecord/{record.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def test_an_operator_reads_the_record_in_the_admin_but_not_its_bodies(operator, record):
    html = change_page(operator, record)
    assert "op-chat" in html  # the rest of the record is there
    assert SECRET_PROMPT not in html and SECRET_ANSWER not in html
    assert "stored, shown to superusers only" in html


def test_an_operator_cannot_search_the_bodies_through_changelist_lookups(operator, record):
    for lookup in ("request_body__contains", "response_body__icontains", "request_body"):
        response = operator.get(f"/admin/routing/usagerecord/?{lookup}={SECRET_PROMPT[:7]}")
        assert response.status_code == 400, lookup  # Django's DisallowedModelAdminLookup
    assert operator.get("/admin/routing/usagerecord/?org=acme").status_code == 200


def test_a_superuser_reads_the_bodies_and_may_filter_on_them(root, record):
    html = change_page(root, record)
    assert SECRET_PROMPT in html and SECRET_ANSWER in html
    assert "shown to superusers only" not in html
    listing = root.get("/admin/routing/usagerecord/?request_body__contains=pelican")
    assert listing.status_code == 200
    assert f"/admin/routing/usagerecord/{record.pk}/change/" in listing.content.decode()


def test_no_other_operator_page_or_export_carries_the_bodies(operator, record):
    pages = [
        "/admin/routing/usagerecord/",
        f"/dashboard/requests/{record.record_id}/",
        "/dashboard/requests/",
        "/dashboard/analytics/?format=csv",
        "/dashboard/analytics/",
        "/dashboard/usage/",
    ]
    for page in pages:
        response = operator.get(page)
        assert response.status_code == 200, page
        text = response.content.decode()
        assert SECRET_PROMPT not in text and SECRET_ANSWER not in text, page
