"""Usage rows into the database: conversion, the INSERT, and the writer's own thread.

`db_insert` writes a batch in one transaction with `ON CONFLICT (record_id) DO NOTHING`,
so replaying rows that are already committed is harmless, and adds the batch's new
rows to the per-key totals (routing.runtime.usage.keys) and the hourly aggregates
(routing.runtime.usage.rollup). The database does all of it (routing.runtime.usage.pgbatch
on PostgreSQL, routing.runtime.usage.sqlitebatch on SQLite); `db_insert_python` converts
row by row here (a batch those refuse, and other databases). Text that PostgreSQL refuses
(NUL, lone surrogates) is escaped, never dropped: see docs/usage-records.md#batch and
#characters.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from routing.runtime.usage import keys as key_usage
from routing.runtime.usage import pgbatch, rollup, sqlitebatch
from routing.runtime.usage.bounds import MAX_JSON_ITEMS, MAX_TEXT, TRAIL_ITEM_VALUES, TRAIL_VALUE_CHARS

log = logging.getLogger("switchboard.usage")

Row = dict[str, Any]


class _Poison(Exception):
    """The database refused the batch for its content, not for being unreachable."""


def pg_safe(text: str) -> str:
    """`text` with what PostgreSQL refuses in a text column escaped: NUL as \\x00, lone surrogates as \\udXXX."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# --------------------------------------------------------------------------- conversion


@functools.cache
def _field_converters() -> dict[str, Callable[[Any], Any]]:
    """Per UsageRecord field: turn a record value (live or read back from JSON) into a column value
    (once per interpreter: the model's fields never change in it)."""
    from django.db import models

    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import UsageRecord

    conv: dict[str, Callable[[Any], Any]] = {}
    for f in UsageRecord._meta.concrete_fields:
        if f.primary_key:
            continue
        if isinstance(f, models.CharField):
            conv[f.name] = _char(f.max_length or 0)
        elif isinstance(f, models.TextField):  # bodies: already cut at capture; this bounds a hostile spool row
            conv[f.name] = _char(MAX_TEXT)
        elif isinstance(f, models.DateTimeField):
            conv[f.name] = _datetime
        elif isinstance(f, models.DecimalField):
            conv[f.name] = _decimal
        elif isinstance(f, models.BooleanField):
            conv[f.name] = bool
        elif isinstance(f, models.PositiveIntegerField):
            conv[f.name] = _nullable_uint if f.null else _uint
        elif isinstance(f, models.FloatField):
            conv[f.name] = _nullable_float if f.null else _float
        elif isinstance(f, models.JSONField):
            conv[f.name] = _json
    return conv


def _char(max_length: int) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        return "" if value is None else pg_safe(str(value))[:max_length]

    return convert


def _datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.now(tz=UTC)


def _decimal(value: Any) -> Decimal | None:
    if value is None:
        return None
    return Decimal(str(value)).quantize(Decimal("0.00000001"))


def _json(value: Any) -> list[Any]:
    """A list of short JSON values (the trail: [model id, outcome] pairs), text made PostgreSQL-safe."""
    if not isinstance(value, list | tuple):
        return []
    out: list[Any] = []
    for item in value[:MAX_JSON_ITEMS]:
        if isinstance(item, list | tuple):
            out.append([pg_safe(str(v))[:TRAIL_VALUE_CHARS] for v in item[:TRAIL_ITEM_VALUES]])
        elif item is not None:
            out.append(pg_safe(str(item))[:TRAIL_VALUE_CHARS])
    return out


def _uint(value: Any) -> int:
    return max(0, int(value or 0))


def _nullable_uint(value: Any) -> int | None:
    return None if value is None else max(0, int(value))


def _float(value: Any) -> float:
    return float(value or 0)


def _nullable_float(value: Any) -> float | None:
    return None if value is None else float(value)


_insert_sql: dict[str, tuple[str, list[Any]]] = {}


def _insert_statement(using: str) -> tuple[str, list[Any]]:
    """`INSERT ... ON CONFLICT (record_id) DO NOTHING` for this database, and its columns (cached)."""
    cached = _insert_sql.get(using)
    if cached is None:
        from django.db import connections

        # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
        from routing.models import UsageRecord

        quote = connections[using].ops.quote_name
        fields = [f for f in UsageRecord._meta.concrete_fields if not f.primary_key]
        columns = ", ".join(quote(f.column) for f in fields)
        sql = (
            f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({columns}) "
            f"VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT ({quote('record_id')}) DO NOTHING"
        )
        cached = _insert_sql[using] = (sql, fields)
    return cached


_column_converters: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}


def _converters_for(fields: list[Any], ops: Any, using: str) -> list[tuple[str, Callable[[Any], Any]]]:
    """Per column: (record key, value -> adapted column value), composed once per database."""
    cached = _column_converters.get(using)
    if cached is not None:
        return cached
    from django.db import models

    conv = _field_converters()
    out: list[tuple[str, Callable[[Any], Any]]] = []
    for f in fields:
        base = conv[f.name]
        if isinstance(f, models.DateTimeField):
            out.append((f.name, lambda v, base=base: ops.adapt_datetimefield_value(base(v))))
        elif isinstance(f, models.DecimalField):
            out.append(
                (
                    f.name,
                    lambda v, base=base, f=f: (
                        None if v is None else ops.adapt_decimalfield_value(base(v), f.max_digits, f.decimal_places)
                    ),
                )
            )
        elif isinstance(f, models.JSONField):
            out.append((f.name, lambda v, base=base: ops.adapt_json_value(base(v), None)))
        else:
            out.append((f.name, base))
    _column_converters[using] = out
    return out


def to_values(row: Mapping[str, Any], converters: list[tuple[str, Callable[[Any], Any]]]) -> tuple[Any, ...]:
    """One record as the column values of an INSERT, adapted for the database like the ORM does."""
    if not row.get("request_id"):
        raise ValueError("usage record without request_id")
    if not row.get("record_id"):
        row = {**row, "record_id": str(row["request_id"])[:32]}
    get = row.get
    return tuple(convert(get(name)) for name, convert in converters)


# The writer shares the GIL, and on a small machine the cores, with the event loop. A SQLite
# batch of 500 rows converted and inserted in one go held them for 15-25 ms, and the requests
# served meanwhile took several times as long: the 1-client p99 (docs/performance.md#writer).
# So a batch goes in chunks, each followed by a pause as long as the chunk took: while it
# writes, the writer uses at most half of the time, and a request waits at most one chunk.
# Not while it falls behind (`hurry`): under a saturating load each pause also cost a wait
# for the GIL, the writer wrote ~300 rows a second against 2 900 requests, and the records
# piled up until they spilled to a spool file read back whole (RSS 100 → 220 MB in 15 s).
CHUNK_ROWS = 25


class Pace:
    """Chunks of a list, with a pause after each (but the last) as long as the caller's work on it
    took, unless `hurry()` says the writer is behind (then no pause: it catches up first)."""

    def __init__(
        self,
        sleep: Callable[[float], Any] = time.sleep,
        clock: Callable[[], float] = time.perf_counter,
        hurry: Callable[[], bool] = lambda: False,
    ) -> None:
        self._sleep = sleep
        self._clock = clock
        self._hurry = hurry

    def chunks(self, items: list[Any], size: int = CHUNK_ROWS) -> Iterator[list[Any]]:
        for start in range(0, len(items), size):
            began = self._clock()
            yield items[start : start + size]
            if start + size < len(items) and not self._hurry():
                self._sleep(max(0.0, self._clock() - began))


def db_insert(
    rows: list[Row], using: str = "default", lines: list[bytes] | None = None, pace: Pace | None = None
) -> None:
    """Insert rows in one transaction; replays of committed rows are ignored (record_id unique).

    The database does it all, from `lines` (the rows' journal lines) when the caller has
    them: one statement on PostgreSQL (routing.runtime.usage.pgbatch), a dozen inside SQLite
    (routing.runtime.usage.sqlitebatch). A batch they cannot take exactly (a NUL, an odd
    value) is written by `db_insert_python`.
    Raises OperationalError/InterfaceError (and other DatabaseErrors) when the database
    cannot take them, `_Poison` when it refuses their content.
    """
    from django.db import DatabaseError, InterfaceError, OperationalError, connections

    connection = connections[using]
    fast = {"postgresql": pgbatch.write, "sqlite": sqlitebatch.write}.get(connection.vendor)
    if rows and fast is not None:
        try:
            if fast(connection, using, rows, lines):
                _AGGREGATES_FAILING.clear()
                return
        except (OperationalError, InterfaceError):
            raise  # unreachable: the caller keeps the rows
        except DatabaseError:  # refused content, or only the aggregates failing: the Python path decides
            pass
    db_insert_python(rows, using=using, pace=pace)


def db_insert_python(rows: list[Row], using: str = "default", pace: Pace | None = None) -> None:
    """`db_insert` converting each row in Python: batches the in-database paths refuse.

    Plain `executemany` rather than ORM objects: this runs on a thread beside the
    event loop, and every bit of Python work here is GIL time the loop waits for.
    """
    from django.db import DataError, IntegrityError, connections, transaction

    connection = connections[using]
    pace = pace or Pace()
    sql, fields = _insert_statement(using)
    converters = _converters_for(fields, connection.ops, using)
    try:
        values = [to_values(r, converters) for chunk in pace.chunks(rows) for r in chunk]
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise _Poison(str(exc)) from exc
    try:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            fresh = _fresh_rows(cursor, connection, rows)  # before the insert: a replay must not count twice
            for chunk in pace.chunks(values):
                cursor.executemany(sql, chunk)
            _add_aggregates(cursor, connection, fresh, using)
    except (IntegrityError, DataError) as exc:
        raise _Poison(str(exc)) from exc


# Said once per failure, not once per batch: set while the aggregates fail (any writer thread of the interpreter).
_AGGREGATES_FAILING = threading.Event()


def _add_aggregates(cursor: Any, connection: Any, rows: list[Row], using: str) -> None:
    """Per-key totals and hourly rollups, in a savepoint: if only they fail (a table missing), the records commit."""
    from django.db import DatabaseError, transaction

    if not rows:
        return
    try:
        with transaction.atomic(using=using):
            key_usage.add(cursor, connection, rows, _datetime)
            rollup.add(cursor, connection, rows, _datetime)
    except DatabaseError as exc:
        if not _AGGREGATES_FAILING.is_set():
            log.warning("usage aggregates not updated (%s); the usage records are written all the same", exc)
        _AGGREGATES_FAILING.set()
        return
    _AGGREGATES_FAILING.clear()


def _fresh_rows(cursor: Any, connection: Any, rows: list[Row]) -> list[Row]:
    """The rows of the batch not stored yet (record_id as `to_values` fills it)."""
    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import UsageRecord

    keyed = [r if r.get("record_id") else {**r, "record_id": str(r["request_id"])[:32]} for r in rows]
    return key_usage.new_rows(cursor, connection.ops.quote_name, UsageRecord._meta.db_table, keyed)


# Background threads run at a lower CPU priority than the event loop's: on a machine with more
# runnable threads than cores, the kernel then gives the core to the loop (a request) before the
# usage writer's batch, whose rows are not waited for. Measured: 1-client added p99 -0.2 ms, the
# same throughput, and a saturated gateway's records written as soon after the burst as before
# (docs/performance.md#writer).
BACKGROUND_NICE = 10


def lower_priority(nice: int = BACKGROUND_NICE) -> bool:
    """Raise the calling thread's nice value by `nice` (at most 19); True if done.

    Linux only: there a thread id is a scheduling entity of its own; elsewhere the same
    call would renice a whole process (or an unrelated one), so it is skipped. Raising a
    nice value needs no privilege.
    """
    if nice <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError:
        return False
    return True


class DaemonWorker:
    """One daemon thread running submitted calls in order, below the event loop's CPU priority.

    A dedicated thread keeps one database connection for the writer, and being a
    daemon it can never hold the interpreter's exit hostage on a hung connect.
    """

    def __init__(self, name: str, nice: int = BACKGROUND_NICE) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._nice = nice
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((fn, future))
        return future

    def _run(self) -> None:
        lower_priority(self._nice)
        while True:
            fn, future = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
                future.set_exception(exc)
