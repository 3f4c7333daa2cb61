"""With an admin token set, the token is judged before anything else: only a probe's GET or HEAD of
`/healthz` or `/readyz` is answered without it.

The real `mcp-proxy` with `admin_token` answers a request without the token `401` with
`WWW-Authenticate`, whatever else is wrong with it (a method the path does not take, a body a page
would send), so nothing about the API (which paths exist, which methods they take) is told to a
caller without the token; with it, the same requests get the answers the docs give them.
"""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.e2e.commanded import TOKEN, ProxyFleet
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e

WITHOUT_TOKEN = [
    ("POST", "/healthz"),
    ("POST", "/readyz"),
    ("DELETE", "/healthz"),
    ("POST", "/metrics"),
    ("PUT", "/api/chains"),
    ("POST", "/nowhere"),
]


async def ask(method: str, url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.request(method, url, data=b"x", headers={"Content-Type": "text/plain", **headers}) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


@pytest.mark.parametrize(("method", "path"), WITHOUT_TOKEN, ids=[f"{m} {p}" for m, p in WITHOUT_TOKEN])
async def test_a_request_without_the_token_gets_401_before_anything_else(
    fleet: ProxyFleet, legacy_server: PeerServer, method: str, path: str
) -> None:
    proxy = await fleet.at(legacy_server)
    status, headers, body = await ask(method, proxy.admin_url + path, {})
    assert status == 401, body
    assert headers["WWW-Authenticate"].startswith("Bearer")
    assert json.loads(body)["error"] == "unauthorized"
    with_token = await ask(method, proxy.admin_url + path, {"Authorization": f"Bearer {TOKEN}"})
    assert with_token[0] in (404, 405, 415), with_token  # what the docs say of each, once authorized


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_a_probe_gets_or_heads_the_status_paths_without_the_token(
    fleet: ProxyFleet, legacy_server: PeerServer, path: str
) -> None:
    proxy = await fleet.at(legacy_server)
    async with aiohttp.ClientSession() as http:
        async with http.get(proxy.admin_url + path) as resp:
            assert resp.status == 200, await resp.text()
        async with http.head(proxy.admin_url + path) as resp:
            assert resp.status == 200
            assert await resp.read() == b""
