"""One dialect table: the column has no choices, validation and the admin read the table."""

from __future__ import annotations

import pytest

from providers.admin import ProviderForm
from providers.models import Provider
from routing.config.schema import DIALECTS
from routing.config.validation import dialect_problem
from routing.core.kinds import DIALECT_KINDS
from routing.upstream.dialects import DIALECTS as ADAPTERS


def test_every_dialect_of_the_table_has_an_adapter_serving_its_kinds():
    assert set(DIALECTS) == set(ADAPTERS)
    for name, kinds in DIALECT_KINDS.items():
        assert ADAPTERS[name].kinds == kinds, name


def test_the_dialect_column_has_no_choices_so_a_new_dialect_needs_no_migration():
    assert not Provider._meta.get_field("dialect").choices


def test_an_unknown_dialect_is_refused_naming_the_allowed_ones():
    message = dialect_problem("grpc")
    assert message is not None and "'grpc'" in message
    for name in DIALECTS:
        assert name in message
        assert dialect_problem(name) is None


@pytest.mark.django_db
def test_the_admin_offers_a_select_of_the_table_and_rejects_other_values():
    form = ProviderForm()
    assert [value for value, _ in form.fields["dialect"].widget.choices] == list(DIALECTS)
    form = ProviderForm(data={"name": "p1", "dialect": "grpc", "base_url": "http://127.0.0.1:9/v1"})
    assert not form.is_valid()
    assert "unknown dialect 'grpc'" in " ".join(form.errors["dialect"])
