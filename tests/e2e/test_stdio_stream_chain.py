"""The bridge's own GET-stream chain names the transports of the stdio peers it serves.

A 2026-07-28 client (the Python SDK's, over stdio) runs the shim `mcp-proxy stdio -- CMD` in front of
server-everything on stdio, a legacy server the shim bridges (mrtr_to_legacy). Between calls that
server asks for roots and announces changes on its session's GET stream, which the bridge opened on
its own: that stream gets a chain of its own, whose transports must be the peers' (`stdio -> stdio`),
live (the shim's admin API, while the client still holds its session) and read back from the capture
alike."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.channel_peers import everything_stdio_command
from tests.e2e.test_stdio_clients import stdio_command
from tests.peers.clients import run_plan
from tests.peers.envs import REPO_ROOT
from tests.sidecar import admin_json, run_mcp_proxy, until

pytestmark = pytest.mark.asyncio

PLAN = [
    {"id": "echo", "op": "call", "tool": "echo", "arguments": {"message": "hi"}},
    {"id": "wait", "op": "sleep", "ms": 8000},
]
"""A call that opens the upstream session, then the session held while the shim's export is read."""


def _admin(log: Path) -> str | None:
    """The shim's admin URL from its log file, once it is listening."""
    if not log.exists():
        return None
    for line in log.read_text().splitlines():
        item = json.loads(line)
        if item.get("event") == "listening" and item.get("admin"):
            return str(item["admin"])
    return None


def _stream_transports(exported: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Each GET-stream chain's (mode, client transport, upstream transport)."""
    return [
        (c["chain"]["mode"], c["chain"]["client_transport"], c["chain"]["upstream_transport"])
        for c in exported["chains"]
        if c["chain"]["method"] == "GET stream"
    ]


async def test_the_bridges_get_stream_chain_says_stdio_to_stdio_live_and_from_the_capture(
    tmp_path: Path,
) -> None:
    shim = stdio_command(tmp_path, "--", *shlex.split(everything_stdio_command()))
    # The SDK's stdio client starts its server with a bare environment: this checkout's proxy is named.
    command = f"{shlex.join(['env', f'PYTHONPATH={REPO_ROOT}'])} {shim}"
    log = tmp_path / "proxy.log"

    async def watch() -> dict[str, Any]:
        """The shim's export while the client still holds its session, once it has a stream chain."""
        await until(lambda: _admin(log) is not None, what="the shim's admin API", seconds=30)
        exported: dict[str, Any] = {"chains": []}
        for _ in range(150):  # bounded: the client holds its session 8 s
            exported = await admin_json(f"{_admin(log)}/api/export.json")
            if _stream_transports(exported):
                break
            await asyncio.sleep(0.05)
        return exported

    run, live = await asyncio.gather(
        asyncio.to_thread(run_plan, "python-2026", command, PLAN, transport="stdio"), watch()
    )
    assert run.lines["echo"]["result"]["content"][0]["text"] == "Echo: hi", run.lines
    assert _stream_transports(live) == [("mrtr_to_legacy", "stdio", "stdio")]
    exported = await asyncio.to_thread(
        run_mcp_proxy, "export", "--json", "-", str(tmp_path / "capture.jsonl")
    )
    assert exported.returncode == 0, exported.stderr
    assert _stream_transports(json.loads(exported.stdout)) == [("mrtr_to_legacy", "stdio", "stdio")]
