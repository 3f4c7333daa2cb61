"""A JSON-RPC batch is counted at the bytes that went on the wire, both ways, in every record.

A client speaking 2025-03-26 (the version with batches) POSTs `[tools/list, ping]` through the real
`mcp-proxy` command to the TypeScript SDK 1.x server in JSON mode, which answers one JSON array. The
log line's `bytes_in`/`bytes_out`, the two chains' `bytes_to_server`/`bytes_to_client` (added up),
the captured messages' sizes and the HAR's `bodySize` (live and exported) must each be the length of
the body that went on the wire, never 0 and never the members without the array around them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.peers.runner import NodeServer
from tests.sidecar import (
    ProxyProcess,
    admin_get,
    admin_json,
    clean_env,
    exported_har,
    settings_env,
)

pytestmark = pytest.mark.e2e

VERSION = "2025-03-26"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
BATCH = (
    b'[ {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},\n'
    b'  {"jsonrpc": "2.0", "id": 3, "method": "ping"} ]'
)
"""Spaced as a hand-written body is: the spacing is on the wire too, and counted."""


@pytest.fixture(scope="module")
def json_server() -> Iterator[NodeServer]:
    with NodeServer("ts-v1-json") as server:
        yield server


async def open_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Initialize at 2025-03-26; the headers of the session's later requests."""
    init = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    opened = await http.post(
        url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, headers=ACCEPT
    )
    assert opened.status_code == 200, opened.text
    session = {**ACCEPT, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": VERSION}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    done = await http.post(url, json=initialized, headers=session)
    assert done.status_code == 202
    return session


def batch_entries(har: dict[str, Any]) -> list[dict[str, Any]]:
    """The HAR entries of the client's exchange that carried the batch."""
    return [
        e
        for e in har["log"]["entries"]
        if e["_mcp"]["side"] == "client" and any(m.get("method") == "ping" for m in e["_mcp"]["messages"])
    ]


async def test_a_batch_and_its_batch_answer_count_the_bytes_on_the_wire(
    json_server: NodeServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=json_server.url, upstream_era="legacy", capture=capture))
    with ProxyProcess(env) as proxy:
        async with httpx2.AsyncClient(timeout=10.0) as http:
            session = await open_session(http, proxy.endpoint())
            answer = await http.post(proxy.endpoint(), content=BATCH, headers=session)
        events = proxy.wait_events(lambda lines: any(e.get("ids") == [2, 3] for e in lines))
        chains = await admin_json(proxy.admin + "/api/chains")
        status, _, live = await admin_get(proxy.admin + "/api/export.har")
        assert status == 200
        assert proxy.stop() == 0
    exported = exported_har(capture, tmp_path / "capture.har")

    assert answer.status_code == 200, answer.text
    assert [m["id"] for m in json.loads(answer.content)] == [2, 3]
    sent, got = len(BATCH), len(answer.content)

    (line,) = [e for e in events if e.get("event") == "exchange" and e.get("ids") == [2, 3]]
    assert (line["bytes_in"], line["bytes_out"]) == (sent, got)

    batched = [c for c in chains if c["method"] in ("tools/list", "ping")]
    assert len(batched) == 2
    assert all(c["bytes_to_client"] > 0 and c["bytes_to_server"] > 0 for c in batched)
    assert sum(c["bytes_to_server"] for c in batched) == sent
    assert sum(c["bytes_to_client"] for c in batched) == got

    observed = [json.loads(text) for text in capture.read_text().splitlines()]
    ours = [o for o in observed if o.get("exchange") == line["exchange"]]
    sizes = [o["size"] for o in ours if o.get("kind") == "message"]
    assert sum(sizes) == sent + got
    assert all(size > 0 for size in sizes)

    for har in (json.loads(live), json.loads(exported.read_bytes())):
        (entry,) = batch_entries(har)
        assert (entry["request"]["bodySize"], entry["response"]["bodySize"]) == (sent, got)
