"""Usage records that are never lost (docs/usage-records.md).

`queue` holds the sink (the request path's `record()`, the journal and the writer
loop), `spool` the journal and spool files on local disk, `writer` the database
insert, `pricing` the cost of a request. The process's one sink is built by the
composition root (gateway_project.process) and held by the process object.
"""

from routing.runtime.usage.pricing import cost
from routing.runtime.usage.queue import UsageSink, install_signal_handlers, run_writer
from routing.runtime.usage.writer import db_insert, pg_safe, to_values

__all__ = [
    "UsageSink",
    "cost",
    "db_insert",
    "install_signal_handlers",
    "pg_safe",
    "run_writer",
    "to_values",
]
