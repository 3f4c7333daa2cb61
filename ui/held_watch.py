"""The held watcher: reads a proxy's intercept rules and held messages whenever they may have changed.

It reads the state, hands it over, then waits on the desk for a message newer than the newest held
one — at most until the soonest deadline passes (that message then goes on unchanged) or
`IDLE_SECONDS`, so a message released elsewhere (by a script, another TUI) leaves the view too. A
`kick` reads at once (after a decision from this TUI). A failure is reported and retried with
backoff; a proxy without intercepts (HTTP 404) is reported once and no longer asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from ui.desk import DeskError, Intercepts, RuleDesk

IDLE_SECONDS = 5.0
"""Longest wait between two reads."""
BACKOFF = (1.0, 2.0, 5.0)
"""Waits after consecutive failed reads."""


class HeldWatcher:
    """Runs until cancelled, calling `on_state` with each state read and `on_error` with each failure."""

    def __init__(
        self,
        desk: RuleDesk,
        on_state: Callable[[Intercepts], None],
        on_error: Callable[[str], None],
        *,
        idle: float = IDLE_SECONDS,
    ) -> None:
        self.desk = desk
        self.on_state = on_state
        self.on_error = on_error
        self.idle = idle
        self._kick = asyncio.Event()

    def kick(self) -> None:
        """Read now rather than at the end of the current wait."""
        self._kick.set()

    async def run(self) -> None:
        """Read, hand over, wait; forever."""
        failures = 0
        while True:
            self._kick.clear()
            try:
                state = await self.desk.intercepts()
            except DeskError as exc:
                self.on_error(str(exc))
                if exc.status == 404:
                    return  # a proxy that has no intercepts: nothing to watch
                await self._pause(BACKOFF[min(failures, len(BACKOFF) - 1)])
                failures += 1
                continue
            failures = 0
            self.on_state(state)
            await self._wait(state)

    async def _wait(self, state: Intercepts) -> None:
        wait = self.idle
        if state.held:
            soonest = min(h.deadline for h in state.held) - time.time()
            wait = min(wait, max(soonest + 0.05, 0.05))
        newest = state.held[-1].id if state.held else None
        async with asyncio.TaskGroup() as group:
            poll = group.create_task(self._poll(newest, wait), name="held-poll")
            kicked = group.create_task(self._kick.wait(), name="held-kick")
            await asyncio.wait({poll, kicked}, timeout=wait + 1.0, return_when=asyncio.FIRST_COMPLETED)
            poll.cancel()
            kicked.cancel()

    async def _poll(self, newest: str | None, wait: float) -> None:
        try:
            await self.desk.wait_held(newest, wait)
        except DeskError:
            await asyncio.sleep(wait)  # the next read reports what is wrong

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._kick.wait(), seconds)
