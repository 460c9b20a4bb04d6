"""Deployments in the configuration (docs/deployments.md): every rule through validate_document,
import_config, the admin and `manage.py check`; round trips with and without deployments."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.urls import reverse

from providers.models import Deployment, Model, Provider
from routing.config.checks import check_routing_configuration
from routing.config.snapshot import build_snapshot
from routing.config.store import dump_yaml, export_document, import_document, load_yaml
from routing.config.validation import validate_document
from tests.config.admin_helpers import page_data, set_rows, text
from tests.config.conftest import VALID
from tests.core.breakers import breaker_settings

pytestmark = pytest.mark.django_db

CHAT_D = {
    "id": "chat-d",
    "capabilities": ["chat", "streaming"],
    "routing": "least_busy",
    "deployments": [
        {"provider": "local-a", "upstream_model": "gpt-4o-mini", "weight": 3, "rpm": 600},
        {"provider": "local-b", "upstream_model": "gpt-4o-mini-west", "tpm": 200000},
    ],
    "fallbacks": ["chat-b"],
}


def with_deployments() -> dict[str, Any]:
    doc = copy.deepcopy(VALID)
    doc["providers"] += [
        {"name": "local-b", "dialect": "openai", "base_url": "http://127.0.0.1:9002/v1"},
        {"name": "tei-x", "dialect": "tei", "base_url": "http://127.0.0.1:9003"},
    ]
    doc["models"].append(copy.deepcopy(CHAT_D))
    return doc


def _d(doc: dict[str, Any], i: int) -> dict[str, Any]:
    return next(m for m in doc["models"] if m["id"] == "chat-d")["deployments"][i]


def _m(doc: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in doc["models"] if m["id"] == "chat-d")


P = "models[chat-d]"
# fmt: off
DEPLOYMENT_CASES = [
    # (id, mutate, path, fragment, check id)
    ("unknown-provider", lambda d: _d(d, 1).update(provider="nowhere"), f"{P}.deployments[nowhere].provider", "deployment 'nowhere' of model 'chat-d' names unknown provider 'nowhere'", "routing.E008"),
    ("duplicate-provider", lambda d: _d(d, 1).update(provider="local-a"), f"{P}.deployments[local-a].provider", "model 'chat-d' has two deployments on provider 'local-a'", "routing.E001"),
    ("weight-zero", lambda d: _d(d, 1).update(weight=0), f"{P}.deployments[local-b].weight", "weight of deployment 'local-b' of model 'chat-d' must be a positive whole number", "routing.E006"),
    ("weight-negative", lambda d: _d(d, 0).update(weight=-2), f"{P}.deployments[local-a].weight", "got -2", "routing.E006"),
    ("rpm-zero", lambda d: _d(d, 0).update(rpm=0), f"{P}.deployments[local-a].rpm", "rpm of deployment 'local-a' of model 'chat-d' must be a positive whole number of requests per minute", "routing.E006"),
    ("tpm-negative", lambda d: _d(d, 1).update(tpm=-1), f"{P}.deployments[local-b].tpm", "tpm of deployment 'local-b' of model 'chat-d' must be a positive whole number of tokens per minute", "routing.E006"),
    ("shorthand-and-deployments", lambda d: _m(d).update(provider="local-a", upstream_model="x"), f"{P}.provider", "model 'chat-d' gives both 'provider' and deployments", "routing.E001"),
    ("dialect-cannot-serve", lambda d: _d(d, 1).update(provider="tei-x"), f"{P}.deployments[tei-x].provider", "deployment 'tei-x' of model 'chat-d': provider 'tei-x' speaks the tei dialect, which cannot serve chat", "routing.E003"),
    ("unknown-routing", lambda d: _m(d).update(routing="fastest"), f"{P}.routing", "routing of model 'chat-d' is 'fastest': use one of weighted | least_busy | latency", "routing.E006"),
    ("empty-deployments", lambda d: _m(d).update(deployments=[]), f"{P}.deployments", "deployments of model 'chat-d' is empty", "routing.E001"),
    ("deployment-missing-upstream", lambda d: _d(d, 1).pop("upstream_model"), f"{P}.deployments[local-b].upstream_model", "deployment 'local-b' of model 'chat-d' is missing the required field 'upstream_model'", "routing.E001"),
    ("deployment-unknown-field", lambda d: _d(d, 1).update(region="eu"), f"{P}.deployments[local-b].region", "unknown field 'region' for deployment 'local-b' of model 'chat-d'", "routing.E001"),
]
# fmt: on
IDS = [c[0] for c in DEPLOYMENT_CASES]


def _import(tmp_path, doc_or_text) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(doc_or_text if isinstance(doc_or_text, str) else dump_yaml(doc_or_text))
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        call_command("import_config", str(path), stdout=stdout)
    return out.read_text()


def test_the_document_with_deployments_is_valid():
    assert validate_document(with_deployments()) == []


@pytest.mark.parametrize(("case", "mutate", "path", "fragment", "code"), DEPLOYMENT_CASES, ids=IDS)
def test_rule_through_validate_document(case, mutate, path, fragment, code):
    doc = with_deployments()
    mutate(doc)
    errors = [e for e in validate_document(doc) if e.path == path and fragment in e.message]
    assert errors, [str(e) for e in validate_document(doc)]
    assert errors[0].code == code


@pytest.mark.parametrize(("case", "mutate", "path", "fragment", "code"), DEPLOYMENT_CASES, ids=IDS)
def test_rule_through_import_config_changes_nothing(tmp_path, case, mutate, path, fragment, code):
    import_document(with_deployments())
    before = dump_yaml(export_document())
    bad = with_deployments()
    mutate(bad)
    with pytest.raises(CommandError) as exc:
        _import(tmp_path, bad)
    assert f"{path}: " in str(exc.value) and fragment in str(exc.value)
    assert dump_yaml(export_document()) == before


def test_export_import_round_trip_with_deployments_is_identical(tmp_path, saved_signals):
    _import(tmp_path, with_deployments())
    first = dump_yaml(export_document())
    exported = load_yaml(first)
    chat_d = next(m for m in exported["models"] if m["id"] == "chat-d")
    assert chat_d == CHAT_D  # no provider / upstream_model shorthand, weights and capacity as written
    saved_signals.clear()
    assert _import(tmp_path, first).startswith("No changes")
    assert saved_signals == []
    assert dump_yaml(export_document()) == first
    assert list(Deployment.objects.order_by("position").values_list("provider__name", "weight", "rpm", "tpm")) == [
        ("local-a", 3, 600, None),
        ("local-b", None, None, 200000),
    ]


def test_an_old_single_provider_file_imports_and_exports_unchanged(tmp_path):
    old = dump_yaml(copy.deepcopy(VALID))
    _import(tmp_path, old)
    assert dump_yaml({k: v for k, v in export_document().items() if k != "resilience"}) == dump_yaml(
        {k: v for k, v in load_yaml(old).items() if k != "resilience"}
    )
    assert Deployment.objects.count() == 0
    assert "deployments" not in dump_yaml(export_document()) and "routing" not in dump_yaml(export_document())


def test_switching_between_shorthand_and_deployments(tmp_path):
    _import(tmp_path, with_deployments())
    doc = with_deployments()
    chat_d = _m(doc)
    del chat_d["deployments"], chat_d["routing"]
    chat_d.update(provider="local-b", upstream_model="solo")
    _import(tmp_path, doc)
    assert Deployment.objects.count() == 0
    exported = next(m for m in export_document()["models"] if m["id"] == "chat-d")
    assert exported["provider"] == "local-b" and exported["upstream_model"] == "solo" and "deployments" not in exported
    _import(tmp_path, with_deployments())
    assert Deployment.objects.count() == 2 and Model.objects.get(public_id="chat-d").provider is None


def test_snapshot_builds_each_deployment_with_its_provider_and_timeouts():
    doc = with_deployments()
    doc["providers"][1]["first_token_timeout_ms"] = 7000  # local-b's own timeout (R4)
    snap = build_snapshot(doc, [], {})
    chat_d = snap.models["chat-d"]
    assert chat_d.routing == "least_busy"
    a, b = chat_d.deployments
    assert (a.provider.name, a.model.upstream_model, a.weight, a.rpm, a.tpm) == ("local-a", "gpt-4o-mini", 3, 600, None)
    assert (b.provider.name, b.model.upstream_model, b.weight, b.tpm) == ("local-b", "gpt-4o-mini-west", 1, 200000)
    assert b.model.timeouts.first_token_ms == 7000 and a.model.timeouts.first_token_ms == 30000
    assert snap.models["chat-a"].deployments == () and snap.models["chat-a"].routing == "weighted"


# manage.py check: rows saved around validation (the ORM) -------------------------


def _orm_doc() -> None:
    import_document(with_deployments())


def _dep(provider: str):
    return Deployment.objects.get(model__public_id="chat-d", provider__name=provider)


# fmt: off
ORM_CASES = [
    ("weight-zero", lambda: Deployment.objects.filter(pk=_dep("local-b").pk).update(weight=0), f"{P}.deployments[local-b].weight", "routing.E006"),
    ("rpm-zero", lambda: Deployment.objects.filter(pk=_dep("local-a").pk).update(rpm=0), f"{P}.deployments[local-a].rpm", "routing.E006"),
    ("tei-behind-chat", lambda: Deployment.objects.filter(pk=_dep("local-b").pk).update(provider=Provider.objects.get(name="tei-x")), f"{P}.deployments[tei-x].provider", "routing.E003"),
    ("shorthand-and-deployments", lambda: Model.objects.filter(public_id="chat-d").update(provider=Provider.objects.get(name="local-a"), upstream_model="x"), f"{P}.provider", "routing.E001"),
    ("unknown-routing", lambda: Model.objects.filter(public_id="chat-d").update(routing="fastest"), f"{P}.routing", "routing.E006"),
]
# fmt: on


@pytest.mark.parametrize(("case", "corrupt", "path", "check_id"), ORM_CASES, ids=[c[0] for c in ORM_CASES])
def test_rule_through_the_system_check(case, corrupt, path, check_id):
    _orm_doc()
    assert check_routing_configuration() == []
    corrupt()
    errors = [e for e in check_routing_configuration() if e.msg.startswith(f"{path}: ")]
    assert errors, [e.msg for e in check_routing_configuration()]
    assert errors[0].id == check_id and errors[0].is_serious()


def test_manage_py_check_fails_on_a_bad_deployment():
    _orm_doc()
    Deployment.objects.filter(pk=_dep("local-b").pk).update(weight=0)
    with pytest.raises(SystemCheckError, match=r"models\[chat-d\].deployments\[local-b\].weight"):
        call_command("check")


# the admin ------------------------------------------------------------------------


def _change_url(obj) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def _pk(name: str) -> int:
    return Provider.objects.get(name=name).pk


ROWS = [
    {"position": 0, "provider": "local-a", "upstream_model": "gpt-4o-mini", "weight": "3", "rpm": "600"},
    {"position": 1, "provider": "local-b", "upstream_model": "gpt-4o-mini-west", "tpm": "200000"},
]


def _rows(**changes: Any) -> list[dict[str, Any]]:
    rows = copy.deepcopy(ROWS)
    for key, value in changes.items():
        index, field = key.split("__")
        rows[int(index)][field] = value
    for row in rows:
        row["provider"] = _pk(row["provider"])
    return rows


# fmt: off
ADMIN_CASES = [
    # (id, inline row changes, model form changes, fragment)
    ("duplicate-provider", {"1__provider": "local-a"}, {}, "model 'chat-d' has two deployments on provider 'local-a'"),
    ("weight-zero", {"1__weight": "0"}, {}, "weight of deployment 'local-b' of model 'chat-d' must be a positive whole number"),
    ("rpm-zero", {"0__rpm": "0"}, {}, "rpm of deployment 'local-a' of model 'chat-d' must be a positive whole number"),
    ("tpm-zero", {"1__tpm": "0"}, {}, "tpm of deployment 'local-b' of model 'chat-d' must be a positive whole number"),
    ("dialect-cannot-serve", {"1__provider": "tei-x"}, {}, "provider 'tei-x' speaks the tei dialect, which cannot serve chat"),
    ("shorthand-and-deployments", {}, {"provider": "local-a", "upstream_model": "x"}, "model 'chat-d' gives both 'provider' and deployments"),
]
# fmt: on


@pytest.mark.parametrize(
    ("case", "row_changes", "form_changes", "fragment"), ADMIN_CASES, ids=[c[0] for c in ADMIN_CASES]
)
def test_rule_through_the_admin_saves_nothing(admin_client_, case, row_changes, form_changes, fragment):
    _orm_doc()
    url = _change_url(Model.objects.get(public_id="chat-d"))
    data = page_data(admin_client_.get(url))
    set_rows(data, "deployments", [{**r, "id": ""} for r in _rows(**row_changes)])
    for i, dep in enumerate(Deployment.objects.filter(model__public_id="chat-d").order_by("position")):
        data[f"deployments-{i}-id"] = dep.pk
        data[f"deployments-{i}-model"] = dep.model_id
    for key, value in form_changes.items():
        data[key] = _pk(value) if key == "provider" else value
    before = dump_yaml(export_document())
    response = admin_client_.post(url, data)
    assert response.status_code == 200, "the form should be shown again with errors"
    assert fragment in text(response)
    assert dump_yaml(export_document()) == before


def test_admin_adds_a_model_with_deployments_and_shows_their_breakers(admin_client_):
    import_document(with_deployments())
    url = reverse("admin:providers_model_add")
    data = page_data(admin_client_.get(url))
    data.update(public_id="chat-e", capabilities=["chat"], routing="latency")
    set_rows(data, "deployments", _rows())
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)[:4000]
    chat_e = next(m for m in export_document()["models"] if m["id"] == "chat-e")
    assert chat_e["routing"] == "latency" and "provider" not in chat_e
    assert [d["provider"] for d in chat_e["deployments"]] == ["local-a", "local-b"]
    assert chat_e["deployments"][0]["weight"] == 3 and chat_e["deployments"][1]["tpm"] == 200000

    from routing.core.breaker import BreakerKey
    from routing.runtime.process import current

    key = BreakerKey("local-b", "chat-e")
    try:
        for _ in range(5):
            with breaker_settings(current().breakers, 5, 30.0):
                current().breakers.record_failure(key, False)
        page = text(admin_client_.get(_change_url(Model.objects.get(public_id="chat-e"))))
        assert '<b>local-b</b>: <span data-breaker-state="open">open</span>' in page
        assert '<b>local-a</b>: <span data-breaker-state="closed">closed</span>' in page
    finally:
        current().breakers.reset(key)
