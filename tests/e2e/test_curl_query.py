"""Copy as curl toward the upstream keeps the client's query, a redacted value as a placeholder.

The `mcp-proxy` command, recording a capture, relays a 2026-07-28 `tools/call` whose URL carries a
query (`tenant`, and an `api_key` the proxy redacts) to an upstream whose own URL has one too. The
upstream is the raw-socket recording fake (`tests/e2e/recording_upstream.py`): the point is the
request line it receives, which no SDK server hands over. `mcp-proxy export --curl CHAIN --to
upstream`, run by bash with the placeholders set, must send the request line the proxy sent. So must
the command for the bridge's own request, when the official SDK's legacy client puts the query on its
URL and the legacy->MRTR bridge carries the call to the (2026-07-28) fake.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx2
import pytest

from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.recording_upstream import RecordingUpstream, recording_upstream
from tests.peers.scenarios import client_for
from tests.sidecar import (
    ProxyProcess,
    chain_ids,
    clean_env,
    exported_chains,
    run_bash,
    run_mcp_proxy,
    settings_env,
)

pytestmark = pytest.mark.e2e

SECRET = "client-query-key-8841"


async def test_a_curl_command_to_the_upstream_sends_the_request_line_the_proxy_sent_query_included(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("modern") as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp", "region=eu"), capture=capture))
        # Started off the loop: the proxy probes the fake, which answers from this loop meanwhile.
        proxy = await asyncio.to_thread(ProxyProcess(env).start)
        try:
            params = modern_params({"name": "echo", "arguments": {"text": "hi"}})
            body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
            async with httpx2.AsyncClient(timeout=10.0) as http:
                answer = await http.post(
                    proxy.endpoint() + f"?tenant=acme&api_key={SECRET}",
                    json=body,
                    headers=modern_headers("tools/call", params),
                )
            assert answer.status_code == 200, answer.text
        finally:
            proxy.stop()
        (relayed,) = [h.request_line for h in fake.heads if h.method == "tools/call"]
        listed = await asyncio.to_thread(run_mcp_proxy, "export", "--json", "-", str(capture))
        (chain,) = [
            c["chain"]["id"] for c in json.loads(listed.stdout)["chains"] if c["chain"].get("name") == "echo"
        ]
        command, _, replayed = await _by_hand(fake, capture, chain)

    assert relayed == f"POST /mcp?region=eu&tenant=acme&api_key={SECRET} HTTP/1.1"
    assert replayed == relayed
    assert SECRET not in command
    assert "# set MCP_QUERY_SECRET first: the redacted value of query parameter 'region'" in command
    assert "# set MCP_QUERY_SECRET_2 first: the redacted value of query parameter 'api_key'" in command


async def test_a_bridged_calls_command_to_the_upstream_sends_the_clients_query_as_the_bridge_did(
    tmp_path: Path,
) -> None:
    """The bridge's call carries the legacy client's query after the upstream URL's own, so a server
    that takes its key from the query accepts it; the command sends the same request line, the key a
    placeholder, and stderr says no session id is wanted (a 2026-07-28 server holds no session)."""
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("modern") as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp", "region=eu"), capture=capture))
        proxy = await asyncio.to_thread(ProxyProcess(env).start)
        try:
            async with client_for(proxy.endpoint() + f"?api_key={SECRET}&x=1", "legacy") as legacy:
                echoed = await legacy.call_tool("echo", {"text": "hi"})
            assert not echoed.is_error
        finally:
            proxy.stop()
        (relayed,) = [h.request_line for h in fake.heads if h.method == "tools/call"]
        _, chains = await asyncio.to_thread(exported_chains, capture)
        (chain,) = chain_ids(chains, "name", "echo")
        command, said, replayed = await _by_hand(fake, capture, chain)

    assert relayed == f"POST /mcp?region=eu&api_key={SECRET}&x=1 HTTP/1.1"
    assert replayed == relayed
    assert SECRET not in command
    assert "# set MCP_QUERY_SECRET_2 first: the redacted value of query parameter 'api_key'" in command
    assert "the server got the proxy's own requests" in said
    assert "A 2026-07-28 server holds no session, so no command carries a session id" in said
    assert "MCP_SESSION_ID" not in said + command


async def _by_hand(fake: RecordingUpstream, capture: Path, chain: str) -> tuple[str, str, str]:
    """`export --curl CHAIN --to upstream` of the capture, run with bash with its placeholders set:
    the command, what the export said on stderr, and the request line the fake got from the command."""
    exported = await asyncio.to_thread(
        run_mcp_proxy, "export", "--curl", chain, "--to", "upstream", str(capture)
    )
    assert exported.returncode == 0, exported.stderr
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    replay = {**base, "MCP_QUERY_SECRET": "eu", "MCP_QUERY_SECRET_2": SECRET}
    done = await asyncio.to_thread(run_bash, exported.stdout, replay)
    assert done.returncode == 0, done.stderr
    (replayed,) = [h.request_line for h in fake.heads if h.method == "tools/call"][1:]
    return exported.stdout, exported.stderr, replayed
