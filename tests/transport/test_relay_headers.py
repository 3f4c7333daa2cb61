"""Pass-through relay at the HTTP head: which headers cross, how paths map, statuses and bodies unchanged.

Fake upstreams here record the exact request head they receive, which no real MCP peer exposes.
"""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from yarl import URL

from proxy.flows.events import ChainStatus
from tests.transport.helpers import CLIENT_ACCEPT, RELAY_ONLY, client_session, fake_upstream, rpc

END_TO_END = [
    ("Mcp-Session-Id", "sess-0f9e8d7c"),
    ("MCP-Protocol-Version", "2025-11-25"),
    ("Mcp-Method", "tools/call"),
    ("Mcp-Name", "echo"),
    ("Mcp-Param-Foo", "=?base64?YmFy?="),
    ("Last-Event-ID", "stream-1/42"),
    ("Authorization", "Bearer tok-secret-123"),
    ("X-Custom", "keep me, exactly"),
]
"""Headers that belong to the exchange and must reach the upstream byte for byte."""

HOP_BY_HOP = [
    ("Connection", "keep-alive, X-Drop-Me"),
    ("X-Drop-Me", "named in Connection, so connection-scoped"),
    ("Keep-Alive", "timeout=5, max=100"),
    ("TE", "trailers"),
    ("Upgrade", "h2c"),
    ("Proxy-Authorization", "Basic cHJveHk6cHc="),
]
"""Connection-scoped headers (RFC 9110 7.6.1) a proxy must not forward."""


async def fake_upstream_that_records_heads(request: web.Request) -> web.StreamResponse:
    """Answers every request with a JSON result plus headers the client must see back."""
    return web.json_response(
        {"jsonrpc": "2.0", "id": 1, "result": {"content": []}},
        headers={"Mcp-Session-Id": "sess-0f9e8d7c", "X-Upstream-Custom": "from upstream"},
    )


async def test_end_to_end_headers_reach_upstream_unchanged_and_hop_by_hop_headers_do_not(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_records_heads) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        body = rpc("tools/call", 1, name="echo", arguments={"foo": "bar"})
        async with (
            client_session() as client,
            client.post(
                proxy.endpoint(), data=body, headers={**CLIENT_ACCEPT, **dict(END_TO_END + HOP_BY_HOP)}
            ) as response,
        ):
            assert response.status == 200
            await response.read()
        (seen,) = fake.seen
        for name, value in END_TO_END:
            assert (name, value) in seen.headers, f"{name} did not reach the upstream unchanged"
        for name, _ in HOP_BY_HOP:
            assert name.lower() not in seen.names(), f"hop-by-hop header {name} was forwarded"
        assert seen.body == body


@pytest.mark.parametrize(
    "path_qs",
    ["/mcp", "/mcp?tenant=acme&q=a%20b&path=x%2Fy", "/mcp/tenants/a%2Fb?x=%3D"],
)
async def test_upstream_sees_its_own_host_and_the_clients_path_and_query_as_sent(proxy_for, path_qs):
    async with (
        fake_upstream(fake_upstream_that_records_heads) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        upstream_host = fake.url.removeprefix("http://").removesuffix("/mcp")
        assert proxy.endpoint() == proxy.url + "/mcp"
        # encoded=True: the client sends the path and query exactly as written here
        target = URL(proxy.url + path_qs, encoded=True)
        async with (
            client_session() as client,
            client.post(target, data=rpc("ping", 1), headers=CLIENT_ACCEPT) as response,
        ):
            assert response.status == 200
        (seen,) = fake.seen
        assert seen.header("Host") == upstream_host
        assert seen.path_qs == path_qs


async def test_upstream_response_headers_come_back_to_the_client(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_records_heads) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        client_session() as client,
        client.post(proxy.endpoint(), data=rpc("ping", 1), headers=CLIENT_ACCEPT) as response,
    ):
        assert response.headers["Mcp-Session-Id"] == "sess-0f9e8d7c"
        assert response.headers["X-Upstream-Custom"] == "from upstream"
        assert json.loads(await response.read())["result"] == {"content": []}


@pytest.mark.parametrize(
    ("http_method", "status", "content_type", "body"),
    [
        (
            "POST",
            400,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}',
        ),
        ("POST", 404, "text/plain", b"Session not found"),
        ("GET", 405, "text/plain", b"GET streams are not offered here"),
    ],
)
async def test_upstream_error_statuses_and_bodies_reach_the_client_unchanged(
    proxy_for, http_method, status, content_type, body
):
    async def fake_upstream_that_refuses(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, body=body, content_type=content_type, headers={"X-Why": "refused"})

    async with fake_upstream(fake_upstream_that_refuses) as fake, proxy_for(fake.url, **RELAY_ONLY) as proxy:
        async with (
            client_session() as client,
            client.request(
                http_method,
                proxy.endpoint(),
                data=rpc("tools/list", 1) if http_method == "POST" else None,
                headers={**CLIENT_ACCEPT, "Mcp-Session-Id": "sess-1"},
            ) as response,
        ):
            assert response.status == status
            assert response.content_type == content_type
            assert response.headers["X-Why"] == "refused"
            assert await response.read() == body
        assert [s.method for s in fake.seen] == [http_method]
        (chain,) = list(proxy.chains())
        assert chain.summary.http_status == status


async def test_notification_post_gets_the_upstreams_202_with_an_empty_body(proxy_for):
    async def fake_upstream_that_accepts(request: web.Request) -> web.StreamResponse:
        return web.Response(status=202)

    async with fake_upstream(fake_upstream_that_accepts) as fake, proxy_for(fake.url, **RELAY_ONLY) as proxy:
        note = rpc("notifications/initialized", None)
        async with (
            client_session() as client,
            client.post(
                proxy.endpoint(), data=note, headers={**CLIENT_ACCEPT, "Mcp-Session-Id": "sess-1"}
            ) as response,
        ):
            assert response.status == 202
            assert await response.read() == b""
        assert [s.body for s in fake.seen] == [note]
        (chain,) = list(proxy.chains())
        assert chain.summary.method == "notifications/initialized"
        assert chain.summary.status is ChainStatus.OK
