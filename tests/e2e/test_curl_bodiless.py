"""Copy as curl for a request without a body: a recorded DELETE (and a GET stream) becomes a command
too, from the request head its chain holds; run by bash against the official Python SDK server, the
DELETE ends the session it names."""

from __future__ import annotations

import os
from pathlib import Path

import httpx2
import pytest

from tests.e2e.test_tui_truths import _live_session
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.sidecar import (
    ProxyProcess,
    chain_ids,
    clean_env,
    exported_chains,
    run_bash,
    run_mcp_proxy,
    settings_env,
)

pytestmark = pytest.mark.asyncio

ACCEPT = {"Accept": "application/json, text/event-stream"}


async def test_a_recorded_delete_copied_as_curl_ends_the_session_it_names(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, capture=capture))) as proxy:
        result = await run_scenario(proxy.endpoint(), "legacy", "echo")
        assert result["result"]["content"] == ["hello"]
        proxy.stop()
    chains = exported_chains(capture)[1]
    (delete,) = chain_ids(chains, "method", "DELETE session")
    (stream,) = chain_ids(chains, "method", "GET stream")

    exported = run_mcp_proxy("export", "--curl", delete, "--to", "upstream", str(capture))
    streamed = run_mcp_proxy("export", "--curl", stream, "--to", "upstream", str(capture))

    assert exported.returncode == 0, exported.stderr
    command = exported.stdout
    assert f"curl -sS -N -i -X DELETE {legacy_server.url}" in command  # -i: its status is its answer
    assert "--data-binary" not in command
    assert "(DELETE /" in command, command  # the comment names the request, not "http"
    assert '"${MCP_SESSION_ID:?' in command
    assert streamed.returncode == 0, streamed.stderr
    assert f"curl -sS -N -X GET {legacy_server.url}" in streamed.stdout
    assert "# a GET stream:" in streamed.stdout
    assert "text/event-stream" in streamed.stdout  # the Accept the client sent, as it sent it

    session = await _live_session(legacy_server.url)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    ran = run_bash(command, {**base, "MCP_SESSION_ID": session})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("HTTP/1.1 200"), ran.stdout

    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    headers = {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    async with httpx2.AsyncClient(timeout=10.0) as http:
        after = await http.post(legacy_server.url, json=ping, headers=headers)
    assert after.status_code == 404, after.text  # the session the command named is gone
