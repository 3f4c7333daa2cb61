"""An upstream that sends a head with `Content-Length` and closes before its body: the client gets 502.

A fake upstream on raw sockets (no real MCP server sends a head and then hangs up on demand) answers
the call with `HTTP/1.1 200 OK` and `Content-Length: 500`, then closes. The proxy holds such a head
until the first body bytes come, so nothing has reached the client: the real `mcp-proxy` command must
answer the documented 502 `upstream_bad_response` with a JSON-RPC error carrying the request's id
(never an empty reply), and its log line, chain and both HARs must say the client got that 502, not
the server's 200.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from proxy.wire import errors
from tests.sidecar import (
    ProxyProcess,
    admin_get,
    admin_json,
    clean_env,
    exported_har,
    settings_env,
)
from tests.transport.helpers import raw_fake_upstream, read_request, rpc

pytestmark = pytest.mark.e2e

CALL = rpc("tools/call", 7, name="closeafterhead", arguments={})


PING = rpc("ping", 99)
PONG = b'{"jsonrpc":"2.0","id":99,"result":{}}'


async def closing_after_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A fake upstream's script: a ping gets its answer; the call a 500-byte head, then the close."""
    while (body := await read_request(reader)) is not None:
        if body == PING:
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(PONG)}\r\n\r\n"
            writer.write(head.encode() + PONG)
            continue
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n")
        await writer.drain()
        return


async def post_raw(port: int, body: bytes) -> bytes:
    """`body` POSTed as a client writes it, and every byte the proxy answers until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def is_call(line: dict[str, Any]) -> bool:
    """The log line of the call's exchange."""
    return line.get("event") == "exchange" and line.get("method") == "tools/call"


@pytest.mark.parametrize("warm", [False, True], ids=["new-connection", "pooled-connection"])
async def test_a_head_then_a_close_gets_the_client_a_502_and_every_record_says_so(
    tmp_path: Path, warm: bool
) -> None:
    """On a pooled connection the call is sent from the socket's callback (the hot path), on a new
    one from a task: both must answer the 502."""
    capture = tmp_path / "capture.jsonl"
    async with raw_fake_upstream(closing_after_head) as fake:
        upstream = f"http://127.0.0.1:{fake.port}/mcp"
        env = clean_env(**settings_env(upstream=upstream, upstream_era="legacy", capture=capture))
        with ProxyProcess(env) as proxy:
            port = int(proxy.listen.rsplit(":", 1)[1])
            if warm:
                assert (await post_raw(port, PING)).endswith(PONG)
            answered = await post_raw(port, CALL)
            events = proxy.wait_events(lambda lines: any(is_call(e) for e in lines))
            chains = await admin_json(proxy.admin + "/api/chains")
            status, _, live = await admin_get(proxy.admin + "/api/export.har")
            assert status == 200
            assert proxy.stop() == 0
    exported = exported_har(capture, tmp_path / "capture.har")

    head, _, body = answered.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 502 "), answered
    assert b"content-type: application/json" in head.lower()
    reply = json.loads(body)
    assert reply["id"] == 7
    assert reply["error"]["code"] == errors.UPSTREAM_UNAVAILABLE
    message = reply["error"]["message"]
    assert "was reached, but its response was broken or cut off" in message
    assert "HTTP 200 with Content-Length: 500" in message

    (line,) = [e for e in events if is_call(e)]
    assert (line["status"], line["trouble"]) == (502, "upstream_bad_response")
    (chain,) = [c for c in chains if c["method"] == "tools/call"]
    assert (chain["http_status"], chain["status"]) == (502, "error")
    for har in (json.loads(live), json.loads(exported.read_bytes())):
        entries = har["log"]["entries"]
        (entry,) = [e for e in entries if any(m.get("method") == "tools/call" for m in e["_mcp"]["messages"])]
        assert entry["response"]["status"] == 502
        assert entry["response"]["content"]["mimeType"] == "application/json"
