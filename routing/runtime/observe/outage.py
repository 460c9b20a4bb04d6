"""One log line when a background task's dependency (Redis, the database) starts failing,
one when it works again (docs/operations.md#outages): a task that retries every half
second must not write a line, or a traceback, per try for the length of the outage.
"""

from __future__ import annotations

import logging
import time

# errors that mean "a dependency is unreachable", logged without a traceback; anything else
# is a bug, whose traceback is logged once per outage
_OUTAGE_ERRORS = ("ConnectionError", "TimeoutError", "OperationalError", "InterfaceError", "ConnectionRefusedError")


def is_outage(exc: BaseException) -> bool:
    """True for a connection-level failure (OSError, Redis and database connection errors)."""
    return isinstance(exc, OSError) or any(cls.__name__ in _OUTAGE_ERRORS for cls in type(exc).__mro__)


class Outage:
    """The state of one task's dependency: `failed` logs the first failure of an outage,
    `ok` logs the first success after it; everything between is counted, not logged."""

    def __init__(self, log: logging.Logger, what: str, meanwhile: str) -> None:
        self.log, self.what, self.meanwhile = log, what, meanwhile
        self.since: float | None = None
        self.failures = 0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            self.log.warning(
                "%s failed (%s: %s); %s",
                self.what,
                type(exc).__name__,
                exc,
                self.meanwhile,
                exc_info=not is_outage(exc),
            )

    def ok(self) -> None:
        if self.since is not None:
            self.log.warning(
                "%s works again after %d failed tries in %.0f s",
                self.what,
                self.failures,
                time.monotonic() - self.since,
            )
            self.since = None
            self.failures = 0
