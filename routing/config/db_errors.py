"""What went wrong when the configuration could not be read from the database.

The reader (routing.config.document) raises `ConfigReadError` naming the table it
was reading and keeping the database's own message. Only a missing table or column
means the schema is behind (run migrate); a database that could not be reached
(refused, timed out, no such host or file) is reported as unreachable, saying nothing
about a schema that was never seen; anything else (a lock, a permission, a query the
database refuses) is reported as what it is, so the operator is not sent to `migrate`
for a problem migrate cannot fix.
"""

from __future__ import annotations

from django.db import DatabaseError

_MISSING = ("no such table", "no such column")  # SQLite
_MISSING_PG = ("UndefinedTable", "UndefinedColumn")  # psycopg error classes
# what a connection that never got to a query says (psycopg / libpq, SQLite)
_UNREACHABLE = (
    "connection to server",
    "could not connect",
    "connection refused",
    "timeout expired",
    "could not translate host name",
    "name or service not known",
    "connection timed out",
    "server closed the connection",
    "unable to open database file",
)


class ConfigReadError(DatabaseError):
    """A query of the configuration reader failed; `table` is the table it was reading."""

    def __init__(self, table: str, error: BaseException) -> None:
        self.table = table
        self.error = error
        super().__init__(f"reading table {table}: {_message(error)}")

    @property
    def schema_missing(self) -> bool:
        return schema_missing(self.error)


def _message(error: BaseException) -> str:
    text = " ".join(str(error).split())  # PostgreSQL messages span lines
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def schema_missing(error: BaseException) -> bool:
    """True when the error says a table or column does not exist (migrations not applied)."""
    for exc in (error, error.__cause__):
        if exc is None:
            continue
        if type(exc).__name__ in _MISSING_PG:
            return True
        text = str(exc).lower()
        if any(marker in text for marker in _MISSING) or ("does not exist" in text and "relation" in text):
            return True
    return False


def unreachable(error: BaseException) -> bool:
    """True when the error says the database was never reached (no query ran)."""
    for exc in (error, error.__cause__):
        if exc is not None and any(marker in str(exc).lower() for marker in _UNREACHABLE):
            return True
    return False


def describe(error: BaseException) -> str:
    """One paragraph for the operator: what failed, the database's words, and what to do."""
    if isinstance(error, ConfigReadError):
        what, original = f"reading table {error.table}", error.error
    else:
        what, original = "reading the configuration", error
    message = _message(original)
    if schema_missing(original):
        return (
            f"Cannot read the configuration from the database ({what}: {message}). The database schema "
            "is missing or behind: run `python manage.py migrate` (and check DATABASE_URL points at the "
            "right database)."
        )
    if unreachable(original):
        return (
            f"Cannot reach the database ({what}: {message}). Check DATABASE_URL and that the database server "
            "is running and reachable from here (a connection gives up after SWITCHBOARD_DB_CONNECT_TIMEOUT_S "
            "seconds), then start again."
        )
    return (
        f"Cannot read the configuration from the database ({what}: {message}). The database answered and "
        "this is not a missing table, so migrate will not help: fix what the database reports "
        "(permissions, locks, disk) and start again."
    )
