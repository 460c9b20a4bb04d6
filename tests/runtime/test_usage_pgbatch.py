"""The one-statement PostgreSQL batch (routing.runtime.usage.pgbatch) stores what the Python path stores.

Runs against a real PostgreSQL database of its own (on the postgres_url fixture's server), in
both test modes: on SQLite runs too, since the fast path exists only on PostgreSQL.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import urlparse

import orjson
import pytest
from django.db import connections

from routing.models import KeyUsage, UsageRecord, UsageRollup
from routing.runtime.usage import UsageSink, pgbatch, writer
from routing.runtime.usage.spool import dumps_line
from tests.runtime.usage_alias import both_ways, empty, migrated_alias, rollup_table_missing

ALIAS = "usage_pgbatch"
T0 = datetime(2026, 6, 1, 11, 0, tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def pg(django_db_blocker, postgres_url) -> Iterator[str]:
    """A migrated PostgreSQL database of its own, as connection alias ALIAS; dropped afterwards."""
    import psycopg

    base = postgres_url
    name = f"sb_pgbatch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parsed = urlparse(base)
    try:
        with migrated_alias(
            ALIAS,
            django_db_blocker,
            ENGINE="django.db.backends.postgresql",
            NAME=name,
            HOST=parsed.hostname or "127.0.0.1",
            PORT=str(parsed.port or 5432),
            USER=parsed.username or "",
            PASSWORD=parsed.password or "",
        ):
            yield ALIAS
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(pg: str, django_db_blocker) -> Iterator[str]:
    with django_db_blocker.unblock():
        empty(pg)
        yield pg


def state(alias: str) -> tuple[list[dict], list[dict], list[dict]]:
    """Every stored usage row (without its id), key total and rollup row, in a fixed order."""
    records = sorted(UsageRecord.objects.using(alias).values(), key=lambda r: r["record_id"])
    for r in records:
        del r["id"]
    keys = sorted(
        (r for r in KeyUsage.objects.using(alias).values()), key=lambda r: (r["key_prefix"], r["org"], r["agent"])
    )
    rolls = sorted(
        UsageRollup.objects.using(alias).values(),
        key=lambda r: tuple(
            r[c] for c in ("grouping", "bucket", "org", "agent", "key_prefix", "model_used", "provider")
        ),
    )
    for r in (*keys, *rolls):
        del r["id"]
    return records, keys, rolls


def realistic(n: int, seed: int = 7, start: int = 0) -> list[dict]:
    """Records like accounting.finish makes: several keys, models, outcomes; epoch floats across hours."""
    rng = random.Random(seed)
    out = []
    for i in range(start, start + n):
        status = rng.choice([200] * 8 + [429, 502, 404])
        prompt = rng.choice([None, 0, 12, 1234])
        completion = None if prompt is None else rng.randrange(0, 900)
        out.append(
            {
                "record_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                "request_id": f"req-{seed}-{i}",
                "created_at": T0 + rng.random() * 3 * 3600,
                "org": rng.choice(["acme", "globex", "initech"]),
                "agent": rng.choice(["bot", "batch"]),
                "key_prefix": rng.choice(["sb-aaaaaaa", "sb-bbbbbbb", ""]),
                "endpoint": rng.choice(["chat", "messages", "embeddings"]),
                "requested_model": "fast",
                "resolved_model": "chat-a",
                "model_used": rng.choice(["chat-a", "chat-b", ""]),
                "provider": rng.choice(["openai", "mock", ""]),
                "fallback_reason": rng.choice(["", "", "upstream_5xx", "upstream_429"]),
                "attempts": rng.randrange(0, 4),
                "status": status,
                "error_code": "" if status == 200 else "upstream_unavailable",
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "cost": None if prompt is None else round(rng.random() / 1000, 8),
                "latency_ms": rng.choice([0.0, 3.25, 15.999, 16.0, 22.627416997969522, 480.5, 2e6]) + rng.random(),
                "ttft_ms": rng.choice([None, 1.5, 33.3]),
                "streamed": rng.random() < 0.3,
                "tokens_estimated": rng.random() < 0.1,
                "cached": rng.random() < 0.1,
                "trail": rng.choice([(), [("chat-a", "ok")], [("chat-a", "upstream_5xx"), ("chat-b", "ok")]]),
            }
        )
    return out


def edge_cases() -> list[dict]:
    """What the conversions must get exactly right: lengths, rounding, microseconds, hour edges."""
    hour = 3600 * math.floor(T0 / 3600)
    return [
        {
            "request_id": "r" * 300,  # no record_id: made from request_id
            "created_at": math.nextafter(
                hour + 3600, 0
            ),  # microseconds round up to the next hour; the rollup keeps this one
            "org": "o" * 100,
            "agent": "a" * 100,
            "key_prefix": "k" * 40,
            "endpoint": "e" * 40,
            "requested_model": "é" * 250,
            "model_used": "m" * 250,
            "provider": "p" * 80,
            "fallback_reason": "f" * 40,
            "error_code": "c" * 80,
            "status": 499.9,
            "attempts": -3,
            "prompt_tokens": -5,
            "completion_tokens": 7.9,
            "cost": 0.000000125,  # half to even: 0.00000012
            "latency_ms": 16 * math.sqrt(2) ** 5,
            "trail": [["x" * 300, "ok", "3", "4", "5"], None, "solo", *[["m", "ok"]] * 40],
            "request_body": "b" * 2000,
        },
        {
            "record_id": "edge-2",
            "request_id": "edge-2",
            "created_at": T0 + 0.4999995,
            "endpoint": "chat",
            "status": 200,
            "key_prefix": "sb-aaaaaaa",
            "org": "acme",
            "agent": "bot",
            "cost": "0.000000135",  # a string, half to even: 0.00000014
            "requested_model": "bad-\ud800-id",  # a lone surrogate: escaped, never dropped
        },
        {"record_id": "edge-3", "request_id": "edge-3", "created_at": T0, "endpoint": "chat", "status": 200},
    ]


def test_a_batch_lands_with_the_same_values_as_the_python_path(db):
    first = realistic(300) + edge_cases()
    second = realistic(200, seed=8) + first[:50]  # new rows and replayed ones
    python, fast = both_ways(db, [first, second], pgbatch.write, state)
    assert len(fast[0]) == 503 and len(fast[1]) == 13 and len(fast[2]) > 100  # 3 orgs x 2 agents x 2 keys + 1
    for expected, got in zip(python[0], fast[0], strict=True):
        assert got == expected
    assert fast[1] == python[1]
    assert fast[2] == python[2]


def test_long_text_is_cut_to_the_column_and_rounding_is_half_to_even(db):
    _, (records, _, _) = both_ways(db, [edge_cases()], pgbatch.write, state)
    row = next(r for r in records if r["request_id"].startswith("rrr"))
    assert row["record_id"] == "r" * 32 and len(row["request_id"]) == 128
    assert (len(row["org"]), len(row["agent"]), len(row["key_prefix"]), len(row["requested_model"])) == (
        64,
        64,
        16,
        200,
    )
    assert row["requested_model"] == "é" * 200
    assert (row["status"], row["attempts"], row["prompt_tokens"], row["completion_tokens"]) == (499, 0, 0, 7)
    assert str(row["cost"]) == "1.2E-7"
    assert row["trail"][0] == ["x" * 200, "ok", "3", "4"] and row["trail"][1] == "solo" and len(row["trail"]) == 31
    assert row["created_at"] == datetime.fromtimestamp(3600 * math.floor(T0 / 3600) + 3600, tz=UTC)
    second = next(r for r in records if r["record_id"] == "edge-2")
    assert str(second["cost"]) == "1.4E-7" and second["requested_model"] == "bad-\\ud800-id"


def test_a_replayed_batch_changes_neither_rows_nor_key_totals_nor_rollups(db):
    rows = realistic(120)
    lines = [dumps_line(dict(r)) for r in rows]
    assert pgbatch.write(connections[db], db, rows, lines)
    before = state(db)
    assert pgbatch.write(connections[db], db, rows, lines)  # the whole batch again (a replayed spool file)
    assert pgbatch.write(connections[db], db, rows[:40], None)  # part of it, encoded here
    assert state(db) == before
    assert sum(k["requests"] for k in before[1]) == sum(1 for r in rows if r["key_prefix"])
    assert sum(r["requests"] for r in before[2] if r["grouping"] == "all") == 120


def test_a_nul_sends_the_batch_to_the_python_path_which_stores_it_escaped(db, tmp_path):
    rows = realistic(20)
    rows[5]["requested_model"] = "chat-a\x00"
    sink = UsageSink(spool_dir=tmp_path, using=db)
    for r in rows:
        sink.record(dict(r))
    assert sink.flush_now()
    records, keys, rolls = state(db)
    assert len(records) == 20
    assert next(r for r in records if r["request_id"] == rows[5]["request_id"])["requested_model"] == "chat-a\\x00"
    assert sum(r["requests"] for r in rolls if r["grouping"] == "all") == 20
    assert not list(tmp_path.glob("rejected-*"))
    # jsonb itself refuses the line: PostgreSQL has no \u0000 in text
    with pytest.raises(Exception, match="(?i)unicode|\\\\u0000"):
        pgbatch.write(connections[db], db, rows[5:6], [dumps_line(rows[5])])


def test_a_row_of_an_odd_shape_is_written_the_python_way(db, tmp_path):
    rows = realistic(10)
    rows[3]["created_at"] = datetime.fromtimestamp(T0, tz=UTC).isoformat()  # a string, not the epoch float
    rows[4]["status"] = "200"
    assert not pgbatch.write(connections[db], db, rows, None)
    assert state(db) == ([], [], [])  # refused as a whole: nothing half written
    sink = UsageSink(spool_dir=tmp_path, using=db)
    for r in rows:
        sink.record(dict(r))
    sink.record({"status": 200})  # no request id: refused by both paths, kept in rejected-<pid>.jsonl
    assert sink.flush_now()
    records, _, rolls = state(db)
    assert len(records) == 10 and sum(r["requests"] for r in rolls if r["grouping"] == "all") == 10
    assert next(r for r in records if r["request_id"] == rows[4]["request_id"])["status"] == 200
    rejected = list(tmp_path.glob("rejected-*.jsonl"))
    assert len(rejected) == 1 and orjson.loads(rejected[0].read_bytes().splitlines()[0])["status"] == 200


def test_records_commit_when_only_the_aggregates_fail(db):
    with rollup_table_missing(db):
        writer.db_insert(realistic(15), using=db)
    records, keys, rolls = state(db)
    assert len(records) == 15 and rolls == []
    assert keys == []  # one savepoint for both aggregates, as on SQLite


def test_two_writers_replaying_the_same_batches_at_once_count_each_record_once(db):
    # Two processes' writers (here: threads, each with its own connection) write the same
    # batches at the same time, as when both replay one spool: each record is stored and
    # counted once (the aggregates count what the insert returned, not what was absent before).
    import threading

    batches = [realistic(80, seed=100 + n) for n in range(12)]
    errors: list[BaseException] = []

    def run(mine: list[list[dict]]) -> None:
        try:
            for rows in mine:
                assert pgbatch.write(connections[db], db, rows, [dumps_line(dict(r)) for r in rows])
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            connections[db].close()

    threads = [threading.Thread(target=run, args=(batches,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    records, keys, rolls = state(db)
    assert len(records) == 12 * 80
    assert sum(k["requests"] for k in keys) == sum(1 for r in records if r["key_prefix"])
    assert sum(r["requests"] for r in rolls if r["grouping"] == "all") == 12 * 80
    assert sum(r["prompt_tokens"] for r in rolls if r["grouping"] == "full") == sum(
        r["prompt_tokens"] or 0 for r in records
    )
