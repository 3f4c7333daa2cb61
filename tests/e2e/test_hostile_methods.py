"""Client input that must never bend an upstream head: hostile methods, names and shapes, in every mode.

A legacy client bridged to a 2026-07-28 server once had its JSON-RPC `method` copied into the
`Mcp-Method` header as it was: a CR/LF in it smuggled a second request onto a pooled connection, and
a character outside Latin-1 left the connection pinned. The byte-recording upstream
(`recording_upstream`) shows every head the proxy sent, so these tests assert that nothing of such a
request reaches it, that the client hears -32600 (HTTP 400) with its id and the field named, and that
the next client is served on the same pool.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from proxy import SERVER_SOFTWARE
from proxy.runtime import Proxy
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.recording_upstream import Era, RecordingUpstream, recording_upstream

pytestmark = pytest.mark.e2e

ProxyFor = Callable[..., AbstractAsyncContextManager[Proxy]]

LEGACY_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}

HOSTILE_METHODS = {
    "crlf-smuggled-request": "tools/call\r\nX-Smuggled: 1\r\n\r\nPOST /mcp HTTP/1.1\r\nHost: x\r\n\r\n",
    "bare-lf": "tools/call\nX-Smuggled: 1",
    "nul": "tools/call\x00",
    "outside-latin-1": "tools/\u2603call",
    "latin-1-but-not-ascii": "tools/c\u00e4ll",
    "space": "tools/call X",
    "empty": "",
    "too-long": "t" * 257,
}
"""Methods no engine may send anywhere, by what each tries."""


@dataclass
class Mode:
    """One way through the proxy: the upstream's era, the client's, and how a request is dressed."""

    name: str
    upstream: Era
    client: Era


MODES = [
    Mode("pass-through-legacy", "legacy", "legacy"),
    Mode("pass-through-modern", "modern", "modern"),
    Mode("legacy-client-to-modern-server", "modern", "legacy"),
    Mode("modern-client-to-legacy-server", "legacy", "modern"),
]


@dataclass
class Client:
    """A raw client in one mode: posts any body, with the headers its era needs (and its session)."""

    http: aiohttp.ClientSession
    url: str
    era: Era
    session: str | None = None

    async def initialize(self) -> None:
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        status, headers, _ = await self.post_raw(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        )
        assert status == 200
        self.session = headers.get("Mcp-Session-Id")

    def body(self, ident: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self.era == "modern":
            params = modern_params(params)
        return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}

    def headers(self, method: str, params: dict[str, Any]) -> dict[str, str]:
        if self.era == "modern":
            # A header cannot carry what the body's method holds: the client sends a plain one.
            return modern_headers("tools/call", modern_params(params))
        extra = {"Mcp-Session-Id": self.session} if self.session else {}
        return {**LEGACY_HEADERS, **extra}

    async def post_raw(
        self, message: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        sent = headers or {**LEGACY_HEADERS, **({"Mcp-Session-Id": self.session} if self.session else {})}
        async with self.http.post(self.url, data=data, headers=sent) as resp:
            return resp.status, dict(resp.headers), await resp.read()

    async def call(self, ident: Any, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, headers, raw = await self.post_raw(
            self.body(ident, method, params), self.headers(method, params)
        )
        assert headers.get("Content-Type", "").startswith(("application/json", "text/event-stream")), raw
        text = raw.decode()
        if headers["Content-Type"].startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and '"id"' in line)
        answer: dict[str, Any] = json.loads(text)
        return status, answer


@asynccontextmanager
async def client_in(
    proxy_for: ProxyFor, mode: Mode
) -> AsyncIterator[tuple[Client, RecordingUpstream, Proxy]]:
    async with (
        recording_upstream(mode.upstream) as upstream,
        proxy_for(upstream.url("/mcp")) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = Client(http, proxy.endpoint(), mode.client)
        if mode.name == "legacy-client-to-modern-server":
            await client.initialize()
        yield client, upstream, proxy


def assert_refused(status: int, answer: dict[str, Any], ident: Any, field: str) -> None:
    assert status == 400, answer
    assert answer["id"] == ident
    assert answer["error"]["code"] == -32600
    assert answer["error"]["data"]["field"] == field, answer


def assert_nothing_smuggled(upstream: RecordingUpstream) -> None:
    """Every head the upstream parsed is one the proxy meant: a known method, no injected field."""
    for head in upstream.heads:
        assert not head.values("X-Smuggled"), head.raw
        assert head.request_line.endswith(" HTTP/1.1")
        assert head.request_line.startswith(("POST", "GET", "DELETE"))
        assert head.method in (
            None,
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/call",
        ), head


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("method", list(HOSTILE_METHODS.values()), ids=list(HOSTILE_METHODS))
async def test_a_hostile_method_is_refused_with_its_id_and_nothing_reaches_the_upstream(
    proxy_for: ProxyFor, mode: Mode, method: str
) -> None:
    async with client_in(proxy_for, mode) as (client, upstream, _proxy):
        status, answer = await client.call(41, method, {"name": "echo", "arguments": {}})
        assert_refused(status, answer, 41, "method")
        status, answer = await client.call(42, "tools/call", {"name": "echo", "arguments": {}})
        assert status == 200, answer
        assert answer["id"] == 42
        assert answer["result"]["content"][0]["text"] == "echoed"
    assert_nothing_smuggled(upstream)
    assert [h.method for h in upstream.heads].count("tools/call") == 1, "only the honest call went upstream"


async def test_a_smuggling_attempt_in_a_notification_is_refused_too(proxy_for: ProxyFor) -> None:
    mode = MODES[2]
    async with client_in(proxy_for, mode) as (client, upstream, _proxy):
        message = {"jsonrpc": "2.0", "method": "notifications/x\r\nX-Smuggled: 1"}
        status, _, raw = await client.post_raw(message)
        assert status == 400
        assert json.loads(raw)["error"]["data"]["field"] == "method"
    assert_nothing_smuggled(upstream)


async def test_a_lone_surrogate_in_a_tool_name_never_reaches_a_header(proxy_for: ProxyFor) -> None:
    mode = MODES[2]  # the bridge builds Mcp-Name itself from the body
    async with client_in(proxy_for, mode) as (client, upstream, _proxy):
        body = b'{"jsonrpc":"2.0","id":"n1","method":"tools/call","params":{"name":"\\ud800","arguments":{}}}'
        status, _, raw = await client.post_raw(body)
        assert status == 400
        assert json.loads(raw)["error"]["code"] == -32700  # no valid UTF-8 string: not JSON to the proxy
    assert [h.method for h in upstream.heads].count("tools/call") == 0


async def test_a_tool_name_outside_latin_1_is_sent_base64_encoded_by_the_bridge(proxy_for: ProxyFor) -> None:
    mode = MODES[2]
    async with client_in(proxy_for, mode) as (client, upstream, _proxy):
        status, answer = await client.call(
            5, "tools/call", {"name": "\u00e9cho\r\nX-Smuggled: 1", "arguments": {}}
        )
        assert status == 200, answer
    call = next(h for h in upstream.heads if h.method == "tools/call")
    (name,) = call.values("Mcp-Name")
    assert name.startswith("=?base64?")
    assert name.endswith("?=")
    assert_nothing_smuggled(upstream)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
async def test_two_thousand_requests_outside_latin_1_leave_connections_and_descriptors_flat(
    proxy_for: ProxyFor, mode: Mode
) -> None:
    async with client_in(proxy_for, mode) as (client, _upstream, proxy):
        status, _ = await client.call(1, "tools/call", {"name": "echo", "arguments": {}})
        assert status == 200
        pool_before, fds_before = proxy.pool.open_connections, open_descriptors()
        for n in range(2000):
            status, answer = await client.call(n, "tools/\u2603", {"name": "\u2603", "arguments": {}})
            assert status == 400
            assert answer["id"] == n
        status, answer = await client.call("after", "tools/call", {"name": "echo", "arguments": {}})
        assert status == 200
        assert answer["id"] == "after"
        pool_after, fds_after = proxy.pool.open_connections, open_descriptors()
    print(f"\n{mode.name}: pool {pool_before}->{pool_after}, descriptors {fds_before}->{fds_after}")
    assert pool_after <= pool_before
    assert fds_after <= fds_before + 2, "2,000 refused requests pinned descriptors"


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
async def test_an_answer_the_proxy_makes_names_the_proxy_never_its_http_library(
    proxy_for: ProxyFor, mode: Mode
) -> None:
    async with client_in(proxy_for, mode) as (client, _upstream, _proxy):
        message = client.body(43, "tools/call\r\nX: 1", {"name": "echo", "arguments": {}})
        status, headers, _ = await client.post_raw(message, client.headers("tools/call", {"name": "echo"}))
    assert status == 400
    assert headers["Server"] == SERVER_SOFTWARE
