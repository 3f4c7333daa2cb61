"""The wait of a SIGTERM drain: while conversations are under way, up to the grace or a second signal,
with the `draining` and `drained` lines that say what it waited for and how it ended.

What a drain stops taking before this wait, and stops after it, is `proxy.runtime.Proxy.drain`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress

from proxy.logs import get_logger

CLOSE_TIMEOUT = 1.0
"""Seconds `stop` gives requests still open (after a drain: those past the grace) before cancelling them."""
_LEFT = (
    f"what is left has up to {CLOSE_TIMEOUT:g} s more to end (HTTP+SSE client streams are ended "
    "first), then is cut "
    "(client_connections_cut says how many were)"
)
"""What a drain that ends with conversations open says becomes of them (`stop` gives them CLOSE_TIMEOUT)."""

_DRAIN_POLL = 0.05
"""Seconds between looks at the open exchanges while draining."""


async def wait_for_conversations(
    conversations: Callable[[], dict[str, int]], hurry: asyncio.Event, grace: float
) -> None:
    """Wait until `conversations` counts none under way, `hurry` is set or `grace` seconds pass."""
    log = get_logger()
    log.info("draining", grace_s=grace, **conversations())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while any(conversations().values()) and not hurry.is_set() and loop.time() < deadline:
        with suppress(TimeoutError):
            async with asyncio.timeout(min(_DRAIN_POLL, max(0.0, deadline - loop.time()))):
                await hurry.wait()
    left = conversations()
    if not any(left.values()):
        how = "every conversation ended"
    elif hurry.is_set():
        how = f"cut short by a second signal: {_LEFT}"
    else:
        how = f"the grace ({grace:g} s) ran out: {_LEFT}"
    log.info("drained", how=how, **left)
