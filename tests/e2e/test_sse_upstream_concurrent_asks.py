"""Several 2026-07-28 clients calling at once behind the Python SDK's HTTP+SSE server.

HTTP+SSE carries every server message of a session on its one GET stream, so a question asked while
several calls of one upstream session wait names none of them. Anonymous clients share that session
by default: the proxy refuses the question, and the refusal the client sees names the transport as
the cause and the settings that avoid it. With `per_connection` each client connection gets an HTTP+SSE
session of its own, so each question is its own call's and every client is asked and served.
The refusal reaches each client as an ordinary error of its call (HTTP 200, -32603, saying why), as
the server fails its tool with it: never as the 404 "method not found" of a method that does not
exist, which the TypeScript SDK's client reports as a failed POST.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.e2e.channel_peers import PythonSse
from tests.e2e.modern_raw import modern_call
from tests.peers.clients import ClientRun, run_plan
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
CLIENTS = 2


async def _ask_names_at_once(url: str) -> list[Any]:
    """Each client's `ask_name` result, or the error's message (a `str`) its call got, the calls made
    side by side from separate connections."""
    results: list[Any] = [None] * CLIENTS

    async def run(i: int) -> None:
        async with client_for(url, MODERN, log=CallbackLog(), read_timeout=10.0) as client:
            with anyio.fail_after(20):
                try:
                    results[i] = normalize_tool_result(await client.call_tool("ask_name", {}))
                except MCPError as error:  # the server passes the refusal on as its call's error
                    results[i] = error.message

    async with anyio.create_task_group() as group:
        for i in range(CLIENTS):
            group.start_soon(run, i)
    return results


def _proxy(server: PythonSse, **settings: str) -> ProxyProcess:
    env = settings_env(upstream=server.sse_url, upstream_era="legacy", upstream_transport="sse", **settings)
    return ProxyProcess(clean_env(**env))


async def test_a_refused_question_behind_http_sse_names_the_one_stream_and_what_avoids_it() -> None:
    server = PythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, _proxy(server) as proxy:
        results = await _ask_names_at_once(proxy.endpoint("/sse"))
        said = proxy.find("bridge_stream_request_ambiguous")
    refused = [r for r in results if isinstance(r, str)]
    assert refused, results
    for text in refused:
        assert "names no client request and" not in text, text
        assert "behind an HTTP+SSE or stdio server every question comes on one stream" in text, text
        assert "anonymous_upstream_sessions = per_connection" in text, text
    assert said is not None
    assert "the transport carries all of a session's messages on one stream" in said["hint"]


async def test_per_connection_gives_each_client_its_own_http_sse_session_and_its_own_question() -> None:
    server = PythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, _proxy(server, anonymous_upstream_sessions="per_connection") as proxy:
        results = await _ask_names_at_once(proxy.endpoint("/sse"))
        said = proxy.find("bridge_stream_request_ambiguous")
    assert [r["content"] for r in results] == [["Hello, octocat!"]] * CLIENTS, results
    assert said is None


ASK_LATER = {"name": "session_ask_name_later", "arguments": {"wait": 1}}
REFUSED = "the proxy cannot tell whose it is"


async def test_a_refused_question_reaches_each_client_on_the_wire_as_http_200_with_its_calls_error() -> None:
    server = PythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, _proxy(server) as proxy:
        url = proxy.endpoint("/sse")
        wire: list[tuple[int, dict[str, Any]]] = []

        async def raw(ident: int) -> None:
            async with aiohttp.ClientSession() as http:  # a connection, and a client, of its own
                wire.append(await modern_call(http, url, "tools/call", ASK_LATER, ident=ident))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for ident in range(CLIENTS):
                    group.start_soon(raw, ident)
    assert sorted(status for status, _ in wire) == [200] * CLIENTS, wire
    for _, body in wire:
        assert body["error"]["code"] == -32603, body
        assert REFUSED in body["error"]["message"], body


async def test_the_typescript_sdk_client_reports_a_refused_question_as_its_calls_error() -> None:
    server = PythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    plan = [{"id": "a", "op": "call", "tool": ASK_LATER["name"], "arguments": ASK_LATER["arguments"]}]
    with server, _proxy(server) as proxy:
        url = proxy.endpoint("/sse")
        runs: list[ClientRun] = []

        async def typescript() -> None:
            runs.append(await anyio.to_thread.run_sync(lambda: run_plan("ts-v2", url, plan, timeout=30)))

        with anyio.fail_after(40):
            async with anyio.create_task_group() as group:
                for _ in range(CLIENTS):
                    group.start_soon(typescript)
    errors = [run.lines["a"]["error"] for run in runs if "error" in run.lines.get("a", {})]
    assert errors, [run.lines for run in runs]  # at least one call was in flight beside the other's
    for error in errors:
        assert error["code"] == -32603, error
        assert error["message"].startswith("elicitation/create came on the session's GET stream"), error
        assert REFUSED in error["message"], error
