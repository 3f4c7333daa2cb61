"""The held watcher: reads on a new hold or a kick, gives up on a proxy without intercepts."""

from __future__ import annotations

import asyncio

from tests.ui.desk_double import DeskDouble, held
from tests.ui.helpers import wait_for
from ui.desk import DeskError, Intercepts
from ui.held_watch import HeldWatcher


class NoIntercepts(DeskDouble):
    """A proxy from before intercepts: `/api/intercepts` is not there."""

    reads = 0

    async def intercepts(self) -> Intercepts:
        self.reads += 1
        raise DeskError("GET /api/intercepts: HTTP 404", 404)


async def test_a_new_hold_and_a_kick_are_read_at_once_without_waiting_out_the_idle_time() -> None:
    desk = DeskDouble()
    states: list[Intercepts] = []
    watcher = HeldWatcher(desk, states.append, lambda reason: None, idle=30.0)
    async with asyncio.TaskGroup() as group:
        task = group.create_task(watcher.run())
        await wait_for(lambda: len(states) == 1, what="the first read")
        desk.hold(held("h1"))
        await wait_for(lambda: len(states) == 2, what="the read after a new hold")
        assert [h.id for h in states[-1].held] == ["h1"]
        desk.held.clear()  # released elsewhere: nothing new to wake the long poll
        watcher.kick()
        await wait_for(lambda: len(states) == 3, what="the read after a kick")
        assert states[-1].held == ()
        task.cancel()


async def test_a_proxy_without_intercepts_is_reported_once_and_not_asked_again() -> None:
    desk = NoIntercepts()
    errors: list[str] = []
    watcher = HeldWatcher(desk, lambda state: None, errors.append)
    await asyncio.wait_for(watcher.run(), 5)
    assert errors == ["GET /api/intercepts: HTTP 404"]
    assert desk.reads == 1
