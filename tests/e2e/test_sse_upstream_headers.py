"""A token-protected 2024-11-05 HTTP+SSE server behind ``mcp-proxy``: the client's headers reach it.

The Python SDK's HTTP+SSE server behind a bearer check of the kind users write
(`tests.e2e.channel_peers.GuardedPythonSse`), which writes down every request head it gets. The
proxy's GET of the server's stream and each POST to the endpoint the server named carry the client's
end-to-end headers (`Authorization`, custom ones), as a pass-through sends them; the headers of the
Streamable HTTP transport the client spoke to the proxy (its session id, protocol version, `Accept`)
are that transport's, and stay with it. A client without the token gets the server's own 401 and
its `WWW-Authenticate`, from which an OAuth client starts its flow; the era probe asks with the
credentials of the request it serves, and tries the GET after a 401 too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from proxy.framing.http import parse_upstream
from proxy.transport.probe import probe_upstream
from proxy.transport.upstream_pool import UpstreamPool
from tests.e2e.channel_peers import GuardedPythonSse
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

BEARER = {"Authorization": f"Bearer {GuardedPythonSse.TOKEN}"}
TENANT = {"X-Tenant": "acme"}
ECHO = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": "hi"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture(scope="module")
def guarded() -> Iterator[GuardedPythonSse]:
    with GuardedPythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT) as server:
        yield server


@pytest.fixture(scope="module")
def forced(guarded: GuardedPythonSse) -> Iterator[ProxyProcess]:
    env = settings_env(upstream=guarded.sse_url, upstream_era="legacy", upstream_transport="sse")
    with ProxyProcess(clean_env(**env)) as proxy:
        yield proxy


def _named(head: dict[str, Any], name: str) -> list[str]:
    return [value for key, value in head["headers"] if key.lower() == name]


async def _answer(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The JSON-RPC answer of a legacy POST: a JSON body, or the first `data:` of an SSE one."""
    text = await resp.text()
    if resp.content_type == "text/event-stream":
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    decoded: dict[str, Any] = json.loads(text)
    return decoded


async def test_the_clients_authorization_and_custom_headers_go_with_the_get_and_every_post(
    guarded: GuardedPythonSse, forced: ProxyProcess
) -> None:
    before = len(guarded.heard())
    mine = {**BEARER, **TENANT}
    async with aiohttp.ClientSession() as http:
        url = forced.endpoint("/sse")
        async with http.post(url, json=initialize(), headers={**HEADERS, **mine}) as resp:
            assert resp.status == 200, await resp.text()
            session = resp.headers["Mcp-Session-Id"]
            assert (await _answer(resp))["result"]["serverInfo"], forced.stderr()[-2000:]
        headers = {**session_headers(session, "2024-11-05"), **mine}
        async with http.post(url, json=INITIALIZED, headers=headers) as resp:
            assert resp.status == 202, await resp.text()
        async with http.post(url, json=ECHO, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            assert "hi" in json.dumps(await _answer(resp))

    heard = guarded.heard()[before:]
    assert [h["heard"] for h in heard] == ["GET", "POST", "POST", "POST"], heard
    stream, *posts = heard
    assert stream["target"] == "/sse"
    assert _named(stream, "accept") == ["text/event-stream"]
    for head in heard:
        assert _named(head, "authorization") == [BEARER["Authorization"]], head
        assert _named(head, "x-tenant") == ["acme"], head
        assert _named(head, "mcp-session-id") == [], head
        assert _named(head, "mcp-protocol-version") == [], head
    for head in posts:
        assert head["target"].startswith("/messages/?session_id="), head
        assert _named(head, "content-type") == ["application/json"], head


async def test_a_client_without_the_token_gets_the_servers_401_and_its_challenge(
    forced: ProxyProcess,
) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(forced.endpoint("/sse"), json=initialize(), headers=HEADERS) as resp,
    ):
        body = await resp.text()
        assert resp.status == 401, body
        assert resp.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token"')
    assert json.loads(body) == {"error": "invalid_token"}


async def test_the_probe_finds_the_sse_transport_with_the_asking_requests_credentials(
    guarded: GuardedPythonSse,
) -> None:
    upstream = parse_upstream(guarded.sse_url)
    pool = UpstreamPool(upstream)
    try:
        found = await probe_upstream(pool, upstream, 10.0, tuple(BEARER.items()))
        anonymous = await probe_upstream(pool, upstream, 10.0)
    finally:
        pool.close()
    assert found.transport == "sse", found
    assert anonymous.transport == "http", anonymous
    assert anonymous.reachable, anonymous
    assert anonymous.problem.startswith("HTTP 401 to server/discover, HTTP 401 to initialize"), anonymous
    gets = [h for h in guarded.heard() if h["heard"] == "GET"]
    assert [_named(h, "authorization") for h in gets[-2:]] == [[BEARER["Authorization"]], []], gets
