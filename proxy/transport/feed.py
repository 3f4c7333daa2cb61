"""The live feed: recent history, then live flow events, as one Server-Sent Events stream.

This is what `mcp-proxy tui --attach` reads (docs/admin-api.md is the protocol reference). Each SSE
event's data is one `FlowEvent` as `event_to_json` encodes it: first a `proxy_info`, then for each of
the newest `history` chains a `chain_opened` (its current headline), its stored `message`s and a
`chain_changed`, then a `continuation` for each call parked now (its latest state) and a `session`
for each session open now (its opening, and its latest change when it has one); then a `: live`
comment; then live events from the bus, each write of them headed by a `: sent <epoch seconds>`
comment (when the proxy wrote them, so a reader can tell how late it reads them), with a `lagged`
marker where this client fell behind and a `: keepalive` comment when nothing happened for a while.

The seam between history and live is the rule in `Seam`: the subscription is taken *before* the
snapshot, in the same synchronous step, and live events already covered by the snapshot are skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from proxy.flows.bus import EventBus, Subscription
from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainSummary,
    ContinuationChanged,
    FlowEvent,
    MessageRecord,
    MessageRecorded,
    ProxyInfo,
    SessionChanged,
    event_to_json,
)
from proxy.flows.store import ChainStore

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
"""Response headers of the feed (no proxy in between may buffer it)."""

KEEPALIVE = b": keepalive\n\n"
"""The SSE comment written when the feed was quiet for a keepalive interval."""

LIVE = b": live\n\n"
"""The SSE comment between the history and the live events (SSE parsers skip it; a TUI may use it)."""


def sent_stamp(at: float) -> bytes:
    """The comment heading each write of live events: when the proxy wrote them (epoch seconds).

    A chain's own times say when its traffic happened, which can be long before the event that tells
    it (a stream ended as of its cut, a head filed as its exchange closes), so a reader judges how
    late it reads by this stamp alone.
    """
    return b": sent %.3f\n\n" % at


_BATCH_BYTES = 256 * 1024
_CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError, ConnectionError)


@dataclass(frozen=True, slots=True)
class _ChainSnapshot:
    summary: ChainSummary
    messages: tuple[MessageRecord, ...]
    last_seq: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Copies of the newest chains and of the calls parked now, taken in one synchronous step so
    nothing moves under them."""

    chains: tuple[_ChainSnapshot, ...]
    continuations: tuple[ContinuationChanged, ...] = ()
    sessions: tuple[SessionChanged, ...] = ()

    @classmethod
    def take(cls, store: ChainStore, history: int) -> Snapshot:
        """Copy the newest `history` chains (headline, held messages, last sequence number), the
        latest state of every call parked now and every session open now, with the change that opened
        it (whatever the history holds: a reader counts them, and lists the sessions)."""
        return cls(
            tuple(
                _ChainSnapshot(chain.summary.model_copy(), tuple(chain.messages), chain.seq)
                for chain in store.recent(history)
            ),
            tuple(store.continuations.values()),
            tuple(change for pair in store.sessions.values() for change in _distinct(pair)),
        )

    def events(self) -> Iterator[FlowEvent]:
        """The history part of the feed: per chain, opened, its messages, changed (oldest chain
        first); then each parked call's latest state; then each open session's opening and latest
        change."""
        for chain in self.chains:
            yield ChainOpened(chain=chain.summary)
            for message in chain.messages:
                yield MessageRecorded.model_construct(
                    type="message", chain_id=chain.summary.id, message=message
                )
            yield ChainChanged(chain=chain.summary)
        yield from self.continuations
        yield from self.sessions

    def seam(self) -> Seam:
        """The filter for the live events that follow this snapshot."""
        return Seam({chain.summary.id: chain.last_seq for chain in self.chains})


def _distinct(pair: tuple[SessionChanged, SessionChanged]) -> tuple[SessionChanged, ...]:
    """A session's opening change and its latest, once when they are the same."""
    opened, latest = pair
    return (opened,) if opened is latest else pair


class Seam:
    """Which live events the history already covered.

    A live `chain_opened` for a chain in the history is dropped; a live `message` of such a chain whose
    `seq` is not above the last sequence number the snapshot saw for it is dropped; everything else
    passes, `chain_changed` included (a headline replaces the one before it, so a repeat is harmless).
    Because the subscription is taken before the snapshot, no event can fall between the two.
    """

    def __init__(self, covered: dict[str, int]) -> None:
        self._covered = covered

    def admits(self, event: FlowEvent) -> bool:
        """True when the event is news to a client that has read the history."""
        if isinstance(event, ChainOpened):
            return event.chain.id not in self._covered
        if isinstance(event, MessageRecorded):
            last = self._covered.get(event.chain_id)
            return last is None or event.message.seq > last
        return True


def sse_frame(event: FlowEvent) -> bytes:
    """One SSE event whose data is the flow event's JSON (compact JSON has no newlines)."""
    return b"data: " + event_to_json(event) + b"\n\n"


@dataclass
class FeedSource:
    """What the feed needs from the proxy: the bus and store, the proxy's headline, bounds."""

    bus: EventBus
    store: ChainStore
    build: Callable[[], None]
    """Builds the observations still waiting into chains (before the snapshot: they are history)."""
    info: Callable[[], ProxyInfo]
    queue_size: int
    keepalive: float = 15.0
    on_close: Callable[[Subscription], None] | None = None
    clients: int = 0
    clock: Callable[[], float] = time.time
    """The clock of the `: sent` stamps (epoch seconds)."""


async def serve_feed(request: web.Request, source: FeedSource, history: int) -> web.StreamResponse:
    """Stream history then live events to one client until it leaves or the proxy stops."""
    sub = source.bus.subscribe("admin-feed", source.queue_size)
    source.build()  # its events reach `sub` too, and the seam drops those the snapshot covers
    snapshot = Snapshot.take(source.store, history)  # same step as subscribe: the seam is exact
    response = web.StreamResponse(status=200, headers=SSE_HEADERS)
    source.clients += 1
    try:
        await response.prepare(request)
        await _write_all(response, [source.info(), *snapshot.events()], tail=LIVE)
        await _stream_live(response, sub, snapshot.seam(), source)
        await response.write_eof()
    except _CLIENT_GONE:
        pass
    finally:
        source.clients -= 1
        sub.close()
        if source.on_close is not None:
            source.on_close(sub)
    return response


async def _write_all(response: web.StreamResponse, events: list[FlowEvent], *, tail: bytes) -> None:
    batch = bytearray()
    for event in events:
        batch += sse_frame(event)
        if len(batch) >= _BATCH_BYTES:
            await response.write(bytes(batch))
            batch.clear()
    await response.write(bytes(batch + tail))


async def _stream_live(
    response: web.StreamResponse, sub: Subscription, seam: Seam, source: FeedSource
) -> None:
    while True:
        try:
            async with asyncio.timeout(source.keepalive):
                first = await sub.get()
        except TimeoutError:
            await response.write(KEEPALIVE)
            continue
        except StopAsyncIteration:  # the proxy is stopping
            return
        batch = bytearray()
        event: FlowEvent | None = first
        while event is not None:  # whatever is queued already goes out in one write
            if seam.admits(event):
                batch += sse_frame(event)
            if len(batch) >= _BATCH_BYTES:
                break
            event = sub.get_nowait()
        if batch:
            await response.write(sent_stamp(source.clock()) + batch)
