"""The admin's configuration history: who changed what through the admin, the diff pages, rollback."""

from __future__ import annotations

import copy
import html

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from providers.models import Model
from routing.config.store import export_document, import_document
from routing.models import ConfigRevision
from tests.config.admin_helpers import page_data
from tests.config.conftest import VALID

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return html.unescape(response.content.decode())


@pytest.fixture
def two_versions():
    import_document(copy.deepcopy(VALID))
    doc = copy.deepcopy(VALID)
    doc["models"][1]["upstream_model"] = "gpt-4.1"
    import_document(doc)
    return ConfigRevision.objects.get(version=1), ConfigRevision.objects.get(version=2)


@pytest.fixture
def root(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("hist-root", password="pw-hist-123"))
    return client


def staff(client, django_user_model, name, *codenames):
    user = django_user_model.objects.create_user(name, password="pw-staff-123", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="routing", codename__in=codenames))
    client.force_login(user)
    return client


def test_an_admin_save_is_one_version_by_the_admin_user(root, two_versions):
    model = Model.objects.get(public_id="chat-b")
    url = reverse("admin:providers_model_change", args=[model.pk])
    data = page_data(root.get(url))
    data["context_window"] = "64000"
    assert root.post(url, data).status_code == 302
    revision = ConfigRevision.objects.get(version=3)
    assert (revision.author, revision.source) == ("hist-root", "admin")
    assert [c["path"] for c in revision.changes] == ["models[chat-b].context_window"]


def test_the_history_pages_list_versions_and_show_each_diff(root, two_versions):
    _, second = two_versions
    listing = text(root.get(reverse("admin:routing_configrevision_changelist")))
    assert "~ models[chat-b].upstream_model" in listing and "import" in listing
    page = text(root.get(reverse("admin:routing_configrevision_change", args=[second.pk])))
    assert 'data-path="models[chat-b].upstream_model"' in page and "gpt-4o" in page and "gpt-4.1" in page
    assert "(current)" in page and "rollback-link" not in page  # nothing to roll back to on the newest


def test_the_history_footer_counts_versions_in_plain_english(root, two_versions):
    import re

    changelist = reverse("admin:routing_configrevision_changelist")
    footer = re.search(r'<p class="paginator" id="history-count">(.*?)</p>', text(root.get(changelist)), re.S)
    assert " ".join(footer.group(1).split()) == "2 versions"
    ConfigRevision.objects.filter(version=1).delete()
    footer = re.search(r'<p class="paginator" id="history-count">(.*?)</p>', text(root.get(changelist)), re.S)
    assert " ".join(footer.group(1).split()) == "1 version"


def test_rollback_asks_first_then_restores_as_a_new_version(root, two_versions):
    first, _ = two_versions
    url = reverse("admin:routing_configrevision_rollback", args=[first.pk])
    page = text(root.get(reverse("admin:routing_configrevision_change", args=[first.pk])))
    assert url in page
    confirm = text(root.get(url))
    assert "Yes, roll back to version 1" in confirm and 'data-path="models[chat-b].upstream_model"' in confirm
    assert ConfigRevision.objects.count() == 2  # the confirmation page changed nothing
    response = root.post(url)
    third = ConfigRevision.objects.get(version=3)
    assert response.status_code == 302 and response["Location"].endswith(f"/{third.pk}/change/")
    assert (third.author, third.source) == ("hist-root", "rollback")
    assert export_document()["models"][1]["upstream_model"] == "gpt-4o"
    assert "Rolled back to version 1: recorded as version 3" in text(root.get(response["Location"]))


def test_a_refused_rollback_says_why_and_changes_nothing(root, two_versions, settings):
    first, _ = two_versions
    settings.SWITCHBOARD_SECRET_ENV_PREFIX = "OTHER_"
    url = reverse("admin:routing_configrevision_rollback", args=[first.pk])
    page = text(root.get(url))
    assert "version 1 no longer validates" in page and "rollback-confirm" not in page
    response = root.post(url, follow=True)
    assert "version 1 no longer validates" in text(response)
    assert ConfigRevision.objects.count() == 2


def test_viewing_needs_the_view_permission_and_rolling_back_needs_rollback_config(
    client, django_user_model, two_versions
):
    first, _ = two_versions
    rollback = reverse("admin:routing_configrevision_rollback", args=[first.pk])
    detail = reverse("admin:routing_configrevision_change", args=[first.pk])
    staff(client, django_user_model, "no-perms")
    assert client.get(reverse("admin:routing_configrevision_changelist")).status_code == 403
    assert client.post(rollback).status_code == 403

    staff(client, django_user_model, "viewer", "view_configrevision")
    assert client.get(detail).status_code == 200 and rollback not in text(client.get(detail))
    assert client.get(rollback).status_code == 403 and client.post(rollback).status_code == 403
    assert ConfigRevision.objects.count() == 2

    staff(client, django_user_model, "roller", "view_configrevision", "rollback_config")
    assert rollback in text(client.get(detail))
    assert client.post(rollback).status_code == 302
    assert ConfigRevision.objects.get(version=3).author == "roller"


def test_the_changelist_action_leads_to_the_same_confirmation(root, two_versions):
    first, second = two_versions
    changelist = reverse("admin:routing_configrevision_changelist")
    response = root.post(changelist, {"action": "roll_back_to_selected", "_selected_action": [first.pk]})
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:routing_configrevision_rollback", args=[first.pk])
    both = root.post(
        changelist, {"action": "roll_back_to_selected", "_selected_action": [first.pk, second.pk]}, follow=True
    )
    assert "Select exactly one version" in text(both) and ConfigRevision.objects.count() == 2


def test_the_action_is_offered_only_with_the_rollback_permission(client, django_user_model, two_versions):
    changelist = reverse("admin:routing_configrevision_changelist")
    staff(client, django_user_model, "viewer2", "view_configrevision")
    assert "roll_back_to_selected" not in text(client.get(changelist))
    staff(client, django_user_model, "roller2", "view_configrevision", "rollback_config")
    assert "roll_back_to_selected" in text(client.get(changelist))


def test_a_rollback_that_removes_live_keys_needs_the_confirmation_box(root):
    from policies.models import Agent, ApiKey

    import_document(copy.deepcopy(VALID))
    doc = copy.deepcopy(VALID)
    doc["orgs"].append({"name": "beta", "agents": [{"name": "bot"}]})
    import_document(doc)
    ApiKey.objects.create(agent=Agent.objects.get(org__name="beta"), key_hash="k" * 64, prefix="sb-beta")
    url = reverse("admin:routing_configrevision_rollback", args=[ConfigRevision.objects.get(version=1).pk])
    confirm = text(root.get(url))
    assert 'id="rollback-remove-keys"' in confirm and "their 1 active API key(s) stop working" in confirm
    refused = text(root.post(url, follow=True))  # the button without the box
    assert (
        "removes agent(s) beta/bot and their 1 active API key(s)" in refused and "Tick the confirmation box" in refused
    )
    assert ApiKey.objects.count() == 1 and ConfigRevision.objects.count() == 2
    assert root.post(url, {"remove_keys": "yes"}).status_code == 302
    assert not ApiKey.objects.exists() and ConfigRevision.objects.count() == 3
