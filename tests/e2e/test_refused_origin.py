"""A server's refusal of a client's Origin reaches that client through either bridge, in its words.

The conformance fixture servers (the official Python SDK's, with its DNS-rebinding defence on) answer
a request whose `Origin` is not a localhost one with HTTP 403 and the text `Invalid Origin header`.
A bridged call from such an origin is refused by the server; the client gets that status and a
JSON-RPC error quoting the server, never a gateway's "upstream MCP server failed". Through the
real `mcp-proxy` command, the bytes on the wire asserted whole.
"""

from __future__ import annotations

import json
from typing import Any, Final

import aiohttp
import pytest

from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

EVIL: Final = {"Host": "evil.example.com", "Origin": "http://evil.example.com"}
"""What a page on a rebound name sends (the conformance suite's own values)."""


def refused(ident: int) -> dict[str, Any]:
    """The answer to a request the fixture server refused for its Origin."""
    words = "Invalid Origin header"
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "error": {
            "code": -32600,
            "message": f"the upstream MCP server refused the request (HTTP 403): {words}",
            "data": {"status": 403, "upstream": words},
        },
    }


def _call(ident: int) -> dict[str, Any]:
    params = {"name": "test_simple_text", "arguments": {}}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


async def test_a_2026_call_from_a_refused_origin_gets_the_servers_403_through_the_bridge() -> None:
    with (
        PeerServer("conformance-legacy") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy,
    ):
        async with aiohttp.ClientSession() as http:
            for ident, extra in ((1, {}), (2, EVIL)):  # a localhost call first: the session is open
                body = _call(ident)
                body["params"] = modern_params(body["params"])
                head = modern_headers("tools/call", body["params"], extra)
                async with http.post(proxy.endpoint(), data=json.dumps(body), headers=head) as answer:
                    status, raw = answer.status, await answer.read()
        assert status == 403, raw
        assert answer.headers["Content-Type"] == "application/json"
        assert json.loads(raw) == refused(2)
        said = proxy.wait_for("upstream_refused")
        assert said is not None
        assert said["status"] == 403, said


async def test_a_legacy_call_from_a_refused_origin_gets_the_servers_403_through_the_bridge() -> None:
    with (
        PeerServer("conformance-modern") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy,
    ):
        async with aiohttp.ClientSession() as http:
            async with http.post(proxy.endpoint(), json=initialize(), headers=HEADERS) as answer:
                assert answer.status == 200, await answer.text()
                session = answer.headers["Mcp-Session-Id"]
            heads = {**HEADERS, **session_headers(session)}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            async with http.post(proxy.endpoint(), json=note, headers=heads) as answer:
                assert answer.status == 202
            async with http.post(proxy.endpoint(), json=_call(2), headers={**heads, **EVIL}) as answer:
                status, raw = answer.status, await answer.read()
                kind = answer.headers["Content-Type"]
        assert (status, kind) == (403, "application/json"), raw
        assert json.loads(raw) == refused(2)
