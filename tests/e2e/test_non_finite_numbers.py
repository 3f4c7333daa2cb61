"""`NaN`, `Infinity` and `1e400` in a request: read as the Python SDK server reads them, not as "not JSON".

orjson refuses those numbers; Python's `json` writes `NaN` by default and pydantic-core, which the SDK
server parses with, accepts them, so the legacy SDK server runs such a call. The real `mcp-proxy`
command, with a fault rule on `add` and `--redact-body-keys password`, must see each call for what it
is: the fault answers the `add` whose `_meta` holds `-Infinity`, the `echo` whose arguments hold `NaN`
reaches the server and its log line names it, and the password it carries, which the server echoes
back, reaches neither the capture nor an export.

A bridge re-encodes every message it forwards, and JSON has no way to write those numbers (orjson
writes `null`), so a bridge refuses such a message, either way, rather than change the value.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.test_hostile_methods import Client
from tests.e2e.test_request_shapes import ProxyFor
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, exported_har, run_mcp_proxy, settings_env
from tests.transport.helpers import (
    CLIENT_ACCEPT,
    bounded,
    client_session,
    raw_fake_upstream,
    read_request,
    rpc,
)

pytestmark = pytest.mark.e2e


def echo_call(password: str) -> bytes:
    """What a Python client writes for a call whose arguments hold a float that is not a number."""
    arguments = {"password": password, "text": password, "ratio": float("nan")}
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": arguments},
        }
    ).encode()


ADD_CALL = (
    b'{"jsonrpc":"2.0","id":3,"method":"tools/call",'
    b'"params":{"name":"add","arguments":{"a":1,"b":1e400},"_meta":{"budget":-Infinity}}}'
)


async def calls(endpoint: str, password: str) -> tuple[bytes, bytes]:
    """A session, then the two calls, posted as their bytes; the server's answers to them."""
    init = rpc(
        "initialize",
        1,
        protocolVersion="2025-11-25",
        capabilities={},
        clientInfo={"name": "nan", "version": "1"},
    )
    async with client_session() as http:
        async with http.post(endpoint, data=init, headers=CLIENT_ACCEPT) as response:
            session = response.headers["Mcp-Session-Id"]
            await bounded(response.read(), what="the initialize answer")
        headers = {**CLIENT_ACCEPT, "Mcp-Session-Id": session}
        async with http.post(endpoint, data=rpc("notifications/initialized", None), headers=headers) as done:
            assert done.status == 202
        answers = []
        for body in (echo_call(password), ADD_CALL):
            async with http.post(endpoint, data=body, headers=headers) as response:
                answers.append(await bounded(response.read(), what="the call's answer"))
    return answers[0], answers[1]


def call_lines(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in lines if e.get("event") == "exchange" and e.get("method") == "tools/call"}


def test_calls_with_non_finite_numbers_are_read_as_calls_matched_by_rules_and_redacted(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    password = f"NANPW{secrets.token_hex(6)}"
    capture = tmp_path / "run.jsonl"
    env = settings_env(
        upstream=legacy_server.url,
        capture=capture,
        redact_body_keys="password",
        faults="tool:add => error=-32001:blocked by fault",
        drain_grace=1,
    )
    with ProxyProcess(clean_env(**env)) as proxy:
        echoed, added = asyncio.run(calls(proxy.endpoint(), password))
        lines = call_lines(proxy.wait_events(lambda seen: len(call_lines(seen)) == 2))
        assert proxy.stop() == 0

    assert password.encode() in echoed  # the server ran the call: the client's own answer
    assert b"blocked by fault" in added, added
    assert set(lines) == {"echo", "add"}, lines
    assert lines["echo"]["trouble"] is None
    assert "error -32001" in lines["add"]["fault"]

    har = exported_har(capture, tmp_path / "run.har").read_text(encoding="utf-8")
    listed = run_mcp_proxy("export", "--json", "-", str(capture))
    assert listed.returncode == 0, listed.stderr
    outputs = {"capture": capture.read_text(encoding="utf-8"), "har": har, "json": listed.stdout}
    assert '"kind":"invalid_body"' not in outputs["capture"]
    leaks = [where for where, text in outputs.items() if password in text]
    assert leaks == [], leaks


def refused_as_not_reencodable(answer: bytes) -> bool:
    """Whether an answer is the bridge's -32700 naming the number it cannot write."""
    error = json.loads(answer).get("error") or {}
    return error.get("code") == -32700 and "NaN" in error.get("message", "")


def test_the_legacy_client_bridge_refuses_a_call_holding_nan_instead_of_forwarding_null(
    modern_server: PeerServer, tmp_path: Path
) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=modern_server.url, drain_grace=1))) as proxy:
        echoed, added = asyncio.run(calls(proxy.endpoint(), "pw"))
        assert proxy.stop() == 0
    assert refused_as_not_reencodable(echoed), echoed
    assert refused_as_not_reencodable(added), added
    assert json.loads(echoed)["id"] == 2


async def modern_nan_call(endpoint: str) -> tuple[int, bytes]:
    """A 2026-07-28 `echo` whose arguments hold NaN, posted as `json.dumps` writes it."""
    params = modern_params({"name": "echo", "arguments": {"text": "hi", "ratio": float("nan")}})
    body = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}).encode()
    headers = modern_headers("tools/call", params)
    async with client_session() as http, http.post(endpoint, data=body, headers=headers) as response:
        return response.status, await bounded(response.read(), what="the call's answer")


def test_the_modern_client_bridge_refuses_a_call_holding_nan_instead_of_forwarding_null(
    legacy_server: PeerServer,
) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, drain_grace=1))) as proxy:
        status, answer = asyncio.run(modern_nan_call(proxy.endpoint()))
        assert proxy.stop() == 0
    assert status == 400, answer
    assert refused_as_not_reencodable(answer), answer
    assert json.loads(answer)["id"] == 5


def nan_answering_upstream(sse: bool) -> Any:
    """A hand-written 2026-07-28 fake whose tools/call result holds `NaN`, as Python's `json` writes it.

    No SDK server writes one (pydantic writes `null`), so a fake stands in for a server that does.
    """

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            message = json.loads(body)
            if message["method"] == "server/discover":
                result: dict[str, Any] = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
            else:
                result = {"content": [], "structuredContent": {"ratio": float("nan")}}
            text = json.dumps(
                {"jsonrpc": "2.0", "id": message["id"], "result": {"resultType": "complete", **result}}
            )
            payload = f"event: message\ndata: {text}\n\n".encode() if sse else text.encode()
            kind = b"text/event-stream" if sse else b"application/json"
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: %d\r\n\r\n" % len(payload)
            )
            writer.write(head + payload)
            await writer.drain()

    return serve


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_a_bridged_upstream_answer_holding_nan_is_an_error_naming_it_not_null(
    proxy_for: ProxyFor, sse: bool
) -> None:
    async with (
        raw_fake_upstream(nan_answering_upstream(sse)) as server,
        proxy_for(f"http://127.0.0.1:{server.port}/mcp", upstream_era="modern") as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = Client(http, proxy.endpoint(), "legacy")
        await client.initialize()
        status, answer = await client.call(31, "tools/call", {"name": "t", "arguments": {}})
    assert status == 200
    assert answer["id"] == 31
    assert "result" not in answer, answer
    assert "NaN" in json.dumps(answer), answer
