"""An attached TUI shows the proxy as it is now: when it falls behind, and the calls parked there.

A real proxy in front of the real legacy test server, real clients, the real admin feed. A view that
falls behind says so and reads a fresh history instead of working through old events while it says
`live`; the `parked N` of the status bar is the proxy's count, whenever the view attached, and none is
left standing once a capture ends; a chain whose `chain_opened` the view never read is one row.
Falling behind is made without load: the proxy's bus is flooded in one synchronous burst (the feed
cannot read in between), or the view's clock is moved ahead, so that the events it reads are that
old by the proxy's clock.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.config import Settings
from proxy.flows.events import ChainChanged, ChainStatus, SessionChanged
from proxy.framing.sse import SseDecoder, SseEvent
from proxy.runtime import Proxy
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.feeds import AttachFeed, CaptureFeed, Feed, FeedItem, FeedStatus, Sink
from ui.widgets.status_bar import ViewFlags, status_text

pytestmark = pytest.mark.e2e

ASK = {"name": "ask_name", "arguments": {}}
"""The legacy server's tool that asks in flight: the bridge parks the 2026-07-28 call on it."""


@asynccontextmanager
async def proxy_with_admin(upstream: str, **overrides: Any) -> AsyncIterator[Proxy]:
    proxy = Proxy(Settings(upstream=upstream, listen="127.0.0.1:0", admin="127.0.0.1:0", **overrides))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


class ShiftedClock:
    """The view's wall clock, which the test can move ahead (as a view falling behind sees it)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


class Recorded:
    """A feed whose items are kept as they pass, so a status the app shows only briefly is seen."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.description = feed.description
        self.items: list[FeedItem] = []

    async def run(self, sink: Sink) -> None:
        async def keep(item: FeedItem) -> None:
            self.items.append(item)
            await sink(item)

        await self.feed.run(keep)

    def states(self) -> list[str]:
        return [item.state for item in self.items if isinstance(item, FeedStatus)]

    def behind(self) -> list[FeedStatus]:
        return [item for item in self.items if isinstance(item, FeedStatus) and item.state == "behind"]


def state(app: ProxyTui) -> str | None:
    return app.feed_status.state if app.feed_status else None


def done(app: ProxyTui, name: str) -> bool:
    return any(
        e.summary.name == name and e.summary.status is ChainStatus.OK for e in app.model.chains.values()
    )


def bar(app: ProxyTui) -> str:
    return status_text(app.model, app.feed_status, ViewFlags()).plain


async def test_a_view_whose_events_fell_behind_the_proxys_clock_says_so_and_reads_a_fresh_history(
    legacy_server: PeerServer,
) -> None:
    async with proxy_with_admin(legacy_server.url) as proxy:
        assert proxy.admin_url is not None
        clock = ShiftedClock()
        feed = Recorded(AttachFeed(proxy.admin_url, behind_after=5.0, clock=clock))
        app = ProxyTui(feed, batch_delay=0.01)
        async with app.run_test(size=(160, 30)):
            await wait_for(lambda: state(app) == "live", what="the attached feed to go live")
            await run_scenario(proxy.endpoint(), "legacy", "echo")
            await wait_for(lambda: done(app, "echo"), what="the echo chain")
            assert feed.behind() == []

            clock.ahead = 60.0  # what the view reads from now on is a minute old by the proxy's clock
            await run_scenario(proxy.endpoint(), "legacy", "add")
            await wait_for(lambda: bool(feed.behind()), what="the view to say it is behind")
            await wait_for(lambda: done(app, "add"), what="the fresh history to show the add chain")
            await wait_for(lambda: state(app) == "live", what="the view to be live again")

            (behind,) = feed.behind()
            assert behind.detail.startswith("60s behind the proxy")
            shown = status_text(app.model, behind, ViewFlags()).plain
            assert shown.startswith("◌ behind 60s behind the proxy: reading its newest chains")
            # Connected again at once, as the same run: no backoff, no "proxy gone".
            assert feed.states()[-3:] == ["live", "behind", "live"]
            assert "reconnecting" not in feed.states()
            assert done(app, "echo")
            names = [e.summary.name for e in app.model.chains.values()]
            assert names.count("add") == 1  # read live, then again in the history: one row


async def caught_up(proxy: Proxy, app: ProxyTui, marker: str) -> None:
    """Wait until the proxy has written every event for the view, and the view has read them all.

    The feed keeps the bus's order, so once the view holds a session the test publishes after the
    proxy's queue for it is empty, it has read everything before it too. Every chain has ended first
    (a scenario's GET stream closes after its calls): no more of its events follow the marker.
    """
    await wait_for(
        lambda: all(chain.summary.ended is not None for chain in proxy.chains()),
        what="every chain of the scenario to end",
    )

    def written_out() -> bool:
        subs = [sub for sub in proxy.bus.subscribers if sub.name == "admin-feed"]
        return len(subs) == 1 and len(subs[0]) == 0

    await wait_for(written_out, what="the proxy to write the view's queue out")
    proxy.bus.publish(SessionChanged(ts=time.time(), session=marker, state="opened"))
    await wait_for(lambda: marker in app.model.sessions, what="the view to read up to the marker")


@dataclass
class Watched:
    """A proxy and the TUI attached to it, with the two clocks the test moves ahead."""

    proxy: Proxy
    feed: Recorded
    app: ProxyTui
    view_clock: ShiftedClock
    proxy_clock: ShiftedClock


@asynccontextmanager
async def watching_after_echo(upstream: str, **overrides: Any) -> AsyncIterator[Watched]:
    """A proxy with a TUI attached, live and caught up once a real client's echo call has ended."""
    async with proxy_with_admin(upstream, **overrides) as proxy:
        assert proxy.admin is not None
        assert proxy.admin_url is not None
        view_clock, proxy_clock = ShiftedClock(), ShiftedClock()
        proxy.admin.feed.clock = proxy_clock
        feed = Recorded(AttachFeed(proxy.admin_url, behind_after=5.0, clock=view_clock))
        app = ProxyTui(feed, batch_delay=0.01)
        async with app.run_test(size=(160, 30)):
            await wait_for(lambda: state(app) == "live", what="the attached feed to go live")
            await run_scenario(proxy.endpoint(), "legacy", "echo")
            await wait_for(lambda: done(app, "echo"), what="the echo chain")
            await caught_up(proxy, app, "marker")
            yield Watched(proxy, feed, app, view_clock, proxy_clock)


async def test_a_view_the_proxy_dropped_events_for_is_told_first_and_reads_a_fresh_history(
    legacy_server: PeerServer,
) -> None:
    async with watching_after_echo(legacy_server.url, bus_queue_size=5) as watched:
        proxy, feed, app = watched.proxy, watched.feed, watched.app
        view_clock, proxy_clock = watched.view_clock, watched.proxy_clock
        lagged_before = app.model.lagged_total  # the scenario may have overflowed a queue of 5

        # A minute on by both clocks: the view is past its grace and what it reads is not late.
        view_clock.ahead = proxy_clock.ahead = 60.0
        for n in range(50):  # one synchronous burst into an empty queue of 5: 45 dropped
            proxy.bus.publish(SessionChanged(ts=time.time(), session=f"s{n}", state="opened"))
        await wait_for(lambda: bool(feed.behind()), what="the view to say it is behind")
        await wait_for(lambda: state(app) == "live", what="the view to be live again")

        (behind,) = feed.behind()
        assert behind.detail == "the proxy dropped 45 events for this view: reading its newest chains"
        assert app.model.lagged_total == lagged_before + 45
        assert f"lagged {lagged_before + 45}" in bar(app)
        assert done(app, "echo")


async def test_a_chain_ended_long_after_its_traffic_leaves_a_view_that_keeps_up_live(
    legacy_server: PeerServer,
) -> None:
    """The proxy ends some chains as of a time long past (a stream never resumed ends as of its cut,
    a call never retried when its wait ran out): that end is news, not a backlog the view trails."""
    async with watching_after_echo(legacy_server.url) as watched:
        proxy, feed, app = watched.proxy, watched.feed, watched.app
        view_clock, proxy_clock = watched.view_clock, watched.proxy_clock
        view_clock.ahead = proxy_clock.ahead = 60.0  # past the view's grace; the view keeps up
        (echo,) = [c.summary for c in proxy.chains() if c.summary.name == "echo"]
        late_end = echo.model_copy(update={"ended": time.time() - 120, "notes": ["ended as of its cut"]})
        proxy.bus.publish(ChainChanged(chain=late_end))
        await wait_for(
            lambda: any(e.summary.notes == ["ended as of its cut"] for e in app.model.chains.values()),
            what="the view to read the late end",
        )
        await caught_up(proxy, app, "after")

        assert feed.behind() == []
        assert feed.states()[-1] == "live"
        assert "behind" not in bar(app)


async def park(http: aiohttp.ClientSession, url: str, ident: int) -> None:
    """One 2026-07-28 call the bridge parks, left unanswered (its client never retries)."""
    status, answer = await modern_call(http, url, "tools/call", ASK, ident=ident)
    assert status == 200, answer
    assert answer["result"]["resultType"] == "input_required", answer


async def test_a_view_attached_after_calls_parked_counts_them_and_a_capture_that_ends_counts_none(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    async with proxy_with_admin(legacy_server.url, capture=capture) as proxy, aiohttp.ClientSession() as http:
        assert proxy.admin_url is not None
        other = proxy.bus.subscribe("another view")  # watched: chains are built as they happen
        await park(http, proxy.endpoint(), 1)
        await park(http, proxy.endpoint(), 2)
        await wait_for(lambda: len(other) > 0 and proxy.observations.pending == 0, what="the calls built")
        app = ProxyTui(AttachFeed(proxy.admin_url, history=0), batch_delay=0.01)
        async with app.run_test(size=(160, 30)):
            await wait_for(lambda: state(app) == "live", what="the attached feed to go live")
            await wait_for(lambda: app.model.parked == 2, what="the two parked calls to be counted")
            assert "parked 2" in bar(app)
        part = tmp_path / "capture.jsonl.1"
        capture.rename(part)  # as logrotate does: the part ends with both calls still parked
        proxy.reopen_files()
        await wait_for(capture.exists, what="the proxy to start a new capture file")

    app = ProxyTui(CaptureFeed(part), batch_delay=0.01)
    async with app.run_test(size=(160, 30)):
        await wait_for(lambda: state(app) == "ended", what="the capture to be read")
        assert app.model.parked == 0  # the capture ended with them parked: none can resume here
        assert "parked" not in bar(app)
        statuses = {e.summary.name: e.summary.status for e in app.model.chains.values()}
        assert statuses["ask_name"] is ChainStatus.INCOMPLETE


async def next_message(response: aiohttp.ClientResponse, decoder: SseDecoder) -> dict[str, Any]:
    """The next JSON-RPC message on a call's SSE stream (its priming events skipped)."""
    while True:
        for item in decoder.feed(await response.content.readany()):
            if isinstance(item, SseEvent) and item.data:
                message: dict[str, Any] = orjson.loads(item.data)
                return message


async def test_a_chain_whose_opening_the_view_missed_is_one_row_once_its_headline_comes(
    legacy_server: PeerServer,
) -> None:
    async with proxy_with_admin(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        assert proxy.admin_url is not None
        proxy.bus.subscribe("another view")  # watched: chains are built as they happen
        url = proxy.endpoint()
        hello = initialize()
        hello["params"]["capabilities"] = {"elicitation": {}}
        async with http.post(url, json=hello, headers=HEADERS) as opened:
            session = opened.headers["Mcp-Session-Id"]
            await opened.read()
        headers = session_headers(session)
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(url, json=ready, headers=headers) as answered:
            await answered.read()
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ASK}
        async with http.post(url, json=call, headers=headers) as stream:
            decoder = SseDecoder()
            question = await next_message(stream, decoder)
            assert question["method"] == "elicitation/create", question
            # The call waits on its question: a view attached now, with no history, never reads its
            # `chain_opened`, and first hears of it by the answer.
            app = ProxyTui(AttachFeed(proxy.admin_url, history=0), batch_delay=0.01)
            async with app.run_test(size=(160, 30)):
                await wait_for(lambda: state(app) == "live", what="the attached feed to go live")
                reply = {
                    "jsonrpc": "2.0",
                    "id": question["id"],
                    "result": {"action": "accept", "content": {"name": "octocat"}},
                }
                async with http.post(url, json=reply, headers=headers) as sent:
                    await sent.read()
                result = await next_message(stream, decoder)
                assert result["id"] == 2, result
                await wait_for(lambda: done(app, "ask_name"), what="the call's headline in the view")

                rows = [e for e in app.model.chains.values() if e.summary.method == "tools/call"]
                assert [(e.summary.name, e.summary.status) for e in rows] == [("ask_name", ChainStatus.OK)]
                assert app.main.table.row_count == 1
                (entry,) = rows
                assert entry.messages  # what the view read of it is kept, under the chain's own start
                assert entry.summary.started < entry.messages[0].ts
