"""A header field sent more than once keeps every value in the capture, the JSON, the HAR and curl.

curl, the real client, sends `Accept` and `X-Tenant` twice each through the `mcp-proxy` command to the
raw-socket recording fake (`tests/e2e/recording_upstream.py`), which answers with `X-Trace` and
`Set-Cookie` twice each (a sticky-session balancer's cookies): no SDK server sends a field twice. The
wire carries every line both ways; the capture's bytes must hold each repeated field as one member
with its values joined in order (`, `; a line feed between cookies, each cookie its own stand-in),
and the HAR must list one `Set-Cookie` entry per cookie. Through the legacy->MRTR bridge, the leg's
head (the fake's answer to the bridge's call) and the client's request head keep them the same way.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.e2e.modern_raw import modern_params
from tests.e2e.recording_upstream import recording_upstream
from tests.sidecar import ProxyProcess, chain_ids, clean_env, exported_chains, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

ANSWER_HEADERS = (
    ("X-Trace", "a"),
    ("X-Trace", "b"),
    ("Set-Cookie", "a=1; Path=/"),
    ("Set-Cookie", "b=2; Path=/"),
)
TWO_COOKIES = re.compile(
    rb'"Set-Cookie":"<redacted len=11 hmac:([0-9a-f]{8})>\\n<redacted len=11 hmac:([0-9a-f]{8})>"'
)
"""The capture's bytes for the two cookies: a stand-in each, a JSON-escaped line feed between them."""


async def test_repeated_request_and_response_fields_are_recorded_joined_and_written_one_cookie_per_har_entry(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("modern", ANSWER_HEADERS) as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp"), capture=capture))
        # Started off the loop: the proxy probes the fake, which answers from this loop meanwhile.
        proxy = await asyncio.to_thread(ProxyProcess(env).start)
        try:
            answer = await asyncio.to_thread(_curl_call, proxy.endpoint())
        finally:
            proxy.stop()
        (relayed,) = [h for h in fake.heads if h.method == "tools/call"]
    text, chains = await asyncio.to_thread(exported_chains, capture)
    (chain,) = chain_ids(chains, "name", "echo")
    har = await asyncio.to_thread(run_mcp_proxy, "export", "--har", "-", str(capture))
    command = await asyncio.to_thread(
        run_mcp_proxy, "export", "--curl", chain, "--to", "upstream", str(capture)
    )

    # The wire: every line both ways, in order.
    assert relayed.values("Accept") == ["application/json", "text/event-stream"]
    assert relayed.values("X-Tenant") == ["alpha", "beta"]
    assert re.findall(r"(?m)^(X-Trace|Set-Cookie): (.*?)\r?$", answer) == list(ANSWER_HEADERS)
    # The capture's bytes: one member per field, its values joined in arrival order.
    opened, head = _lines_of_the_call(capture.read_bytes())
    assert b'"Accept":"application/json, text/event-stream"' in opened
    assert b'"X-Tenant":"alpha, beta"' in opened
    assert b'"X-Trace":"a, b"' in head
    cookies = TWO_COOKIES.search(head)
    assert cookies is not None, head
    assert cookies.group(1) != cookies.group(2)  # each cookie masked on its own
    for seen in (capture.read_text("utf-8"), text, har.stdout, command.stdout):
        assert "a=1; Path=/" not in seen
        assert "b=2; Path=/" not in seen
    # The HAR lists each cookie as its own entry; other repeated fields as one entry meaning the same.
    entry = next(e for e in json.loads(har.stdout)["log"]["entries"] if "tools/call" in json.dumps(e))
    request, response = entry["request"]["headers"], entry["response"]["headers"]
    assert {"name": "Accept", "value": "application/json, text/event-stream"} in request
    assert {"name": "X-Tenant", "value": "alpha, beta"} in request
    assert {"name": "X-Trace", "value": "a, b"} in response
    set_cookies = [h["value"] for h in response if h["name"] == "Set-Cookie"]
    assert [re.fullmatch(r"<redacted len=11 hmac:([0-9a-f]{8})>", v) is not None for v in set_cookies] == [
        True
    ] * 2
    assert set_cookies[0] != set_cookies[1]
    # The JSON export and the curl command carry the joined values too.
    shown = _call_http(json.loads(text))
    assert shown["X-Tenant"] == "alpha, beta"
    assert "-H 'X-Tenant: alpha, beta'" in command.stdout


async def test_a_bridged_call_records_the_repeated_fields_of_the_clients_head_and_of_its_legs_head(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("modern", ANSWER_HEADERS) as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp"), capture=capture))
        proxy = await asyncio.to_thread(ProxyProcess(env).start)
        try:
            await asyncio.to_thread(_legacy_call, proxy.endpoint())
        finally:
            proxy.stop()
        assert [h for h in fake.heads if h.method == "tools/call"]
    data = capture.read_bytes()
    opened, _ = _lines_of_the_call(data)
    assert b'"mode":"legacy_to_mrtr"' in opened
    assert b'"X-Tenant":"alpha, beta"' in opened
    legs = [line for line in data.splitlines() if b'"kind":"leg_head"' in line]
    assert legs  # the call's leg at least; the fake adds the fields to every answer
    for leg in legs:
        assert b'"X-Trace":"a, b"' in leg
        cookies = TWO_COOKIES.search(leg)
        assert cookies is not None, leg
        assert cookies.group(1) != cookies.group(2)


def _curl_call(url: str) -> str:
    """A 2026-07-28 `tools/call` sent by curl with `Accept` and `X-Tenant` twice each; the answer's head."""
    params = modern_params({"name": "echo", "arguments": {}})
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    fields = [
        "Accept: application/json",
        "Accept: text/event-stream",
        "X-Tenant: alpha",
        "X-Tenant: beta",
        "MCP-Protocol-Version: 2026-07-28",
        "Mcp-Method: tools/call",
        "Mcp-Name: echo",
    ]
    return _curl(url, body, fields)


def _legacy_call(url: str) -> None:
    """A 2025-06-18 client's `initialize`, then its `tools/call` with `X-Tenant` twice, sent by curl."""
    opened = _curl(url, initialize(), [f"{k}: {v}" for k, v in HEADERS.items()])
    session = re.search(r"(?im)^Mcp-Session-Id: (\S+)", opened)
    assert session is not None, opened
    fields = [f"{k}: {v}" for k, v in session_headers(session.group(1)).items()]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
    _curl(url, call, [*fields, "X-Tenant: alpha", "X-Tenant: beta"])


def _curl(url: str, body: dict[str, Any], fields: list[str]) -> str:
    """POST `body` with curl, one `-H` per field line given (in order); the answer's head, a 200."""
    argv = [
        "curl",
        "-sS",
        "--max-time",
        "10",
        "-D",
        "-",
        "-o",
        "/dev/null",
        "--data-binary",
        json.dumps(body),
    ]
    for line in dict.fromkeys(["Content-Type: application/json", *fields]):
        argv += ["-H", line]
    done = subprocess.run([*argv, url], capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("HTTP/1.1 200"), done.stdout
    return done.stdout


def _lines_of_the_call(data: bytes) -> tuple[bytes, bytes]:
    """The capture's `exchange_opened` and `response_head` lines of the client's `tools/call`, as bytes."""
    lines = [json.loads(line) for line in data.splitlines()]
    exchange = next(
        line["exchange"]
        for line in lines
        if line.get("kind") == "message" and line["msg"].get("method") == "tools/call"
    )
    opened, head = (
        next(
            raw
            for raw, line in zip(data.splitlines(), lines, strict=True)
            if line.get("kind") == kind and line.get("exchange") == exchange
        )
        for kind in ("exchange_opened", "response_head")
    )
    return opened, head


def _call_http(document: dict[str, Any]) -> dict[str, str]:
    """The request headers `export --json` shows on the chain's `tools/call`."""
    for chain in document["chains"]:
        for message in chain["messages"]:
            if message.get("method") == "tools/call" and message.get("http", {}).get("method") == "POST":
                headers: dict[str, str] = message["http"]["headers"]
                return headers
    raise AssertionError("no tools/call request in the export")
