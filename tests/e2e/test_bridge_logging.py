"""Log messages across the legacy-client bridge: what a legacy client gets without asking.

A legacy server sends a client every log message its tools write, `logging/setLevel` or not; a
2026-07-28 server sends a request's log messages only when the request's `_meta` asks. The bridge
asks on behalf of a legacy client that never set a level, so the client sees through the proxy what
it sees from a legacy server direct. Real SDK peers of both eras, the SDK's legacy client, and the
`mcp-proxy` command.
"""

from __future__ import annotations

import pytest

from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env

pytestmark = pytest.mark.e2e


async def _logs_of_an_echo(url: str) -> list[str]:
    log = CallbackLog()
    async with client_for(url, "legacy", log=log) as client:
        await client.call_tool("echo", {"text": "hi"})
    return list(log.logs)


async def test_a_legacy_client_that_never_set_a_level_gets_the_servers_log_messages_through_the_bridge(
    legacy_server: PeerServer, modern_server: PeerServer
) -> None:
    direct = await _logs_of_an_echo(legacy_server.url)
    with ProxyProcess(clean_env(**settings_env(upstream=modern_server.url))) as proxy:  # the command
        bridged = await _logs_of_an_echo(proxy.endpoint())
        exported = await admin_json(proxy.admin + "/api/export.json")
    modes = {chain["chain"]["mode"] for chain in exported["chains"]}

    assert direct == ["info:echo: hi"]
    assert bridged == direct
    assert "legacy_to_mrtr" in modes  # the call went through the bridge, not past it
