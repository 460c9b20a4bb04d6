"""The audit log, pinned down where tests/ops/test_audit.py leaves room: who a write is attributed to
in each context, the exact record a batch of writes becomes, which saves count as a change and what
they are called, the field lengths the columns hold, and which models are audited at all."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType

from policies.keys import create_api_key
from policies.models import Agent, ApiKey, Org, OrgPolicy
from policies.tokens import create_management_token
from routing.config import audit, recorder
from routing.models import AuditRecord, BreakerAction, UsageRecord

pytestmark = pytest.mark.django_db


def records() -> list[AuditRecord]:
    return list(AuditRecord.objects.order_by("id"))


def fresh() -> int:
    return AuditRecord.objects.order_by("-id").values_list("id", flat=True).first() or 0


def since(mark: int) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(id__gt=mark).order_by("id"))


# --- which models ----------------------------------------------------------------------------------


def test_configuration_credentials_and_accounts_are_audited_the_gateways_own_rows_are_not():
    assert audit.audited(Org) and audit.audited(ApiKey) and audit.audited(User)
    assert not audit.audited(AuditRecord) and not audit.audited(UsageRecord) and not audit.audited(BreakerAction)
    assert not audit.audited(Permission) and not audit.audited(ContentType)  # auth, but not an account
    assert audit.label_of(OrgPolicy) == "policies.orgpolicy"
    models = audit.audited_models()
    assert Org in models and User in models and AuditRecord not in models and Permission not in models


# --- who ------------------------------------------------------------------------------------------


def test_the_actor_is_the_innermost_scope_then_the_history_scope_then_the_command_else_the_shell(monkeypatch):
    assert audit.current() == audit.Actor("system", "shell")
    monkeypatch.setattr(recorder, "command_author", lambda: "deploy")
    monkeypatch.setattr(sys, "argv", ["/srv/manage.py", "import_config_from_a_rather_long_name"])
    assert audit.current() == audit.Actor("deploy", "command import_config_from_a_rat")
    monkeypatch.setattr(sys, "argv", ["/srv/manage.py"])
    assert audit.current() == audit.Actor("system", "shell")
    monkeypatch.setattr(sys, "argv", ["/srv/gunicorn", "serve"])
    assert audit.current() == audit.Actor("system", "shell")
    with recorder.change("alice", "admin-history"):
        assert audit.current() == audit.Actor("alice", "admin-history")
        with audit.acting("n" * 200, "s" * 40, "a" * 80) as actor:
            assert actor == audit.Actor("n" * 150, "s" * 32, "a" * 64)
            assert audit.current() is actor
        assert audit.current() == audit.Actor("alice", "admin-history")
    assert audit.current() == audit.Actor("system", "shell")


# --- what a write becomes -------------------------------------------------------------------------


def test_a_block_of_writes_is_one_record_naming_the_first_row_and_counting_the_rest():
    mark = fresh()
    with audit.acting("root", "admin", "192.0.2.1"):
        org = Org.objects.create(name="acme")
        Agent.objects.create(org=org, name="a")
        Agent.objects.create(org=org, name="b")
        OrgPolicy.objects.create(org=org, pattern="*", action="allow")
    [record] = since(mark)
    assert (record.actor, record.source, record.remote_addr) == ("root", "admin", "192.0.2.1")
    assert (record.action, record.object_type, record.object_id) == ("create", "policies.org", str(org.pk))
    assert (record.object_repr, record.org) == (str(org), "acme")
    assert record.fields == ["agent", "orgpolicy"]
    assert record.detail == "also: 2 × policies.agent create; policies.orgpolicy create"
    assert record.at is not None


def test_a_block_with_one_write_has_no_detail_and_one_that_raises_or_writes_nothing_no_record():
    org = Org.objects.create(name="acme")
    mark = fresh()
    with audit.acting("root", "admin"):
        org.weight = 3
        org.save()
    [record] = since(mark)
    assert (record.action, record.fields, record.detail) == ("update", ["weight"], "")
    mark = fresh()
    with pytest.raises(RuntimeError), audit.acting("root", "admin"):
        Org.objects.create(name="beta")
        raise RuntimeError("refused")
    with audit.acting("root", "admin"):
        pass
    assert since(mark) == []
    assert audit.current() == audit.Actor("system", "shell")  # the scopes are gone afterwards


def test_a_write_outside_any_block_is_recorded_at_once_by_the_shell():
    mark = fresh()
    org = Org.objects.create(name="acme")
    agent = Agent.objects.create(org=org, name="bot")
    key, _ = create_api_key(agent=agent)
    records_ = since(mark)
    assert [(r.action, r.object_type, r.org, r.actor, r.source) for r in records_] == [
        ("create", "policies.org", "acme", "system", "shell"),
        ("create", "policies.agent", "acme", "system", "shell"),
        ("create", "policies.apikey", "acme", "system", "shell"),  # through its agent
    ]
    assert records_[0].fields == [] and records_[0].detail == ""


def test_updates_name_only_the_fields_that_changed_and_saves_that_change_nothing_are_silent():
    org = Org.objects.create(name="acme")
    agent = Agent.objects.create(org=org, name="bot")
    other = Org.objects.create(name="beta")
    mark = fresh()
    agent.save()  # nothing changed
    agent.org = other
    agent.name = "helper"
    agent.save()
    [record] = since(mark)
    assert (record.action, record.fields, record.org) == ("update", ["name", "org"], "beta")
    raw = Agent(pk=agent.pk, org=org, name="x")
    mark = fresh()
    audit.after_save(Agent, raw, created=False, raw=True)
    audit.before_save(Agent, raw, raw=True)
    assert since(mark) == [] and not hasattr(raw, "_audit_before")


def test_a_login_stamp_alone_is_not_an_update_but_with_other_fields_it_is():
    user = User.objects.create_user("root", password="x")
    mark = fresh()
    user.last_login = user.date_joined
    user.save(update_fields=["last_login"])
    assert since(mark) == []
    user.first_name = "Ro"
    user.save(update_fields=["last_login", "first_name"])
    [record] = since(mark)
    assert (record.action, record.object_type, record.fields) == ("update", "auth.user", ["first_name"])


def test_credential_updates_are_told_apart_rotate_revoke_or_update():
    org = Org.objects.create(name="acme")
    key, _ = create_api_key(agent=Agent.objects.create(org=org, name="bot"))
    mark = fresh()
    key.key_hash = "0" * 64
    key.save()
    key.revoked = True
    key.save()
    key.label = "renamed"
    key.save()
    key.revoked = False  # un-revoking is an edit, not a revoke
    key.save()
    token, _ = create_management_token(name="ci", scope="read")
    token.token_hash = "1" * 64
    token.save()
    token.revoked = True
    token.save()
    assert [r.action for r in since(mark)] == ["rotate", "revoke", "update", "update", "create", "rotate", "revoke"]
    assert since(mark)[-1].org == ""  # a token of every org


def test_an_agent_whose_org_went_first_is_recorded_without_an_org():
    org = Org.objects.create(name="acme")
    agent = Agent.objects.create(org=org, name="bot")
    agent.org_id = 999_999  # a cascade deleted the org already
    assert audit._org_of(agent) == ""
    unsaved = audit._Change.of("create", Org(name="x" * 70), ["b", "a"])
    assert (unsaved.object_id, unsaved.org, unsaved.fields) == ("", "x" * 64, ["a", "b"])


def test_a_delete_is_recorded_and_a_long_repr_and_id_are_cut_to_their_columns():
    org = Org.objects.create(name="acme")
    mark = fresh()
    org.delete()
    [record] = since(mark)
    assert (record.action, record.object_type, record.org) == ("delete", "policies.org", "acme")
    record = audit.write(
        "a" * 40,
        actor=audit.Actor("x", "y"),
        object_type="t" * 70,
        object_repr="r" * 250,
        fields=["z", "b"],
        detail="d" * 600,
    )
    record.refresh_from_db()
    assert (record.action, record.object_type, record.object_repr) == ("a" * 32, "t" * 64, "r" * 200)
    assert (record.object_id, record.org, record.fields, record.detail) == ("", "", ["b", "z"], "d" * 500)


def test_an_explicit_write_without_an_actor_is_by_whoever_acts_now():
    with audit.acting("root", "api", "10.0.0.1"):
        record = audit.write("login", object_type="auth.user")
    assert (record.actor, record.source, record.remote_addr) == ("root", "api", "10.0.0.1")


# --- bulk changes, breakers, logins ---------------------------------------------------------------


def revision(source: str, **extra: object) -> dict:
    changes = [{"path": f"orgs[o{i}]"} for i in range(250)] + ["not a change"]
    return {"source": source, "author": "alice", "version": 7, "changes": changes, "summary": "2 added", **extra}


def test_an_import_or_rollback_is_one_record_of_its_revision_other_sources_none():
    mark = fresh()
    audit.revision_recorded(None, revision("admin"))
    assert since(mark) == []
    with audit.acting("bob", "api", "10.9.8.7"):
        audit.revision_recorded(None, revision("import_config"))
    audit.revision_recorded(None, revision("rollback", summary=None, changes=None))
    first, second = since(mark)
    assert (first.action, first.actor, first.source, first.remote_addr) == (
        "import",
        "alice",
        "import_config",
        "10.9.8.7",
    )
    assert (first.object_type, first.object_repr, first.detail) == ("configuration", "v7", "2 added")
    assert first.fields == sorted(f"orgs[o{i}]" for i in range(200))
    assert (second.action, second.remote_addr, second.fields, second.detail) == ("rollback", "", [], "")


def test_rows_written_by_a_bulk_change_are_not_recorded_one_by_one_unless_someone_acts():
    mark = fresh()
    with recorder.change("alice", "import"):
        Org.objects.create(name="bulk")
        assert audit._bulk()
        with audit.acting("bob", "api"):
            assert not audit._bulk()
    with recorder.change("alice", "admin-history"):
        assert not audit._bulk()
    assert [(r.action, r.object_type) for r in since(mark) if r.object_type != "configuration"] == []
    org = Org.objects.get(name="bulk")
    mark = fresh()
    with recorder.change("alice", "rollback"):
        org.weight = 4
        org.save()
        org.delete()
    assert [r.object_type for r in since(mark)] in ([], ["configuration"])


def test_a_breaker_action_is_recorded_by_the_operator_it_names_once():
    action = SimpleNamespace(action="reset", user="cli:ops", provider="p", model="m", reason=None)
    mark = fresh()
    with audit.acting("token:ci", "api", "10.1.1.1"):
        audit.breaker_action_saved(BreakerAction, action, created=True)
    audit.breaker_action_saved(BreakerAction, action, created=False)
    audit.breaker_action_saved(BreakerAction, action, created=True, raw=True)
    [record] = since(mark)
    assert (record.action, record.actor, record.source, record.remote_addr) == (
        "breaker_reset",
        "cli:ops",
        "api",
        "10.1.1.1",
    )
    assert (record.object_type, record.object_repr, record.detail) == ("breaker", "p/m", "")


def test_login_attempts_name_the_user_and_address_never_the_password(rf):
    request = rf.get("/admin/login/", REMOTE_ADDR="192.0.2.9")
    mark = fresh()
    audit.logged_in(None, request, User(username="root"))
    audit.login_failed(None, {"username": "u" * 200, "password": "hunter2"}, request)
    audit.login_failed(None, {"password": "hunter2"}, request)
    ok, failed, anonymous = since(mark)
    assert (ok.action, ok.actor, ok.source, ok.remote_addr, ok.object_type) == (
        "login",
        "root",
        "login",
        "192.0.2.9",
        "auth.user",
    )
    assert (failed.action, failed.actor, failed.source, failed.object_type) == (
        "login_failed",
        "u" * 150,
        "login",
        "auth.user",
    )
    assert failed.remote_addr == "192.0.2.9" and anonymous.actor == ""
    assert "hunter2" not in str([(r.detail, r.fields, r.object_repr) for r in since(mark)])


def test_connecting_again_does_not_record_twice(rf):
    from django.contrib.auth.signals import user_logged_in, user_login_failed

    audit.connect()
    request = rf.get("/admin/login/", REMOTE_ADDR="192.0.2.9")
    root = User.objects.create_user("root", password="x")
    mark = fresh()
    org = Org.objects.create(name="once")
    org.weight = 2
    org.save()
    org.delete()
    recorder.revision_recorded.send(sender=None, revision=revision("import"))
    BreakerAction.objects.create(user="cli:ops", provider="p", model="m", action="reset")
    user_logged_in.send(sender=User, request=request, user=root)
    user_login_failed.send(sender=User, credentials={"username": "root"}, request=request)
    assert [r.action for r in since(mark)] == [
        "create",
        "update",
        "delete",
        "import",
        "breaker_reset",
        "login",
        "login_failed",
    ]
