"""First-visit papercuts of the operator pages: "View site", the favicon."""

from __future__ import annotations

import pytest


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_user("site-admin", password="pw-site-123", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_view_site_in_the_admin_header_goes_to_the_dashboard(staff_client):
    page = staff_client.get("/admin/").content.decode()
    assert 'href="/dashboard/"' in page and "View site" in page
    assert staff_client.get("/dashboard/").status_code == 200  # where it goes exists


@pytest.mark.django_db
def test_the_favicon_is_served_and_linked_from_admin_and_dashboard(staff_client):
    icon = staff_client.get("/favicon.ico")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg")
    for page in ("/admin/", "/dashboard/"):
        assert '<link rel="icon" href="/favicon.ico"' in staff_client.get(page).content.decode()
