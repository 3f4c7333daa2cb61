"""Message lines of a capture that joined no chain: counted and named, so a reader never drops them silently.

A message that a client exchange carries joins the chain of the request it answers or rides; when the
line of that request was skipped as corrupt (a line cut in half, say), the server's later messages on
the exchange have no chain to join, and a chain export (JSON, NDJSON, the TUI) cannot show them. A
message on a bridge's upstream leg joins the chain of the exchange, or earlier leg, its leg serves;
one whose leg the capture ties to neither (a capture before format 1.7 does not link the bridge's
answer to a question on its session's GET stream) has none either. The reader cannot invent the chain
such lines would have joined, so it says what it left out: which exchange or leg, how many lines, and
the skipped line before them. A count is settled when its exchange or leg closes (or when the capture
ends). Plain bookkeeping: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Final

MAX_UNPLACED_TRACKED: Final = 1024
"""Open exchanges with unplaced lines followed at once; past it the oldest is settled as it stands."""

MAX_UNPLACED_SHOWN: Final = 20
"""Exchanges with unplaced lines named in a report (all their lines are counted)."""


@dataclasses.dataclass
class UnplacedLines:
    """Message lines of one exchange that joined no chain."""

    exchange: str
    """The client exchange, or the upstream leg (`leg`), they travelled on."""
    after: str | None
    """`file:line` of the last line skipped as corrupt before the first of them; None when none was."""
    lines: int = 0
    leg: bool = False


class Unplaced:
    """Counts, per exchange, the message lines that joined no chain, and names the first exchanges."""

    def __init__(self) -> None:
        self._open: dict[str, UnplacedLines] = {}
        self.last_skipped: str | None = None
        """`file:line` of the last line skipped as corrupt so far."""
        self.settled: list[UnplacedLines] = []
        """Exchanges with unplaced lines, in the order they ended (the first `MAX_UNPLACED_SHOWN`)."""
        self.lines = 0
        """Message lines that joined no chain, all of them."""

    def joined_none(self, exchange: str, *, leg: bool = False) -> None:
        """A message line of `exchange` (a bridge's upstream leg when `leg`) joined no chain."""
        entry = self._open.get(exchange)
        if entry is None:
            if len(self._open) >= MAX_UNPLACED_TRACKED:
                self._settle(self._open.pop(next(iter(self._open))))
            entry = UnplacedLines(exchange[:128], self.last_skipped, leg=leg)
            self._open[exchange] = entry
        entry.lines += 1
        self.lines += 1

    def closed(self, exchange: str) -> None:
        """`exchange` (or a leg) ended: its count, if it has one, is final."""
        entry = self._open.pop(exchange, None)
        if entry is not None:
            self._settle(entry)

    def finish(self) -> None:
        """The capture's end: exchanges still open are settled as they stand."""
        for entry in self._open.values():
            self._settle(entry)
        self._open.clear()

    def _settle(self, entry: UnplacedLines) -> None:
        if len(self.settled) < MAX_UNPLACED_SHOWN:
            self.settled.append(entry)
