"""The HAR says the `Content-Type` the server sent, and none when it sent none.

A fake upstream on raw sockets (no real MCP server leaves the header out on demand) answers a call
with a JSON-RPC result and no `Content-Type`, a server bug a client may refuse the answer for (the
TypeScript SDK's client does). Through the real `mcp-proxy` command, the HAR entry, live and exported
from the capture alike, must have an empty `mimeType` (valid HAR 1.2), never an invented
`application/json`, and still pass har-validator.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2
import pytest

from tests.e2e.test_export import validate
from tests.sidecar import ProxyProcess, admin_get, clean_env, exported_har, settings_env
from tests.transport.helpers import CLIENT_ACCEPT, raw_fake_upstream, read_request, rpc

pytestmark = pytest.mark.e2e

RESULT = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}'


async def untyped_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A fake upstream's script: each request gets `RESULT` with a `Content-Length` and no type."""
    while await read_request(reader) is not None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(RESULT), RESULT))
        await writer.drain()


async def test_an_answer_without_a_content_type_has_an_empty_mime_type_in_both_hars(tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    async with raw_fake_upstream(untyped_answer) as fake:
        upstream = f"http://127.0.0.1:{fake.port}/mcp"
        env = clean_env(**settings_env(upstream=upstream, upstream_era="legacy", capture=capture))
        with ProxyProcess(env) as proxy:
            async with httpx2.AsyncClient(timeout=10.0) as http:
                call = rpc("tools/call", 7, name="noctype", arguments={})
                answer = await http.post(proxy.endpoint(), content=call, headers=CLIENT_ACCEPT)
            status, _, live = await admin_get(proxy.admin + "/api/export.har")
            assert status == 200
            assert proxy.stop() == 0
    exported = exported_har(capture, tmp_path / "capture.har")
    live_file = tmp_path / "live.har"
    live_file.write_bytes(live)

    assert answer.content == RESULT
    assert "content-type" not in answer.headers
    for har_file in (live_file, exported):
        (entry,) = json.loads(har_file.read_bytes())["log"]["entries"]
        content = entry["response"]["content"]
        assert content["mimeType"] == ""
        assert json.loads(content["text"])["id"] == 7
        assert not [h for h in entry["response"]["headers"] if h["name"].lower() == "content-type"]
        assert validate(har_file) == {"valid": True}
