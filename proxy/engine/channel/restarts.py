"""How soon a channel that died is started again, and when it is not started at all.

A server that keeps dying must not be restarted in a tight loop: each unexpected exit within the
window doubles the wait before the next start, and past `limit` exits in the window no start is
made until the oldest falls out of it (requests are refused with why, and readiness says not
ready). Times are passed in (monotonic seconds); nothing here reads a clock.
"""

from __future__ import annotations

from collections import deque

FIRST_DELAY = 0.1
"""Seconds waited before starting again after one recent exit."""
MAX_DELAY = 5.0
"""Longest wait between two starts."""


class Restarts:
    """Unexpected exits over a sliding window: the wait before the next start, or a refusal."""

    def __init__(self, limit: int, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self._exits: deque[float] = deque()

    def exited(self, at: float) -> None:
        """The channel died without being asked to."""
        self._exits.append(at)
        self._trim(at)

    def recent(self, at: float) -> int:
        """Unexpected exits within the window before `at`."""
        self._trim(at)
        return len(self._exits)

    def delay(self, at: float) -> float | None:
        """Seconds to wait before the next start (0: at once); None when past the limit."""
        count = self.recent(at)
        if count > self.limit:
            return None
        if count == 0:
            return 0.0
        return min(MAX_DELAY, FIRST_DELAY * 2.0 ** (count - 1))

    def problem(self, at: float) -> str | None:
        """Why no start is made now (None while one may be)."""
        count = self.recent(at)
        if count <= self.limit:
            return None
        again = self._exits[0] + self.window - at
        return (
            f"the upstream MCP server exited {count} times in the last {self.window:g}s, more than "
            f"upstream_restarts_per_minute={self.limit}; the proxy starts it again in {again:.0f}s "
            "(see the server's stderr in the proxy's log)"
        )

    def _trim(self, at: float) -> None:
        exits = self._exits
        while exits and exits[0] <= at - self.window:
            exits.popleft()
