"""Starting the proxy so that a stop signal cuts the start short.

The start awaits the era probe, which may wait up to `upstream_timeout` on an upstream that accepts
connections and never answers (a hung server, a half-open tunnel). SIGINT, SIGTERM and SIGHUP must
stop the proxy at once meanwhile, as they do once it serves, so the start is cancelled when one comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from proxy.transport.tasks import spawn


async def start_unless_stopped(start: Awaitable[None], stop: asyncio.Event) -> bool:
    """Await `start`, cancelled when `stop` is set first; True when it finished, False when cut short."""
    task = asyncio.current_task()
    assert task is not None
    watcher = spawn(stop.wait(), name="stop-during-start")
    state = {"starting": True, "cut": False}

    def cut(_: asyncio.Task[bool]) -> None:
        if state["starting"] and not watcher.cancelled():
            state["cut"] = True
            task.cancel()

    watcher.add_done_callback(cut)
    try:
        await start
    except asyncio.CancelledError:
        if not state["cut"]:
            raise
        task.uncancel()
        return False
    finally:
        state["starting"] = False
        watcher.cancel()
    return True
