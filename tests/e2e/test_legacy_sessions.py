"""Sessions the legacy-client bridge mints, with the real SDK client: bounded, and 404 once forgotten.

A legacy client in front of a 2026-07-28 server gets its session from the proxy, not the server, so
the proxy must bound them: a cap (the least recently used idle session makes room) and idle expiry.
A forgotten session answers 404 with "Session not found", as the spec tells a server to; the Python
SDK client (2.3.0) reports that to its caller rather than initializing again by itself, and a new
client (a new `initialize`) is served at once.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from proxy.flows.events import Mode
from proxy.runtime import Proxy
from tests.e2e.recording_upstream import recording_upstream
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def held_sessions(proxy: Proxy) -> int:
    sizes: dict[str, int] = proxy.router.bridges[Mode.LEGACY_TO_MRTR].engine.table_sizes()  # type: ignore[attr-defined]
    return sizes["sessions"]


async def raw_initialize(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(url, data=json.dumps(INIT), headers=HEADERS) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["Mcp-Session-Id"]


async def test_an_evicted_session_gets_404_and_a_new_sdk_client_is_served(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(modern_server.url, max_legacy_sessions=2) as proxy, aiohttp.ClientSession() as http:
        async with Client(proxy.endpoint(), mode="legacy") as client:
            before = await client.call_tool("echo", {"text": "one"})
            assert not before.is_error
            # Two newer sessions need room: the SDK client's idle session is the least recently used.
            await raw_initialize(http, proxy.endpoint())
            await raw_initialize(http, proxy.endpoint())
            with pytest.raises(MCPError) as caught:
                await client.call_tool("echo", {"text": "two"})
            assert "Session not found" in str(caught.value)
        assert held_sessions(proxy) == 2
        async with Client(proxy.endpoint(), mode="legacy") as again:
            after = await again.call_tool("echo", {"text": "three"})
            assert not after.is_error


async def test_sessions_over_http_cost_less_than_1600_bytes_each(proxy_for: Callable[..., Any]) -> None:
    """3,000 `initialize`s through the running proxy, none deleted, all held: under 1,600 B of RSS each.

    The engine-level test holds 30,000 sessions themselves under 32 MiB; over HTTP the whole stack
    counts too. Python objects retained per session are about 530 B (tracemalloc); the rest is how
    the allocator lays out a request's short-lived objects around the long-lived session, which the
    observation stream's objects made larger (about 1,080 B before it, about 1,520 B since): the
    bound holds that figure from growing further.
    """
    async with (
        recording_upstream("modern") as upstream,
        proxy_for(upstream.url("/mcp"), max_chains=100, max_legacy_sessions_per_client=4000) as proxy,
        aiohttp.ClientSession() as http,
    ):
        # The fake upstream (in this process) keeps every head it receives, a `server/discover` per
        # `initialize` among them (its ttlMs is 0): it forgets them, so the proxy alone is measured.
        for _ in range(500):
            await raw_initialize(http, proxy.endpoint())  # warm: pools, caches, the chain ring
            upstream.heads.clear()
        gc.collect()
        before = rss()
        for _ in range(3000):
            await raw_initialize(http, proxy.endpoint())
            upstream.heads.clear()
        gc.collect()
        grown = rss() - before
        assert held_sessions(proxy) == 3500
    print(f"\n3,000 legacy sessions over HTTP: RSS grew {grown / 2**10:.0f} KiB ({grown / 3000:.0f} B each)")
    assert grown < 3000 * 1600


def rss() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024
