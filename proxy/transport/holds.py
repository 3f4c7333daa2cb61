"""Waits the proxy makes on purpose (a fault's delay), ended early when the proxy stops.

A delay rule may hold a message for minutes; a proxy told to drain must not spend its grace, or keep
the client without an answer, on a wait it chose itself. Once released, every held message goes on at
once and later delays are skipped.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress


class Holds:
    """Where delayed messages wait; `release` ends every wait, now and later."""

    def __init__(self) -> None:
        self.released = False
        self._event: asyncio.Event | None = None

    async def wait(self, seconds: float) -> None:
        """Wait `seconds`, or until released."""
        if self.released or seconds <= 0:
            return
        if self._event is None:
            self._event = asyncio.Event()
        with suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._event.wait()

    def release(self) -> None:
        """End every wait (the proxy is draining or stopping)."""
        self.released = True
        if self._event is not None:
            self._event.set()
