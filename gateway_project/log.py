"""Logging handler that writes to whatever sys.stderr is at emit time.

Background threads (the usage writer) log after test runners or servers have
swapped stderr; a handler bound to the stream at configuration time would then
write to a closed file.
"""

from __future__ import annotations

import logging
import sys


class StderrHandler(logging.StreamHandler):
    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001
        pass
