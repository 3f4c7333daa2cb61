"""What the TUI and the exports say, checked against real peers and real `mcp-proxy` processes.

A GET stream ended by its session's deletion is a normal end in the chain and in `/metrics`; a GET
stream's `HTTP 200` is timed when the server answered, not when the stream ended, and its headline
counts the rest as the stream open, not as upstream time, in `/api/chains`, `export --json` and the
TUI's tree of the capture alike; chain ids stay unique when an attached TUI outlives the proxy
process it watched; a TUI attached late lists the sessions open before it, the bridge's own with the
upstream too; a curl command exported from a capture, run by bash with its placeholders filled
from the environment, gets the real SDK server's answer (and never holds the secret it stands for).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest

from proxy.flows.events import ChainChanged, ChainOpened, ChainStatus, ChainSummary, FlowEvent
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for, run_scenario
from tests.sidecar import (
    ProxyProcess,
    admin_json,
    chain_ids,
    clean_env,
    exported_chains,
    run_bash,
    run_mcp_proxy,
    settings_env,
)
from tests.test_sidecar import metric, scrape
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.feeds import AttachFeed, CaptureFeed
from ui.render import offset
from ui.widgets.chain_tree import ChainTree

pytestmark = pytest.mark.e2e

SECRET = "tok-e2e-curl-secret-1234"


def finals(events: list[FlowEvent]) -> dict[str, ChainSummary]:
    out: dict[str, ChainSummary] = {}
    for event in events:
        if isinstance(event, ChainOpened | ChainChanged):
            out[event.chain.id] = event.chain
    return out


async def test_a_get_stream_ended_by_session_deletion_is_a_normal_end_in_chains_and_metrics(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    async with proxy_for(modern_server.url, admin_enabled=True, admin="127.0.0.1:0") as proxy:
        feed = proxy.bus.subscribe("test")
        events: list[FlowEvent] = []

        def streams() -> list[ChainSummary]:
            while (event := feed.get_nowait()) is not None:
                events.append(event)
            return [c for c in finals(events).values() if c.method == "GET stream" and c.ended is not None]

        await run_scenario(proxy.endpoint(), "legacy", "echo")  # the SDK client DELETEs its session on close
        await wait_for(lambda: bool(streams()), what="the GET stream's chain to end")
        async with aiohttp.ClientSession() as http, http.get(proxy.admin_url + "/metrics") as resp:
            metrics = await resp.text()

    (stream,) = streams()
    assert any(c.method == "DELETE session" for c in finals(events).values())
    assert stream.bridged  # the legacy_to_mrtr bridge serves the stream and ends it with the session
    assert stream.status is ChainStatus.OK, stream
    assert stream.error is None
    assert "ended with its session (deleted)" in stream.notes
    errors = [line for line in metrics.splitlines() if line.startswith("mcp_proxy_errors_total{")]
    assert not [line for line in errors if 'method="GET stream"' in line], errors


async def stream_and_delete(admin: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ended GET stream's chain (`/api/chains/{id}`) and the DELETE's headline, once both ended."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        chains = await admin_json(admin + "/api/chains?method=GET%20stream,DELETE%20session")
        ended = {c["method"]: c for c in chains if c.get("ended") is not None}
        if len(ended) == 2:
            break
        assert asyncio.get_running_loop().time() < deadline, f"the stream or DELETE never ended: {chains}"
        await asyncio.sleep(0.05)
    stream = await admin_json(f"{admin}/api/chains/{ended['GET stream']['id']}")
    return stream, ended["DELETE session"]


def answered(chain: dict[str, Any]) -> float:
    """When a stream chain's `HTTP 200` record says the server answered."""
    (head,) = [m for m in chain["messages"] if m["kind"] == "http" and m["direction"] == "to_client"]
    assert head["http"]["status"] == 200, head
    return float(head["ts"])


def tree_of(app: ProxyTui) -> list[str]:
    """The chain tree's headline and every label below it, as plain text."""
    tree = app.main.query_one(ChainTree)
    out, pending = [str(tree.root.label)], list(tree.root.children)
    while pending:
        node = pending.pop(0)
        out.append(str(node.label))
        pending[:0] = node.children
    return out


async def test_a_get_streams_http_200_is_timed_when_the_server_answered_live_in_the_export_and_the_tui(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, capture=capture))) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "echo")  # a GET stream, a call, then the DELETE
        live, delete = await stream_and_delete(proxy.admin)
        proxy.stop()

    summary = live["chain"]
    head_at = answered(live)
    # The server answered the GET at once; the stream stayed open until after the client's DELETE.
    assert summary["started"] <= head_at < delete["started"] < summary["ended"], (summary, head_at, delete)
    assert summary["upstream_ms"] == pytest.approx((head_at - summary["started"]) * 1000, abs=0.01)
    assert summary["stream_ms"] > 0
    total = summary["upstream_ms"] + summary["client_wait_ms"] + summary["held_ms"] + summary["stream_ms"]
    assert total == pytest.approx(summary["duration_ms"], abs=0.01)

    printed, _ = exported_chains(capture)
    (exported,) = [c for c in json.loads(printed)["chains"] if c["chain"]["method"] == "GET stream"]
    assert answered(exported) == head_at
    timings = ("duration_ms", "upstream_ms", "stream_ms")
    assert {k: exported["chain"][k] for k in timings} == {k: summary[k] for k in timings}

    app = ProxyTui(CaptureFeed(capture), batch_delay=0.01)
    async with app.run_test(size=(160, 36)) as pilot:
        await wait_for(lambda: app.feed_status is not None and app.feed_status.state == "ended", what="read")
        await pilot.press("slash", *f"id:{exported['chain']['id']}", "enter", "escape", "enter")
        await pilot.pause()
        lines = tree_of(app)
    (head_line,) = [line for line in lines if "HTTP 200" in line]
    assert head_line.lstrip().startswith(offset(head_at - summary["started"]) + " "), lines
    assert "stream open" in lines[0], lines


async def test_an_attached_tui_never_shows_two_chains_with_one_id_across_proxy_processes(
    legacy_server: PeerServer,
) -> None:
    first = ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))).start()
    try:
        admin = first.admin
        app = ProxyTui(AttachFeed(admin, backoff=(0.05, 0.1)), batch_delay=0.01)
        async with app.run_test(size=(100, 30)):

            def live() -> bool:
                return app.feed_status is not None and app.feed_status.state == "live"

            await wait_for(live, what="the first proxy's feed")
            await run_scenario(first.endpoint(), "legacy", "echo")
            await wait_for(lambda: len(app.model.chains) >= 4, what="the first run's chains")
            first.stop()
            await wait_for(lambda: not live(), what="the disconnect")
            settings = settings_env(upstream=legacy_server.url, admin=admin.removeprefix("http://"))
            with ProxyProcess(clean_env(**settings)) as second:
                await wait_for(live, what="the reconnection to the second process", seconds=15)
                before = len(app.model.chains)
                await run_scenario(second.endpoint(), "legacy", "echo")
                await wait_for(lambda: len(app.model.chains) >= before + 4, what="the second run's chains")
            ids = [entry.summary.id for entry in app.model.chains.values()]
    finally:
        first.stop()

    assert len(ids) == len(set(ids)), ids
    runs = {chain_id.rsplit("-", 1)[0] for chain_id in ids}
    assert len(runs) == 2, ids  # each process numbers its chains under its own run tag
    assert sum(chain_id.endswith("-1") for chain_id in ids) == 2  # both counted from 1, yet apart


async def _live_session(url: str) -> str:
    """A fresh session on the legacy server, initialized, for the replayed call to run in."""
    accept = {"Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with httpx2.AsyncClient(timeout=10.0) as http:
        opened = await http.post(url, json=init, headers=accept)
        session = opened.headers["mcp-session-id"]
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        headers = {**accept, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        assert (await http.post(url, json=done, headers=headers)).status_code == 202
    return str(session)


async def test_a_tui_attached_late_lists_every_session_open_before_it_the_bridges_upstream_one_too(
    dual_inflight_server: PeerServer,
) -> None:
    env = clean_env(**settings_env(upstream=dual_inflight_server.url, upstream_era="legacy"))
    with ProxyProcess(env) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "echo")  # a session opened and ended (DELETE)
        async with contextlib.AsyncExitStack() as held:
            for _ in range(2):  # legacy clients passed through: their sessions stay open while they run
                client = await held.enter_async_context(client_for(proxy.endpoint(), "legacy"))
                await client.call_tool("echo", {"text": "hi"})
            # a 2026-07-28 client's call bridged to the legacy server: the bridge opens its own session
            await run_scenario(proxy.endpoint(), "2026-07-28", "ask_name")
            opened = metric(await scrape(proxy), "mcp_proxy_sessions_total", state="opened")
            assert opened == 4  # three clients' and the bridge's, all before anyone attached
            await admin_json(proxy.admin + "/api/chains")  # a script's read: what was queued is built

            app = ProxyTui(AttachFeed(proxy.admin, backoff=(0.05, 0.1)), batch_delay=0.01)
            async with app.run_test(size=(100, 30)):
                await wait_for(
                    lambda: app.feed_status is not None and app.feed_status.state == "live",
                    what="the feed's history",
                )
                sessions = list(app.model.sessions.values())

    listed = sorted((entry.side, entry.state) for entry in sessions)
    assert listed == [("both", "opened"), ("both", "opened"), ("upstream", "opened")], sessions
    (upstream,) = [entry for entry in sessions if entry.side == "upstream"]
    assert upstream.principal
    assert upstream.capabilities
    assert all(entry.opened <= entry.changed for entry in sessions)


async def test_an_exported_curl_command_run_by_bash_gets_the_real_servers_answer(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, capture=capture))) as proxy:
        auth = {"Authorization": f"Bearer {SECRET}"}
        result = await run_scenario(proxy.endpoint(), "legacy", "echo", headers=auth)
        assert result["result"]["content"] == ["hello"]
        proxy.stop()
    chains = exported_chains(capture)[1]
    (echo,) = chain_ids(chains, "name", "echo")
    (opener,) = chain_ids(chains, "method", "initialize")

    exported = run_mcp_proxy("export", "--curl", echo, "--to", "upstream", str(capture))
    at_proxy = run_mcp_proxy("export", "--curl", echo, str(capture))

    assert exported.returncode == 0, exported.stderr
    command = exported.stdout
    assert SECRET not in command
    assert SECRET not in at_proxy.stdout
    assert f"curl -sS -N -X POST {legacy_server.url}" in command
    assert f"curl -sS -N -X POST {proxy.endpoint()}" in at_proxy.stdout
    assert '"${MCP_TOKEN:?' in command
    assert '"${MCP_SESSION_ID:?' in command
    assert f"initialize, chain {opener} (`mcp-proxy export --curl {opener}` prints it)" in at_proxy.stdout
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}

    refused = run_bash(command, base)
    session = await _live_session(legacy_server.url)
    answered = run_bash(command, {**base, "MCP_TOKEN": "any-token", "MCP_SESSION_ID": session})

    assert refused.returncode != 0
    assert "MCP_" in refused.stderr
    assert "set MCP_" in refused.stderr
    assert answered.returncode == 0, answered.stderr
    data = [line.removeprefix("data: ") for line in answered.stdout.splitlines() if line.startswith("data: ")]
    replies = [json.loads(d) for d in data if d.strip()] or [json.loads(answered.stdout)]
    (reply,) = [r for r in replies if "result" in r]
    assert reply["result"]["content"][0]["text"] == "hello"
