"""A known upstream that went down costs each request one connection attempt, not a probe's and its own.

Once a connection to the upstream fails, its era verdict is stale (the server may come back in
another era), so each request to the endpoint waits for a probe first; requests that come together
share it. One whose probe found nobody there is answered 502 at once: its own attempt would only
fail the same way, a second connect timeout against an upstream that drops connections silently.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import anyio
import pytest

from proxy.runtime import Proxy
from tests.e2e.legacy_raw import HEADERS, initialize
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e

ProxyFor = Callable[..., AbstractAsyncContextManager[Proxy]]


def count_connects(proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time the proxy's upstream pool opens (or tries to) a connection."""
    pool = proxy.router.pool
    attempts: list[int] = []
    connect: Callable[[], Coroutine[Any, Any, Any]] = pool._connect  # type: ignore[attr-defined]

    async def counted() -> Any:
        attempts.append(1)
        return await connect()

    monkeypatch.setattr(pool, "_connect", counted)
    return attempts


async def test_each_request_to_a_known_upstream_that_went_down_tries_to_connect_once(
    peer_factory: Callable[..., PeerServer], proxy_for: ProxyFor, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = peer_factory("modern-mrtr")
    async with proxy_for(server.url) as proxy, aiohttp.ClientSession() as http:
        async with http.post(proxy.endpoint(), json=initialize(), headers=HEADERS) as resp:
            assert resp.status == 200  # the legacy client bridge answers from the server's discover
        await anyio.to_thread.run_sync(server.stop)
        attempts = count_connects(proxy, monkeypatch)
        answers = []
        for ident in range(2, 7):
            async with http.post(proxy.endpoint(), json=initialize(ident), headers=HEADERS) as resp:
                answers.append((resp.status, (await resp.json(content_type=None))["error"]["code"]))
    assert answers == [(502, -32000)] * 5
    assert len(attempts) <= 5 + 1, len(attempts)
