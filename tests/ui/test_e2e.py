"""End to end: a real SDK client through a real proxy, watched by the real TUI.

Attached over the admin API's live feed (with a token), across a proxy restart, and in-process on the
bus as `mcp-proxy --upstream URL --tui` runs it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from proxy.config import Settings
from proxy.flows.events import ChainStatus, Mode, Side
from proxy.runtime import Proxy
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.feeds import AttachFeed, BusFeed
from ui.timeline import build_timeline

pytestmark = pytest.mark.e2e

TOKEN = "e2e-admin-token"


@asynccontextmanager
async def proxy_with_admin(upstream: str, admin: str = "127.0.0.1:0") -> AsyncIterator[Proxy]:
    proxy = Proxy(Settings(upstream=upstream, listen="127.0.0.1:0", admin=admin, admin_token=TOKEN))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


def done(app: ProxyTui, name: str) -> bool:
    return any(
        e.summary.name == name and e.summary.status is ChainStatus.OK for e in app.model.chains.values()
    )


def state(app: ProxyTui) -> str | None:
    return app.feed_status.state if app.feed_status else None


async def test_the_attached_tui_shows_a_real_clients_chain(legacy_server: PeerServer) -> None:
    async with proxy_with_admin(legacy_server.url) as proxy:
        assert proxy.admin_url is not None
        app = ProxyTui(AttachFeed(proxy.admin_url, TOKEN, backoff=(0.05,)), batch_delay=0.01)
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(lambda: state(app) == "live", what="the attached feed to go live")
            result = await run_scenario(proxy.endpoint(), "legacy", "ask_name")
            assert result["result"]["content"] == ["Hello, octocat!"]
            await wait_for(lambda: done(app, "ask_name"), what="the ask_name chain to finish in the TUI")

            await pilot.press("slash", *"tool:ask_name", "enter", "escape", "enter")
            await pilot.pause()

            table, tree = app.main.table, app.main.chain_tree
            assert table.row_count == 1
            entry = app.model.get(tree.chain_key or "")
            assert entry is not None
            assert entry.summary.mode is Mode.PASSTHROUGH
            roles = [n.pair.role for n in build_timeline(entry.summary, entry.messages) if n.pair]
            assert "nested" in roles  # the elicitation rode the call's stream
            assert app.model.info is not None
            assert app.model.info.upstream == legacy_server.url


async def test_the_attached_tui_reconnects_when_the_proxy_restarts(legacy_server: PeerServer) -> None:
    async with proxy_with_admin(legacy_server.url) as first:
        assert first.admin_url is not None
        admin_url, admin = first.admin_url, first.admin_url.removeprefix("http://")
        app = ProxyTui(AttachFeed(admin_url, TOKEN, backoff=(0.05, 0.1)), batch_delay=0.01)
        async with app.run_test(size=(80, 24)):
            await wait_for(lambda: state(app) == "live", what="the first connection")
            await run_scenario(first.endpoint(), "legacy", "echo")
            await wait_for(lambda: done(app, "echo"), what="the first proxy's chain")
            await first.stop()
            await wait_for(lambda: state(app) in ("reconnecting", "connecting"), what="the disconnect")

            async with proxy_with_admin(legacy_server.url, admin) as second:
                await wait_for(lambda: state(app) == "live", what="the reconnection", seconds=10)
                await run_scenario(second.endpoint(), "legacy", "add")
                await wait_for(lambda: done(app, "add"), what="the second proxy's chain")
            assert done(app, "echo")  # the first proxy's chains are still on screen


async def test_the_in_process_tui_reads_the_bus(modern_server: PeerServer) -> None:
    settings: dict[str, Any] = {
        "upstream": modern_server.url,
        "listen": "127.0.0.1:0",
        "admin_enabled": False,
    }
    proxy = Proxy(Settings(**settings))
    feed = proxy.bus.subscribe("tui")
    await proxy.start()
    try:
        app = ProxyTui(BusFeed(feed), batch_delay=0.01)
        async with app.run_test(size=(80, 24)):
            await run_scenario(proxy.endpoint(), "legacy", "ask_twice")
            await wait_for(lambda: done(app, "ask_twice"), what="the bridged chain")
            (entry,) = [e for e in app.model.chains.values() if e.summary.name == "ask_twice"]
            assert entry.summary.bridged
            assert entry.summary.rounds == 3
            assert app.model.sessions  # the bridge minted a session for the legacy client
    finally:
        await proxy.stop()


def tree_labels(app: ProxyTui) -> list[str]:
    """Every label of the chain tree, depth first, as plain text."""
    pending, out = list(app.main.chain_tree.root.children), []
    while pending:
        node = pending.pop(0)
        out.append(str(node.label))
        pending[:0] = node.children
    return out


async def test_a_bridged_call_its_client_cancelled_shows_its_upstream_leg_over_unanswered(
    legacy_server: PeerServer,
) -> None:
    """A 2026-07-28 client cancels by closing its stream: the proxy ends the call and tells the
    upstream, whose leg then never answers; the tree must not show that leg as still running."""
    proxy = await asyncio.to_thread(
        ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, admin_token=TOKEN))).start
    )
    try:
        app = ProxyTui(AttachFeed(proxy.admin, TOKEN, backoff=(0.05, 0.1)), batch_delay=0.01)
        async with app.run_test(size=(200, 50)) as pilot, aiohttp.ClientSession() as http:
            params = modern_params({"name": "slow_progress", "arguments": {"steps": 500}})
            params["_meta"]["progressToken"] = "p1"
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
            headers = modern_headers("tools/call", params)
            async with http.post(proxy.listen + "/mcp", json=body, headers=headers) as resp:
                assert resp.status == 200
                await resp.content.readline()  # the call runs: its progress streams
                await wait_for(lambda: bool(leg_of(app)), what="the upstream leg")
                resp.close()  # the client cancels
            await wait_for(lambda: cancelled(app), what="the chain cancelled")
            await pilot.press("enter")
            await wait_for(
                lambda: any("upstream tools/call" in line for line in tree_labels(app)), what="tree"
            )

            (leg,) = [line for line in tree_labels(app) if "upstream tools/call" in line]
            assert leg.endswith("→ no answer (chain cancelled)"), leg
    finally:
        await asyncio.to_thread(proxy.stop)


def leg_of(app: ProxyTui) -> list[str]:
    return [
        m.method or ""
        for e in app.model.chains.values()
        for m in e.messages
        if m.side is Side.UPSTREAM and m.method == "tools/call"
    ]


def cancelled(app: ProxyTui) -> bool:
    calls = [e for e in app.model.chains.values() if e.summary.method == "tools/call"]
    return bool(calls) and calls[-1].summary.status is ChainStatus.CANCELLED


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_request_the_proxy_answered_with_the_server_down_is_not_shown_as_relayed() -> None:
    """The server never got it: the tree says the client sent it to the proxy, which answered."""
    upstream = f"http://127.0.0.1:{closed_port()}/mcp"
    proxy = Proxy(
        Settings(upstream=upstream, upstream_era="legacy", listen="127.0.0.1:0", admin_enabled=False)
    )
    feed = proxy.bus.subscribe("tui")
    await proxy.start()
    try:
        app = ProxyTui(BusFeed(feed), batch_delay=0.01)
        async with app.run_test(size=(160, 36)) as pilot, aiohttp.ClientSession() as http:
            body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
            headers = {"Accept": "application/json, text/event-stream"}
            async with http.post(proxy.endpoint(), json=body, headers=headers) as resp:
                assert resp.status == 502
            await wait_for(
                lambda: any(e.summary.ended for e in app.model.chains.values()), what="the refused chain"
            )
            await pilot.press("enter")
            await wait_for(lambda: len(tree_labels(app)) >= 2, what="the tree")

            lines = tree_labels(app)
    finally:
        await proxy.stop()
    assert any("[client→proxy] request initialize" in line for line in lines), lines
    assert any("[proxy→client] error" in line for line in lines), lines
    assert not [line for line in lines if "[client→server]" in line], lines
