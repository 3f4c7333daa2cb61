"""One client address holds no more than its share of the streams no deadline ends, with the
`mcp-proxy` command in front of real SDK servers.

A GET stream (a Streamable HTTP session's, or an HTTP+SSE client's) and a 2026-07-28
`subscriptions/listen` stay open as long as their client keeps them, so a client that opened
enough of them once held every connection, or every HTTP+SSE session, and everyone else got 503 for
as long as it liked. Past its share (`max_streams_per_client`, `max_sse_sessions_per_client`) an
address is refused 429 naming the setting, logged and counted in /metrics, while a client from
another address (127.0.0.2, Linux loopback) is still served. The shares are small here to keep the
load low; a slot comes back when its stream ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import aiohttp
import pytest

from tests.e2e.commanded import Commanded, own_proxy
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.sidecar import until

pytestmark = pytest.mark.e2e

LEGACY: Final = "2025-11-25"
STREAM: Final = {"Accept": "text/event-stream", "MCP-Protocol-Version": LEGACY}
ELSEWHERE: Final = ("127.0.0.2", 0)
"""Where the second client connects from: another address of the Linux loopback."""


@pytest.fixture(scope="module")
def modern_announcing() -> Iterator[PeerServer]:
    """A 2026-07-28 SDK server that serves `subscriptions/listen`."""
    with PeerServer("modern-announcing") as server:
        yield server


def client_at(local: tuple[str, int] | None = None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(local_addr=local) if local else aiohttp.TCPConnector()
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=20))


async def new_session(http: aiohttp.ClientSession, url: str) -> str:
    """A fresh legacy session on the upstream (an `initialize`, which holds no stream): its id."""
    params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    headers = {"Accept": "application/json, text/event-stream"}
    async with http.post(url, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        await resp.read()
        return resp.headers["Mcp-Session-Id"]


@contextlib.asynccontextmanager
async def get_stream(http: aiohttp.ClientSession, url: str) -> AsyncIterator[aiohttp.ClientResponse]:
    """A session's GET stream, held open until the block ends (its head is read, nothing more)."""
    session = await new_session(http, url)
    async with http.get(url, headers={**STREAM, "Mcp-Session-Id": session}) as resp:
        yield resp


def refused_as(answer: dict[str, Any], setting: str, limit: int) -> None:
    assert answer["error"]["data"] == {"limit": limit, "setting": setting}
    assert setting in answer["error"]["message"]


async def refusals_logged(proxy: Commanded, setting: str) -> list[dict[str, Any]]:
    def lines() -> list[dict[str, Any]]:
        said = [e for e in proxy.lines() if e.get("event") == "client_streams_refused"]
        return [e for e in said if e["setting"] == setting]

    await until(lambda: bool(lines()), what=f"a client_streams_refused line for {setting}")
    return lines()


async def test_one_address_past_its_share_of_get_streams_gets_429_while_another_address_is_served(
    legacy_server: PeerServer,
) -> None:
    async with (
        own_proxy(legacy_server.url, "--max-streams-per-client", "2") as proxy,
        client_at() as greedy,
        client_at(ELSEWHERE) as other,
    ):
        url = proxy.endpoint()
        async with get_stream(greedy, url) as first, get_stream(greedy, url) as second:
            assert (first.status, second.status) == (200, 200)
            async with get_stream(greedy, url) as third:
                assert third.status == 429
                assert third.headers["Retry-After"] == "1"
                assert third.headers["Connection"] == "close", "a refused stream holds no connection on"
                refused_as(await third.json(), "max_streams_per_client", 2)
            metadata = url.rsplit("/", 1)[0] + "/.well-known/oauth-protected-resource"
            async with greedy.get(metadata) as answered:  # answered, never held open: no stream slot
                assert answered.status != 429, await answered.text()
            async with get_stream(other, url) as elsewhere:
                assert elsewhere.status == 200, "a client at another address is still served"
        async with get_stream(greedy, url) as again:
            assert again.status == 200, "a stream that ended gives its address's slot back"
        (line,) = await refusals_logged(proxy, "max_streams_per_client")
        counted = await proxy.counted(
            'mcp_proxy_client_streams_refused_total{setting="max_streams_per_client"}'
        )

    assert (line["peer"], line["status"], line["limit"]) == ("127.0.0.1", 429, 2)
    assert counted == 1.0


async def test_one_address_past_its_share_of_http_sse_streams_gets_429_while_another_is_served(
    legacy_server: PeerServer,
) -> None:
    async with (
        own_proxy(legacy_server.url, "--max-sse-sessions-per-client", "1") as proxy,
        client_at() as greedy,
        client_at(ELSEWHERE) as other,
    ):
        sse = proxy.process.endpoint("/sse")
        async with greedy.get(sse) as held:
            assert held.status == 200
            await held.content.readuntil(b"\n\n")  # its endpoint event: the session is open
            async with greedy.get(sse) as refused:
                assert refused.status == 429
                assert refused.headers["Connection"] == "close", "a refused stream holds no connection on"
                refused_as(await refused.json(), "max_sse_sessions_per_client", 1)
            async with other.get(sse) as elsewhere:
                assert elsewhere.status == 200, "a client at another address still opens its session"
        (line,) = await refusals_logged(proxy, "max_sse_sessions_per_client")
        counted = await proxy.counted(
            'mcp_proxy_client_streams_refused_total{setting="max_sse_sessions_per_client"}'
        )

    assert (line["peer"], line["status"], line["limit"]) == ("127.0.0.1", 429, 1)
    assert counted == 1.0


async def listen(http: aiohttp.ClientSession, url: str, ident: int) -> aiohttp.ClientResponse:
    """A 2026-07-28 `subscriptions/listen` (the caller closes the response it returns)."""
    params = modern_params({"notifications": {"toolsListChanged": True}})
    body = {"jsonrpc": "2.0", "id": ident, "method": "subscriptions/listen", "params": params}
    return await http.post(url, json=body, headers=modern_headers("subscriptions/listen", params))


async def test_a_listen_past_the_addresss_share_is_refused_with_its_id(modern_announcing: PeerServer) -> None:
    async with (
        own_proxy(modern_announcing.url, "--max-streams-per-client", "1") as proxy,
        client_at() as greedy,
        client_at(ELSEWHERE) as other,
    ):
        url = proxy.endpoint()
        held = await listen(greedy, url, 1)
        try:
            assert held.status == 200, await held.text()
            async with await listen(greedy, url, 2) as refused:
                assert refused.status == 429
                answer = await refused.json()
            async with await listen(other, url, 3) as elsewhere:
                assert elsewhere.status == 200, "a client at another address still listens"
        finally:
            held.close()

    assert answer["id"] == 2
    refused_as(answer, "max_streams_per_client", 1)
