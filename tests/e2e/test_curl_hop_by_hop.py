"""Copy as curl toward the upstream leaves out what the proxy never forwarded: the fields `Connection` names.

A client's `Connection: keep-alive, Upgrade, X-Hop` makes `X-Hop` hop-by-hop (RFC 9110 section 7.6.1),
so the `mcp-proxy` command drops it on the wire. The raw-socket recording fake
(`tests/e2e/recording_upstream.py`, a fake: no SDK server hands over the head it parsed) shows what
the upstream got; `mcp-proxy export --curl CHAIN --to upstream`, run by bash, must send it the same
fields: `X-Kept` (end to end) and not `X-Hop`, neither in the command nor on the wire.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx2
import pytest

from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.recording_upstream import recording_upstream
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

CONNECTION_SCOPED = {
    "Connection": "keep-alive, Upgrade, X-Hop",
    "Upgrade": "h2c",
    "X-Hop": "named-in-connection",
    "X-Kept": "end-to-end",
}


async def test_a_curl_command_to_the_upstream_leaves_out_the_fields_connection_named(tmp_path: Path) -> None:
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("modern") as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp"), capture=capture))
        # Started off the loop: the proxy probes the fake, which answers from this loop meanwhile.
        proxy = await asyncio.to_thread(ProxyProcess(env).start)
        try:
            params = modern_params({"name": "echo", "arguments": {}})
            body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
            async with httpx2.AsyncClient(timeout=10.0) as http:
                answer = await http.post(
                    proxy.endpoint(),
                    json=body,
                    headers={**modern_headers("tools/call", params), **CONNECTION_SCOPED},
                )
            assert answer.status_code == 200, answer.text
        finally:
            proxy.stop()
        _, chains = await asyncio.to_thread(exported_chains, capture)
        (chain,) = chain_ids(chains, "name", "echo")
        exported = await asyncio.to_thread(
            run_mcp_proxy, "export", "--curl", chain, "--to", "upstream", str(capture)
        )
        assert exported.returncode == 0, exported.stderr
        base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
        done = await asyncio.to_thread(run_bash, exported.stdout, base)
        assert done.returncode == 0, done.stderr
        relayed, replayed = [h for h in fake.heads if h.method == "tools/call"]

    assert "sent to the upstream, past the proxy" in exported.stdout
    for head in (relayed, replayed):
        names = {name.lower() for name, _ in head.headers}
        assert "x-hop" not in names
        assert "upgrade" not in names
        assert head.values("X-Kept") == ["end-to-end"]
    assert "X-Hop" not in exported.stdout
    assert "-H 'X-Kept: end-to-end'" in exported.stdout
