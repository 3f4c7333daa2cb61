"""Faults in pass-through: each gets the right status and JSON-RPC error, is recorded, the proxy serves on.

Fakes are used only for faults a real MCP server will not produce on demand: a stalled head, a cut
stream, bytes that are not JSON-RPC, a stream slow enough for the client to walk away from.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from proxy.flows.events import ChainStatus
from proxy.runtime import Proxy
from proxy.wire import errors
from tests.transport.helpers import (
    CLIENT_ACCEPT,
    RELAY_ONLY,
    SSE_HEADERS,
    Script,
    bounded,
    captured_logs,
    client_session,
    dead_port,
    drained,
    fake_upstream,
    hold,
    raw_fake_upstream,
    read_event,
    read_request,
    rpc,
    wait_until,
)

EVENT = b'id: 1\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'
UNNUMBERED_EVENT = b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'
"""An event without an id: a client that leaves after it has nothing to resume from, so its call fails
(with an id the call waits for a resume: `proxy.flows.resumes`)."""


PING = rpc("ping", 99)
"""The request `still_serves` sends after a fault; every fake here answers it like a server would."""


def pong(raw: bytes) -> web.Response | None:
    """A fake's answer to `PING`, or None for any other body."""
    return web.json_response({"jsonrpc": "2.0", "id": 99, "result": {}}) if raw == PING else None


async def fake_upstream_that_echoes(request: web.Request) -> web.StreamResponse:
    """Returns whatever bytes it was sent, so a test can compare both legs byte for byte."""
    raw = await request.read()
    answer = pong(raw)
    return answer if answer is not None else web.Response(body=raw, content_type="application/json")


async def post(proxy: Proxy, body: bytes) -> tuple[int, bytes]:
    """One POST through the proxy; returns status and body."""
    async with (
        client_session() as client,
        client.post(proxy.endpoint(), data=body, headers=CLIENT_ACCEPT) as response,
    ):
        return response.status, await response.read()


async def still_serves(proxy: Proxy) -> None:
    """A fresh request through the proxy gets its answer (the proxy survived whatever came before)."""
    status, body = await bounded(post(proxy, PING), what="the proxy to answer a ping")
    assert (status, json.loads(body)) == (200, {"jsonrpc": "2.0", "id": 99, "result": {}})
    await wait_until(lambda: drained(proxy), what="the ping exchange to close")


def assert_gateway_error(body: bytes, ident: int | str, code: int) -> dict[str, object]:
    reply = json.loads(body)
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == ident
    assert reply["error"]["code"] == code
    return reply["error"]


async def chunked(data: bytes) -> AsyncIterator[bytes]:
    """A request body sent with chunked encoding (no Content-Length for the proxy to check first)."""
    for start in range(0, len(data), 512):
        yield data[start : start + 512]


@pytest.mark.parametrize("encoding", ["content-length", "chunked"])
async def test_body_over_max_body_bytes_gets_413_naming_the_limit_with_the_request_id(proxy_for, encoding):
    async with (
        fake_upstream(fake_upstream_that_echoes) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_body_bytes=1024) as proxy,
    ):
        big = rpc("tools/call", 41, name="echo", arguments={"text": "x" * 4000})
        data = chunked(big) if encoding == "chunked" else big
        with captured_logs() as logs:
            async with (
                client_session() as client,
                client.post(proxy.endpoint(), data=data, headers=CLIENT_ACCEPT) as response,
            ):
                assert response.status == 413
                error = assert_gateway_error(await response.read(), 41, errors.INVALID_REQUEST)
            await wait_until(lambda: drained(proxy), what="the refused exchange to close")
        assert "1024" in str(error["message"])
        assert "max_body_bytes" in str(error["message"])
        assert error["data"] == {"limit": 1024, "setting": "max_body_bytes"}
        assert fake.seen == []  # refused at the door, never forwarded
        (line,) = [entry for entry in logs if entry["event"] == "exchange"]
        assert line["status"] == 413
        assert 1024 < line["bytes_in"] <= len(big)  # body bytes read before refusing, not a header count
        await still_serves(proxy)
        assert [s.body for s in fake.seen] == [PING]


async def test_unreachable_upstream_gets_502_with_the_request_id(proxy_for):
    async with proxy_for(f"http://127.0.0.1:{dead_port()}/mcp", **RELAY_ONLY) as proxy:
        status, body = await post(proxy, rpc("tools/list", 12))
        assert status == 502
        error = assert_gateway_error(body, 12, errors.UPSTREAM_UNAVAILABLE)
        assert "unreachable" in str(error["message"])
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        (chain,) = list(proxy.chains())
        assert chain.summary.status is ChainStatus.ERROR
        assert "unreachable" in (chain.summary.error or "")


BROKEN_HEADS = {
    "one-byte-then-close": b"H",
    "two-content-lengths": (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n"
    ),
}
"""What a server that was reached can send instead of a response head, before it closes."""


def answering_with(broken: bytes) -> Script:
    """A raw fake's script: `broken` for a tools/call (then the connection closes), a pong for `PING`."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            if body != PING:
                writer.write(broken)
                await writer.drain()
                return
            pong = b'{"jsonrpc":"2.0","id":99,"result":{}}'
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(pong)}\r\n\r\n"
            writer.write(head.encode() + pong)

    return script


@pytest.mark.parametrize("broken", list(BROKEN_HEADS.values()), ids=list(BROKEN_HEADS))
async def test_upstream_that_breaks_its_head_gets_502_saying_it_was_reached_not_unreachable(
    proxy_for, broken
):
    async with (
        raw_fake_upstream(answering_with(broken)) as fake,
        proxy_for(f"http://127.0.0.1:{fake.port}/mcp", **RELAY_ONLY) as proxy,
    ):
        with captured_logs() as logs:
            status, body = await post(proxy, rpc("tools/call", 13, name="x"))
            await wait_until(lambda: drained(proxy), what="the exchange to close")
        assert status == 502
        message = str(assert_gateway_error(body, 13, errors.UPSTREAM_UNAVAILABLE)["message"])
        assert "was reached, but its response was broken or cut off" in message
        assert "unreachable" not in message
        assert "check that the MCP server is running" not in message
        (line,) = [entry for entry in logs if entry["event"] == "exchange"]
        assert line["trouble"] == "upstream_bad_response"
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
        assert chain.summary.status is ChainStatus.ERROR
        assert "was reached" in (chain.summary.error or "")
        await still_serves(proxy)


async def test_upstream_that_sends_no_head_in_time_gets_504_with_the_request_id(proxy_for):
    test_done = asyncio.Event()

    async def fake_upstream_that_never_answers(request: web.Request) -> web.StreamResponse:
        await hold(test_done)
        return web.Response(status=500)

    async with fake_upstream(fake_upstream_that_never_answers) as fake:
        try:
            async with proxy_for(fake.url, **RELAY_ONLY, upstream_timeout=0.5) as proxy:
                status, body = await post(proxy, rpc("tools/call", "slow-1", name="wait"))
                assert status == 504
                error = assert_gateway_error(body, "slow-1", errors.UPSTREAM_UNAVAILABLE)
                assert "0.5" in str(error["message"])
                await wait_until(lambda: drained(proxy), what="the exchange to close")
                chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
                assert chain.summary.status is ChainStatus.ERROR
                assert "did not answer in time" in (chain.summary.error or "")
        finally:
            test_done.set()


@pytest.mark.parametrize(
    "payload",
    [b"not json", b'{"hello": "world"}', b'[1, "two"]', b'{"jsonrpc": "1.0", "id": 1, "method": "x"}'],
)
async def test_bodies_that_are_not_json_rpc_are_forwarded_unchanged_and_the_chain_is_marked_invalid(
    proxy_for, payload
):
    async with fake_upstream(fake_upstream_that_echoes) as fake, proxy_for(fake.url, **RELAY_ONLY) as proxy:
        status, body = await post(proxy, payload)
        assert status == 200
        assert [s.body for s in fake.seen] == [payload]
        assert body == payload
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        chains = list(proxy.chains())
        assert chains
        assert all(c.summary.invalid for c in chains)
        await still_serves(proxy)


async def test_client_that_leaves_mid_stream_is_recorded_and_the_proxy_serves_on(proxy_for):
    upstream_saw_abort = asyncio.Event()
    test_done = asyncio.Event()

    async def fake_upstream_that_streams_slowly(request: web.Request) -> web.StreamResponse:
        answer = pong(await request.read())
        if answer is not None:
            return answer
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
                async with client_session() as client:
                    response = await client.post(
                        proxy.endpoint(), data=rpc("tools/call", 5, name="slow"), headers=CLIENT_ACCEPT
                    )
                    assert await read_event(response) == UNNUMBERED_EVENT
                    response.close()  # walk away mid-stream: the connection is dropped
                await wait_until(lambda: drained(proxy), what="the proxy to drop the abandoned exchange")
                assert (proxy.builder.open_exchanges, proxy.relays.relaying) == (0, 0)
                await bounded(upstream_saw_abort.wait(), what="the upstream request to be aborted")
                chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
                assert chain.summary.status is ChainStatus.ERROR
                assert "client_disconnected" in (chain.summary.error or "")
                await still_serves(proxy)
        finally:
            test_done.set()


async def test_upstream_that_cuts_its_stream_ends_the_clients_stream_and_the_proxy_serves_on(proxy_for):
    async def fake_upstream_that_cuts_stream(request: web.Request) -> web.StreamResponse:
        answer = pong(await request.read())
        if answer is not None:
            return answer
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(EVENT)
        assert request.transport is not None
        request.transport.abort()  # the connection dies mid-body, no final chunk
        return response

    async with (
        fake_upstream(fake_upstream_that_cuts_stream) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        async with (
            client_session() as client,
            client.post(
                proxy.endpoint(), data=rpc("tools/call", 8, name="doomed"), headers=CLIENT_ACCEPT
            ) as response,
        ):
            assert response.status == 200
            assert await read_event(response) == EVENT
            # the client's stream is broken off too, so it cannot mistake the cut for a clean end
            with pytest.raises(aiohttp.ClientPayloadError):
                await bounded(response.content.read(), what="the client's stream to end")
        await wait_until(lambda: drained(proxy), what="the cut exchange to close")
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
        assert chain.summary.status is ChainStatus.ERROR
        assert "cut" in (chain.summary.error or "")
        assert proxy.relays.open_streams == 0
        await still_serves(proxy)


async def test_upstream_that_cuts_a_json_body_short_does_not_leave_the_client_waiting(proxy_for):
    async def fake_upstream_that_cuts_json_body(request: web.Request) -> web.StreamResponse:
        answer = pong(await request.read())
        if answer is not None:
            return answer
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 200  # promises 200 bytes, sends 30, then the connection dies
        await response.prepare(request)
        await response.write(b'{"jsonrpc":"2.0","id":3,"resul')
        assert request.transport is not None
        request.transport.abort()
        return response

    async with (
        fake_upstream(fake_upstream_that_cuts_json_body) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        async with (
            client_session() as client,
            client.post(
                proxy.endpoint(), data=rpc("tools/call", 3, name="doomed"), headers=CLIENT_ACCEPT
            ) as response,
        ):
            assert response.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await bounded(response.read(), what="the client to learn its body was cut")
        await wait_until(lambda: drained(proxy), what="the cut exchange to close")
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
        assert chain.summary.status is ChainStatus.ERROR
        assert "cut" in (chain.summary.error or "")
        await still_serves(proxy)


async def test_a_request_on_a_warm_connection_that_gets_no_head_in_time_gets_504(proxy_for):
    """The hot path (sent from the socket callback on an idle pooled connection) times out too."""
    test_done = asyncio.Event()

    async def fake_upstream_that_answers_pings_only(request: web.Request) -> web.StreamResponse:
        answer = pong(await request.read())
        if answer is not None:
            return answer
        await hold(test_done)
        return web.Response(status=500)

    async with fake_upstream(fake_upstream_that_answers_pings_only) as fake:
        try:
            async with proxy_for(fake.url, **RELAY_ONLY, upstream_timeout=0.5) as proxy:
                await still_serves(proxy)  # leaves a warm upstream connection idle in the pool
                assert proxy.pool.open_connections == 1
                status, body = await bounded(
                    post(proxy, rpc("tools/call", "slow-2", name="wait")), what="the 504"
                )
                assert status == 504
                assert_gateway_error(body, "slow-2", errors.UPSTREAM_UNAVAILABLE)
                await wait_until(lambda: drained(proxy), what="the exchange to close")
                assert proxy.relays.relaying == 0
        finally:
            test_done.set()


async def test_a_client_that_leaves_before_the_head_on_a_warm_connection_aborts_the_upstream_call(
    proxy_for,
):
    started = asyncio.Event()
    upstream_saw_abort = asyncio.Event()
    test_done = asyncio.Event()

    async def fake_upstream_that_hangs(request: web.Request) -> web.StreamResponse:
        answer = pong(await request.read())
        if answer is not None:
            return answer
        started.set()
        try:
            await hold(test_done)
        except asyncio.CancelledError:
            upstream_saw_abort.set()
            raise
        return web.Response(status=500)

    async with fake_upstream(fake_upstream_that_hangs, handler_cancellation=True) as fake:
        try:
            async with proxy_for(fake.url, **RELAY_ONLY) as proxy:
                await still_serves(proxy)  # the call below goes out on the warm connection
                async with client_session() as client:
                    call = asyncio.get_running_loop().create_task(
                        client.post(
                            proxy.endpoint(), data=rpc("tools/call", 6, name="hang"), headers=CLIENT_ACCEPT
                        )
                    )
                    await bounded(started.wait(), what="the call to reach the upstream")
                    call.cancel()  # the client walks away before any head came back
                    with contextlib.suppress(asyncio.CancelledError):
                        await call
                await wait_until(lambda: drained(proxy), what="the abandoned exchange to close")
                assert proxy.relays.relaying == 0
                await bounded(upstream_saw_abort.wait(), what="the upstream call to be aborted")
                chain = next(c for c in proxy.chains() if c.summary.method == "tools/call")
                assert "client_disconnected" in (chain.summary.error or "")
                await still_serves(proxy)
        finally:
            test_done.set()
