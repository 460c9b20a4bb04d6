"""A usage batch on SQLite converted, deduplicated and aggregated inside SQLite (docs/usage-records.md#batch).

The Python path (routing.runtime.usage.writer.db_insert_python) spends about 30 µs of
interpreter time a row: 34 columns converted, `executemany` binding each row and
handing the GIL back and forth around every step, then the per-key and hourly sums.
That is GIL time the event loop waits for. Here the batch's JSON lines (the journal's
own encoding) go to SQLite as ONE text parameter; `json_each` parses them and a dozen
statements do the rest in C, and Python's sqlite3 module releases the GIL while a
statement runs. The Python work per batch is one `bytes.join` and the `execute` calls.

Exactness first. The statements produce what the Python path stores byte for byte (the
same TEXT for a datetime, the same decimal text for a cost that SQLite's NUMERIC
affinity turns into the same number, `json.dumps`'s spacing for the trail), but only
for the shapes they can convert exactly. A batch with anything else (a number where text
is expected, a negative token count, a cost with more than 8 decimals, a NUL, a trail
item holding a comma or a non-ASCII character, ...) is not written here: `write` returns
False and the caller writes it the Python way, as the PostgreSQL statement does
(routing.runtime.usage.pgbatch). tests/runtime/test_usage_sqlitebatch.py writes the same
batches both ways and compares every stored value and its storage class.

The epoch floats (created_at, latency_ms) are read back by SQLite's own number parser;
`write` checks once per process that it returns every double the journal's encoder
writes (seeded samples across the ranges records use) and otherwise keeps the Python path.
"""

from __future__ import annotations

import contextlib
import functools
import random
import re
import sqlite3
from typing import Any

from routing.runtime.usage import rollup
from routing.runtime.usage.bounds import MAX_JSON_ITEMS, MAX_TEXT, TRAIL_ITEM_VALUES, TRAIL_VALUE_CHARS
from routing.runtime.usage.spool import json_array

BATCH = "sb_usage_batch"  # a TEMP table: per connection, never in the database file
GROUPS = "sb_usage_groups"  # the batch summed per hour and dimensions, for the rollups (TEMP too)
_statements: dict[str, tuple[list[str], list[str]]] = {}  # per alias: the TEMP tables' CREATEs, the statements
# A NUL (the Python path stores it as the text \x00) or an escaped surrogate: left to Python.
_NEEDS_PYTHON = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]")
# Integer columns: JSON integers in this range (a larger one would not stay an integer in SQLite).
_MAX_INT = 2**53
_MAX_EPOCH = 253402300800  # year 10000


def _v(name: str) -> str:
    """A field's value as read once from the row (`->>`: text, integer, real or NULL)."""
    return f"r.f_{name}"


def _decimal_text(units: str) -> str:
    """Text of `units` (an integer count of 1e-8, >= 0) as a decimal with 8 places."""
    return f"(({units}) / 100000000) || '.' || printf('%08d', ({units}) % 100000000)"


def _fields() -> list[Any]:
    """UsageRecord's columns but the id, in the table's order."""
    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import UsageRecord

    return [f for f in UsageRecord._meta.concrete_fields if not f.primary_key]


def _columns() -> list[tuple[str, str, str]]:
    """Per UsageRecord column: (column, value, shape check), over the row `r` read once from its JSON.

    `->>` hands JSON true/false over as 1/0, which the Python path stores alike for a
    count, a flag, a latency or a time (int(True) == 1), and a list or an object as its
    JSON text: a text field starting with "[" or "{" (a logged request body) is asked
    its JSON type.
    """
    from django.db import models

    out: list[tuple[str, str, str]] = []
    for f in _fields():
        name, v = f.name, _v(f.name)
        vt = f"typeof({v})"
        text = (
            f"{vt} = 'text' AND CASE WHEN substr({v}, 1, 1) NOT IN ('[', '{{') THEN 1 "
            f"ELSE json_type(r.j, '$.{name}') = 'text' END"
        )
        if name == "record_id":
            value = f"substr(coalesce(nullif({v}, ''), substr({_v('request_id')}, 1, 32)), 1, {f.max_length})"
            out.append((f.column, value, f"{vt} = 'null' OR ({text})"))
        elif name == "request_id":
            out.append((f.column, f"substr({v}, 1, {f.max_length})", f"{text} AND {v} <> ''"))
        elif isinstance(f, models.CharField | models.TextField):
            n = f.max_length if isinstance(f, models.CharField) else MAX_TEXT
            out.append((f.column, f"coalesce(substr({v}, 1, {n}), '')", f"{vt} = 'null' OR ({text})"))
        elif isinstance(f, models.DateTimeField):
            # str() of the naive UTC datetime datetime.fromtimestamp gives: whole seconds, then
            # the fraction * 1e6 rounded half to even, ".ffffff" only when not zero.
            value = (
                "datetime(r.secs + (r.us = 1000000), 'unixepoch') "
                "|| CASE WHEN r.us % 1000000 = 0 THEN '' ELSE printf('.%06d', r.us) END"
            )
            out.append((f.column, value, f"{vt} IN ('integer', 'real') AND {v} >= 0 AND {v} < {_MAX_EPOCH}"))
        elif isinstance(f, models.DecimalField):
            # Costs are rounded to 8 places when made: then the quantize of the Python path
            # changes nothing and the cost is an exact count of 1e-8 (r.units).
            out.append(
                (f.column, f"CASE WHEN r.units IS NULL THEN NULL ELSE {_decimal_text('r.units')} END", "r.cost_ok")
            )
        elif isinstance(f, models.BooleanField):
            out.append((f.column, f"coalesce({v}, 0)", f"{vt} = 'null' OR ({vt} = 'integer' AND {v} IN (0, 1))"))
        elif isinstance(f, models.PositiveIntegerField):
            value = v if f.null else f"coalesce({v}, 0)"
            out.append((f.column, value, f"{vt} = 'null' OR ({vt} = 'integer' AND {v} BETWEEN 0 AND {_MAX_INT})"))
        elif isinstance(f, models.FloatField):
            value = v if f.null else f"coalesce({v}, 0.0)"
            out.append((f.column, value, f"{vt} IN ('integer', 'real', 'null')"))
        elif isinstance(f, models.JSONField):
            # json.dumps of the trail as the Python path stores it: ", " between items (see
            # _json_refused for when that is exact). `->`: the JSON text, a string stays quoted.
            tj = f"r.json_{name}"
            value = f"CASE WHEN substr({tj}, 1, 1) = '[' THEN replace({tj}, ',', ', ') ELSE '[]' END"
            out.append((f.column, value, f"{tj} IS NULL OR {tj} NOT IN (SELECT t FROM refused_{name})"))
        else:
            raise TypeError(f"no SQL conversion for usage field {f.name} ({type(f).__name__})")
    return out


def _json_refused(name: str) -> str:
    """The distinct JSON texts of field `name` in the batch that cannot be stored exactly here.

    Exact when the value is a list of at most 32 items, each a string or a list of at most
    4 strings, no string longer than 200 characters or holding a comma, a bracket, a
    quote, a backslash or a non-ASCII character (then nothing needs cutting and `", "`
    between items is json.dumps's spacing). Checked once per distinct text: a batch has few.
    """
    depth = "(length(x.fullkey) - length(replace(x.fullkey, '[', '')))"
    bad_node = (
        f"({depth} >= 1 AND x.type NOT IN ('text', 'array')) "
        f"OR ({depth} = 1 AND x.type = 'array' AND json_array_length(x.value) > {TRAIL_ITEM_VALUES}) "
        f"OR ({depth} >= 2 AND x.type <> 'text') "
        f"OR (x.type = 'text' AND (length(x.atom) > {TRAIL_VALUE_CHARS} OR instr(x.atom, ',') > 0 "
        "OR instr(x.atom, '[') > 0 OR instr(x.atom, ']') > 0))"
    )
    return f"""SELECT t FROM (SELECT DISTINCT json_{name} AS t FROM raw WHERE json_{name} IS NOT NULL)
  WHERE NOT CASE WHEN t IN ('null', '[]') THEN 1
    WHEN substr(t, 1, 1) <> '[' OR json_array_length(t) > {MAX_JSON_ITEMS}
      OR instr(t, '\\') > 0 OR t GLOB '*[^ -~]*' THEN 0
    ELSE NOT EXISTS (SELECT 1 FROM json_tree(t) AS x WHERE {bad_node}) END"""


def _read_once() -> str:
    """The MATERIALIZED read of each row: every field once (JSON calls are what a batch costs here)."""
    from django.db import models

    reads = ["key AS o", "type AS jt", "value AS j"]
    for f in _fields():
        if isinstance(f, models.JSONField):
            reads.append(f"value -> '$.{f.name}' AS json_{f.name}")
        else:
            reads.append(f"value ->> '$.{f.name}' AS f_{f.name}")
            if isinstance(f, models.DecimalField):
                reads.append(f"value -> '$.{f.name}' AS json_{f.name}")
    return ",\n    ".join(reads)


def _fill(quote: Any) -> str:
    """The statement that reads the batch (?1) into the batch table, converted, with each row's shape check."""
    q = quote
    cols = _columns()
    shape = " AND ".join(f"({check})" for _, _, check in cols)
    lat = " + ".join(f"(r.lat_ms >= ?{i + 2})" for i in range(len(rollup.LATENCY_BOUNDS_MS)))
    c = "lower(raw.json_cost)"
    refused = "".join(
        f"), refused_{f.name} AS MATERIALIZED (\n  {_json_refused(f.name)}\n"
        for f in _fields()
        if f.get_internal_type() == "JSONField"
    )
    # `batch` keeps json_each's rows first: read from json_each itself, `value` renders a row's
    # object as JSON text anew at every read, which each `->>` then parses again (3.40 caches
    # the parse of a text, not its rendering): 47 -> 22 µs a row (docs/performance.md#sqlite-batch).
    # The steps after `raw` are not MATERIALIZED: SQLite folds them into the final SELECT
    # instead of copying every column four more times.
    return f"""
INSERT INTO temp.{BATCH} (o, ok, {", ".join(q(name) for name, _, _ in cols)}, units, hour, lat)
WITH batch AS MATERIALIZED (
  SELECT key, type, value FROM json_each(?1)
), raw AS MATERIALIZED (
  SELECT {_read_once()}
  FROM batch
{refused}), split AS (
  SELECT raw.*,
    CASE instr({c}, 'e') WHEN 0 THEN {c} ELSE substr({c}, 1, instr({c}, 'e') - 1) END AS mant,
    CASE instr({c}, 'e') WHEN 0 THEN 0 ELSE CAST(substr({c}, instr({c}, 'e') + 1) AS INTEGER) END AS ex
  FROM raw
), cost AS (
  SELECT split.*, replace(mant, '.', '') AS digits,
    ex - CASE instr(mant, '.') WHEN 0 THEN 0 ELSE length(mant) - instr(mant, '.') END + 8 AS k
  FROM split
), parsed AS (
  SELECT cost.*,
    CASE WHEN f_cost IS NULL THEN NULL
      ELSE CAST(digits AS INTEGER) * CAST('1' || substr('000000000000000000', 1, k) AS INTEGER) END AS units,
    f_cost IS NULL OR (typeof(f_cost) IN ('integer', 'real') AND json_cost GLOB '[0-9]*'
      AND k BETWEEN 0 AND 18 AND length(digits) + k <= 18) AS cost_ok,
    CAST(f_created_at AS INTEGER) AS secs,
    (f_created_at - CAST(f_created_at AS INTEGER)) * 1000000.0 AS frac_us,
    coalesce(f_latency_ms, 0.0) AS lat_ms
  FROM cost
), r AS (
  SELECT parsed.*, CAST(frac_us AS INTEGER) + (frac_us - CAST(frac_us AS INTEGER) > 0.5
    OR (frac_us - CAST(frac_us AS INTEGER) = 0.5 AND CAST(frac_us AS INTEGER) % 2 = 1)) AS us
  FROM parsed
)
SELECT r.o, r.jt = 'object' AND {shape},
  {", ".join(value for _, value, _ in cols)},
  r.units, datetime(r.secs / 3600 * 3600, 'unixepoch'), {lat}
FROM r
"""


def _aggregates(quote: Any) -> list[str]:
    """The per-key totals' upsert, then one rollup upsert per grouping, from the batch table's rows."""
    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import KeyUsage, UsageRollup

    q = quote
    keys, roll = q(KeyUsage._meta.db_table), q(UsageRollup._meta.db_table)
    req, spend, last = q("requests"), q("spend"), q("last_used_at")
    kp, org, agent = q("key_prefix"), q("org"), q("agent")
    stmts = [
        f"INSERT INTO main.{keys} ({kp}, {org}, {agent}, {req}, {spend}, {last}) "
        f"SELECT {kp}, {org}, {agent}, count(*), {_decimal_text('coalesce(sum(units), 0)')}, max({q('created_at')}) "
        f"FROM temp.{BATCH} WHERE {kp} <> '' GROUP BY {kp}, {org}, {agent} "
        f"ON CONFLICT ({kp}, {org}, {agent}) DO UPDATE SET "
        f"{req} = {keys}.{req} + excluded.{req}, "
        f"{spend} = {keys}.{spend} + excluded.{spend}, "
        f"{last} = CASE WHEN {keys}.{last} IS NULL OR excluded.{last} > {keys}.{last} "
        f"THEN excluded.{last} ELSE {keys}.{last} END"
    ]
    # One pass over the batch sums its rows per hour and every dimension; each grouping then sums
    # those few group rows. Counts and 1e-8 cost units are integers, so summing sums is exact.
    status = q("status")
    dims = ", ".join(q(d) for d in rollup.DIMENSIONS)
    sums = [
        "count(*)",
        f"sum({status} >= 500)",
        f"sum({status} >= 400 AND {status} < 500)",
        f"sum({q('fallback_reason')} <> '')",
        f"sum(coalesce({q('prompt_tokens')}, 0))",
        f"sum(coalesce({q('completion_tokens')}, 0))",
        "coalesce(sum(units), 0)",
        *(f"sum(lat = {i})" for i in range(rollup.LATENCY_BUCKETS)),
    ]
    sum_cols = ", ".join(q(_group_column(c)) for c in (*rollup.COUNTERS, *rollup.LAT_FIELDS))
    stmts += [
        f"DELETE FROM temp.{GROUPS}",
        f"INSERT INTO temp.{GROUPS} (hour, {dims}, {sum_cols}) SELECT hour, {dims}, {', '.join(sums)} "
        f"FROM temp.{BATCH} GROUP BY hour, {dims}",
    ]
    numbers = (*rollup.COUNTERS, *rollup.LAT_FIELDS)
    totals = [f"sum({q(_group_column(c))})" for c in numbers]
    totals = [_decimal_text(t) if c == "cost" else t for c, t in zip(numbers, totals, strict=True)]
    roll_keys = ("grouping", "bucket", *rollup.DIMENSIONS)
    updates = ", ".join(f"{q(c)} = {roll}.{q(c)} + excluded.{q(c)}" for c in numbers)
    for name, kept in rollup.GROUPINGS.items():
        kept_dims = [q(d) if d in kept else "''" for d in rollup.DIMENSIONS]
        group = ", ".join(["hour", *(q(d) for d in kept)])
        stmts.append(
            f"INSERT INTO main.{roll} ({', '.join(q(c) for c in (*roll_keys, *numbers))}) "
            f"SELECT '{name}', hour, {', '.join(kept_dims)}, {', '.join(totals)} "
            f"FROM temp.{GROUPS} WHERE true GROUP BY {group} "
            f"ON CONFLICT ({', '.join(q(c) for c in roll_keys)}) DO UPDATE SET {updates}"
        )
    return stmts


def statements(quote: Any) -> list[str]:
    """The batch's statements, in order (parameters: ?1 the JSON array, ?2.. the latency bounds).

    0 empties the batch table, 1 fills it (converted columns, the shape check, the raw
    values the aggregates sum), 2 counts refused rows, 3-4 drop replays and duplicates,
    5 inserts the records, 6 the per-key totals, 7-8 sum the batch per hour and dimensions, 9.. one
    rollup grouping each, from those sums.
    """
    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import UsageRecord

    q = quote
    usage, rec = q(UsageRecord._meta.db_table), q("record_id")
    batch_cols = ", ".join(q(name) for name, _, _ in _columns())
    return [
        f"DELETE FROM temp.{BATCH}",
        _fill(quote),
        f"SELECT count(*) FROM temp.{BATCH} WHERE NOT ok",
        f"DELETE FROM temp.{BATCH} WHERE EXISTS (SELECT 1 FROM main.{usage} u WHERE u.{rec} = {BATCH}.{rec})",
        f"DELETE FROM temp.{BATCH} WHERE o NOT IN (SELECT min(o) FROM temp.{BATCH} GROUP BY {rec})",
        f"INSERT INTO main.{usage} ({batch_cols}) SELECT {batch_cols} FROM temp.{BATCH} WHERE true ORDER BY o "
        f"ON CONFLICT ({rec}) DO NOTHING",
        *_aggregates(quote),
    ]


def _group_column(number: str) -> str:
    """The groups table's column of a rollup number: the cost as its integer count of 1e-8 (`units`)."""
    return "units" if number == "cost" else number


def _create_tables(quote: Any) -> list[str]:
    """The batch table and the table of its sums per hour and dimensions (TEMP: per connection)."""
    names = ", ".join(quote(c) for c, _, _ in _columns())
    dims = ", ".join(f"{quote(d)} TEXT" for d in rollup.DIMENSIONS)
    sums = ", ".join(f"{quote(_group_column(c))} INTEGER" for c in (*rollup.COUNTERS, *rollup.LAT_FIELDS))
    return [
        f"CREATE TEMP TABLE IF NOT EXISTS {BATCH} (o INTEGER, ok INTEGER, {names}, units INTEGER, hour TEXT, lat INTEGER)",
        f"CREATE TEMP TABLE IF NOT EXISTS {GROUPS} (hour TEXT, {dims}, {sums})",
    ]


def floats_read_back_exactly(cursor: Any, n: int = 4000) -> bool:
    """True if SQLite's JSON parser returns every double of a seeded sample as the journal wrote it."""
    import orjson

    rng = random.Random(20261206)
    values = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            values.append(1.7e9 + rng.random() * 3e8)  # epoch seconds with microseconds
        elif kind == 1:
            values.append(rng.random() * 10 ** rng.randint(-2, 7))  # latencies in ms
        elif kind == 2:
            values.append(rng.random())
        else:
            values.append(rng.uniform(0, 2**53))
    cursor.execute("SELECT value FROM json_each(?) ORDER BY key", (orjson.dumps(values).decode(),))
    return [row[0] for row in cursor.fetchall()] == values


def usable(cursor: Any) -> bool:
    """Whether this SQLite can take batches here: `->>` (3.38) and exact float reading (checked once)."""
    if sqlite3.sqlite_version_info < (3, 38, 0):
        return False
    return _floats_exact()


@functools.cache
def _floats_exact() -> bool:
    """`floats_read_back_exactly`, once per interpreter: a property of the SQLite library (the one every
    connection of this interpreter uses), so checked on an in-memory connection of its own."""
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        return floats_read_back_exactly(connection.cursor())


def write(connection: Any, using: str, rows: list[dict[str, Any]], lines: list[bytes] | None = None) -> bool:
    """Write a batch inside SQLite, in one transaction. False (nothing written) when a row needs the Python path.

    Raises django.db errors like the Python path: OperationalError when the database is
    locked or unreachable, IntegrityError and the like when it refuses the content.
    """
    from django.db import OperationalError, transaction

    data = json_array(rows, lines)
    if _NEEDS_PYTHON.search(data):
        return False
    cached = _statements.get(using)
    if cached is None:
        quote = connection.ops.quote_name
        cached = _statements[using] = (_create_tables(quote), statements(quote))
    create, stmts = cached
    params = (data.decode(), *rollup.LATENCY_BOUNDS_MS)
    try:
        with transaction.atomic(using=using), connection.wrap_database_errors:
            cursor = connection.connection.cursor()
            try:
                if not usable(cursor):
                    return False
                for sql in create:
                    cursor.execute(sql)
                cursor.execute(stmts[0])
                cursor.execute(stmts[1], params)
                refused = cursor.execute(stmts[2]).fetchone()[0]
                for sql in stmts[3:] if not refused else ():
                    cursor.execute(sql)
                cursor.execute(stmts[0])
            finally:
                cursor.close()
    except OperationalError as exc:
        # Not one JSON object per row (never made by the queue), or a table missing (the Python path
        # then still commits the records): Python decides. A locked database is raised as it is.
        if "JSON" in str(exc) or "no such" in str(exc):
            return False
        raise
    return not refused
