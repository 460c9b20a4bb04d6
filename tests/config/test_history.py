"""Configuration history: one revision per committed change, retention, rollback, the commands."""

from __future__ import annotations

import copy
import io

import orjson
import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from policies.models import Agent, ApiKey, Org
from providers.models import Model, Provider
from routing.config import history, recorder
from routing.config.overrides import write_override
from routing.config.secrets import encrypt
from routing.config.store import ConfigInvalid, dump_yaml, export_document, import_document
from routing.core.breaker import BreakerKey
from routing.models import ConfigRevision, ConfigVersion
from tests.config.conftest import VALID

pytestmark = pytest.mark.django_db


def v1_v2() -> tuple[dict, dict]:
    """Import VALID as version 1, then a change of chat-b's upstream model and a new alias as version 2."""
    one = copy.deepcopy(VALID)
    import_document(one)
    two = copy.deepcopy(VALID)
    two["models"][1]["upstream_model"] = "gpt-4.1"
    two["aliases"]["best"] = "chat-b"
    import_document(two)
    return one, two


def versions() -> list[int]:
    return list(ConfigRevision.objects.order_by("version").values_list("version", flat=True))


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# --------------------------------------------------------------------------- recording


def test_each_import_records_one_version_with_the_whole_document_and_its_diff():
    v1_v2()
    assert versions() == [1, 2]
    latest = ConfigRevision.objects.get(version=2)
    assert orjson.loads(latest.document) == export_document()
    assert [c["path"] for c in latest.changes] == ["models[chat-b].upstream_model", "aliases.best"]
    assert latest.source == "import" and latest.author == "system"
    assert latest.config_version == ConfigVersion.objects.get(pk=1).version


def test_an_import_that_changes_nothing_a_dry_run_and_a_refused_import_record_nothing():
    one, two = v1_v2()
    import_document(copy.deepcopy(two))  # the database already matches
    three = copy.deepcopy(two)
    three["aliases"]["other"] = "chat-a"
    import_document(three, dry_run=True)
    three["models"][0]["fallbacks"] = ["no-such-model"]
    with pytest.raises(ConfigInvalid):
        import_document(three)
    assert versions() == [1, 2]


def test_import_config_records_who_ran_it_and_from_which_file(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder, "command_author", lambda: "ops-alice")
    path = tmp_path / "prod.yaml"
    path.write_text(dump_yaml(VALID))
    run("import_config", str(path))
    (revision,) = ConfigRevision.objects.all()
    assert (revision.author, revision.source) == ("ops-alice", "import_config")
    assert revision.summary.startswith("prod.yaml: + providers[local-a]")


def test_a_stored_key_is_recorded_as_a_reference_never_as_key_or_ciphertext(settings):
    settings.SWITCHBOARD_FERNET_KEY = Fernet.generate_key().decode()
    import_document(copy.deepcopy(VALID))
    provider = Provider.objects.get()
    provider.api_key_encrypted = encrypt("sk-live-NEVER-IN-HISTORY")
    provider.save()
    text = ConfigRevision.objects.get(version=2).document
    assert "sk-live-NEVER-IN-HISTORY" not in text and provider.api_key_encrypted not in text
    assert orjson.loads(text)["providers"][0]["api_key"] == "stored"
    assert "SWITCHBOARD_UPSTREAM_LOCAL_A" in text  # env references are kept, as the export does


def test_breaker_controls_and_api_keys_bump_the_version_but_are_not_configuration_history():
    import_document(copy.deepcopy(VALID))
    before = ConfigVersion.objects.get(pk=1).version
    write_override(BreakerKey("local-a", "chat-a", None), "force_open", "alice", "flaky", None)
    ApiKey.objects.create(agent=Agent.objects.get(), key_hash="h" * 64, prefix="sb-test")
    assert ConfigVersion.objects.get(pk=1).version > before
    assert versions() == [1]


def test_shell_saves_outside_any_scope_record_as_shell_and_one_transaction_is_one_version():
    import_document(copy.deepcopy(VALID))
    with transaction.atomic():
        model = Model.objects.get(public_id="chat-b")
        model.context_window = 64000
        model.save()
        model.max_output_tokens = 4000
        model.save()
    assert versions() == [1, 2]
    revision = ConfigRevision.objects.get(version=2)
    assert (revision.author, revision.source) == ("system", "shell")
    assert [c["path"] for c in revision.changes] == [
        "models[chat-b].context_window",
        "models[chat-b].max_output_tokens",
    ]


def test_a_configuration_that_existed_before_history_gets_a_baseline_version(settings):
    settings.SWITCHBOARD_CONFIG_HISTORY_KEEP = 0  # recording off: as before this feature
    import_document(copy.deepcopy(VALID))
    assert versions() == []
    settings.SWITCHBOARD_CONFIG_HISTORY_KEEP = 10
    doc = copy.deepcopy(VALID)
    doc["aliases"]["best"] = "chat-b"
    import_document(doc)
    baseline, change = ConfigRevision.objects.order_by("version")
    assert baseline.source == "baseline" and orjson.loads(baseline.document)["aliases"] == {"fast": "chat-a"}
    assert [c["path"] for c in change.changes] == ["aliases.best"]


def test_retention_keeps_the_newest_versions(settings):
    settings.SWITCHBOARD_CONFIG_HISTORY_KEEP = 3
    doc = copy.deepcopy(VALID)
    for window in range(1, 6):
        doc["models"][1]["context_window"] = window * 1000
        import_document(copy.deepcopy(doc))
    assert versions() == [3, 4, 5]
    with pytest.raises(history.HistoryError, match=r"no configuration version 1: the recorded versions are 3\.\.5"):
        history.rollback(1, author="alice")


# --------------------------------------------------------------------------- rollback


def test_rollback_restores_the_old_document_as_a_new_version():
    one, _ = v1_v2()
    result = history.rollback(1, author="alice")
    assert result.version == 3
    assert export_document() == orjson.loads(ConfigRevision.objects.get(version=1).document)
    revision = ConfigRevision.objects.get(version=3)
    assert (revision.author, revision.source) == ("alice", "rollback")
    assert revision.summary.startswith("rollback to v1: ~ models[chat-b].upstream_model")
    assert [c["path"] for c in result.changes] == ["models[chat-b].upstream_model", "aliases.best"]


def test_a_dry_run_rollback_shows_the_changes_and_changes_nothing():
    v1_v2()
    before = export_document()
    result = history.rollback(1, author="alice", dry_run=True)
    assert result.version is None and len(result.changes) == 2
    assert export_document() == before and versions() == [1, 2]


def test_rollback_to_the_current_configuration_records_nothing():
    v1_v2()
    assert history.rollback(2, author="alice").version is None
    assert versions() == [1, 2]


def test_rollback_deletes_what_was_created_since_and_warns_about_agents_with_keys():
    import_document(copy.deepcopy(VALID))
    doc = copy.deepcopy(VALID)
    doc["orgs"].append({"name": "beta", "agents": [{"name": "bot"}]})
    import_document(doc)
    ApiKey.objects.create(agent=Agent.objects.get(org__name="beta"), key_hash="k" * 64, prefix="sb-beta")
    dry = history.rollback(1, author="alice", dry_run=True)
    assert dry.warnings == ["removes agent(s) beta/bot and their 1 active API key(s)"] and dry.removed_keys == 1
    with pytest.raises(history.KeysWouldBeRemoved, match="removes agent\\(s\\) beta/bot and their 1 active API key"):
        history.rollback(1, author="alice")  # not without the operator's confirmation
    assert Org.objects.filter(name="beta").exists() and ApiKey.objects.count() == 1 and versions() == [1, 2]
    history.rollback(1, author="alice", force=True)
    assert not Org.objects.filter(name="beta").exists() and not ApiKey.objects.exists()


def test_config_rollback_removing_live_keys_needs_force():
    import_document(copy.deepcopy(VALID))
    doc = copy.deepcopy(VALID)
    doc["orgs"].append({"name": "beta", "agents": [{"name": "bot"}]})
    import_document(doc)
    ApiKey.objects.create(agent=Agent.objects.get(org__name="beta"), key_hash="k" * 64, prefix="sb-beta")
    with pytest.raises(CommandError) as refused:
        run("config_rollback", "1")
    assert "removes agent(s) beta/bot and their 1 active API key(s)" in str(refused.value)
    assert "Run it again with --force" in str(refused.value)
    assert ApiKey.objects.count() == 1 and versions() == [1, 2]
    assert "Rolled back to version 1: recorded as version 3" in run("config_rollback", "1", "--force")
    assert not ApiKey.objects.exists()


def test_a_version_that_no_longer_validates_is_refused_with_every_error_and_changes_nothing(settings):
    v1_v2()
    # The environment variable version 1 names may no longer be sent upstream.
    settings.SWITCHBOARD_SECRET_ENV_PREFIX = "OTHER_"
    before, count = export_document(), ConfigVersion.objects.get(pk=1).version
    with pytest.raises(history.HistoryError) as refused:
        history.rollback(1, author="alice")
    message = str(refused.value)
    assert message.startswith("version 1 no longer validates (1 error(s)); nothing was changed")
    assert "providers[local-a].api_key_env" in message and "SWITCHBOARD_SECRET_ENV_PREFIX" in message
    assert export_document() == before and versions() == [1, 2]
    assert ConfigVersion.objects.get(pk=1).version == count


@pytest.mark.django_db(transaction=True)
def test_a_version_whose_stored_key_is_gone_is_refused(settings):
    settings.SWITCHBOARD_FERNET_KEY = Fernet.generate_key().decode()
    import_document(copy.deepcopy(VALID))
    provider = Provider.objects.get()
    provider.api_key_encrypted = encrypt("sk-1")
    provider.save()  # version 2 has a stored key
    provider.api_key_encrypted = ""
    provider.save()  # version 3 has none
    with pytest.raises(history.HistoryError, match=r"providers\[local-a\]\.api_key: this version used a stored key"):
        history.rollback(2, author="alice")
    assert versions() == [1, 2, 3]


# --------------------------------------------------------------------------- commands


def test_config_history_json_lists_versions_newest_first_with_the_contract_fields():
    v1_v2()
    rows = orjson.loads(run("config_history", "--json"))
    assert [r["version"] for r in rows] == [2, 1]
    assert set(rows[0]) >= {"version", "created_at", "author", "source", "diff"}
    assert rows[0]["diff"] == [
        {"op": "changed", "path": "models[chat-b].upstream_model", "old": "gpt-4o", "new": "gpt-4.1"},
        {"op": "added", "path": "aliases.best", "new": "chat-b"},
    ]
    assert [r["version"] for r in orjson.loads(run("config_history", "--json", "--limit", "1"))] == [2]


def test_config_history_text_diff_and_show():
    v1_v2()
    text = run("config_history")
    assert text.splitlines()[0].startswith("v2  ") and "~ models[chat-b].upstream_model: gpt-4o -> gpt-4.1" in text
    assert run("config_history", "--diff", "2", "1").splitlines() == [
        "~ models[chat-b].upstream_model: gpt-4.1 -> gpt-4o",
        "- aliases.best",
    ]
    assert run("config_history", "--show", "1") == dump_yaml(
        orjson.loads(ConfigRevision.objects.get(version=1).document)
    )
    with pytest.raises(CommandError, match="no configuration version 7"):
        run("config_history", "--show", "7")
    with pytest.raises(CommandError, match="--limit must be a positive"):
        run("config_history", "--limit", "0")


def test_config_rollback_command_dry_run_then_for_real(monkeypatch):
    monkeypatch.setattr(recorder, "command_author", lambda: "ops-bob")
    v1_v2()
    out = run("config_rollback", "1", "--dry-run")
    assert "~ models[chat-b].upstream_model: gpt-4.1 -> gpt-4o" in out
    assert "Dry run, nothing saved: rolling back to version 1 would make 2 change(s)." in out
    assert versions() == [1, 2]
    out = run("config_rollback", "1")
    assert "Rolled back to version 1: recorded as version 3" in out
    assert ConfigRevision.objects.get(version=3).author == "ops-bob"
    assert "No changes" in run("config_rollback", "3")


def test_config_rollback_command_refusal_is_a_command_error_naming_the_problem(settings):
    v1_v2()
    settings.SWITCHBOARD_SECRET_ENV_PREFIX = "OTHER_"
    with pytest.raises(CommandError, match="version 1 no longer validates"):
        run("config_rollback", "1")
    with pytest.raises(CommandError, match="nothing has been recorded yet|the recorded versions are 1..2"):
        run("config_rollback", "99")


# --------------------------------------------------------------------------- one version number


def test_every_place_shows_the_history_version_not_the_reload_counter(client, django_user_model, caplog, process):
    """An API key created and a breaker forced open bump the reload counter, not the configuration:
    the history, the serving snapshot (dashboard, process list, explain page) and the log say one number."""
    from routing.config import live
    from routing.runtime.cluster import process_list
    from routing.runtime.process import Tally

    v1_v2()
    agent = Agent.objects.get(org__name="acme", name="support-bot")
    for n in range(3):
        ApiKey.objects.create(agent=agent, key_hash=f"{n}" * 64, prefix=f"sb-{n}")
    write_override(BreakerKey("local-a", "chat-a"), "force_open", "ops", "", None)
    previous = live.current()
    try:
        with caplog.at_level("INFO", logger="switchboard.config"):
            assert live.rebuild_from_db("test")
        snapshot = live.current()
        assert versions()[-1] == 2 and snapshot.config_version == 2
        assert snapshot.version > 2  # the reload counter went on counting
        assert "configuration version 2 loaded (test)" in caplog.text
        assert process_list.Heart(None, 0.0, Tally()).record(1.0, [])["version"] == 2
        client.force_login(django_user_model.objects.create_superuser("v-root", password="pw-v-123"))
        page = client.get("/admin/explain-route/").content.decode()
        assert "(version 2)" in page and f"(version {snapshot.version})" not in page
    finally:
        live.swap(previous)
