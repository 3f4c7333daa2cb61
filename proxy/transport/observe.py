"""Observing a relayed body: parsed copies of what the bytes carry, without ever holding the traffic.

SSE bodies are decoded incrementally as chunks pass; JSON bodies are kept only up to an inspection
limit (past it the chain notes the size instead of the content). A compressed body (`Content-Encoding:
gzip` or `deflate`) is observed decoded, piece by piece as it streams, under the same limits as a plain
one: the client gets the compressed bytes it asked for, people see what they say. A body in a coding
the proxy cannot undo is relayed and named as not inspected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.flows.events import Channel
from proxy.framing.content_coding import CodingError, ContentDecoder, content_codings, undecodable
from proxy.framing.sse import SseDecoder, SseEvent, SseItem, SseTooLarge
from proxy.wire.jsonrpc import Body, Kind, Message, parse_body, parse_text

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_HTTP = Channel.HTTP
_INVALID = Kind.INVALID
_JSON = Channel.JSON

INSPECT_LIMIT = 4 * 1024 * 1024
"""JSON bodies larger than this are relayed but not parsed for the chain (bounded observer memory)."""

NOT_INSPECTED = f"body larger than {INSPECT_LIMIT} bytes was relayed but not inspected"


def not_inspected_decoded(coding: str) -> str:
    """Why a compressed JSON body that decodes past `INSPECT_LIMIT` is not shown."""
    return f"{coding} body decoding to more than {INSPECT_LIMIT} bytes was relayed but not inspected"


def not_inspected_coding(coding: str) -> str:
    """Why a body in a coding the proxy cannot undo is not shown."""
    return f"{coding}-encoded body was relayed but not inspected (the proxy decodes gzip and deflate)"


def not_inspected_corrupt(coding: str, detail: str) -> str:
    """Why a body that is not what its declared coding produces is not shown."""
    return f"{coding}-encoded body could not be decoded ({detail}): relayed but not inspected"


MessageSink = Callable[[Message, int, Channel, str | None], None]
"""Receives (message, size in bytes, channel, SSE id) for each message found in the body."""


@dataclass(slots=True)
class BodyObserver:
    """Finds JSON-RPC messages in a response body as it streams past."""

    sse: bool
    sink: MessageSink
    on_extra_bytes: Callable[[int], None]
    on_event_id: Callable[[str], None] = lambda _id: None
    channel: Channel = Channel.SSE
    _decoder: SseDecoder | None = None
    _buffer: bytearray | None = None
    _size: int = 0
    problem: str | None = None
    declared_size: int | None = None
    """The body's Content-Length, if any: a JSON body known to be too large is never buffered at all."""
    encoding: str | None = None
    """The body's Content-Encoding, if any: what is observed is the body it decodes to."""
    _coding: str = ""
    _content: ContentDecoder | None = None

    def __post_init__(self) -> None:
        codings = content_codings(self.encoding)
        if (unknown := undecodable(codings)) is not None:
            self.problem = not_inspected_coding(unknown)
            return
        if codings:
            self._coding = ", ".join(codings)
            self._content = ContentDecoder(codings)
        if self.sse:
            self._decoder = SseDecoder()
        elif self.declared_size is not None and self.declared_size > INSPECT_LIMIT:
            self.problem = NOT_INSPECTED
        else:
            self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        """Look at one relayed chunk (decoded first when the body is compressed)."""
        self._size += len(chunk)
        content = self._content
        if content is None:
            self._look(chunk)
            return
        try:
            for piece in content.feed(chunk):
                if self._decoder is None and self._buffer is None:
                    break  # no longer looking: the rest is not decoded either
                self._look(piece)
        except CodingError as exc:
            self._stop(not_inspected_corrupt(self._coding, str(exc)))

    def _look(self, data: bytes) -> None:
        """Look at body bytes as they read once decoded."""
        if self._decoder is not None:
            try:
                items = self._decoder.feed(data)
            except SseTooLarge as exc:
                self._stop(str(exc))
                return
            self._emit_sse(items, len(data))
        elif self._buffer is not None:
            if len(self._buffer) + len(data) > INSPECT_LIMIT:
                self._stop(not_inspected_decoded(self._coding) if self._coding else NOT_INSPECTED)
            else:
                self._buffer += data

    def _stop(self, problem: str) -> None:
        """Stop looking at the body (it goes on being relayed), saying why."""
        self.problem = problem
        self._decoder = None
        self._buffer = None

    def _emit_sse(self, items: list[SseItem], chunk_size: int) -> None:
        extra = chunk_size
        for item in items:
            if isinstance(item, SseEvent) and item.id is not None and not item.carries_message:
                self.on_event_id(item.id)
            if isinstance(item, SseEvent) and item.carries_message:
                msg = parse_text(item.data)
                size = len(item.data)
                extra -= size
                self.sink(msg, size, self.channel, item.id)
        if extra > 0:
            self.on_extra_bytes(extra)

    @property
    def json_body(self) -> bytearray | None:
        """The JSON body seen so far; None for an SSE stream or a body too large to keep."""
        return self._buffer

    def finish(self) -> Body | None:
        """Call at the end of the body; returns the parsed JSON body (None for SSE or uninspected)."""
        if self._decoder is not None:
            self._decoder.close()
            if self._decoder.pending_bytes:
                self.problem = (
                    f"stream ended inside an event ({self._decoder.pending_bytes} bytes unfinished)"
                )
            return None
        if self._buffer is None:
            return None
        return observe_json(bytes(self._buffer), self.sink)


def json_messages(data: bytes) -> tuple[Body, list[tuple[Message, int, Channel]]]:
    """The messages of a whole JSON body, each with its size and channel; a body that is not JSON-RPC
    becomes one invalid message."""
    body = parse_body(data)
    size = len(data)
    if body.parse_error and size:
        preview = data[:2048].decode("utf-8", "replace")
        return body, [(Message(_INVALID, preview, problem=body.parse_error), size, _HTTP)]
    single = len(body.messages) == 1
    return body, [(msg, size if single else 0, _JSON) for msg in body.messages]


def observe_json(data: bytes, sink: MessageSink) -> Body:
    """Report the messages of a whole JSON body to `sink` (`json_messages`)."""
    body, found = json_messages(data)
    for msg, size, channel in found:
        sink(msg, size, channel, None)
    return body
