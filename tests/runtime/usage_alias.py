"""A migrated database of its own for the usage batch tests, as a connection alias."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections

from routing.runtime.usage import pgbatch, sqlitebatch, writer


@contextmanager
def migrated_alias(alias: str, django_db_blocker: Any, **settings: Any) -> Iterator[str]:
    """`alias` configured with `settings` over the default's, migrated; removed (and its cached SQL) afterwards."""
    from django.core.management import call_command

    config = dict(connections.settings["default"])
    config.update(
        HOST="",
        PORT="",
        USER="",
        PASSWORD="",
        OPTIONS={},
        TEST={"NAME": None, "CHARSET": None, "COLLATION": None, "MIGRATE": True, "MIRROR": None},
    )
    config.update(settings)
    connections.settings[alias] = config
    try:
        with django_db_blocker.unblock():
            call_command("migrate", database=alias, verbosity=0)
            yield alias
            connections[alias].close()
    finally:
        del connections[alias]
        del connections.settings[alias]
        writer._insert_sql.pop(alias, None)
        writer._column_converters.pop(alias, None)
        pgbatch._sql.pop(alias, None)
        sqlitebatch._statements.pop(alias, None)


def empty(alias: str) -> None:
    """No usage record, key total or rollup row left in `alias`."""
    from routing.models import KeyUsage, UsageRecord, UsageRollup

    with connections[alias].cursor() as cursor:
        for model in (UsageRecord, KeyUsage, UsageRollup):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")


@contextmanager
def rollup_table_missing(alias: str) -> Iterator[None]:
    """The rollup table renamed away meanwhile: only the aggregates can fail."""
    from routing.models import UsageRollup

    table = UsageRollup._meta.db_table
    with connections[alias].cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        yield
    finally:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table}_away RENAME TO {table}")


def both_ways(alias: str, batches: list[list[dict]], write: Any, read: Any) -> tuple[Any, Any]:
    """`read(alias)` after writing `batches` the Python way, then after writing them with `write`
    (an in-database path: pgbatch.write or sqlitebatch.write), which must take every batch."""
    from routing.runtime.usage.spool import dumps_line

    for rows in batches:
        writer.db_insert_python([dict(r) for r in rows], using=alias)
    python = read(alias)
    empty(alias)
    for rows in batches:
        lines = [dumps_line(dict(r)) for r in rows]
        assert write(connections[alias], alias, rows, lines), f"{write.__module__} refused the batch"
    return python, read(alias)
