"""Observing a relayed body: parsed copies of what the bytes carry, without ever holding the traffic.

SSE bodies are decoded incrementally as chunks pass; JSON bodies are kept only up to an inspection
limit (`max_inspected_bytes`, which bounds one SSE event too). Past it the body is relayed whole and
unread: the observer stops looking (`BodyObserver.skip`), counts the bytes it did not read, and says
why (`not_inspected`), so the exchange is recorded as not inspected rather than as one without an
answer. Every relayed byte is counted once: in the size of the message it carried, or as extra bytes.

A compressed body (`Content-Encoding: gzip` or `deflate`) is observed decoded, piece by piece as it
streams, under the same limit as a plain one: the client gets the compressed bytes it asked for,
people see what they say. Its bytes are counted decoded (its messages' sizes, the bytes no message
carried) while it is decoded. Once it is not (it decodes past the limit, does not decode, or is in a
coding the proxy cannot undo), the rest is counted as the encoded bytes relayed, from the reads whose
decoded bytes were not yet counted: inflating the rest of a gzip bomb only to count it would cost the
proxy what the limit spares it. The reason it went unread says its size is a count of encoded bytes
(`ENCODED_COUNT`), since its decoded size is then unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.flows.events import Channel
from proxy.framing.content_coding import CodingError, ContentDecoder, content_codings, undecodable
from proxy.framing.sse import SseDecoder, SseEvent, SseItem, SseTooLarge
from proxy.transport.response_budget import COUNTED_RESPONSE, Hold
from proxy.wire.jsonrpc import Body, Kind, Message, member_sizes, parse_body, parse_text

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_HTTP = Channel.HTTP
_INVALID = Kind.INVALID
_JSON = Channel.JSON

INSPECT_LIMIT = 16 * 1024 * 1024
"""The default of `max_inspected_bytes`: the largest JSON body, or SSE event, read for the chain."""

INSPECT_SETTING = "max_inspected_bytes"
"""The setting that bounds what the observer reads, named wherever a body goes unread because of it."""


def too_large(what: str, limit: int) -> str:
    """Why a body went unread: `what` was larger than the limit, named with its setting."""
    return f"{what} larger than {INSPECT_SETTING} ({limit} bytes) was relayed whole but not inspected"


ENCODED_COUNT = "its size counts the encoded bytes relayed, its decoded size unknown"
"""Said of a compressed body not decoded to its end, whose size is then a count of encoded bytes."""


def over_budget(what: str, hold: Hold) -> str:
    """Why a body went unread: the proxy held as many response bytes as `max_response_bytes_in_flight`
    allows, across all clients, so `what` was relayed as it came (counted as a refusal)."""
    budget = hold.budget
    why = f"{what} was relayed whole but not inspected: {budget.no_room()}"
    budget.note_refusal("not_inspected", why)
    return why


def not_inspected_coding(coding: str) -> str:
    """Why a body in a coding the proxy cannot undo is not shown."""
    return (
        f"a {coding}-encoded body was relayed but not inspected (the proxy decodes gzip and deflate); "
        + ENCODED_COUNT
    )


def not_inspected_corrupt(coding: str, detail: str) -> str:
    """Why a body that is not what its declared coding produces is not shown."""
    return f"a {coding}-encoded body that could not be decoded ({detail}) was relayed but not inspected"


MessageSink = Callable[[Message, int, Channel, str | None], None]
"""Receives (message, size in bytes, channel, SSE id) for each message found in the body."""


@dataclass(slots=True)
class BodyObserver:
    """Finds JSON-RPC messages in a response body as it streams past."""

    sse: bool
    sink: MessageSink
    on_extra_bytes: Callable[[int], None]
    """Receives counts of relayed bytes no message carried (SSE framing, comments, unread bytes)."""
    on_event_id: Callable[[str], None] = lambda _id: None
    channel: Channel = Channel.SSE
    declared_size: int | None = None
    """The body's Content-Length, if any: a JSON body known to be too large is never buffered at all."""
    limit: int = INSPECT_LIMIT
    """The largest JSON body or SSE event read (`max_inspected_bytes`), decoded when compressed."""
    encoding: str | None = None
    """The body's Content-Encoding, if any: what is observed is the body it decodes to."""
    hold: Hold | None = None
    """The share of `max_response_bytes_in_flight` the bytes kept for reading count in (None: none
    counted); past the budget the rest is relayed unread, and it is given back at the end (`release`)."""
    _content: ContentDecoder | None = None
    _coding: str = ""
    _decoder: SseDecoder | None = None
    _buffer: bytearray | None = None
    _owed: int = 0
    """Bytes fed that neither a message's size nor an extra-bytes count has told yet: an SSE event
    still arriving (told once it completes)."""
    _encoded_owed: int = 0
    """Encoded bytes of a compressed body fed since its decoded bytes were last all told: what it
    counts in their place when it stops being decoded."""
    problem: str | None = None
    """What went wrong reading the body (a stream cut inside an event), for the log."""
    not_inspected: str | None = None
    """Why the body, or the rest of it, was relayed unread (`skip`); None while it is read."""
    _finished: bool = False

    def __post_init__(self) -> None:
        codings = content_codings(self.encoding)
        if (unknown := undecodable(codings)) is not None:
            self.skip(not_inspected_coding(unknown))
            return
        if codings:
            self._coding = ", ".join(codings)
            self._content = ContentDecoder(codings)
        declared = self.declared_size if self._content is None else None  # a compressed one: decoded
        if self.sse:
            self._decoder = SseDecoder(self.limit)
        elif declared is not None and declared > self.limit:
            self.skip(too_large(f"a response body of {declared} bytes", self.limit))
        elif declared is None or self._room(declared, whole=True):  # else relayed unread (`_room` said why)
            self._buffer = bytearray()

    def _room(self, size: int, *, whole: bool = False) -> bool:
        """Whether the budget has room to keep `size` bytes for reading (`whole`: the body's declared
        length, else what arrived so far); if not, reading stops."""
        hold = self.hold
        if hold is None or hold.settle(size):
            return True
        bytes_ = f"{size} bytes" if whole else f"at least {size} bytes"
        if self._decoder is not None:
            self.skip(over_budget(f"an SSE event of {bytes_}", hold) + ", nor the rest of its stream")
        else:
            self.skip(over_budget(f"a response body of {bytes_}", hold))
        return False

    def release(self) -> None:
        """Give back the budget's share the observer counts (it may count again if it reads on)."""
        if self.hold is not None:
            self.hold.release()

    def stop(self) -> None:
        """The exchange ended, however it ended: nothing more is kept, and the budget's share goes back."""
        self._decoder = None
        self._buffer = None
        self.release()
        self.hold = None

    def skip(self, reason: str) -> None:
        """Stop reading: the rest of the body is relayed and counted, unread; `reason` says why."""
        if self._content is not None:
            reason = f"{reason}; {ENCODED_COUNT}"
        self.not_inspected = self.not_inspected or reason
        self._stop_reading()

    def give_up(self) -> None:
        """The exchange ends before the body did (its client left, or it was given up): the bytes
        relayed and not counted yet (a JSON body kept for reading) are counted, unread."""
        if not self._finished:
            self._stop_reading()
            self._tell_extra(0)

    def _stop_reading(self) -> None:
        self._decoder = None
        if self._buffer is not None:
            self._owed += len(self._buffer)
            self._buffer = None
        if self._content is not None:  # decoded bytes untold give way to the encoded bytes that held them
            self._owed, self._encoded_owed = self._encoded_owed, 0
        self.release()

    def feed(self, chunk: bytes) -> None:
        """Look at one relayed chunk (decoded first when the body is compressed)."""
        content = self._content
        if content is None:
            self._look(chunk)
            return
        if self._decoder is None and self._buffer is None:  # no longer looking: nor decoding
            self.on_extra_bytes(len(chunk))
            return
        self._encoded_owed += len(chunk)
        try:
            for piece in content.feed(chunk):
                self._look(piece)
                if self._decoder is None and self._buffer is None:
                    break  # stopped looking: the rest is not decoded either
        except CodingError as exc:
            self.skip(not_inspected_corrupt(self._coding, str(exc)))
            self._tell_extra(0)
            self._content = None  # from here on its bytes are counted as they come
            return
        if self._owed == 0 and not self._buffer:  # every decoded byte told: none of these owed
            self._encoded_owed = 0

    def _look(self, chunk: bytes) -> None:
        """Look at body bytes as they read (decoded, when the body is compressed)."""
        decoder = self._decoder
        if decoder is not None:
            try:
                items = decoder.feed(chunk)
            except SseTooLarge as exc:
                self._owed += len(chunk) - self._emit_sse(exc.items)
                self.skip(too_large("an SSE event", self.limit) + ", nor the rest of its stream")
                self._tell_extra(0)
                return
            self._owed += len(chunk) - self._emit_sse(items)
            pending = decoder.pending_bytes
            hold = self.hold
            if hold is not None and (pending >= COUNTED_RESPONSE or hold.size) and not self._room(pending):
                self._tell_extra(0)
                return
            self._tell_extra(pending)
        elif (buffer := self._buffer) is not None:
            size = len(buffer) + len(chunk)
            if size <= self.limit:
                hold = self.hold
                if hold is None or size < COUNTED_RESPONSE or size <= hold.size or hold.settle(size):
                    buffer += chunk
                    return
                self._owed += len(chunk)  # owed before `skip`, which may count encoded bytes instead
                self._room(size)  # no room: the rest goes by unread, and it says why
                self._tell_extra(0)
                return
            self._owed += len(chunk)
            what = f"a {self._coding}-encoded response body, decoded," if self._coding else "a response body"
            self.skip(too_large(what, self.limit))
            self._tell_extra(0)
        else:
            self.on_extra_bytes(len(chunk))

    def _emit_sse(self, items: tuple[SseItem, ...] | list[SseItem]) -> int:
        """Hand on the messages of completed events; returns the bytes their sizes count."""
        counted = 0
        for item in items:
            if isinstance(item, SseEvent):
                if item.carries_message:
                    msg = parse_text(item.data)
                    size = len(item.data)
                    counted += size
                    self.sink(msg, size, self.channel, item.id)
                elif item.id is not None:
                    self.on_event_id(item.id)
        return counted

    def _tell_extra(self, held: int) -> None:
        """Count the bytes owed beyond `held` (an event still arriving, told when it completes)."""
        extra = self._owed - held
        if extra > 0:
            self.on_extra_bytes(extra)
            self._owed = held

    @property
    def json_body(self) -> bytearray | None:
        """The JSON body seen so far; None for an SSE stream or a body too large to keep."""
        return self._buffer

    def finish(self) -> Body | None:
        """Call at the end of the body; returns the parsed JSON body (None for SSE or uninspected)."""
        self._finished = True
        decoder = self._decoder
        if decoder is not None:
            decoder.close()
            if decoder.pending_bytes:
                self.problem = f"stream ended inside an event ({decoder.pending_bytes} bytes unfinished)"
        self._tell_extra(0)
        buffer = self._buffer
        if decoder is not None or buffer is None:
            self.release()
            return None
        try:
            return observe_json(buffer, self.sink)  # read in place: no copy of a big body
        finally:
            self.release()


def json_messages(data: bytes | bytearray) -> tuple[Body, list[tuple[Message, int, Channel]]]:
    """The messages of a whole JSON body, each with its size and channel; a body that is not JSON-RPC
    becomes one invalid message."""
    body = parse_body(data)
    size = len(data)
    if body.parse_error and size:
        preview = data[:2048].decode("utf-8", "replace")
        return body, [(Message(_INVALID, preview, problem=body.parse_error), size, _HTTP)]
    messages = body.messages
    if len(messages) == 1:  # the common body: one message, the whole size
        return body, [(messages[0], size, _JSON)]
    sizes = member_sizes(messages, size)
    return body, [(msg, share, _JSON) for msg, share in zip(messages, sizes, strict=True)]


def observe_json(data: bytes | bytearray, sink: MessageSink) -> Body:
    """Report the messages of a whole JSON body to `sink` (`json_messages`)."""
    body, found = json_messages(data)
    for msg, size, channel in found:
        sink(msg, size, channel, None)
    return body
