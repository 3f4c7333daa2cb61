"""The idle deadline of upstream response bodies that are not SSE streams.

A response head has its deadline (`upstream_timeout`); a JSON body that starts and then stops would
otherwise hold its client's call for good, the client waiting for bytes that never come. An upstream
connection reading such a body is watched here: when no byte of it arrived for `timeout` seconds
while the proxy was ready to read (a connection paused because its client reads slowly is not the
upstream's stall), the connection fails the body (`BODY_STALLED`), and whoever reads it ends the
exchange as the relay decides. SSE streams keep their own rules: a stream may be quiet for as long as
its server has nothing to say.

One sweep for every body watched, not a timer each (the head deadlines' reason, in `upstream_pool`):
a connection counts its reads, and the sweep compares the count with the one it saw last.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

BODY_STALLED = "body_timeout"
"""The `UpstreamError.kind` of a body whose upstream stopped sending it (`upstream_body_idle_timeout`)."""

BODY_IDLE_SETTING = "upstream_body_idle_timeout"
"""The setting that bounds the silence inside a response body, named wherever it ends one."""

_SWEEP = 1.0
"""Longest pause between two checks of watched bodies (a stall is noticed at most this late)."""


class BodyReader(Protocol):
    """What the watch asks of an upstream connection reading a response body."""

    reads: int
    """Reads from the upstream so far: the watch only compares it with the last count it saw."""
    paused: bool
    """Reading is paused because the proxy holds enough of the body: the upstream is not to blame."""

    def reading_body(self) -> bool:
        """The body this connection reads has not ended yet."""

    def stalled(self, detail: str) -> None:
        """Fail the body: the upstream sent none of it for the deadline."""


class BodyDeadlines:
    """The bodies being read, each with the read count and the time it last changed."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._every = min(_SWEEP, timeout / 4)
        self._watched: dict[BodyReader, tuple[int, float]] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    def watch(self, reader: BodyReader, loop: asyncio.AbstractEventLoop) -> None:
        """Watch `reader`'s body until it ends (its response head arrived, the body has not ended).

        `loop`: the running loop, as the caller remembers it (asking asyncio costs a system call).
        """
        self._watched[reader] = (reader.reads, loop.time())
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._every, self._sweep)

    def _sweep(self) -> None:
        """Fail the bodies silent past the deadline; run again while any is watched."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        watched = self._watched
        for reader, (reads, since) in list(watched.items()):
            if not reader.reading_body():
                del watched[reader]
            elif reader.reads != reads or reader.paused:
                watched[reader] = (reader.reads, now)
            elif now - since >= self.timeout:
                del watched[reader]
                said = f"the upstream sent no byte of its response body for {self.timeout:g}s"
                reader.stalled(f"{said} ({BODY_IDLE_SETTING})")
        if watched:
            self._sweeper = loop.call_later(self._every, self._sweep)

    def close(self) -> None:
        """Stop watching (the pool is closing)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._watched.clear()
