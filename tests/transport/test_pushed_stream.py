"""SSE streams relayed from the upstream connection's reads, without a task (`PushedStream`).

A request served on a warm upstream connection streams its SSE body this way; the first request of a
proxy connects first and streams in a task, so each test warms the upstream connection with a ping.
The upstream is a raw fake: these tests are about which bytes arrive together and when.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from proxy.flows.events import ChainStatus
from proxy.flows.observations import PROXY_STOPPING
from proxy.runtime import Proxy
from proxy.transport.client_side import ClientGone
from proxy.transport.front import FrontConnection
from tests.transport.helpers import (
    RELAY_ONLY,
    Upstream,
    bounded,
    drained,
    hold,
    raw_fake_upstream,
    read_request,
    rpc,
    wait_until,
)
from tests.transport.test_front import (
    PROGRESS,
    SSE_HEAD,
    chunk,
    connection,
    parse_head,
    read_response,
    request_bytes,
    result_event,
    still_serves,
)

PROGRESS_2 = b'id: 3\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":2}}\n\n'
UNNUMBERED_EVENT = b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'
"""An event without an id: a client that leaves after it has nothing to resume from, so its call fails
(with an id the call waits for a resume: `proxy.flows.resumes`)."""
END = b"0\r\n\r\n"

Streamer = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Any], Awaitable[None]]


@asynccontextmanager
async def sse_upstream(stream: Streamer) -> AsyncIterator[tuple[str, Upstream]]:
    """A raw upstream: `ping` answered in JSON, every other request by `stream(reader, writer, id)`."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            message = json.loads(body)
            if message["method"] == "ping":
                answer = json.dumps(
                    {"jsonrpc": "2.0", "id": message["id"], "result": {"method": "ping"}}
                ).encode()
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                writer.write(head % len(answer) + answer)
            else:
                await stream(reader, writer, message["id"])

    async with raw_fake_upstream(script) as server:
        yield f"http://127.0.0.1:{server.port}/mcp", server


async def warm(proxy: Proxy) -> None:
    """One ping, so the next request finds an idle upstream connection (the task-free path)."""
    async with connection(proxy) as (reader, writer):
        writer.write(request_bytes(rpc("ping", 1)))
        assert (await read_response(reader)).status == 200
    await wait_until(lambda: drained(proxy), what="the ping to close")


def front_connections(proxy: Proxy) -> list[FrontConnection]:
    front = proxy._front
    assert front is not None
    return list(front.connections)


def streaming_without_a_task(proxy: Proxy) -> bool:
    return any(c.stream is not None and c.task is None for c in front_connections(proxy))


def sent_to_client(proxy: Proxy) -> list[Any]:
    chains = [c for c in proxy.chains() if c.summary.method == "tools/call"]
    return [(m.jsonrpc_id, m.method) for c in chains for m in c.messages if m.direction.value == "to_client"]


def call(ident: int) -> bytes:
    return request_bytes(rpc("tools/call", ident, name="stream"))


async def test_a_head_with_no_event_yet_goes_out_at_once_and_each_event_as_it_comes(proxy_for):
    client_has = asyncio.Event()

    async def head_then_events(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, ident: Any) -> None:
        writer.write(SSE_HEAD)
        await hold(client_has)
        client_has.clear()
        writer.write(chunk(PROGRESS))
        await hold(client_has)
        writer.write(chunk(result_event(ident)) + END)

    async with sse_upstream(head_then_events) as (url, server), proxy_for(url, **RELAY_ONLY) as proxy:
        await warm(proxy)
        async with connection(proxy) as (reader, writer):
            writer.write(call(7))
            head = await bounded(reader.readuntil(b"\r\n\r\n"), what="the head, before any event")
            assert parse_head(head)[0] == 200
            assert streaming_without_a_task(proxy)
            assert proxy.relays.open_streams == 1
            client_has.set()
            first = await bounded(reader.readexactly(len(chunk(PROGRESS))), what="the first event")
            assert first == chunk(PROGRESS)
            client_has.set()
            rest = await bounded(reader.readuntil(END), what="the result and the body's end")
            assert rest == chunk(result_event(7)) + END
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        assert proxy.relays.open_streams == 0
        assert sent_to_client(proxy) == [(None, "notifications/progress"), (7, None)]
        assert all(c.summary.status is ChainStatus.OK for c in proxy.chains())
        assert server.connections == 1  # the upstream connection went back to the pool, twice


async def test_events_and_the_end_that_arrive_in_one_read_reach_the_client_intact(proxy_for):
    client_has_head = asyncio.Event()

    async def head_then_all(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, ident: Any) -> None:
        writer.write(SSE_HEAD)
        await hold(client_has_head)
        client_has_head.clear()
        writer.write(chunk(PROGRESS) + chunk(PROGRESS_2) + chunk(result_event(ident)) + END)

    async with sse_upstream(head_then_all) as (url, server), proxy_for(url, **RELAY_ONLY) as proxy:
        await warm(proxy)
        async with connection(proxy) as (reader, writer):
            for ident in (8, 9):  # the client's connection carries a second call after the first ended
                writer.write(call(ident))
                assert parse_head(await bounded(reader.readuntil(b"\r\n\r\n"), what="the head"))[0] == 200
                client_has_head.set()
                body = await bounded(reader.readuntil(END), what="the whole body")
                assert body == chunk(PROGRESS) + chunk(PROGRESS_2) + chunk(result_event(ident)) + END
        await wait_until(lambda: drained(proxy), what="the exchanges to close")
        progress = [(None, "notifications/progress")] * 2
        assert sent_to_client(proxy) == [*progress, (8, None), *progress, (9, None)]
        assert server.connections == 1


async def test_a_stream_cut_mid_event_cuts_the_client_and_is_recorded(proxy_for):
    client_has_first = asyncio.Event()
    partial = b"%x\r\n" % len(result_event(1)) + result_event(1)[:10]

    async def cut_mid_event(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, ident: Any) -> None:
        writer.write(SSE_HEAD + chunk(PROGRESS))
        await hold(client_has_first)
        writer.write(partial)
        await writer.drain()
        writer.transport.abort()

    async with sse_upstream(cut_mid_event) as (url, _server), proxy_for(url, **RELAY_ONLY) as proxy:
        await warm(proxy)
        async with connection(proxy) as (reader, writer):
            writer.write(call(3))
            await bounded(reader.readuntil(b"\r\n\r\n"), what="the head")
            first = await bounded(reader.readexactly(len(chunk(PROGRESS))), what="the first event")
            assert first == chunk(PROGRESS)
            assert streaming_without_a_task(proxy)
            client_has_first.set()
            rest = await bounded(reader.read(), what="the client's connection to be cut")
            assert not rest.endswith(END)  # no end of body: the client sees the stream broken off
        await wait_until(lambda: drained(proxy), what="the cut exchange to close")
        assert proxy.relays.open_streams == 0
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
        assert chain.summary.status is ChainStatus.ERROR
        assert "upstream_cut" in (chain.summary.error or "")
        await still_serves(proxy)


async def test_a_client_that_leaves_mid_stream_closes_the_upstream_connection(proxy_for):
    upstream_saw_close = asyncio.Event()

    async def stream_until_closed(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _id: Any
    ) -> None:
        writer.write(SSE_HEAD + chunk(UNNUMBERED_EVENT))
        if await bounded(reader.read(), what="the proxy to close the upstream connection") == b"":
            upstream_saw_close.set()

    async with sse_upstream(stream_until_closed) as (url, _server), proxy_for(url, **RELAY_ONLY) as proxy:
        await warm(proxy)
        async with connection(proxy) as (reader, writer):
            writer.write(call(5))
            await bounded(reader.readuntil(b"\r\n\r\n"), what="the head")
            await bounded(reader.readexactly(len(chunk(UNNUMBERED_EVENT))), what="the first event")
            assert streaming_without_a_task(proxy)
        # the client's connection is closed mid-stream
        await bounded(upstream_saw_close.wait(), what="the upstream connection to be closed")
        await wait_until(lambda: drained(proxy), what="the abandoned exchange to close")
        assert (proxy.relays.open_streams, proxy.relays.relaying) == (0, 0)
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
        assert chain.summary.status is ChainStatus.ERROR
        assert "client_disconnected" in (chain.summary.error or "")
        await still_serves(proxy)


def dechunked(body: bytes) -> bytes:
    """A chunked body's content."""
    content, at = bytearray(), 0
    while True:
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end], 16)
        if size == 0:
            return bytes(content)
        content += body[line_end + 2 : line_end + 2 + size]
        at = line_end + 2 + size + 2


async def test_a_client_that_reads_slowly_gets_the_rest_in_a_task_byte_for_byte(proxy_for):
    events = [b"data: " + json.dumps({"n": n, "pad": "x" * 2000}).encode() + b"\n\n" for n in range(8000)]

    async def flood(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, ident: Any) -> None:
        writer.write(SSE_HEAD)
        for event in events:
            writer.write(chunk(event))
            await writer.drain()
        writer.write(chunk(result_event(ident)) + END)

    async with sse_upstream(flood) as (url, _server), proxy_for(url, **RELAY_ONLY) as proxy:
        await warm(proxy)
        async with connection(proxy) as (reader, writer):
            writer.write(call(6))
            # The client reads nothing yet: the proxy's writes back up, and the stream waits in a task.
            await wait_until(
                lambda: any(c.task is not None for c in front_connections(proxy)),
                what="the stream to go on in a task",
            )
            head = await bounded(reader.readuntil(b"\r\n\r\n"), what="the head")
            assert parse_head(head)[0] == 200
            body = bytearray()
            while not body.endswith(END):
                more = await bounded(reader.read(1 << 20), what="more of the body")
                assert more, "the body ended early"
                body += more
            assert dechunked(bytes(body)) == b"".join(events) + result_event(6)
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        assert proxy.relays.open_streams == 0
        assert all(c.summary.status is ChainStatus.OK for c in proxy.chains())


async def test_a_write_the_stopping_proxy_cut_short_is_recorded_as_the_stop_not_as_the_client_leaving(
    proxy_for,
):
    # When the proxy stops it aborts each connection; an upstream read handled before the abort's
    # close reaches the stream finds the client's side closed: that is the proxy's cut, not the client.
    async def stream_until_closed(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _id: Any
    ) -> None:
        writer.write(SSE_HEAD + chunk(PROGRESS))
        await reader.read()

    async with sse_upstream(stream_until_closed) as (url, _server), proxy_for(url, **RELAY_ONLY) as proxy:
        await warm(proxy)
        async with connection(proxy) as (reader, writer):
            writer.write(call(6))
            await bounded(reader.readuntil(b"\r\n\r\n"), what="the head")
            await bounded(reader.readexactly(len(chunk(PROGRESS))), what="the first event")
            (conn,) = [c for c in front_connections(proxy) if c.stream is not None]
            stream = conn.stream
            assert stream is not None
            conn.abort(PROXY_STOPPING)
            with pytest.raises(ClientGone) as gone:
                stream.side.write_now([chunk(PROGRESS_2)])
            assert gone.value.outcome == PROXY_STOPPING
        await wait_until(lambda: drained(proxy), what="the cut exchange to close")
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
        assert chain.summary.status is ChainStatus.ERROR
        assert PROXY_STOPPING in (chain.summary.error or "")
