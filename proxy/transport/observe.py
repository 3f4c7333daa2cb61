"""Observing a relayed body: parsed copies of what the bytes carry, without ever holding the traffic.

SSE bodies are decoded incrementally as chunks pass; JSON bodies are kept only up to an inspection
limit (past it the chain notes the size instead of the content).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.flows.events import Channel
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

    def __post_init__(self) -> None:
        if self.sse:
            self._decoder = SseDecoder()
        elif self.declared_size is not None and self.declared_size > INSPECT_LIMIT:
            self.problem = NOT_INSPECTED
        else:
            self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        """Look at one relayed chunk."""
        self._size += len(chunk)
        if self._decoder is not None:
            try:
                items = self._decoder.feed(chunk)
            except SseTooLarge as exc:
                self.problem = str(exc)
                self._decoder = None
                return
            self._emit_sse(items, len(chunk))
        elif self._buffer is not None:
            if len(self._buffer) + len(chunk) > INSPECT_LIMIT:
                self._buffer = None
                self.problem = NOT_INSPECTED
            else:
                self._buffer += chunk

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
