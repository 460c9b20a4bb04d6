"""A request body's progress deadline (docs/security.md#server-edge): bytes per window, not any byte.

A body must bring at least `min_bytes` more in every `window_s` (or end): each time it has, the
deadline moves `window_s` ahead. A deadline that moved on every byte kept a body trickled at one
byte every few seconds open for ever, and a few thousand such connections held a process's
descriptors. Pure: the caller passes its clock (the event loop's, or the reactor's); the servers'
edges (gateway_project.http_limits, gateway_project.daphne_limits) and the gateway's own body
reader (routing.gateway.wire.read_body) apply the same rule.
"""

from __future__ import annotations


class BodyProgress:
    """When a body being read must have made its next `min_bytes` of progress (`deadline`)."""

    __slots__ = ("window_s", "min_bytes", "deadline", "_got")

    def __init__(self, window_s: float, min_bytes: int, now: float) -> None:
        self.window_s = window_s
        self.min_bytes = max(1, min_bytes)
        self.deadline = now + window_s
        self._got = 0  # bytes since the deadline last moved

    def fed(self, size: int, now: float) -> bool:
        """`size` bytes of the body arrived at `now`; True when they moved the deadline."""
        got = self._got + size
        if got < self.min_bytes:
            self._got = got
            return False
        self._got = 0
        self.deadline = now + self.window_s
        return True

    def restart(self, now: float) -> None:
        """A window from `now` (the application was not reading: not the client's fault)."""
        self._got = 0
        self.deadline = now + self.window_s
