"""The system check reports configuration saved around validation (e.g. via the ORM)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import OperationalError

from policies.models import Agent, OrgCredential, OrgPolicy
from providers.models import Alias, FallbackLink, Model, Provider
from routing.config.checks import check_routing_configuration
from routing.models import ResilienceSettings

pytestmark = pytest.mark.django_db


def _model(model_id):
    return Model.objects.get(public_id=model_id)


def _update(queryset, **values):
    return lambda: queryset().update(**values)


def _nine_links():
    chat_a = _model("chat-a")
    FallbackLink.objects.filter(model=chat_a).delete()
    for i in range(9):
        target = Model.objects.create(
            public_id=f"spare-{i}", provider=chat_a.provider, upstream_model="x", capabilities=["chat"]
        )
        FallbackLink.objects.create(model=chat_a, target=target, position=i)


# fmt: off
ORM_CASES = [
    ("self-fallback", lambda: FallbackLink.objects.create(model=_model("chat-a"), target=_model("chat-a"), position=1), "routing.E002", "models[chat-a].fallbacks[1]", "lists itself"),
    ("duplicate-link", lambda: FallbackLink.objects.create(model=_model("chat-a"), target=_model("chat-b"), position=1), "routing.E002", "models[chat-a].fallbacks[1]", "appears twice"),
    ("chain-too-long", _nine_links, "routing.E002", "models[chat-a].fallbacks", "at most 8"),
    ("policy-chain-unknown", _update(lambda: OrgPolicy.objects.filter(priority=10), fallback_chain=["chat-z"]), "routing.E002", "orgs[acme].policies[0].fallback_chain[0]", "unknown model 'chat-z'"),
    ("capability-mismatch", _update(lambda: Model.objects.filter(public_id="chat-b"), capabilities=["embeddings"]), "routing.E003", "models[chat-a].fallbacks[0]", "does not serve chat"),
    ("unknown-capability", _update(lambda: Model.objects.filter(public_id="chat-b"), capabilities=["chat", "telepathy"]), "routing.E003", "models[chat-b].capabilities[1]", "unknown capability"),
    ("malformed-pattern", _update(lambda: OrgPolicy.objects.filter(priority=10), pattern="chat-["), "routing.E004", "orgs[acme].policies[0].pattern", "malformed pattern"),
    ("provider-base-url", _update(lambda: Provider.objects.all(), base_url="ftp://x"), "routing.E005", "providers[local-a].base_url", "not an http(s) URL"),
    ("credential-base-url", lambda: OrgCredential.objects.create(org_id=Agent.objects.get().org_id, provider=Provider.objects.get(), base_url="localhost"), "routing.E005", "orgs[acme].credentials[local-a].base_url", "not an http(s) URL"),
    ("ratio", lambda: ResilienceSettings.objects.update_or_create(pk=1, defaults={"retry_budget_ratio": 2}), "routing.E006", "resilience.retry_budget_ratio", "between 0 and 1"),
    ("timeout-zero", _update(lambda: Model.objects.filter(public_id="chat-a"), connect_timeout_ms=0), "routing.E006", "models[chat-a].connect_timeout_ms", "positive whole number"),
    ("alias-collision", lambda: Alias.objects.create(name="chat-b", target=_model("chat-a")), "routing.E007", "aliases[chat-b]", "same name as a model id"),
    ("agent-default-model", _update(lambda: Agent.objects.all(), default_model="chat-z"), "routing.E008", "orgs[acme].agents[support-bot].default_model", "neither a model id nor an alias"),
    ("bad-provider-name", _update(lambda: Provider.objects.all(), name="local a!"), "routing.E001", "providers[local a!].name", "must be a slug"),
]
# fmt: on


def test_valid_configuration_passes(imported):
    assert check_routing_configuration() == []


@pytest.mark.parametrize(("case", "corrupt", "check_id", "path", "fragment"), ORM_CASES, ids=[c[0] for c in ORM_CASES])
def test_bad_configuration_saved_through_the_orm_is_reported(imported, case, corrupt, check_id, path, fragment):
    corrupt()
    errors = [e for e in check_routing_configuration() if e.msg.startswith(f"{path}: ") and fragment in e.msg]
    assert errors, [e.msg for e in check_routing_configuration()]
    assert errors[0].id == check_id
    assert errors[0].is_serious()


def test_manage_py_check_fails_on_a_bad_configuration(imported):
    OrgPolicy.objects.filter(priority=10).update(pattern="[")
    with pytest.raises(SystemCheckError, match=r"routing.E004.*orgs\[acme\].policies\[0\].pattern"):
        call_command("check")


def test_no_tables_yet_means_no_errors():
    with mock.patch(
        "routing.config.document.document_from_db", side_effect=OperationalError("no such table: providers_provider")
    ):
        assert check_routing_configuration() == []
