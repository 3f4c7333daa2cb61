"""UpstreamPool against loopback servers: reuse, the connection limit, streaming, back-pressure and faults.

Most tests talk to a small aiohttp server, a real HTTP/1.1 server. Fakes on raw asyncio sockets are
used only for what aiohttp will not send on demand: interim 1xx heads, a `Connection: close` on a
socket left open, a body cut mid-way, a body delimited by the close, a head that never comes.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from proxy.framing import h1
from proxy.framing.http import parse_upstream
from proxy.transport import body_deadlines, upstream_pool
from proxy.transport.tasks import spawn
from proxy.transport.upstream_pool import HIGH_WATER, UpstreamError, UpstreamPool, UpstreamResponse
from proxy.wire.mcp import repeatable
from tests.transport.helpers import (
    RELAY_ONLY,
    WAIT,
    Upstream,
    bounded,
    captured_logs,
    dead_port,
    hold,
    raw_fake_upstream,
    read_request,
    rpc,
    wait_until,
)
from tests.transport.test_front import connection, read_response, request_bytes

READ_SIZE = 256 * 1024
"""The most an asyncio transport reads from a socket at once: what may land after the pause is ordered."""


# --- servers ------------------------------------------------------------------------------------------


@asynccontextmanager
async def aiohttp_upstream(
    handler: Callable[[web.Request], Awaitable[Any]], **runner: Any
) -> AsyncIterator[Upstream]:
    """Serve `handler` for every path and method on 127.0.0.1:0; stopped on exit."""
    server = Upstream()

    async def recording(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        server.peers.append(int(peer[1]) if peer else -1)
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recording)
    app_runner = web.AppRunner(app, access_log=None, **runner)
    await app_runner.setup()
    site = web.TCPSite(app_runner, "127.0.0.1", 0)
    await site.start()
    server.port = app_runner.addresses[0][1]
    try:
        yield server
    finally:
        await app_runner.cleanup()


@asynccontextmanager
async def pool_for(server: Upstream, **options: Any) -> AsyncIterator[UpstreamPool]:
    """A pool to the server, closed on exit."""
    pool = UpstreamPool(parse_upstream(f"http://127.0.0.1:{server.port}/"), **options)
    try:
        yield pool
    finally:
        pool.close()


HOST = [("Accept", "*/*")]
"""Caller headers (the pool adds `Host` itself)."""


async def get(pool: UpstreamPool, target: str = "/") -> UpstreamResponse:
    """One GET, bounded."""
    response: UpstreamResponse = await bounded(pool.request("GET", target, HOST, b""), what=f"GET {target}")
    return response


async def read_body(response: UpstreamResponse) -> bytes:
    """The whole body, bounded."""

    async def gather() -> bytes:
        return b"".join([chunk async for chunk in response.chunks()])

    body: bytes = await bounded(gather(), what="the response body")
    return body


async def fetch(pool: UpstreamPool, target: str = "/") -> tuple[int, bytes]:
    """GET, read the whole body, release the connection; returns status and body."""
    response = await get(pool, target)
    body = await read_body(response)
    response.release()
    return response.status, body


async def expect_head_timeout(pool: UpstreamPool, target: str = "/") -> None:
    """The request fails with the pool's own TimeoutError (the test's deadline would say so)."""
    deadline = asyncio.timeout(WAIT)
    with pytest.raises(TimeoutError):
        async with deadline:
            await pool.request("GET", target, HOST, b"")
    assert not deadline.expired(), f"timed out after {WAIT}s waiting for the pool's head timeout"


async def answer_with_path(request: web.Request) -> web.Response:
    return web.Response(text=f"you asked for {request.path}")


# --- reuse --------------------------------------------------------------------------------------------


async def test_two_sequential_requests_share_one_connection():
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server) as pool:
        assert await fetch(pool, "/one") == (200, b"you asked for /one")
        assert await fetch(pool, "/two") == (200, b"you asked for /two")
        assert server.connections == 1
        assert pool.open_connections == 1


async def test_request_body_reaches_the_server_with_its_length():
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read(), headers={"X-Length": str(request.content_length)})

    async with aiohttp_upstream(echo) as server, pool_for(server) as pool:
        body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
        response = await bounded(pool.request("POST", "/mcp", HOST, body), what="the POST")
        assert response.header("x-length") == str(len(body))
        assert await read_body(response) == body
        response.release()


async def test_a_response_saying_connection_close_is_not_reused_even_if_the_socket_stays_open():
    client_closed = asyncio.Event()

    async def fake_upstream_that_says_close_but_keeps_the_socket(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        if await reader.read() == b"":  # the socket stays open until the client closes it
            client_closed.set()

    async with (
        raw_fake_upstream(fake_upstream_that_says_close_but_keeps_the_socket) as server,
        pool_for(server) as pool,
    ):
        assert await fetch(pool) == (200, b"ok")
        await bounded(client_closed.wait(), what="the pool to close the connection it was told to close")
        assert await fetch(pool) == (200, b"ok")
        assert server.accepted == 2


async def test_a_closed_response_closes_its_connection_and_the_next_request_opens_another():
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server) as pool:
        response = await get(pool, "/one")
        assert await read_body(response) == b"you asked for /one"
        response.close()
        await wait_until(lambda: pool.open_connections == 0, what="the closed connection to be forgotten")
        assert await fetch(pool, "/two") == (200, b"you asked for /two")
        assert server.connections == 2


async def test_a_response_released_before_its_body_ended_drops_its_connection():
    upstream_saw_abort = asyncio.Event()
    test_done = asyncio.Event()

    async def slow_body(request: web.Request) -> web.StreamResponse:
        if request.path == "/quick":
            return web.Response(text="quick")
        response = web.StreamResponse()
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b"x" * 10)
        try:
            await hold(test_done)  # the other 990 bytes would come much later
        except asyncio.CancelledError:
            upstream_saw_abort.set()
            raise
        return response

    async with aiohttp_upstream(slow_body, handler_cancellation=True) as server, pool_for(server) as pool:
        try:
            response = await get(pool, "/slow")
            assert response.content_length == 1000
            assert not response.complete
            response.release()  # the body is not over: the connection cannot carry another request
            await bounded(upstream_saw_abort.wait(), what="the upstream to see the connection dropped")
            assert await fetch(pool, "/quick") == (200, b"quick")
            assert server.connections == 2
        finally:
            test_done.set()


async def test_a_body_that_arrived_whole_but_was_not_read_still_frees_its_connection_for_reuse():
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server) as pool:
        response = await get(pool, "/one")
        await wait_until(lambda: response.complete, what="the small body to arrive")
        response.release()
        assert await fetch(pool, "/two") == (200, b"you asked for /two")
        assert server.connections == 1


# --- the limit ----------------------------------------------------------------------------------------


async def test_with_limit_one_a_second_request_waits_until_the_first_is_released():
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server, limit=1) as pool:
        first = await get(pool, "/first")
        async with asyncio.TaskGroup() as group:
            second = group.create_task(pool.request("GET", "/second", HOST, b""))
            await wait_until(
                lambda: len(pool._waiters) == 1, what="the second request to queue for a connection"
            )
            assert not second.done()
            assert len(server.peers) == 1  # the second was not sent
            assert pool.open_connections == 1
            assert await read_body(first) == b"you asked for /first"
            first.release()
            response = await bounded(second, what="the second request once the first was released")
        assert await read_body(response) == b"you asked for /second"
        response.release()
        assert server.connections == 1


async def test_with_limit_one_a_closed_response_lets_the_waiting_request_open_a_new_connection():
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server, limit=1) as pool:
        first = await get(pool, "/first")
        async with asyncio.TaskGroup() as group:
            second = group.create_task(pool.request("GET", "/second", HOST, b""))
            await wait_until(
                lambda: len(pool._waiters) == 1, what="the second request to queue for a connection"
            )
            first.close()
            response = await bounded(second, what="the second request once the first was closed")
        assert await read_body(response) == b"you asked for /second"
        response.release()
        assert server.connections == 2
        assert pool.open_connections == 1


async def test_a_request_that_waits_for_a_connection_past_the_head_timeout_raises_timeout():
    async with (
        aiohttp_upstream(answer_with_path) as server,
        pool_for(server, limit=1, head_timeout=0.2) as pool,
    ):
        first = await get(pool, "/first")
        await expect_head_timeout(pool, "/second")
        assert len(server.peers) == 1
        await read_body(first)
        first.release()
        assert await fetch(pool, "/third") == (200, b"you asked for /third")  # the pool is not wedged
        assert server.connections == 1


# --- bodies -------------------------------------------------------------------------------------------

PIECES = [b"first piece, ", b"second piece, ", b"", b"third piece"]


async def test_chunked_body_is_decoded():
    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for piece in PIECES:
            await response.write(piece)
        await response.write_eof()
        return response

    async with aiohttp_upstream(chunked) as server, pool_for(server) as pool:
        response = await get(pool)
        assert response.header("transfer-encoding") == "chunked"
        assert response.content_length is None
        assert await read_body(response) == b"".join(PIECES)
        response.release()
        assert await fetch(pool) == (200, b"".join(PIECES))  # the chunked body ended cleanly: reused
        assert server.connections == 1


async def test_a_chunk_reaches_the_consumer_before_the_server_finishes_the_body():
    consumer_has_first = asyncio.Event()

    async def paced(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: one\n\n")
        await hold(consumer_has_first)  # the rest exists only once the consumer holds the first event
        await response.write(b"data: two\n\n")
        await response.write_eof()
        return response

    async with aiohttp_upstream(paced) as server, pool_for(server) as pool:
        response = await get(pool)
        chunks = response.chunks()
        first = await bounded(anext(chunks), what="the first chunk while the server holds the rest")
        assert first == b"data: one\n\n"
        consumer_has_first.set()
        rest = b"".join([chunk async for chunk in chunks])
        assert rest == b"data: two\n\n"
        response.release()


async def test_head_request_with_content_length_completes_without_waiting_for_a_body():
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server) as pool:
        response = await bounded(pool.request("HEAD", "/doc", HOST, b""), what="the HEAD response")
        assert response.status == 200
        assert response.content_length == len(b"you asked for /doc")
        assert await read_body(response) == b""
        response.release()
        assert await fetch(pool, "/after") == (200, b"you asked for /after")


async def test_a_body_delimited_by_the_close_ends_cleanly():
    async def fake_upstream_with_a_close_delimited_body(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: one\n\n")
        await writer.drain()
        writer.write(b"data: two\n\n")
        await writer.drain()  # then the close ends the body: HTTP/1.0 framing, no length, no chunks

    async with (
        raw_fake_upstream(fake_upstream_with_a_close_delimited_body) as server,
        pool_for(server) as pool,
    ):
        response = await get(pool)
        assert await read_body(response) == b"data: one\n\ndata: two\n\n"
        response.release()
        assert await fetch(pool) == (200, b"data: one\n\ndata: two\n\n")
        assert server.accepted == 2


@pytest.mark.parametrize("separate_writes", [False, True])
async def test_interim_1xx_heads_are_skipped_and_the_connection_is_reused(separate_writes):
    interim = [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
    ]
    final = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: yes\r\n\r\nok"

    async def fake_upstream_that_sends_interim_heads(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while await read_request(reader) is not None:
            for part in [*interim, final] if separate_writes else [b"".join([*interim, final])]:
                writer.write(part)
                await writer.drain()

    async with raw_fake_upstream(fake_upstream_that_sends_interim_heads) as server, pool_for(server) as pool:
        response = await get(pool)
        assert (response.status, response.reason) == (200, "OK")
        assert response.header("x-final") == "yes"
        assert response.header("link") is None
        assert await read_body(response) == b"ok"
        response.release()
        assert await fetch(pool) == (200, b"ok")
        assert server.accepted == 1


async def test_a_large_unread_body_pauses_reading_and_arrives_whole_once_read(monkeypatch):
    size = 8 * 1024 * 1024
    payload = bytes(range(256)) * (size // 256)
    most_buffered = 0
    pauses: list[int] = []
    feed, pause = UpstreamResponse._feed, upstream_pool._Connection.pause

    def measuring_feed(self: UpstreamResponse, chunk: bytes) -> None:
        nonlocal most_buffered
        feed(self, chunk)
        most_buffered = max(most_buffered, self.buffered)

    def counting_pause(self: upstream_pool._Connection) -> None:
        pauses.append(self.response.buffered if self.response is not None else -1)
        pause(self)

    monkeypatch.setattr(UpstreamResponse, "_feed", measuring_feed)
    monkeypatch.setattr(upstream_pool._Connection, "pause", counting_pause)

    async def large(request: web.Request) -> web.StreamResponse:
        if request.path == "/small":
            return web.Response(text="small")
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = size
        await response.prepare(request)
        for start in range(0, size, 64 * 1024):
            await response.write(payload[start : start + 64 * 1024])
        return response

    async with aiohttp_upstream(large) as server, pool_for(server) as pool:
        response = await get(pool)
        await wait_until(lambda: bool(pauses), what="reading to pause while nobody reads the body")
        assert not response.complete
        assert most_buffered <= HIGH_WATER + READ_SIZE
        digest = hashlib.sha256()
        received = 0
        async for chunk in response.chunks():  # reading on drains the buffer: the socket is resumed
            digest.update(chunk)
            received += len(chunk)
        assert received == size
        assert digest.digest() == hashlib.sha256(payload).digest()
        assert most_buffered <= HIGH_WATER + READ_SIZE
        response.release()
        assert await fetch(pool, "/small") == (200, b"small")  # the whole body was read: reused
        assert server.connections == 1


async def test_a_listener_hears_of_a_read_once_with_each_of_its_chunks_as_it_came():
    go_on = asyncio.Event()

    async def head_then_the_body_in_one_write(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await hold(go_on)
        writer.write(b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n")
        await read_request(reader)  # held open: the end of the body, not of the connection, ends it

    async with raw_fake_upstream(head_then_the_body_in_one_write) as server, pool_for(server) as pool:
        response = await get(pool)
        heard: list[tuple[list[bytes], bool]] = []
        response.listen(lambda: heard.append((list(response.take_chunks()), response.ended)))
        go_on.set()
        await wait_until(lambda: bool(heard), what="the listener to hear of the read")
        assert heard == [([b"one", b"two"], True)]
        assert response.error is None
        response.release()
        assert pool.open_connections == 1  # read to its end: back in the pool


async def test_a_listener_hears_of_a_cut_at_once_after_what_arrived_before_it():
    async def cut_mid_chunk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"a\r\nonly")
        await writer.drain()  # and the connection closes mid-chunk

    async with raw_fake_upstream(cut_mid_chunk) as server, pool_for(server) as pool:
        response = await get(pool)
        received: list[bytes] = []
        response.listen(lambda: received.extend(response.take_chunks()))
        received.extend(response.take_chunks())  # what came before the listener
        await wait_until(lambda: response.ended, what="the cut to be heard")
        assert b"".join(received) == b"only"
        assert response.error is not None
        assert response.error.kind == "cut"
        response.release()
        await wait_until(lambda: pool.open_connections == 0, what="the cut connection to be forgotten")


# --- faults -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "sent"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"only ten b"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"a\r\nonly ten b\r\n"),
    ],
    ids=["content-length", "chunked"],
)
async def test_server_that_closes_mid_body_raises_cut(head, sent):
    async def fake_upstream_that_cuts_its_body(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(head + sent)
        await writer.drain()  # and the connection closes: the body is never finished

    async with raw_fake_upstream(fake_upstream_that_cuts_its_body) as server, pool_for(server) as pool:
        response = await get(pool)
        received: list[bytes] = []

        async def drain() -> None:
            async for chunk in response.chunks():
                received.append(chunk)

        with pytest.raises(UpstreamError) as caught:
            await bounded(drain(), what="the cut to reach the consumer")
        assert caught.value.kind == "cut"
        assert b"".join(received) == b"only ten b"
        response.release()
        await wait_until(lambda: pool.open_connections == 0, what="the cut connection to be forgotten")


async def test_server_that_closes_before_answering_raises_upstream_error():
    async def fake_upstream_that_hangs_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with raw_fake_upstream(fake_upstream_that_hangs_up) as server, pool_for(server) as pool:
        with pytest.raises(UpstreamError):
            await get(pool)
        await wait_until(lambda: pool.open_connections == 0, what="the dead connection to be forgotten")
        assert not pool.closing, "a connection the upstream closed is not waited on at shutdown"


async def test_connect_refused_raises_unreachable():
    pool = UpstreamPool(parse_upstream(f"http://127.0.0.1:{dead_port()}/"))
    try:
        with pytest.raises(UpstreamError) as caught:
            await bounded(pool.request("GET", "/", HOST, b""), what="the refused connect")
        assert caught.value.kind == "unreachable"
        assert pool.open_connections == 0
    finally:
        pool.close()


async def test_a_head_that_never_comes_raises_timeout_and_drops_the_connection():
    client_closed = asyncio.Event()

    async def fake_upstream_that_never_answers(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        if await reader.read() == b"":
            client_closed.set()

    async with (
        raw_fake_upstream(fake_upstream_that_never_answers) as server,
        pool_for(server, head_timeout=0.2) as pool,
    ):
        await expect_head_timeout(pool)
        await bounded(client_closed.wait(), what="the pool to drop the connection that timed out")
        await wait_until(lambda: pool.open_connections == 0, what="the dropped connection to be forgotten")
        assert not pool.closing, "the dropped connection's close completed"


# --- idle connections ---------------------------------------------------------------------------------


async def test_an_idle_connection_the_server_closed_is_not_handed_out():
    async with (
        aiohttp_upstream(answer_with_path, keepalive_timeout=0.05) as server,
        pool_for(server) as pool,
    ):
        assert await fetch(pool, "/one") == (200, b"you asked for /one")
        await wait_until(lambda: pool.open_connections == 0, what="the server to close the idle connection")
        assert await fetch(pool, "/two") == (200, b"you asked for /two")
        assert server.connections == 2


async def test_an_idle_connection_past_its_idle_timeout_is_closed_not_reused():
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server, idle_timeout=0.1) as pool:
        assert await fetch(pool, "/one") == (200, b"you asked for /one")
        await wait_until(lambda: pool.open_connections == 0, what="the idle sweep to close the connection")
        assert pool.idle_closed == 1
        assert await fetch(pool, "/two") == (200, b"you asked for /two")
        assert server.connections == 2


async def test_a_closed_pool_refuses_requests_and_closes_its_idle_connections():
    async with aiohttp_upstream(answer_with_path) as server:
        pool = UpstreamPool(parse_upstream(f"http://127.0.0.1:{server.port}/"))
        assert await fetch(pool) == (200, b"you asked for /")
        pool.close()
        await wait_until(lambda: pool.open_connections == 0, what="the idle connection to close")
        with pytest.raises(UpstreamError) as caught:
            await get(pool)
        assert caught.value.kind == "unreachable"


# --- heads that cannot be framed ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("http://127.0.0.1:1/mcp", HOST),
        ("/mcp", [("Mcp-Method", "tools/call\r\nX-Smuggled: 1")]),
        ("/mcp", [("Mcp-Method", "\u2603")]),
    ],
    ids=["absolute-form", "crlf-in-value", "outside-latin-1"],
)
async def test_a_head_that_cannot_be_framed_is_refused_without_taking_a_connection(
    target: str, headers: list[tuple[str, str]]
) -> None:
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server) as pool:
        assert await fetch(pool, "/warm") == (200, b"you asked for /warm")  # one idle connection
        with pytest.raises(UpstreamError) as caught:
            await bounded(pool.request("POST", target, headers, b"{}"), what="the refusal")
        assert caught.value.kind == "unsendable"
        assert await fetch(pool, "/after") == (200, b"you asked for /after")
        assert len(server.peers) == 2, "nothing reached the upstream between the two GETs"
        assert server.connections == 1, "the refused request took no connection from the pool"


async def test_the_pool_sends_its_upstreams_host_and_no_callers():
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()

    async with raw_fake_upstream(record) as server:
        pool = UpstreamPool(parse_upstream(f"http://127.0.0.1:{server.port}/base?k=1"))
        try:
            response = await bounded(
                pool.request("GET", "/base", [("Host", "spoofed"), ("X-A", "1")], b""), what="the GET"
            )
            response.release()
        finally:
            pool.close()
    assert seen == [f"GET /base?k=1 HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-A: 1\r\n\r\n".encode()]


@pytest.mark.parametrize(
    "forged",
    [
        b"POST /mcp HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nGET /smuggled HTTP/1.1\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: h\r\nX-A: 1\nX-B: 2\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: h\r\nX-A: 1\rX-B: 2\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: h\r\nX-A: \x00\r\n\r\n",
    ],
    ids=["crlf-pair-inside", "bare-lf", "bare-cr", "nul"],
)
async def test_the_pool_refuses_a_head_with_cr_lf_or_nul_inside_a_line_even_if_framing_let_it_through(
    monkeypatch: pytest.MonkeyPatch, forged: bytes
) -> None:
    # Stands in for a framing bug: the pool's own check is the last line of defence.
    monkeypatch.setattr(h1, "encode_request_head", lambda *_args: forged)
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server) as pool:
        with pytest.raises(UpstreamError) as caught:
            await bounded(pool.request("POST", "/mcp", HOST, b"{}"), what="the refusal")
        assert caught.value.kind == "unsendable"
        assert pool.open_connections == 0, "the refused head took no connection"
        assert server.connections == 0, "nothing reached the upstream"


# --- response heads over the limit -------------------------------------------------------------------


async def test_a_response_head_over_the_limit_fails_naming_the_setting_and_drops_the_connection() -> None:
    async def fake_upstream_with_a_huge_head(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
        for _ in range(2000):  # 2 MB of head, never ended: the pool must not keep reading it
            writer.write(filler)
            await writer.drain()

    async with (
        raw_fake_upstream(fake_upstream_with_a_huge_head) as server,
        pool_for(server, max_head_bytes=16 * 1024) as pool,
    ):
        with pytest.raises(UpstreamError) as caught:
            await get(pool)
        assert caught.value.kind == "head_too_large"
        assert "16384 bytes (upstream_max_head_bytes)" in str(caught.value)
        await wait_until(lambda: pool.open_connections == 0, what="the oversized connection to be closed")


async def test_a_whole_head_over_the_limit_in_one_read_fails_too() -> None:
    """A complete head past the limit that lands in one read is refused like one that never ends.

    The head's own size is what counts: a head whose end arrives in the same read that crosses the
    limit is never seen unfinished, so a check of unfinished heads alone would let 40 KiB through.
    """

    async def fake_upstream_with_a_whole_big_head(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(40))
        writer.write(b"HTTP/1.1 200 OK\r\n" + filler + b"Content-Length: 2\r\n\r\n{}")
        await writer.drain()
        await reader.read()  # until the pool closes the connection (or the fake is stopped at exit)

    async with (
        raw_fake_upstream(fake_upstream_with_a_whole_big_head) as server,
        pool_for(server, max_head_bytes=16 * 1024) as pool,
    ):
        with pytest.raises(UpstreamError) as caught:
            await get(pool)
        assert caught.value.kind == "head_too_large"
        assert "16384 bytes (upstream_max_head_bytes)" in str(caught.value)
        await wait_until(lambda: pool.open_connections == 0, what="the oversized connection to be closed")


async def test_interim_heads_count_toward_the_head_limit() -> None:
    async def fake_upstream_with_endless_interim_heads(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        for _ in range(10000):
            writer.write(b"HTTP/1.1 102 Processing\r\nX-Pad: " + b"p" * 100 + b"\r\n\r\n")
            await writer.drain()

    async with (
        raw_fake_upstream(fake_upstream_with_endless_interim_heads) as server,
        pool_for(server, max_head_bytes=8 * 1024) as pool,
    ):
        with pytest.raises(UpstreamError) as caught:
            await get(pool)
        assert caught.value.kind == "head_too_large"


async def test_a_head_just_under_the_limit_is_accepted_and_the_connection_reused() -> None:
    async def big_headers(request: web.Request) -> web.Response:
        return web.Response(text="ok", headers={"X-Big": "b" * 6000})

    async with aiohttp_upstream(big_headers) as server, pool_for(server, max_head_bytes=8 * 1024) as pool:
        assert await fetch(pool) == (200, b"ok")
        assert await fetch(pool) == (200, b"ok")
        assert server.connections == 1


# --- waiting for a connection ------------------------------------------------------------------------


async def test_a_waiter_cancelled_just_after_being_woken_hands_its_turn_to_the_next() -> None:
    async with aiohttp_upstream(answer_with_path) as server, pool_for(server, limit=1) as pool:
        first = await get(pool, "/first")
        second = spawn(pool.request("GET", "/second", HOST, b""), name="second")
        third = spawn(pool.request("GET", "/third", HOST, b""), name="third")
        await wait_until(lambda: len(pool._waiters) == 2, what="both requests to wait for the connection")
        await read_body(first)
        first.release()  # wakes `second`...
        second.cancel()  # ...which leaves before it runs: `third` must get the connection instead
        response = await bounded(third, what="the third request to get the woken connection")
        assert await read_body(response) == b"you asked for /third"
        response.release()
        with pytest.raises(asyncio.CancelledError):
            await second


# --- the upstream closing idle connections ------------------------------------------------------------


class WireRequests:
    """Requests as a raw fake receives them: every byte recorded in `raw`, their ends found by the
    proxy's HTTP/1.1 core (the fake answers only once a request has ended)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.raw = bytearray()
        self.core = h1.RequestReader(1 << 20, time.monotonic, h1.Request)
        self.ready: deque[h1.Request] = deque()

    async def next(self) -> h1.Request | None:
        """The next whole request; None once the client closes (or sends what the core refuses)."""
        while not self.ready:
            data = await self.reader.read(65536)
            if not data:
                return None
            self.raw += data
            for event in self.core.feed(data):
                if isinstance(event, h1.EndOfRequest):
                    self.ready.append(event.request)
                elif isinstance(event, h1.Refusal):
                    return None
        return self.ready.popleft()


def ok(body: bytes, *headers: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"Content-Length: %d\r\n\r\n%b"
        % (
            len(body),
            body,
        )
    )


async def test_a_reused_connection_closed_as_the_next_request_goes_out_is_retried_once_on_a_fresh_one():
    """A fake: no real server closes an idle connection at the very moment a request reaches it on demand.

    Its first connection answers one request, then closes when the next arrives, unanswered: from the
    pool's side, a reused connection closed before any byte of the answer, exactly the race with an
    upstream's keep-alive timeout. The second connection answers.
    """
    received: list[bytearray] = []

    async def fake_upstream_that_closes_its_idle_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        wire = WireRequests(reader)
        received.append(wire.raw)
        first = len(received) == 1
        while (request := await wire.next()) is not None:
            if first and request.target == b"/two":
                return  # closed with the request unanswered
            writer.write(ok(b"you asked for " + request.target))
            await writer.drain()

    async with (
        raw_fake_upstream(fake_upstream_that_closes_its_idle_connection) as server,
        pool_for(server) as pool,
    ):
        assert await fetch(pool, "/one") == (200, b"you asked for /one")
        with captured_logs() as logs:
            assert await fetch(pool, "/two") == (200, b"you asked for /two")
        assert pool.retried == 1
        assert [log["event"] for log in logs] == ["upstream_request_retried"]
        assert server.accepted == 2
        assert bytes(received[0]).count(b"GET /two HTTP/1.1\r\n") == 1
        assert bytes(received[1]).startswith(b"GET /two HTTP/1.1\r\n")
        assert await fetch(pool, "/three") == (200, b"you asked for /three"), "the new connection is pooled"
        assert pool.retried == 1


def rpc_body(method: str) -> bytes:
    return b'{"jsonrpc":"2.0","id":7,"method":"%b","params":{}}' % method.encode()


@pytest.mark.parametrize(("method", "sent_again"), [("tools/call", False), ("tools/list", True)])
async def test_a_post_the_upstream_read_then_closed_on_is_sent_again_only_when_it_only_reads(
    method: str, sent_again: bool
) -> None:
    """A fake, as above: its first connection answers one request, then reads the next and closes
    unanswered, as a server that dies while it runs a tool does. The request reached it: a
    `tools/call` may have run, so it is never sent twice; a `tools/list` may be."""
    received: list[bytearray] = []

    async def fake_upstream_that_dies_after_reading(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        wire = WireRequests(reader)
        received.append(wire.raw)
        first = len(received) == 1
        while (request := await wire.next()) is not None:
            if first and request.method == "POST":
                return  # read, then gone without a byte of an answer
            writer.write(ok(b'{"jsonrpc":"2.0","id":7,"result":{}}'))
            await writer.drain()

    async with raw_fake_upstream(fake_upstream_that_dies_after_reading) as server, pool_for(server) as pool:
        assert (await fetch(pool))[0] == 200  # the connection is now a reused one
        body = rpc_body(method)
        if sent_again:
            with captured_logs() as logs:
                response = await bounded(pool.request("POST", "/", HOST, body), what="the POST")
            assert [log.get("request") for log in logs] == ["POST tools/list"]
            assert response.status == 200
            await read_body(response)
            response.release()
        else:
            with pytest.raises(UpstreamError) as caught:
                await bounded(pool.request("POST", "/", HOST, body), what="the POST")
            assert caught.value.kind == "cut"
            assert "not sent again, since the server may have acted on it" in str(caught.value)
        posts = sum(bytes(raw).count(b"POST / HTTP/1.1\r\n") for raw in received)
        assert (pool.retried, posts) == ((1, 2) if sent_again else (0, 1))


def test_only_requests_that_read_may_be_sent_twice() -> None:
    batch = b"[" + rpc_body("tools/list") + b"," + rpc_body("resources/read") + b"]"
    assert repeatable(batch)
    assert repeatable(rpc_body("initialize"))
    answer = b'{"jsonrpc":"2.0","id":3,"result":{"action":"accept"}}'  # a second one is ignored
    note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    assert repeatable(answer)
    assert repeatable(note)
    mixed = b"[" + rpc_body("tools/list") + b"," + rpc_body("tools/call") + b"]"
    for body in (mixed, rpc_body("tools/call"), rpc_body("vendor/launch"), b"[]", b"not json", b"{}"):
        assert not repeatable(body), body


async def test_a_request_on_a_fresh_connection_closed_before_answering_is_not_retried():
    async def fake_upstream_that_hangs_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with raw_fake_upstream(fake_upstream_that_hangs_up) as server, pool_for(server) as pool:
        with pytest.raises(UpstreamError) as caught:
            await get(pool)
        assert caught.value.kind == "cut"
        assert (pool.retried, server.accepted) == (0, 1)


async def test_a_reused_connection_closed_after_a_byte_of_the_answer_is_not_retried():
    """A fake, as above: the second answer stops after its status line and the connection closes."""

    async def fake_upstream_that_breaks_off_its_second_answer(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        wire = WireRequests(reader)
        await wire.next()
        writer.write(ok(b"first"))
        await writer.drain()
        await wire.next()
        writer.write(b"HTTP/1.1 200 OK\r\n")
        await writer.drain()

    async with (
        raw_fake_upstream(fake_upstream_that_breaks_off_its_second_answer) as server,
        pool_for(server) as pool,
    ):
        assert await fetch(pool) == (200, b"first")
        with pytest.raises(UpstreamError) as caught:
            await get(pool)
        assert caught.value.kind == "cut"
        assert (pool.retried, server.accepted) == (0, 1)


async def test_the_one_retry_failing_too_fails_the_request():
    async def fake_upstream_that_answers_once_then_hangs_up(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        wire = WireRequests(reader)
        if server.accepted == 1 and await wire.next() is not None:
            writer.write(ok(b"first"))
            await writer.drain()
        await wire.next()  # every later request: closed unanswered

    async with (
        raw_fake_upstream(fake_upstream_that_answers_once_then_hangs_up) as server,
        pool_for(server) as pool,
    ):
        assert await fetch(pool) == (200, b"first")
        with pytest.raises(UpstreamError) as caught:
            await get(pool)
        assert caught.value.kind == "cut"
        assert (pool.retried, server.accepted) == (1, 2)


async def test_an_upstreams_keep_alive_timeout_closes_the_idle_connection_before_the_upstream_would():
    """A fake that announces `Keep-Alive: timeout=1` (uvicorn and the SDK servers announce nothing)."""
    idle_for: list[float] = []
    after_idle: list[h1.Request | None] = []

    async def fake_upstream_with_a_keep_alive_timeout(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        wire = WireRequests(reader)
        await wire.next()
        writer.write(ok(b"ok", b"Keep-Alive: timeout=1"))
        await writer.drain()
        answered = time.monotonic()
        after_idle.append(await wire.next())
        idle_for.append(time.monotonic() - answered)

    async with (
        raw_fake_upstream(fake_upstream_with_a_keep_alive_timeout) as server,
        pool_for(server, idle_timeout=30.0) as pool,
    ):
        assert await fetch(pool) == (200, b"ok")
        await wait_until(lambda: bool(idle_for), what="the pool to close the idle connection")
        assert idle_for[0] < 1.0, f"closed after {idle_for[0]:.3f}s: the upstream would have closed it first"
        assert after_idle == [None], "no request was written to the connection the upstream was closing"
        assert pool.idle_closed == 1
        assert await fetch(pool) == (200, b"ok")
        assert server.accepted == 2


@pytest.mark.parametrize(
    ("announced", "setting", "ttl"),
    [(1.0, 4.0, 0.5), (5.0, 4.0, 4.0), (5.0, 30.0, 4.0), (60.0, 4.0, 4.0), (0.0, 4.0, 0.0)],
)
def test_the_idle_time_is_a_little_under_the_announced_timeout_and_never_over_the_setting(
    announced: float, setting: float, ttl: float
) -> None:
    pool = UpstreamPool(parse_upstream("http://127.0.0.1:1/"), idle_timeout=setting)
    assert pool.ttl_for(announced) == ttl


async def test_an_upstream_that_keeps_no_idle_connection_gets_each_request_on_a_new_one():
    async def fake_upstream_with_keep_alive_zero(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        wire = WireRequests(reader)
        while await wire.next() is not None:
            writer.write(ok(b"ok", b"Keep-Alive: timeout=0"))
            await writer.drain()

    async with raw_fake_upstream(fake_upstream_with_keep_alive_zero) as server, pool_for(server) as pool:
        assert await fetch(pool) == (200, b"ok")
        assert await fetch(pool) == (200, b"ok")
        assert (server.accepted, pool.retried) == (2, 0)


async def test_the_running_proxy_closes_idle_upstream_connections_after_upstream_idle_timeout(proxy_for):
    """A fake that records when the proxy's idle connection to it closed (the setting is the proxy's)."""
    idle_for: list[float] = []

    async def fake_upstream_timing_the_idle_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        wire = WireRequests(reader)
        answered = time.monotonic()
        while await wire.next() is not None:
            writer.write(ok(b'{"jsonrpc":"2.0","id":1,"result":{}}', b"Content-Type: application/json"))
            await writer.drain()
            answered = time.monotonic()
        idle_for.append(time.monotonic() - answered)

    async with (
        raw_fake_upstream(fake_upstream_timing_the_idle_close) as server,
        proxy_for(f"http://127.0.0.1:{server.port}/mcp", **RELAY_ONLY, upstream_idle_timeout=0.3) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(request_bytes(rpc("tools/call", 1, name="echo")))
        assert (await read_response(reader)).status == 200
        await wait_until(lambda: bool(idle_for), what="the proxy to close its idle upstream connection")
        assert 0.3 <= idle_for[0] < 0.3 + 2 * upstream_pool.IDLE_SWEEP + 0.5


# --- the body idle deadline ---------------------------------------------------------------------------


def counting_sweeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the body deadline's sweeps, so a test waits for some to pass instead of sleeping."""
    sweeps: list[int] = []
    sweep = body_deadlines.BodyDeadlines._sweep

    def counted(self: body_deadlines.BodyDeadlines) -> None:
        sweeps.append(len(self._watched))
        sweep(self)

    monkeypatch.setattr(body_deadlines.BodyDeadlines, "_sweep", counted)
    return sweeps


async def test_a_body_the_upstream_stops_sending_fails_naming_the_setting(monkeypatch) -> None:
    sweeps = counting_sweeps(monkeypatch)
    stop = asyncio.Event()

    async def stalling(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        await hold(stop)

    async with raw_fake_upstream(stalling) as server, pool_for(server, body_idle_timeout=0.2) as pool:
        response = await get(pool)
        with pytest.raises(UpstreamError) as failed:
            await read_body(response)
        stop.set()
    assert failed.value.kind == body_deadlines.BODY_STALLED
    assert "no byte of its response body for 0.2s (upstream_body_idle_timeout)" in str(failed.value)
    assert sweeps


async def test_a_body_paused_while_the_proxy_holds_enough_of_it_is_no_stall(monkeypatch) -> None:
    """A client that reads slowly pauses reading from the upstream: the upstream is not to blame."""
    sweeps = counting_sweeps(monkeypatch)
    size = 4 * 1024 * 1024

    async def large(request: web.Request) -> web.StreamResponse:
        return web.Response(body=bytes(size), content_type="application/json")

    async with aiohttp_upstream(large) as server, pool_for(server, body_idle_timeout=0.1) as pool:
        response = await get(pool)
        conn = response._conn
        assert isinstance(conn, upstream_pool._Connection)
        await wait_until(lambda: conn.paused, what="reading to pause while nobody reads the body")
        await wait_until(lambda: len(sweeps) >= 5, what="sweeps past the deadline")
        assert response.error is None
        assert len(await read_body(response)) == size
        response.release()


async def test_an_sse_stream_is_never_watched(monkeypatch) -> None:
    sweeps = counting_sweeps(monkeypatch)

    async def stream(request: web.Request) -> web.StreamResponse:
        return web.Response(text="data: {}\n\n", content_type="text/event-stream")

    async with aiohttp_upstream(stream) as server, pool_for(server, body_idle_timeout=0.1) as pool:
        assert await fetch(pool) == (200, b"data: {}\n\n")
        assert pool.body_deadlines._watched == {}
    assert sweeps == []


async def test_a_body_that_arrives_with_its_head_is_never_watched(monkeypatch) -> None:
    """A small answer comes whole in one read: nothing is left to stall, so no sweep is started."""
    sweeps = counting_sweeps(monkeypatch)
    body = b'{"jsonrpc":"2.0","id":1,"result":{}}'

    async def whole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        writer.write(head + body)  # one write: the proxy reads head and body together
        await writer.drain()

    async with raw_fake_upstream(whole) as server, pool_for(server, body_idle_timeout=0.1) as pool:
        assert await fetch(pool) == (200, body)
        assert pool.body_deadlines._watched == {}
        assert pool.body_deadlines._sweeper is None
    assert sweeps == []
