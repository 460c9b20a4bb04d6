"""The management API (docs/management-api.md) through Django's test client and the real database."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.test import Client
from django.utils import timezone

from policies.keys import hash_key
from policies.models import ApiKey, ManagementToken, Org
from policies.tokens import create_management_token
from routing.config.document import key_rows_from_db
from routing.config.store import import_document
from routing.models import ConfigRevision, UsageRecord

pytestmark = pytest.mark.django_db(transaction=True)
DOC = {
    "providers": [{"name": "mock", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [{"id": "chat-a", "provider": "mock", "upstream_model": "x", "capabilities": ["chat"]}],
    "orgs": [
        {"name": "acme", "agents": [{"name": "bot"}]},
        {"name": "beta", "agents": [{"name": "bot"}]},
    ],
}


@pytest.fixture
def setup():
    import_document(DOC)


def client_for(scope: str = "write", org: str | None = None, name: str = "ci") -> Client:
    _, secret = create_management_token(name=name, scope=scope, org=Org.objects.get(name=org) if org else None)
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def new_key(api: Client, **fields):
    return api.post("/api/v1/keys", {"org": "acme", "agent": "bot", **fields}, content_type="application/json")


def test_a_key_created_over_the_api_is_shown_once_and_reaches_the_snapshot(setup):
    api = client_for()
    expires = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    created = new_key(
        api,
        name="search",
        limits={"rpm": 10},
        budget={"usd": 0.001, "period": "day"},
        models=["fast", "gpt-*"],
        expires_at=expires,
        metadata={"team": "search"},
    )
    assert created.status_code == 201, created.content
    data = created.json()
    secret = data.pop("secret")
    assert secret.startswith(data["prefix"]) and data["status"] == "active" and created["ETag"]
    row = ApiKey.objects.get()
    assert row.key_hash == hash_key(secret) and row.label == "search" and row.allowed_models == ["fast", "gpt-*"]
    [snap] = key_rows_from_db()
    assert snap["limits"] == {"rpm": 10} and snap["budget"] == {"usd": 0.001, "period": "day"}
    shown = api.get(f"/api/v1/keys/{data['id']}").json()
    assert "secret" not in shown and shown["metadata"] == {"team": "search"}
    assert secret not in api.get("/api/v1/keys").content.decode()


def test_bad_controls_get_the_one_validations_message_in_the_v1_shape(setup):
    refused = new_key(client_for(), limits={"rpm": -1})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == "limits" and "rpm" in error["message"]
    assert set(error) == {"message", "type", "code", "param"}
    assert new_key(client_for(name="b"), colour="red").json()["error"]["param"] == "colour"
    assert ApiKey.objects.count() == 0


def test_tokens_not_keys_and_scopes_are_enforced(setup):
    api = client_for()
    secret = new_key(api).json()["secret"]
    as_key = Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/keys")
    assert as_key.status_code == 401 and as_key.json()["error"]["code"] == "invalid_management_token"
    assert Client().get("/api/v1/keys").status_code == 401
    reader = client_for("read", name="reader")
    assert reader.get("/api/v1/keys").status_code == 200
    denied = new_key(reader)
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "permission_denied"
    ManagementToken.objects.filter(name="ci").update(revoked=True)
    assert api.get("/api/v1/keys").status_code == 401


def test_an_org_limited_token_sees_and_changes_its_org_only(setup):
    acme = client_for(org="acme", name="acme-admin")
    beta_key = new_key(client_for(name="root"), org="beta").json()
    assert new_key(acme, org="beta").status_code == 403
    assert acme.get(f"/api/v1/keys/{beta_key['id']}").status_code == 404
    assert acme.get("/api/v1/keys").json()["total"] == 0
    assert [o["name"] for o in acme.get("/api/v1/orgs").json()["data"]] == ["acme"]
    assert acme.get("/api/v1/orgs/beta").status_code == 404
    assert acme.get("/api/v1/breakers").status_code == 403


def test_update_with_a_stale_etag_is_412_and_changes_nothing(setup):
    api = client_for()
    key = new_key(api).json()
    tag = api.get(f"/api/v1/keys/{key['id']}")["ETag"]
    first = api.patch(
        f"/api/v1/keys/{key['id']}", {"limits": {"rpm": 5}}, content_type="application/json", HTTP_IF_MATCH=tag
    )
    assert first.status_code == 200 and first["ETag"] != tag
    second = api.patch(
        f"/api/v1/keys/{key['id']}", {"enabled": False}, content_type="application/json", HTTP_IF_MATCH=tag
    )
    assert second.status_code == 412 and second.json()["error"]["code"] == "precondition_failed"
    assert ApiKey.objects.get().enabled and ApiKey.objects.get().limits == {"rpm": 5}


def test_two_concurrent_updates_with_one_etag_one_wins_one_gets_412(setup):
    """The row lock (PostgreSQL) or the write lock taken at BEGIN (SQLite) makes check-and-write one step;
    each thread has its own connection."""
    from django.db import connection

    api = client_for()
    key = new_key(api).json()
    tag = api.get(f"/api/v1/keys/{key['id']}")["ETag"]
    results: list[int] = []
    barrier = threading.Barrier(2)

    def patch(rpm: int) -> None:
        barrier.wait()
        answer = api.patch(
            f"/api/v1/keys/{key['id']}", {"limits": {"rpm": rpm}}, content_type="application/json", HTTP_IF_MATCH=tag
        )
        results.append(answer.status_code)
        connection.close()

    threads = [threading.Thread(target=patch, args=(n,)) for n in (3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200, 412]


def test_rotate_keeps_the_prefix_and_the_old_secret_for_the_grace(setup):
    api = client_for()
    key = new_key(api).json()
    rotated = api.post(f"/api/v1/keys/{key['id']}/rotate", {"grace_seconds": 60}, content_type="application/json")
    assert rotated.status_code == 200
    new = rotated.json()["secret"]
    assert new.startswith(key["prefix"]) and new != key["secret"]
    assert rotated.json()["previous_secret_expires_at"] is not None
    hashes = {row["key_hash"] for row in key_rows_from_db()}
    assert hashes == {hash_key(new), hash_key(key["secret"])}
    bad = api.post(f"/api/v1/keys/{key['id']}/rotate", {"grace_seconds": -1}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "grace_seconds"


@pytest.mark.parametrize("verb", ["rotate", "revoke"])
def test_rotate_and_revoke_with_a_stale_etag_are_412_and_change_nothing(setup, verb):
    """Two callers rotating at once with one ETag: the second gets 412, not a second new secret (with the
    default grace of 0 the first caller's new secret would die at once); the same for revoke."""
    api = client_for()
    key = new_key(api).json()
    tag = api.get(f"/api/v1/keys/{key['id']}")["ETag"]
    first = api.post(f"/api/v1/keys/{key['id']}/rotate", {}, content_type="application/json", HTTP_IF_MATCH=tag)
    assert first.status_code == 200 and first["ETag"] != tag
    kept = {row["key_hash"] for row in key_rows_from_db()}
    stale = api.post(f"/api/v1/keys/{key['id']}/{verb}", {}, content_type="application/json", HTTP_IF_MATCH=tag)
    assert stale.status_code == 412 and stale.json()["error"]["code"] == "precondition_failed"
    assert {row["key_hash"] for row in key_rows_from_db()} == kept == {hash_key(first.json()["secret"])}
    fresh = api.post(
        f"/api/v1/keys/{key['id']}/{verb}", {}, content_type="application/json", HTTP_IF_MATCH=first["ETag"]
    )
    assert fresh.status_code == 200


def test_revoke_removes_both_secrets_and_is_final(setup):
    api = client_for()
    key = new_key(api).json()
    api.post(f"/api/v1/keys/{key['id']}/rotate", {"grace_seconds": 60}, content_type="application/json")
    revoked = api.post(f"/api/v1/keys/{key['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    assert key_rows_from_db() == []
    again = api.patch(f"/api/v1/keys/{key['id']}", {"enabled": True}, content_type="application/json")
    assert again.status_code == 409


def test_org_and_agent_writes_are_validated_and_recorded_with_the_tokens_name(setup):
    api = client_for(name="provisioner")
    created = api.post(
        "/api/v1/orgs",
        {"name": "gamma", "limits": {"rpm": 100}, "policies": [{"pattern": "chat-*", "action": "deny"}]},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["policies"][0]["pattern"] == "chat-*"
    revision = ConfigRevision.objects.order_by("-version").first()
    assert revision.author == "provisioner" and revision.source == "api"
    assert api.post("/api/v1/orgs", {"name": "gamma"}, content_type="application/json").status_code == 409

    bad = api.patch("/api/v1/orgs/gamma", {"budget": {"usd": -5, "period": "day"}}, content_type="application/json")
    assert bad.status_code == 400 and "usd" in bad.json()["error"]["message"]
    tag = api.get("/api/v1/orgs/gamma")["ETag"]
    changed = api.patch(
        "/api/v1/orgs/gamma", {"limits": None, "budget": {"usd": 5, "period": "day"}}, content_type="application/json"
    )
    assert changed.status_code == 200
    assert changed.json()["limits"] is None and changed.json()["budget"] == {"usd": 5, "period": "day"}
    assert changed.json()["policies"][0]["pattern"] == "chat-*"  # not sent: kept
    stale = api.patch("/api/v1/orgs/gamma", {"log_bodies": True}, content_type="application/json", HTTP_IF_MATCH=tag)
    assert stale.status_code == 412

    agent = api.post(
        "/api/v1/orgs/gamma/agents", {"name": "bot", "limits": {"rpm": 5}}, content_type="application/json"
    )
    assert agent.status_code == 201 and agent.json()["limits"] == {"rpm": 5}
    updated = api.patch("/api/v1/orgs/gamma/agents/bot", {"default_model": "chat-a"}, content_type="application/json")
    assert updated.json()["default_model"] == "chat-a" and updated.json()["limits"] == {"rpm": 5}
    assert api.get("/api/v1/orgs/gamma").json()["budget"] == {"usd": 5, "period": "day"}  # the agent write kept it
    assert ConfigRevision.objects.filter(author="provisioner").count() == 4


def test_usage_per_key_over_a_range(setup):
    api = client_for()
    now = timezone.now()
    for prefix, cost, model in (
        ("sb-aaaaaaa", "0.5", "chat-a"),
        ("sb-aaaaaaa", "0.25", "chat-a"),
        ("sb-bbbbbbb", "1", "x"),
    ):
        UsageRecord.objects.create(
            created_at=now,
            org="acme",
            agent="bot",
            key_prefix=prefix,
            endpoint="chat",
            status=200,
            cost=cost,
            model_used=model,
        )
    by_key = api.get("/api/v1/usage", {"group_by": "key"}).json()
    assert [(r["key"], r["requests"], r["cost_usd"]) for r in by_key["data"]] == [
        ("sb-bbbbbbb", 1, 1.0),
        ("sb-aaaaaaa", 2, 0.75),
    ]
    one = api.get("/api/v1/usage", {"group_by": "model", "limit": 1}).json()
    assert one["total"] == 2 and one["next_offset"] == 1 and len(one["data"]) == 1
    past = (now - dt.timedelta(days=3)).isoformat()
    assert api.get("/api/v1/usage", {"until": past}).json()["total"] == 0
    assert api.get("/api/v1/usage", {"group_by": "nope"}).status_code == 400


def test_breakers_list_and_the_one_operator_verb(setup, process):
    from routing.config import live

    live.rebuild_from_db("test")
    api = client_for(name="oncall")
    links = api.get("/api/v1/breakers").json()["data"]
    assert [link["key"] for link in links] == [["mock", "chat-a"]]
    opened = api.post(
        "/api/v1/breakers/force-open",
        {"key": ["mock", "chat-a"], "reason": "maintenance", "minutes": 5},
        content_type="application/json",
    )
    assert opened.status_code == 200 and opened.json()["action"] == "force_open"
    assert api.get("/api/v1/breakers").json()["data"][0]["state"] == "forced"
    assert (
        api.post("/api/v1/breakers/reset", {"key": ["mock", "chat-a"]}, content_type="application/json").status_code
        == 200
    )
    assert api.get("/api/v1/breakers").json()["data"][0]["state"] == "closed"
    unknown = api.post("/api/v1/breakers/reset", {"key": ["mock", "nope"]}, content_type="application/json")
    assert unknown.status_code == 400 and "no configured link" in unknown.json()["error"]["message"]


def test_unknown_paths_and_methods_answer_json(setup):
    api = client_for()
    assert api.get("/api/v1/nope").json()["error"]["code"] == "not_found"
    assert api.delete("/api/v1/keys").json()["error"]["code"] == "method_not_allowed"
    assert api.get("/api/v1/keys", {"limit": "0"}).json()["error"]["param"] == "limit"


def test_a_superuser_creates_a_token_in_the_admin_shown_once_and_it_works(setup, admin_client):
    added = admin_client.post("/admin/policies/managementtoken/add/", {"name": "portal", "scope": "write", "org": ""})
    assert added.status_code == 302
    shown = admin_client.get(added["Location"])
    secret = shown.context["plaintext"]
    assert secret.startswith("sbm-") and secret in shown.content.decode()
    assert secret not in admin_client.get(added["Location"]).content.decode()  # once
    assert ManagementToken.objects.get().token_hash == hash_key(secret)
    assert Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/keys").status_code == 200


def test_staff_who_are_not_superusers_cannot_see_tokens(setup, client, django_user_model):
    staff = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    client.force_login(staff)
    assert client.get("/admin/policies/managementtoken/add/").status_code == 403


def test_create_management_token_prints_it_alone_on_the_last_line(setup):
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("create_management_token", "--name", "ci-bot", "--scope", "write", "--org", "acme", stdout=out)
    secret = out.getvalue().splitlines()[-1]
    token = ManagementToken.objects.get()
    assert token.token_hash == hash_key(secret) and token.scope == "write" and token.org.name == "acme"


def test_a_key_created_over_the_api_shows_in_the_admin_and_the_other_way_round(setup, admin_client):
    api = client_for()
    created = new_key(api, name="from-api", limits={"rpm": 7}).json()
    page = admin_client.get(f"/admin/policies/apikey/{created['id']}/change/").content.decode()
    assert "from-api" in page and created["prefix"] in page and created["secret"] not in page
    from policies.models import Agent

    admin_client.post(
        "/admin/policies/apikey/add/",
        {"agent": Agent.objects.get(org__name="acme").pk, "label": "from-admin", "enabled": "on", "budget_usd": "2"},
    )
    listed = api.get("/api/v1/keys", {"org": "acme"}).json()["data"]
    mine = next(k for k in listed if k["name"] == "from-admin")
    assert mine["budget"] == {"usd": 2, "period": "month"} and mine["status"] == "active"


def log_rows(now):
    """Four usage records a minute apart, the newest last; the beta one carries stored bodies."""
    rows = (
        ("acme", "bot", "sb-aaaaaaa", "chat-a", 200, "", ""),
        ("acme", "bot", "sb-aabbbbb", "chat-a", 429, "", ""),
        ("acme", "ops", "sb-ccccccc", "x", 200, "", ""),
        ("beta", "bot", "sb-ddddddd", "chat-a", 200, '{"messages": "hi"}', '{"answer": "hello"}'),
    )
    for minute, (org, agent, prefix, model, status, request_body, response_body) in enumerate(rows):
        UsageRecord.objects.create(
            created_at=now - dt.timedelta(minutes=10 - minute),
            request_id=f"req-{minute}",
            org=org,
            agent=agent,
            key_prefix=prefix,
            endpoint="chat",
            model_used=model,
            status=status,
            cost="0.5",
            request_body=request_body,
            response_body=response_body,
        )


def request_ids(api: Client, **params) -> list[str]:
    answer = api.get("/api/v1/requests", params)
    assert answer.status_code == 200, answer.content
    return [row["request_id"] for row in answer.json()["data"]]


def test_the_request_log_newest_first_with_its_filters_and_pages(setup):
    now = timezone.now()
    log_rows(now)
    reader = client_for("read", name="reader")
    assert request_ids(reader) == ["req-3", "req-2", "req-1", "req-0"]
    assert request_ids(reader, org="acme", agent="bot") == ["req-1", "req-0"]
    assert request_ids(reader, key="sb-aa") == ["req-1", "req-0"]  # a prefix
    assert request_ids(reader, model="x") == ["req-2"]
    assert request_ids(reader, status="429") == ["req-1"]
    since, until = (now - dt.timedelta(minutes=9, seconds=30)).isoformat(), (now - dt.timedelta(minutes=7)).isoformat()
    assert request_ids(reader, since=since, until=until) == ["req-2", "req-1"]
    row = reader.get("/api/v1/requests", {"status": "429"}).json()["data"][0]
    assert row["key"] == "sb-aabbbbb" and row["cost_usd"] == 0.5 and row["created_at"].endswith("Z")
    first = reader.get("/api/v1/requests", {"limit": 3}).json()
    assert first["total"] == 4 and first["next_offset"] == 3 and len(first["data"]) == 3
    rest = reader.get("/api/v1/requests", {"limit": 3, "offset": first["next_offset"]}).json()
    assert [r["request_id"] for r in rest["data"]] == ["req-0"] and rest["next_offset"] is None
    bad = reader.get("/api/v1/requests", {"status": "ok"}).json()["error"]
    assert bad["code"] == "invalid_request" and bad["param"] == "status"
    assert reader.get("/api/v1/requests", {"since": until, "until": since}).json()["error"]["param"] == "since"


def test_an_org_limited_token_reads_its_orgs_requests_only(setup):
    log_rows(timezone.now())
    acme = client_for("read", org="acme", name="acme-reader")
    assert request_ids(acme) == ["req-2", "req-1", "req-0"]
    assert request_ids(acme, org="beta") == []


def test_an_org_limited_token_reads_its_orgs_usage_only(setup):
    """Every grouping of /api/v1/usage, and a filter naming another org, sees the token's org only (found
    by mutation testing: the usage API was tested with an unscoped token alone)."""
    log_rows(timezone.now())
    acme = client_for("read", org="acme", name="acme-reader")

    def rows(**params) -> list[tuple]:
        answer = acme.get("/api/v1/usage", params)
        assert answer.status_code == 200, answer.content
        return [
            (*(r[c] for c in params.get("columns", ())), r["requests"], r["cost_usd"]) for r in answer.json()["data"]
        ]

    assert rows(group_by="org", columns=("org",)) == [("acme", 3, 1.5)]
    assert rows(group_by="agent", columns=("org", "agent")) == [("acme", "bot", 2, 1.0), ("acme", "ops", 1, 0.5)]
    assert sorted(rows(group_by="key", columns=("key",))) == [
        ("sb-aaaaaaa", 1, 0.5),
        ("sb-aabbbbb", 1, 0.5),
        ("sb-ccccccc", 1, 0.5),
    ]
    assert rows(group_by="model", columns=("model",)) == [("chat-a", 2, 1.0), ("x", 1, 0.5)]  # not beta's chat-a
    assert rows(org="beta") == []


def test_bodies_only_for_a_token_created_with_bodies_otherwise_the_fields_are_absent(setup):
    log_rows(timezone.now())
    plain = client_for("write", name="plain").get("/api/v1/requests", {"org": "beta"}).json()["data"][0]
    assert "request_body" not in plain and "response_body" not in plain
    _, secret = create_management_token(name="auditor", scope="read", bodies=True)
    auditor = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    row = auditor.get("/api/v1/requests", {"org": "beta"}).json()["data"][0]
    assert row["request_body"] == '{"messages": "hi"}' and row["response_body"] == '{"answer": "hello"}'
    assert auditor.get("/api/v1/requests", {"org": "acme"}).json()["data"][0]["request_body"] == ""


def test_a_superuser_grants_bodies_in_the_admin_and_with_the_command(setup, admin_client):
    import io

    from django.core.management import call_command

    added = admin_client.post(
        "/admin/policies/managementtoken/add/", {"name": "audit", "scope": "read", "bodies": "on"}
    )
    assert added.status_code == 302 and ManagementToken.objects.get(name="audit").bodies
    call_command("create_management_token", "--name", "audit-cli", "--bodies", stdout=io.StringIO())
    call_command("create_management_token", "--name", "plain-cli", stdout=io.StringIO())
    assert (
        ManagementToken.objects.get(name="audit-cli").bodies
        and not ManagementToken.objects.get(name="plain-cli").bodies
    )


def test_a_keys_priority_class_is_set_checked_and_cleared_over_the_api(setup):
    api = client_for()
    created = new_key(api, priority="batch")
    assert created.status_code == 201, created.content
    key_id = created.json()["id"]
    assert created.json()["priority"] == "batch" and key_rows_from_db()[0]["priority"] == "batch"
    refused = api.patch(f"/api/v1/keys/{key_id}", {"priority": "urgent"}, content_type="application/json")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "priority"
    assert "interactive | default | batch" in refused.json()["error"]["message"]
    cleared = api.patch(f"/api/v1/keys/{key_id}", {"priority": None}, content_type="application/json")
    assert cleared.status_code == 200 and cleared.json()["priority"] is None
    assert new_key(api, priority=None).status_code == 201  # none: its agent's class


def test_org_and_agent_overload_fields_go_through_the_one_validation_and_are_kept_by_other_writes(setup):
    api = client_for()
    changed = api.patch("/api/v1/orgs/acme", {"priority": "batch", "weight": 2.5}, content_type="application/json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["priority"], changed.json()["weight"]) == ("batch", 2.5)
    bad = api.patch("/api/v1/orgs/acme", {"weight": 0}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "orgs[acme].weight"
    agent = api.patch(
        "/api/v1/orgs/acme/agents/bot",
        {"priority": "interactive", "side_effects": True},
        content_type="application/json",
    )
    assert agent.status_code == 200 and agent.json()["priority"] == "interactive" and agent.json()["side_effects"]
    kept = api.patch("/api/v1/orgs/acme", {"limits": {"rpm": 9}}, content_type="application/json").json()
    assert (kept["priority"], kept["weight"]) == ("batch", 2.5)  # not sent: kept
