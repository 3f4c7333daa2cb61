"""A request that asks to switch protocols is served as plain HTTP/1.1, as users' clients send it.

`curl --http2` on an `http://` URL sends `Connection: Upgrade, HTTP2-Settings` and `Upgrade: h2c`
with its body; a WebSocket client sends `Upgrade: websocket` on a GET. The proxy does not switch
(RFC 9110, 7.8 lets a server ignore `Upgrade`, as nginx and mitmproxy do): the request reaches the
real server with its body, one response comes back, and the connection serves the next request. A
`CONNECT` (the proxy set as `HTTPS_PROXY`) gets one refusal and nothing reaches the server. The proxy
runs as users run it, the `mcp-proxy` command, in front of the official Python SDK server.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import pytest

from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env
from tests.transport.test_front import (
    assert_initialized,
    closed,
    legacy_initialize,
    read_response,
    request_bytes,
)

pytestmark = pytest.mark.e2e

CURL_HTTP2 = (
    ("Connection", "Upgrade, HTTP2-Settings"),
    ("Upgrade", "h2c"),
    ("HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA"),
)


def tools_list(ident: int, session: str) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/list"}).encode()
    return request_bytes(
        body, headers=(("Mcp-Session-Id", session), ("MCP-Protocol-Version", "2025-11-25"), *CURL_HTTP2)
    )


async def test_curl_http2_requests_reach_the_server_whole_one_answer_each_on_one_connection(
    legacy_server: PeerServer,
) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:
        where = urlsplit(proxy.endpoint())
        reader, writer = await asyncio.open_connection(where.hostname, where.port)
        try:
            writer.write(request_bytes(legacy_initialize(1), headers=CURL_HTTP2))
            first = await read_response(reader)
            assert_initialized(first, 1)
            session = first.header("mcp-session-id")
            assert session is not None

            writer.write(tools_list(2, session))  # the same connection: no refusal waits on it
            second = await read_response(reader)
            assert second.status == 200, second
            assert second.json()["id"] == 2
            assert "tools" in second.json()["result"]

            websocket = (
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZQ=="),
            )
            writer.write(
                request_bytes(method="GET", path="/.well-known/nothing-here", headers=websocket, length=False)
            )
            third = await read_response(reader, method="GET")
            assert third.status == 404, third  # the server's own answer to the GET it is
        finally:
            writer.close()
        chains = await admin_json(proxy.admin + "/api/chains")
    methods = [chain["method"] for chain in chains]
    assert "initialize" in methods
    assert "tools/list" in methods


async def test_connect_gets_one_refusal_and_nothing_reaches_the_server(legacy_server: PeerServer) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:
        where = urlsplit(proxy.endpoint())
        reader, writer = await asyncio.open_connection(where.hostname, where.port)
        try:
            writer.write(b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n")
            answer = await read_response(reader, method="CONNECT")
            assert answer.status == 501, answer
            assert b"CONNECT is not served" in answer.body
            assert await closed(reader)
        finally:
            writer.close()
        chains = await admin_json(proxy.admin + "/api/chains")
    assert chains == []
