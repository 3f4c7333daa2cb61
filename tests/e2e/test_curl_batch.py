"""Copy as curl of a request the client sent inside a JSON-RPC batch says the command sends it alone.

A client POSTs `[tools/list, tools/call]` through the `mcp-proxy` command to the official Python SDK
server, which takes no batches and refuses the whole POST with 400. Each element is a chain of its own,
so `mcp-proxy export --curl` of the `tools/list` one sends that message alone, which the server
answers: the comment must say it was one of a batch of 2 and name the batch, so the user knows the
command is not what the server got.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, chain_ids, clean_env, exported_chains, run_mcp_proxy, settings_env

pytestmark = pytest.mark.asyncio

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
VERSION = "2025-11-25"


async def test_a_request_sent_in_a_batch_is_copied_alone_with_a_comment_naming_the_batch(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    listed = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    called = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 1}},
    }
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, capture=capture))) as proxy:
        async with httpx2.AsyncClient(timeout=10.0) as http:
            init = {
                "protocolVersion": VERSION,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            }
            opened = await http.post(
                proxy.endpoint(),
                json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                headers=ACCEPT,
            )
            session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": VERSION}
            batch = await http.post(
                proxy.endpoint(), content=json.dumps([listed, called]), headers={**ACCEPT, **session}
            )
        proxy.stop()
    (chain,) = chain_ids(exported_chains(capture)[1], "method", "tools/list")

    exported = run_mcp_proxy("export", "--curl", chain, str(capture))

    assert batch.status_code == 400, batch.text  # the server got the batch, and refused it whole
    assert exported.returncode == 0, exported.stderr
    assert (
        "# the client sent this in a JSON-RPC batch of 2 in one message body "
        "(#3 tools/list, #4 tools/call):\n"
        "# this command sends it alone, which the proxy and the server may answer otherwise "
        "(a server that takes no batches refuses the batch)\n"
    ) in exported.stdout
    assert f"--data-binary '{json.dumps(listed, separators=(',', ':'))}'" in exported.stdout
