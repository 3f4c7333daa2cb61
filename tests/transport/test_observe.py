"""What the observer of a relayed body sees of a compressed one (proxy.transport.observe).

The bytes are what real compression middleware sends (zlib's gzip, flushed event by event for SSE);
the observer is fed them as the relay would, chunk by chunk.
"""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Iterator

from proxy.flows.events import Channel
from proxy.transport.observe import (
    ENCODED_COUNT,
    INSPECT_LIMIT,
    BodyObserver,
    not_inspected_coding,
    too_large,
)
from proxy.wire.jsonrpc import Message

ANSWER = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}'


class Seen:
    """What the observer reported: each message, and the bytes that carried none."""

    def __init__(self) -> None:
        self.messages: list[tuple[Message, int, Channel]] = []
        self.extra = 0

    def sink(self, msg: Message, size: int, channel: Channel, sse_id: str | None) -> None:
        self.messages.append((msg, size, channel))

    def observer(self, encoding: str | None, *, sse: bool = False) -> BodyObserver:
        return BodyObserver(sse=sse, sink=self.sink, on_extra_bytes=self._extra, encoding=encoding)

    def _extra(self, size: int) -> None:
        self.extra += size


def chunks(data: bytes, size: int = 4096) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def test_a_gzip_json_answer_is_seen_as_the_message_it_holds() -> None:
    seen = Seen()
    observer = seen.observer("gzip")
    for chunk in chunks(gzip.compress(ANSWER), 7):
        observer.feed(chunk)
    observer.finish()
    assert [(m.raw["id"], size, channel) for m, size, channel in seen.messages] == [
        (7, len(ANSWER), Channel.JSON)
    ]
    assert observer.problem is None
    assert observer.not_inspected is None


def test_a_gzip_sse_stream_is_seen_event_by_event_as_it_streams() -> None:
    packer = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    seen = Seen()
    observer = seen.observer("gzip", sse=True)
    for n in range(3):
        event = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/ping","id":%d}\n\n' % n
        observer.feed(packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH))
        assert [m.raw["id"] for m, _, _ in seen.messages] == list(range(n + 1))
    observer.feed(packer.flush())
    observer.finish()
    assert observer.problem is None


def test_a_gzip_body_inflating_past_the_limit_is_not_inspected_and_never_held_whole() -> None:
    packer = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
    mebibyte = b" " * (1 << 20)
    bomb = b"".join(packer.compress(mebibyte) for _ in range(64)) + packer.flush()  # 64 MiB in ~64 KiB
    seen = Seen()
    observer = seen.observer("gzip")
    tracemalloc.start()
    try:
        for chunk in chunks(bomb, 1 << 16):  # one read's worth: all of it, 64 MiB once inflated
            observer.feed(chunk)
        observer.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    reason = too_large("a gzip-encoded response body, decoded,", INSPECT_LIMIT)
    assert observer.not_inspected == f"{reason}; {ENCODED_COUNT}"
    assert seen.extra == len(bomb)  # the bytes relayed, never the decode budget: its decoded size is unknown
    assert observer.json_body is None
    assert seen.messages == []
    assert peak < INSPECT_LIMIT + 4 * (1 << 20)  # the bounded buffer and a few pieces, never 64 MiB


def test_a_coding_the_proxy_cannot_undo_is_named_not_inspected_and_never_parsed() -> None:
    seen = Seen()
    observer = seen.observer("br")
    observer.feed(b"\x1b\x4a\x00\xf8\x1d\xa9\x53")  # Brotli bytes, or anything: never looked at
    observer.finish()
    assert (
        observer.not_inspected
        == not_inspected_coding("br")
        == (
            "a br-encoded body was relayed but not inspected (the proxy decodes gzip and deflate); "
            "its size counts the encoded bytes relayed, its decoded size unknown"
        )
    )
    assert seen.messages == []
    assert seen.extra == 7


def test_a_body_that_is_not_what_its_coding_says_is_named_not_inspected_not_invalid() -> None:
    seen = Seen()
    observer = seen.observer("gzip")
    observer.feed(ANSWER)  # plain JSON under a gzip header
    observer.feed(b"more of it")
    observer.finish()
    assert seen.extra == len(ANSWER) + len(b"more of it")  # counted as they came
    assert (observer.not_inspected or "").startswith("a gzip-encoded body that could not be decoded")
    assert (observer.not_inspected or "").endswith(ENCODED_COUNT)
    assert seen.messages == []


def test_a_gzip_sse_stream_past_the_limit_counts_its_told_events_decoded_and_the_rest_encoded() -> None:
    packer = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
    event = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/ping"}\n\n'
    first = packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH)
    big = b"data: " + b" " * (4 * INSPECT_LIMIT)
    rest = [packer.compress(big[i : i + (1 << 20)]) for i in range(0, len(big), 1 << 20)]
    rest.append(packer.flush())
    seen = Seen()
    observer = seen.observer("gzip", sse=True)
    for chunk in (first, *rest):
        observer.feed(chunk)
    observer.finish()
    told = sum(size for _, size, _ in seen.messages)
    assert len(seen.messages) == 1
    assert told + seen.extra == len(event) + sum(map(len, rest))  # the wire bytes of the unread event
    assert (observer.not_inspected or "").endswith(ENCODED_COUNT)
