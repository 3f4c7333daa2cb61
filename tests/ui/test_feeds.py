"""Feeds and the batcher: SSE parsing under any chunking, coalescing, back-pressure, files, attach."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from proxy.flows.events import FlowEvent, Lagged, event_to_json
from proxy.record.capture import CaptureWriter
from proxy.record.run_ends import CAPTURE_ENDS
from tests.flows.test_sink import SCENARIOS
from tests.record.captures import damage_opening, record_play
from tests.ui.helpers import TOUR, ScriptedFeed, info, opened, wait_for
from ui.feeds import AttachFeed, Batcher, CaptureFeed, FeedItem, FeedStatus, SseReader

STREAM = "data: one\r\n\r\n: comment\nid: 7\ndata: two\ndata:  lines\n\nevent: x\rdata:three\r\r"


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM)), max_size=12))
def test_sse_reader_yields_the_same_events_for_any_chunking(cuts: list[int]) -> None:
    points = sorted({0, *cuts, len(STREAM)})
    reader = SseReader()

    events = [data for a, b in itertools.pairwise(points) for data in reader.feed(STREAM[a:b])]

    assert events == ["one", "two\n lines", "three"]


class Collector:
    """Records what a batcher hands over, acknowledging only when told to."""

    def __init__(self) -> None:
        self.batches: list[list[FlowEvent]] = []
        self.statuses: list[FeedStatus] = []

    def events(self, batch: list[FlowEvent]) -> None:
        self.batches.append(batch)

    def status(self, status: FeedStatus) -> None:
        self.statuses.append(status)


class ListFeed:
    """Pushes a fixed list of items, then ends."""

    description = "list"

    def __init__(self, items: list[FeedItem]) -> None:
        self.items = items

    async def run(self, sink: object) -> None:
        for item in self.items:
            await sink(item)  # type: ignore[operator]


async def test_a_burst_is_coalesced_into_few_batches_of_bounded_size() -> None:
    got = Collector()
    batcher = Batcher(got.events, got.status, max_items=100, max_delay=0.05, max_inflight=1000)
    burst: list[FeedItem] = [Lagged(dropped=n) for n in range(1, 251)]

    await batcher.run(ListFeed(burst))

    assert [len(b) for b in got.batches] == [100, 100, 50]
    assert [e for b in got.batches for e in b] == burst


async def test_a_lone_event_is_handed_over_after_the_delay() -> None:
    got = Collector()
    batcher = Batcher(got.events, got.status, max_delay=0.02)
    feed = ScriptedFeed(opened("c1"))
    async with asyncio.TaskGroup() as group:
        task = group.create_task(batcher.run(feed))
        await wait_for(lambda: len(got.batches) == 1, what="the lone event's batch")
        task.cancel()

    assert got.batches == [[opened("c1")]]


async def test_a_status_change_first_hands_over_what_came_before_it() -> None:
    order: list[str] = []
    batcher = Batcher(
        lambda b: order.append(f"events:{len(b)}"), lambda s: order.append(f"status:{s.state}"), max_delay=10
    )

    await batcher.run(ListFeed([info(), opened("c1"), FeedStatus("ended")]))

    assert order == ["events:2", "status:ended"]


async def test_the_batcher_waits_while_the_app_has_batches_unapplied() -> None:
    got = Collector()
    batcher = Batcher(got.events, got.status, max_items=1, max_delay=0.01, max_inflight=2)
    feed = ScriptedFeed(*(Lagged(dropped=n) for n in range(1, 6)))
    async with asyncio.TaskGroup() as group:
        task = group.create_task(batcher.run(feed))
        await wait_for(lambda: len(got.batches) == 2, what="two batches")
        await asyncio.sleep(0.05)  # room for a wrongly eager third batch to show up
        assert len(got.batches) == 2
        batcher.applied()
        await wait_for(lambda: len(got.batches) == 3, what="the third batch after an ack")
        task.cancel()


async def collect(feed: object, *, until: int | None = None, seconds: float = 5.0) -> list[FeedItem]:
    items: list[FeedItem] = []

    async def sink(item: FeedItem) -> None:
        items.append(item)

    async with asyncio.TaskGroup() as group:
        task = group.create_task(feed.run(sink))  # type: ignore[attr-defined]
        if until is None:
            await asyncio.wait_for(asyncio.shield(task), seconds)
        else:
            await wait_for(lambda: len(items) >= until, what=f"{until} feed items", seconds=seconds)
            task.cancel()
    return items


async def test_a_capture_file_is_read_to_its_end() -> None:
    items = await collect(CaptureFeed(TOUR, chunk=10))

    assert items[0] == FeedStatus("connecting", f"reading {TOUR}")
    assert items[-1] == FeedStatus("ended", f"133 events from {TOUR.name}", unfinished=CAPTURE_ENDS)
    assert len(items) == 135


async def test_a_file_that_is_no_capture_fails_the_feed_with_the_reason(tmp_path: Path) -> None:
    bad = tmp_path / "notes.jsonl"
    bad.write_text("hello\n")

    items = await collect(CaptureFeed(bad))

    status = items[-1]
    assert isinstance(status, FeedStatus)
    assert status.state == "failed"
    assert "not a mcp-debug-proxy-capture file" in status.detail


async def test_a_corrupt_line_is_skipped_the_rest_shown_and_the_count_reported(tmp_path: Path) -> None:
    lines = TOUR.read_bytes().splitlines(keepends=True)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"".join([*lines[:5], b'{"type":"message","chain_id":\n', b"\x00junk\n", *lines[5:]]))

    items = await collect(CaptureFeed(damaged, chunk=10))

    status = items[-1]
    assert isinstance(status, FeedStatus)
    assert status.state == "ended"
    expected = f"133 events from {damaged.name}; 2 corrupt lines skipped (first: line 6, "
    assert status.detail.startswith(expected)
    assert status.warning.startswith("2 corrupt lines skipped (first: line 6, ")
    assert len(items) == 135


async def test_a_last_line_a_running_proxy_is_still_writing_is_not_reported_as_cut_short(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live.jsonl"
    live.write_bytes(TOUR.read_bytes())
    with CaptureWriter(live):  # the proxy's own writer holds the file's lock, as while it runs
        with live.open("ab") as f:
            f.write(b'{"type":"obs","kind":"message","t":2.0,"exch')  # the rest not flushed yet
        items = await collect(CaptureFeed(live, chunk=10))

    status = items[-1]
    assert isinstance(status, FeedStatus)
    assert (status.state, status.detail, status.warning) == ("ended", f"133 events from {live.name}", "")


@pytest.mark.parametrize("tail_bytes", [1 << 20, 256], ids=["read-whole", "indexed"])
async def test_lines_lost_with_an_exchanges_skipped_opening_line_are_counted_in_the_end_status(
    tmp_path: Path, tail_bytes: int
) -> None:
    """Read whole or indexed (a big capture), the status says what went with the damaged line."""
    damaged = tmp_path / "damaged.jsonl"
    record_play(_call_then_add, damaged)
    at, later = damage_opening(damaged, "x9", lambda line: line.replace(b'"http_method":"POST",', b""))

    status = (await collect(CaptureFeed(damaged, chunk=10, tail_bytes=tail_bytes), seconds=30))[-1]

    assert isinstance(status, FeedStatus)
    assert status.state == "ended"
    assert later >= 3
    assert f"; {later} later lines left out (their exchange's opening line was skipped)" in status.detail
    assert status.warning.startswith(f"1 corrupt line skipped (first: line {at}, ")


def _call_then_add(obs: Any, clock: Any) -> list[Any]:
    """A call whose server asks the client its name, then a plain call on exchange x9."""
    return [*SCENARIOS["nested-elicitation"](obs, clock), *SCENARIOS["json-call"](obs, clock, "x9", 9)]


@pytest.mark.parametrize("tail_bytes", [1 << 20, 256], ids=["read-whole", "indexed"])
async def test_a_newer_minor_versions_lines_are_skipped_counted_and_named_and_a_newer_major_is_refused(
    tmp_path: Path, tail_bytes: int
) -> None:
    lines = TOUR.read_bytes().splitlines(keepends=True)
    newer = tmp_path / "newer.jsonl"
    unknown = b'{"type":"obs","kind":"tls_handshake","t":1.0,"exchange":"x1"}\n'
    newer.write_bytes(b"".join([lines[0].replace(b'"1.0"', b'"1.99"'), unknown, *lines[1:]]))
    major = tmp_path / "major.jsonl"
    major.write_bytes(b"".join([lines[0].replace(b'"1.0"', b'"2.0"'), *lines[1:]]))

    (*_, read) = await collect(CaptureFeed(newer, chunk=10, tail_bytes=tail_bytes), seconds=30)
    (*_, refused) = await collect(CaptureFeed(major, chunk=10, tail_bytes=tail_bytes), seconds=30)

    skipped = "1 line of a newer capture version skipped (first: line 2, kind 'tls_handshake')"
    assert isinstance(read, FeedStatus)
    assert (read.state, read.warning, read.unfinished) == ("ended", skipped, CAPTURE_ENDS)
    assert read.detail.endswith(f" from {newer.name}; {skipped}")
    assert isinstance(refused, FeedStatus)
    assert refused.state == "failed"
    assert refused.detail.endswith(
        "capture format 2.0 is newer than this mcp-proxy reads (1.x); upgrade mcp-proxy"
    )


class FakeAdmin:
    """An admin API that serves a fixed feed on /api/feed and records what each client sent."""

    def __init__(self, token: str | None = None, status: int = 200) -> None:
        self.token = token
        self.status = status
        self.requests: list[web.Request] = []
        self.events: list[FlowEvent] = [info(), opened("c1")]

    async def feed(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request)
        if self.status != 200:
            return web.Response(status=self.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in self.events:
            await response.write(b"data: " + event_to_json(event) + b"\n\n")
        await response.write(b'data: {"type": "from_the_future"}\n\n')
        return response  # closing the stream: the client must reconnect


@asynccontextmanager
async def serve(admin: FakeAdmin, port: int = 0) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/api/feed", admin.feed)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_attach_sends_the_token_and_history_and_reconnects_when_the_stream_ends() -> None:
    admin = FakeAdmin()
    async with serve(admin) as port:
        feed = AttachFeed(f"http://127.0.0.1:{port}/", "t0k3n", history=50, backoff=(0.01,))
        items = await collect(feed, until=9)

    events = [i for i in items if not isinstance(i, FeedStatus)]
    states = [i.state for i in items if isinstance(i, FeedStatus)]
    assert events[:2] == admin.events
    assert events[2:4] == admin.events
    assert states[:4] == ["connecting", "live", "reconnecting", "connecting"]
    first = admin.requests[0]
    assert first.headers["Authorization"] == "Bearer t0k3n"
    assert first.query["history"] == "50"


async def test_attach_keeps_retrying_while_the_proxy_is_down_then_comes_back() -> None:
    admin = FakeAdmin()
    async with serve(admin) as port:
        pass  # learn a free port, then leave it closed: the proxy is "down"
    items: list[FeedItem] = []

    async def sink(item: FeedItem) -> None:
        items.append(item)

    feed = AttachFeed(f"http://127.0.0.1:{port}", backoff=(0.01, 0.02))
    async with asyncio.TaskGroup() as group:
        task = group.create_task(feed.run(sink))
        await wait_for(
            lambda: sum(isinstance(i, FeedStatus) and i.state == "reconnecting" for i in items) >= 2,
            what="two failed attempts",
        )
        down = [i for i in items if isinstance(i, FeedStatus) and i.state == "reconnecting"]
        assert down[0].detail == "cannot connect"
        assert down[1].retry_in == 0.02
        async with serve(admin, port):
            await wait_for(lambda: opened("c1") in items, what="events after the restart")
        task.cancel()


@pytest.mark.parametrize(("status", "reason"), [(401, "refused this token"), (404, "no live feed")])
async def test_attach_gives_up_when_retrying_cannot_help(status: int, reason: str) -> None:
    async with serve(FakeAdmin(status=status)) as port:
        items = await collect(AttachFeed(f"http://127.0.0.1:{port}", "wrong"))

    last = items[-1]
    assert isinstance(last, FeedStatus)
    assert last.state == "failed"
    assert reason in last.detail


async def test_attach_without_a_token_to_a_proxy_that_wants_one_says_how_to_give_it() -> None:
    async with serve(FakeAdmin(status=401)) as port:
        items = await collect(AttachFeed(f"http://127.0.0.1:{port}"))

    last = items[-1]
    assert isinstance(last, FeedStatus)
    assert last.state == "failed"
    assert "wants a token" in last.detail
    assert "--token" in last.detail
    assert "MCP_PROXY_ADMIN_TOKEN" in last.detail
