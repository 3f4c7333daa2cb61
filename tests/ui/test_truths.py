"""The TUI tells the truth, driven with the pilot over the recorded tour (a real proxy's events).

The chain tree in the order messages happened, who sent each message (the proxy's own never shown
as relayed), the filter searching bodies, copy as curl and as JSON-RPC from the tree, and a
standing notice that covers nothing.
"""

from __future__ import annotations

from textual.widgets._toast import Toast

from proxy.demo.run import ComboResult, finished_notice
from proxy.flows.events import ChainStatus, Mode
from tests.ui.helpers import TOUR, ScriptedFeed, message, opened, wait_for
from ui.app import ProxyTui
from ui.feeds import CaptureFeed
from ui.model import ChainEntry
from ui.screens.copied import CopiedScreen
from ui.widgets.chain_tree import ChainTree
from ui.widgets.status_bar import StatusBar


def tree_lines(app: ProxyTui) -> list[str]:
    """Every label of the chain tree, depth first, as plain text."""
    tree = app.main.query_one(ChainTree)
    out: list[str] = []
    pending = list(tree.root.children)
    while pending:
        node = pending.pop(0)
        out.append(str(node.label))
        pending[:0] = node.children
    return out


def top_lines(app: ProxyTui) -> list[str]:
    return [str(node.label) for node in app.main.query_one(ChainTree).root.children]


def shown_entries(app: ProxyTui) -> list[ChainEntry]:
    table = app.main.table
    keys = [row.value for row in table.rows]
    return [e for k in keys if k is not None and (e := app.model.get(k)) is not None]


async def loaded(app: ProxyTui) -> None:
    await wait_for(lambda: app.feed_status is not None and app.feed_status.state == "ended", what="the tour")


async def test_the_tree_draws_the_initialized_notification_after_the_result_it_follows() -> None:
    app = ProxyTui(CaptureFeed(TOUR), batch_delay=0.01)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(app)
        await pilot.press("slash", *"method:initialize bridged", "enter", "escape", "enter")
        await pilot.pause()

        lines = top_lines(app)
        every = tree_lines(app)

    assert "[client→proxy] request initialize" in lines[0], lines
    assert "upstream server/discover" in lines[1], lines
    assert "[proxy→client] result ok" in lines[2], lines  # the proxy built it from server/discover
    assert "[client→proxy] notification notifications/initialized" in lines[3], lines
    assert len(lines) == 4
    assert "[proxy→client] http HTTP 202" in every[-1]  # the bridge's answer to the notification


async def test_what_the_proxy_made_is_labelled_as_the_proxys_and_nothing_bridged_as_relayed() -> None:
    app = ProxyTui(CaptureFeed(TOUR), batch_delay=0.01)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(app)
        await pilot.press("slash", *"bridged tool:greet", "enter", "escape", "enter")
        await pilot.pause()
        bridged = tree_lines(app)

        await pilot.press("escape", "slash", "ctrl+u", *"-bridged tool:greet", "enter", "escape", "enter")
        await pilot.pause()
        relayed = tree_lines(app)

    elicit = next(line for line in bridged if "request elicitation/create" in line)
    assert "[proxy→client]" in elicit
    assert any("[proxy→client] http HTTP 202" in line for line in bridged)
    assert any("[proxy→server] request tools/call" in line for line in bridged)
    assert any("[server→proxy] result input_required" in line for line in bridged)
    assert any("proxy asks client elicitation/create" in line for line in bridged)
    assert not [line for line in bridged if "[both]" in line or "[client→server]" in line]
    assert any("[client→server] request tools/call" in line for line in relayed)
    assert any("[server→client] result" in line for line in relayed)
    assert not [line for line in relayed if "proxy" in line]


async def test_a_proxy_answer_in_pass_through_is_the_proxys() -> None:
    refused = message(
        "c1",
        2,
        direction="to_client",
        channel="json",
        kind="error",
        method=None,
        note="answered by the proxy",
        body={"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "too large"}},
    )
    app = ProxyTui(ScriptedFeed(opened("c1"), message("c1", 1), refused), batch_delay=0.01)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(lambda: app.model.messages_seen == 2, what="both messages")
        await pilot.press("enter")
        await pilot.pause()

        lines = tree_lines(app)
    assert any("[client→server] request tools/call" in line for line in lines), lines
    assert any("[proxy→client] error" in line for line in lines), lines


async def test_the_filter_finds_chains_by_what_their_bodies_say() -> None:
    app = ProxyTui(CaptureFeed(TOUR), batch_delay=0.01)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(app)
        everything = len(shown_entries(app))

        await pilot.press("slash", *'body:"hello, ada"', "enter")
        await pilot.pause()
        by_body = shown_entries(app)

        await pilot.press("slash", "ctrl+u", *"Ada", "enter")
        await pilot.pause()
        by_text = shown_entries(app)

        await pilot.press("slash", "ctrl+u", *"body:nobody-says-this", "enter")
        await pilot.pause()
        none = shown_entries(app)

    assert by_body, "a chain whose result says 'Hello, Ada!'"
    assert len(by_body) < everything
    assert {e.summary.name for e in by_body} == {"greet"}
    assert all(any("Hello, Ada" in str(m.body) for m in e.messages) for e in by_body)
    assert {e.key for e in by_body} <= {e.key for e in by_text}  # free text covers bodies too
    assert "Ada" not in " ".join(str(e.summary.model_dump()) for e in by_text)  # found only by body
    assert none == []


async def test_c_and_shift_c_in_the_tree_copy_the_message_and_show_the_command() -> None:
    app = ProxyTui(CaptureFeed(TOUR), batch_delay=0.01)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(app)
        await pilot.press("slash", *"bridged tool:greet", "enter", "escape", "enter")
        await pilot.pause()
        tree = app.main.query_one(ChainTree)
        assert tree.has_focus

        await pilot.press("C")
        await pilot.pause()
        assert isinstance(app.screen, CopiedScreen)
        curl = app.clipboard
        shown = app.screen.text
        await pilot.press("escape", "c")
        await pilot.pause()
        jsonrpc = app.clipboard
        (session,) = [e.summary.session for e in app.model.chains.values() if e.summary.id == "c11"]
        (opener,) = [
            e.summary.id
            for e in app.model.chains.values()
            if e.summary.method == "initialize" and e.summary.session == session
        ]

    assert shown == curl
    assert f"answer to the session's initialize, chain {opener} (" in curl
    assert curl.startswith("# mcp-proxy: chain c11, message 1 (tools/call #4), sent to the proxy")
    assert "curl -sS -N -X POST http://127.0.0.1:8080/mcp" in curl
    assert "'mcp-session-id: '\"${MCP_SESSION_ID:?" in curl
    assert "<redacted" not in curl
    assert '"name":"greet"' in curl
    assert '"method": "tools/call"' in jsonrpc
    assert jsonrpc.startswith("{\n  ")


async def test_the_demos_finished_notice_stands_in_the_status_bar_and_no_toast_covers_it() -> None:
    app = ProxyTui(ScriptedFeed(opened("c1", status=ChainStatus.OK, mode=Mode.PASSTHROUGH)), batch_delay=0.01)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(lambda: bool(app.model.chains), what="the chain")
        app.announce(finished_notice([ComboResult("legacy", "legacy", "passthrough")]))
        await pilot.pause()

        bar = app.main.query_one(StatusBar)
        assert "demo finished: 0/4 combinations ok — q quits" in str(bar.content)
        toasts = list(app.screen.query(Toast))
        assert not [t for t in toasts if t.region.overlaps(bar.region)]
