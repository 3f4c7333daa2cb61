"""Copy as curl toward the upstream keeps the client's query, a redacted value as a placeholder.

The `mcp-proxy` command, recording a capture, relays a 2026-07-28 `tools/call` whose URL carries a
query (`tenant`, and an `api_key` the proxy redacts) to an upstream whose own URL has one too. The
upstream is the raw-socket recording fake (`tests/e2e/recording_upstream.py`): the point is the
request line it receives, which no SDK server hands over. `mcp-proxy export --curl CHAIN --to
upstream`, run by bash with the placeholders set, must send the request line the proxy sent.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx2
import pytest

from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.recording_upstream import recording_upstream
from tests.sidecar import ProxyProcess, clean_env, run_bash, run_mcp_proxy, settings_env

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
        exported = await asyncio.to_thread(
            run_mcp_proxy, "export", "--curl", chain, "--to", "upstream", str(capture)
        )
        assert exported.returncode == 0, exported.stderr
        command = exported.stdout
        base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
        replay = {**base, "MCP_QUERY_SECRET": "eu", "MCP_QUERY_SECRET_2": SECRET}
        done = await asyncio.to_thread(run_bash, command, replay)
        assert done.returncode == 0, done.stderr
        (replayed,) = [h.request_line for h in fake.heads if h.method == "tools/call"][1:]

    assert relayed == f"POST /mcp?region=eu&tenant=acme&api_key={SECRET} HTTP/1.1"
    assert replayed == relayed
    assert SECRET not in command
    assert "# set MCP_QUERY_SECRET first: the redacted value of query parameter 'region'" in command
    assert "# set MCP_QUERY_SECRET_2 first: the redacted value of query parameter 'api_key'" in command
