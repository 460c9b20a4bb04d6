"""A database that fails while the configuration is read: boot and `check` say what failed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import OperationalError
from django.db.backends.utils import CursorWrapper

from routing.config import live
from routing.config.checks import check_routing_configuration


@contextlib.contextmanager
def failing_queries(table: str, message: str) -> Iterator[None]:
    """Every query on `table`, in any thread, fails at the database with `message`."""
    real = CursorWrapper.execute

    def execute(self: CursorWrapper, sql: str, params: object = None) -> object:
        if f'"{table}"' in sql:
            raise OperationalError(message)
        return real(self, sql, params)

    with mock.patch.object(CursorWrapper, "execute", execute):
        yield


@pytest.fixture
def no_last_good_file():
    """These boots must fail: no last good configuration to fall back on (docs/usage-records.md)."""
    from routing.config import lastgood

    lastgood.path().unlink(missing_ok=True)


def test_boot_names_the_table_and_the_database_message_and_does_not_say_migrate(imported, no_last_good_file):
    with failing_queries("providers_model", "disk I/O error"), pytest.raises(ImproperlyConfigured) as exc:
        live.boot()
    text = str(exc.value)
    assert "providers_model" in text and "disk I/O error" in text
    assert "migrate`" not in text.replace("migrate will not help", "")


def test_boot_against_an_unreachable_database_says_so_and_claims_nothing_about_the_schema(imported, no_last_good_file):
    message = 'connection to server at "10.0.0.9", port 5432 failed: timeout expired'
    with failing_queries("providers_model", message), pytest.raises(ImproperlyConfigured) as exc:
        live.boot()
    text = str(exc.value)
    assert text.startswith("Cannot reach the database") and "timeout expired" in text
    assert "DATABASE_URL" in text and "schema" not in text and "migrate" not in text


def test_boot_on_a_missing_table_says_run_migrate(imported, no_last_good_file):
    with failing_queries("policies_orgpolicy", "no such table: policies_orgpolicy"):
        with pytest.raises(ImproperlyConfigured, match=r"policies_orgpolicy.*python manage.py migrate"):
            live.boot()


def test_check_reports_a_read_failure_as_an_error_not_no_issues(imported):
    with failing_queries("providers_fallbacklink", "database is locked"):
        (error,) = check_routing_configuration()
        assert error.id == "routing.E009" and error.is_serious()
        assert "providers_fallbacklink" in error.msg and "database is locked" in error.msg
        with pytest.raises(SystemCheckError, match=r"routing.E009.*providers_fallbacklink"):
            call_command("check")


def test_check_stays_quiet_before_migrate(imported):
    with failing_queries("providers_provider", "no such table: providers_provider"):
        assert check_routing_configuration() == []
