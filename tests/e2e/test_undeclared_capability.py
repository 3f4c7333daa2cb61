"""A real SDK client that declares no elicitation capability, calling a tool that elicits: the chain
says why the call failed, as the MCP Inspector's CLI (which declares none) makes people wonder."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env

pytestmark = pytest.mark.e2e


async def test_a_question_the_client_never_declared_is_named_in_the_chain_of_the_call_it_failed(
    legacy_server: PeerServer,
) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:
        async with httpx2.AsyncClient() as http:
            server = streamable_http_client(proxy.endpoint(), http_client=http)
            async with Client(server, mode="legacy", cache=None, read_timeout_seconds=10.0) as client:
                with anyio.fail_after(15):
                    try:
                        result = await client.call_tool("ask_name", {})
                        failed = bool(result.is_error)
                    except MCPError:
                        failed = True
        chains = await admin_json(proxy.admin + "/api/chains?q=tool:ask_name")
    assert failed  # the client refused what it never said it could do, and the tool failed on it
    (chain,) = chains
    assert any(
        "the server asked elicitation/create, but the client declared no elicitation.form capability "
        "in its initialize" in note
        for note in chain["notes"]
    ), chain
