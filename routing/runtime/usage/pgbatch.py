"""A usage batch on PostgreSQL in one statement: conversion, dedup and aggregates in the database.

The writer hands the batch's JSON lines (the journal's own encoding, made on the
request path anyway) to ONE statement as ONE text parameter. PostgreSQL parses
them (`jsonb_array_elements`), converts every field exactly as the Python path's
converters do (routing.runtime.usage.writer: truncation to the column length, `max(0,
int(v))`, half-even rounding of cost to 8 places, the epoch float to microseconds
like `datetime.fromtimestamp`), inserts with `ON CONFLICT (record_id) DO NOTHING
RETURNING record_id`, and from the rows it really inserted upserts the per-key
totals (routing.runtime.usage.keys) and the hourly rollups (routing.runtime.usage.rollup)
in data-modifying CTEs. The Python work per batch is one `bytes.join` and one
execute, so the writer thread no longer holds the GIL the event loop needs for
tens of milliseconds (docs/usage-records.md#batch).

The statement first checks every row has the shape it converts exactly (text
fields strings or null, numbers numbers, created_at an epoch number, the trail a
list of strings or lists of strings, ...). If one row has not, it writes nothing
and says so; the caller then writes the batch the Python way, as it does when
PostgreSQL refuses the JSON itself (a NUL: jsonb has no \\u0000).

The upserts lock their rows in one order (ORDER BY), so two processes writing batches
at once wait for each other instead of deadlocking. The aggregates count the rows
`RETURNING` gives back: a record_id twice in one batch
(the queue never makes such a batch) counts once, and a row another process inserts
concurrently counts in that process only.
"""

from __future__ import annotations

from typing import Any

from routing.runtime.usage import rollup
from routing.runtime.usage.bounds import MAX_JSON_ITEMS, MAX_TEXT, TRAIL_ITEM_VALUES, TRAIL_VALUE_CHARS
from routing.runtime.usage.spool import json_array

_sql: dict[str, str] = {}


def _lit(key: str) -> str:
    """A JSON key as an SQL string literal (keys are model field names: no quotes in them)."""
    assert "'" not in key
    return f"'{key}'"


def _typeof(key: str) -> str:
    return f"coalesce(jsonb_typeof(j->{_lit(key)}), 'null')"


def half_even_8(expr: str) -> str:
    """`expr` (numeric) rounded to 8 places half to even, as Decimal.quantize does (PostgreSQL rounds half away)."""
    s = f"(({expr}) * 100000000)"
    return (
        f"((CASE WHEN {s} - floor({s}) > 0.5 OR ({s} - floor({s}) = 0.5 AND mod(floor({s}), 2) <> 0) "
        f"THEN floor({s}) + 1 ELSE floor({s}) END) * 0.00000001)"
    )


_NUMERIC_TEXT = r"'^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'"


def _columns() -> list[tuple[str, str, str]]:
    """Per UsageRecord column: (column, value expression over the JSON object `j`, shape check)."""
    from django.db import models

    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import UsageRecord

    out: list[tuple[str, str, str]] = []
    for f in UsageRecord._meta.concrete_fields:
        if f.primary_key:
            continue
        k = _lit(f.name)
        t = _typeof(f.name)
        if f.name == "record_id":
            n = f.max_length
            out.append(
                (
                    f.column,
                    f"left(coalesce(nullif(j->>{k}, ''), left(j->>'request_id', 32)), {n})",
                    f"{t} IN ('string', 'null')",
                )
            )
        elif f.name == "request_id":
            out.append((f.column, f"left(j->>{k}, {f.max_length})", f"{t} = 'string' AND j->>{k} <> ''"))
        elif isinstance(f, models.CharField | models.TextField):
            n = f.max_length if isinstance(f, models.CharField) else MAX_TEXT
            out.append((f.column, f"left(coalesce(j->>{k}, ''), {n})", f"{t} IN ('string', 'null')"))
        elif isinstance(f, models.DateTimeField):
            # datetime.fromtimestamp: whole seconds, then the fraction * 1e6 rounded half to even (rint)
            v = f"(j->>{k})::float8"
            value = (
                f"CASE WHEN {t} = 'number' THEN to_timestamp(trunc({v})) "
                f"+ round(({v} - trunc({v})) * 1000000::float8) * interval '1 microsecond' ELSE now() END"
            )
            out.append((f.column, value, f"CASE {t} WHEN 'null' THEN true WHEN 'number' THEN {v} >= 0 ELSE false END"))
        elif isinstance(f, models.DecimalField):
            v = f"(j->>{k})::numeric"
            out.append(
                (
                    f.column,
                    f"CASE WHEN {t} = 'null' THEN NULL ELSE {half_even_8(v)} END",
                    f"CASE {t} WHEN 'null' THEN true WHEN 'number' THEN true "
                    f"WHEN 'string' THEN j->>{k} ~ {_NUMERIC_TEXT} ELSE false END",
                )
            )
        elif isinstance(f, models.BooleanField):
            out.append((f.column, f"coalesce((j->>{k})::boolean, false)", f"{t} IN ('boolean', 'null')"))
        elif isinstance(f, models.PositiveIntegerField):
            v = f"greatest(0, trunc((j->>{k})::numeric))"
            value = f"CASE WHEN {t} = 'null' THEN NULL ELSE {v} END" if f.null else f"coalesce({v}, 0)"
            out.append((f.column, value, f"{t} IN ('number', 'null')"))
        elif isinstance(f, models.FloatField):
            v = f"(j->>{k})::float8"
            out.append((f.column, v if f.null else f"coalesce({v}, 0)", f"{t} IN ('number', 'null')"))
        elif isinstance(f, models.JSONField):
            # The trail: at most 32 items (nulls dropped), each a string or a list of at most 4 strings, cut to 200
            # (routing.runtime.usage.bounds).
            items = f"jsonb_array_elements(j->{k}) WITH ORDINALITY AS x(it, o)"
            inner = "jsonb_array_elements(x.it) WITH ORDINALITY AS y(v, o2)"
            value = (
                f"CASE WHEN {t} = 'array' THEN (SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(x.it) = 'array' "
                f"THEN (SELECT coalesce(jsonb_agg(to_jsonb(left(y.v #>> '{{}}', {TRAIL_VALUE_CHARS})) ORDER BY y.o2), "
                f"'[]'::jsonb) FROM {inner} WHERE y.o2 <= {TRAIL_ITEM_VALUES}) "
                f"ELSE to_jsonb(left(x.it #>> '{{}}', {TRAIL_VALUE_CHARS})) END ORDER BY x.o), "
                f"'[]'::jsonb) FROM {items} WHERE x.o <= {MAX_JSON_ITEMS} AND jsonb_typeof(x.it) <> 'null') "
                "ELSE '[]'::jsonb END"
            )
            check = (
                f"CASE WHEN {t} = 'array' THEN NOT EXISTS (SELECT 1 FROM {items} WHERE x.o <= {MAX_JSON_ITEMS} "
                "AND NOT (jsonb_typeof(x.it) IN ('string', 'null') OR (jsonb_typeof(x.it) = 'array' AND NOT EXISTS "
                f"(SELECT 1 FROM {inner} WHERE y.o2 <= {TRAIL_ITEM_VALUES} AND jsonb_typeof(y.v) <> 'string')))) ELSE true END"
            )
            out.append((f.column, value, check))
        else:
            raise TypeError(f"no SQL conversion for usage field {f.name} ({type(f).__name__})")
    return out


# Raw values the aggregates use (the Python path sums the record's own numbers, not the column's).
_RAW = (
    "CASE WHEN jsonb_typeof(j->'cost') IN ('number', 'string') THEN (j->>'cost')::numeric END AS cost_raw, "
    "trunc(coalesce((j->>'prompt_tokens')::numeric, 0))::bigint AS pt_raw, "
    "trunc(coalesce((j->>'completion_tokens')::numeric, 0))::bigint AS ct_raw, "
    "coalesce((j->>'latency_ms')::float8, 0) AS lat_ms, "
    "CASE WHEN jsonb_typeof(j->'created_at') = 'number' "
    "THEN to_timestamp(div((j->>'created_at')::numeric, 3600) * 3600) "
    "ELSE date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' END AS hour"
)
# width_bucket counts the bounds at or below the value: rollup.latency_bucket's bisect, exactly.
_LAT = f"width_bucket(c.lat_ms, ARRAY[{', '.join(repr(b) for b in rollup.LATENCY_BOUNDS_MS)}]::float8[])"


def _rollup_parts(q: Any, roll: str) -> dict[str, str]:
    """The rollup upsert's SQL pieces: its counters, grouping sets and conflict update (routing.runtime.usage.rollup)."""
    dims = rollup.DIMENSIONS
    counters = {
        "requests": "count(*)",
        "errors": f"count(*) FILTER (WHERE r.{q('status')} >= 500)",
        "client_errors": f"count(*) FILTER (WHERE r.{q('status')} >= 400 AND r.{q('status')} < 500)",
        "fallbacks": f"count(*) FILTER (WHERE r.{q('fallback_reason')} <> '')",
        "prompt_tokens": "coalesce(sum(r.pt_raw), 0)",
        "completion_tokens": "coalesce(sum(r.ct_raw), 0)",
        "cost": half_even_8("coalesce(sum(r.cost_raw), 0)"),
    }
    assert tuple(counters) == rollup.COUNTERS
    numbers = [*counters.values(), *(f"count(*) FILTER (WHERE r.lat = {i})" for i in range(rollup.LATENCY_BUCKETS))]
    number_cols = [*rollup.COUNTERS, *rollup.LAT_FIELDS]
    dim_args = ", ".join(f"r.{q(d)}" for d in dims)
    name_case = " ".join(
        f"WHEN {sum(1 << (len(dims) - 1 - i) for i, d in enumerate(dims) if d not in kept)} THEN '{name}'"
        for name, kept in rollup.GROUPINGS.items()
    )
    sets = ", ".join(
        "(" + ", ".join(["r.hour", *(f"r.{q(d)}" for d in kept)]) + ")" for kept in rollup.GROUPINGS.values()
    )
    roll_keys = ("grouping", "bucket", *dims)
    return {
        "columns": ", ".join(q(c) for c in (*roll_keys, *number_cols)),
        "grouping": f"CASE GROUPING({dim_args}) {name_case} END",
        "dims": ", ".join(f"coalesce(r.{q(d)}, '')" for d in dims),
        "numbers": ", ".join(numbers),
        "sets": sets,
        "keys": ", ".join(q(c) for c in roll_keys),
        "updates": ", ".join(f"{q(c)} = {roll}.{q(c)} + excluded.{q(c)}" for c in number_cols),
    }


def statement(quote: Any) -> str:
    """The batch statement (one parameter: a JSON array of usage records); returns (refused shapes, inserted)."""
    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import KeyUsage, UsageRecord, UsageRollup

    q = quote
    cols = _columns()
    usage, keys, roll = (q(m._meta.db_table) for m in (UsageRecord, KeyUsage, UsageRollup))
    names = [c for c, _, _ in cols]
    conv = ",\n    ".join(f"{v} AS {q(c)}" for c, v, _ in cols)
    shape = " AND ".join(f"({check})" for _, _, check in cols)
    rp = _rollup_parts(q, roll)
    req, spend, last = q("requests"), q("spend"), q("last_used_at")
    return f"""
WITH src AS (
  SELECT x.j, x.o FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS x(j, o)
), refused AS (
  SELECT count(*) AS n FROM src WHERE NOT (jsonb_typeof(j) = 'object' AND {shape})
), conv AS (
  SELECT src.o,
    {conv},
    {_RAW}
  FROM src WHERE (SELECT n FROM refused) = 0
), fresh AS (
  INSERT INTO {usage} ({", ".join(q(c) for c in names)})
  SELECT {", ".join(q(c) for c in names)} FROM conv ORDER BY o
  ON CONFLICT ({q("record_id")}) DO NOTHING
  RETURNING {q("record_id")}
), r AS (
  SELECT DISTINCT ON (c.{q("record_id")}) c.*, {_LAT} AS lat
  FROM conv c JOIN fresh f ON f.{q("record_id")} = c.{q("record_id")}
  ORDER BY c.{q("record_id")}, c.o
), k AS (
  INSERT INTO {keys} ({q("key_prefix")}, {q("org")}, {q("agent")}, {req}, {spend}, {last})
  SELECT r.{q("key_prefix")}, r.{q("org")}, r.{q("agent")}, count(*),
    {half_even_8("coalesce(sum(r.cost_raw), 0)")}, max(r.{q("created_at")})
  FROM r WHERE r.{q("key_prefix")} <> ''
  GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT ({q("key_prefix")}, {q("org")}, {q("agent")}) DO UPDATE SET
    {req} = {keys}.{req} + excluded.{req},
    {spend} = {keys}.{spend} + excluded.{spend},
    {last} = CASE WHEN {keys}.{last} IS NULL OR excluded.{last} > {keys}.{last} THEN excluded.{last}
      ELSE {keys}.{last} END
  RETURNING 1
), g AS (
  INSERT INTO {roll} ({rp["columns"]})
  SELECT {rp["grouping"]}, r.hour,
    {rp["dims"]},
    {rp["numbers"]}
  FROM r GROUP BY GROUPING SETS ({rp["sets"]}) ORDER BY 1, 2, 3, 4, 5, 6, 7
  ON CONFLICT ({rp["keys"]}) DO UPDATE SET {rp["updates"]}
  RETURNING 1
)
SELECT (SELECT n FROM refused), (SELECT count(*) FROM fresh), (SELECT count(*) FROM k), (SELECT count(*) FROM g)
"""


def batch_statement(connection: Any, using: str) -> str:
    """`statement` for this database alias (built once)."""
    sql = _sql.get(using)
    if sql is None:
        sql = _sql[using] = statement(connection.ops.quote_name)
    return sql


def payload(rows: list[dict[str, Any]], lines: list[bytes] | None) -> str:
    """The batch as one JSON array (routing.runtime.usage.spool.json_array), as text for the parameter."""
    return json_array(rows, lines).decode()


def write(connection: Any, using: str, rows: list[dict[str, Any]], lines: list[bytes] | None = None) -> bool:
    """Write a batch in one statement, in one transaction. False (nothing written) when a row's shape needs Python.

    Raises django.db errors like the Python path: OperationalError/InterfaceError when the
    database is unreachable, DataError and the like when it refuses the content.
    """
    import psycopg
    from django.db import transaction

    sql = batch_statement(connection, using)
    data = payload(rows, lines)
    with transaction.atomic(using=using):
        # A server-side-binding cursor on Django's own connection (same transaction): the
        # parameter travels as is, where Django's client-side cursor would first quote
        # ~600 bytes a row into the SQL text (milliseconds of GIL a batch).
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(sql, [data])
            refused = cursor.fetchone()[0]
    return not refused
