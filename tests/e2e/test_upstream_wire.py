"""The bytes the proxy puts on the upstream wire: origin-form request lines and one `Host`, on every path.

The upstream records each request head as it arrived (`recording_upstream`), so nothing in between
normalises an absolute-form target into a path. Each flow runs for an upstream URL with and without a
query and with a path prefix: the era probe, pass-through, legacy client -> 2026-07-28 server and
2026-07-28 client -> legacy server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import pytest
import uvloop

from proxy.runtime import Proxy
from tests.e2e.modern_raw import modern_call
from tests.e2e.recording_upstream import SESSION, Era, RecordingUpstream, recording_upstream
from tests.transport.helpers import captured_logs

pytestmark = pytest.mark.e2e

ProxyFor = Callable[..., AbstractAsyncContextManager[Proxy]]

VARIANTS = [("/mcp", ""), ("/mcp", "key=a%2Fb&x=1"), ("/team/a/mcp", ""), ("/team/a/mcp", "k=%20v")]
"""Upstream URL path and query: plain, with a query, under a prefix, both."""

LEGACY_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def expected_target(path: str, query: str, client_query: str = "") -> str:
    queries = "&".join(q for q in (query, client_query) if q)
    return f"{path}?{queries}" if queries else path


def assert_wire(upstream: RecordingUpstream, target: str, *, methods: set[str]) -> None:
    """Every head: `VERB <target> HTTP/1.1` and exactly one `Host` naming the upstream; `methods` all seen."""
    assert upstream.heads, "the upstream received nothing"
    for head in upstream.heads:
        verb = head.request_line.split(" ", 1)[0]
        assert head.request_line == f"{verb} {target} HTTP/1.1", head.raw
        assert head.values("Host") == [f"127.0.0.1:{upstream.port}"], head.raw
    seen = {head.method for head in upstream.heads}
    assert methods <= seen, f"expected {methods}, the upstream saw {seen}"


async def legacy_post(
    http: aiohttp.ClientSession, url: str, message: dict[str, Any], session: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = dict(LEGACY_HEADERS, **({"Mcp-Session-Id": session} if session else {}))
    async with http.post(url, data=json.dumps(message), headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def legacy_call(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """initialize, initialized, tools/call as a 2025-11-25 client; the tools/call response."""
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    status, headers, _ = await legacy_post(
        http, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    )
    assert status == 200
    session = headers.get("Mcp-Session-Id")
    status, _, _ = await legacy_post(
        http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session
    )
    assert status == 202
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
    status, headers, body = await legacy_post(http, url, call, session)
    assert status == 200, body
    text = body.decode()
    if headers.get("Content-Type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and '"result"' in line)
    answer: dict[str, Any] = json.loads(text)
    return answer


async def run_flow(
    proxy_for: ProxyFor, era: Era, path: str, query: str, client: str, client_query: str
) -> Any:
    async with recording_upstream(era) as upstream:
        async with proxy_for(upstream.url(path, query)) as proxy, aiohttp.ClientSession() as http:
            url = proxy.endpoint() + (f"?{client_query}" if client_query else "")
            if client == "legacy":
                answer = await legacy_call(http, url)
            else:
                _, answer = await modern_call(
                    http, url, "tools/call", {"name": "echo", "arguments": {}}, ident=7
                )
        return upstream, answer


@pytest.mark.parametrize(("path", "query"), VARIANTS)
async def test_probe_and_pass_through_send_origin_form_with_the_upstreams_host(
    proxy_for: ProxyFor, path: str, query: str
) -> None:
    upstream, answer = await run_flow(proxy_for, "legacy", path, query, "legacy", "")

    assert answer["result"]["content"][0]["text"] == "echoed"
    assert_wire(
        upstream, expected_target(path, query), methods={"server/discover", "initialize", "tools/call"}
    )
    assert any(h.request_line.startswith("DELETE ") for h in upstream.heads), "the probe's session is deleted"
    client_session = [h for h in upstream.heads if h.method == "tools/call"]
    assert client_session[0].values("Mcp-Session-Id") == [SESSION]


@pytest.mark.parametrize(("path", "query"), VARIANTS)
async def test_the_legacy_to_modern_bridge_sends_origin_form_with_the_upstreams_host(
    proxy_for: ProxyFor, path: str, query: str
) -> None:
    upstream, answer = await run_flow(proxy_for, "modern", path, query, "legacy", "")

    assert answer["result"]["content"][0]["text"] == "echoed"
    assert_wire(upstream, expected_target(path, query), methods={"server/discover", "tools/call"})
    call = next(h for h in upstream.heads if h.method == "tools/call")
    assert call.values("Mcp-Method") == ["tools/call"]


@pytest.mark.parametrize(("path", "query"), VARIANTS)
async def test_the_modern_to_legacy_bridge_sends_origin_form_with_the_upstreams_host(
    proxy_for: ProxyFor, path: str, query: str
) -> None:
    upstream, answer = await run_flow(proxy_for, "legacy", path, query, "modern", "")

    assert answer["result"]["content"][0]["text"] == "echoed"
    assert answer["result"]["resultType"] == "complete"
    methods = {"server/discover", "initialize", "notifications/initialized", "tools/call"}
    assert_wire(upstream, expected_target(path, query), methods=methods)


@pytest.mark.parametrize(
    ("era", "client"), [("legacy", "legacy"), ("modern", "legacy"), ("legacy", "modern")]
)
async def test_the_clients_own_query_follows_the_upstreams_on_every_path(
    proxy_for: ProxyFor, era: Era, client: str
) -> None:
    upstream, _ = await run_flow(proxy_for, era, "/team/a/mcp", "key=1", client, "trace=on")

    discover = [h.request_line for h in upstream.heads if h.method == "server/discover"]
    relayed = [h.request_line for h in upstream.heads if h.method == "tools/call"]
    assert discover[0] == "POST /team/a/mcp?key=1 HTTP/1.1"  # the start-up probe has no client behind it
    assert relayed
    assert set(relayed) == {"POST /team/a/mcp?key=1&trace=on HTTP/1.1"}


async def test_the_proxy_under_test_runs_on_uvloop_as_the_command_does() -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


async def test_the_upstreams_credentials_never_reach_the_log_or_the_feed(proxy_for: ProxyFor) -> None:
    async with recording_upstream("legacy") as upstream:
        url = f"http://127.0.0.1:{upstream.port}/mcp?api_key=k-123"  # userinfo is refused (test_config)
        with captured_logs() as logs:
            async with proxy_for(url) as proxy:
                info = proxy.info()
    shown = f"http://127.0.0.1:{upstream.port}/mcp?api_key=<redacted>"
    assert info.upstream == shown
    listening = next(entry for entry in logs if entry["event"] == "listening")
    assert listening["upstream"] == shown
    assert listening["endpoint"] == f"{proxy.url}/mcp", "the line names where clients go"
    assert not [entry for entry in logs if "k-123" in repr(entry)]
