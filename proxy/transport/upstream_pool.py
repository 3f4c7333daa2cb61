"""A lean HTTP/1.1 client: keep-alive connections to the one upstream, for every upstream request.

aiohttp's client costs about 120 µs of CPU per request on this project's benchmark machine (request
building, tracing hooks, cookie and timer machinery), three times what relaying the bytes costs. The
proxy needs none of that: it knows its one upstream, sends headers it has already filtered, and
streams the body back. So this module speaks HTTP/1.1 over asyncio protocols, with `httptools`
(llhttp, the parser Node uses) reading the responses. Pass-through, both bridges' legs and the era
probe all ride it.

The pool is built from the upstream URL and takes a request target in origin form (`/mcp?x=1`),
never an absolute URL or a request line: the head, `Host` included, is framed in one place
(`proxy.framing.http.encode_request_head`), which refuses what would break the message's framing.

Bounded: the pool holds at most `limit` connections (a request past it waits for one, within the
head timeout), a response head larger than `max_head_bytes` fails the request and closes its
connection, and a response body never buffers more than `HIGH_WATER` bytes before reading from the
upstream socket pauses, so a 10 MiB result crosses in small pieces.

Guarded: every head is checked once more just before it is written (`_check_head`: one request line,
field lines without CR, LF or NUL), since a pooled connection carries other clients' requests next
and one stray line break would smuggle a request onto it. A refused head never takes a connection,
and every failure after one was taken gives it back or closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import select
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import cast

import httptools

from proxy.framing.http import HeadError, Upstream, encode_request_head, header

HIGH_WATER = 256 * 1024
"""Body bytes held for the relay before the upstream socket is paused."""
LOW_WATER = 64 * 1024
"""Body bytes held below which a paused upstream socket resumes."""
IDLE_TTL = 4.0
"""Seconds an idle connection is kept: below the 5 s keep-alive of uvicorn, which most SDK servers run on,
so the pool never hands out a connection the upstream is about to close."""


HEAD_SWEEP = 0.1
"""Seconds between checks of awaited heads' deadlines (a head timeout fires at most this late)."""


DEFAULT_MAX_HEAD_BYTES = 64 * 1024
"""Largest response head accepted by default (the `upstream_max_head_bytes` setting)."""


class UpstreamError(Exception):
    """The upstream could not be reached, broke the exchange off, or the request could not be framed.

    `kind` is `unreachable`, `cut`, `head_too_large` (the response head passed `max_head_bytes`; the
    connection is closed) or `unsendable` (a head `encode_request_head` or the pool's own check
    refused; nothing was sent and no connection was taken).
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class UpstreamResponse:
    """One upstream response: its head at once, its body as chunks arrive (see `chunks`)."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_waiter",
        "content_length",
        "headers",
        "reason",
        "status",
        "until_close",
    )

    def __init__(self, conn: _Connection, status: int, reason: str, headers: list[tuple[str, str]]) -> None:
        self._conn: _Connection | None = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        length = header(headers, "content-length")
        self.content_length: int | None = int(length) if length is not None and length.isdigit() else None
        coding = header(headers, "transfer-encoding")
        chunked = coding is not None and coding.rstrip().lower().endswith("chunked")
        self.until_close = self.content_length is None and not chunked
        """No length and no chunking: the body ends where the connection does (HTTP/1.0 framing)."""
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None

    def header(self, name: str) -> str | None:
        """The first value of a header, by case-insensitive name."""
        return header(self.headers, name)

    @property
    def complete(self) -> bool:
        """The whole body has arrived (and sits in the buffer)."""
        return self._done and self._error is None

    @property
    def buffered(self) -> int:
        """Body bytes that arrived and were not yet taken."""
        return self._buffered

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
        self._buffered = 0
        conn = self._conn
        if conn is not None and conn.paused:
            conn.resume()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; raises UpstreamError("cut", ...) if the upstream breaks it off."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                conn = self._conn
                if conn is not None and conn.paused and self._buffered < LOW_WATER:
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

    def _feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        conn = self._conn
        if conn is not None and self._buffered > HIGH_WATER and not conn.paused:
            conn.pause()
        self._wake()

    def _end(self, error: UpstreamError | None) -> None:
        if self._done:
            return
        self._done = True
        self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One keep-alive connection to the upstream, carrying one exchange at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.head: asyncio.Future[UpstreamResponse] | None = None
        self.response: UpstreamResponse | None = None
        self.head_only = False
        self.paused = False
        self.idle_since = 0.0
        self.alive = True
        self.lost = False
        self.keep_alive = False
        self.head_bytes = 0
        """Bytes received since the request was sent while its final response head is incomplete."""
        self.head_size = 0
        """Bytes of the status lines and header fields parsed since the request was sent (interim heads
        included): a head that ends inside the read crossing the limit is judged by this, not by
        `head_bytes`, which is only checked while a head is still unfinished."""
        self._reason = b""
        self._headers: list[tuple[str, str]] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        if self.head is None and self.response is None:
            self._close()  # bytes nobody asked for: this connection cannot be trusted with another request
            return
        awaiting = self.head is not None
        if awaiting:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("cut", "the upstream switched protocols")
        except httptools.HttpParserError as exc:
            self._fail("cut", f"malformed response from the upstream: {exc}")
        # Still no final head (interim 1xx heads count too): httptools would keep buffering it.
        if awaiting and self.head is not None and self.head_bytes > self.pool.max_head_bytes:
            limit = self.pool.max_head_bytes
            self._fail("head_too_large", f"response head larger than {limit} bytes (upstream_max_head_bytes)")

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        self.lost = True
        self.pool.forget(self)
        response = self.response
        if exc is None and response is not None and response.until_close:
            response._end(None)  # a clean close is how a body without length or chunking ends
        if self.head is not None or self.response is not None:
            self._fail("cut", f"the upstream closed the connection{f': {exc}' if exc else ''}")

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._reason = b""
        self._headers = []

    def on_status(self, status: bytes) -> None:
        self._reason += status
        self.head_size += len(status) + 15  # "HTTP/1.1 200 " and CRLF around the reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value) + 4  # ": " and CRLF
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        if self.head is not None and self.head_size + 2 > self.pool.max_head_bytes:
            limit = self.pool.max_head_bytes
            self._fail("head_too_large", f"response head larger than {limit} bytes (upstream_max_head_bytes)")
            return
        status = self.parser.get_status_code()
        if status < 200:  # an interim 1xx head: the real one follows
            return
        response = UpstreamResponse(self, status, self._reason.decode("latin-1"), self._headers)
        self.response = response
        head, self.head = self.head, None
        if head is not None and not head.done():
            head.set_result(response)
        if self.head_only or status in (204, 304):
            response._end(None)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:
            return
        self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it once the message is done
        if self.response is not None:
            self.response._end(None)

    # the pool's side
    def send(self, data: bytes, head_only: bool) -> asyncio.Future[UpstreamResponse]:
        """Write one request; the future resolves with the response head."""
        assert self.transport is not None
        self.head_only = head_only
        self.keep_alive = False
        self.head_bytes = 0
        self.head_size = 0
        self.head = asyncio.get_running_loop().create_future()
        self.pool.write_soon(self.transport, data)
        return self.head

    def finish(self, *, reusable: bool) -> None:
        """The exchange on this connection is over: back to the pool, or closed."""
        self.response = None
        self.head = None
        if self.paused:
            self.resume()
        if reusable and self.alive and not self.head_only and self.keep_alive:
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

    def _fail(self, kind: str, detail: str) -> None:
        error = UpstreamError(kind, detail)
        head, self.head = self.head, None
        if head is not None and not head.done():
            head.set_exception(error)
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


def _request_bytes(
    method: str, target: str, host: str, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    length = len(body) if body or method in ("POST", "PUT", "PATCH") else None
    try:
        head = encode_request_head(method, target, host, headers, length)
    except HeadError as exc:
        raise UpstreamError("unsendable", str(exc)) from None
    _check_head(head)
    return head + body


_SAFE_HEAD = re.compile(
    rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ /[\x21-\x7e]* HTTP/1\.1\r\n"  # request line, origin form
    rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n\x00]*\r\n)*"  # field lines: name, colon, no CR/LF/NUL
    rb"\r\n"
)
"""A head that is one request and nothing else: each line a request line or a field, CR and LF only
as line ends, no NUL anywhere."""


def _check_head(head: bytes) -> None:
    """The last line of defence before a head reaches a pooled connection (see `_SAFE_HEAD`).

    `encode_request_head` already refuses all of this; the check holds even if a later change to it
    did not, since one stray line break would let a second request ride this one on a connection
    other clients share. One C-speed match over a few hundred bytes.
    """
    if _SAFE_HEAD.fullmatch(head) is None:
        raise UpstreamError("unsendable", "the request head holds CR, LF or NUL inside a line: nothing sent")


class PendingHead:
    """A request sent, its response head awaited: the future, and what to undo if it fails."""

    __slots__ = ("conn", "future", "pool")

    def __init__(
        self, pool: UpstreamPool, conn: _Connection, future: asyncio.Future[UpstreamResponse]
    ) -> None:
        self.pool = pool
        self.conn = conn
        self.future = future

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
    """Keep-alive HTTP/1.1 connections to one upstream host, at most `limit` of them at a time."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        limit: int = 2048,
        connect_timeout: float = 5.0,
        head_timeout: float = 60.0,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
    ) -> None:
        self.upstream = upstream
        self.max_head_bytes = max_head_bytes
        self.host = upstream.host
        self.port = upstream.port
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.head_timeout = head_timeout
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

    async def request(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        """Send one request and return once the response head has arrived (within `head_timeout` seconds).

        `target` is origin form: the path and query on the upstream (`Upstream.target` for the MCP
        endpoint). Raises TimeoutError past the timeout, UpstreamError when the upstream cannot be
        reached or breaks the connection before answering, or the head cannot be framed.
        """
        data = _request_bytes(method, target, self.upstream.host_header, headers, body)
        pending = self._send_idle(data, method)
        if pending is None:  # no warm connection: connect, or wait for one, within the same budget
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.head_timeout
            async with asyncio.timeout_at(deadline):
                conn = await self._acquire()
            pending = self._send(conn, data, method, deadline)
        try:
            await pending.future
        except asyncio.CancelledError:
            pending.drop()
            raise
        except BaseException:
            pass  # result() raises it again, once the connection is dropped
        return pending.result()

    def request_nowait(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> PendingHead | None:
        """Send one request on a warm connection at once; None when there is none idle.

        The hot path of pass-through: no task, no await; the caller learns of the head through the
        returned future (a done callback) and collects it with `PendingHead.result`. A head that
        cannot be framed raises UpstreamError("unsendable") before any connection is taken.
        """
        if self._closed or not self._idle:
            return None
        data = _request_bytes(method, target, self.upstream.host_header, headers, body)
        return self._send_idle(data, method)

    def _send_idle(self, data: bytes, method: str) -> PendingHead | None:
        conn = None if self._closed else self._take_idle()
        if conn is None:
            return None
        deadline = asyncio.get_running_loop().time() + self.head_timeout
        return self._send(conn, data, method, deadline)

    def _send(self, conn: _Connection, data: bytes, method: str, deadline: float) -> PendingHead:
        pending = PendingHead(self, conn, conn.send(data, head_only=method == "HEAD"))
        # One sweep for every head awaited, not a timer each: libuv timers cost the hot path more
        # than the few microseconds a dict entry does, and a head timeout needs no finer grain.
        self._deadlines[pending] = deadline
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every, self._sweep)
        return pending

    def write_soon(self, transport: asyncio.Transport, data: bytes) -> None:
        """Write at the end of this loop turn, with the other requests of the turn, back to back."""
        batch = self._batch
        batch.append((transport, data))
        if len(batch) == 1:
            asyncio.get_running_loop().call_soon(self._write_batch)

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

    async def _acquire(self) -> _Connection:
        while True:
            if self._closed:
                raise UpstreamError("unreachable", "the proxy is shutting down")
            conn = self._take_idle()
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
        cutoff = time.monotonic() - IDLE_TTL
        idle = self._idle
        while idle and idle[0].idle_since < cutoff:  # oldest first: close the ones about to expire
            idle.popleft()._close()
        while idle:
            conn = idle.pop()  # the most recently used: warm, and least likely to be closed upstream
            if conn.alive and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self) -> _Connection:
        self._open += 1
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _transport, conn = await loop.create_connection(
                    lambda: _Connection(self),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
        except TimeoutError:
            self._open -= 1
            self._wake_one()
            raise UpstreamError("unreachable", f"connect timed out after {self.connect_timeout}s") from None
        except OSError as exc:
            self._open -= 1
            self._wake_one()
            raise UpstreamError("unreachable", str(exc) or type(exc).__name__) from None
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise
        return conn

    def put(self, conn: _Connection) -> None:
        """A connection finished its exchange cleanly and may carry another."""
        if self._closed:
            conn._close(now=True)
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)
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
        while self._idle:
            self._idle.pop()._close(now=True)
        for conn in list(self.closing):  # goodbyes still under way would outlive the proxy
            conn._close(now=True)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
