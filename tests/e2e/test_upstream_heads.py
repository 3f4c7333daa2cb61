"""An upstream response head past `upstream_max_head_bytes`: the client hears 502 naming the setting.

A fake upstream on raw sockets (no real server sends a 2 MB head on demand) answers every request with
a head that never ends; once had no limit, so the proxy buffered all of it. Now the connection is
dropped at the limit and the client gets a JSON-RPC error with its id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import aiohttp
import pytest

from proxy.runtime import Proxy
from tests.transport.helpers import raw_fake_upstream, read_request, wait_until

pytestmark = pytest.mark.e2e

ProxyFor = Callable[..., AbstractAsyncContextManager[Proxy]]
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


async def endless_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\n")
    for _ in range(2000):
        writer.write(b"X-Filler: " + b"f" * 1000 + b"\r\n")
        await writer.drain()


async def test_a_huge_upstream_head_gets_the_client_a_502_naming_the_setting(proxy_for: ProxyFor) -> None:
    async with (
        raw_fake_upstream(endless_head) as server,
        proxy_for(
            f"http://127.0.0.1:{server.port}/mcp", upstream_era="legacy", upstream_max_head_bytes=8192
        ) as proxy,
        aiohttp.ClientSession() as http,
    ):
        message = {"jsonrpc": "2.0", "id": 12, "method": "tools/list"}
        async with http.post(proxy.endpoint(), data=json.dumps(message), headers=HEADERS) as resp:
            status, answer = resp.status, await resp.json()
        await wait_until(lambda: proxy.pool.open_connections == 0, what="the upstream connection to close")
    assert status == 502
    assert answer["id"] == 12
    assert "8192 bytes (upstream_max_head_bytes)" in answer["error"]["message"]
