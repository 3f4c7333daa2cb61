"""`NaN`, `Infinity` and `1e400` in a request: read as the Python SDK server reads them, not as "not JSON".

orjson refuses those numbers; Python's `json` writes `NaN` by default and pydantic-core, which the SDK
server parses with, accepts them, so the legacy SDK server runs such a call. The real `mcp-proxy`
command, with a fault rule on `add` and `--redact-body-keys password`, must see each call for what it
is: the fault answers the `add` whose `_meta` holds `-Infinity`, the `echo` whose arguments hold `NaN`
reaches the server and its log line names it, and the password it carries, which the server echoes
back, reaches neither the capture nor an export.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, exported_har, run_mcp_proxy, settings_env
from tests.transport.helpers import CLIENT_ACCEPT, bounded, client_session, rpc

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
