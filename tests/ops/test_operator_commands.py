"""Operator commands read the configuration through live.load_snapshot: invalid means a clear refusal."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from providers.models import Model, Provider


@pytest.fixture
def invalid_config(db):
    """A provider whose base URL is no URL and a model whose fallback names no model."""
    provider = Provider.objects.create(name="cmd-p", dialect="openai", base_url="not-a-url")
    Model.objects.create(public_id="cmd-m", provider=provider, upstream_model="x", capabilities=["chat"])
    return provider


def test_probe_providers_refuses_an_invalid_configuration_instead_of_probing_it(invalid_config):
    with pytest.raises(CommandError) as exc:
        call_command("probe_providers")
    assert exc.value.returncode == 2
    assert "does not validate" in str(exc.value) and "providers[cmd-p].base_url" in str(exc.value)


def test_explain_route_refuses_an_invalid_configuration_listing_the_problems(invalid_config):
    with pytest.raises(CommandError) as exc:
        call_command("explain_route", "--org", "nobody", "--model", "cmd-m")
    assert "does not validate" in str(exc.value) and "providers[cmd-p].base_url" in str(exc.value)
