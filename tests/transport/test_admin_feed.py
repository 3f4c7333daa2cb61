"""The live feed (`/api/feed`): proxy_info, history, a `: live` comment, then live events, losslessly.

A real SDK client makes calls before and after a feed client attaches; the feed must show each chain
once, each message once, in order. The seam rule itself is also checked without sockets.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    Channel,
    Direction,
    FlowEvent,
    Lagged,
    MessageRecord,
    MessageRecorded,
    ProxyInfo,
    SessionChanged,
    Side,
    event_from_json,
)
from proxy.flows.store import ChainStore
from proxy.framing.sse import SseComment, SseDecoder, SseEvent
from proxy.runtime import Proxy
from proxy.transport.feed import Snapshot
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import metric
from tests.transport.helpers import bounded, wait_until
from tests.transport.test_admin import admin_proxy, scrape

pytestmark = pytest.mark.e2e

Item = FlowEvent | str
"""A feed item: a flow event, or the text of an SSE comment (`live`, `keepalive`); the `sent` stamps
heading live writes are kept apart (`FeedReader.stamps`)."""


class FeedReader:
    """Reads the admin feed as a TUI would: SSE events decoded into flow events, comments kept as text."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.decoder = SseDecoder()
        self.pending: deque[Item] = deque()
        self.seen: list[Item] = []
        self.stamps: list[float] = []
        """The `sent` stamps read so far (epoch seconds), in order."""

    async def next(self) -> Item:
        while not self.pending:
            chunk = await bounded(self.response.content.readany(), what="more of the admin feed")
            if not chunk:
                raise AssertionError(f"the feed ended; seen so far: {self.seen}")
            for item in self.decoder.feed(chunk):
                if isinstance(item, SseEvent):
                    self.pending.append(event_from_json(item.data))
                elif isinstance(item, SseComment) and item.text.startswith("sent "):
                    self.stamps.append(float(item.text.removeprefix("sent ")))
                elif isinstance(item, SseComment):
                    self.pending.append(item.text)
        item = self.pending.popleft()
        self.seen.append(item)
        return item

    async def until(self, done: Callable[[Item], bool]) -> list[Item]:
        """Items up to and including the first one for which `done` holds."""
        items = []
        while True:
            item = await self.next()
            items.append(item)
            if done(item):
                return items


@asynccontextmanager
async def attached(proxy: Proxy | str, query: str = "") -> AsyncIterator[FeedReader]:
    """The feed of an in-process proxy, or of the admin API at a URL (a `mcp-proxy` process's)."""
    admin = proxy if isinstance(proxy, str) else proxy.admin_url
    assert admin is not None
    async with aiohttp.ClientSession() as http, http.get(f"{admin}/api/feed{query}") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        assert resp.headers["X-Accel-Buffering"] == "no"
        yield FeedReader(resp)


def finished(name: str) -> Callable[[Item], bool]:
    def done(item: Item) -> bool:
        return isinstance(item, ChainChanged) and item.chain.name == name and item.chain.ended is not None

    return done


def chain_events(items: list[Item], chain_id: str) -> list[str]:
    kinds = []
    for item in items:
        if isinstance(item, ChainOpened | ChainChanged) and item.chain.id == chain_id:
            kinds.append(item.type)
        elif isinstance(item, MessageRecorded) and item.chain_id == chain_id:
            kinds.append(f"message {item.message.seq}")
    return kinds


async def test_feed_gives_history_then_live_events_of_a_real_sdk_call_made_after_attaching(
    legacy_server: PeerServer,
) -> None:
    async with admin_proxy(legacy_server.url) as proxy, client_for(proxy.endpoint(), "legacy") as client:
        await client.call_tool("echo", {"text": "before attaching"})
        async with attached(proxy) as feed:
            history = await feed.until(lambda item: item == "live")
            await client.call_tool("add", {"a": 2, "b": 3})
            live = await feed.until(finished("add"))

    assert isinstance(history[0], ProxyInfo)
    assert history[0].upstream_era == "legacy"
    (echo,) = [i.chain for i in history if isinstance(i, ChainOpened) and i.chain.name == "echo"]
    assert echo.status is ChainStatus.OK  # history opens with the chain's current headline
    held = len(proxy.chains().get(echo.id).messages)  # type: ignore[union-attr]
    assert chain_events(history, echo.id) == [
        "chain_opened",
        *(f"message {n}" for n in range(1, held + 1)),
        "chain_changed",
    ]
    (add,) = [i.chain for i in live if isinstance(i, ChainOpened)]
    assert add.name == "add"
    assert add.status is ChainStatus.PENDING  # live: opened as it began
    add_events = chain_events(live, add.id)
    assert add_events[0] == "chain_opened"
    assert [e for e in add_events if e.startswith("message")] == ["message 1", "message 2"]
    everything = history + live
    ids = [(i.chain_id, i.message.seq) for i in everything if isinstance(i, MessageRecorded)]
    assert len(ids) == len(set(ids)), "a message was sent twice"
    assert not [i for i in everything if isinstance(i, Lagged)]


async def test_history_replays_the_newest_chains_the_client_asks_for(legacy_server: PeerServer) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            for text in ("one", "two", "three"):
                await client.call_tool("echo", {"text": text})
        newest = [chain.summary.id for chain in proxy.chains()][-2:]

        async with attached(proxy, "?history=2") as feed:
            two = await feed.until(lambda item: item == "live")
        async with attached(proxy, "?history=0") as feed:
            none = await feed.until(lambda item: item == "live")
        async with attached(proxy, "?history=5000") as feed:  # more than the store holds: all of it
            everything = await feed.until(lambda item: item == "live")
        assert proxy.admin_url is not None
        async with (
            aiohttp.ClientSession() as http,
            http.get(proxy.admin_url + "/api/feed?history=-1") as resp,
        ):
            negative = (resp.status, await resp.json())

    assert [i.chain.id for i in two if isinstance(i, ChainOpened)] == newest
    assert [type(i) for i in none] == [ProxyInfo, str]
    assert [i.chain.id for i in everything if isinstance(i, ChainOpened)] == [
        c.summary.id for c in proxy.chains()
    ]
    assert negative == (
        400,
        {"error": "bad_request", "message": "history must be an integer of at least 0, got -1"},
    )


async def test_a_quiet_feed_sends_keepalive_comments(legacy_server: PeerServer) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        assert proxy.admin is not None
        proxy.admin.feed.keepalive = 0.05
        async with attached(proxy, "?history=0") as feed:
            await feed.until(lambda item: item == "live")
            assert await feed.next() == "keepalive"


async def test_a_feed_client_that_falls_behind_sees_a_lagged_marker_and_the_drops_are_counted(
    legacy_server: PeerServer,
) -> None:
    async with admin_proxy(legacy_server.url, bus_queue_size=5) as proxy:
        async with attached(proxy, "?history=0") as feed:
            await feed.until(lambda item: item == "live")
            for n in range(50):  # one synchronous burst: the feed cannot read in between
                proxy.bus.publish(SessionChanged(ts=float(n), session=f"s{n}", state="opened"))
            burst = await feed.until(lambda item: isinstance(item, SessionChanged) and item.session == "s49")
            assert burst[0] == Lagged(dropped=45)  # told first, not behind the queue it fell behind
            assert [i.session for i in burst[1:] if isinstance(i, SessionChanged)] == [
                f"s{n}" for n in range(45, 50)
            ]
        await wait_until(
            lambda: "admin-feed" not in {sub.name for sub in proxy.bus.subscribers},
            what="the feed's subscription to close when its client left",
        )
        text = await scrape(proxy)
    assert metric(text, "mcp_proxy_bus_dropped_events_total", subscriber="admin-feed") == 45
    assert metric(text, "mcp_proxy_feed_clients") == 0


async def test_stopping_the_proxy_ends_an_attached_feed(legacy_server: PeerServer) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        assert proxy.admin_url is not None
        async with aiohttp.ClientSession() as http, http.get(proxy.admin_url + "/api/feed") as resp:
            reader = FeedReader(resp)
            await reader.until(lambda item: item == "live")
            await proxy.stop()
            rest = await bounded(resp.content.read(), what="the feed to end")
    assert rest == b""


# -- the seam, without sockets ---------------------------------------------------------------------


def record(seq: int) -> MessageRecord:
    return MessageRecord(
        seq=seq,
        ts=0.0,
        side=Side.BOTH,
        direction=Direction.TO_SERVER,
        channel=Channel.POST,
        exchange="x1",
        kind="request",
    )


def message(chain_id: str, seq: int) -> MessageRecorded:
    return MessageRecorded(chain_id=chain_id, message=record(seq))


def test_the_seam_skips_what_the_history_covered_and_passes_everything_newer() -> None:
    store = ChainStore(max_chains=10, max_messages_per_chain=10)
    chain = store.open(ChainSummary(id="c1", started=0.0, method="tools/call"))
    for _ in range(2):
        chain.add(record(chain.next_seq()))
    snapshot = Snapshot.take(store, 10)
    seam = snapshot.seam()
    chain.add(record(chain.next_seq()))  # after the snapshot: the copy does not see it

    assert [type(e).__name__ for e in snapshot.events()] == [
        "ChainOpened",
        "MessageRecorded",
        "MessageRecorded",
        "ChainChanged",
    ]
    verdicts: dict[str, Any] = {
        "opened again": seam.admits(ChainOpened(chain=chain.summary)),
        "message 2": seam.admits(message("c1", 2)),
        "message 3": seam.admits(message("c1", 3)),
        "changed": seam.admits(ChainChanged(chain=chain.summary)),
        "other chain opened": seam.admits(ChainOpened(chain=ChainSummary(id="c2", started=1.0))),
        "other chain message 1": seam.admits(message("c2", 1)),
        "lagged": seam.admits(Lagged(dropped=3)),
    }
    assert verdicts == {
        "opened again": False,
        "message 2": False,
        "message 3": True,
        "changed": True,
        "other chain opened": True,
        "other chain message 1": True,
        "lagged": True,
    }


async def test_each_write_of_live_events_is_headed_by_when_the_proxy_wrote_it(
    legacy_server: PeerServer,
) -> None:
    """A reader tells how late it reads from these stamps: the times inside events can be old news."""
    async with admin_proxy(legacy_server.url) as proxy, attached(proxy, "?history=0") as feed:
        await feed.until(lambda item: item == "live")
        assert feed.stamps == []  # the history is not stamped: it is old by nature
        before = time.time()
        proxy.bus.publish(SessionChanged(ts=1.0, session="s1", state="opened"))
        chunk = await bounded(feed.response.content.readany(), what="the live write")
        after = time.time()
    head, _, frame = chunk.partition(b"\n\n")
    assert head.startswith(b": sent ")
    assert before - 0.001 <= float(head.removeprefix(b": sent ")) <= after + 0.001  # to the millisecond
    assert frame.startswith(b"data: ")
    assert event_from_json(frame.removeprefix(b"data: ")) == SessionChanged(
        ts=1.0, session="s1", state="opened"
    )
