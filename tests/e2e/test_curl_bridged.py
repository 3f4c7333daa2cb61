"""Copy as curl toward the upstream of what the user really ran: a 2026-07-28 SDK client with a bearer
token bridged by the real `mcp-proxy` to the official Python SDK's legacy server, a legacy SDK client
bridged to its 2026-07-28 server, and a stdio server.

A bridge opens its upstream session with the caller's `Authorization` and relays it (and the client's
custom headers) on every request of its own, so the command for one of those requests carries them,
the token a placeholder; run by bash with the token and a live session set, the legacy server answers
it. Toward the 2026-07-28 server there is no session to set, only each retry's `requestState` from
the answer before it. A stdio upstream has no URL: `--to upstream` refuses, saying why, instead of
printing a command for `stdio:/mcp`. Nor has an HTTP+SSE server one a command could name ahead (a
message goes to the endpoint its live GET stream names): `--to upstream` refuses those chains too.
Nor has a stdio client's proxy (`mcp-proxy stdio`): toward it, and toward its stdio server, the
export refuses and points at the message's JSON-RPC instead.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from tests.e2e.channel_peers import PythonSse, python_stdio_command
from tests.e2e.test_stdio_clients import stdio_command
from tests.peers.clients import run_client
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT, PeerServer
from tests.peers.scenarios import client_for
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

SECRET = "bridged-curl-bearer-5e0c1d"


def chain_of(capture: Path, tool: str) -> str:
    (chain,) = chain_ids(exported_chains(capture)[1], "name", tool)
    return chain


async def test_a_bridged_calls_upstream_command_carries_the_callers_token_and_the_server_answers_it(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, capture=capture))) as proxy:
        auth = {"Authorization": f"Bearer {SECRET}", "X-Tenant": "blue"}
        async with client_for(proxy.endpoint(), "2026-07-28", headers=auth) as modern:
            added = await modern.call_tool("add", {"a": 2, "b": 3})
        assert not added.is_error
        proxy.stop()

    exported = run_mcp_proxy("export", "--curl", chain_of(capture, "add"), "--to", "upstream", str(capture))

    assert exported.returncode == 0, exported.stderr
    assert "the server got the proxy's own requests" in exported.stderr
    assert "the chain's initialize opens: run that command first and set MCP_SESSION_ID" in exported.stderr
    command = exported.stdout
    assert SECRET not in command
    assert "-H 'Authorization: Bearer '\"${MCP_TOKEN:?" in command
    assert "-H 'X-Tenant: blue'" in command
    # The chain's first call opened the proxy's session upstream: its initialize, initialized, the call.
    blocks = [b for b in command.split("\n\n") if "curl -sS" in b]
    assert ['"method":"initialize"' in b for b in blocks] == [True, False, False]
    opening, initialized, call = blocks
    assert "Mcp-Session-Id" not in opening.split("curl -sS", 1)[1]  # the handshake opens the session
    assert "-H 'MCP-Protocol-Version: " in call  # as the proxy's handshake agreed with the server
    # Run by hand in order, as the comments say, the chain opens its own session and gets the answer.
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")} | {"MCP_TOKEN": SECRET}
    opened = run_bash(opening, base)
    assert opened.returncode == 0, opened.stderr
    heads = [line.split(":", 1) for line in opened.stdout.splitlines() if ":" in line]
    session = next(value.strip() for name, value in heads if name.lower() == "mcp-session-id")
    for step in (initialized, call):
        ran = run_bash(step, base | {"MCP_SESSION_ID": session})
        assert ran.returncode == 0, ran.stderr
    assert '"text":"5"' in ran.stdout, ran.stdout


async def test_a_legacy_clients_bridged_call_runs_by_hand_against_the_2026_server_no_session_wanted(
    modern_server: PeerServer, tmp_path: Path
) -> None:
    """Through the legacy->MRTR bridge the 2026-07-28 server holds no session: stderr says no command
    carries one, and each retry takes its `requestState` from the answer to the command before it.
    Run in order that way, with the client's query key set, the server completes the call."""
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=modern_server.url, capture=capture))) as proxy:
        async with client_for(proxy.endpoint() + f"?api_key={SECRET}", "legacy") as legacy:
            asked = await legacy.call_tool("ask_twice", {})
        assert not asked.is_error
        proxy.stop()

    exported = run_mcp_proxy(
        "export", "--curl", chain_of(capture, "ask_twice"), "--to", "upstream", str(capture)
    )

    assert exported.returncode == 0, exported.stderr
    assert "A 2026-07-28 server holds no session, so no command carries a session id" in exported.stderr
    assert "a retry's MCP_REQUEST_STATE comes from the answer to the command before it" in exported.stderr
    command = exported.stdout
    assert SECRET not in command
    assert "MCP_SESSION_ID" not in exported.stderr + command
    call, *retries = [b for b in command.split("\n\n") if "curl -sS" in b]
    assert len(retries) == 2, command
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")} | {"MCP_QUERY_SECRET": SECRET}
    ran = run_bash(call, base)
    for retry in retries:
        assert ran.returncode == 0, ran.stderr
        state = re.search(r'"requestState":"([^"]+)"', ran.stdout)
        assert state is not None, ran.stdout
        ran = run_bash(retry, base | {"MCP_REQUEST_STATE": state.group(1)})
    assert ran.returncode == 0, ran.stderr
    assert '"text":"name=octocat color=' in ran.stdout, ran.stdout


async def test_copy_as_curl_toward_a_stdio_upstream_refuses_saying_there_is_no_url(tmp_path: Path) -> None:
    capture = tmp_path / "run.jsonl"
    env = settings_env(upstream_cmd=python_stdio_command(), upstream_era="legacy", capture=capture)
    with ProxyProcess(clean_env(**env)) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as legacy:
            echoed = await legacy.call_tool("echo", {"text": "hi"})
        assert not echoed.is_error
        proxy.stop()
    chain = chain_of(capture, "echo")

    upstream = run_mcp_proxy("export", "--curl", chain, "--to", "upstream", str(capture))
    at_proxy = run_mcp_proxy("export", "--curl", chain, str(capture))

    assert upstream.returncode == 2, upstream.stdout
    assert "stdio:" not in upstream.stdout
    assert "the upstream is a command the proxy ran (stdio): there is no URL" in upstream.stderr
    assert "--to proxy" in upstream.stderr
    assert at_proxy.returncode == 0, at_proxy.stderr
    assert f"curl -sS -N -X POST {proxy.endpoint()}" in at_proxy.stdout


def test_copy_as_curl_of_a_stdio_clients_chain_refuses_either_way_pointing_at_the_json(
    tmp_path: Path,
) -> None:
    shim = stdio_command(tmp_path, "--", *shlex.split(python_stdio_command()), upstream_era="legacy")
    run = run_client("python-legacy", shim, ["echo"], transport="stdio")
    assert "echo" in run.lines, run.stderr[-3000:]
    capture = tmp_path / "capture.jsonl"
    chain = chain_of(capture, "echo")

    at_proxy = run_mcp_proxy("export", "--curl", chain, str(capture))
    upstream = run_mcp_proxy("export", "--curl", chain, "--to", "upstream", str(capture))

    for refused in (at_proxy, upstream):
        assert refused.returncode == 2, refused.stdout
        assert "curl" not in refused.stdout
        assert "there is no URL to send this to" in refused.stderr
        assert "mcp-proxy export --json" in refused.stderr
        assert "--to proxy" not in refused.stderr  # the proxy has no URL either
    assert "the client spoke to the proxy over stdio" in at_proxy.stderr


async def test_copy_as_curl_toward_an_http_sse_upstream_refuses_saying_why(tmp_path: Path) -> None:
    capture = tmp_path / "run.jsonl"
    server = PythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server:
        env = settings_env(
            upstream=server.sse_url, upstream_era="legacy", upstream_transport="sse", capture=capture
        )
        with ProxyProcess(clean_env(**env)) as proxy:
            async with client_for(proxy.endpoint("/sse"), "legacy") as legacy:
                echoed = await legacy.call_tool("echo", {"text": "hi"})
            assert not echoed.is_error
            proxy.stop()
    chain = chain_of(capture, "echo")

    upstream = run_mcp_proxy("export", "--curl", chain, "--to", "upstream", str(capture))
    at_proxy = run_mcp_proxy("export", "--curl", chain, str(capture))

    assert upstream.returncode == 2, upstream.stdout
    assert upstream.stdout == ""
    assert "the upstream speaks HTTP+SSE (2024-11-05)" in upstream.stderr
    assert "--to proxy" in upstream.stderr
    assert at_proxy.returncode == 0, at_proxy.stderr
    assert f"curl -sS -N -X POST {proxy.endpoint('/sse')}" in at_proxy.stdout
