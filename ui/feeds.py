"""Where the TUI's flow events come from, and how bursts of them are coalesced.

Three sources, one shape (`Feed.run(sink)` awaits `sink` once per event or status change):

- `BusFeed`: an in-process bus subscription (`mcp-proxy --upstream URL --tui`, the demo).
- `AttachFeed`: a remote proxy's admin feed, `GET /api/feed` as server-sent events whose data is one
  FlowEvent JSON each (`proxy_info`, then history, then live events and `lagged` markers);
  reconnects with bounded backoff when the proxy restarts or the network drops, its statuses marked
  `again` from the first drop on (what answers next may be another run of the proxy). A view that
  falls behind the proxy (a `lagged` marker, or live events read more than `BEHIND_AFTER` seconds
  after the proxy wrote them, by the proxy's clock) says so and connects again at once: a fresh
  history shows the proxy as it is now, and what waited for this view in the proxy's queue and in
  the sockets is let go unread.
- `CaptureFeed`: a JSONL capture file, read off the event loop so a large file never freezes the
  screen. A small file is read whole; a big one shows its newest part at once (`read_tail`) while an
  index pass in a process of its own (`proxy.record.index`) builds every chain, then hands the app
  every headline at once (`IndexReady`): the list and its filter reach each chain of the file, and a
  chain's messages are read back from the index's spill file only while it is shown.

`Batcher` sits between a feed and the app: it gathers events for up to `max_delay` seconds or
`max_items` events and hands them over as one batch, and it waits while the app still has
`max_inflight` batches unapplied. That wait is the back-pressure: a bus subscription then fills and
the bus drops events for this observer only, which the view shows as "lagged N"; traffic never slows.

This module may import only `proxy.flows`, `proxy.record` and `proxy.wire` (import-linter contract)
and never aiohttp: the attach client uses httpx (`ui.admin_client`: a loopback admin API is never
reached through an environment proxy) and a small SSE reader of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import httpx
from pydantic import ValidationError

from proxy.flows.bus import Subscription
from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ContinuationChanged,
    FlowEvent,
    Lagged,
    MessageRecorded,
    ProxyInfo,
    event_from_json,
)
from proxy.record.capture import CaptureError, CaptureFormatError, CaptureReader
from proxy.record.index import read_tail
from proxy.record.parts import capture_end
from ui.admin_client import admin_client
from ui.capture_index import IndexFailed, IndexReady, index_capture

PROXY_STOPPED = "the proxy stopped before this call ended"
"""The note on a call still running when the in-process proxy stopped."""

FeedState = Literal["connecting", "indexing", "live", "behind", "reconnecting", "ended", "failed"]

BEHIND_AFTER = 5.0
"""Seconds an attached view's live events may trail the proxy's clock before it stops reading the
backlog and takes a fresh history; also the least time it stays live between two such catch-ups (a
view that cannot keep up at all then shows fresh chains every few seconds, never old ones as live)."""


@dataclass(frozen=True, slots=True)
class FeedStatus:
    """Where a feed stands, for the status bar: live, reconnecting (in how long, and why), ended."""

    state: FeedState
    detail: str = ""
    retry_in: float | None = None
    warning: str = ""
    """What reading left out (corrupt lines skipped, a last line cut short): shown however it ended."""
    address: str = ""
    """The admin address an attached feed reads ('' for the other feeds), named while it reconnects."""
    unfinished: str = ""
    """Set on a feed's end for good: why a chain it left unfinished never ends (shown as its note,
    the chain as `incomplete`)."""
    again: bool = False
    """The feed was live and lost its proxy: this status is part of finding it again, and what comes
    back on that address may be another run of the proxy (or another proxy)."""


FeedItem = FlowEvent | FeedStatus | IndexReady
Sink = Callable[[FeedItem], Awaitable[None]]


class Feed(Protocol):
    """Anything that pushes flow events (and its own status) into a sink until it ends."""

    description: str

    async def run(self, sink: Sink) -> None:
        """Push items until the source ends (returns) or the caller cancels."""
        ...


def prefix_event(event: FlowEvent, prefix: str) -> FlowEvent:
    """The same event with its chain id prefixed, so several proxies' chains never collide."""
    if isinstance(event, ChainOpened | ChainChanged):
        chain = event.chain.model_copy(update={"id": prefix + event.chain.id})
        return event.model_copy(update={"chain": chain})
    if isinstance(event, MessageRecorded | ContinuationChanged):
        return event.model_copy(update={"chain_id": prefix + event.chain_id})
    return event


class BusFeed:
    """Events from an in-process bus subscription (the proxy runs in this process)."""

    def __init__(self, subscription: Subscription, description: str = "in-process", prefix: str = "") -> None:
        self.subscription = subscription
        self.description = description
        self.prefix = prefix

    async def run(self, sink: Sink) -> None:
        """Relay every event until the subscription is closed (the proxy stopped)."""
        await sink(FeedStatus("live", self.description))
        async for event in self.subscription:
            await sink(prefix_event(event, self.prefix) if self.prefix else event)
        await sink(FeedStatus("ended", "the proxy stopped", unfinished=PROXY_STOPPED))


class MergedFeed:
    """Several feeds at once (the demo's two proxies), each item relayed as it comes."""

    def __init__(self, feeds: Sequence[Feed]) -> None:
        self.feeds = list(feeds)
        self.description = " + ".join(feed.description for feed in self.feeds)

    async def run(self, sink: Sink) -> None:
        """Run every feed concurrently; returns when all have ended."""
        async with asyncio.TaskGroup() as group:
            for index, feed in enumerate(self.feeds):
                group.create_task(feed.run(sink), name=f"feed-{index}")


@dataclass(frozen=True, slots=True)
class SseComment:
    """A comment line of the stream (`: live`, `: keepalive`), its text without the colon and space."""

    text: str


class SseReader:
    """The data of server-sent events from text chunks, per the WHATWG line rules.

    Lines end in CR, LF or CRLF (a CRLF may be split across chunks); `data:` lines join with LF;
    other fields are ignored; an event is dispatched on a blank line. Comments are ignored by `feed`
    and kept in order among the events by `items` (the admin feed marks the end of its history so).
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._data: list[str] = []
        self._skip_lf = False

    def feed(self, chunk: str) -> list[str]:
        """Consume a chunk; return the data of each event it completed."""
        return [item for item in self.items(chunk) if isinstance(item, str)]

    def items(self, chunk: str) -> list[str | SseComment]:
        """Consume a chunk; return the data of each event it completed and each comment, in order."""
        if self._skip_lf and chunk.startswith("\n"):
            chunk = chunk[1:]
        self._skip_lf = chunk.endswith("\r")
        text = self._buffer + chunk
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._buffer = lines.pop()
        items: list[str | SseComment] = []
        for line in lines:
            if not line:
                if self._data:
                    items.append("\n".join(self._data))
                    self._data = []
                continue
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)
            elif not name:
                items.append(SseComment(value[1:] if value.startswith(" ") else value))
        return items


class AttachFeed:
    """The live feed of a proxy's admin API, reconnecting with bounded backoff until cancelled."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        history: int = 500,
        backoff: Sequence[float] = (0.5, 1.0, 2.0, 4.0, 5.0),
        transport: httpx.AsyncBaseTransport | None = None,
        behind_after: float = BEHIND_AFTER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base = url.rstrip("/")
        self.token = token
        self.history = history
        self.backoff = tuple(backoff)
        self.behind_after = behind_after
        self.description = self.base
        self._transport = transport
        self._clock = clock
        self._was_live = False
        self._behind = ""
        """Why the view connects again at once (it fell behind); '' on any other connection."""

    @property
    def feed_url(self) -> str:
        """The SSE endpoint this feed reads."""
        return f"{self.base}/api/feed"

    async def run(self, sink: Sink) -> None:
        """Connect, relay, and on any drop wait (0.5 s, 1 s, ... capped) and connect again."""
        headers = {"Accept": "text/event-stream"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        timeout = httpx.Timeout(10.0, read=None)
        failures = 0
        async with admin_client(self.base, timeout=timeout, transport=self._transport) as client:
            while True:
                if self._behind:
                    await sink(FeedStatus("behind", self._behind, address=self.base))
                else:
                    await sink(self._status("connecting", self.base))
                try:
                    reason = await self._stream(client, headers, sink)
                except (httpx.HTTPError, OSError) as exc:
                    reason = _describe(exc)
                except _Refused as exc:
                    await sink(self._status("failed", str(exc)))
                    return
                if isinstance(reason, _Behind):
                    self._behind = reason.why
                    failures = 0
                    continue  # at once: the proxy is there, only this view is late
                self._behind = ""
                if reason == "":
                    failures = 0  # it was live: the backoff starts over
                delay = self.backoff[min(failures, len(self.backoff) - 1)]
                failures += 1
                reason = reason or "the proxy closed the feed"
                await sink(self._status("reconnecting", reason, retry_in=delay))
                await asyncio.sleep(delay)

    def _status(self, state: FeedState, detail: str, retry_in: float | None = None) -> FeedStatus:
        # A catch-up's connection is no reconnection: the proxy never went away.
        again = self._was_live and not self._behind
        return FeedStatus(state, detail, retry_in, address=self.base, again=again)

    async def _stream(self, client: httpx.AsyncClient, headers: dict[str, str], sink: Sink) -> str | _Behind:
        """Read one connection to its end; '' when it was live and closed, else why it failed, or
        `_Behind` when the view fell behind the proxy and should read a fresh history.

        It says "live" after the first event (the proxy's `proxy_info`), so whoever shows the status
        already knows which proxy run answered when it says so.
        """
        params = {"history": str(self.history)}
        async with client.stream("GET", self.feed_url, headers=headers, params=params) as response:
            if response.status_code in (401, 403):
                raise _Refused(refusal_text(response.status_code, sent_token=bool(self.token)))
            if response.status_code == 404:
                raise _Refused(f"no live feed at {self.feed_url} (HTTP 404): is it the admin address?")
            if response.status_code != 200:
                return f"HTTP {response.status_code}"
            live = False
            lag = LagWatch(self.behind_after, self._clock)
            reader = SseReader()
            async for chunk in response.aiter_text():
                for item in reader.items(chunk):
                    if isinstance(item, SseComment):
                        if item.text == "live":
                            lag.history_read()
                        else:
                            lag.stamped(item.text)
                        continue
                    try:
                        event = event_from_json(item)
                    except ValidationError:
                        continue  # an event type from a newer proxy, or garbage: skip, keep reading
                    await sink(event)
                    if not live:
                        live = True
                        await sink(self._status("live", self.base))
                        self._was_live = True
                        self._behind = ""
                    why = lag.behind(event)
                    if why:
                        return _Behind(why)
        return "" if live else "the proxy closed the feed before its first event"


@dataclass(frozen=True, slots=True)
class _Behind:
    """The attached view fell behind the proxy (why, for the status bar): it reads a fresh history."""

    why: str


class LagWatch:
    """Tells, event by event, whether an attached view has fallen behind the proxy it reads.

    How late the view reads is judged by when the proxy wrote what it reads (the `: sent` stamp that
    heads each write of live events), never by the times inside the events: a chain can end, or a
    message be filed, long after what it tells happened (a stream ended as of its cut, a call its
    client never retried), and such an event is news, not a backlog. A proxy that stamps nothing is
    judged by its `lagged` markers alone. The proxy's clock is learned from its `proxy_info` (written
    as the connection opens), so a host whose clock differs is not taken for a late one. Only live
    events count (the history is old by nature), and only once the view has been live `after`
    seconds: a view that needs longer than that to read a history still shows each fresh one for a
    while before it catches up again.
    """

    def __init__(self, after: float, clock: Callable[[], float]) -> None:
        self.after = after
        self._clock = clock
        self._offset: float | None = None
        """This host's clock minus the proxy's (None until its `proxy_info`)."""
        self._live_since: float | None = None
        self._sent: float | None = None
        """When the proxy wrote the events read now, by its clock (None until a `: sent` stamp)."""

    def history_read(self) -> None:
        """The history ended (`: live`): what follows happens now."""
        self._live_since = self._clock()

    def stamped(self, comment: str) -> None:
        """Read a comment of the feed: a `sent <epoch seconds>` stamp times the events after it."""
        name, _, value = comment.partition(" ")
        if name != "sent":
            return
        try:
            self._sent = float(value)
        except ValueError:
            return

    def behind(self, event: FlowEvent) -> str:
        """Why the view is behind after reading `event` ('' while it keeps up)."""
        now = self._clock()
        if isinstance(event, ProxyInfo) and self._offset is None:
            self._offset = now - event.ts
        if self._live_since is None or now - self._live_since < self.after:
            return ""
        if isinstance(event, Lagged):
            return f"the proxy dropped {event.dropped} events for this view: reading its newest chains"
        if self._sent is None or self._offset is None:
            return ""
        late = now - self._offset - self._sent
        if late <= self.after:
            return ""
        return f"{late:.0f}s behind the proxy: reading its newest chains"


class _Refused(Exception):
    """The admin API answered in a way retrying cannot fix (wrong token, wrong address)."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return "connection lost"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return str(exc) or type(exc).__name__


def _take(events: Iterator[FlowEvent], count: int) -> list[FlowEvent]:
    return list(itertools.islice(events, count))


TAIL_BYTES = 1024 * 1024
"""A capture bigger than this opens on its newest part while the rest is indexed; a smaller one is read."""


class CaptureFeed:
    """Every chain of a JSONL capture: a small one read whole, a big one newest part first, then indexed."""

    def __init__(self, path: Path, chunk: int = 500, *, tail_bytes: int = TAIL_BYTES) -> None:
        self.path = Path(path)
        self.chunk = chunk
        self.tail_bytes = tail_bytes
        self.description = str(self.path)

    async def run(self, sink: Sink) -> None:
        """Relay the file's chains; a file that is no capture fails the feed naming why.

        A corrupt line is skipped: the rest is shown, and the end status counts the skipped lines and
        names the first of them, so one damaged line never blanks a capture.
        """
        await sink(FeedStatus("connecting", f"reading {self.path}"))
        try:
            reader = await asyncio.to_thread(CaptureReader, self.path)
        except (CaptureError, CaptureFormatError) as exc:
            await sink(FeedStatus("failed", str(exc)))
            return
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            reader.close()
            await sink(FeedStatus("failed", f"cannot read {self.path}: {exc.strerror or exc}"))
            return
        if size <= self.tail_bytes:
            await self._whole(reader, sink)
            return
        reader.close()
        await self._indexed(sink)

    async def _whole(self, reader: CaptureReader, sink: Sink) -> None:
        count = 0
        try:
            events = iter(reader)
            while chunk := await asyncio.to_thread(_take, events, self.chunk):
                for event in chunk:
                    await sink(event)
                count += len(chunk)
        except CaptureFormatError as exc:
            await sink(FeedStatus("failed", f"{exc} (after {count} events)"))
            return
        finally:
            reader.close()
        replayer = reader.replayer
        if replayer is not None:
            replayer.finish()
        left_out = replayer.lost_lines if replayer is not None else 0
        unplaced = replayer.unplaced.lines if replayer is not None else 0
        skipped = _skipped(
            reader.corrupt_lines,
            reader.corrupt,
            (reader.skipped_unknown, reader.unknown),
            reader.truncated,
            left_out,
            unplaced,
        ) + _not_recorded(reader.gap_lines, [gap.sentence(f"line {line}") for line, gap in reader.gaps])
        warning = skipped.removeprefix("; ").strip()
        ended = f"{count} events from {self.path.name}{skipped}"
        await sink(FeedStatus("ended", ended, warning=warning, unfinished=await self._end_note()))

    async def _indexed(self, sink: Sink) -> None:
        """The newest part at once, then every chain once the index pass has built them.

        The index pass starts first (it is the long part, in a process of its own); the newest part
        is read meanwhile and shown as soon as it is built.
        """
        name = self.path.name
        shown = False

        async def newest() -> None:
            nonlocal shown
            tail = await asyncio.to_thread(read_tail, self.path, self.tail_bytes)
            await sink(FeedStatus("indexing", f"{name}: newest chains shown; indexing the rest"))
            for event in tail:
                await sink(event)
            shown = True

        async def progress(read: int, total: int) -> None:
            if shown:  # until then the newest part's status stands
                percent = 100 * read // max(total, 1)
                await sink(FeedStatus("indexing", f"{name}: newest chains shown; indexing {percent}%"))

        async def every() -> IndexReady | IndexFailed:
            try:
                return await index_capture([self.path], progress)
            except IndexFailed as exc:  # the newest part is still shown in full
                return exc

        async with asyncio.TaskGroup() as group:
            group.create_task(newest(), name="capture-newest")
            indexing = group.create_task(every(), name="capture-index")
        index = indexing.result()
        if isinstance(index, IndexFailed):
            await sink(FeedStatus("failed", f"{index}; the newest chains stay shown"))
            return
        await sink(index)
        end = index.end
        corrupt = [(line, reason) for _file, line, reason in end.get("corrupt", [])]
        skipped = _skipped(
            end.get("corrupt_lines", 0),
            corrupt,
            (end.get("unknown_lines", 0), [(line, what) for _file, line, what in end.get("unknown", [])]),
            bool(end.get("cut_short")),
            end.get("left_out_lines", 0),
            end.get("unplaced_lines", 0),
        ) + _not_recorded(end.get("gap_lines", 0), end.get("not_recorded", []))
        warning = skipped.removeprefix("; ").strip()
        ended = f"{len(index.chains)} chains from {name}{skipped}"
        await sink(FeedStatus("ended", ended, warning=warning, unfinished=await self._end_note()))

    async def _end_note(self) -> str:
        """The note on a call still open where the file ends, as every reader of a capture notes it
        (`proxy.record.run_ends`); '' while a running proxy still writes the file (it may be running)."""
        end = await asyncio.to_thread(capture_end, self.path)
        return end.note if end is not None else ""


def _skipped(
    corrupt_lines: int,
    corrupt: list[tuple[int, str]],
    unknown: tuple[int, list[tuple[int, str]]],
    cut: bool,
    left_out: int = 0,
    unplaced: int = 0,
) -> str:
    """What reading skipped, for the end status ('' when nothing)."""
    text = " (the last line was cut short)" if cut else ""
    if corrupt_lines:
        line, reason = corrupt[0]
        plural = "s" if corrupt_lines > 1 else ""
        text += f"; {corrupt_lines} corrupt line{plural} skipped (first: line {line}, {reason})"
    if left_out:
        plural = "s" if left_out > 1 else ""
        text += f"; {left_out} later line{plural} left out (their exchange's opening line was skipped)"
    if unplaced:
        plural = "s" if unplaced > 1 else ""
        text += f"; {unplaced} later line{plural} left out (they joined no chain: a line before was skipped)"
    unknown_lines, named = unknown
    if unknown_lines:
        plural = "s" if unknown_lines > 1 else ""
        first = f" (first: line {named[0][0]}, {named[0][1]})" if named else ""
        text += f"; {unknown_lines} line{plural} of a newer capture version skipped{first}"
    return text


def _not_recorded(count: int, sentences: list[str]) -> str:
    """What the capture says it did not record (`capture_gap` lines), for the end status."""
    if not count or not sentences:
        return ""
    more = f" (and {count - 1} more such stretches)" if count > 1 else ""
    return f"; {sentences[0]}{more}"


class Batcher:
    """Coalesces a feed's events into batches and keeps at most `max_inflight` batches unapplied."""

    def __init__(
        self,
        on_events: Callable[[list[FlowEvent]], None],
        on_status: Callable[[FeedStatus], None],
        *,
        on_index: Callable[[IndexReady], None] | None = None,
        max_items: int = 500,
        max_delay: float = 0.05,
        max_inflight: int = 4,
    ) -> None:
        self._on_events = on_events
        self._on_status = on_status
        self._on_index = on_index
        self.max_items = max_items
        self.max_delay = max_delay
        self.max_inflight = max_inflight
        self._pending: list[FlowEvent] = []
        self._inflight = 0
        self._room = asyncio.Event()
        self._room.set()
        self._started = asyncio.Event()
        self.batches = 0

    def applied(self) -> None:
        """The app applied one batch (call from the handler), making room for the next."""
        self._inflight = max(0, self._inflight - 1)
        if self._inflight < self.max_inflight:
            self._room.set()

    async def put(self, item: FeedItem) -> None:
        """The sink a feed pushes into; waits while the app is `max_inflight` batches behind."""
        if isinstance(item, FeedStatus):
            await self.flush()
            self._on_status(item)
            return
        if isinstance(item, IndexReady):
            await self.flush()
            if self._on_index is not None:
                self._on_index(item)
            return
        self._pending.append(item)
        if len(self._pending) >= self.max_items:
            await self.flush()
        else:
            self._started.set()

    async def flush(self) -> None:
        """Hand over what is pending as one batch (after waiting for room)."""
        if not self._pending:
            return
        await self._room.wait()
        if not self._pending:
            return  # the other flusher took it while this one waited
        batch, self._pending = self._pending, []
        self._inflight += 1
        if self._inflight >= self.max_inflight:
            self._room.clear()
        self.batches += 1
        self._on_events(batch)

    async def run(self, feed: Feed) -> None:
        """Run `feed` into this batcher until it ends, flushing at least every `max_delay` seconds."""
        async with asyncio.TaskGroup() as group:
            ticker = group.create_task(self._tick(), name="feed-batcher")
            try:
                await feed.run(self.put)
            finally:
                ticker.cancel()
        await self.flush()

    async def _tick(self) -> None:
        while True:
            await self._started.wait()
            await asyncio.sleep(self.max_delay)
            self._started.clear()
            await self.flush()


def refusal_text(status: int, *, sent_token: bool) -> str:
    """Why the admin API refused the TUI, and how to give it the token it wants."""
    if not sent_token:
        return (
            f"the admin API wants a token (HTTP {status}): give its admin_token with --token TOKEN "
            "or MCP_PROXY_ADMIN_TOKEN"
        )
    return f"the admin API refused this token (HTTP {status}): is it the proxy's admin_token?"
