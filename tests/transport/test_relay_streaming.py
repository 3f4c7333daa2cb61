"""Pass-through relay of SSE bodies: event by event, byte for byte, and standing GET streams held open.

The fakes here pace their events on signals from the test, which is how a test proves that nothing
between the upstream and the client waits for more bytes before forwarding what it has.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import suppress

from aiohttp import web

from proxy.flows.events import ChainStatus, Channel, Direction
from tests.transport.helpers import (
    CLIENT_ACCEPT,
    RELAY_ONLY,
    SSE_HEADERS,
    bounded,
    client_session,
    drained,
    fake_upstream,
    hold,
    read_event,
    rpc,
    wait_until,
)

PROGRESS = (
    b'id: 1\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":"p","progress":1}}\n\n'
)
RESULT = b'id: 2\ndata: {"jsonrpc":"2.0","id":7,"result":{"content":[]}}\n\n'


async def test_sse_event_reaches_the_client_before_the_upstream_sends_the_next(proxy_for):
    client_read_first = asyncio.Event()

    async def fake_upstream_that_waits_between_events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(PROGRESS)
        await hold(client_read_first)  # the result only exists once the client holds the first event
        await response.write(RESULT)
        await response.write_eof()
        return response

    async with (
        fake_upstream(fake_upstream_that_waits_between_events) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        async with (
            client_session() as client,
            client.post(
                proxy.endpoint(), data=rpc("tools/call", 7, name="slow"), headers=CLIENT_ACCEPT
            ) as response,
        ):
            assert response.status == 200
            assert await read_event(response) == PROGRESS
            client_read_first.set()
            assert await bounded(response.content.read(), what="the rest of the stream") == RESULT
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        (chain,) = list(proxy.store)
        assert chain.summary.status is ChainStatus.OK
        assert [(m.direction, m.sse_id) for m in chain.messages] == [
            (Direction.TO_SERVER, None),
            (Direction.TO_CLIENT, "1"),
            (Direction.TO_CLIENT, "2"),
        ]


STREAM_CHUNKS = [
    b": upstream says hello\r\n",
    b"retry: 2500\r\nid: ev-1\r",  # CRLF split across two writes
    b'\nevent: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/message",',
    b'"params":{"level":"info","data":"caf\xc3',  # a UTF-8 sequence split across two writes
    b'\xa9"}}\r\n\r\n',
    b":\n",
    b'id: ev-2\ndata: {"jsonrpc":"2.0",\ndata: "id":9,"result":{}}\n\n',
    b": trailing comment with no event after it\r\n",
]


async def test_sse_bytes_arrive_unchanged_with_ids_retry_comments_and_crlf(proxy_for):
    async def fake_upstream_with_awkward_chunks(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={**SSE_HEADERS, "Content-Type": "text/event-stream; charset=utf-8"}
        )
        await response.prepare(request)
        for chunk in STREAM_CHUNKS:
            await response.write(chunk)
        await response.write_eof()
        return response

    async with (
        fake_upstream(fake_upstream_with_awkward_chunks) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        async with (
            client_session() as client,
            client.post(
                proxy.endpoint(), data=rpc("tools/call", 9, name="log"), headers=CLIENT_ACCEPT
            ) as response,
        ):
            assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            assert await bounded(response.read(), what="the whole stream") == b"".join(STREAM_CHUNKS)
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        (chain,) = list(proxy.store)
        assert chain.summary.status is ChainStatus.OK
        seen = [(m.sse_id, m.body) for m in chain.messages if m.direction is Direction.TO_CLIENT]
        assert seen == [
            (
                "ev-1",
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": "caf\u00e9"},
                },
            ),
            ("ev-2", {"jsonrpc": "2.0", "id": 9, "result": {}}),
        ]


async def test_get_sse_stream_stays_open_while_the_client_holds_it(proxy_for):
    second_event_allowed = asyncio.Event()
    test_done = asyncio.Event()
    first = b'id: g1\ndata: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'
    second = b'id: g2\ndata: {"jsonrpc":"2.0","method":"notifications/resources/list_changed"}\n\n'

    async def fake_upstream_with_a_standing_get_stream(request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return web.Response(status=405)
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(first)
        await hold(second_event_allowed)
        with suppress(ConnectionError):
            await response.write(second)
            await hold(test_done)  # a standing stream: the server never ends it on its own
        return response

    async with (
        fake_upstream(fake_upstream_with_a_standing_get_stream) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        try:
            async with client_session() as client:
                headers = {"Accept": "text/event-stream", "Mcp-Session-Id": "sess-get"}
                async with client.get(proxy.endpoint(), headers=headers) as response:
                    assert response.status == 200
                    assert await read_event(response) == first
                    assert not response.content.at_eof()
                    assert proxy.relays.open_streams == 1
                    second_event_allowed.set()
                    assert await read_event(response) == second
                    assert not response.content.at_eof()
                    assert proxy.relays.open_streams == 1
                # leaving the block closes the client's connection: that is how a client lets go
            await wait_until(
                lambda: proxy.relays.open_streams == 0 and drained(proxy),
                what="the proxy to release the GET stream",
            )
        finally:
            test_done.set()
        (chain,) = list(proxy.store)
        assert chain.summary.method == "GET stream"
        assert chain.summary.status is ChainStatus.OK
        relayed = [m for m in chain.messages if m.channel is Channel.GET_SSE]
        assert [json.dumps(m.body, separators=(",", ":")) for m in relayed] == [
            '{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}',
            '{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}',
        ]
