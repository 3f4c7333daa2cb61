"""A bridge answers a client's handshake with the server that runs now, not the one it met first.

Both bridges answer the opening request themselves: the legacy-client bridge a legacy `initialize`
from the upstream's `server/discover`, the 2026-client bridge a `server/discover` from its upstream
session's InitializeResult. A server replaced on the same port (a new version, as a rollout does)
must show through as it would to a client connected to it directly, and an upstream that is down
must fail the handshake as it would directly. The proxy is the `mcp-proxy` command; the servers are
the SDK's, told apart by their `serverInfo.version`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import anyio
import pytest

from tests.e2e.commanded import Commanded, own_proxy
from tests.e2e.legacy_raw import HEADERS, initialize
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e

SERVER_INFO = "io.modelcontextprotocol/serverInfo"


async def legacy_handshake(http: aiohttp.ClientSession, proxy: Commanded) -> tuple[int, dict[str, Any]]:
    """A legacy client's `initialize` through the proxy: the HTTP status and the JSON-RPC response."""
    async with http.post(proxy.endpoint(), data=json.dumps(initialize()), headers=HEADERS) as resp:
        return resp.status, await resp.json(content_type=None)


async def replaced(peer: PeerServer, factory: Callable[..., PeerServer], kind: str, version: str) -> None:
    """Stop `peer` and start a server of `kind` at `version` on its port."""
    port = peer.port
    await anyio.to_thread.run_sync(peer.stop)
    await anyio.to_thread.run_sync(lambda: factory(kind, port=port, extra_args=["--server-version", version]))


async def test_a_legacy_client_meets_the_2026_server_that_replaced_the_first_one(
    peer_factory: Callable[..., PeerServer],
) -> None:
    # The SDK's server/discover says ttlMs 0: a client may not answer a handshake from it later.
    first = peer_factory("modern-mrtr")
    async with own_proxy(first.url) as proxy, aiohttp.ClientSession() as http:
        status, before = await legacy_handshake(http, proxy)
        assert (status, before["result"]["serverInfo"]["version"]) == (200, "1.0.0")
        await replaced(first, peer_factory, "modern-mrtr", "2.0.0")
        status, after = await legacy_handshake(http, proxy)
    assert (status, after["result"]["serverInfo"]["version"]) == (200, "2.0.0")


async def test_a_legacy_clients_handshake_while_the_2026_server_is_down_fails_as_it_would_directly(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("modern-mrtr")
    async with own_proxy(server.url) as proxy, aiohttp.ClientSession() as http:
        status, _ = await legacy_handshake(http, proxy)
        assert status == 200
        await anyio.to_thread.run_sync(server.stop)
        status, answer = await legacy_handshake(http, proxy)
    assert status == 502
    assert answer["error"]["code"] == -32000
    assert "unreachable" in answer["error"]["message"]


async def test_a_2026_clients_discover_meets_the_legacy_server_that_replaced_the_first_one(
    peer_factory: Callable[..., PeerServer],
) -> None:
    first = peer_factory("legacy-inflight")
    async with own_proxy(first.url) as proxy, aiohttp.ClientSession() as http:
        status, before = await modern_call(http, proxy.endpoint(), "server/discover", {}, ident=1)
        assert (status, before["result"]["_meta"][SERVER_INFO]["version"]) == (200, "1.0.0")
        await replaced(first, peer_factory, "legacy-inflight", "2.0.0")
        status, after = await modern_call(http, proxy.endpoint(), "server/discover", {}, ident=2)
    assert (status, after["result"]["_meta"][SERVER_INFO]["version"]) == (200, "2.0.0")
