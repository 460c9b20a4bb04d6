"""The audit log (docs/audit.md): every write — management API, admin, commands, import, rollback,
breaker controls — and every login attempt is exactly one append-only record saying who, from
where, what and which fields, never a secret; readable in the admin and at GET /api/v1/audit."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client

from policies.models import ApiKey, ManagementToken, Org
from policies.tokens import create_management_token
from routing.config import audit
from routing.config.store import import_document
from routing.models import AuditRecord, ConfigRevision

pytestmark = pytest.mark.django_db(transaction=True)
DOC = {
    "providers": [{"name": "mock", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [{"id": "chat-a", "provider": "mock", "upstream_model": "x", "capabilities": ["chat"]}],
    "orgs": [
        {"name": "acme", "agents": [{"name": "bot"}], "policies": [{"pattern": "chat-*", "action": "allow"}]},
        {"name": "beta", "agents": [{"name": "bot"}]},
    ],
}
SECRET_MARKERS = ("sk-", "sbm-", "pbkdf2", "password")


@pytest.fixture
def setup():
    import_document(DOC)


def token_client(name: str = "ci", org: str | None = None) -> Client:
    _, secret = create_management_token(name=name, scope="write", org=Org.objects.get(name=org) if org else None)
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR="10.1.2.3")


def new_records(before: int) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(id__gt=before).order_by("id"))


def last_id() -> int:
    return AuditRecord.objects.order_by("-id").values_list("id", flat=True).first() or 0


def one_record(before: int) -> AuditRecord:
    records = new_records(before)
    assert len(records) == 1, [str(r) for r in records]
    assert not any(m in json.dumps([r.detail, r.object_repr, r.fields]) for r in records for m in SECRET_MARKERS)
    return records[0]


def test_every_management_api_write_is_one_record_by_the_token_from_its_address(setup):
    api = token_client()
    mark = last_id()
    created = api.post("/api/v1/keys", {"org": "acme", "agent": "bot"}, content_type="application/json")
    assert created.status_code == 201, created.content
    key_id, secret = created.json()["id"], created.json()["secret"]
    record = one_record(mark)
    assert (record.action, record.object_type, record.object_id) == ("create", "policies.apikey", str(key_id))
    assert (record.actor, record.source, record.remote_addr, record.org) == ("token:ci", "api", "10.1.2.3", "acme")
    assert secret not in json.dumps([record.object_repr, record.detail])

    steps = [
        ("patch", f"/api/v1/keys/{key_id}", {"limits": {"rpm": 5}}, "update", "policies.apikey"),
        ("post", f"/api/v1/keys/{key_id}/rotate", {}, "rotate", "policies.apikey"),
        ("post", f"/api/v1/keys/{key_id}/revoke", {}, "revoke", "policies.apikey"),
        ("patch", "/api/v1/orgs/acme", {"policies": [{"pattern": "*", "action": "allow"}]}, None, None),
        ("post", "/api/v1/orgs/acme/agents", {"name": "helper"}, "create", "policies.agent"),
    ]
    for method, path, payload, action, object_type in steps:
        mark = last_id()
        etag = api.get(path.removesuffix("/rotate").removesuffix("/revoke")).get("ETag", "")
        response = getattr(api, method)(path, payload, content_type="application/json", HTTP_IF_MATCH=etag)
        assert response.status_code in (200, 201), (path, response.content)
        record = one_record(mark)  # one write, one record, however many rows it touched
        assert record.actor == "token:ci" and record.source == "api", path
        if action is not None:
            assert (record.action, record.object_type) == (action, object_type), path
    assert "limits" in AuditRecord.objects.get(action="update", object_type="policies.apikey").fields


def test_a_refused_write_leaves_no_record(setup):
    api = token_client()
    mark = last_id()
    refused = api.post("/api/v1/keys", {"org": "acme", "agent": "nobody"}, content_type="application/json")
    assert refused.status_code in (400, 404)
    assert new_records(mark) == []


def test_admin_writes_and_logins_are_recorded_with_the_user_and_address(setup):
    User.objects.create_superuser("root", password="right-horse")
    browser = Client(REMOTE_ADDR="192.0.2.7")
    mark = last_id()
    assert not browser.login(username="root", password="wrong")  # the test client sends the signal too
    failed = one_record(mark)
    assert (failed.action, failed.actor, failed.source) == ("login_failed", "root", "login")

    mark = last_id()
    response = browser.post("/admin/login/", {"username": "root", "password": "right-horse", "next": "/admin/"})
    assert response.status_code == 302
    login = one_record(mark)  # the login, not also an "update" of last_login
    assert (login.action, login.actor, login.remote_addr) == ("login", "root", "192.0.2.7")

    org = Org.objects.get(name="beta")
    mark = last_id()
    page = browser.get(f"/admin/policies/org/{org.pk}/change/")
    assert page.status_code == 200
    form = {k: v for k, v in page.context["adminform"].form.initial.items() if v is not None}
    data = {**{k: v for k, v in form.items() if not isinstance(v, list | dict)}, "name": "beta"}
    data["weight"] = "2.5"
    for formset in page.context["inline_admin_formsets"]:
        mgmt = formset.formset.management_form
        prefix = mgmt.prefix
        data.update({f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"})
        data.update({f"{prefix}-MIN_NUM_FORMS": "0", f"{prefix}-MAX_NUM_FORMS": "1000"})
    saved = browser.post(f"/admin/policies/org/{org.pk}/change/", data)
    assert saved.status_code == 302, saved.content[:2000]
    record = one_record(mark)
    assert (record.actor, record.source, record.remote_addr) == ("root", "admin", "192.0.2.7")
    assert (record.action, record.object_type, record.org) == ("update", "policies.org", "beta")


def test_commands_imports_and_rollbacks_are_one_record_each(setup, tmp_path):
    mark = last_id()
    out = io.StringIO()
    call_command("create_api_key", "--org", "acme", "--agent", "bot", stdout=out)
    record = one_record(mark)
    assert (record.action, record.object_type) == ("create", "policies.apikey")

    mark = last_id()
    changed = {**DOC, "orgs": [*DOC["orgs"], {"name": "gamma", "agents": [{"name": "a"}, {"name": "b"}]}]}
    import_document(changed)
    record = one_record(mark)  # the import is one change, however many rows
    assert record.action == "import" and record.object_type == "configuration"
    assert any("gamma" in path for path in record.fields)

    version = ConfigRevision.objects.order_by("version").first().version
    mark = last_id()
    call_command("config_rollback", str(version), stdout=io.StringIO())
    record = one_record(mark)
    assert record.action == "rollback" and record.object_repr.startswith("v")


def test_breaker_controls_and_token_writes_are_recorded(setup, process):
    from routing.config import live

    live.rebuild_from_db("test")
    api = token_client()
    mark = last_id()
    response = api.post(
        "/api/v1/breakers/force-open",
        {"key": ["mock", "chat-a"], "reason": "maintenance"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    record = one_record(mark)
    assert (record.action, record.object_repr, record.source) == ("breaker_force_open", "mock/chat-a", "api")

    mark = last_id()
    token, _ = create_management_token(name="later", scope="read")
    assert one_record(mark).action == "create"
    mark = last_id()
    token.revoked = True
    token.save()
    assert one_record(mark).action == "revoke"


def test_records_are_append_only_for_the_orm_and_the_database(setup):
    record = audit.write("login", actor=audit.Actor("root", "login"), object_type="auth.user")
    with pytest.raises(PermissionError):
        record.save()
    with pytest.raises(PermissionError):
        record.delete()
    with pytest.raises(PermissionError):
        AuditRecord.objects.filter(pk=record.pk).update(actor="someone else")
    with pytest.raises(PermissionError):
        AuditRecord.objects.all().delete()
    with pytest.raises(Exception, match="append-only"), connection.cursor() as cursor:
        cursor.execute("UPDATE routing_auditrecord SET actor = 'x' WHERE id = %s", [record.pk])
    assert AuditRecord.objects.get(pk=record.pk).actor == "root"


def test_every_configuration_and_credential_model_in_the_admin_is_audited():
    from django.contrib import admin

    from routing.ops.admin_base import ReadOnlyAdmin

    editable = [m for m, a in admin.site._registry.items() if not isinstance(a, ReadOnlyAdmin)]
    ours = [m for m in editable if m._meta.app_label in ("policies", "providers", "routing", "auth")]
    assert ours and all(audit.audited(m) for m in ours), [m._meta.label for m in ours if not audit.audited(m)]
    assert ApiKey in audit.audited_models() and ManagementToken in audit.audited_models()
    assert not audit.audited(AuditRecord)


def test_the_api_and_the_admin_export_read_the_log(setup):
    api = token_client()
    api.post("/api/v1/keys", {"org": "acme", "agent": "bot"}, content_type="application/json")
    listing = api.get("/api/v1/audit", {"source": "api"})
    assert listing.status_code == 200
    data = listing.json()["data"]
    assert data and data[0]["actor"] == "token:ci" and data[0]["action"] == "create"
    scoped = token_client(name="tenant", org="acme").get("/api/v1/audit")
    assert scoped.status_code == 403  # the log names every org's operators

    User.objects.create_superuser("root", password="right-horse")
    browser = Client()
    browser.force_login(User.objects.get(username="root"))
    ids = [str(r.pk) for r in AuditRecord.objects.all()]
    exported = browser.post("/admin/routing/auditrecord/", {"action": "export_csv", "_selected_action": ids})
    assert exported.status_code == 200 and exported["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert len(rows) == len(ids) and {"actor", "action", "object_type", "fields"} <= set(rows[0])
    lines = browser.post("/admin/routing/auditrecord/", {"action": "export_jsonl", "_selected_action": ids})
    assert len(lines.content.splitlines()) == len(ids)
    assert browser.get("/admin/routing/auditrecord/add/").status_code == 403
