"""Live rows agree with the chain: a real SDK client through a real proxy, watched in-process.

A row's Msgs, Bytes and Client columns count every message of its chain, those recorded after the
chain's last status change included (`notifications/initialized` and its 202 after `initialize`
answered, a request still running), as the admin API and a TUI attached later count them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from proxy.flows.events import ChainStatus
from proxy.runtime import Proxy
from tests.conftest import running_proxy
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.feeds import BusFeed
from ui.model import chain_key

pytestmark = pytest.mark.e2e


def row(app: ProxyTui, method: str) -> dict[str, str] | None:
    """The table row of the newest chain with this method, as the user reads it (by column)."""
    table = app.main.table
    found = [e for e in app.model.chains.values() if e.summary.method == method]
    if not found or found[-1].key not in table.rows:
        return None
    key = found[-1].key
    return {str(c.key.value): str(table.get_cell(key, c.key)) for c in table.columns.values()}


def proxy_counts(proxy: Proxy) -> dict[str, tuple[str, str]]:
    """Each chain's messages and client as the proxy's own store (the admin API) has them."""
    return {chain_key(c.summary): (str(c.summary.messages), c.summary.client_name or "") for c in proxy.store}


def table_counts(app: ProxyTui) -> dict[str, tuple[str, str]]:
    table = app.main.table
    return {
        str(key.value): (str(table.get_cell(key, "msgs")), str(table.get_cell(key, "client")))
        for key in table.rows
    }


async def while_it_runs(call: Awaitable[object], seen: Callable[[], bool], what: str) -> None:
    """Wait for `seen` to hold while `call` is still running, then let the call end."""
    watched = False

    async def watch() -> None:
        nonlocal watched
        await wait_for(seen, what=what)
        watched = True

    await asyncio.gather(call, watch())
    assert watched


async def test_rows_count_a_running_call_and_the_messages_after_a_final_answer(
    legacy_server: PeerServer,
) -> None:
    async with running_proxy(legacy_server.url) as proxy:
        app = ProxyTui(BusFeed(proxy.bus.subscribe("tui")), batch_delay=0.01)
        async with app.run_test(size=(160, 45)):
            await wait_for(lambda: app.main.table.wide, what="the wide columns")

            def counted() -> bool:
                running = row(app, "tools/call")
                return (
                    running is not None
                    and running["status"].startswith("pend")
                    and running["msgs"] == "1"
                    and running["bytes"] != "0B"
                )

            async with client_for(proxy.endpoint(), "legacy") as client:
                call = client.call_tool("session_ask_name_later", {"wait": 1.5})
                await while_it_runs(call, counted, "the running call's row to count its request")

            await wait_for(
                lambda: (
                    all(e.summary.status is not ChainStatus.PENDING for e in app.model.chains.values())
                    and table_counts(app) == proxy_counts(proxy)
                ),
                what="every row to agree with the proxy's chains",
            )
            initialize = row(app, "initialize")
            assert initialize is not None
            assert initialize["msgs"] == "4"  # request, result, notifications/initialized, its 202


async def test_a_running_2026_call_names_its_client_before_it_ends(modern_server: PeerServer) -> None:
    async with running_proxy(modern_server.url) as proxy:
        app = ProxyTui(BusFeed(proxy.bus.subscribe("tui")), batch_delay=0.01)
        async with app.run_test(size=(160, 45)):
            await wait_for(lambda: app.main.table.wide, what="the wide columns")

            def named() -> bool:
                running = row(app, "tools/call")
                return (
                    running is not None
                    and running["status"].startswith("pend")
                    and running["client"] == "mcp"  # from the request's _meta, no session to learn it from
                    and running["msgs"] == "1"
                )

            async with client_for(proxy.endpoint(), "2026-07-28") as client:
                call = client.call_tool("slow_progress", {"steps": 150})
                await while_it_runs(call, named, "the running call's row to name its client")
