"""The client address of audit records behind a proxy (docs/production.md#client-address): X-Forwarded-For
names the client only when the peer is a declared proxy; a header from anyone else is ignored."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from policies.tokens import create_management_token
from routing.config.client_address import client_address, forwarded_client, trusted_proxies
from routing.config.store import import_document
from routing.models import AuditRecord

PROXIES = trusted_proxies(["10.0.0.0/8", "2001:db8::1"])


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        ("10.0.0.5", "203.0.113.9", "203.0.113.9"),  # through the declared proxy
        ("198.51.100.7", "203.0.113.9", "198.51.100.7"),  # a direct client forging the header
        ("10.0.0.5", "6.6.6.6, 203.0.113.9", "203.0.113.9"),  # the client's own header, appended to by the proxy
        ("10.0.0.5", "203.0.113.9, 10.0.0.7", "203.0.113.9"),  # two declared proxies in a row
        ("10.0.0.5", "10.0.0.9, 10.0.0.7", "10.0.0.9"),  # only proxies: the farthest
        ("10.0.0.5", "203.0.113.9, unknown", "10.0.0.5"),  # a hop that is no address stops the walk
        ("10.0.0.5", "203.0.113.9:4711", "203.0.113.9"),  # with a port
        ("2001:db8::1", "[2001:db8::77]:443", "2001:db8::77"),
        ("::ffff:10.0.0.5", "203.0.113.9", "203.0.113.9"),  # an IPv4 peer on a dual-stack socket
        ("10.0.0.5", "", "10.0.0.5"),
    ],
)
def test_the_client_is_the_first_hop_no_declared_proxy_vouches_for(peer, forwarded_for, client):
    assert forwarded_client(peer, forwarded_for, PROXIES) == client


def test_without_declared_proxies_the_header_is_ignored():
    assert forwarded_client("10.0.0.5", "203.0.113.9", ()) == "10.0.0.5"


def test_a_bad_proxy_entry_is_refused():
    with pytest.raises(ValueError, match="10.0.0.0/33"):
        trusted_proxies(["10.0.0.0/33"])


class _Request:
    def __init__(self, **meta: str) -> None:
        self.META = meta


def test_the_request_rule_reads_the_setting(settings):
    request = _Request(REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="203.0.113.9")
    settings.SWITCHBOARD_TRUSTED_PROXIES = []
    assert client_address(request) == "10.0.0.5"
    settings.SWITCHBOARD_TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert client_address(request) == "203.0.113.9"
    assert client_address(None) == ""


@pytest.mark.django_db(transaction=True)
def test_audit_records_name_the_client_behind_a_declared_proxy_and_ignore_a_forged_header(settings):
    settings.SWITCHBOARD_TRUSTED_PROXIES = ["10.0.0.0/8"]
    import_document({"orgs": [{"name": "acme", "agents": [{"name": "bot"}]}]})
    User.objects.create_superuser("root", password="right-horse")
    behind = Client(REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9")
    assert behind.post("/admin/login/", {"username": "root", "password": "right-horse"}).status_code == 302
    assert AuditRecord.objects.filter(action="login").latest("id").remote_addr == "203.0.113.9"
    forger = Client(REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_FOR="203.0.113.9")
    forger.post("/admin/login/", {"username": "root", "password": "wrong"})
    assert AuditRecord.objects.filter(action="login_failed").latest("id").remote_addr == "198.51.100.7"

    _, secret = create_management_token(name="ci", scope="write")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="203.0.113.10")
    created = api.post("/api/v1/keys", {"org": "acme", "agent": "bot"}, content_type="application/json")
    assert created.status_code == 201, created.content
    assert AuditRecord.objects.filter(source="api").latest("id").remote_addr == "203.0.113.10"
    forged = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_FOR="1.1.1.1")
    assert (
        forged.post("/api/v1/keys", {"org": "acme", "agent": "bot"}, content_type="application/json").status_code == 201
    )
    assert AuditRecord.objects.filter(source="api").latest("id").remote_addr == "198.51.100.7"
