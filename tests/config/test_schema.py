"""The schema table agrees with the models, the core's value type and the validators."""

from __future__ import annotations

import dataclasses

import pytest

from policies.models import Agent, Org, OrgCredential, OrgPolicy
from providers.models import Alias, Model, Provider
from routing.config.schema import (
    AGENT,
    ALIAS,
    CREDENTIAL,
    ENTITIES,
    MODEL,
    ORG,
    POLICY,
    PROVIDER,
    RESILIENCE,
    RESILIENCE_DEFAULTS,
)
from routing.config.snapshot import build_resilience
from routing.config.validation import CHECKS, validate_document
from routing.core.kinds import ENDPOINT_KINDS
from routing.core.resilience import Resilience
from routing.models import ResilienceSettings

TABLES = [
    (PROVIDER, Provider),
    (MODEL, Model),
    (ALIAS, Alias),
    (ORG, Org),
    (AGENT, Agent),
    (POLICY, OrgPolicy),
    (CREDENTIAL, OrgCredential),
    (RESILIENCE, ResilienceSettings),
]
BOOKKEEPING = {"id", "updated_at", "org", "model"}  # not configuration: keys, timestamps, parent links


def test_resilience_defaults_agree_everywhere():
    """The core dataclass, the document defaults and a fresh database row are one set of values."""
    row = ResilienceSettings()
    from_row = build_resilience({f.name: getattr(row, f.attr) for f in RESILIENCE})
    assert build_resilience({}) == Resilience() == from_row
    assert set(RESILIENCE_DEFAULTS) == {f.name for f in dataclasses.fields(Resilience)}
    assert RESILIENCE_DEFAULTS["fallback_on"] == ["provider_error", "rate_limited", "timeout", "circuit_open"]


@pytest.mark.parametrize(("entity", "model"), TABLES, ids=lambda v: getattr(v, "__name__", ""))
def test_every_configuration_column_has_a_schema_row_and_back(entity, model):
    columns = {f.name for f in model._meta.concrete_fields} - BOOKKEEPING
    schema = {f.attr for f in entity if f.column is not None}
    assert columns == schema, f"{model.__name__}: columns {sorted(columns ^ schema)} differ from the schema"


def test_every_value_rule_the_schema_names_exists():
    names = {f.check for entity in ENTITIES.values() for f in entity if f.check}
    assert names <= set(CHECKS)


def test_choices_in_the_schema_are_enforced(valid_doc):
    valid_doc["providers"][0]["dialect"] = "grpc"
    valid_doc["orgs"][0]["policies"][0]["action"] = "block"
    paths = {e.path for e in validate_document(valid_doc)}
    assert {"providers[local-a].dialect", "orgs[acme].policies[0].action"} <= paths


def test_one_list_of_endpoint_kinds():
    from routing.plan.preflight import KINDS as preflight_kinds
    from routing.upstream.dialects.base import KINDS as dialect_kinds

    assert set(dialect_kinds) == set(preflight_kinds) == set(ENDPOINT_KINDS)
    assert set(ENDPOINT_KINDS) <= set(MODEL["capabilities"].choices)
