"""import_config / export_config: validate-then-apply, no-op re-import, prune, YAML errors."""

from __future__ import annotations

import copy
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from policies.models import Agent, ApiKey, Org, OrgPolicy
from providers.models import Alias, FallbackLink, Model, Provider
from routing.config.document import RESILIENCE_DEFAULTS
from routing.config.store import ConfigInvalid, dump_yaml, export_document, import_document, load_yaml
from routing.models import ResilienceSettings
from tests.config.cases import CASE_IDS, CASES

pytestmark = pytest.mark.django_db


def run_import(tmp_path, doc_or_text, *args):
    path = tmp_path / "config.yaml"
    path.write_text(doc_or_text if isinstance(doc_or_text, str) else dump_yaml(doc_or_text))
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        call_command("import_config", str(path), *args, stdout=stdout)
    return out.read_text()


def export_text():
    return dump_yaml(export_document())


def test_import_creates_everything_and_export_matches_the_file(tmp_path, valid_doc):
    summary = run_import(tmp_path, valid_doc)
    assert re.search(r"\d+ created", summary) and "0 updated" in summary and "0 deleted" in summary
    doc = export_document()
    assert doc["resilience"] == RESILIENCE_DEFAULTS  # only max_retries given, and it is the default
    for key in ("providers", "models", "aliases", "orgs"):
        assert doc[key] == valid_doc[key]
    chat_a = Model.objects.get(public_id="chat-a")
    assert [link.target.public_id for link in chat_a.fallback_links.order_by("position")] == ["chat-b"]


def test_round_trip_is_identical_and_the_second_import_saves_nothing(tmp_path, valid_doc, saved_signals):
    run_import(tmp_path, valid_doc)
    first = export_text()
    saved_signals.clear()
    summary = run_import(tmp_path, first)
    assert saved_signals == []
    assert summary.startswith("No changes")
    assert export_text() == first


def test_round_trip_of_a_full_document(tmp_path, valid_doc, saved_signals):
    valid_doc["resilience"] = {
        "max_retries": 3,
        "breaker_cooldown_s": 12.5,
        "retry_budget_ratio": 0.1,
        "fallback_on": ["timeout", "context_length"],
    }
    valid_doc["providers"][0].update(connect_timeout_ms=300, health_check_path="/models", health_probe=True)
    valid_doc["models"][1].update(
        input_price_per_mtok=0.15,
        output_price_per_mtok=10,
        residency="eu",
        fallback_on=["provider_error"],
        total_timeout_ms=30000,
    )
    valid_doc["orgs"][0]["credentials"] = [
        {"provider": "local-a", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME", "base_url": "http://127.0.0.1:9005/v1"}
    ]
    valid_doc["orgs"][0]["policies"].append(
        {"pattern": "chat-b", "action": "allow", "priority": 5, "fallback_chain": []}
    )
    import_document(valid_doc)
    first = export_text()
    saved_signals.clear()
    assert not import_document(load_yaml(first)).changed
    assert saved_signals == []
    assert export_text() == first
    assert (
        export_document()["orgs"][0]["policies"][0]["fallback_chain"] == []
    )  # [] (no fallback) is not None (keep chain)


@pytest.mark.parametrize(("case", "mutate", "path", "fragment", "code"), CASES, ids=CASE_IDS)
def test_invalid_file_lists_path_and_reason_and_changes_nothing(
    tmp_path, imported, saved_signals, case, mutate, path, fragment, code
):
    before = export_text()
    bad = copy.deepcopy(imported)
    mutate(bad)
    bad["orgs"].append({"name": "new-org"})  # would be created if applied
    saved_signals.clear()
    with pytest.raises(CommandError) as exc:
        run_import(tmp_path, bad)
    assert f"{path}: " in str(exc.value) and fragment in str(exc.value)
    assert "nothing was changed" in str(exc.value)
    assert export_text() == before
    assert saved_signals == []


def test_yaml_syntax_error_names_the_line(tmp_path, imported):
    before = export_text()
    with pytest.raises(CommandError) as exc:
        run_import(tmp_path, "providers:\n  - name: a\n    base_url: [unclosed\nmodels: []\n")
    assert "YAML syntax error at line" in str(exc.value) and "config.yaml" in str(exc.value)
    assert export_text() == before
    with pytest.raises(ConfigInvalid) as invalid:
        load_yaml("a: [1,\n")
    assert invalid.value.errors[0].path == "<file>"


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_config", str(tmp_path / "nope.yaml"))


def test_update_saves_only_changed_rows(tmp_path, imported, saved_signals):
    imported["models"][1]["context_window"] = 64000
    saved_signals.clear()
    summary = run_import(tmp_path, imported)
    assert saved_signals == [("save", "Model"), ("save", "AuditRecord")]  # and the import's one audit record
    assert "1 updated (1 model)" in summary


def test_resilience_keys_missing_from_the_section_take_defaults(imported):
    import_document({"resilience": {"max_retries": 4, "breaker_cooldown_s": 5}})
    assert ResilienceSettings.objects.get(pk=1).breaker_cooldown_s == 5
    import_document({"resilience": {"max_retries": 4}})
    row = ResilienceSettings.objects.get(pk=1)
    assert (row.max_retries, row.breaker_cooldown_s) == (4, 30)
    import_document({"orgs": []})  # no section: the row is kept
    assert ResilienceSettings.objects.get(pk=1).max_retries == 4


def test_partial_file_may_refer_to_objects_already_in_the_database(imported):
    import_document({"orgs": [{"name": "beta", "agents": [{"name": "bot", "default_model": "fast"}]}]})
    assert Agent.objects.get(org__name="beta").default_model == "fast"
    with pytest.raises(ConfigInvalid) as exc:
        import_document({"orgs": [{"name": "gamma", "agents": [{"name": "bot", "default_model": "nothing"}]}]})
    assert exc.value.errors[0].path == "orgs[gamma].agents[bot].default_model"


def test_without_prune_absent_objects_stay_but_an_orgs_lists_follow_the_file(imported):
    import_document({"providers": [{"name": "extra", "base_url": "http://127.0.0.1:9002"}]})
    doc = copy.deepcopy(imported)
    doc["orgs"][0]["policies"] = [{"pattern": "*", "action": "allow", "priority": 1}]
    doc["providers"] = doc["models"] = []
    doc["aliases"] = {}
    import_document(doc)
    assert Provider.objects.filter(name="extra").exists() and Model.objects.count() == 2
    assert list(OrgPolicy.objects.values_list("pattern", flat=True)) == ["*"]


def test_prune_removes_objects_not_in_the_file(tmp_path, imported):
    extra = {
        "providers": [{"name": "extra", "base_url": "http://127.0.0.1:9002"}],
        "models": [
            {
                "id": "old-1",
                "provider": "extra",
                "upstream_model": "x",
                "capabilities": ["chat"],
                "fallbacks": ["old-2"],
            },
            {
                "id": "old-2",
                "provider": "extra",
                "upstream_model": "y",
                "capabilities": ["chat"],
            },
        ],
        "aliases": {"old": "old-1"},
        "orgs": [{"name": "gone", "agents": [{"name": "bot"}]}],
    }
    import_document(extra)
    ApiKey.objects.create(agent=Agent.objects.get(name="bot"), prefix="sb-x", key_hash="0" * 64)
    summary = run_import(tmp_path, imported, "--prune")
    assert "deleted" in summary
    assert sorted(Provider.objects.values_list("name", flat=True)) == ["local-a"]
    assert sorted(Model.objects.values_list("public_id", flat=True)) == ["chat-a", "chat-b"]
    assert list(Alias.objects.values_list("name", flat=True)) == ["fast"]
    assert list(Org.objects.values_list("name", flat=True)) == ["acme"]
    assert not ApiKey.objects.exists() and FallbackLink.objects.count() == 1


def test_dry_run_reports_but_saves_nothing(tmp_path, db, valid_doc):
    summary = run_import(tmp_path, valid_doc, "--dry-run")
    assert summary.startswith("Dry run, nothing saved: would have ") and "created" in summary
    assert not Provider.objects.exists()


def test_export_command_prints_yaml_and_writes_a_file(tmp_path, imported, capsys):
    call_command("export_config")
    printed = capsys.readouterr().out
    assert load_yaml(printed)["models"] == imported["models"]
    assert "capabilities: [chat, streaming, tools]" in printed
    call_command("export_config", "--output", str(tmp_path / "x.yaml"))
    assert (tmp_path / "x.yaml").read_text() == printed


@pytest.mark.django_db
def test_import_without_prune_never_deletes_agents_or_their_keys():
    """A small file naming an org but not its agents must not wipe the agents' API keys."""
    import_document(
        {
            "providers": [{"name": "p", "base_url": "http://127.0.0.1:9"}],
            "models": [{"id": "m", "provider": "p", "upstream_model": "u", "capabilities": ["chat"]}],
            "orgs": [
                {
                    "name": "keep",
                    "agents": [{"name": "bot"}, {"name": "cron"}],
                    "policies": [{"pattern": "m", "action": "allow", "priority": 1}],
                }
            ],
        }
    )
    ApiKey.objects.create(agent=Agent.objects.get(name="bot"), prefix="sb-k", key_hash="1" * 64)
    import_document({"orgs": [{"name": "keep", "default_action": "deny"}]})
    assert Org.objects.get(name="keep").default_action == "deny"
    assert sorted(Agent.objects.values_list("name", flat=True)) == ["bot", "cron"]
    assert ApiKey.objects.count() == 1
    assert OrgPolicy.objects.count() == 1  # lists the file leaves out are kept too
    import_document({"orgs": [{"name": "keep", "agents": [{"name": "bot", "default_model": "m"}]}]})
    assert sorted(Agent.objects.values_list("name", "default_model")) == [("bot", "m"), ("cron", "")]
    assert ApiKey.objects.count() == 1
