"""The trailer fields of an upstream's chunked answer never reach the client, least of all as headers.

The raw-socket recording fake (`tests/e2e/recording_upstream.py`, a fake: no SDK server sends trailers)
answers every call chunked, with `X-Checksum: 42` and `Set-Cookie: fromtrailer=1` after its last
chunk. Through the real `mcp-proxy` command, a raw client reads the exact bytes it gets: neither field
is in its head (a trailer cookie turned header would set a cookie) nor anywhere else in the answer,
since the proxy removes the chunked coding and drops what it cannot relay (RFC 9110 section 6.5.1).
The capture keeps them apart: on the exchange's `exchange_closed` line as `trailers` (the cookie
redacted), never among the `response_head` headers; both HARs list them in the response's `_trailers`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.recording_upstream import recording_upstream
from tests.sidecar import ProxyProcess, admin_get, clean_env, exported_har, settings_env

pytestmark = pytest.mark.e2e

TRAILERS = (("X-Checksum", "42"), ("Set-Cookie", "fromtrailer=1"))
CALL = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}'


async def test_upstream_trailers_stay_out_of_the_clients_head_and_are_recorded_as_trailers(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("legacy", answer_trailers=TRAILERS) as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp"), upstream_era="legacy", capture=capture))
        proxy = await asyncio.to_thread(ProxyProcess(env).start)  # off the loop: the fake answers its probe
        try:
            answer = await asyncio.to_thread(_raw_call, proxy.listen)
            status, _, live = await admin_get(proxy.admin + "/api/export.har")
            assert status == 200
        finally:
            proxy.stop()
        assert [h for h in fake.heads if h.method == "tools/list"]
    exported = json.loads(exported_har(capture, tmp_path / "run.har").read_text())

    # The client's bytes: the trailer fields are in its head nowhere, and nowhere else either.
    head, _, _ = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert b"x-checksum" not in head.lower()
    assert b"fromtrailer" not in head
    assert b"X-Checksum" not in answer
    assert b"fromtrailer" not in answer
    assert b'"tools"' in answer
    # The capture: the head as the upstream sent it, the trailers apart on the exchange's end.
    lines = [json.loads(line) for line in capture.read_text().splitlines()]
    exchange = next(
        line["exchange"]
        for line in lines
        if line.get("kind") == "message" and line["msg"].get("method") == "tools/list"
    )
    (response_head,) = [x for x in lines if x.get("kind") == "response_head" and x["exchange"] == exchange]
    (closed,) = [x for x in lines if x.get("kind") == "exchange_closed" and x["exchange"] == exchange]
    assert "X-Checksum" not in response_head["headers"]
    assert "Set-Cookie" not in response_head["headers"]
    assert closed["trailers"]["X-Checksum"] == "42"
    assert closed["trailers"]["Set-Cookie"].startswith("<redacted ")
    assert "fromtrailer" not in capture.read_text()
    # Both HARs: the response's headers without them, its `_trailers` with them.
    for har in (json.loads(live), exported):
        response = _call_entry(har)["response"]
        assert "X-Checksum" not in {h["name"] for h in response["headers"]}
        assert "Set-Cookie" not in {h["name"] for h in response["headers"]}
        assert {"name": "X-Checksum", "value": "42"} in response["_trailers"]
        assert "fromtrailer" not in json.dumps(har)


def _raw_call(listen: str) -> bytes:
    """POST the call over a plain socket; every byte of the answer (the proxy closes after it)."""
    address = urlsplit(listen)
    assert address.hostname is not None
    assert address.port is not None
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(CALL), CALL)
    )
    received = bytearray()
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(request)
        while chunk := sock.recv(65536):
            received += chunk
    return bytes(received)


def _call_entry(har: Any) -> dict[str, Any]:
    """The HAR entry of the client's exchange that carried the call."""
    return next(
        e
        for e in har["log"]["entries"]
        if e["_mcp"]["side"] == "client"
        and any(m.get("method") == "tools/list" for m in e["_mcp"]["messages"])
    )
