"""Per-key requests, spend and last use, added by the usage writer per batch (docs/usage-records.md#key-usage).

Runs inside the writer's insert transaction: `new_rows` drops the rows of a batch
whose record_id is already stored (a replay after a crash or an outage must not
count twice), `add` upserts one row per key of the batch into routing.KeyUsage.
No request ever waits for it: the writer thread does it with the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

Row = dict[str, Any]
_CHUNK = 500


def new_rows(cursor: Any, quote: Callable[[str], str], table: str, rows: Sequence[Row]) -> list[Row]:
    """The rows whose record_id is not in the table yet (one indexed lookup per 500 rows)."""
    ids = [str(r.get("record_id") or "") for r in rows]
    existing: set[str] = set()
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ", ".join(["%s"] * len(chunk))
        cursor.execute(
            f"SELECT {quote('record_id')} FROM {quote(table)} WHERE {quote('record_id')} IN ({marks})", chunk
        )
        existing.update(row[0] for row in cursor.fetchall())
    if not existing:
        return list(rows)
    return [r for r, rid in zip(rows, ids, strict=True) if rid not in existing]


def totals(rows: Sequence[Row], to_datetime: Callable[[Any], datetime]) -> dict[tuple[str, str, str], list[Any]]:
    """Per (key prefix, org, agent): [requests, spend, last used]; rows without a key are left out."""
    out: dict[tuple[str, str, str], list[Any]] = {}
    for r in rows:
        prefix = r.get("key_prefix")
        if not prefix:
            continue
        key = (str(prefix)[:16], str(r.get("org") or "")[:64], str(r.get("agent") or "")[:64])
        at = to_datetime(r.get("created_at"))
        cost = r.get("cost")
        entry = out.get(key)
        if entry is None:
            entry = out[key] = [0, Decimal(0), datetime.min.replace(tzinfo=UTC)]
        entry[0] += 1
        if cost is not None:
            entry[1] += Decimal(str(cost))
        if at > entry[2]:
            entry[2] = at
    return out


def add(cursor: Any, connection: Any, rows: Sequence[Row], to_datetime: Callable[[Any], datetime]) -> None:
    """Upsert the batch's per-key totals (one statement per key in the batch)."""
    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import KeyUsage

    per_key = totals(rows, to_datetime)
    if not per_key:
        return
    ops = connection.ops
    q = ops.quote_name
    table = q(KeyUsage._meta.db_table)
    req, spend, last = q("requests"), q("spend"), q("last_used_at")
    sql = (
        f"INSERT INTO {table} ({q('key_prefix')}, {q('org')}, {q('agent')}, {req}, {spend}, {last}) "
        "VALUES (%s, %s, %s, %s, %s, %s) "
        f"ON CONFLICT ({q('key_prefix')}, {q('org')}, {q('agent')}) DO UPDATE SET "
        f"{req} = {table}.{req} + excluded.{req}, "
        f"{spend} = {table}.{spend} + excluded.{spend}, "
        f"{last} = CASE WHEN {table}.{last} IS NULL OR excluded.{last} > {table}.{last} "
        f"THEN excluded.{last} ELSE {table}.{last} END"
    )
    cursor.executemany(
        sql,
        [
            (
                prefix,
                org,
                agent,
                n,
                ops.adapt_decimalfield_value(cost.quantize(Decimal("0.00000001")), 18, 8),
                ops.adapt_datetimefield_value(at),
            )
            for (prefix, org, agent), (n, cost, at) in per_key.items()
        ],
    )
