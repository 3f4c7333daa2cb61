"""One log line a second for an event that can come in floods, counting the ones held back.

A refusal or failure that a client's retries repeat (a full table, an upstream that is down, a
flood of bad requests) must not flood the log: its first line is written in full, the same line
again within `LINE_EVERY` seconds is only counted, and the next line written says how many were
held back (`also_unlogged`). `/metrics` counts every one. Pure: the caller passes the time.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

LINE_EVERY = 1.0
"""Seconds between two lines of one flood (the ones between are counted)."""


@dataclass(slots=True)
class FloodLine:
    """When one kind of line was last written, and how many were held back since."""

    said_at: float = -math.inf
    unsaid: int = 0
    what: Hashable = None
    """What the last line said that a line within the second must repeat to be held back: a line
    saying something else (another level, another problem) is news, and written."""

    def due(self, at: float, what: Hashable = None, every: float = LINE_EVERY) -> int | None:
        """None when this line is held back (counted for the next one), else how many were held back
        since the last one written.

        Only a line within `every` seconds of the last one, before it as well as after, is held back
        (concurrent requests' times come out of order): one without a time (0.0) is always written,
        and so is one further before the last (a clock stepped back), which the next are measured from.
        """
        said = self.said_at
        if what == self.what and at > 0.0 and said - every < at < said + every:
            self.unsaid += 1
            return None
        if at > 0.0:
            self.said_at = at
        self.what = what
        also, self.unsaid = self.unsaid, 0
        return also


class FloodLines:
    """A `FloodLine` per kind of line; the kinds are the code's own names, so the table stays small."""

    __slots__ = ("lines",)

    def __init__(self) -> None:
        self.lines: dict[str, FloodLine] = {}

    def due(self, kind: str, at: float, what: Hashable = None, every: float = LINE_EVERY) -> int | None:
        """`FloodLine.due` for this kind of line."""
        line = self.lines.get(kind)
        if line is None:
            line = self.lines[kind] = FloodLine()
        return line.due(at, what, every)
