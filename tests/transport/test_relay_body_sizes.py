"""What pass-through records of a large answer: every byte the client got counted once, and an answer
over `max_inspected_bytes` relayed whole and recorded as not inspected, never as a call left unanswered.

The upstreams are real MCP servers: the SDK's legacy peer, whose answers come as SSE events (a long one
arrives over several reads, as any large tool result does), and its 2026-07-28 peer, which answers JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.flows.events import ChainChanged, ChainStatus
from proxy.record.capture import read_capture
from proxy.runtime import Proxy
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.sidecar import run_mcp_proxy
from tests.transport.helpers import (
    CLIENT_ACCEPT,
    bounded,
    captured_logs,
    client_session,
    drained,
    rpc,
    wait_until,
)
from tests.transport.test_relay_observation import open_session

pytestmark = pytest.mark.asyncio


async def post(proxy: Proxy, client: aiohttp.ClientSession, body: bytes, session: str | None) -> bytes:
    """POST one message through the proxy; the whole answer, once the proxy closed the exchange."""
    headers = {**CLIENT_ACCEPT, **({"Mcp-Session-Id": session} if session else {})}
    async with client.post(proxy.endpoint(), data=body, headers=headers) as response:
        data = await bounded(response.read(), what="the upstream's answer through the proxy")
        assert response.status in (200, 202)
    await wait_until(lambda: drained(proxy), what="the proxy to close the exchange")
    return data


@pytest.mark.parametrize("chars", [2_000, 300_000], ids=["one-read", "many-reads"])
async def test_bytes_out_is_the_bytes_the_client_got_however_many_reads_an_event_spans(
    proxy_for, legacy_server: PeerServer, chars: int
):
    async with proxy_for(legacy_server.url) as proxy, client_session() as client:
        session = await open_session(proxy, client)
        call = rpc("tools/call", 2, name="echo", arguments={"text": "x" * chars})
        with captured_logs() as logs:
            got = await post(proxy, client, call, session)

    assert got.count(b"x" * chars) == 2  # the echo, and the log notification that quotes it
    (line,) = [entry for entry in logs if entry["event"] == "exchange"]
    assert line["trouble"] is None
    assert line["bytes_out"] == len(got)


LIMIT = 4096
"""`max_inspected_bytes` for the tests of a body over it: small, so an ordinary answer passes it."""


async def errors_counted(proxy: Proxy) -> str:
    """The `mcp_proxy_errors_total` lines of the proxy's metrics."""
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as http, http.get(proxy.admin_url + "/metrics") as resp:
        text = await resp.text()
    return "\n".join(line for line in text.splitlines() if line.startswith("mcp_proxy_errors_total{"))


async def live_har(proxy: Proxy) -> dict[str, Any]:
    """The running proxy's HAR (`/api/export.har`)."""
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as http, http.get(proxy.admin_url + "/api/export.har") as resp:
        assert resp.status == 200
        har: dict[str, Any] = json.loads(await resp.read())
    return har


def call_entry(har: dict[str, Any]) -> dict[str, Any]:
    """The HAR entry of the exchange that carried the call with id 3."""
    entries = har["log"]["entries"]
    (entry,) = [e for e in entries if e["_mcp"]["side"] == "client" and 3 in e["_mcp"]["jsonrpc_ids"]]
    return entry


def assert_not_inspected(
    proxy: Proxy, logs: list[dict[str, object]], got: bytes, path: Path, live: dict[str, Any]
) -> None:
    """The call's answer went by unread: recorded so (log line, chain, capture, both HARs), its bytes
    counted as relayed, and as no failure."""
    (line,) = [entry for entry in logs if entry["event"] == "exchange"]
    assert line["trouble"] is None
    assert line["bytes_out"] == len(got)
    assert f"larger than max_inspected_bytes ({LIMIT} bytes)" in str(line["not_inspected"])
    chain = next(c for c in proxy.chains() if c.summary.jsonrpc_id == 3)
    assert chain.summary.status is ChainStatus.INCOMPLETE
    assert chain.summary.error is None
    assert any(f"max_inspected_bytes ({LIMIT} bytes)" in note for note in chain.summary.notes)
    assert chain.summary.bytes_to_client == len(got)
    read_back = [e.chain for e in read_capture(path) if isinstance(e, ChainChanged)]
    last = [c for c in read_back if c.jsonrpc_id == 3][-1]
    assert (last.status, last.notes) == (chain.summary.status, chain.summary.notes)
    exported = run_mcp_proxy("export", "--json", "-", str(path))
    assert exported.returncode == 0, exported.stderr
    (listed,) = [
        c["chain"] for c in json.loads(exported.stdout)["chains"] if c["chain"].get("jsonrpc_id") == 3
    ]
    assert listed["bytes_to_client"] == len(got)
    har_file = path.with_suffix(".har")
    done = run_mcp_proxy("export", "--har", str(har_file), str(path))
    assert done.returncode == 0, done.stderr
    for entry in (call_entry(live), call_entry(json.loads(har_file.read_bytes()))):
        assert entry["response"]["bodySize"] == len(got)
        assert "without inspecting it" in entry["comment"]
        assert f"max_inspected_bytes ({LIMIT} bytes)" in entry["comment"]


async def test_an_sse_answer_over_max_inspected_bytes_is_relayed_whole_and_recorded_as_not_inspected(
    proxy_for, legacy_server: PeerServer, tmp_path: Path
):
    path = tmp_path / "run.jsonl"
    settings = {"max_inspected_bytes": LIMIT, "capture": path, "admin_enabled": True, "admin": "127.0.0.1:0"}
    async with proxy_for(legacy_server.url, **settings) as proxy, client_session() as client:
        session = await open_session(proxy, client)
        small = rpc("tools/call", 2, name="echo", arguments={"text": "y" * 100})
        assert b"y" * 100 in await post(proxy, client, small, session)
        call = rpc("tools/call", 3, name="echo", arguments={"text": "x" * 3 * LIMIT})
        with captured_logs() as logs:
            got = await post(proxy, client, call, session)
        assert got.count(b"x" * 3 * LIMIT) == 2  # relayed whole: the echo, and the log that quotes it
        assert await errors_counted(proxy) == ""
        live = await live_har(proxy)
    assert_not_inspected(proxy, logs, got, path, live)


async def test_a_json_answer_over_max_inspected_bytes_is_relayed_whole_and_recorded_as_not_inspected(
    proxy_for, modern_server: PeerServer, tmp_path: Path
):
    path = tmp_path / "run.jsonl"
    settings = {"max_inspected_bytes": LIMIT, "capture": path, "admin_enabled": True, "admin": "127.0.0.1:0"}
    params = modern_params({"name": "echo", "arguments": {"text": "x" * 3 * LIMIT}})
    call = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}).encode()
    async with proxy_for(modern_server.url, **settings) as proxy, client_session() as client:
        with captured_logs() as logs:
            async with client.post(
                proxy.endpoint(), data=call, headers=modern_headers("tools/call", params)
            ) as response:
                got = await bounded(response.read(), what="the upstream's answer through the proxy")
                assert response.headers["Content-Type"].startswith("application/json")
            await wait_until(lambda: drained(proxy), what="the proxy to close the exchange")
        assert json.loads(got)["result"]["content"][0]["text"] == "x" * 3 * LIMIT
        assert await errors_counted(proxy) == ""
        live = await live_har(proxy)
    assert_not_inspected(proxy, logs, got, path, live)
