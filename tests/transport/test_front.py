"""The lean front server, spoken to over raw sockets: framing, limits, pipelining, flow control, bridges.

An HTTP client library would hide what these tests are about (how requests are delimited, which bytes
come back and when the connection closes), so the client side here writes and reads bytes itself. The
upstream is a fake aiohttp app where the test needs exact bytes or paced streams, and a real SDK peer
for the bridged requests the front serves beside pass-through ones.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from proxy.flows.events import ChainStatus, Mode
from proxy.runtime import Proxy
from proxy.transport import upstream_pool
from proxy.transport.front import MAX_HEAD_BYTES, MAX_HEADERS, MAX_QUEUED, FrontSide
from proxy.transport.upstream_pool import HIGH_WATER, UpstreamResponse
from proxy.wire.versions import LATEST_LEGACY
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.transport.helpers import (
    RELAY_ONLY,
    SSE_HEADERS,
    WAIT,
    Script,
    bounded,
    drained,
    fake_upstream,
    hold,
    raw_fake_upstream,
    read_request,
    rpc,
    wait_until,
)

PROGRESS = b'id: 1\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'


UNNUMBERED_EVENT = b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'
"""An event without an id: a client that leaves after it has nothing to resume from, so its call fails
(with an id the call waits for a resume: `proxy.flows.resumes`)."""


def result_event(ident: Any) -> bytes:
    return b"id: 2\ndata: " + json.dumps({"jsonrpc": "2.0", "id": ident, "result": {}}).encode() + b"\n\n"


async def fake_upstream_that_answers_by_method(request: web.Request) -> web.StreamResponse:
    """`tools/call` of `stream` gets an SSE body (progress, then the result); anything else JSON naming it."""
    message = json.loads(await request.read())
    ident = message.get("id")
    if message.get("method") == "tools/call" and message["params"].get("name") == "stream":
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(PROGRESS)
        await response.write(result_event(ident))
        await response.write_eof()
        return response
    return web.json_response({"jsonrpc": "2.0", "id": ident, "result": {"method": message.get("method")}})


# --- the raw client -----------------------------------------------------------------------------------


def request_bytes(
    body: bytes = b"",
    *,
    method: str = "POST",
    path: str = "/mcp",
    version: str = "1.1",
    headers: tuple[tuple[str, str], ...] = (),
    length: bool = True,
) -> bytes:
    """One request as a client writes it: JSON in, JSON or SSE accepted."""
    lines = [
        f"{method} {path} HTTP/{version}",
        "Host: proxy.test",
        "Accept: application/json, text/event-stream",
        "Content-Type: application/json",
    ]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class RawResponse:
    """One response as read off the socket, with how its body was delimited."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    framing: str
    """`length`, `chunked`, `close` (read to the end of the connection) or `none` (1xx, HEAD)."""

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def json(self) -> Any:
        """The JSON-RPC message carried: the body itself, or the last SSE event's data."""
        if (self.header("content-type") or "").startswith("text/event-stream"):
            data = [line[5:].strip() for line in self.body.decode().splitlines() if line.startswith("data:")]
            return json.loads(data[-1])
        return json.loads(self.body)


def parse_head(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return status, headers


async def _read_response(reader: asyncio.StreamReader, method: str) -> RawResponse:
    status, headers = parse_head(await reader.readuntil(b"\r\n\r\n"))
    response = RawResponse(status, headers, b"", "none")
    if status < 200 or status in (204, 304) or method == "HEAD":
        return response
    if (response.header("transfer-encoding") or "").lower() == "chunked":
        response.framing = "chunked"
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            response.body += await reader.readexactly(size)
            assert await reader.readexactly(2) == b"\r\n", "a chunk must end with CRLF"
        assert await reader.readuntil(b"\r\n") == b"\r\n", "no trailers expected"
    elif (length := response.header("content-length")) is not None:
        response.framing = "length"
        response.body = await reader.readexactly(int(length))
    else:
        response.framing = "close"
        response.body = await reader.read()
    return response


async def read_response(reader: asyncio.StreamReader, *, method: str = "POST") -> RawResponse:
    """Read one response (head and body, however delimited), with a deadline."""
    response: RawResponse = await bounded(_read_response(reader, method), what="a response from the proxy")
    return response


@asynccontextmanager
async def connection(proxy: Proxy) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A raw client connection to the proxy, closed on exit."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()


async def closed(reader: asyncio.StreamReader) -> bool:
    """The proxy closed the connection: nothing more comes, the stream ends."""
    rest: bytes = await bounded(reader.read(), what="the proxy to close the connection")
    return rest == b""


async def refused(proxy: Proxy, data: bytes, *, then: bytes = b"", up_to: int = 0) -> bytes:
    """Send bytes the proxy must refuse; returns everything it sent back before closing the connection.

    After `data`, `then` is sent again and again while the proxy stays silent, `up_to` bytes in all: a
    proxy that refuses a request only once it ends would never answer. A plain socket, not a
    StreamReader: a server that closes with request bytes unread makes the kernel reset the connection,
    and a StreamReader drops what it holds once it sees the reset.
    """
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", proxy.port))
        await loop.sock_sendall(sock, data)
        received = bytearray()

        async def send_more() -> None:
            sent = len(data)
            with suppress(ConnectionError):
                while then and sent < up_to:
                    await loop.sock_sendall(sock, then)
                    sent += len(then)

        async def receive() -> None:
            with suppress(ConnectionResetError):
                while chunk := await loop.sock_recv(sock, 65536):
                    received.extend(chunk)

        try:
            async with asyncio.timeout(WAIT), asyncio.TaskGroup() as group:
                sender = group.create_task(send_more())
                await receive()
                sender.cancel()
        except TimeoutError:
            raise AssertionError(
                f"timed out after {WAIT}s waiting for the proxy to answer and close"
            ) from None
        return bytes(received)


async def still_serves(proxy: Proxy) -> None:
    """A fresh connection gets its answer: the proxy survived what came before."""
    async with connection(proxy) as (reader, writer):
        writer.write(request_bytes(rpc("ping", 99)))
        response = await read_response(reader)
    assert (response.status, response.json()) == (
        200,
        {"jsonrpc": "2.0", "id": 99, "result": {"method": "ping"}},
    )
    await wait_until(lambda: drained(proxy), what="the ping exchange to close")


# --- requests the proxy cannot read -------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"HELLO THERE\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nthis line has no colon\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nContent-Length: ten\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
    ids=["not-http", "header-without-colon", "bad-content-length", "bad-chunk-size"],
)
async def test_malformed_request_gets_400_and_the_connection_closes(proxy_for, data):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        answer = await refused(proxy, data)
        status, _ = parse_head(answer.split(b"\r\n\r\n", 1)[0])
        assert status == 400
        assert fake.seen == []
        await still_serves(proxy)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ([("X-Big", "a" * (70 * 1024))], str(MAX_HEAD_BYTES)),
        ([(f"X-Header-{n}", "v") for n in range(MAX_HEADERS + 1)], f"{MAX_HEADERS} header fields"),
    ],
    ids=["70-KiB-header", "too-many-headers"],
)
async def test_oversized_request_head_gets_431_and_the_connection_closes(proxy_for, extra, reason):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        answer = await refused(proxy, request_bytes(rpc("ping", 1), headers=tuple(extra)))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert parse_head(head)[0] == 431
        assert reason.encode() in body
        assert fake.seen == []
        await still_serves(proxy)


async def test_a_header_that_never_ends_gets_431_without_the_proxy_holding_it(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        # No CRLF ever ends this header; the client stops at 1 MiB, far past the head limit.
        start = b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nX-Endless: "
        answer = await refused(proxy, start, then=b"a" * 8192, up_to=1024 * 1024)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert parse_head(head)[0] == 431
        assert str(MAX_HEAD_BYTES).encode() in body
        assert fake.seen == []
        await still_serves(proxy)


async def test_body_over_the_limit_is_refused_as_soon_as_the_limit_is_crossed(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_body_bytes=1024) as proxy,
    ):
        # The client announces 10 MiB but the proxy must answer before it has all of it: the client
        # sends the head, then the body piece by piece while the proxy stays silent, 1 MiB at most.
        start = b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"echo","text":"'
        head = request_bytes(headers=(("Content-Length", str(10 * 1024 * 1024)),), length=False)
        answer = await refused(proxy, head + start, then=b"x" * 512, up_to=1024 * 1024)
        head_bytes, _, body = answer.partition(b"\r\n\r\n")
        status, headers = parse_head(head_bytes)
        assert status == 413
        assert ("Connection", "close") in headers
        error = json.loads(body)
        assert error["id"] == 41
        assert error["error"]["data"] == {"limit": 1024, "setting": "max_body_bytes"}
        assert fake.seen == []
        await wait_until(lambda: drained(proxy), what="the refused exchange to close")
        await still_serves(proxy)


# --- pipelining and keep-alive ------------------------------------------------------------------------


async def test_two_pipelined_requests_get_two_responses_in_order(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        # The first answer is an SSE stream of unknown length (chunked), the second a JSON body.
        writer.write(request_bytes(rpc("tools/call", 1, name="stream")) + request_bytes(rpc("tools/list", 2)))
        first = await read_response(reader)
        second = await read_response(reader)
        assert (first.status, first.framing) == (200, "chunked")
        assert first.body == PROGRESS + result_event(1)
        assert (second.status, second.framing) == (200, "length")
        assert second.json() == {"jsonrpc": "2.0", "id": 2, "result": {"method": "tools/list"}}
        assert [json.loads(s.body)["id"] for s in fake.seen] == [1, 2]
        await wait_until(lambda: drained(proxy), what="both exchanges to close")


async def test_more_pipelined_requests_than_the_queue_holds_are_all_answered_in_order(proxy_for):
    count = MAX_QUEUED + 4
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(b"".join(request_bytes(rpc("tools/list", n)) for n in range(count)))
        answers = [(await read_response(reader)).json()["id"] for _ in range(count)]
        assert answers == list(range(count))
        # reading from the client paused while the queue was full; it resumed once it emptied
        writer.write(request_bytes(rpc("tools/list", "after")))
        assert (await read_response(reader)).json()["id"] == "after"
        assert len(fake.seen) == count + 1


async def test_keep_alive_connection_carries_sequential_requests(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        for ident, method, name in [(1, "tools/call", "stream"), (2, "tools/list", None), (3, "ping", None)]:
            params = {"name": name} if name else {}
            writer.write(request_bytes(rpc(method, ident, **params)))
            response = await read_response(reader)
            assert response.status == 200
            assert response.header("connection") is None  # HTTP/1.1: persistent unless said otherwise
            assert response.json()["id"] == ident
        assert len(fake.seen) == 3


async def test_expect_100_continue_gets_the_interim_response_before_the_body_is_sent(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        body = rpc("tools/list", 5)
        request = request_bytes(body, headers=(("Expect", "100-continue"),))
        writer.write(request[: -len(body)])  # the head only: the body waits for the go-ahead
        interim = await read_response(reader)
        assert (interim.status, interim.body) == (100, b"")
        writer.write(body)
        response = await read_response(reader)
        assert response.status == 200
        assert response.json() == {"jsonrpc": "2.0", "id": 5, "result": {"method": "tools/list"}}


async def test_expect_100_continue_pipelined_behind_a_stream_waits_for_that_stream_to_end(proxy_for):
    stream_may_end = asyncio.Event()

    async def fake_upstream_with_a_held_stream(request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        if message["method"] != "tools/call":
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(PROGRESS)
        await hold(stream_may_end)
        await response.write(result_event(message["id"]))
        await response.write_eof()
        return response

    async with (
        fake_upstream(fake_upstream_with_a_held_stream) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(request_bytes(rpc("tools/call", 1, name="slow")))
        head = await bounded(reader.readuntil(b"\r\n\r\n"), what="the stream's head")
        assert parse_head(head)[0] == 200
        await wait_until(lambda: len(fake.seen) == 1, what="the stream to be under way")
        # A second request's head arrives while the first response streams: its 100 Continue must not
        # land inside the first response's chunked body.
        body = rpc("tools/list", 2)
        writer.write(request_bytes(body, headers=(("Expect", "100-continue"),))[: -len(body)])
        await wait_until(lambda: proxy_has_read_a_head(proxy), what="the proxy to read the second head")
        stream_may_end.set()
        rest = await bounded(reader.readuntil(b"\r\n0\r\n\r\n"), what="the rest of the stream")
        assert b"100 Continue" not in rest
        assert rest.endswith(result_event(1) + b"\r\n0\r\n\r\n")
        interim = await read_response(reader)
        assert interim.status == 100
        writer.write(body)
        assert (await read_response(reader)).json()["id"] == 2


def proxy_has_read_a_head(proxy: Proxy) -> bool:
    """Some client connection of the proxy holds a request whose head is read and body is not."""
    server = proxy._front
    return server is not None and any(
        conn.current is not None and conn.current.method for conn in server.connections
    )


# --- HTTP/1.0 clients ---------------------------------------------------------------------------------


async def test_http10_client_gets_a_stream_delimited_by_the_close_not_chunked(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(request_bytes(rpc("tools/call", 7, name="stream"), version="1.0"))
        response = await read_response(reader)
        assert response.status == 200
        assert response.header("transfer-encoding") is None
        assert response.header("connection") == "close"
        assert response.framing == "close"
        assert response.body == PROGRESS + result_event(7)
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        (chain,) = [c for c in proxy.chains() if c.summary.method == "tools/call"]
        assert chain.summary.status is ChainStatus.OK


async def test_http10_client_asking_for_keep_alive_keeps_its_connection(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        for ident in (1, 2):
            writer.write(
                request_bytes(
                    rpc("tools/list", ident), version="1.0", headers=(("Connection", "keep-alive"),)
                )
            )
            response = await read_response(reader)
            assert response.header("connection") == "keep-alive"
            assert response.framing == "length"
            assert response.json()["id"] == ident


# --- clients that leave or read slowly ----------------------------------------------------------------


async def test_client_that_leaves_mid_stream_closes_the_upstream_call_and_is_recorded(proxy_for):
    upstream_saw_abort = asyncio.Event()
    test_done = asyncio.Event()

    async def fake_upstream_that_streams_slowly(request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        if message["method"] == "ping":
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {"method": "ping"}})
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(UNNUMBERED_EVENT)
        try:
            await hold(test_done)  # the rest of the stream would come much later
        except asyncio.CancelledError:
            upstream_saw_abort.set()
            raise
        return response

    async with fake_upstream(fake_upstream_that_streams_slowly, handler_cancellation=True) as fake:
        try:
            async with proxy_for(fake.url, **RELAY_ONLY) as proxy:
                async with connection(proxy) as (reader, writer):
                    writer.write(request_bytes(rpc("tools/call", 5, name="slow")))
                    head = await bounded(reader.readuntil(b"\r\n\r\n"), what="the stream's head")
                    assert parse_head(head)[0] == 200
                    size = await bounded(reader.readuntil(b"\r\n"), what="the first chunk's size")
                    assert (
                        await bounded(reader.readexactly(int(size, 16)), what="the event") == UNNUMBERED_EVENT
                    )
                # the connection is closed mid-stream
                await wait_until(lambda: drained(proxy), what="the proxy to drop the abandoned exchange")
                assert (proxy.builder.open_exchanges, proxy.relays.relaying) == (0, 0)
                await bounded(upstream_saw_abort.wait(), what="the upstream request to be aborted")
                assert proxy.relays.open_streams == 0
                chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
                assert chain.summary.status is ChainStatus.ERROR
                assert "client_disconnected" in (chain.summary.error or "")
                await still_serves(proxy)
        finally:
            test_done.set()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def answering(answer: Callable[[asyncio.StreamWriter, Any], Awaitable[None]]) -> Script:
    """A raw fake's script: `answer(writer, id)` writes the bytes for each request, as they should go.

    Raw sockets for the one thing aiohttp cannot be made to do on demand: send a response head
    together with body bytes (or with the whole chunked body) in a single write.
    """

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            await answer(writer, json.loads(body)["id"])

    return script


@asynccontextmanager
async def raw_upstream(answer: Callable[[asyncio.StreamWriter, Any], Awaitable[None]]) -> AsyncIterator[str]:
    """The URL of a raw fake upstream that answers each request with `answer`."""
    async with raw_fake_upstream(answering(answer)) as server:
        yield f"http://127.0.0.1:{server.port}/mcp"


def _recorded_events(proxy: Proxy) -> list[Any]:
    chains = [c for c in proxy.chains() if c.summary.method == "tools/call"]
    return [(m.jsonrpc_id, m.method) for c in chains for m in c.messages if m.direction.value == "to_client"]


async def test_a_stream_whose_whole_body_came_with_its_head_goes_out_whole_and_is_observed_once(proxy_for):
    async def everything_in_one_write(writer: asyncio.StreamWriter, ident: Any) -> None:
        writer.write(SSE_HEAD + chunk(PROGRESS) + chunk(result_event(ident)) + b"0\r\n\r\n")

    async with (
        raw_upstream(everything_in_one_write) as url,
        proxy_for(url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        for ident in (1, 2):  # the connection carries a second request after the first stream ended
            writer.write(request_bytes(rpc("tools/call", ident, name="stream")))
            response = await read_response(reader)
            assert (response.status, response.framing) == (200, "chunked")
            assert response.body == PROGRESS + result_event(ident)
        await wait_until(lambda: drained(proxy), what="both exchanges to close")
        assert _recorded_events(proxy) == [
            (None, "notifications/progress"),
            (1, None),
            (None, "notifications/progress"),
            (2, None),
        ]
        assert all(c.summary.status is ChainStatus.OK for c in proxy.chains())


async def test_the_first_event_that_came_with_the_head_is_relayed_before_the_rest_exists(proxy_for):
    client_has_first = asyncio.Event()

    async def head_and_first_event_then_the_rest(writer: asyncio.StreamWriter, ident: Any) -> None:
        writer.write(SSE_HEAD + chunk(PROGRESS))
        await hold(client_has_first)
        client_has_first.clear()
        writer.write(chunk(result_event(ident)) + b"0\r\n\r\n")

    async with (
        raw_upstream(head_and_first_event_then_the_rest) as url,
        proxy_for(url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        for ident in (4, 5):  # the second rides a warm upstream connection: served without a task
            writer.write(request_bytes(rpc("tools/call", ident, name="stream")))
            assert parse_head(await bounded(reader.readuntil(b"\r\n\r\n"), what="the head"))[0] == 200
            size = await bounded(reader.readuntil(b"\r\n"), what="the first chunk's size")
            first = await bounded(reader.readexactly(int(size, 16) + 2), what="the first event")
            assert first == PROGRESS + b"\r\n"
            client_has_first.set()
            size = await bounded(reader.readuntil(b"\r\n"), what="the second chunk's size")
            assert await reader.readexactly(int(size, 16) + 2) == result_event(ident) + b"\r\n"
            assert await bounded(reader.readuntil(b"\r\n\r\n"), what="the body's end") == b"0\r\n\r\n"
        await wait_until(lambda: drained(proxy), what="the exchanges to close")
        progress = (None, "notifications/progress")
        assert _recorded_events(proxy) == [progress, (4, None), progress, (5, None)]


FRONT_HIGH_WATER = 64 * 1024
"""asyncio's default write-buffer high-water mark: past it the front pauses the relay."""
READ_SIZE = 256 * 1024
"""The most an asyncio transport reads at once: one relayed chunk can be this large."""


async def test_slow_reader_of_a_large_body_is_not_buffered_whole_by_the_proxy(proxy_for, monkeypatch):
    size = 32 * 1024 * 1024
    block = bytes(range(256)) * 256
    most_held = {"upstream": 0, "client": 0}
    upstream_paused = asyncio.Event()
    feed, write, pause = UpstreamResponse._feed, FrontSide.write, upstream_pool._Connection.pause

    def measuring_feed(self: UpstreamResponse, chunk: bytes) -> None:
        feed(self, chunk)
        most_held["upstream"] = max(most_held["upstream"], self.buffered)

    async def measuring_write(self: FrontSide, chunk: bytes) -> None:
        transport = self.conn.transport
        try:
            await write(self, chunk)
        finally:
            if transport is not None:
                most_held["client"] = max(most_held["client"], transport.get_write_buffer_size())

    def noting_pause(self: upstream_pool._Connection) -> None:
        pause(self)
        upstream_paused.set()

    monkeypatch.setattr(UpstreamResponse, "_feed", measuring_feed)
    monkeypatch.setattr(FrontSide, "write", measuring_write)
    monkeypatch.setattr(upstream_pool._Connection, "pause", noting_pause)

    async def fake_upstream_with_a_large_result(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = size
        await response.prepare(request)
        for _ in range(size // len(block)):
            await response.write(block)
        return response

    async with (
        fake_upstream(fake_upstream_with_a_large_result) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(request_bytes(rpc("resources/read", 1, uri="file:///big")))
        # Nothing is read yet: the proxy must stop pulling from the upstream rather than hold it all.
        await bounded(upstream_paused.wait(), what="the proxy to pause reading from the upstream")
        status, headers = parse_head(await bounded(reader.readuntil(b"\r\n\r\n"), what="the head"))
        assert status == 200
        assert dict(headers)["Content-Length"] == str(size)
        digest, expected, received = hashlib.sha256(), hashlib.sha256(), 0
        while received < size:
            chunk = await bounded(reader.read(1024 * 1024), what="more of the body")
            assert chunk, "the body ended early"
            digest.update(chunk)
            received += len(chunk)
        for _ in range(size // len(block)):
            expected.update(block)
        assert received == size
        assert digest.digest() == expected.digest()
        assert most_held["upstream"] <= HIGH_WATER + READ_SIZE
        assert most_held["client"] <= FRONT_HIGH_WATER + READ_SIZE
        await wait_until(lambda: drained(proxy), what="the exchange to close")


# --- bridged requests on the front --------------------------------------------------------------------


def legacy_initialize(ident: int) -> bytes:
    params = {
        "protocolVersion": LATEST_LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": params}).encode()


def modern_discover(ident: int) -> bytes:
    """A 2026-07-28 `server/discover`, headers and all, as request bytes."""
    params = modern_params({})
    body = json.dumps({"jsonrpc": "2.0", "id": ident, "method": "server/discover", "params": params}).encode()
    headers = modern_headers("server/discover", params)
    extra = tuple((k, v) for k, v in headers.items() if k not in ("Content-Type", "Accept"))
    return request_bytes(body, headers=extra)


def assert_discovered(response: RawResponse, ident: int) -> None:
    assert response.status == 200
    message = response.json()
    assert message["id"] == ident
    assert "result" in message, message


def assert_initialized(response: RawResponse, ident: int) -> None:
    assert response.status == 200
    message = response.json()
    assert message["id"] == ident
    assert message["result"]["protocolVersion"] == LATEST_LEGACY
    assert response.header("mcp-session-id")


def modes(proxy: Proxy) -> dict[str | None, Mode]:
    return {c.summary.method: c.summary.mode for c in proxy.chains()}


@pytest.mark.e2e
async def test_a_connection_that_turns_to_a_bridge_mid_way_answers_before_and_after(
    modern_server: PeerServer, proxy_for
):
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        assert proxy.router.eras.label == "modern"
        writer.write(modern_discover(1))  # the same era as the upstream: pass-through, on the lean front
        assert_discovered(await read_response(reader), 1)
        writer.write(request_bytes(legacy_initialize(2)))  # legacy: bridged, on the same connection
        assert_initialized(await read_response(reader), 2)
        writer.write(modern_discover(3))  # pass-through again, after the bridged exchange
        assert_discovered(await read_response(reader), 3)
        await wait_until(lambda: drained(proxy), what="the exchanges to close")
        assert modes(proxy) == {"server/discover": Mode.PASSTHROUGH, "initialize": Mode.LEGACY_TO_MRTR}
        assert len([c for c in proxy.chains() if c.summary.method == "server/discover"]) == 2


@pytest.mark.e2e
async def test_requests_pipelined_behind_a_bridged_one_are_answered_after_it_in_order(
    modern_server: PeerServer, proxy_for
):
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        writer.write(
            request_bytes(legacy_initialize(1)) + modern_discover(2) + request_bytes(legacy_initialize(3))
        )
        assert_initialized(await read_response(reader), 1)
        assert_discovered(await read_response(reader), 2)
        assert_initialized(await read_response(reader), 3)


@pytest.mark.e2e
async def test_http10_client_of_a_bridge_gets_an_http10_answer(modern_server: PeerServer, proxy_for):
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        writer.write(request_bytes(legacy_initialize(1), version="1.0"))
        response = await read_response(reader)
        assert response.framing in ("length", "close")  # an HTTP/1.0 client cannot read chunks
        assert_initialized(response, 1)
        assert await closed(reader)  # no keep-alive was asked for
