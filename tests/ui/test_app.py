"""The real app driven by a scripted feed: messages first, then the widgets' state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.message import Message
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Input, Static

from proxy.flows.events import ChainStatus, Direction, Lagged, Mode, SessionChanged, Side
from tests.ui.helpers import BASE, ScriptedFeed, bridged, finished, info, message, opened, wait_for
from ui.app import ProxyTui
from ui.feeds import FeedStatus
from ui.messages import ChainChosen, EventsArrived, FilterChanged, FollowChanged, MessageChosen
from ui.screens.help import HelpScreen
from ui.screens.message import MessageScreen
from ui.widgets.chain_table import ChainTable
from ui.widgets.chain_tree import ChainTree
from ui.widgets.status_bar import StatusBar


class Harness:
    """The running app, its pilot, its feed, and every message it handled."""

    def __init__(self, app: ProxyTui, pilot: Pilot[None], feed: ScriptedFeed, seen: list[Message]) -> None:
        self.app, self.pilot, self.feed, self.seen = app, pilot, feed, seen

    @property
    def table(self) -> ChainTable:
        return self.app.main.query_one(ChainTable)

    @property
    def tree(self) -> ChainTree:
        return self.app.main.query_one(ChainTree)

    def status(self) -> str:
        return str(self.app.main.query_one(StatusBar).content)

    def seen_of(self, kind: type[Message]) -> list[Message]:
        """Messages of one kind, each once (a bubbling message is seen at every node it visits)."""
        unique: dict[int, Message] = {}
        for m in self.seen:
            if isinstance(m, kind):
                unique.setdefault(id(m), m)
        return list(unique.values())

    async def push(self, *items: object) -> None:
        """Deliver items and wait until the app applied them."""
        before = self.app.model.events_applied
        events = sum(1 for i in items if not isinstance(i, FeedStatus))
        self.feed.push(*items)  # type: ignore[arg-type]
        await wait_for(lambda: self.app.model.events_applied >= before + events, what="the batch to apply")
        await self.pilot.pause()


@asynccontextmanager
async def running(
    *items: object, size: tuple[int, int] = (80, 24), tmp: Path | None = None
) -> AsyncIterator[Harness]:
    feed = ScriptedFeed()
    seen: list[Message] = []
    app = ProxyTui(feed, batch_delay=0.01, save_dir=tmp)
    async with app.run_test(size=size, message_hook=seen.append) as pilot:
        harness = Harness(app, pilot, feed, seen)
        if items:
            await harness.push(*items)
        yield harness


async def test_a_chain_appears_as_a_row_from_one_coalesced_batch() -> None:
    async with running() as h:
        await h.push(info(), opened("c1"), message("c1", 1), finished("c1"))

        (batch,) = h.seen_of(EventsArrived)
        assert len(batch.events) == 4  # type: ignore[attr-defined]
        assert h.table.row_count == 1
        assert "1 chains 1 msgs" in h.status()


async def test_enter_on_a_chain_shows_its_tree() -> None:
    async with running(opened("c1"), message("c1", 1), finished("c1")) as h:
        await h.pilot.press("enter")

        assert h.seen_of(ChainChosen)
        assert h.tree.has_focus
        assert h.tree.chain_key == h.table.selected_key
        assert "tools/call echo" in str(h.tree.root.label)
        assert len(h.tree.root.children) == 1


async def test_a_filter_hides_the_rows_it_does_not_match() -> None:
    chains = [opened("c1"), finished("c1"), opened("c2", started=BASE + 1)]
    failed = finished("c2", status=ChainStatus.ERROR, started=BASE + 1)
    async with running(*chains, failed) as h:
        await h.pilot.press("slash", *"status:error", "enter")

        (change,) = h.seen_of(FilterChanged)
        assert change.text == "status:error"  # type: ignore[attr-defined]
        assert h.table.row_count == 1
        assert h.table.selected_key is not None
        assert h.table.selected_key.startswith("c2@")


async def test_a_bad_filter_hides_nothing_and_says_why() -> None:
    async with running(opened("c1"), opened("c2", started=BASE + 1)) as h:
        await h.pilot.press("slash", *"colour:red", "enter")

        assert h.table.row_count == 2
        assert "unknown field 'colour'" in h.status()
        assert "still showing every chain" in h.status()


async def test_a_bad_filter_keeps_the_view_of_the_filter_before_it() -> None:
    chains = [opened("c1"), finished("c1"), opened("c2", started=BASE + 1)]
    failed = finished("c2", status=ChainStatus.ERROR, started=BASE + 1)
    async with running(*chains, failed, size=(160, 24)) as h:
        await h.pilot.press("slash", *"status:error", "enter")
        assert h.table.row_count == 1

        await h.pilot.press("slash", *"bogus:thing", "enter")

        assert h.table.row_count == 1  # not every chain, which would read as "all of them matched"
        assert h.table.selected_key is not None
        assert h.table.selected_key.startswith("c2@")
        assert "unknown field 'bogus'" in h.status()
        assert "still showing the filter 'status:error'" in h.status()

        await h.pilot.press("slash", *"-status:error", "enter")
        assert "bogus" not in h.status()
        assert h.table.row_count == 1
        assert h.table.selected_key is not None
        assert h.table.selected_key.startswith("c1@")


async def test_pause_stops_updates_until_resumed() -> None:
    async with running(opened("c1")) as h:
        await h.pilot.press("p")
        await h.push(opened("c2", started=BASE + 1), opened("c3", started=BASE + 2))

        assert h.table.row_count == 1
        assert "PAUSED +2" in h.status()

        await h.pilot.press("p")
        assert h.table.row_count == 3
        assert "PAUSED" not in h.status()


async def test_the_lag_marker_appears_when_the_feed_dropped_events() -> None:
    async with running(opened("c1")) as h:
        await h.push(Lagged(dropped=5), opened("c2", started=BASE + 1))

        assert "lagged 5" in h.status()


async def test_a_dropped_feed_shows_disconnected_then_live_again() -> None:
    async with running() as h:
        h.feed.push(FeedStatus("reconnecting", "cannot connect", retry_in=1.0))
        await wait_for(lambda: "disconnected" in h.status(), what="the disconnected marker")
        assert "retry in 1s" in h.status()

        h.feed.push(FeedStatus("live", "http://127.0.0.1:9901"))
        await wait_for(lambda: "● live" in h.status(), what="the live marker")


async def test_help_opens_and_closes() -> None:
    async with running() as h:
        await h.pilot.press("question_mark")
        assert isinstance(h.app.screen, HelpScreen)

        await h.pilot.press("escape")
        assert h.app.screen is h.app.main


async def test_a_message_opens_with_both_sides_and_can_be_copied_and_saved(tmp_path: Path) -> None:
    client = message("c1", 1, side="client", body={"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
    upstream = message("c1", 2, side="upstream", exchange="leg-1", jsonrpc_id="leg-1", body={"id": "leg-1"})
    async with running(bridged("c1"), client, upstream, size=(120, 36), tmp=tmp_path) as h:
        await h.pilot.press("enter", "enter")  # open the chain, then its first message

        (chosen,) = h.seen_of(MessageChosen)
        assert chosen.seq == 1  # type: ignore[attr-defined]
        screen = h.app.screen
        assert isinstance(screen, MessageScreen)
        assert screen.query_one("#other-side").display

        await h.pilot.press("c", "w")
        assert '"method": "tools/call"' in h.app.clipboard
        saved = tmp_path / "mcp-proxy-c1-1.json"
        assert '"side": "client"' in saved.read_text()

        await h.pilot.press("right_square_bracket")
        assert screen.seq == 2
        await h.pilot.press("escape")
        assert h.app.screen is h.app.main


async def test_the_sessions_view_lists_who_holds_which_session() -> None:
    opened_session = SessionChanged(ts=BASE, session="s-1", state="opened", client_name="claude")
    async with running(opened_session) as h:
        await h.pilot.press("s")

        assert h.app.main.query_one(ContentSwitcher).current == "sessions"
        sessions = h.app.main.sessions
        assert sessions.row_count == 1
        assert [str(cell) for cell in sessions.get_row_at(0)[:2]] == ["s-1", "claude"]

        await h.pilot.press("s")
        assert h.app.main.query_one(ContentSwitcher).current == "tree"


COLUMN_KEYS = ("session", "client", "side", "principal", "caps")


async def test_the_sessions_view_shows_an_upstream_session_with_its_principal_and_capabilities() -> None:
    upstream = SessionChanged(
        ts=BASE,
        session="upstream-1",
        state="opened",
        side=Side.UPSTREAM,
        principal="0123456789abcdef",
        capabilities="sampling roots",
    )
    async with running(upstream) as h:
        await h.pilot.press("s")

        table = h.app.main.sessions
        row = [table.get_cell_at(Coordinate(0, table.get_column_index(key))) for key in COLUMN_KEYS]
        assert [str(cell) for cell in row] == [
            "upstream-1",
            "",
            "upstream",
            "0123456789abcdef",
            "sampling roots",
        ]


async def test_follow_rides_the_newest_chain_until_the_user_scrolls_back() -> None:
    async with running(opened("c1"), opened("c2", started=BASE + 1)) as h:
        assert h.table.cursor_row == 1

        await h.pilot.press("up")
        assert [m.follow for m in h.seen_of(FollowChanged)] == [False]  # type: ignore[attr-defined]
        await h.push(opened("c3", started=BASE + 2))
        assert h.table.cursor_row == 0  # stayed on c1, no jump

        await h.pilot.press("f")
        assert h.table.cursor_row == 2


async def test_clear_empties_the_view() -> None:
    async with running(opened("c1"), opened("c2", started=BASE + 1)) as h:
        await h.pilot.press("x")

        assert h.table.row_count == 0
        assert h.tree.chain_key is None
        assert "0 chains" in h.status()


async def test_an_update_changes_the_row_in_place() -> None:
    async with running(opened("c1"), opened("c2", started=BASE + 1)) as h:
        await h.pilot.press("up")
        await h.push(finished("c2", status=ChainStatus.ERROR, started=BASE + 1, ms=1500))

        assert h.table.cursor_row == 0
        assert [str(c) for c in h.table.get_row_at(1)][-2:] == ["error", "1.50s"]


async def test_a_batch_arriving_while_the_widgets_are_being_removed_is_held_not_fatal() -> None:
    # The shutdown removes the screen's widgets one by one while batches still arrive: here the tree
    # goes first and the chain list stays, the order the app's own shutdown has been seen to take.
    async with running(info(), opened("c1")) as h:
        await h.tree.remove()
        await h.push(message("c1", 1), opened("c2"))

        assert len(h.app.model.chains) == 2
        assert h.table.row_count == 1  # held: the list did not move without the tree


async def test_enter_in_the_filter_applies_it_and_gives_the_keys_back_to_the_chain_list() -> None:
    chains = [opened("c1"), finished("c1"), opened("c2", started=BASE + 1)]
    async with running(*chains) as h:
        await h.pilot.press("slash", *"status:ok", "enter")

        assert h.table.has_focus
        assert h.table.row_count == 1
        await h.pilot.press("slash")  # a second `/` opens the filter again, it types nothing
        bar = h.app.main.query_one("#filter", Input)
        assert bar.has_focus
        assert bar.value == "status:ok"
        await h.pilot.press("escape")
        assert h.table.has_focus


CONTROLS = "\x1b\x07\x9b\u202e"
"""What a terminal would obey or reorder text by, had it reached the screen raw."""


def shown(widget: Widget) -> str:
    """The text of every line `widget` renders, as the compositor gets it (segments joined)."""
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, *widget.size)))


async def test_what_a_client_or_upstream_chose_is_shown_escaped_in_the_table_tree_and_message_view() -> None:
    hostile_id = "7\x1b[5m"
    chain = opened(
        "c1",
        client_name="c\x1b]2;T\x07",
        name="t\x1b[41mX",
        status=ChainStatus.ERROR,
        error="up\u202eevil",
    )
    call = message(
        "c1", 1, jsonrpc_id=hostile_id, body={"jsonrpc": "2.0", "id": hostile_id, "note": "b\x9b2J"}
    )
    error = {"code": -32000, "message": "boom\x1b]0;PWNED\x07\u202eevil"}
    answer = message(
        "c1",
        2,
        direction=Direction.TO_CLIENT,
        kind="error",
        method=None,
        jsonrpc_id=hostile_id,
        body={"jsonrpc": "2.0", "id": hostile_id, "error": error},
    )
    async with running(chain, call, answer, size=(200, 40)) as h:
        table = shown(h.table)
        assert "c\\x1b]2;T\\x07" in table
        assert "t\\x1b[41mX" in table

        await h.pilot.press("enter")
        tree = shown(h.tree)
        assert "tools/call t\\x1b[41mX" in tree
        assert "up\\u202eevil" in tree
        assert "request tools/call #7\\x1b[5m" in tree
        assert "error -32000 boom\\x1b]0;PWNED\\x07\\u202eevil #7\\x1b[5m" in tree

        await h.pilot.press("enter")
        assert isinstance(h.app.screen, MessageScreen)
        view = shown(h.app.screen.query_one("#this-body", Static))
        assert '"note": "b\\x9b2J"' in view
        assert "7\\x1b[5m" in view
        for text in (table, tree, view):
            assert not any(char in text for char in CONTROLS), text


async def test_a_name_that_looks_like_markup_is_shown_as_written_and_stops_nothing() -> None:
    names = {"client_name": "[/x]", "name": "[link=u]t[/link]"}
    chain = "[/c]"
    events = (opened(chain, **names), message(chain, 1), finished(chain, **names))
    async with running(*events, size=(200, 20)) as h:
        table = shown(h.table)
        assert "[/c]" in table
        assert "[/x]" in table
        assert "[link=u]t[/link]" in table
        assert not [
            segment
            for strip in h.table.render_lines(Region(0, 0, *h.table.size))
            for segment in strip
            if segment.style and segment.style.link
        ]


async def test_an_ended_chain_whose_answer_the_view_let_go_says_it_is_not_kept_not_that_none_came() -> None:
    """Past `max_messages` the view counts a chain's messages instead of keeping them: the upstream
    leg's answer may be among those, so the leg must not read as never answered."""
    leg = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}}
    answer = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
    async with running() as h:
        h.app.model.max_messages = 2
        await h.push(
            bridged("c1"),
            message("c1", 1),
            message("c1", 2, side=Side.UPSTREAM, jsonrpc_id=7, body=leg),
            message(
                "c1",
                3,
                side=Side.UPSTREAM,
                kind="result",
                jsonrpc_id=7,
                direction=Direction.TO_CLIENT,
                method=None,
                body=answer,
            ),
            finished("c1", mode=Mode.LEGACY_TO_MRTR, client_era="legacy", upstream_era="modern"),
        )
        await h.pilot.press("enter")

        labels: list[str] = []
        pending = list(h.tree.root.children)
        while pending:
            node = pending.pop(0)
            labels.append(str(node.label))
            pending[:0] = node.children
        (upstream,) = [label for label in labels if "upstream tools/call #7" in label]
        assert upstream.endswith("→ answer not kept (chain ok)"), labels


async def test_at_80_columns_the_sessions_view_shows_each_sessions_state() -> None:
    earlier = SessionChanged(
        ts=BASE, session="<redacted len=36 hmac:12636f4d>", state="opened", client_name="claude-code"
    )
    async with running(earlier, size=(80, 24)) as h:
        await h.pilot.press("s")
        sessions = h.app.main.sessions
        await wait_for(lambda: sessions.row_count == 1, what="the session row")

        shown = 0
        for key, column in sessions.columns.items():
            shown += column.get_render_width(sessions)
            if key.value == "state":
                break
        assert shown <= sessions.scrollable_content_region.width, "the State column is cut off"
        assert str(sessions.get_cell_at(Coordinate(0, 0))).endswith("hmac:12636f4d>")
