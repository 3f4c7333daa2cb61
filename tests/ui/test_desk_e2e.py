"""End to end: the TUI's rule keys steering a real proxy, with a real SDK client and server.

The `mcp-proxy` command runs with its admin API and a token in front of the official Python SDK
server; the TUI attaches through the HTTP desk in a pilot, as `mcp-proxy tui --attach URL --token T`
runs it. What the keys do is checked by what the SDK client gets and what the proxy lists. One test
runs the TUI in-process with the proxy, as `mcp-proxy --upstream URL --tui` does, through the desk
`proxy.cli_tui` wires.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from textual.coordinate import Coordinate
from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from proxy.cli_tui import in_process_tui
from proxy.config import Settings
from proxy.runtime import Proxy
from tests.e2e.recording_upstream import recording_upstream
from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.desk_http import HttpDesk
from ui.feeds import AttachFeed
from ui.screens.faults import FaultScreen
from ui.screens.held_editor import HeldEditor
from ui.screens.intercepts import InterceptScreen
from ui.screens.rule_prompt import RulePrompt

pytestmark = pytest.mark.e2e

TOKEN = "tui-desk-e2e-token"


async def call(
    url: str, tool: str, arguments: dict[str, Any], mode: str = "legacy", log: CallbackLog | None = None
) -> dict[str, Any]:
    """One tool call by a fresh SDK client: `{"result": ...}` or the `{"error": ...}` it got."""
    async with client_for(url, mode, log=log) as client:
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as exc:
            return {"error": {"code": exc.code, "message": exc.message}}
        return {"result": normalize_tool_result(result)}


@asynccontextmanager
async def attached(
    upstream: str, **settings: object
) -> AsyncIterator[tuple[ProxyProcess, ProxyTui, Pilot[None]]]:
    """`mcp-proxy --upstream URL` with an admin token, and the TUI attached to it over HTTP."""
    env = clean_env(**settings_env(upstream=upstream, admin_token=TOKEN, **settings))
    # Started and stopped off the loop: an upstream served from this loop answers the proxy meanwhile.
    proxy = await asyncio.to_thread(ProxyProcess(env).start)
    try:
        feed = AttachFeed(proxy.admin, TOKEN, backoff=(0.05,))
        app = ProxyTui(feed, batch_delay=0.01, desk=HttpDesk(proxy.admin, TOKEN))
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(lambda: bool(app.feed_status and app.feed_status.state == "live"), what="live")
            yield proxy, app, pilot
    finally:
        await asyncio.to_thread(proxy.stop)


async def intercept(app: ProxyTui, pilot: Pilot[None], rule: str) -> None:
    """`i`, the rule, Enter; back once the proxy lists it."""
    await pilot.press("i")
    await wait_for(lambda: isinstance(app.screen, RulePrompt), what="the intercept prompt")
    app.screen.query_one(Input).value = rule
    await pilot.press("enter")
    await wait_for(lambda: bool(app.intercepts.rules), what="the intercept rule in the TUI")


async def held_screen(app: ProxyTui, pilot: Pilot[None]) -> InterceptScreen:
    """Wait until the TUI shows a held message, then open the intercept screen on it."""
    await wait_for(lambda: bool(app.intercepts.held), what="a held message in the TUI", seconds=15)
    if not isinstance(app.screen, InterceptScreen):
        await pilot.press("I")
        await wait_for(lambda: isinstance(app.screen, InterceptScreen), what="the intercept screen")
    screen = app.screen
    assert isinstance(screen, InterceptScreen)
    await wait_for(lambda: screen.held_table.row_count == 1, what="the held row")
    return screen


async def edit_and_send(app: ProxyTui, pilot: Pilot[None], key: str, message: dict[str, Any]) -> HeldEditor:
    """`e` (or `a`), the editor's text replaced by `message`, Ctrl+S; the editor."""
    await pilot.press(key)
    await wait_for(lambda: isinstance(app.screen, HeldEditor), what="the editor")
    editor = app.screen
    assert isinstance(editor, HeldEditor)
    editor.query_one(TextArea).load_text(json.dumps(message))
    await pilot.press("ctrl+s")
    return editor


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

            await intercept(app, pilot, "tool:add")
            async with asyncio.TaskGroup() as calls:
                pending = calls.create_task(call(proxy.endpoint(), "add", {"a": 2, "b": 3}))
                await held_screen(app, pilot)
                assert [h["kind"] for h in proxy.intercepts.listing()["held"]] == ["request"]
                await pilot.press("f")  # on its way up; without dir: the rule holds the answer too
                await wait_for(
                    lambda: [(h.kind, h.direction) for h in app.intercepts.held] == [("response", "server")],
                    what="the server's answer held",
                )
                await held_screen(app, pilot)
                await pilot.press("f")
                assert (await pending)["result"]["structuredContent"] == {"result": 5}
    finally:
        feed.close()
        await proxy.stop()


async def test_held_calls_are_forwarded_edited_dropped_answered_and_forwarded_from_the_attached_tui(
    legacy_server: PeerServer,
) -> None:
    async with attached(legacy_server.url) as (proxy, app, pilot), asyncio.TaskGroup() as calls:
        await intercept(app, pilot, "tool:echo dir:client timeout=30s")
        (rule,) = (await admin_json(proxy.admin + "/api/intercepts", TOKEN))["rules"]
        assert (rule["match"], rule["timeout_s"]) == ("tool:echo dir:client", 30.0)

        edited = calls.create_task(call(proxy.endpoint(), "echo", {"text": "one"}))
        screen = await held_screen(app, pilot)
        (held,) = app.intercepts.held
        assert (held.kind, held.method, held.direction) == ("request", "tools/call", "client")
        message = json.loads(json.dumps(held.message))
        message["params"]["arguments"]["text"] = "edited by the tui"
        await edit_and_send(app, pilot, "e", message)
        assert (await edited)["result"]["content"] == ["edited by the tui"]

        await wait_for(lambda: app.screen is screen, what="the editor to close")
        dropped = calls.create_task(call(proxy.endpoint(), "echo", {"text": "two"}))
        await held_screen(app, pilot)
        await pilot.press("d")
        error = (await dropped)["error"]
        assert error["code"] == -32000, error
        assert "intercept (i1) dropped this request" in error["message"]
        assert "server never saw it" in error["message"]

        answered = calls.create_task(call(proxy.endpoint(), "echo", {"text": "three"}))
        await held_screen(app, pilot)
        (held,) = app.intercepts.held
        result = {"content": [{"type": "text", "text": "answered"}]}
        answer = {"jsonrpc": "2.0", "id": held.jsonrpc_id, "result": result}
        await edit_and_send(app, pilot, "a", answer)
        assert (await answered)["result"]["content"] == ["answered"]

        await wait_for(lambda: app.screen is screen, what="the editor to close")
        forwarded = calls.create_task(call(proxy.endpoint(), "echo", {"text": "four"}))
        await held_screen(app, pilot)
        await pilot.press("f")
        assert (await forwarded)["result"]["content"] == ["four"]
        await wait_for(lambda: "held" not in str(app.main.query_one("#status").content), what="no badge")


async def test_an_open_editor_says_the_client_left_when_its_held_call_was_abandoned() -> None:
    """The client gives up while a person edits its held call: the editor says the proxy sent it
    nowhere, not that a timeout forwarded it (the deadline passing later changes nothing)."""
    async with (
        recording_upstream("legacy") as fake,
        attached(fake.url("/mcp")) as (proxy, app, pilot),
        asyncio.TaskGroup() as calls,
    ):
        await intercept(app, pilot, "tool:echo dir:client timeout=3s")
        leaving = calls.create_task(call(proxy.endpoint(), "echo", {"text": "abandon me"}))
        await held_screen(app, pilot)
        (held,) = app.intercepts.held
        await pilot.press("e")
        await wait_for(lambda: isinstance(app.screen, HeldEditor), what="the editor")
        editor = app.screen
        assert isinstance(editor, HeldEditor)

        leaving.cancel()  # the client leaves: its connection closes while the call is held
        await asyncio.gather(leaving, return_exceptions=True)
        await wait_for(
            lambda: "abandoned at" in editor.deadline_text, what="the editor to say the client left"
        )
        assert "sent it nowhere" in editor.deadline_text
        await asyncio.sleep(held.deadline - held.held_at + 0.5)  # past the rule's deadline
        assert "abandoned at" in editor.deadline_text
        assert "timeout" not in editor.deadline_text

        listing = await admin_json(proxy.admin + "/api/intercepts", TOKEN)
        assert [(r["id"], r["decision"], r["by"]) for r in listing["released"]] == [
            (held.id, "abandoned", "client")
        ]
    assert not [h for h in fake.heads if h.method == "tools/call"]


async def test_an_invalid_edit_is_refused_in_the_editor_and_the_upstream_never_sees_it() -> None:
    async with (
        recording_upstream("legacy") as fake,
        attached(fake.url("/mcp"), max_body_bytes=4096) as (proxy, app, pilot),
        asyncio.TaskGroup() as calls,
    ):
        await intercept(app, pilot, "tool:echo dir:client")
        pending = calls.create_task(call(proxy.endpoint(), "echo", {"text": "original"}))
        screen = await held_screen(app, pilot)
        (held,) = app.intercepts.held

        other_id = {**held.message, "id": 999}
        editor = await edit_and_send(app, pilot, "e", other_id)
        await wait_for(lambda: "keeps the held message's id" in editor.error, what="the editor's refusal")

        too_big = json.loads(json.dumps(held.message))
        too_big["params"]["arguments"]["text"] = "x" * 5000
        editor.query_one(TextArea).load_text(json.dumps(too_big))
        await pilot.press("ctrl+s")  # valid JSON-RPC to the editor; the proxy's own limit refuses it
        await wait_for(lambda: "4096-byte body limit" in editor.error, what="the proxy's refusal")
        assert "(HTTP 400)" in editor.error
        assert app.screen is editor

        await pilot.press("escape")
        await wait_for(lambda: app.screen is screen, what="back to the held list")
        await pilot.press("f")
        assert (await pending)["result"]["content"] == ["echoed"]
    sent = [json.loads(h.body) for h in fake.heads if h.method == "tools/call"]
    assert len(sent) == 1, sent
    assert sent[0]["params"]["arguments"] == {"text": "original"}
    assert sent[0]["id"] == held.jsonrpc_id


async def test_a_bridge_made_elicitation_held_in_the_tui_is_answered_in_the_clients_place(
    modern_server: PeerServer,
) -> None:
    # A legacy client, a 2026-07-28 server: the bridge asks the client with elicitation/create.
    log = CallbackLog()
    async with attached(modern_server.url) as (proxy, app, pilot), asyncio.TaskGroup() as calls:
        await intercept(app, pilot, "method:elicitation/create dir:server")
        pending = calls.create_task(call(proxy.endpoint(), "ask_name", {}, log=log))
        screen = await held_screen(app, pilot)
        (held,) = app.intercepts.held
        assert (held.kind, held.method, held.mode) == ("request", "elicitation/create", "legacy_to_mrtr")
        assert str(held_cell(screen, "dir")) == "server→client"
        accept = {"action": "accept", "content": {"name": "tui"}}
        answer = {"jsonrpc": "2.0", "id": held.jsonrpc_id, "result": accept}
        await edit_and_send(app, pilot, "a", answer)
        assert (await pending)["result"]["content"] == ["Hello, tui!"]
    assert log.callbacks == []  # the client was never asked: the TUI answered in its place


def held_cell(screen: InterceptScreen, column: str) -> object:
    """The first held message's cell in `column` (by key, whatever the columns' order)."""
    table = screen.held_table
    return table.get_cell_at(Coordinate(0, table.get_column_index(column)))
