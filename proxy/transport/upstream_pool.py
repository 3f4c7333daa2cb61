"""A lean HTTP/1.1 client: keep-alive connections to the one upstream, for every upstream request.

aiohttp's client costs about 120 µs of CPU per request on this project's benchmark machine (request
building, tracing hooks, cookie and timer machinery), three times what relaying the bytes costs. The
proxy needs none of that: it knows its one upstream, sends headers it has already filtered, and
streams the body back. So this module speaks HTTP/1.1 over asyncio protocols through the sans-IO core
(`proxy.framing.h1`: `encode_request` frames each request, a `ResponseReader` reads the answers).
Pass-through, both bridges' legs and the era probe all ride it.

Callers give a method, the client's path and raw query, headers and body, never a request line or a
target: the origin-form target comes from the upstream URL here (`Upstream.request_target`), and the
head, `Host` included, is framed in one place, which refuses what would break the message's framing.

Bounded: the pool holds at most `limit` connections (a request past it waits for one, within the
head timeout), a response head larger than `max_head_bytes` fails the request and closes its
connection, a response body never buffers more than `HIGH_WATER` bytes before reading from the
upstream socket pauses, so a 10 MiB result crosses in small pieces, and a body that is not an SSE
stream fails once the upstream sends none of it for `body_idle_timeout` (`proxy.transport.body_deadlines`).

Idle connections are closed before the upstream would close them: after `idle_timeout` seconds, or a
little before the `timeout=N` of the upstream's `Keep-Alive` header when it sends one, so a request is
not written onto a connection the server is closing. Should that race be lost anyway, a request on a
reused connection that closes before any byte of its answer arrived is sent once more on a fresh
connection, if a second copy does no harm: a GET or DELETE, or a JSON-RPC body of notifications,
answers to the server and requests that only read or set a state (`proxy.wire.mcp.repeatable`). A
closed connection does not prove the server never read the request: it may have run a `tools/call`
and then died, and a second one would run it again. Never a request on a fresh connection, never
after a byte.

Guarded: a refused head never takes a connection, and every failure after one was taken gives it back
or closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Protocol, cast

import orjson

from proxy.framing.h1 import (
    EndOfResponse,
    HeadError,
    ResponseHead,
    ResponseReader,
    encode_request,
    header,
    keep_alive_timeout,
)
from proxy.framing.http import Upstream
from proxy.logs import get_logger
from proxy.transport.body_deadlines import BODY_STALLED, BodyDeadlines
from proxy.transport.dialing import connect
from proxy.transport.tls_failures import handshake_failed
from proxy.wire.mcp import repeatable

HIGH_WATER = 256 * 1024
"""Body bytes held for the relay before the upstream socket is paused."""
LOW_WATER = 64 * 1024
"""Body bytes held below which a paused upstream socket resumes."""
DEFAULT_IDLE_TIMEOUT = 4.0
"""Seconds an idle connection is kept by default (the `upstream_idle_timeout` setting): below the 5 s
keep-alive of uvicorn, which most SDK servers run on and which sends no `Keep-Alive` header."""
IDLE_SWEEP = 0.25
"""Longest pause between two checks of idle connections' deadlines while any is idle."""
KEEP_ALIVE_MARGIN = 1.0
"""Seconds an idle connection is closed before the upstream's announced `Keep-Alive: timeout` (at most
half of it): the upstream's clock starts when it wrote the answer, ours when the answer was read."""


HEAD_SWEEP = 0.1
"""Seconds between checks of awaited heads' deadlines (a head timeout fires at most this late)."""


DEFAULT_MAX_HEAD_BYTES = 64 * 1024
"""Largest response head accepted by default (the `upstream_max_head_bytes` setting)."""


class UpstreamError(Exception):
    """The upstream could not be reached, broke the exchange off, or the request could not be framed.

    `kind` is `unreachable`, `cut`, `head_too_large` (the response head passed `max_head_bytes`; the
    connection is closed), `body_timeout` (the upstream stopped sending a body that is not an SSE
    stream; the connection is closed), `unsendable` (a head the core's `encode_request` refused;
    nothing was sent and no connection was taken) or `over_budget` (the proxy had no room to hold the
    answer's message: `proxy.transport.response_budget`).
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind

    @property
    def never_sent(self) -> bool:
        """Whether the upstream never got the request: no connection to it, or a head not framed."""
        return self.kind in ("unreachable", "unsendable")


class ResponseLink(Protocol):
    """What a response asks of whatever feeds it: a pool connection, or a message channel's exchange."""

    paused: bool
    transport: asyncio.Transport | None

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def finish(self, *, reusable: bool) -> None: ...


class UpstreamResponse:
    """One upstream response: its head at once, its body as chunks arrive (see `chunks`)."""

    __slots__ = (
        "_chunks",
        "_conn",
        "_done",
        "_due",
        "_error",
        "_listener",
        "_reading",
        "_waiter",
        "buffered",
        "complete",
        "content_length",
        "event_stream",
        "headers",
        "keep_alive_header",
        "reason",
        "status",
        "trailers",
        "until_close",
    )

    def __init__(self, conn: ResponseLink, status: int, reason: str, headers: list[tuple[str, str]]) -> None:
        self._conn: ResponseLink | None = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self.trailers: list[tuple[str, str]] = []
        """The trailer fields of a chunked body, complete once it ended: kept apart from `headers`,
        never relayed (the client's framing may differ), recorded with the exchange's end."""
        # One pass over the head for the four fields the pool reads (this runs for every answer).
        length = coding = None
        keep_alive = event_stream = False
        for name, value in headers:
            size = len(name)
            if size == 14 and length is None and name.lower() == "content-length":
                length = value
            elif size == 17 and coding is None and name.lower() == "transfer-encoding":
                coding = value
            elif size == 10 and not keep_alive and name.lower() == "keep-alive":
                keep_alive = True
            elif size == 12 and name.lower() == "content-type":
                event_stream = value.lstrip()[:17].lower() == "text/event-stream"
        self.content_length: int | None = int(length) if length is not None and length.isdigit() else None
        chunked = coding is not None and coding.rstrip().lower().endswith("chunked")
        self.until_close = self.content_length is None and not chunked
        """No length and no chunking: the body ends where the connection does (HTTP/1.0 framing)."""
        self.keep_alive_header = keep_alive
        """The upstream sent `Keep-Alive` (it may announce how long it keeps an idle connection)."""
        self.event_stream = event_stream
        """The body is an SSE stream, quiet for as long as its server likes (no body idle deadline)."""
        self._chunks: deque[bytes] = deque()
        self.buffered = 0
        """Body bytes that arrived and were not yet taken."""
        self.complete = False
        """The whole body has arrived (and sits in the buffer): a plain field the relay reads per answer."""
        self._done = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._listener: Callable[[], None] | None = None
        self._reading = False
        """A read from the upstream is being parsed: the listener hears of what it brings after it."""
        self._due = False
        """Bytes or the end arrived in the read under way."""

    def header(self, name: str) -> str | None:
        """The first value of a header, by case-insensitive name."""
        return header(self.headers, name)

    def unread(self) -> bool:
        """Body bytes reached the proxy that its reader has not taken yet (here, or in the socket)."""
        if self._chunks or (self._waiter is not None and self._waiter.done()):
            return True
        conn = self._conn
        sock = conn.transport.get_extra_info("socket") if conn is not None and conn.transport else None
        if sock is None or self._done:
            return False
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
        return bool(readable)

    def body_if_complete(self) -> bytes | None:
        """The whole body at once when it has all arrived already (a small result usually has), else None."""
        return self.take_buffered() if self.complete else None

    def take_buffered(self) -> bytes:
        """The body bytes that arrived so far, taken at once (`chunks` goes on from there)."""
        chunks, self._chunks = self._chunks, deque()
        self.buffered = 0
        conn = self._conn
        if conn is not None and conn.paused:
            conn.resume()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def take_chunks(self) -> deque[bytes]:
        """The body chunks that arrived so far, each as it arrived, taken at once."""
        chunks, self._chunks = self._chunks, deque()
        self.buffered = 0
        conn = self._conn
        if conn is not None and conn.paused:
            conn.resume()
        return chunks

    def listen(self, listener: Callable[[], None] | None) -> None:
        """Call `listener` when body bytes or the body's end arrive (once per upstream read), instead
        of waking `chunks`; None stops it. Whoever listens takes what arrived (`take_chunks`)."""
        self._listener = listener
        self._due = False

    @property
    def ended(self) -> bool:
        """The body ended, whole or cut (`error` says which); what arrived may still be buffered."""
        return self._done

    @property
    def error(self) -> UpstreamError | None:
        """Why the body was cut short, once it was (None while it goes on, or when it ended whole)."""
        return self._error

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; raises UpstreamError("cut", ...) if the upstream breaks it off."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self.buffered -= len(chunk)
                conn = self._conn
                if conn is not None and conn.paused and self.buffered < LOW_WATER:
                    conn.resume()
                yield chunk
                continue
            if self._error is not None:
                raise self._error
            if self._done:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def read(self, limit: int, what: str) -> bytes:
        """The whole body, at most `limit` bytes; past it UpstreamError("cut") naming `what` and the limit."""
        parts: list[bytes] = []
        size = 0
        async for chunk in self.chunks():
            size += len(chunk)
            if size > limit:
                raise UpstreamError("cut", f"{what} larger than {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Done with the response: its connection goes back to the pool if it can carry another."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finish(reusable=self._done and self._error is None)

    def close(self) -> None:
        """Abandon the response: its connection is closed (the upstream sees the call dropped)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finish(reusable=False)

    def feed(self, chunk: bytes) -> None:
        """Body bytes arrived (what feeds a response that no pool connection carries calls this)."""
        self._feed(chunk)

    def end(self, error: UpstreamError | None = None) -> None:
        """The body ended, whole or with `error` (for a response that no pool connection carries)."""
        self._end(error)

    def _feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self.buffered += len(chunk)
        conn = self._conn
        if conn is not None and self.buffered > HIGH_WATER and not conn.paused:
            conn.pause()
        self._wake()

    def _end(self, error: UpstreamError | None) -> None:
        if self._done:
            return
        self._done = True
        self._error = error
        self.complete = error is None
        self._wake()

    def heard(self) -> None:
        """The read under way ended: the listener hears of what it brought (one call for the read)."""
        if self._due:
            self._due = False
            listener = self._listener
            if listener is not None:
                listener()

    def _wake(self) -> None:
        if self._listener is not None:
            if self._reading:
                self._due = True
            else:
                self._listener()
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One keep-alive connection to the upstream, carrying one exchange at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.reader = ResponseReader(pool.max_head_bytes)
        self.pending: PendingHead | None = None
        """The request sent whose response head has not arrived."""
        self.response: UpstreamResponse | None = None
        self.paused = False
        self.uses = 0
        """Requests sent on this connection: past one, it is a reused connection."""
        self.ttl = pool.idle_timeout
        """Seconds this connection may stay idle (shortened by the upstream's `Keep-Alive: timeout`)."""
        self.reads = 0
        """Reads from the upstream, for the body idle deadline (`BodyDeadlines`)."""
        self.unwatched = False
        """A response head arrived in the read under way, its body not an SSE stream: the body idle
        deadline watches it once the read is parsed, unless the body ended in the same read (a small
        answer's body usually arrives with its head, and then there is nothing to watch)."""
        self.idle_deadline = 0.0
        self.alive = True
        self.lost = False
        self.keep_alive = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if self.pending is None and self.response is None:
            self._close()  # bytes nobody asked for: this connection cannot be trusted with another request
            return
        # A listening relay hears of a whole read at once, once the core has parsed it: it may write the
        # read's chunks together, and end the exchange (freeing this connection) from there.
        listening = self.response
        if listening is not None and listening._listener is not None:
            listening._reading = True
        else:
            listening = None
        for event in self.reader.feed(data):
            if isinstance(event, bytes):  # body data, the most frequent event by far
                if self.response is not None:
                    self.response._feed(event)
            elif isinstance(event, ResponseHead):
                self._headed(event)
            elif isinstance(event, EndOfResponse):
                self.keep_alive = event.keep_alive
                self.unwatched = False  # the body ended in the read that brought its head: nothing to watch
                if self.response is not None:
                    self.response._end(None)
            else:
                if listening is not None:
                    listening._reading = False  # it hears of the failure at once, with what came before
                self._fail(event.kind, event.detail)
                return
        if self.unwatched:  # a head came and its body goes on past this read
            self.unwatched = False
            self.pool.body_deadlines.watch(self, self.pool.loop())
        if listening is not None:
            listening._reading = False
            listening.heard()

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        self.lost = True
        self.reader.release()
        self.pool.forget(self)
        pending = self.pending
        lost_early = pending is not None and self.reader.head_bytes == 0 and self.uses > 1
        if (
            pending is not None
            and lost_early
            and not pending.retried
            and may_resend(pending.data, pending.body)
        ):
            # A reused connection closed before a byte of the answer: most likely the upstream closed
            # it idle as the request went out. A request that may be sent twice goes once more, fresh.
            self.pending = None
            self.pool.retry(pending, exc)
            return
        response = self.response
        if exc is None and response is not None and response.until_close:
            response._end(None)  # a clean close is how a body without length or chunking ends
        if pending is not None or response is not None:
            detail = f"the upstream closed the connection{f': {exc}' if exc else ''}"
            if lost_early and pending is not None and not pending.retried:
                detail += " before answering; not sent again, since the server may have acted on it"
            self._fail("cut", detail)

    def _headed(self, head: ResponseHead) -> None:
        response = UpstreamResponse(self, head.status, head.reason, head.headers)
        response.trailers = head.trailers  # filled by the reader as they arrive
        self.response = response
        if not response.event_stream:
            self.unwatched = True
        if response.keep_alive_header:
            announced = keep_alive_timeout(head.headers)
            if announced is not None:
                self.ttl = self.pool.ttl_for(announced)
        pending, self.pending = self.pending, None
        if pending is not None and not pending.future.done():
            pending.future.set_result(response)

    # the pool's side
    def send(self, pending: PendingHead) -> None:
        """Write one request; its future resolves with the response head."""
        assert self.transport is not None
        self.uses += 1
        self.pending = pending
        self.keep_alive = False
        self.reader.expect(pending.head_only)
        self.pool.write_soon(self.transport, pending.data)
        if pending.body:
            self.pool.write_soon(self.transport, pending.body)

    def finish(self, *, reusable: bool) -> None:
        """The exchange on this connection is over: back to the pool, or closed."""
        self.response = None
        self.pending = None
        if self.paused:
            self.resume()
        if reusable and self.alive and self.keep_alive and self.ttl > 0:
            self.pool.put(self)
        else:
            self._close()

    def pause(self) -> None:
        if self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and self.paused:
            self.paused = False
            self.transport.resume_reading()

    def reading_body(self) -> bool:
        """The response this connection carries has a body still to come (`BodyDeadlines`)."""
        response = self.response
        return self.alive and response is not None and not response._done

    def stalled(self, detail: str) -> None:
        """The upstream sent none of the body for the body idle deadline: the body fails, the
        connection closes (what it would send later could not be told from the next answer)."""
        self._fail(BODY_STALLED, detail)

    def _fail(self, kind: str, detail: str) -> None:
        error = UpstreamError(kind, detail)
        pending, self.pending = self.pending, None
        if pending is not None and not pending.future.done():
            pending.future.set_exception(error)
        if self.response is not None:
            self.response._end(error)
        self._close()

    def _close(self, *, now: bool = False) -> None:
        """Close the connection; `now` skips a TLS connection's goodbye (the proxy is stopping)."""
        self.alive = False
        if self.transport is not None:
            if now:
                self.transport.abort()
            else:
                self.transport.close()
                if not self.lost:
                    self.pool.closing.add(self)  # until connection_lost: a TLS goodbye can take a while


def _expire(head: asyncio.Future[UpstreamResponse]) -> None:
    if not head.done():
        head.set_exception(TimeoutError())


def may_resend(data: bytes, apart: bytes = b"") -> bool:
    """Whether a framed request (its body in `data`, or `apart`) may go to the upstream a second time
    (see the module's docstring)."""
    head, _, body = data.partition(b"\r\n\r\n")
    body = apart or body
    method = head.split(b" ", 1)[0]
    if method in (b"GET", b"HEAD", b"DELETE", b"OPTIONS"):
        return True
    return method == b"POST" and repeatable(body)


def _described(data: bytes, apart: bytes) -> str:
    """`POST tools/list` (the HTTP method and the JSON-RPC methods of a framed request), for the log."""
    head, _, body = data.partition(b"\r\n\r\n")
    body = apart or body
    method = head.split(b" ", 1)[0].decode("ascii", "replace")
    try:
        value = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return method
    messages = value if isinstance(value, list) else [value]
    named = [m["method"] for m in messages if isinstance(m, dict) and isinstance(m.get("method"), str)]
    return " ".join([method, *named[:5]])


BODY_APART = 64 * 1024
"""Bodies at least this big are written after their head, not copied behind it: the framed request is
kept until its answer's head (for the one retry), and a copy of every big body in flight would be
kept with it."""

Framed = tuple[bytes, bytes]
"""A request framed for the upstream: all of it and nothing, or its head and a big body apart."""


class PendingHead:
    """A request sent, its response head awaited: the future, the bytes (for the one retry), and what to
    undo if it fails."""

    __slots__ = ("body", "conn", "data", "future", "head_only", "pool", "retried")

    def __init__(self, pool: UpstreamPool, conn: _Connection, framed: Framed, head_only: bool) -> None:
        self.pool = pool
        self.conn = conn
        self.data, self.body = framed
        """The request as written: all of it, or its head with a big body `body` apart (else empty)."""
        self.head_only = head_only
        self.retried = False
        self.future: asyncio.Future[UpstreamResponse] = pool.loop().create_future()

    def result(self) -> UpstreamResponse:
        """The head, once the future is done; a failure drops the connection and is raised."""
        self.pool._deadlines.pop(self, None)
        try:
            return self.future.result()
        except BaseException:
            self.conn.finish(reusable=False)
            raise

    def drop(self) -> None:
        """The caller gave up waiting (its client left): the upstream sees the request dropped."""
        self.pool._deadlines.pop(self, None)
        self.future.cancel()
        self.conn.finish(reusable=False)


class UpstreamPool:
    """Keep-alive HTTP/1.1 connections to one upstream host, at most `limit` of them at a time.

    Counters (read by tests and metrics): `retried`, requests sent a second time after a reused
    connection closed before answering; `idle_closed`, idle connections closed at their deadline.
    """

    def __init__(
        self,
        upstream: Upstream,
        *,
        limit: int = 2048,
        connect_timeout: float = 5.0,
        head_timeout: float = 60.0,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        body_idle_timeout: float | None = None,
    ) -> None:
        """`body_idle_timeout`: seconds a body that is not an SSE stream may go without a byte before it
        fails (None: as long as `head_timeout`)."""
        self.upstream = upstream
        self.max_head_bytes = max_head_bytes
        self.idle_timeout = idle_timeout
        self.host = upstream.host
        self.port = upstream.port
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.head_timeout = head_timeout
        self.body_deadlines = BodyDeadlines(head_timeout if body_idle_timeout is None else body_idle_timeout)
        """The idle deadline of response bodies that are not SSE streams."""
        tls = upstream.scheme == "https"
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if tls else None
        self._idle: deque[_Connection] = deque()
        self._open = 0
        self.closing: set[_Connection] = set()
        """Connections closed and not yet gone (a TLS connection waits for the upstream's goodbye)."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._batch: list[tuple[asyncio.Transport, bytes]] = []
        self._deadlines: dict[PendingHead, float] = {}
        """Heads awaited, with the loop time by which each must arrive."""
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_every = min(HEAD_SWEEP, head_timeout / 4)
        self._idle_sweeper: asyncio.TimerHandle | None = None
        self._idle_sweep_every = min(IDLE_SWEEP, idle_timeout / 2) if idle_timeout > 0 else IDLE_SWEEP
        self._retrying: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.retried = 0
        self.idle_closed = 0
        self.on_unreachable: Callable[[str], None] | None = None
        """Told why, when a connection attempt fails: a server that is gone may come back in another era."""

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, remembered: each `asyncio.get_running_loop()` costs a getpid system call,
        and the traffic path asks for it several times per request."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    async def request(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> UpstreamResponse:
        """Send one request and return once the response head has arrived (within `head_timeout` seconds).

        `path` is the client's path (`/` and the endpoint's own path both name the upstream's MCP
        endpoint) and `query` the client's raw query; the target is derived from the upstream URL
        (`Upstream.request_target`). Raises TimeoutError past the timeout, UpstreamError when the
        upstream cannot be reached or breaks the connection before answering, or the head cannot be
        framed.
        """
        framed = self._frame(method, path, query, headers, body)
        pending = self._send_idle(framed, method)
        if pending is None:  # no warm connection: connect, or wait for one, within the same budget
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.head_timeout
            async with asyncio.timeout_at(deadline):
                conn = await self._acquire()
            pending = self._send(conn, framed, method, deadline)
        try:
            await pending.future
        except asyncio.CancelledError:
            pending.drop()
            raise
        except BaseException:
            pass  # result() raises it again, once the connection is dropped
        return pending.result()

    def request_nowait(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> PendingHead | None:
        """Send one request on a warm connection at once; None when there is none idle.

        The hot path of pass-through: no task, no await; the caller learns of the head through the
        returned future (a done callback) and collects it with `PendingHead.result`. A head that
        cannot be framed raises UpstreamError("unsendable") before any connection is taken.
        """
        if self._closed or not self._idle:
            return None
        return self._send_idle(self._frame(method, path, query, headers, body), method)

    def _frame(
        self, method: str, path: str, query: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> Framed:
        upstream = self.upstream
        apart = len(body) >= BODY_APART
        try:
            data = encode_request(
                method, upstream.request_target(path, query), upstream.host_header, headers, body, apart=apart
            )
        except HeadError as exc:
            raise UpstreamError("unsendable", str(exc)) from None
        return (data, body) if apart else (data, b"")

    def _send_idle(self, framed: Framed, method: str) -> PendingHead | None:
        conn = None if self._closed else self._take_idle()
        if conn is None:
            return None
        deadline = self.loop().time() + self.head_timeout
        return self._send(conn, framed, method, deadline)

    def _send(self, conn: _Connection, framed: Framed, method: str, deadline: float) -> PendingHead:
        pending = PendingHead(self, conn, framed, method == "HEAD")
        conn.send(pending)
        # One sweep for every head awaited, not a timer each: libuv timers cost the hot path more
        # than the few microseconds a dict entry does, and a head timeout needs no finer grain.
        self._deadlines[pending] = deadline
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every, self._sweep)
        return pending

    def retry(self, pending: PendingHead, exc: Exception | None) -> None:
        """A reused connection closed before any byte of `pending`'s answer: send it once more, fresh."""
        pending.retried = True
        self.retried += 1
        get_logger().info(
            "upstream_request_retried",
            reason="the upstream closed a reused connection before answering; sent again on a new one",
            request=_described(pending.data, pending.body),
            error=str(exc) if exc else None,
        )
        task = asyncio.get_running_loop().create_task(self._resend(pending), name="upstream-retry")
        self._retrying.add(task)
        task.add_done_callback(self._retrying.discard)

    async def _resend(self, pending: PendingHead) -> None:
        future = pending.future
        deadline = self._deadlines.get(pending)
        if deadline is None or future.done():
            return  # given up on meanwhile
        try:
            async with asyncio.timeout_at(deadline):
                conn = await self._acquire(fresh=True)
        except TimeoutError:
            _expire(future)
            return
        except UpstreamError as exc:
            if not future.done():
                future.set_exception(exc)
            return
        except asyncio.CancelledError:  # the pool is closing
            if not future.done():
                future.set_exception(UpstreamError("unreachable", "the proxy is shutting down"))
            raise
        if future.done():  # timed out or dropped while connecting: the new connection waits idle
            conn.keep_alive = True
            conn.finish(reusable=True)
            return
        pending.conn = conn
        conn.send(pending)

    def write_soon(self, transport: asyncio.Transport, data: bytes) -> None:
        """Write at the end of this loop turn, with the other requests of the turn, back to back."""
        batch = self._batch
        batch.append((transport, data))
        if len(batch) == 1:
            self.loop().call_soon(self._write_batch)

    def _write_batch(self) -> None:
        batch, self._batch = self._batch, []
        for transport, data in batch:
            if not transport.is_closing():
                transport.write(data)

    def _sweep(self) -> None:
        """Fail the heads whose deadline passed; run again while any is awaited."""
        self._sweeper = None
        deadlines = self._deadlines
        now = asyncio.get_running_loop().time()
        for pending, deadline in list(deadlines.items()):
            if deadline <= now:
                del deadlines[pending]
                _expire(pending.future)
        if deadlines:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every, self._sweep)

    def ttl_for(self, announced: float) -> float:
        """Idle seconds for a connection whose upstream announced `Keep-Alive: timeout=announced`.

        A little less than announced (see `KEEP_ALIVE_MARGIN`), never more than `idle_timeout`; 0 for
        an upstream that keeps no idle connection at all.
        """
        return max(0.0, min(self.idle_timeout, announced - min(KEEP_ALIVE_MARGIN, announced / 2)))

    def _sweep_idle(self) -> None:
        """Close idle connections past their deadline, before the upstream closes them under a request."""
        self._idle_sweeper = None
        idle = self._idle
        now = time.monotonic()
        expired = [conn for conn in idle if conn.idle_deadline <= now]
        for conn in expired:
            idle.remove(conn)
            self.idle_closed += 1
            conn._close()
        if idle and not self._closed:
            self._idle_sweeper = asyncio.get_running_loop().call_later(
                self._idle_sweep_every, self._sweep_idle
            )

    async def _acquire(self, *, fresh: bool = False) -> _Connection:
        """A connection for one request: an idle one (unless `fresh`), a new one, or the next one freed."""
        while True:
            if self._closed:
                raise UpstreamError("unreachable", "the proxy is shutting down")
            conn = None if fresh else self._take_idle()
            if conn is not None:
                return conn
            if self._open < self.limit:
                return await self._connect()
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then cancelled or timed out: hand the turn to the next one
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        idle = self._idle
        while idle and idle[0].idle_deadline <= now:  # oldest first: close the ones about to expire
            self.idle_closed += 1
            idle.popleft()._close()
        while idle:
            conn = idle.pop()  # the most recently used: warm, and least likely to be closed upstream
            if conn.idle_deadline <= now:
                self.idle_closed += 1
                conn._close()
            elif conn.alive and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self) -> _Connection:
        self._open += 1
        try:
            async with asyncio.timeout(self.connect_timeout):
                _transport, conn = await connect(
                    lambda: _Connection(self), self.host, self.port, tls=self._ssl
                )
        except TimeoutError:
            raise self._connect_failed(f"connect timed out after {self.connect_timeout}s") from None
        except ssl.SSLError as exc:
            raise self._connect_failed(handshake_failed(exc)) from None
        except OSError as exc:
            raise self._connect_failed(str(exc) or type(exc).__name__) from None
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise
        return conn

    def _connect_failed(self, why: str) -> UpstreamError:
        """A connection attempt failed: its place in the limit is freed, and whoever listens is told."""
        self._open -= 1
        self._wake_one()
        if self.on_unreachable is not None:
            self.on_unreachable(f"the upstream is unreachable ({why}); it may come back in another era")
        return UpstreamError("unreachable", why)

    def put(self, conn: _Connection) -> None:
        """A connection finished its exchange cleanly and may carry another, until its idle deadline."""
        if self._closed:
            conn._close(now=True)
            return
        conn.idle_deadline = time.monotonic() + conn.ttl
        self._idle.append(conn)
        if self._idle_sweeper is None:
            self._idle_sweeper = asyncio.get_running_loop().call_later(
                self._idle_sweep_every, self._sweep_idle
            )
        self._wake_one()

    def forget(self, conn: _Connection) -> None:
        """A connection closed: it no longer counts against the limit."""
        self._open -= 1
        self.closing.discard(conn)
        with contextlib.suppress(ValueError):  # busy, not idle
            self._idle.remove(conn)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @property
    def open_connections(self) -> int:
        """Connections open now (busy and idle)."""
        return self._open

    def close(self) -> None:
        """Close every idle connection and refuse new requests; busy ones close as their exchanges end."""
        self._closed = True
        if self._idle_sweeper is not None:
            self._idle_sweeper.cancel()
            self._idle_sweeper = None
        self.body_deadlines.close()
        for task in list(self._retrying):
            task.cancel()
        while self._idle:
            self._idle.pop()._close(now=True)
        for conn in list(self.closing):  # goodbyes still under way would outlive the proxy
            conn._close(now=True)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


class UpstreamClient(Protocol):
    """What the relay, the bridges and the era probe ask of the upstream.

    `UpstreamPool` speaks Streamable HTTP to it; `proxy.transport.channel_upstream.ChannelUpstream`
    offers the same interface over message channels (a stdio child, an HTTP+SSE server).
    """

    head_timeout: float

    async def request(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> UpstreamResponse: ...

    def request_nowait(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> PendingHead | None: ...
