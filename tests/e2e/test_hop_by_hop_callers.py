"""A client that names `Origin` or `Authorization` hop-by-hop is answered through either bridge.

A field listed in `Connection` ends at the proxy (RFC 9110 7.6.1), so the leg a bridge sends carries
none of it and the upstream judges the caller without it. The bridge must judge the client the same
way: a 2026-07-28 `server/discover` in front of a legacy server is answered (not pinged about
upstream for ever), and a legacy `initialize` in front of a 2026 server is answered from the
discovery (not held for ever). The conformance fixture servers (the official Python SDK's) stand
upstream, the real `mcp-proxy` command in front; the requests are written byte for byte, since no
SDK client lists its own `Origin` in `Connection`, and the answers read off the socket.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import pytest

from tests.e2e.legacy_raw import HEADERS, initialize
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

HOP_BY_HOP: Final = {"Origin": "http://localhost:6274", "Connection": "Origin"}
"""The inspector's page origin, named hop-by-hop: it never reaches the upstream."""

PATIENCE: Final = 10.0
"""Seconds an answer may take; a bridge that judges the wrong caller never answers at all."""


async def post_raw(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[bytes, bytes]:
    """POST `body` with exactly `headers` (plus Host and Content-Length); the answer's head and body."""
    where = urlsplit(url)
    assert where.hostname is not None
    assert where.port is not None
    data = json.dumps(body).encode()
    lines = [f"POST {where.path} HTTP/1.1", f"Host: {where.netloc}", f"Content-Length: {len(data)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    try:
        writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + data)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PATIENCE)
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return head, await asyncio.wait_for(reader.readexactly(length), PATIENCE)
    finally:
        writer.close()


def discover(ident: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "server/discover", "params": modern_params({})}


def pings_sent(capture: Path) -> int:
    """How many `ping` requests the capture shows the bridge sending upstream."""
    return sum(
        1
        for line in capture.read_text("utf-8").splitlines()
        if '"kind":"leg_message"' in line and '"method":"ping"' in line
    )


async def test_a_2026_discover_with_a_hop_by_hop_origin_is_answered_without_asking_the_legacy_server(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    with (
        PeerServer("conformance-legacy") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url, capture=capture))) as proxy,
    ):
        plain = modern_headers("server/discover", discover(1)["params"])
        first, _ = await post_raw(proxy.endpoint(), discover(1), plain)
        head, body = await post_raw(proxy.endpoint(), discover(2), {**plain, **HOP_BY_HOP})
    assert first.startswith(b"HTTP/1.1 200 "), first
    assert head.startswith(b"HTTP/1.1 200 "), head
    answer = json.loads(body)
    assert answer["id"] == 2
    assert answer["result"]["resultType"] == "complete", answer
    assert pings_sent(capture) == 0  # the upstream accepted this caller with the session's handshake


async def test_a_legacy_initialize_with_a_hop_by_hop_origin_is_answered_from_the_2026_discovery() -> None:
    with (
        PeerServer("conformance-modern") as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy,
    ):
        first, served = await post_raw(proxy.endpoint(), initialize(1), HEADERS)
        head, body = await post_raw(proxy.endpoint(), initialize(2), {**HEADERS, **HOP_BY_HOP})
    assert first.startswith(b"HTTP/1.1 200 "), first
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert b"\r\nMcp-Session-Id: " in head
    answer = json.loads(body)
    assert answer["id"] == 2
    assert answer["result"]["serverInfo"] == json.loads(served)["result"]["serverInfo"]
