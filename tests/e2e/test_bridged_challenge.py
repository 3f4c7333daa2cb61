"""A bridged 401 carries the server's `WWW-Authenticate`, its `resource_metadata` on the proxy's origin.

An OAuth client learns where to log in from the challenge of the 401 its first request gets. When a
bridge stands between it and the server (a 2026-07-28 client, a 2025-era server), the 401 is the
answer to the bridge's own `initialize`, and the client must still get the server's challenge, with
the URL moved onto the proxy's origin by the rules pass-through follows (the client can reach only
the proxy, and its SDK refuses a resource that is not the URL it was given), said in the log and the
capture as `origin_rewritten`; with `rewrite_oauth_origin = false` the challenge is the server's
own. Checked with the SDK's `FastMCP(auth_server_provider=...)` advertising its own URL behind the
real `mcp-proxy` command, the bytes of the 401 a 2026 client gets read whole (no 2026 OAuth client
is among the peers); and through the other bridge, the SDK's bearer check naming another origin,
left as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest

from tests.e2e.legacy_raw import HEADERS, initialize
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.test_bridged_credentials import refused
from tests.e2e.test_oauth_origin import PRM, rewrites
from tests.peers.bearer_app import RESOURCE
from tests.peers.runner import PeerServer, Sdk1Server
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

CHALLENGE: Final = (
    'Bearer error="invalid_token", error_description="Authentication required", resource_metadata="{}"'
)
"""The SDK's challenge, naming the protected resource metadata at the URL given."""


async def _discover_without_token(url: str) -> tuple[int, dict[str, Any], list[str]]:
    """A 2026 client's first `server/discover`, no token: status, body, its challenges."""
    body = {"jsonrpc": "2.0", "id": "server-discover-probe-1", "method": "server/discover"}
    body["params"] = modern_params({})
    head = modern_headers("server/discover", body["params"])
    async with aiohttp.ClientSession() as http, http.post(url, data=json.dumps(body), headers=head) as answer:
        return answer.status, json.loads(await answer.read()), answer.headers.getall("WWW-Authenticate", [])


async def test_a_2026_client_gets_the_legacy_servers_challenge_naming_the_proxy(tmp_path: Path) -> None:
    capture = tmp_path / "run.jsonl"
    with Sdk1Server(oauth=True, advertise=True) as server:
        settings = settings_env(upstream=server.url, upstream_era="legacy", capture=capture)
        with ProxyProcess(clean_env(**settings)) as proxy:
            status, body, challenges = await _discover_without_token(proxy.endpoint())
            said = proxy.wait_for("origin_rewritten")
            proxy.stop()
    up, me = server.base_url, proxy.listen
    assert (status, body) == (401, refused("server-discover-probe-1"))
    assert challenges == [CHALLENGE.format(f"{me}{PRM}")]
    assert said is not None
    assert (said["changed"], said["was"], said["now"]) == ("WWW-Authenticate resource_metadata", up, me)
    assert rewrites(capture) == [("/mcp", "to_client", "WWW-Authenticate resource_metadata", up, me)]


async def test_without_origin_rewriting_the_bridged_challenge_is_the_servers_own() -> None:
    with Sdk1Server(oauth=True, advertise=True) as server:
        settings = settings_env(upstream=server.url, upstream_era="legacy", rewrite_oauth_origin="false")
        with ProxyProcess(clean_env(**settings)) as proxy:
            status, _, challenges = await _discover_without_token(proxy.endpoint())
    assert status == 401
    assert challenges == [CHALLENGE.format(f"{server.base_url}{PRM}")]


async def test_a_legacy_client_gets_the_2026_servers_challenge_through_the_bridge() -> None:
    with (
        PeerServer("modern-bearer") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url, upstream_era="modern"))) as proxy,
    ):
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), json=initialize(7), headers=HEADERS) as answer,
        ):
            status, raw = answer.status, await answer.read()
            challenges = answer.headers.getall("WWW-Authenticate", [])
    metadata = RESOURCE.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    assert (status, json.loads(raw)) == (401, refused(7))
    assert challenges == [CHALLENGE.format(metadata)]
