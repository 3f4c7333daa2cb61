"""Sans-IO Server-Sent Events codec: bytes in, events out, and events back to bytes.

This room holds the proxy's own incremental SSE decoder (``SseDecoder``) and the two
encoders (``encode_event``, ``encode_comment``). The decoder follows the WHATWG
"event stream interpretation" rules and is fed whatever chunks the transport happens
to relay, so it must cope with line terminators, UTF-8 sequences and a BOM split at
any byte.

What it must not do: it never awaits, never touches a socket, a clock or a logger, and
imports nothing outside the standard library. The transport relays the original bytes
unchanged; this codec only lets the proxy *observe* them, so its one defence
(``max_event_bytes``) protects the observer's memory, not the stream.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Final, TypeAlias

from proxy.wire.values import value

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "SseComment",
    "SseDecoder",
    "SseEvent",
    "SseItem",
    "SseTooLarge",
    "encode_comment",
    "encode_event",
    "encode_json_event",
]

DEFAULT_MAX_EVENT_BYTES: Final = 16 * 1024 * 1024
"""Largest event (its data) and longest line the decoder accepts; it buffers at most about twice this."""

_BOM: Final = b"\xef\xbb\xbf"
_CR: Final = 0x0D
_LF: Final = 0x0A


@value
class SseEvent:
    """One event, reported when its terminating blank line arrives.

    Unlike a browser's ``EventSource``, the decoder also reports events that carry no
    ``data:`` line (``has_data=False``): MCP 2025-11-25 servers prime a stream with an
    ``id:``-only event, and the proxy must see that id to follow resumption.

    ``id`` is the ``id:`` field of *this* event (``None`` if it had none); the id a
    client would resume from is ``SseDecoder.last_event_id``.
    """

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None
    has_data: bool = True

    @property
    def carries_message(self) -> bool:
        """True when the data could be a message: a priming event (`id:` + empty `data:`) is not."""
        return self.has_data and bool(self.data.strip())


@value
class SseComment:
    """A ``:`` line, surfaced so the proxy can show keep-alives and server notes.

    ``text`` is what follows the colon, minus one leading space if present.
    """

    text: str


SseItem: TypeAlias = SseEvent | SseComment
"""What the decoder yields, in stream order."""


class SseTooLarge(ValueError):
    """An event or a single line grew past ``max_event_bytes``.

    Raised so an observer cannot be made to buffer without bound. ``items`` holds the
    items completed in the same ``feed`` call before the overflow, so none are lost.
    """

    def __init__(self, limit: int, items: tuple[SseItem, ...] = ()) -> None:
        super().__init__(
            f"SSE event exceeds max_event_bytes={limit} bytes; stopped decoding this stream"
            " (the relayed bytes are unaffected)"
        )
        self.limit = limit
        self.items = items


class SseDecoder:
    """Incremental, bounded decoder for one ``text/event-stream`` body.

    Feed it the body's bytes in whatever chunks arrive; each call returns the comments
    and events those bytes completed. Lines are split with ``bytes.splitlines``, which
    for bytes breaks only at CR, LF and CRLF (exactly the SSE terminators) and never
    inside a UTF-8 sequence, so each line is decoded whole and no per-byte Python loop
    runs. A CR ending a chunk is remembered so an LF opening the next one is not
    counted as a second line break.

    After ``SseTooLarge`` the decoder is spent: every later ``feed`` raises it again.
    """

    __slots__ = (
        "_closed",
        "_data",
        "_data_bytes",
        "_event_raw",
        "_failed",
        "_head",
        "_id",
        "_id_buffer",
        "_last_event_id",
        "_limit",
        "_partial",
        "_retry",
        "_seen_cr",
        "_start",
        "_type",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be positive, got {max_event_bytes}")
        self._limit = max_event_bytes
        self._start = True  # still looking for a BOM at stream start
        self._head = b""  # first bytes held back while they could still be a BOM
        self._seen_cr = False  # previous chunk ended with CR: drop one leading LF
        # The unterminated line, grown in place: a long line is never held twice, as joined pieces
        # would be, and its memory goes back to the system in one piece once it is let go.
        self._partial = bytearray()
        # The event being assembled (None = field not seen since the last blank line).
        self._data: list[bytes | bytearray | memoryview] = []
        self._data_bytes = 0
        self._type: bytes | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self._event_raw = 0  # raw bytes of this event's field lines, for pending_bytes
        # WHATWG's "last event ID buffer" (set by id:) and "last event ID string" (set on dispatch).
        self._id_buffer = ""
        self._last_event_id = ""
        self._closed = False
        self._failed = False

    @property
    def last_event_id(self) -> str:
        """The id a reconnecting client would send as ``Last-Event-ID`` ("" for none).

        As WHATWG says, it persists across events that carry no ``id:``, is reset by an
        empty ``id:``, and only takes effect when the event's blank line arrives.
        """
        return self._last_event_id

    @property
    def pending_bytes(self) -> int:
        """Bytes of an event that has not been completed (terminators not counted).

        Non-zero after ``close()`` means the stream was cut mid-event; callers log it.
        """
        return len(self._head) + len(self._partial) + self._event_raw

    def feed(self, chunk: bytes) -> list[SseItem]:
        """Consume the next chunk of the body; return the items it completed, in order."""
        if self._failed:
            raise SseTooLarge(self._limit)
        if self._closed:
            raise RuntimeError("SseDecoder.feed() called after close()")
        if self._start:
            chunk = self._head + chunk
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._head = chunk
                return []
            self._start = False
            self._head = b""
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if self._seen_cr and chunk:
            self._seen_cr = False
            if chunk[0] == _LF:
                chunk = chunk[1:]
        if not chunk:
            return []

        last = chunk[-1]
        terminated = last in (_LF, _CR)
        if not terminated and b"\n" not in chunk and b"\r" not in chunk:
            # Middle of a line: just hold on to it.
            self._partial += chunk
            if self._partial_overflows():
                raise self._fail([])
            return []

        lines: list[bytes | bytearray] = list(chunk.splitlines())
        if self._partial:
            self._partial += lines[0]
            lines[0] = self._partial  # the line itself, not a copy (`_interpret` reads it in place)
            self._partial = bytearray()
        tail: bytes | bytearray = b""
        if terminated:
            self._seen_cr = last == _CR
        else:
            tail = lines.pop()

        out: list[SseItem] = []
        self._interpret(lines, out)
        if tail:
            self._partial = bytearray(tail)
            if self._partial_overflows():
                raise self._fail(out)
        return out

    def close(self) -> list[SseItem]:
        """Mark the end of the body and return the items it completes.

        Per WHATWG an event without its terminating blank line is discarded, and every
        complete event was already returned by ``feed``, so this returns ``[]``; it is a
        list so callers treat ``feed`` and ``close`` alike. What was discarded stays
        visible in ``pending_bytes``.
        """
        self._closed = True
        return []

    def _partial_overflows(self) -> bool:
        """The unterminated line is already sure to overflow once it ends, exactly as `_interpret` judges it.

        Only what the finished line must exceed counts, so the verdict never depends on where the
        network cut the stream: a line longer than the limit, or a `data:` line whose value already
        carries the event past it (a comment or another field after a large `data:` does not).
        """
        size = len(self._partial)
        if size > self._limit:
            return True
        if self._data_bytes + size - 4 <= self._limit:  # even as "data:<value>" it stays within
            return False
        start = bytes(self._partial[:6])
        if not start.startswith(b"data:"):
            return False
        value = size - (6 if start[5:6] == b" " else 5)
        return self._data_bytes + value + 1 > self._limit

    def _fail(self, out: list[SseItem]) -> SseTooLarge:
        self._failed = True
        return SseTooLarge(self._limit, tuple(out))

    def _interpret(self, lines: list[bytes | bytearray], out: list[SseItem]) -> None:
        limit = self._limit
        for raw in lines:
            if not raw:
                self._dispatch(out)
                continue
            if len(raw) > limit:
                raise self._fail(out)
            colon = raw.find(b":")
            if colon == 0:
                text = raw[2:] if raw[1:2] == b" " else raw[1:]
                out.append(SseComment(text.decode("utf-8", "replace")))
                continue
            value: bytes | bytearray | memoryview
            if colon < 0:
                name = raw
                value = b""
            else:
                name = raw[:colon]
                start = colon + 2 if raw[colon + 1 : colon + 2] == b" " else colon + 1
                # A line that spanned chunks is a bytearray: its value is read in place, not copied.
                value = memoryview(raw)[start:] if isinstance(raw, bytearray) else raw[start:]
            self._event_raw += len(raw)
            if name == b"data":
                self._data.append(value)
                self._data_bytes += len(value) + 1
                if self._data_bytes > limit:
                    raise self._fail(out)
            else:
                self._field(name, bytes(value))

    def _field(self, name: bytes | bytearray, value: bytes) -> None:
        """A field other than `data`; any name but `event`, `id` and `retry` is ignored."""
        if name == b"event":
            self._type = value
        elif name == b"id":
            if b"\x00" not in value:
                self._id = self._id_buffer = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():  # bytes.isdigit(): ASCII digits only (WHATWG)
            # Past int()'s digit limit there is no sane reconnection time: ignore it.
            with suppress(ValueError):
                self._retry = int(value)

    def _dispatch(self, out: list[SseItem]) -> None:
        self._last_event_id = self._id_buffer
        if self._data or self._type is not None or self._id is not None or self._retry is not None:
            data = self._data
            joined = data[0] if len(data) == 1 else b"\n".join(data)  # one line: decoded in place
            out.append(
                SseEvent(
                    data=str(joined, "utf-8", "replace"),
                    event=self._type.decode("utf-8", "replace") if self._type else "message",
                    id=self._id,
                    retry=self._retry,
                    has_data=bool(self._data),
                )
            )
            self._data = []
            self._data_bytes = 0
            self._type = None
            self._id = None
            self._retry = None
        self._event_raw = 0


def _field(name: str, value: str) -> str:
    # Always "name: value": the decoder strips exactly one space, so a value that itself
    # starts with a space survives.
    return f"{name}: {value}\n" if value else f"{name}:\n"


def _single_line(what: str, value: str) -> None:
    if "\n" in value or "\r" in value:
        raise ValueError(f"SSE {what} must not contain CR or LF: {value!r}")


def encode_event(
    data: str | None,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Serialise one event, ending with its blank line, in UTF-8 with LF terminators.

    The proxy uses this when it speaks SSE itself (bridged or synthesised streams).
    ``data`` is split at every CR, LF or CRLF into ``data:`` lines, so a decoder gives
    it back with "\\n" in place of each of those breaks. ``data=None`` writes no
    ``data:`` line at all, which is how an MCP priming event (``id:`` only) is made;
    ``data=""`` writes one empty ``data:`` line. Values that would break the framing
    (CR/LF in ``event`` or ``id``, NUL in ``id``, a negative ``retry``) raise
    ``ValueError`` rather than produce a stream that decodes differently.
    """
    parts: list[str] = []
    if event is not None:
        _single_line("event", event)
        parts.append(_field("event", event))
    if id is not None:
        _single_line("id", id)
        if "\x00" in id:
            raise ValueError(f"SSE id must not contain NUL (decoders ignore it): {id!r}")
        parts.append(_field("id", id))
    if retry is not None:
        if retry < 0:
            raise ValueError(f"SSE retry must be a non-negative integer, got {retry}")
        parts.append(f"retry: {retry}\n")
    if data is not None:
        for line in data.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
            parts.append(_field("data", line))
    if not parts:
        raise ValueError("an SSE event needs data, event, id or retry; a bare blank line dispatches nothing")
    parts.append("\n")
    return "".join(parts).encode("utf-8")


def encode_json_event(data: bytes, *, id: str | None = None) -> bytes:
    """`encode_event` for one compact JSON text: its bytes go into the event as they are, copied once.

    Compact JSON holds no raw CR or LF (inside strings they are escaped), so it is one `data:` line;
    a text that does hold one goes the general way, split into lines.
    """
    if b"\n" in data or b"\r" in data:
        return encode_event(data.decode("utf-8", "replace"), id=id)
    head = encode_event(None, id=id)[:-1] if id is not None else b""
    return b"".join((head, b"data: ", data, b"\n\n"))


def encode_comment(text: str) -> bytes:
    """Serialise one comment line (``: text``), e.g. a keep-alive that dispatches nothing.

    A comment is a single line, so CR or LF in ``text`` raises ``ValueError``.
    """
    _single_line("comment", text)
    return f": {text}\n".encode() if text else b":\n"
