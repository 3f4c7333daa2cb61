"""End to end: the TUI's rule keys steering a real proxy, with a real SDK client and server.

The `mcp-proxy` command runs with its admin API and a token in front of the official Python SDK
server; the TUI attaches through the HTTP desk in a pilot, as `mcp-proxy tui --attach URL --token T`
runs it. What the keys do is checked by what the SDK client gets and what the proxy lists. One test
runs the TUI in-process with the proxy, as `mcp-proxy --upstream URL --tui` does, through the desk
`proxy.cli_tui` wires.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from textual.pilot import Pilot
from textual.widgets import Input

from proxy.cli_tui import in_process_tui
from proxy.config import Settings
from proxy.runtime import Proxy
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.desk_http import HttpDesk
from ui.feeds import AttachFeed
from ui.screens.faults import FaultScreen
from ui.screens.rule_prompt import RulePrompt

pytestmark = pytest.mark.e2e

TOKEN = "tui-desk-e2e-token"


async def call(url: str, tool: str, arguments: dict[str, Any], mode: str = "legacy") -> dict[str, Any]:
    """One tool call by a fresh SDK client: `{"result": ...}` or the `{"error": ...}` it got."""
    async with client_for(url, mode) as client:
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as exc:
            return {"error": {"code": exc.code, "message": exc.message}}
        return {"result": normalize_tool_result(result)}


@asynccontextmanager
async def attached(upstream: str) -> AsyncIterator[tuple[ProxyProcess, ProxyTui, Pilot[None]]]:
    """`mcp-proxy --upstream URL` with an admin token, and the TUI attached to it over HTTP."""
    env = clean_env(**settings_env(upstream=upstream, admin_token=TOKEN))
    with ProxyProcess(env) as proxy:
        feed = AttachFeed(proxy.admin, TOKEN, backoff=(0.05,))
        app = ProxyTui(feed, batch_delay=0.01, desk=HttpDesk(proxy.admin, TOKEN))
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(lambda: bool(app.feed_status and app.feed_status.state == "live"), what="live")
            yield proxy, app, pilot


async def add_fault(app: ProxyTui, pilot: Pilot[None], rule: str) -> RulePrompt:
    """On the fault screen: `a`, the rule, Enter; the prompt (closed when the proxy took the rule)."""
    await pilot.press("a")
    await wait_for(lambda: isinstance(app.screen, RulePrompt), what="the rule prompt")
    prompt = app.screen
    assert isinstance(prompt, RulePrompt)
    prompt.query_one(Input).value = rule
    await pilot.press("enter")
    return prompt


async def test_a_fault_rule_added_from_the_attached_tui_acts_on_a_real_call(
    legacy_server: PeerServer,
) -> None:
    async with attached(legacy_server.url) as (proxy, app, pilot):
        await pilot.press("F")
        await wait_for(lambda: isinstance(app.screen, FaultScreen), what="the fault screen")
        screen = app.screen
        assert isinstance(screen, FaultScreen)

        prompt = await add_fault(app, pilot, "tool:echo => cut_after=two")
        await wait_for(lambda: "cut_after= is a number of SSE events" in prompt.error, what="the refusal")
        assert "(HTTP 400)" in prompt.error
        assert (await admin_json(proxy.admin + "/api/faults", TOKEN))["rules"] == []

        await add_fault(app, pilot, "tool:echo => error=-32050:from the tui")
        await wait_for(lambda: app.screen is screen and screen.table.row_count == 1, what="the rule's row")

        refused = await call(proxy.endpoint(), "echo", {"text": "hi"})
        assert refused == {"error": {"code": -32050, "message": "from the tui"}}
        add = await call(proxy.endpoint(), "add", {"a": 1, "b": 2})  # the rule picks echo only
        assert "result" in add, add
        await wait_for(lambda: screen.table.get_row_at(0)[2] == "1", what="the injected count", seconds=6)

        await pilot.press("d")
        await wait_for(lambda: screen.table.row_count == 0, what="the rule to go")
        assert (await admin_json(proxy.admin + "/api/faults", TOKEN))["rules"] == []
        echo = await call(proxy.endpoint(), "echo", {"text": "hi"})
        assert echo["result"]["content"] == ["hi"]


async def test_the_in_process_tui_steers_its_own_proxy(legacy_server: PeerServer) -> None:
    proxy = Proxy(Settings(upstream=legacy_server.url, listen="127.0.0.1:0", admin_enabled=False))
    feed = proxy.bus.subscribe("tui")
    await proxy.start()
    try:
        app = in_process_tui(proxy, feed)
        app.batch_delay = 0.01
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("F")
            await wait_for(lambda: isinstance(app.screen, FaultScreen), what="the fault screen")
            prompt = await add_fault(app, pilot, "tool:echo => nonsense")
            await wait_for(lambda: "nonsense" in prompt.error, what="the refusal")
            await add_fault(app, pilot, "tool:echo => error=-32051")
            await wait_for(lambda: isinstance(app.screen, FaultScreen), what="the prompt to close")
            assert [rule["rule"] for rule in proxy.faults.gate.listing()] == ["tool:echo => error=-32051"]
            refused = await call(proxy.endpoint(), "echo", {"text": "hi"})
            assert refused["error"]["code"] == -32051, refused
    finally:
        feed.close()
        await proxy.stop()
