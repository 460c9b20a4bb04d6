"""A usage batch written inside SQLite (routing.runtime.usage.sqlitebatch) stores what the Python path stores.

Each test gets a migrated SQLite database file of its own (connection alias ALIAS), in both
test modes. "The same" is checked on the raw rows: every column's value and its storage
class (INTEGER, REAL, TEXT) as SQLite hands it back, the id aside.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.db import connections

from routing.models import KeyUsage, UsageRecord, UsageRollup
from routing.runtime.usage import UsageSink, sqlitebatch, writer
from routing.runtime.usage.spool import dumps_line
from tests.runtime.test_usage_pgbatch import T0, edge_cases, realistic
from tests.runtime.usage_alias import both_ways, empty, migrated_alias, rollup_table_missing

ALIAS = "usage_sqlitebatch"
HOUR = 3600 * math.floor(T0 / 3600)


@pytest.fixture(scope="module")
def lite(django_db_blocker, tmp_path_factory) -> Iterator[str]:
    """A migrated SQLite database file of its own, as connection alias ALIAS."""
    path = tmp_path_factory.mktemp("sqlitebatch") / "usage.sqlite3"
    with migrated_alias(ALIAS, django_db_blocker, ENGINE="django.db.backends.sqlite3", NAME=str(path)):
        yield ALIAS


@pytest.fixture
def db(lite: str, django_db_blocker) -> Iterator[str]:
    with django_db_blocker.unblock():
        empty(lite)
        yield lite


def raw(alias: str) -> tuple[list[tuple], ...]:
    """Every row of the three tables as SQLite stores it (typed values, no id), sorted."""
    out = []
    with connections[alias].cursor() as cursor:
        for model in (UsageRecord, KeyUsage, UsageRollup):
            cursor.execute(f"SELECT * FROM {model._meta.db_table}")
            names = [d[0] for d in cursor.description]
            rows = [
                tuple((n, type(v).__name__, v) for n, v in zip(names, row, strict=True) if n != "id")
                for row in cursor.fetchall()
            ]
            out.append(sorted(rows, key=repr))
    return tuple(out)


def fast(alias: str, rows: list[dict], lines: bool = True) -> bool:
    return sqlitebatch.write(connections[alias], alias, rows, [dumps_line(dict(r)) for r in rows] if lines else None)


def odd_numbers() -> list[dict]:
    """Times and costs the conversions must get exactly right, all of a shape the SQLite path takes."""
    base = {"endpoint": "chat", "status": 200, "org": "acme", "agent": "bot", "key_prefix": "sb-aaaaaaa"}
    times = [
        math.nextafter(HOUR + 3600, 0),  # microseconds round up into the next hour; the rollup keeps this one
        T0 + 0.4999995,
        T0 + 0.0000005,
        T0 + 0.0000015,
        1.5e-06,  # 1.5 µs exactly in binary times 1e6: a tie, rounded half to even
        2.5e-06,
        T0 + 0.9999996,
        int(T0) + 7,  # a JSON integer
        T0,  # whole seconds: no ".ffffff"
    ]
    costs = [1.8e-07, 0.0, 0, 12.5, 1e-08, 0.00012345, 123456.12345678, None]
    out = []
    for i in range(max(len(times), len(costs))):
        out.append(
            {
                **base,
                "record_id": f"odd-{i}",
                "request_id": f"odd-{i}",
                "created_at": times[i % len(times)],
                "cost": costs[i % len(costs)],
                "latency_ms": [0.25, 0.35355339059327373, 16.0, 0.0, 2e6, 131072.5][i % 6],
                "ttft_ms": [None, 1.5][i % 2],
                "trail": [[], None, [["chat-a", "ok"]], ["solo", ["chat-b", "upstream_5xx", "x", "y"]]][i % 4],
            }
        )
    return out


def test_a_batch_lands_with_the_same_values_and_storage_as_the_python_path(db):
    first = realistic(300) + odd_numbers()
    second = realistic(200, seed=8) + first[:50]  # new rows and replayed ones
    python, inside = both_ways(db, [first, second], sqlitebatch.write, raw)
    assert (len(inside[0]), len(inside[1])) == (500 + len(odd_numbers()), 12) and len(inside[2]) > 100
    assert inside == python


def test_many_random_times_and_latencies_read_back_exactly(db):
    python, inside = both_ways(
        db, [realistic(500, seed=seed, start=seed * 1000) for seed in range(20, 26)], sqlitebatch.write, raw
    )
    assert len(inside[0]) == 3000
    assert inside == python


def test_times_and_costs_are_stored_as_the_python_path_stores_them(db):
    assert fast(db, odd_numbers())
    rows = {r.record_id: r for r in UsageRecord.objects.using(db).all()}
    assert rows["odd-0"].created_at == datetime.fromtimestamp(HOUR + 3600, tz=UTC)
    for row in odd_numbers():  # the fraction to microseconds as datetime.fromtimestamp rounds it
        assert rows[row["record_id"]].created_at == datetime.fromtimestamp(row["created_at"], tz=UTC)
    assert [str(rows[f"odd-{i}"].cost) for i in (0, 3, 4, 5)] == ["1.8E-7", "12.50000000", "1E-8", "0.00012345"]
    assert rows["odd-7"].cost is None
    assert rows["odd-2"].trail == [["chat-a", "ok"]] and rows["odd-1"].trail == []
    hours = set(UsageRollup.objects.using(db).filter(grouping="all").values_list("bucket", flat=True))
    assert datetime.fromtimestamp(HOUR, tz=UTC) in hours  # the row at 59:59.9999999 counts in its own hour


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cost", 0.000000125),  # nine decimals: the Python path rounds half to even
        ("cost", "0.000000135"),  # a string
        ("cost", -0.5),
        ("prompt_tokens", -5),
        ("completion_tokens", 7.9),
        ("status", "200"),
        ("created_at", "2026-06-01T11:00:00+00:00"),
        ("created_at", -1.0),
        ("streamed", 2),
        ("org", ["acme"]),  # a list where text belongs: Python stores its repr
        ("org", {"a": 1}),
        ("org", 12),
        ("requested_model", "chat-a\x00"),
        ("requested_model", "bad-\ud800-id"),
        ("trail", [["a,b", "ok"]]),
        ("trail", [["x" * 201, "ok"]]),
        ("trail", [None, ["chat-a", "ok"]]),
        ("trail", [["modèle", "ok"]]),
        ("trail", [[1, "ok"]]),
        ("trail", [["a", "b", "c", "d", "e"]]),
        ("trail", [["chat-a", "ok"]] * 33),
        ("trail", "chat-a"),
    ],
)
def test_a_row_of_a_shape_it_cannot_convert_exactly_sends_the_batch_to_python(db, field, value):
    rows = realistic(12)
    rows[4][field] = value
    assert not fast(db, rows)
    assert raw(db) == ([], [], [])  # refused as a whole: nothing half written
    writer.db_insert(rows, using=db, lines=[dumps_line(dict(r)) for r in rows])  # the writer's path falls back
    python_way = raw(db)
    empty(db)
    writer.db_insert_python([dict(r) for r in rows], using=db)
    assert python_way == raw(db) and len(python_way[0]) == 12


def test_edge_cases_of_the_python_path_are_left_to_it(db):
    rows = edge_cases()
    assert not fast(db, rows)
    writer.db_insert(rows, using=db)
    assert len(raw(db)[0]) == 3


def test_a_replayed_batch_changes_neither_rows_nor_key_totals_nor_rollups(db):
    rows = realistic(120)
    assert fast(db, rows)
    before = raw(db)
    assert fast(db, rows)  # the whole batch again (a replayed spool file)
    assert fast(db, rows[:40], lines=False)  # part of it, encoded here
    assert raw(db) == before
    assert sum(k.requests for k in KeyUsage.objects.using(db).all()) == sum(1 for r in rows if r["key_prefix"])
    assert sum(UsageRollup.objects.using(db).filter(grouping="all").values_list("requests", flat=True)) == 120


def test_records_commit_when_only_the_aggregates_fail(db):
    with rollup_table_missing(db):
        writer.db_insert(realistic(15), using=db)
    records, keys, rolls = raw(db)
    assert len(records) == 15 and rolls == [] and keys == []


def test_the_writer_takes_a_normal_batch_without_the_python_path(db, tmp_path, monkeypatch):
    def python_path(*args, **kwargs):
        raise AssertionError("a plain batch went the Python way")

    monkeypatch.setattr(writer, "db_insert_python", python_path)
    sink = UsageSink(spool_dir=tmp_path, using=db)
    for r in realistic(40):
        sink.record(dict(r))
    assert sink.flush_now()
    assert UsageRecord.objects.using(db).count() == 40
