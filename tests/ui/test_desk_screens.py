"""The rule keys against a desk double: the fault screen, the intercept prompt, held messages and editors.

What a real proxy does with the same keys is tested end to end in tests/ui/test_desk_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.coordinate import Coordinate
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, TextArea

from tests.ui.desk_double import DeskDouble, held
from tests.ui.helpers import ScriptedFeed, info, wait_for
from ui.app import ProxyTui, split_timeout
from ui.desk import READ_ONLY_CAPTURE, Decision, Intercepts, Released
from ui.screens.faults import FaultScreen
from ui.screens.held_editor import HeldEditor, countdown
from ui.screens.intercepts import HELD_COLUMNS, InterceptScreen
from ui.screens.rule_prompt import RulePrompt
from ui.widgets.status_bar import StatusBar


class Run:
    def __init__(self, app: ProxyTui, pilot: Pilot[None], seen: list[Message]) -> None:
        self.app, self.pilot, self.seen = app, pilot, seen

    def notices(self) -> list[str]:
        return [m.notification.message for m in self.seen if isinstance(m, Notify)]

    def status(self) -> str:
        return str(self.app.main.query_one(StatusBar).content)

    async def screen_is(self, kind: type) -> None:
        await wait_for(lambda: isinstance(self.app.screen, kind), what=f"the {kind.__name__}")


@asynccontextmanager
async def running(desk: DeskDouble | None, size: tuple[int, int] = (100, 30)) -> AsyncIterator[Run]:
    seen: list[Message] = []
    app = ProxyTui(ScriptedFeed(info()), batch_delay=0.01, desk=desk)
    async with app.run_test(size=size, message_hook=seen.append) as pilot:
        yield Run(app, pilot, seen)


# -- no desk -----------------------------------------------------------------------------------


async def test_without_a_desk_the_rule_keys_say_the_capture_is_read_only() -> None:
    async with running(None) as run:
        for key in ("F", "i", "I"):
            await run.pilot.press(key)
        await run.pilot.pause()
        assert run.notices() == [READ_ONLY_CAPTURE] * 3
        assert run.app.screen is run.app.main


# -- fault rules -------------------------------------------------------------------------------


async def test_the_fault_screen_lists_adds_refuses_with_the_reason_and_deletes() -> None:
    desk = DeskDouble()
    async with running(desk) as run:
        await run.pilot.press("F")
        await run.screen_is(FaultScreen)
        screen = run.app.screen
        assert isinstance(screen, FaultScreen)
        await wait_for(lambda: "no fault rule" in screen.status, what="the empty listing")

        await run.pilot.press("a")
        await run.screen_is(RulePrompt)
        await run.pilot.press(*"tool:echo drop", "enter")
        prompt = run.app.screen
        assert isinstance(prompt, RulePrompt)
        await wait_for(lambda: "no '=>'" in prompt.error, what="the refusal in the prompt")
        assert desk.faults == []

        prompt.query_one(Input).value = "tool:echo => drop"
        await run.pilot.press("enter")
        await run.screen_is(FaultScreen)
        await wait_for(lambda: screen.table.row_count == 1, what="the new rule's row")
        assert [str(cell) for cell in screen.table.get_row_at(0)] == ["f1", "tool:echo => drop", "0"]
        assert "f1 in force" in screen.status

        await run.pilot.press("d")
        await wait_for(lambda: screen.table.row_count == 0, what="the rule to go")
        assert desk.faults == []
        assert "f1 deleted" in screen.status


# -- intercept rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "prefill"),
    [
        ("method:tools/call tool:delete_*", "method:tools/call tool:delete_*"),
        ("-tool:echo body:octocat", "-tool:echo body:octocat"),
        ("status:error", ""),
        ("method:tools/call slow", ""),
    ],
)
async def test_i_starts_from_the_filter_when_it_picks_single_messages(query: str, prefill: str) -> None:
    async with running(DeskDouble()) as run:
        await run.pilot.press("slash", *query, "enter", "escape", "i")
        await run.screen_is(RulePrompt)
        assert run.app.screen.query_one(Input).value == prefill


async def test_an_intercept_rule_is_added_with_its_timeout_or_refused_with_the_reason() -> None:
    desk = DeskDouble()
    async with running(desk) as run:
        await run.pilot.press("i", *"nonsense:x", "enter")
        prompt = run.app.screen
        assert isinstance(prompt, RulePrompt)
        await wait_for(lambda: "unknown field 'nonsense'" in prompt.error, what="the refusal")
        prompt.query_one(Input).value = "dir:server method:elicitation/create timeout=30s"
        await run.pilot.press("enter")
        await wait_for(lambda: run.app.screen is run.app.main, what="the prompt to close")
        (rule,) = desk.rules
        assert (rule.match, rule.timeout_s) == ("dir:server method:elicitation/create", 30.0)


def test_a_trailing_timeout_is_split_off_the_match() -> None:
    assert split_timeout("tool:x  timeout=2m") == ("tool:x", "2m")
    assert split_timeout("tool:x") == ("tool:x", None)


# -- held messages -----------------------------------------------------------------------------


async def test_the_status_bar_counts_held_messages_and_a_new_one_is_announced() -> None:
    desk = DeskDouble()
    async with running(desk) as run:
        await run.pilot.pause()
        assert "held" not in run.status()
        desk.hold(held("h1"))
        await wait_for(lambda: " 1 held " in run.status(), what="the held badge")
        assert any(n.startswith("held h1: request tools/call from the client") for n in run.notices())
        desk.hold(held("h2", method="tools/list"))
        desk.hold(held("h3", method="tools/list"))
        await wait_for(lambda: " 3 held " in run.status(), what="the count to grow")


async def open_held(run: Run) -> InterceptScreen:
    await wait_for(lambda: bool(run.app.intercepts.held), what="the held messages")
    await run.pilot.press("I")
    await run.screen_is(InterceptScreen)
    screen = run.app.screen
    assert isinstance(screen, InterceptScreen)
    return screen


async def test_the_held_screen_lists_each_message_and_f_and_d_decide() -> None:
    first, second = "h1-3f9c0a7e", "h2-0b7d5e21"  # the proxy's ids: a number, then a random part
    desk = DeskDouble(held(first), held(second, kind="notification", method="notifications/progress"))
    async with running(desk) as run:
        screen = await open_held(run)
        cells = screen.held_table.get_row_at(0)
        row = {key: str(cell) for (key, _, _), cell in zip(HELD_COLUMNS, cells, strict=True)}
        readable = [row[key] for key in ("id", "dir", "kind", "method", "rule")]
        assert readable == ["h1", "client→server", "request", "tools/call", "i1"]
        age, left = float(row["age"].removesuffix("s")), float(row["left"].removesuffix("s"))
        assert 2.0 <= age < 10  # held two seconds before the screen opened
        assert 40 < left <= 60  # time left before it goes on unchanged

        await run.pilot.press("f")
        await wait_for(lambda: screen.held_table.row_count == 1, what="h1 to leave the list")
        await run.pilot.press("d")
        await wait_for(lambda: screen.held_table.row_count == 0, what="h2 to leave the list")
        assert desk.decisions == [(first, Decision("forward")), (second, Decision("drop"))]
        assert screen.status == "dropped h2 (notifications/progress)"
        await wait_for(lambda: "held" not in run.status(), what="the badge to go")


async def test_an_invalid_edit_stays_in_the_editor_with_the_reason_and_is_never_sent() -> None:
    desk = DeskDouble(held("h1"))
    async with running(desk) as run:
        await open_held(run)
        await run.pilot.press("e")
        await run.screen_is(HeldEditor)
        assert isinstance(run.app.screen, HeldEditor)
        editor: HeldEditor = run.app.screen
        area = editor.query_one(TextArea)
        assert json.loads(area.text)["params"]["arguments"]["token"].startswith("<redacted")
        assert "stand-in left in place is sent as the original value" in str(
            editor.query_one("#editor-note").content  # type: ignore[attr-defined]
        )

        for text, reason in [
            ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call",', "not JSON: "),
            ('{"jsonrpc": "2.0", "id": 8, "method": "tools/call"}', "keeps the held message's id 7, got 8"),
            ('{"jsonrpc": "2.0", "id": 7, "result": {}}', "an edit keeps it a request, this is a response"),
            ('{"jsonrpc": "1.0", "id": 7, "method": "tools/call"}', '"jsonrpc" must be "2.0"'),
            ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": 3}', '"params" is an object'),
            (
                '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", '
                '"moved": "<redacted len=12 hmac:ab12cd00>"}}',
                "the redacted stand-in at params.moved was shown at params.arguments.token",
            ),
        ]:
            area.load_text(text)
            await run.pilot.press("ctrl+s")
            await wait_for(lambda r=reason: r in editor.error, what=f"the reason {reason!r}")  # type: ignore[misc]
            assert run.app.screen is editor
        assert desk.decisions == []

        desk.refuse_next = "the stand-in <redacted len=12 hmac:ab12cd> was moved (HTTP 400)"
        area.load_text(json.dumps(held("h1").message))
        await run.pilot.press("ctrl+s")
        await wait_for(lambda: "was moved" in editor.error, what="the proxy's own refusal")
        assert run.app.screen is editor

        edited = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}}
        area.load_text(json.dumps(edited))
        await run.pilot.press("ctrl+s")
        await wait_for(lambda: bool(desk.decisions), what="the edit to go out")
        assert desk.decisions == [("h1", Decision("forward", message=edited))]
        await run.screen_is(InterceptScreen)


async def test_a_starts_an_answer_valid_for_the_method_and_refuses_it_for_a_notification() -> None:
    note = held("h2", kind="notification", method="notifications/progress", message={"jsonrpc": "2.0"})
    desk = DeskDouble(held("h1"), note)
    async with running(desk) as run:
        screen = await open_held(run)
        await run.pilot.press("a")
        await run.screen_is(HeldEditor)
        area = run.app.screen.query_one(TextArea)
        start = {"content": [{"type": "text", "text": ""}], "isError": False}  # a valid tools/call result
        assert json.loads(area.text) == {"jsonrpc": "2.0", "id": 7, "result": start}
        area.load_text('{"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "not today"}}')
        await run.pilot.press("ctrl+s")
        await wait_for(lambda: bool(desk.decisions), what="the answer")
        ((hid, decision),) = desk.decisions
        assert hid == "h1"
        assert decision.body() == {
            "decision": "answer",
            "by": "tui",
            "error": {"code": -32001, "message": "not today"},
        }
        await run.screen_is(InterceptScreen)
        await wait_for(lambda: screen.held_table.row_count == 1, what="h1 to leave")
        await run.pilot.press("a")
        await run.pilot.pause()
        assert "has no answer" in screen.status
        assert run.app.screen is screen


def test_the_editor_counts_down_to_the_deadline_then_says_how_the_message_went() -> None:
    item = held("h1", hold_for=30.0)  # held two seconds ago
    now = time.time()

    waiting = countdown(item, now).plain
    late = countdown(item, item.deadline + 0.5).plain
    elsewhere = countdown(item, now, gone=True).plain

    assert waiting == "the proxy forwards it unchanged in 30s (intercept timeout 32s)"
    assert late.startswith("released by the intercept timeout (32s) at ")
    assert late.endswith("the proxy forwarded it unchanged, without this edit")
    assert elsewhere.startswith("already released (by another TUI or a script)")


def test_a_listed_release_names_how_the_message_left_whatever_the_deadline() -> None:
    item = held("h1", hold_for=30.0)
    now = time.time()

    def shown(decision: str, by: str) -> str:
        return countdown(item, now, gone=True, release=Released(item.id, decision, by, now)).plain

    assert shown("abandoned", "client").startswith("abandoned at ")
    assert shown("forward", "timeout").startswith("released by the intercept timeout (32s) at ")
    assert shown("drop", "tui").startswith("already dropped at ")
    assert shown("drop", "tui").endswith("by another TUI: Ctrl+S can no longer send this")
    assert "by a script (the admin API)" in shown("forward_edited", "api")
    assert shown("forward", "rule_deleted").endswith(
        "when its rule was deleted: the proxy forwarded it unchanged, without this edit"
    )


async def test_an_open_editor_shows_the_time_left_and_says_when_the_timeout_released_the_message() -> None:
    desk = DeskDouble(held("h1", hold_for=2.0))
    async with running(desk) as run:
        await open_held(run)
        await run.pilot.press("e")
        await run.screen_is(HeldEditor)
        editor = run.app.screen
        assert isinstance(editor, HeldEditor)
        assert "the proxy forwards it unchanged in " in editor.deadline_text
        assert "(intercept timeout 4s)" in editor.deadline_text

        await wait_for(
            lambda: "released by the intercept timeout (4s)" in editor.deadline_text,
            what="the editor to say the timeout released it",
        )
        assert run.app.screen is editor  # what was typed stays, to copy elsewhere
        assert desk.decisions == []
        await editor.query_one("#editor-countdown").remove()  # as while the app is being taken down
        editor.take(Intercepts(rules=(), held=()))  # a late state finds nothing to update, and says nothing


def test_an_editor_told_its_message_went_before_it_is_drawn_shows_so_once_drawn() -> None:
    """On a slow machine the message's timeout can release it while the editor is still being pushed:
    the news waits for the screen, instead of failing on widgets not drawn yet."""
    message = held("h1", hold_for=2.0)
    editor = HeldEditor(DeskDouble(message), message, "{}")
    editor.take(Intercepts(rules=(), held=()))  # before compose: nothing drawn to update
    assert editor.gone
    assert "already released" in str(countdown(message, time.time(), gone=editor.gone))


EDITOR_SCRIPT = """\
import json, os, stat, sys
seen, text, path = sys.argv[1:4]  # the command's own words, then the file to edit
with open(seen, "w") as out:
    json.dump({"path": path, "mode": stat.S_IMODE(os.stat(path).st_mode)}, out)
with open(path) as held:
    message = json.load(held)
message["params"]["arguments"]["text"] = text
with open(path, "w") as out:
    out.write(json.dumps(message) if text != "broken" else "{")
"""


@pytest.mark.parametrize("text", ["edited-outside", "broken"])
async def test_E_edits_in_editor_on_a_private_file_removed_after(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, seen = tmp_path / "editor.py", tmp_path / "seen.json"
    script.write_text(EDITOR_SCRIPT)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script} {seen} {text}")
    desk = DeskDouble(held("h1"))
    async with running(desk) as run:
        await open_held(run)
        await run.pilot.press("E")
        if text == "broken":
            await run.screen_is(HeldEditor)
            assert "not JSON" in run.app.screen.error  # type: ignore[attr-defined]
            assert desk.decisions == []
        else:
            await wait_for(lambda: bool(desk.decisions), what="the edit to go out")
            ((_, decision),) = desk.decisions
            assert decision.message is not None
            assert decision.message["params"]["arguments"]["text"] == "edited-outside"
        report = json.loads(seen.read_text())
        assert report["mode"] == stat.S_IRUSR | stat.S_IWUSR  # only this user reads the message
        assert not await asyncio.to_thread(os.path.exists, report["path"])  # gone once the editor returned


async def test_the_held_screen_never_says_nothing_held_above_a_held_row() -> None:
    desk = DeskDouble()
    async with running(desk) as run:
        await desk.add_intercept("tool:echo", None)
        await run.pilot.pause()
        await run.pilot.press("I")
        await run.screen_is(InterceptScreen)
        screen = run.app.screen
        assert isinstance(screen, InterceptScreen)
        await wait_for(lambda: screen.status == "nothing held", what="the empty list said")
        desk.hold(held("h1"))
        await wait_for(lambda: screen.held_table.row_count == 1, what="the held row")
        await wait_for(lambda: screen.status.startswith("1 held: "), what="the line to follow the list")


async def test_quitting_with_a_message_held_says_what_becomes_of_it_first() -> None:
    desk = DeskDouble(held("h1"))
    async with running(desk) as run:
        await wait_for(lambda: bool(run.app.intercepts.held), what="the held message")
        await run.pilot.press("q")
        await wait_for(
            lambda: any("1 held message(s) stay held at the proxy until their timeout: q again quits" in n
                        for n in run.notices()),
            what="the warning",
        )  # fmt: skip
        assert run.app.is_running
        await run.pilot.press("q")
        await wait_for(lambda: not run.app.is_running, what="the app to quit")


def shown_width(table: DataTable[Any], last: str) -> int:
    """Cells from the table's left edge to the end of column `last`."""
    widths = []
    for key, column in table.columns.items():
        widths.append(column.get_render_width(table))
        if key.value == last:
            return sum(widths)
    raise AssertionError(f"no column {last}")


async def test_at_80_columns_the_held_list_shows_each_messages_time_left_and_chain() -> None:
    desk = DeskDouble(held("h1", kind="notification", method="notifications/progress"))
    async with running(desk, size=(80, 24)) as run:
        screen = await open_held(run)
        table = screen.held_table
        await wait_for(lambda: table.row_count == 1, what="the held row")

        room = table.scrollable_content_region.width
        assert shown_width(table, "left") <= room
        assert shown_width(table, "chain") <= room
        assert table.virtual_size.width <= room, "a column is cut off"
        assert str(table.get_cell_at(Coordinate(0, 1))).endswith("s")  # the time left, in seconds
