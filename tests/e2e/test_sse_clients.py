"""HTTP+SSE (2024-11-05) clients in front of the proxy: `GET /sse`, `POST /messages?sessionId=...`.

The `mcp-proxy` command (default settings) sits in front of the Python SDK's Streamable HTTP
servers; the Python SDK's SSE client (`mcp.client.sse`) and the TypeScript SDK v1's
(`SSEClientTransport`) open the proxy's `/sse` and run the test scenarios. A legacy server is
passed through; a 2026-07-28 server is reached through the legacy-client bridge (questions in
flight become MRTR rounds). The `endpoint` event must name the proxy's own message path, never the
upstream's address; `/api/chains` and the log lines must say the client came over `sse`. A stream
over `max_sse_sessions` is refused 503; a POST naming no live session gets 404.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any, Final

import aiohttp
import pytest

from tests.peers.clients import ClientKind, run_client
from tests.peers.runner import PeerServer
from tests.peers.scenarios import expected_result
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env

pytestmark = pytest.mark.e2e

SCENARIOS: Final = ["echo", "ask_name", "ask_two_at_once", "list_client_roots", "progress"]
ENDPOINT_EVENT: Final = rb"event: endpoint\ndata: /messages\?sessionId=[0-9a-f]{32}\n\n"
"""The first event of the proxy's stream: the proxy's own message path and a minted session id."""


@pytest.fixture
def proxy_before(request: pytest.FixtureRequest) -> Iterator[ProxyProcess]:
    server: PeerServer = request.getfixturevalue(request.param)
    with ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy:
        yield proxy


@pytest.mark.parametrize(
    ("proxy_before", "client", "mode"),
    [
        ("legacy_server", "python-legacy", "passthrough"),
        ("modern_server", "python-legacy", "legacy_to_mrtr"),
        ("legacy_server", "ts-v1", "passthrough"),
        ("modern_server", "ts-v1", "legacy_to_mrtr"),
    ],
    indirect=["proxy_before"],
)
async def test_an_sse_client_reaches_a_streamable_http_server_through_the_proxy(
    proxy_before: ProxyProcess, client: ClientKind, mode: str
) -> None:
    proxy = proxy_before
    run = await asyncio.to_thread(run_client, client, proxy.endpoint("/sse"), SCENARIOS, transport="sse")
    for scenario in SCENARIOS:
        assert run.lines[scenario] == expected_result(scenario), run.stderr[-3000:]
    chains = await admin_json(f"{proxy.admin}/api/chains?limit=500")
    calls = [c for c in chains if c.get("method") == "tools/call"]
    assert len(calls) >= len(SCENARIOS)
    assert {(c["client_transport"], c["upstream_transport"], c["mode"]) for c in calls} == {
        ("sse", "http", mode)
    }

    def exchanges(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e for e in events if e.get("event") == "exchange" and e.get("method") == "tools/call"]

    # An exchange's line is written as it closes, so the last may reach the reader after the client
    # is done: wait (bounded) for a line per scenario.
    events = await asyncio.to_thread(proxy.wait_events, lambda e: len(exchanges(e)) >= len(SCENARIOS))
    lines = exchanges(events)
    assert len(lines) >= len(SCENARIOS)
    assert {(line["client"], line["upstream"]) for line in lines} == {("sse", "http")}
    opened = [e for e in events if e.get("event") == "sse_client_opened"]
    assert len(opened) == len(SCENARIOS)  # one stream per client connection


async def test_the_endpoint_event_names_the_proxys_own_message_path(legacy_server: PeerServer) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.get(proxy.endpoint("/sse")) as resp,
        ):
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/event-stream"
            first = await resp.content.readuntil(b"\n\n")
            assert re.fullmatch(ENDPOINT_EVENT, first), first
            assert str(legacy_server.port).encode() not in first
            endpoint = proxy.listen + first.split(b"data: ", 1)[1].strip().decode()
            ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
            async with http.post(endpoint, data=ping, headers={"Content-Type": "application/json"}) as posted:
                assert posted.status == 202
            # The server refuses a ping before initialize; whatever it says comes back on the stream.
            event = await resp.content.readuntil(b"\n\n")
            assert event.startswith(b"event: message\ndata: ")
            assert json.loads(event.split(b"data: ", 1)[1])["id"] == 1
            async with http.post(proxy.listen + "/messages?sessionId=nope", data=ping) as unknown:
                assert unknown.status == 404
                refused = await unknown.json()
                assert "GET /sse" in refused["error"]["message"]
                assert refused["id"] == 1  # the client can tell which request failed


async def test_streams_past_max_sse_sessions_are_refused_with_503(legacy_server: PeerServer) -> None:
    env = clean_env(**settings_env(upstream=legacy_server.url, max_sse_sessions=1))
    with ProxyProcess(env) as proxy:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(proxy.endpoint("/sse")) as first:
                assert first.status == 200
                await first.content.readuntil(b"\n\n")
                async with http.get(proxy.endpoint("/sse")) as second:
                    assert second.status == 503
                    assert (await second.json())["error"]["data"] == {"setting": "max_sse_sessions"}
            await proxy.logged("sse_client_closed")


async def test_a_stream_whose_messages_outgrow_sse_queue_bytes_is_cut_off_with_a_log_line(
    legacy_server: PeerServer,
) -> None:
    env = clean_env(**settings_env(upstream=legacy_server.url, sse_queue_bytes=1000))
    with ProxyProcess(env) as proxy:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.get(proxy.endpoint("/sse")) as stream,
        ):
            first = await stream.content.readuntil(b"\n\n")
            endpoint = proxy.listen + first.split(b"data: ", 1)[1].strip().decode()
            initialize = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            }
            async with http.post(endpoint, json=initialize) as posted:
                assert posted.status == 202
            answer = await stream.content.readuntil(b"\n\n")
            assert b'"protocolVersion"' in answer
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            async with http.post(endpoint, json=initialized) as posted:
                assert posted.status == 202
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            async with http.post(endpoint, json=listing) as posted:  # its answer is well over 1000 bytes
                assert posted.status == 202
            cut = await proxy.logged("sse_client_too_slow")
            assert cut["setting"] == "sse_queue_bytes"
            assert cut["limit"] == 1000
            assert await stream.content.read() == b""  # the stream ended, without the answer
