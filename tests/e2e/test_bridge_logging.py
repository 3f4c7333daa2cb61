"""Log messages across the legacy-client bridge: what a legacy client gets without asking.

A legacy server sends a client every log message its tools write, `logging/setLevel` or not; a
2026-07-28 server sends a request's log messages only when the request's `_meta` asks. The bridge
asks on behalf of a legacy client that never set a level, so the client sees through the proxy what
it sees from a legacy server direct. Real SDK peers of both eras, the SDK's legacy client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for

pytestmark = pytest.mark.e2e


async def _logs_of_an_echo(url: str) -> list[str]:
    log = CallbackLog()
    async with client_for(url, "legacy", log=log) as client:
        await client.call_tool("echo", {"text": "hi"})
    return list(log.logs)


async def test_a_legacy_client_that_never_set_a_level_gets_the_servers_log_messages_through_the_bridge(
    legacy_server: PeerServer, modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    direct = await _logs_of_an_echo(legacy_server.url)
    async with proxy_for(modern_server.url) as proxy:
        bridged = await _logs_of_an_echo(proxy.endpoint())
        modes = {chain.summary.mode for chain in proxy.chains()}

    assert direct == ["info:echo: hi"]
    assert bridged == direct
    assert "legacy_to_mrtr" in modes  # the call went through the bridge, not past it
