"""The HTTP/1.1 core: bytes in, events out, for the front (server role), the pool (client role) and tests.

Shaped like h11 and sans-IO: a reader is fed the bytes a socket delivered and returns what they
completed; it never reads, writes or awaits, so its rules are tested without sockets. httptools
(llhttp, the parser Node uses) does the parsing inside; the readers add what llhttp leaves out and a
proxy needs: bounds on heads and bodies counted by the bytes they arrived in, a request's trailers
counted and dropped, a response's kept apart from its head, the refusals (status and reason) for
whatever cannot be served.

Heads going out are framed here too, in one place each: a request head from method, origin-form
target, headers and body length (`encode_request`), a response head with length, chunked or
close-delimited framing (`encode_response_head`).

Server role (`RequestReader`): `feed(data)` returns `RequestHead` (method, target, headers, version,
keep-alive and `Expect: 100-continue` read), `EndOfRequest` (its body collected on the request),
`BodyTooLarge` (cut at `max_body_bytes`: answer 413, read no more) and `Refusal` (400, 431, 501, 505:
answer and close, the stream cannot be resynchronised). The body is collected on the request rather
than handed out as data events: the front needs it whole, and an event per body piece would cost the
hot path an object each.

Client role (`ResponseReader`): `feed(data)` returns `ResponseHead`, body data (the `bytes` themselves),
`EndOfResponse` and `ResponseFailed` (`head_too_large` past the head bound, `cut` for a malformed or
upgraded stream). Body data comes out as bytes and an end as one of two shared instances, so reading a
response costs its head one object and nothing per body piece: the pool reads every upstream answer.

Both readers hand back the same list from every `feed`, emptied first: act on the events before the
next `feed`.
"""

from __future__ import annotations

import http
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Generic, TypeVar

import httptools

MAX_HEAD_BYTES = 64 * 1024
"""Request line plus headers (trailers included); past it the client gets 431."""
MAX_HEADERS = 128
"""Header fields in one request; past it the client gets 431."""

_REASONS = {status.value: status.phrase for status in http.HTTPStatus}


def header(headers: Mapping[str, str] | Iterable[tuple[str, str]], name: str) -> str | None:
    """Case-insensitive lookup of the first header with this name.

    Called a dozen times per exchange on the hot path: lists and tuples skip the Mapping check, and
    a name of another length is passed over without lower-casing it.
    """
    kind = type(headers)
    pairs = headers if kind is list or kind is tuple else _pairs(headers)
    wanted = name.lower()
    size = len(wanted)
    for key, value in pairs:  # type: ignore[str-unpack]  # a list or tuple here holds pairs
        if len(key) == size and key.lower() == wanted:
            return value
    return None


def _pairs(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> Iterable[tuple[str, str]]:
    return headers.items() if isinstance(headers, Mapping) else headers


# -- server role: requests in ----------------------------------------------------------------------


class Request:
    """One request as read from a client: its head, its body so far, and the counts its bounds use."""

    __slots__ = (
        "began",
        "body",
        "coding",
        "continue_wanted",
        "early",
        "expect",
        "head_done",
        "head_size",
        "headers",
        "hosts",
        "http10",
        "keep_alive",
        "length",
        "method",
        "size",
        "target",
        "too_large",
        "wire",
    )

    def __init__(self, began: float) -> None:
        self.began = began
        """Clock time the head began: the head-read deadline counts from it."""
        self.head_done = 0.0
        """Clock time the head ended: the body-read deadline counts from it."""
        self.head_size = 0
        """Bytes of the head as counted field by field (what a read holds before the body starts)."""
        self.hosts = 0
        """`Host` fields seen (exactly one is valid in HTTP/1.1)."""
        self.coding: str | None = None
        """The first `Transfer-Encoding` field's value, noted as the head is read."""
        self.expect: str | None = None
        """The first `Expect` field's value, noted as the head is read."""
        self.length: int | None = None
        """The body's declared `Content-Length` (None: not given, or not a number), noted as the head is
        read: what the body will hold is known before any of it arrives."""
        self.wire = 0
        """Body bytes as they came on the wire (chunk framing and extensions included)."""
        self.method = ""
        """Empty until the head has ended."""
        self.target = b""
        self.headers: list[tuple[str, str]] = []
        self.body: list[bytes] = []
        self.size = 0
        """Body bytes (decoded from chunks); the body holds at most `max_body_bytes` + 1 of them."""
        self.keep_alive = True
        self.http10 = False
        self.continue_wanted = False
        """The client sent `Expect: 100-continue` and waits for a go-ahead before its body."""
        self.early = False
        """Handed out before its body was read to the end (too large): the connection closes after it."""
        self.too_large = False
        """Its body passed `max_body_bytes` (as decoded, or as counted on the wire): answer 413."""


R = TypeVar("R", bound=Request)


class RequestHead(Generic[R]):
    """A request's head has ended (method, target, headers, version and keep-alive are read)."""

    __slots__ = ("request",)

    def __init__(self, request: R) -> None:
        self.request = request


class EndOfRequest(Generic[R]):
    """A request has ended; its body is on it. Check `too_large`: a chunked body may have passed the
    limit on the wire only in the read that ended it."""

    __slots__ = ("request",)

    def __init__(self, request: R) -> None:
        self.request = request


class BodyTooLarge(Generic[R]):
    """A request's body passed `max_body_bytes` before it ended: answer 413 now, read no more of it.

    The request carries the start of its body (at most `max_body_bytes` + 1 bytes), where its id is.
    """

    __slots__ = ("request",)

    def __init__(self, request: R) -> None:
        self.request = request


class Refusal:
    """The stream cannot be read on (malformed, a head over its bound, a `CONNECT`): answer and close."""

    __slots__ = ("reason", "status")

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason

    def __repr__(self) -> str:
        return f"Refusal({self.status}, {self.reason!r})"


RequestEvent = RequestHead[R] | EndOfRequest[R] | BodyTooLarge[R] | Refusal


_WATCHED_SIZES = frozenset((4, 6, 14, 17))
"""Name lengths of the fields the reader acts on: `Host`, `Expect`, `Content-Length`, `Transfer-Encoding`."""

_NAMES: dict[bytes, str] = {}
"""Field names as text, each decoded once: every head's fields share one string per name, so the
heads a proxy keeps (queued observations, chains) hold no copies of `Content-Type` of their own."""

_NAMES_KEPT = 512
"""Names `_NAMES` remembers: a peer inventing names cannot grow it; past it, names are decoded anew."""


def _field_name(raw: bytes) -> str:
    """A field name as text, remembered while `_NAMES` has room (look in `_NAMES` first)."""
    name = raw.decode("latin-1")
    if len(_NAMES) < _NAMES_KEPT:
        _NAMES[raw] = name
    return name


class _BadVersion(Exception):
    """Raised inside a parser callback for a version other than HTTP/1.x; the reader refuses with 505."""


class _HeadTooLarge(Exception):
    """Raised inside a parser callback; llhttp stops and the reader refuses with 431."""


class _UnknownCoding(Exception):
    """Raised inside a parser callback for a transfer coding other than `chunked`; refused with 501."""


class _Deaf:
    """A parser's protocol with no callbacks: what a released reader parses with."""


_DEAF: Final = _Deaf()


class RequestReader(Generic[R]):
    """Requests from one client connection, in order: feed it what the socket read.

    `new_request` makes the record of each request (a subclass may carry the server's own fields);
    `clock` stamps when heads begin and end, for the server's read deadlines. After a `Refusal` the
    reader takes nothing more.
    """

    def __init__(
        self, max_body_bytes: int, clock: Callable[[], float], new_request: Callable[[float], R]
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self.clock = clock
        self.new_request = new_request
        self.parser = httptools.HttpRequestParser(self)
        self.current: R | None = None
        """The request being read (its head or its body), if one has begun."""
        self.refused: Refusal | None = None
        self._events: list[RequestEvent[R]] = []
        self._head_bytes = 0
        self._head_raw = 0
        self._chunked_reads: list[R] = []
        """Chunked requests that got chunk framing in the read being parsed (see `_count_begun`)."""
        self._resuming: R | None = None
        """The request a stand-in head is being parsed for, after an upgrade it ignores (`_past_upgrade`)."""
        self._last_head: R | None = None
        """The request whose head the read being parsed ended (an upgrade is found at the end of a head)."""

    def feed(self, data: bytes) -> list[RequestEvent[R]]:
        """What `data` completed, in order; a `Refusal` ends the list and the stream.

        The list is the reader's own, reused by the next read: clear it once its events are handled,
        or it keeps their requests (their bodies) alive while the connection waits for the next.
        """
        events = self._events
        events.clear()
        if self.refused is not None:
            return events
        before = self.current
        try:
            rest: bytes | None = data
            while rest is not None:
                parsing, rest = rest, None
                try:
                    self.parser.feed_data(parsing)
                except httptools.HttpParserUpgrade as exc:
                    rest = self._past_upgrade(parsing[int(exc.args[0]) :])
                    if rest is None:
                        return events
                finally:
                    self._last_head = None  # never kept past the read: it holds its body
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, _HeadTooLarge):
                return self._refuse(431, str(cause))
            if isinstance(cause, _BadVersion):
                return self._refuse(505, str(cause))
            if isinstance(cause, _UnknownCoding):
                return self._refuse(501, str(cause))
            return self._refuse(400, f"malformed HTTP request: {exc}")
        counted = before if before is not None and before is self.current else None
        if counted is not None:
            self._count_raw(counted, len(data))
            if self.refused is not None:
                return events
        current = self.current
        if self._chunked_reads or (current is not None and current is not before and current.method):
            self._count_begun(before, counted, len(data))
        return events

    def release(self) -> None:
        """Let go of every request the reader still refers to, once its connection has closed.

        The parser calls back into this reader, so the two make a reference cycle that only the
        cyclic collector frees, and a few big bodies give it no reason to run: the request being
        read and the last read's events (a body each) would wait in the cycle until it does. The
        parser goes too, for one that calls nothing back: the reader is freed as soon as its
        connection lets go of it, and bytes fed after this are ignored.
        """
        self._events.clear()
        self._chunked_reads.clear()
        self.current = None
        self.parser = httptools.HttpRequestParser(_DEAF)  # the cycle broken: freed when let go

    def _past_upgrade(self, rest: bytes) -> bytes | None:
        """A request asked to switch protocols (`Upgrade: h2c` from `curl --http2`, a WebSocket
        handshake) or to tunnel (`CONNECT`): what of the read is left to parse, None once refused.

        llhttp ends such a request at its head and leaves the rest of the stream unread. The proxy
        does not switch (RFC 9110, 7.8 lets a server ignore `Upgrade`, which is hop-by-hop and never
        forwarded), so the request is served as plain HTTP/1.1: the end llhttp reported is taken
        back, and a fresh parser, given a head of the request's own framing in place of the one
        already read, reads its body and what follows it. A tunnel is refused, with nothing of it
        served.
        """
        events = self._events
        req = self._last_head
        if req is None or req.method == "CONNECT":
            events[:] = [event for event in events if event.request is not req]  # type: ignore[union-attr]
            self._refuse(
                501,
                "CONNECT is not served: mcp-proxy is a reverse proxy in front of one MCP server; send "
                "requests to its URL instead of using it as a forward proxy",
            )
            return None
        if events and isinstance(events[-1], EndOfRequest) and events[-1].request is req:
            events.pop()  # llhttp ended it at its head: its body is still to come
            self.current = req
        version = "1.0" if req.http10 else "1.1"
        framing = (
            "Transfer-Encoding: chunked"
            if req.coding is not None
            else f"Content-Length: {req.length if req.length is not None else 0}"
        )
        connection = "keep-alive" if req.keep_alive else "close"
        self._resuming = req
        self.parser = httptools.HttpRequestParser(self)
        head = f"{req.method} / HTTP/{version}\r\n{framing}\r\nConnection: {connection}\r\n\r\n"
        return head.encode("latin-1") + rest

    def _refuse(self, status: int, reason: str) -> list[RequestEvent[R]]:
        refusal = Refusal(status, reason)
        self.refused = refusal
        self._events.append(refusal)
        return self._events

    def _count_raw(self, req: R, size: int) -> None:
        """The whole read went into one request still unfinished: count its bytes as they came.

        httptools hands a header over only once it ends, and says nothing of chunk extensions or chunk
        framing, so a header that never ends and a body padded with extensions are bounded here, by the
        bytes they arrived in.
        """
        if not req.method:
            self._head_raw += size
            if self._head_raw > MAX_HEAD_BYTES:
                self._refuse(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
            return
        req.wire += size
        if req.wire > self.max_body_bytes and not req.early:
            req.too_large = True
            self._cut(req)

    def _count_begun(self, before: R | None, counted: R | None, size: int) -> None:
        """Charge a read to the requests `_count_raw` did not: begun in it, or ended in it with chunks.

        httptools reports neither a chunk's extensions nor where in the read a request began or ended,
        so such a request is charged the whole read, less its own head when it began there. That
        over-charges only requests pipelined in one read with others, by at most one read; it keeps a
        request padded with chunk extensions from slipping past `max_body_bytes` in the reads where it
        began or ended.
        """
        requests, self._chunked_reads = self._chunked_reads, []
        current = self.current
        if current is not None and current is not before and current.method and current not in requests:
            requests.append(current)  # begun in this read, its body still coming
        limit = self.max_body_bytes
        for req in requests:
            if req is counted or req.early or req.too_large:
                continue
            req.wire += size - (0 if req is before else req.head_size)
            if req.wire <= limit:
                continue
            req.too_large = True
            if req is self.current:
                self._cut(req)
                return
            # read to its end already (its EndOfRequest is in this read's events): answered 413 in turn

    def _cut(self, req: R) -> None:
        """A body over the limit: hand the request out now, read no more of it, close after its answer."""
        self.stop(req)
        self._events.append(BodyTooLarge(req))

    def stop(self, req: R) -> None:
        """Read no more of this request's body (the server answers it without one): what else of it
        arrives is discarded, and the connection closes after its answer."""
        req.early = True
        req.keep_alive = False
        if self.current is req:
            self.current = None

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge(f"request head larger than {MAX_HEAD_BYTES} bytes")

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self._resuming is not None:  # the stand-in head of a request whose own head was read
            return
        self.current = self.new_request(self.clock())
        self._head_bytes = 0
        self._head_raw = 0

    def on_url(self, url: bytes) -> None:
        req = self.current
        if req is not None and self._resuming is None:
            req.target += url
            self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        """One field: counted toward the head's bound, and kept (with the fields the reader acts on
        noted as they pass, so the head is not searched for them again); a trailer is only counted.

        Runs for every field of every request: the count is kept inline, and only a name of a
        watched field's length is lower-cased.
        """
        req = self.current
        if req is None or self._resuming is not None:
            return
        size = len(name)
        self._head_bytes += size + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge(f"request head larger than {MAX_HEAD_BYTES} bytes")
        if req.method:  # a trailer field of a chunked body: counted, never merged into the headers
            return
        headers = req.headers
        if len(headers) >= MAX_HEADERS:
            raise _HeadTooLarge(f"more than {MAX_HEADERS} header fields")
        # A field value excludes the whitespace around it (RFC 9110, 5.5); llhttp drops only the leading.
        field = (_NAMES.get(name) or _field_name(name), value.rstrip(b" \t").decode("latin-1"))
        headers.append(field)
        if size in _WATCHED_SIZES:
            watched = name.lower()
            if watched == b"host":
                req.hosts += 1
            elif watched == b"transfer-encoding" and req.coding is None:
                req.coding = field[1]
            elif watched == b"expect" and req.expect is None:
                req.expect = field[1]
            elif watched == b"content-length" and field[1].isdigit():
                req.length = int(field[1])

    def on_headers_complete(self) -> None:
        if self._resuming is not None:
            self._resuming = None  # its head was handed out already; its body comes next
            return
        req = self.current
        if req is None:
            return
        self._last_head = req
        parser = self.parser
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise _BadVersion(f"HTTP/{version} is not served here: send HTTP/1.1")
        coding = req.coding
        if coding is not None and coding.strip().lower() != "chunked":
            # llhttp de-chunks `gzip, chunked` and would hand over a body still gzip-coded, which the
            # proxy would then forward as if it were plain: a coding it does not decode is refused.
            raise _UnknownCoding(
                f"transfer coding {coding.strip()!r} is not supported: send the body chunked or with "
                "Content-Length"
            )
        req.method = parser.get_method().decode("latin-1")
        req.keep_alive = parser.should_keep_alive()
        req.http10 = version == "1.0"
        req.head_done = self.clock()
        req.head_size = self._head_bytes
        self._events.append(RequestHead(req))
        expect = req.expect
        if expect is not None and expect.lower() == "100-continue":
            declared = req.length
            if declared is not None and declared > self.max_body_bytes:
                # The client waits for a go-ahead it will not get: refuse now, without its body.
                req.too_large = True
                self._cut(req)
                return
            req.continue_wanted = True

    def on_body(self, body: bytes) -> None:
        req = self.current
        if req is None or req.early:
            return
        limit = self.max_body_bytes
        req.size += len(body)
        if req.size > limit:
            kept = sum(len(part) for part in req.body)
            req.body.append(body[: limit + 1 - kept])
            req.too_large = True
            self._cut(req)
            return
        req.body.append(body)

    def on_chunk_header(self) -> None:
        req = self.current
        if req is not None and (not self._chunked_reads or self._chunked_reads[-1] is not req):
            self._chunked_reads.append(req)

    def on_message_complete(self) -> None:
        req, self.current = self.current, None
        if req is None or req.early:
            return
        req.keep_alive = self.parser.should_keep_alive()
        self._events.append(EndOfRequest(req))


# -- client role: responses in ---------------------------------------------------------------------


class ResponseHead:
    """A final response head (interim 1xx heads are counted toward the bound and passed over).

    `trailers` is filled as the trailer fields of a chunked body arrive, complete once the response
    ends: fields sent after the body, never part of `headers` (RFC 9110, 6.5.1 forbids merging them
    into the header section), so what relays the head never sends them as header fields.
    """

    __slots__ = ("headers", "reason", "status", "trailers")

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]]) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.trailers: list[tuple[str, str]] = []


class EndOfResponse:
    """The response ended; `keep_alive` says whether the connection may carry another request.

    Two instances exist (`END_KEEP_ALIVE`, `END_CLOSE`): an end carries nothing else.
    """

    __slots__ = ("keep_alive",)

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive


END_KEEP_ALIVE = EndOfResponse(True)
END_CLOSE = EndOfResponse(False)


class ResponseFailed:
    """The response cannot be read on: `head_too_large` or `cut` (malformed, or a protocol switch)."""

    __slots__ = ("detail", "kind")

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail


ResponseEvent = ResponseHead | bytes | EndOfResponse | ResponseFailed
"""`bytes` is body data (chunk framing removed)."""


class ResponseReader:
    """Responses on one upstream connection, one per request sent: call `expect` before each.

    A response head larger than `max_head_bytes` (interim heads included, and judged both by the bytes
    a head arrived in and by its fields) fails the response; after a failure the reader takes nothing
    more.
    """

    def __init__(self, max_head_bytes: int, what: str = "upstream_max_head_bytes") -> None:
        self.max_head_bytes = max_head_bytes
        self.what = what
        """The setting that bounds heads, named in the failure."""
        self.parser = httptools.HttpResponseParser(self)
        self.awaiting = False
        """A request was sent and its final head has not ended."""
        self.head_bytes = 0
        """Bytes received since the request was sent while its final head is incomplete."""
        self.head_size = 0
        """Bytes of the status lines and header fields parsed since the request was sent (interim heads
        included): a head that ends inside the read crossing the limit is judged by this, not by
        `head_bytes`, which is only checked while a head is still unfinished."""
        self.failed = False
        self._no_body = False
        self._events: list[ResponseEvent] = []
        self._reason = b""
        self._headers: list[tuple[str, str]] = []
        self._head: ResponseHead | None = None
        """The final head handed out for the response being read: header fields after it are trailers."""
        self._trailer_size = 0

    def expect(self, no_body: bool) -> None:
        """A request went out: its response comes next. `no_body`: it answers HEAD (the head is all)."""
        self.awaiting = True
        self.head_bytes = 0
        self.head_size = 0
        self._no_body = no_body

    def feed(self, data: bytes) -> list[ResponseEvent]:
        """What `data` completed, in order; a `ResponseFailed` ends the list and the reader."""
        events = self._events
        events.clear()
        if self.failed:
            return events
        awaiting = self.awaiting
        if awaiting:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            return self._fail("cut", "the upstream switched protocols")
        except httptools.HttpParserError as exc:
            if self.failed:
                return events
            return self._fail("cut", f"malformed response from the upstream: {exc}")
        # Still no final head (interim 1xx heads count too): httptools would keep buffering it.
        if awaiting and self.awaiting and self.head_bytes > self.max_head_bytes:
            self._too_large()
        return events

    def release(self) -> None:
        """Let go of the last read's events (body pieces) once the connection has closed: the parser
        and this reader make a reference cycle that only the cyclic collector frees, so the parser
        goes too, for one that calls nothing back (bytes fed after this are ignored)."""
        self._events.clear()
        self._headers = []
        self._head = None
        self.awaiting = False
        self.parser = httptools.HttpResponseParser(_DEAF)

    def _fail(self, kind: str, detail: str) -> list[ResponseEvent]:
        self.failed = True
        self.awaiting = False
        self._events.append(ResponseFailed(kind, detail))
        return self._events

    def _too_large(self) -> None:
        self._fail("head_too_large", f"response head larger than {self.max_head_bytes} bytes ({self.what})")

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._reason = b""
        self._headers = []
        self._head = None
        self._trailer_size = 0

    def on_status(self, status: bytes) -> None:
        self._reason += status
        self.head_size += len(status) + 15  # "HTTP/1.1 200 " and CRLF around the reason

    def on_header(self, name: bytes, value: bytes) -> None:
        head = self._head
        if head is not None:  # after the final head: a trailer field of its chunked body
            self._trailer(head, name, value)
            return
        self.head_size += len(name) + len(value) + 4  # ": " and CRLF
        self._headers.append((_NAMES.get(name) or _field_name(name), value.decode("latin-1")))

    def _trailer(self, head: ResponseHead, name: bytes, value: bytes) -> None:
        """Keep a trailer field on its head's `trailers`, up to `max_head_bytes` of them: trailers are
        optional to a recipient (RFC 9110, 6.5.1), so past the bound they are dropped, not refused."""
        self._trailer_size += len(name) + len(value) + 4
        if self._trailer_size <= self.max_head_bytes:
            field = (_NAMES.get(name) or _field_name(name), value.rstrip(b" \t").decode("latin-1"))
            head.trailers.append(field)

    def on_headers_complete(self) -> None:
        if self.failed:
            return
        if self.awaiting and self.head_size + 2 > self.max_head_bytes:
            self._too_large()
            raise _HeadTooLarge  # stop llhttp here: nothing after this head is read
        status = self.parser.get_status_code()
        if status < 200:  # an interim 1xx head: the real one follows
            return
        self.awaiting = False
        head = self._head = ResponseHead(status, self._reason.decode("latin-1"), self._headers)
        self._events.append(head)
        if self._no_body:  # the answer to HEAD: llhttp would wait for the body its length announces
            self._events.append(END_CLOSE)

    def on_body(self, body: bytes) -> None:
        self._events.append(body)

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200 or self._no_body:
            return
        # llhttp forgets whether the connection stays open once the message is done: read it now.
        self._events.append(END_KEEP_ALIVE if self.parser.should_keep_alive() else END_CLOSE)


def keep_alive_timeout(headers: Iterable[tuple[str, str]]) -> float | None:
    """The `timeout=N` of a `Keep-Alive` response header: how long the server keeps an idle connection."""
    value = header(headers, "keep-alive")
    if value is None:
        return None
    for part in value.split(","):
        name, _, number = part.partition("=")
        if name.strip().lower() == "timeout":
            number = number.strip().strip('"')
            try:
                seconds = float(number)
            except ValueError:
                return None
            return seconds if seconds >= 0 and seconds == seconds else None  # no NaN, nothing negative
    return None


# -- heads out -------------------------------------------------------------------------------------

_TOKEN_CHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN = re.compile(_TOKEN_CHARS)
"""RFC 9110 token: what a method and a header field name may consist of."""
_TOKENS = re.compile(rf"{_TOKEN_CHARS}(?:\t{_TOKEN_CHARS})*")
"""Tokens joined by tabs (a tab is no token character): every field name of a head in one match."""
NOT_IN_TARGET = re.compile(r"[^\x21-\x7e]")
"""Anything but visible ASCII: a request target holds no space, control or other character raw
(a client percent-encodes them), since each would end or bend the request line."""
_NOT_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Control bytes a field value never holds (CR and LF would end the field; HTAB is allowed)."""
_SAFE_HEAD = re.compile(
    rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ /[\x21-\x7e]* HTTP/1\.1\r\n"  # request line, origin form
    rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n\x00]*\r\n)*"  # field lines: name, colon, no CR/LF/NUL
    rb"\r\n"
)
"""A head that is one request and nothing else: each line a request line or a field, CR and LF only
as line ends, no NUL anywhere."""


class HeadError(ValueError):
    """A request head that cannot go on the wire as given: it would change where the message ends."""


def origin_form(target: str) -> str:
    """Check that `target` is an origin-form request target (`/path?query`); HeadError if not.

    An absolute URL (`http://host/path`) is refused here, not sent: servers on h11 (uvicorn without
    httptools, which `pip install mcp` gives) route on the raw target and answer 404 to it.
    """
    if not target.startswith("/") or NOT_IN_TARGET.search(target):
        raise HeadError(f"not an origin-form request target: {target[:200]!r}")
    return target


def encode_request_head(
    method: str, target: str, host: str, headers: Iterable[tuple[str, str]], body_length: int | None
) -> bytes:
    """The request line and headers as bytes, framed in this one place for every upstream request.

    `host` is the upstream's `Host`, added here so no caller sends its own; callers' `Host`,
    `Content-Length` and `Transfer-Encoding` are dropped, and `body_length` (None: no body, no
    length) alone frames the body, so no head ever carries two framings.
    Refuses (HeadError) a method or field name that is not a token, a target that is not origin form,
    and a value with CR, LF or another control byte, since each would let one message end early or
    smuggle a second one onto a pooled connection.
    """
    if not _TOKEN.fullmatch(method):
        raise HeadError(f"not an HTTP method token: {method[:100]!r}")
    lines = [f"{method} {origin_form(target)} HTTP/1.1\r\nHost: {host}\r\n"]
    names: list[str] = []
    values: list[str] = []
    for name, value in headers:
        if len(name) in (4, 14, 17) and name.lower() in ("host", "content-length", "transfer-encoding"):
            continue
        names.append(name)
        values.append(value)
        lines.append(f"{name}: {value}\r\n")
    # One scan of all names and one of all values: the head is framed for every relayed request.
    if names and not _TOKENS.fullmatch("\t".join(names)):
        bad = next(n for n in names if not _TOKEN.fullmatch(n))
        raise HeadError(f"not a header field name: {bad[:100]!r}")
    joined = "".join(values)
    if not joined.isprintable() and _NOT_IN_VALUE.search(joined):  # printable: no control byte at all
        bad = next(n for n, v in zip(names, values, strict=True) if _NOT_IN_VALUE.search(v))
        raise HeadError(f"control character in the value of header {bad}")
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}\r\n")
    lines.append("\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        culprit = next((n for n, v in zip(names, values, strict=True) if not _is_latin1(n + v)), None)
        where = f"the value of header {culprit}" if culprit is not None else "the request line or Host"
        raise HeadError(f"{where} holds characters outside Latin-1") from None


def encode_request(
    method: str,
    target: str,
    host: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    apart: bool = False,
) -> bytes:
    """A whole request (head and body) for a pooled connection; HeadError if it cannot be framed.

    A body, or a method that carries one, gets `Content-Length`; the head is matched once more against
    `_SAFE_HEAD` before it is returned, the last line of defence should `encode_request_head` ever let
    a stray line break through: on a connection other clients share it would smuggle a second request.
    With `apart`, the head alone (its length the body's): the caller writes the body after it, so a
    big body is not copied behind its head.
    """
    length = len(body) if body or method in ("POST", "PUT", "PATCH") else None
    head = encode_request_head(method, target, host, headers, length)
    if _SAFE_HEAD.fullmatch(head) is None:
        raise HeadError("the request head holds CR, LF or NUL inside a line: nothing sent")
    return head if apart else head + body


def encode_response_head(
    status: int, reason: str | None, headers: Iterable[tuple[str, str]], length: int | None, chunked: bool
) -> bytes:
    """A response head: `length` frames the body, else `chunked`, else the connection's close does.

    The caller's headers go out as given (it has dropped its own framing headers), then the framing.
    """
    lines = [f"HTTP/1.1 {status} {reason or _REASONS.get(status, 'Unknown')}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers]
    if length is not None:
        lines.append(f"Content-Length: {length}\r\n")
    elif chunked:
        lines.append("Transfer-Encoding: chunked\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _is_latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True
