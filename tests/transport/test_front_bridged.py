"""Bridged requests are served by the front itself, on the same connection as any other request.

A connection's requests are answered in order whatever their route, and what the front enforces
(the `Host` check, how header bytes are carried) does not depend on what the connection carried
before: a bridged exchange leaves the connection as it found it. The proxy runs no aiohttp server
for MCP traffic at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web_protocol

from proxy.flows.events import Mode
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.recording_upstream import recording_upstream
from tests.peers.runner import PeerServer
from tests.transport.helpers import bounded, drained, exchange_ends, wait_until
from tests.transport.test_front import (
    assert_discovered,
    assert_initialized,
    connection,
    legacy_initialize,
    modern_discover,
    modes,
    read_response,
    request_bytes,
)

pytestmark = pytest.mark.e2e

UTF8_VALUE = "café ✓ 日本".encode()
"""A header value in UTF-8, as clients send them (bytes a latin-1 reading must carry unchanged)."""


@pytest.fixture
def aiohttp_listeners(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The local ports of every connection aiohttp's web server takes (the admin API's are expected)."""
    ports: list[int] = []
    original = web_protocol.RequestHandler.connection_made

    def spy(self: Any, transport: Any) -> None:
        name = transport.get_extra_info("sockname")
        if isinstance(name, tuple):
            ports.append(int(name[1]))
        original(self, transport)

    monkeypatch.setattr(web_protocol.RequestHandler, "connection_made", spy)
    return ports


def with_header(request: bytes, line: bytes) -> bytes:
    """The request with one more header line, given as raw bytes."""
    head, _, body = request.partition(b"\r\n\r\n")
    return head + b"\r\n" + line + b"\r\n\r\n" + body


async def test_a_bridged_request_then_a_pass_through_one_in_one_write_are_answered_in_order(
    modern_server: PeerServer, proxy_for: Any, aiohttp_listeners: list[int]
) -> None:
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        writer.write(
            request_bytes(legacy_initialize(1)) + modern_discover(2) + request_bytes(legacy_initialize(3))
        )
        assert_initialized(await read_response(reader), 1)
        assert_discovered(await read_response(reader), 2)
        assert_initialized(await read_response(reader), 3)
        await wait_until(lambda: drained(proxy), what="the exchanges to close")
        assert modes(proxy) == {"initialize": Mode.LEGACY_TO_MRTR, "server/discover": Mode.PASSTHROUGH}
        assert proxy._front is not None
        assert len(proxy._front.connections) == 1
        assert proxy.port not in aiohttp_listeners  # no MCP connection ever reached aiohttp's server


async def test_a_pass_through_request_then_a_bridged_one_in_one_write_are_answered_in_order(
    modern_server: PeerServer, proxy_for: Any, aiohttp_listeners: list[int]
) -> None:
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        writer.write(modern_discover(1) + request_bytes(legacy_initialize(2)) + modern_discover(3))
        assert_discovered(await read_response(reader), 1)
        assert_initialized(await read_response(reader), 2)
        assert_discovered(await read_response(reader), 3)
        assert proxy.port not in aiohttp_listeners


async def test_two_host_fields_after_a_bridged_exchange_get_the_fronts_400(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        writer.write(request_bytes(legacy_initialize(1)))
        assert_initialized(await read_response(reader), 1)
        writer.write(request_bytes(legacy_initialize(2), headers=(("Host", "other.test"),)))
        response = await read_response(reader)
        assert response.status == 400
        assert b"Host" in response.body
        assert response.json()["id"] == 2  # the front's JSON-RPC refusal, naming the request


async def test_utf8_header_values_after_a_bridged_exchange_reach_the_upstream_byte_for_byte(
    proxy_for: Any,
) -> None:
    async with recording_upstream("modern") as upstream, proxy_for(upstream.url("/mcp")) as proxy:
        async with connection(proxy) as (reader, writer):
            writer.write(request_bytes(legacy_initialize(1)))  # bridged: a legacy client, a modern server
            assert_initialized(await read_response(reader), 1)
            writer.write(with_header(modern_discover(2), b"X-Note: " + UTF8_VALUE))  # passes through
            assert_discovered(await read_response(reader), 2)
        relayed = [h for h in upstream.heads if b"X-Note" in h.raw]
        assert len(relayed) == 1
        assert b"\r\nX-Note: " + UTF8_VALUE + b"\r\n" in relayed[0].raw


async def test_whitespace_around_a_header_value_is_not_part_of_it_for_a_bridge(
    legacy_server: PeerServer, proxy_for: Any
) -> None:
    """A 2026-07-28 client's `Mcp-Method` padded with spaces and tabs still names the body's method."""
    async with proxy_for(legacy_server.url) as proxy, connection(proxy) as (reader, writer):
        discover = modern_discover(1).replace(
            b"Mcp-Method: server/discover\r\n", b"Mcp-Method:  server/discover \t\r\n"
        )
        assert b"server/discover \t\r\n" in discover
        writer.write(discover)
        assert_discovered(await read_response(reader), 1)
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        assert modes(proxy) == {"server/discover": Mode.MRTR_TO_LEGACY}


async def test_bytes_the_parser_refuses_behind_a_bridged_request_wait_for_its_answer(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    """The bridged answer goes out whole, then the 400 for what followed it, then the close."""
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        writer.write(request_bytes(legacy_initialize(1)) + b"BOGUS\r\n\r\n")
        assert_initialized(await read_response(reader), 1)
        refusal = await read_response(reader)
        assert refusal.status == 400
        assert await reader.read() == b""  # the connection ends after the refusal


async def test_requests_read_whole_before_unreadable_bytes_are_all_answered_first(
    legacy_server: PeerServer, proxy_for: Any
) -> None:
    async with proxy_for(legacy_server.url) as proxy, connection(proxy) as (reader, writer):
        writer.write(
            request_bytes(legacy_initialize(1))
            + request_bytes(legacy_initialize(2))
            + b"POST /mcp HTTP/1.1\r\nContent-Length: abc\r\n\r\n"
        )
        assert_initialized(await read_response(reader), 1)
        assert_initialized(await read_response(reader), 2)
        assert (await read_response(reader)).status == 400
        assert await reader.read() == b""


async def test_a_client_leaving_a_bridged_stream_closes_its_exchange_once_in_the_capture(
    legacy_server: PeerServer, proxy_for: Any, tmp_path: Path
) -> None:
    """The exchange ends once, however the proxy learns the client left (a failed write or the close)."""
    params = modern_params(
        {"name": "slow_progress", "arguments": {"steps": 200}, "_meta": {"progressToken": "p"}}
    )
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
    extra = tuple(
        (k, v) for k, v in modern_headers("tools/call", params).items() if k not in ("Content-Type", "Accept")
    )
    capture = tmp_path / "run.jsonl"
    async with proxy_for(legacy_server.url, capture=capture) as proxy:
        async with connection(proxy) as (reader, writer):
            writer.write(request_bytes(body, headers=extra))
            seen = b""
            while seen.count(b"notifications/progress") < 2:
                chunk = await bounded(reader.read(65536), what="progress events on the bridged stream")
                assert chunk, "the stream ended before two progress events"
                seen += chunk
        await wait_until(lambda: drained(proxy), what="the exchanges to close")
    opened, closed = exchange_ends(capture)
    assert opened
    assert closed == opened  # every exchange closed, and none twice


def padded_initialize(ident: int, size: int) -> bytes:
    """A legacy `initialize` of about `size` bytes (a long client version), which a bridge carries."""
    body = json.loads(legacy_initialize(ident))
    body["params"]["clientInfo"]["version"] = "v" * size
    return json.dumps(body).encode()


async def test_a_bridged_body_counts_three_times_toward_the_bodies_in_flight_unless_it_is_alone(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    bound = 256 * 1024
    settings = {"max_body_bytes": bound, "max_body_bytes_in_flight": bound}
    async with proxy_for(modern_server.url, **settings) as proxy:
        async with connection(proxy) as (reader, writer):  # alone: 3 x 100 KB is past the bound, let through
            writer.write(request_bytes(padded_initialize(1, 100_000)))
            assert_initialized(await read_response(reader), 1)
        async with connection(proxy) as (_slow_reader, slow_writer):
            # another client's 70 KB body on its way: counted from its head
            slow_writer.write(b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nContent-Type: application/json\r\n")
            slow_writer.write(b"Content-Length: 70000\r\n\r\n{")
            await slow_writer.drain()
            await wait_until(
                lambda: proxy._front is not None and proxy._front.body_bytes_held >= 70_000,
                what="the slow body to be counted",
            )
            async with connection(proxy) as (reader, writer):  # 70 KB + 3 x 80 KB: past the bound
                writer.write(request_bytes(padded_initialize(2, 80_000)))
                refused = await read_response(reader)
        assert refused.status == 503
        assert refused.json()["error"]["data"]["setting"] == "max_body_bytes_in_flight"
        async with connection(proxy) as (reader, writer):  # the other body gone: served
            writer.write(request_bytes(padded_initialize(3, 80_000)))
            assert_initialized(await read_response(reader), 3)
        await wait_until(
            lambda: proxy._front is not None and proxy._front.body_bytes_held == 0, what="all freed"
        )
