"""Shared pieces for the TUI tests: event builders, a scripted feed, the recorded tour, bounded waits.

The scripted feed is what the Pilot tests drive the real app with: the test pushes flow events (or
feed statuses) and the app receives them through the same worker and batcher a live feed uses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    Channel,
    Direction,
    FlowEvent,
    MessageRecord,
    MessageRecorded,
    Mode,
    ProxyInfo,
    Side,
)
from proxy.record.capture import read_capture
from ui.feeds import FeedItem, Sink

TOUR = Path(__file__).parent / "data" / "tour.jsonl"
"""A real capture (demo servers, one proxy, both client eras), timestamps pinned: see data/make_tour.py."""

BASE = 1_800_000_000.0
WAIT = 5.0


def tour_events() -> list[FlowEvent]:
    """Every event of the recorded tour."""
    return list(read_capture(TOUR))


def info(listen: str = "http://127.0.0.1:8080", upstream: str = "http://127.0.0.1:8000/mcp") -> ProxyInfo:
    """A proxy_info event."""
    return ProxyInfo(ts=BASE, version="0.1.0", listen=listen, upstream=upstream, upstream_era="modern")


def summary(chain_id: str, **fields: Any) -> ChainSummary:
    """A chain headline with sensible defaults (a tools/call started at BASE)."""
    values: dict[str, Any] = {"id": chain_id, "started": BASE, "method": "tools/call", "name": "echo"}
    values.update(fields)
    return ChainSummary(**values)


def opened(chain_id: str, **fields: Any) -> ChainOpened:
    """A chain_opened event."""
    return ChainOpened(chain=summary(chain_id, **fields))


def changed(chain_id: str, **fields: Any) -> ChainChanged:
    """A chain_changed event."""
    return ChainChanged(chain=summary(chain_id, **fields))


def finished(
    chain_id: str, status: ChainStatus = ChainStatus.OK, ms: float = 12.0, **fields: Any
) -> ChainChanged:
    """A chain_changed event that ends the chain."""
    return changed(chain_id, status=status, duration_ms=ms, ended=BASE + ms / 1000, **fields)


def message(chain_id: str, seq: int, **fields: Any) -> MessageRecorded:
    """A message event (a client request by default)."""
    values: dict[str, Any] = {
        "seq": seq,
        "ts": BASE + seq / 1000,
        "side": Side.BOTH,
        "direction": Direction.TO_SERVER,
        "channel": Channel.POST,
        "exchange": f"x{seq}",
        "kind": "request",
        "jsonrpc_id": seq,
        "method": "tools/call",
        "body": {"jsonrpc": "2.0", "id": seq, "method": "tools/call", "params": {"name": "echo"}},
    }
    values.update(fields)
    return MessageRecorded(chain_id=chain_id, message=MessageRecord(**values))


def bridged(chain_id: str, **fields: Any) -> ChainOpened:
    """A chain the legacy_to_mrtr bridge handled."""
    return opened(chain_id, mode=Mode.LEGACY_TO_MRTR, client_era="legacy", upstream_era="modern", **fields)


class ScriptedFeed:
    """A feed the test pushes into: `push(*items)` delivers them to the running app, in order."""

    description = "scripted"

    def __init__(self, *items: FeedItem) -> None:
        self._queue: asyncio.Queue[FeedItem] = asyncio.Queue()
        self.push(*items)

    def push(self, *items: FeedItem) -> None:
        """Queue items for the app."""
        for item in items:
            self._queue.put_nowait(item)

    async def run(self, sink: Sink) -> None:
        """Deliver items until cancelled (the app quitting cancels its worker)."""
        while True:
            await sink(await self._queue.get())


async def wait_for(predicate: Callable[[], bool], *, what: str, seconds: float = WAIT) -> None:
    """Poll `predicate` until it holds; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(0.01)
