"""A caller the server has not accepted hears the server's 401 through either bridge, not another
caller's answer.

Each bridge answers one request from what the server told an earlier caller: the legacy-client
bridge answers `initialize` from a cached `server/discover`, the modern-client bridge answers
`server/discover` from a session's InitializeResult. A server that asks for a bearer token judges
each request by its credentials, so a caller without a token (or with one the server refuses) must
reach the server and get its refusal, never capabilities, `serverInfo` and `instructions` fetched
with someone else's token. Checked against the SDK's own bearer check (`tests.peers.bearer_app`),
through the real `mcp-proxy` command told the server's era (as a server asking for a token answers
the start-up probe 401), the bytes on the wire read.

A caller with the token, on the other hand, is bridged from its first request whichever era the
server speaks, with the era left to the probe: the start-up probe was refused for want of
credentials, so that request is probed again with its token at once.
"""

from __future__ import annotations

import json
from typing import Any, Final

import aiohttp
import pytest

from proxy.transport.routing import CREDENTIALS_HINT
from tests.e2e.legacy_raw import HEADERS, initialize
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.bearer_app import TOKEN
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

GOOD: Final = {"Authorization": f"Bearer {TOKEN}"}
REFUSED_CALLERS: Final = ({}, {"Authorization": "Bearer not-the-token"})
"""A caller without credentials, and one whose token the server refuses."""

WORDS: Final = '{"error": "invalid_token", "error_description": "Authentication required"}'
"""What the SDK's bearer check says in the body of its 401."""


def refused(ident: int | str) -> dict[str, Any]:
    """The bridge's answer to a request the server refused with 401."""
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "error": {
            "code": -32600,
            "message": f"the upstream MCP server refused the request (HTTP 401): {WORDS}",
            "data": {"status": 401, "upstream": WORDS},
        },
    }


async def test_a_legacy_caller_without_the_token_is_not_initialized_from_a_token_holders_discovery() -> None:
    with (
        PeerServer("modern-bearer") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url, upstream_era="modern"))) as proxy,
    ):
        async with aiohttp.ClientSession() as http:
            heads = {**HEADERS, **GOOD}
            async with http.post(proxy.endpoint(), json=initialize(1), headers=heads) as answer:
                assert answer.status == 200, await answer.text()
                assert "serverInfo" in (await answer.json())["result"]
            outcomes = []
            for ident, extra in enumerate(REFUSED_CALLERS, start=2):
                heads = {**HEADERS, **extra}
                async with http.post(proxy.endpoint(), json=initialize(ident), headers=heads) as answer:
                    outcomes.append((answer.status, json.loads(await answer.read())))
                    assert "Mcp-Session-Id" not in answer.headers
    assert outcomes == [(401, refused(2)), (401, refused(3))]


async def test_a_2026_caller_without_the_token_is_not_discovered_from_a_token_holders_session() -> None:
    with (
        PeerServer("legacy-bearer") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url, upstream_era="legacy"))) as proxy,
    ):
        async with aiohttp.ClientSession() as http:
            outcomes = []
            for ident, extra in enumerate(({**GOOD}, *REFUSED_CALLERS), start=1):
                body = {"jsonrpc": "2.0", "id": ident, "method": "server/discover"}
                body["params"] = modern_params({})
                head = modern_headers("server/discover", body["params"], extra)
                async with http.post(proxy.endpoint(), data=json.dumps(body), headers=head) as answer:
                    outcomes.append((answer.status, json.loads(await answer.read())))
    assert outcomes[0][0] == 200, outcomes[0]
    assert outcomes[0][1]["result"]["instructions"] == "Test peer (inflight style)."
    assert outcomes[1:] == [(401, refused(2)), (401, refused(3))]


async def test_a_legacy_caller_with_a_token_is_bridged_at_once_to_a_2026_server_that_wants_one() -> None:
    """The start-up probe gets the server's 401 (it has no credentials), so the era is unknown. An
    OAuth client back from its login within the reprobe interval sends its `initialize` with its
    token: that request is probed with its credentials at once, not passed through to a 2026-only
    server, whose refusal (-32022) would fail the client's first connection."""
    with (
        PeerServer("modern-bearer") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy,
    ):
        async with aiohttp.ClientSession() as http:
            heads = {**HEADERS, **GOOD}
            async with http.post(proxy.endpoint(), json=initialize(1), headers=heads) as answer:
                status, body = answer.status, json.loads(await answer.read())
        proxy.stop()
        log = proxy.events()
    assert status == 200, body
    assert "serverInfo" in body["result"]
    assert [e["eras"] for e in log if e["event"] == "upstream_eras"] == ["modern"]


async def test_a_2026_caller_with_a_token_is_bridged_at_once_to_a_legacy_server_that_wants_one() -> None:
    """The legacy-only server refuses the start-up probe's `server/discover` 400 for its version
    before its bearer check, and its `initialize` 401: the proxy says it wants credentials, so the
    SDK's 2026-07-28 client's first call (with its token, within the reprobe interval) is probed with
    that token at once and bridged, not passed through to a server that refuses its version."""
    with (
        PeerServer("legacy-bearer") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy,
    ):
        async with client_for(proxy.endpoint(), "2026-07-28", headers=GOOD) as client:
            tools = sorted(tool.name for tool in (await client.list_tools()).tools)
            added = await client.call_tool("add", {"a": 2, "b": 3})
        proxy.stop()
        log = proxy.events()
    assert "add" in tools
    assert added.structured_content == {"result": 5}
    unknown = [(e["problem"], e["hint"]) for e in log if e["event"] == "upstream_era_unknown"]
    assert unknown == [("HTTP 400 to server/discover, HTTP 401 to initialize", CREDENTIALS_HINT)]
    assert [e["eras"] for e in log if e["event"] == "upstream_eras"] == ["legacy"]
    assert {e["mode"] for e in log if e["event"] == "exchange"} == {"mrtr_to_legacy"}
