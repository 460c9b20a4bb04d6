"""Usage records that are never lost (docs/usage-records.md).

`queue` holds the request path's `record()` and the writer loop, `spool` the
journal and spool files on local disk, `writer` the database insert, `pricing`
the cost of a request. The names below are the ones the rest of the code imports.
"""

from routing.runtime.usage.pricing import cost
from routing.runtime.usage.queue import (
    UsageSink,
    backlog,
    flush_now,
    install_signal_handlers,
    record,
    run_writer,
    shutdown,
    sink,
)
from routing.runtime.usage.writer import db_insert, pg_safe, to_values

__all__ = [
    "UsageSink",
    "backlog",
    "cost",
    "db_insert",
    "flush_now",
    "install_signal_handlers",
    "pg_safe",
    "record",
    "run_writer",
    "shutdown",
    "sink",
    "to_values",
]
