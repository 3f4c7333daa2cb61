"""The TUI's `r`: the chain under the cursor replayed against a live server, shown beside its recording.

A real SDK client goes through a real in-process proxy watched by the TUI (as `mcp-proxy --upstream
URL --tui` runs); `r` on its chain replays it against the same SDK server and against the server of
the other era (the chain's session handshake taken from the chains the TUI holds), and the replay
screen shows both sides with how it went. The screen's drawing marks the differing message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from proxy.config import Settings
from proxy.flows.events import ChainStatus, Channel, Direction, MessageRecord, ProxyInfo, Side
from proxy.record.replay_compare import Difference
from proxy.record.replay_outcome import ChainOutcome
from proxy.record.replay_plan import ChainPlan
from proxy.replay.runner import for_tui
from proxy.runtime import Proxy
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.ui.helpers import ScriptedFeed, finished, info, message, opened, wait_for
from ui.app import ProxyTui
from ui.feeds import BusFeed
from ui.screens.confirm_replay import ConfirmReplay
from ui.screens.replay import ReplayScreen, side_text


@asynccontextmanager
async def watched(upstream: str) -> AsyncIterator[tuple[Proxy, ProxyTui]]:
    proxy = Proxy(Settings(upstream=upstream, listen="127.0.0.1:0", admin_enabled=False))
    feed = proxy.bus.subscribe("tui")
    await proxy.start()
    try:
        yield proxy, ProxyTui(BusFeed(feed), batch_delay=0.01, replayer=for_tui(None))
    finally:
        await proxy.stop()


def done(app: ProxyTui, name: str) -> bool:
    return any(
        e.summary.name == name and e.summary.status is ChainStatus.OK for e in app.model.chains.values()
    )


@pytest.mark.e2e
@pytest.mark.parametrize("other_era", [False, True])
async def test_r_replays_the_chain_under_the_cursor_and_shows_both_sides(
    legacy_server: PeerServer, modern_server: PeerServer, other_era: bool
) -> None:
    async with watched(legacy_server.url) as (proxy, app):
        if other_era:
            app.replayer = for_tui(modern_server.url)
        async with app.run_test(size=(140, 40)) as pilot:
            await run_scenario(proxy.endpoint(), "legacy", "ask_name")
            await wait_for(lambda: done(app, "ask_name"), what="the ask_name chain")
            await pilot.press("slash", *"tool:ask_name", "enter", "escape")
            await pilot.pause()
            await pilot.press("r")
            await wait_for(lambda: isinstance(app.screen, ConfirmReplay), what="the question")
            await pilot.press("y")
            await wait_for(lambda: isinstance(app.screen, ReplayScreen), what="the replay screen", seconds=20)

            screen = app.screen
            assert isinstance(screen, ReplayScreen)
            outcome = screen.outcome
            assert outcome.status == "same", outcome.line()
            assert [r.method for r in outcome.recorded if r.kind == "request"][:2] == [
                "tools/call",
                "elicitation/create",
            ]
            assert outcome.replayed_chain is not None
            title = str(screen.query_one("#replay-title").render())
            assert "same" in title
            await pilot.press("escape")
            assert not isinstance(app.screen, ReplayScreen)


def record(number: int, body: dict[str, object]) -> MessageRecord:
    return MessageRecord(
        seq=number,
        ts=0.0,
        side=Side.BOTH,
        direction=Direction.TO_CLIENT if "result" in body else Direction.TO_SERVER,
        channel=Channel.POST,
        exchange="x1",
        kind="result" if "result" in body else "request",
        jsonrpc_id=1,
        method=str(body["method"]) if "method" in body else None,
        body=body,
    )


def test_the_differing_message_is_marked_on_both_sides() -> None:
    request = record(1, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add"}})
    old = record(2, {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "5"}]}})
    outcome = ChainOutcome(
        "r3",
        "tools/call add",
        "differs",
        difference=Difference(2, "tools/call result", "result.content[0].text", "5", "2 + 3 = 5"),
        recorded=[request, old],
    )

    text = side_text("recorded r3", outcome.recorded, 2)

    assert "1. tools/call request" in text.plain
    assert "2. tools/call result" in text.plain
    marked = [text.plain[s.start : s.end] for s in text.spans if "red" in str(s.style)]
    assert any(part.startswith("2. tools/call result") for part in marked)
    assert not any(part.startswith("1.") for part in marked)


class CountingReplayer:
    """A replayer double that sends nothing: it counts the replays asked of it."""

    def __init__(self) -> None:
        self.replayed: list[str] = []
        self.recorded: list[ProxyInfo | None] = []

    def target(self, recorded: ProxyInfo | None) -> str | None:
        return recorded.upstream if recorded is not None else None

    async def __call__(
        self, plan: ChainPlan, handshake: ChainPlan | None, recorded: ProxyInfo | None
    ) -> ChainOutcome:
        self.replayed.append(plan.chain)
        self.recorded.append(recorded)
        return ChainOutcome(plan.chain, plan.headline(), "same", replayed_chain="c9")


async def test_r_asks_naming_the_call_and_the_upstream_and_sends_only_on_yes() -> None:
    result = {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}
    reply = message("c1", 2, direction=Direction.TO_CLIENT, kind="result", method=None, body=result)
    told = info(upstream="http://127.0.0.1:8000/mcp").model_copy(
        update={"upstream_era": "legacy", "upstream_era_forced": True}
    )
    feed = ScriptedFeed(told, opened("c1"), message("c1", 1), reply)
    feed.push(finished("c1"))
    replayer = CountingReplayer()
    app = ProxyTui(feed, batch_delay=0.01, replayer=replayer)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.main.table.row_count == 1, what="the chain's row")
        for cancel in ("escape", "n"):
            await pilot.press("r")
            await wait_for(lambda: isinstance(app.screen, ConfirmReplay), what="the question")
            asked = str(app.screen.query_one("#confirm-text").render())
            assert "replay tools/call echo (chain c1)" in asked
            assert "against http://127.0.0.1:8000/mcp?" in asked
            await pilot.press(cancel)
            await wait_for(lambda: app.screen is app.main, what="the question to close")
        assert replayer.replayed == []  # nothing was sent

        await pilot.press("r")
        await wait_for(lambda: isinstance(app.screen, ConfirmReplay), what="the question")
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, ReplayScreen), what="the replay screen")
        assert replayer.replayed == ["c1"]
        spoken = replayer.recorded[0]  # the era the recording proxy was told goes to the replay
        assert spoken is not None
        assert (spoken.upstream_era, spoken.upstream_era_forced) == ("legacy", True)
