"""A SIGTERM drain finishes the conversations under way, with the official Python SDK's legacy client.

The proxy is the `mcp-proxy` command, one per test (a SIGTERM ends it). A legacy client's next step
in a conversation often needs a NEW connection while its others are busy: the answer to a server's
in-flight `elicitation/create`, or the `tools/list` its SDK sends to check a call's structured output
before it reports the result. The drain keeps listening for those, refuses new work (a new
`initialize`) with 503 and `Retry-After`, and exits 0 once the conversations have ended, well
inside its grace.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from proxy.cli import main
from proxy.flows.events import ChainStatus
from proxy.flows.leg_handlers import STOPPED_WHILE_PARKED
from tests.e2e.commanded import TOKEN, Commanded, counters, own_proxy
from tests.e2e.modern_raw import modern_call
from tests.peers.clients import run_plan
from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for
from tests.sidecar import until
from ui.app import ProxyTui
from ui.feeds import AttachFeed
from ui.model import ChainEntry

pytestmark = pytest.mark.asyncio

GRACE = 60
"""The drain's grace: far longer than any test here takes, so exiting early shows the drain ended
with its conversations rather than at its grace."""

GRACEFUL = {"MCP_PROXY_DRAIN_GRACE": str(GRACE)}

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "late-client", "version": "1"},
    },
}


async def test_a_call_an_intercept_held_reaches_a_legacy_client_that_lists_tools_on_a_new_connection(
    legacy_server: PeerServer,
) -> None:
    # The client never listed tools, so before it reports the call's result its SDK sends tools/list
    # (to check the structured output), on a new connection while the call's stream still holds its
    # first one.
    async with own_proxy(legacy_server.url, "--intercept", "tool:echo dir:client", env=GRACEFUL) as proxy:

        async def desk() -> float:
            async with proxy.http() as http:
                url = f"{proxy.admin_url}/api/intercepts/wait?timeout=30"
                async with http.get(url) as resp:
                    assert (await resp.json())["held"], "the call was never held"
            proxy.process.signal(signal.SIGTERM)  # the drain releases the held call
            return time.monotonic()

        plan = [{"id": "echo", "op": "call", "tool": "echo", "arguments": {"text": "hello"}}]
        client = asyncio.to_thread(run_plan, "python-legacy", proxy.endpoint(), plan, timeout=40.0)
        run, signalled = await asyncio.gather(client, desk())
        assert await proxy.process.exited(seconds=20) == 0
        waited = time.monotonic() - signalled

    assert [part["text"] for part in run.lines["echo"]["result"]["content"]] == ["hello"], run.lines
    assert waited < GRACE / 3
    listed = [e for e in proxy.lines() if e.get("event") == "exchange" and e.get("method") == "tools/list"]
    assert [e["status"] for e in listed] == [200]  # served during the drain, not refused
    drained = proxy.process.find("drained")
    assert drained is not None
    assert drained["in_flight"] == 0


@pytest.mark.parametrize(
    ("mode", "server"),
    [
        pytest.param("legacy", "legacy_server", id="legacy-client-in-flight"),
        pytest.param("2026-07-28", "legacy_server", id="modern-client-parked-call-retried"),
        pytest.param("2026-07-28", "modern_server", id="modern-client-passthrough-call-retried"),
    ],
)
async def test_an_answer_to_an_elicitation_pending_at_sigterm_reaches_the_server(
    mode: str, server: str, request: pytest.FixtureRequest
) -> None:
    # Legacy: the elicitation rides the call's stream and the answer is POSTed on a new connection.
    # 2026-07-28 against a legacy server: the bridge parks the upstream call and answers the client
    # input_required, so nothing is in flight while the user answers; the drain waits for the parked
    # call, and the retry (requestState) comes on a new connection and resumes it.
    # 2026-07-28 against a 2026-07-28 server: pass-through holds nothing between the rounds and the
    # exchange that carried input_required is over; the drain waits for the call's retry all the same.
    upstream: PeerServer = request.getfixturevalue(server)
    asked = asyncio.Event()
    answer = asyncio.Event()

    async def elicitation(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        asked.set()
        await asyncio.wait_for(answer.wait(), 20)  # the user answers once the drain has begun
        return types.ElicitResult(action="accept", content={"name": "octocat"})

    async with own_proxy(upstream.url, env=GRACEFUL) as proxy:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
            transport = streamable_http_client(proxy.endpoint(), http_client=http)
            async with (
                Client(transport, mode=mode, cache=None, elicitation_callback=elicitation) as client,
                asyncio.TaskGroup() as tasks,
            ):
                await client.list_tools()  # so the result is reported without a tools/list of its own
                call = tasks.create_task(client.call_tool("ask_name", {}))
                await asyncio.wait_for(asked.wait(), 20)
                proxy.process.signal(signal.SIGTERM)
                draining = await proxy.process.logged("draining")
                if mode != "legacy":  # nothing is in flight or connected while the user thinks
                    await user_thinks(proxy)
                answer.set()
                result = await asyncio.wait_for(call, 20)
        assert await proxy.process.exited(seconds=20) == 0

    assert draining["in_flight"] + draining["parked"] + draining["awaiting_retry"] >= 1
    assert [block.text for block in result.content] == ["Hello, octocat!"]  # type: ignore[union-attr]
    drained = proxy.process.find("drained")
    assert drained is not None
    assert (drained["in_flight"], drained["parked"], drained["awaiting_retry"]) == (0, 0, 0)
    assert drained["how"] == "every conversation ended"


THINK_S = 1.0
"""Seconds the user takes to answer once the draining proxy has no client connection and no exchange
open: twenty times the drain's look at what is left, so a proxy that forgot the call would be gone."""


async def user_thinks(proxy: Commanded) -> None:
    """Wait (bounded) until the draining proxy has no client connection and no exchange open, then
    `THINK_S` more, failing at once should the proxy exit meanwhile: only a call waiting for its
    retry keeps it up then."""
    deadline = time.monotonic() + 20
    while True:
        found = counters(await proxy.metrics())
        if (found["mcp_proxy_client_connections"], found["mcp_proxy_open_exchanges"]) == (0, 0):
            break
        assert time.monotonic() < deadline, f"client connections still open: {found}"
        await asyncio.sleep(0.05)
    process = proxy.process.process
    assert process is not None
    thought = time.monotonic() + THINK_S
    while time.monotonic() < thought:
        assert process.poll() is None, "the proxy exited while its client's user was answering"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    ("settings", "ended_by"),
    [
        pytest.param({"MCP_PROXY_DRAIN_GRACE": "1"}, "the grace (1 s) ran out", id="grace"),
        pytest.param(
            {"MCP_PROXY_DRAIN_GRACE": str(GRACE), "MCP_PROXY_CONTINUATION_TTL": "1"},
            "every conversation ended",
            id="continuation-ttl",
        ),
    ],
)
async def test_a_passthrough_call_whose_client_never_retries_holds_the_drain_no_longer_than_it_may(
    settings: dict[str, str], ended_by: str, modern_server: PeerServer
) -> None:
    # The call is answered input_required and its client never comes back: the drain waits for its
    # retry until the grace or continuation_ttl, whichever ends first, and the proxy exits 0.
    async with own_proxy(modern_server.url, env=settings) as proxy, aiohttp.ClientSession() as http:
        status, reply = await modern_call(http, proxy.endpoint(), "tools/call", {"name": "ask_name"}, ident=1)
        assert status == 200, reply
        assert reply["result"]["resultType"] == "input_required", reply
        proxy.process.signal(signal.SIGTERM)
        draining = await proxy.process.logged("draining")
        assert await proxy.process.exited(seconds=20) == 0

    assert draining["awaiting_retry"] == 1
    drained = proxy.process.find("drained")
    assert drained is not None
    assert drained["how"].startswith(ended_by), drained


async def test_a_new_initialize_during_a_drain_gets_503_and_the_proxy_exits_0_once_the_call_ends(
    legacy_server: PeerServer,
) -> None:
    log = CallbackLog()
    async with own_proxy(legacy_server.url, env=GRACEFUL) as proxy:
        async with client_for(proxy.endpoint(), "legacy", log=log) as client, asyncio.TaskGroup() as tasks:
            await client.list_tools()
            call = tasks.create_task(
                client.call_tool("slow_progress", {"steps": 40}, progress_callback=log.on_progress)
            )
            await until(lambda: len(log.progress) >= 3, what="the slow call under way", seconds=20)
            proxy.process.signal(signal.SIGTERM)
            signalled = time.monotonic()
            await proxy.process.logged("draining")
            status, headers, body = await post_initialize(proxy.endpoint())
        assert call.result().content[0].text == "done 40"  # type: ignore[union-attr]
        assert await proxy.process.exited(seconds=20) == 0
        waited = time.monotonic() - signalled

    assert status == 503
    assert headers["Retry-After"] == "1"
    assert headers["Connection"] == "close"
    assert body["id"] == 7
    assert "draining" in body["error"]["message"]
    assert body["error"]["data"]["reason"] == "draining"
    assert waited < GRACE / 3  # the drain ended with the conversation, not at its grace
    refused = [e for e in proxy.lines() if e.get("event") == "exchange" and e.get("method") == "initialize"]
    assert [(e["status"], e["outcome"]) for e in refused][-1] == (503, "draining")


async def post_initialize(url: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    """A new client's `initialize`, as its SDK sends it: status, headers and the JSON body."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http, http.post(url, json=INITIALIZE, headers=headers) as resp:
        return resp.status, dict(resp.headers), json.loads(await resp.read())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
async def test_a_call_parked_when_the_proxy_stops_ends_incomplete_noted_so_in_the_tui_capture_and_export(
    sig: signal.Signals, legacy_server: PeerServer, tmp_path: Path
) -> None:
    # A 2026-07-28 client that never retries: the bridge's parked upstream call outlives the proxy
    # (SIGTERM: past a short drain; SIGINT: at once). Its client had not come back and its upstream
    # was fine, so the attached TUI, the capture and the export say the proxy let it go as it
    # stopped: `incomplete`, never an upstream error, and not listed by `export --status error`.
    capture = tmp_path / "run.jsonl"
    env = {"MCP_PROXY_DRAIN_GRACE": "0.5", "MCP_PROXY_CAPTURE": str(capture)}
    async with own_proxy(legacy_server.url, env=env) as proxy, aiohttp.ClientSession() as http:
        app = ProxyTui(AttachFeed(proxy.admin_url, TOKEN, backoff=(5.0, 5.0)), batch_delay=0.01)
        async with app.run_test(size=(160, 40)):
            await until(lambda: _feed_state(app) == "live", what="the attached TUI to go live")
            status, reply = await modern_call(
                http, proxy.endpoint(), "tools/call", {"name": "ask_name"}, ident=1
            )
            assert status == 200, reply
            assert reply["result"]["resultType"] == "input_required", reply
            await until(lambda: app.model.parked == 1, what="the TUI to show the call parked")
            proxy.process.signal(sig)
            assert await proxy.process.exited(seconds=20) == 0
            await until(lambda: _call_row(app).summary.ended is not None, what="the TUI to end the call")
            row = _call_row(app)
            shown = str(app.main.table.get_cell(row.key, "status"))

    assert (row.summary.status, row.summary.error, row.summary.notes) == (
        ChainStatus.INCOMPLETE,
        None,
        [STOPPED_WHILE_PARKED],
    )
    assert shown.startswith("incom"), shown
    dead = proxy.process.find("bridge_continuation_dead")
    assert dead is not None
    assert dead["why"] == "the proxy is stopping"
    lines = [json.loads(line) for line in capture.read_bytes().splitlines()]
    moves = [o for o in lines if o.get("kind") == "continuation"]
    assert [(o["state"], o.get("outcome")) for o in moves] == [
        ("parked", None),
        ("expired", "proxy_stopping"),
    ]
    assert moves[-1]["age_ms"] > 0.0  # how long it waited for its client's retry
    exported = tmp_path / "chains.json"
    assert main(["export", "--json", str(exported), str(capture)]) == 0
    (chain,) = [
        c["chain"]
        for c in json.loads(exported.read_bytes())["chains"]
        if c["chain"]["method"] == "tools/call"
    ]
    assert (chain["status"], chain.get("error"), chain["notes"]) == (
        "incomplete",
        None,
        [STOPPED_WHILE_PARKED],
    )
    errors = tmp_path / "errors.json"
    assert main(["export", "--json", str(errors), "--status", "error", str(capture)]) == 0
    assert json.loads(errors.read_bytes())["chains"] == []


def _feed_state(app: ProxyTui) -> str | None:
    return app.feed_status.state if app.feed_status is not None else None


def _call_row(app: ProxyTui) -> ChainEntry:
    (row,) = [e for e in app.model.chains.values() if e.summary.method == "tools/call"]
    return row
