"""Feeding the capture file: flow events from the bus, and pass-through facts straight from the relay.

Events come off the capture's own bounded bus queue in a task; facts (observations not yet built into
chains, see `proxy.flows.facts`) are encoded as they happen, since they are what the capture keeps
while nobody watches live. Both land in the writer's buffer, which is flushed `FLUSH_INTERVAL` after
the first unflushed line: a write(2) per few milliseconds, not one per exchange.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress

from proxy.flows.bus import Subscription
from proxy.flows.facts import Fact
from proxy.logs import get_logger
from proxy.record.capture import CaptureError, CaptureWriter
from proxy.record.facts import FactEncoder

FLUSH_INTERVAL = 0.01
"""Seconds a captured line may wait in the writer's buffer before it is flushed to the file."""


class CaptureSink:
    """Writes events and facts to one capture writer, flushing on a short timer."""

    def __init__(self, writer: CaptureWriter, encoder: FactEncoder) -> None:
        self.writer = writer
        self._encoder = encoder
        self._flush: asyncio.TimerHandle | None = None
        self._failed = False

    def fact(self, fact: Fact) -> None:
        """Write one fact now (called on the traffic path: encoding and a buffered write, no I/O wait)."""
        if self._failed:
            return
        try:
            self.writer.write_line(self._encoder.encode(fact))
        except CaptureError as exc:
            self._failed = True  # said once; the traffic goes on without its capture
            get_logger().error("capture_failed", error=str(exc))
            return
        self._schedule()

    async def consume(self, sub: Subscription) -> None:
        """Write the bus's events until the subscription closes: every queued event at once."""
        try:
            async for event in sub:
                self.writer.write(event)
                while (more := sub.get_nowait()) is not None:
                    self.writer.write(more)
                self._schedule()
        finally:
            self._cancel()
            self.writer.flush()

    def _schedule(self) -> None:
        if self._flush is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._flush_now()
                return
            self._flush = loop.call_later(FLUSH_INTERVAL, self._flush_now)

    def _flush_now(self) -> None:
        self._flush = None
        with suppress(CaptureError):
            self.writer.flush()

    def _cancel(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
