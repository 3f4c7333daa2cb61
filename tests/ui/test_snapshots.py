"""Three SVG snapshots at fixed sizes of the recorded tour: the main screen, a bridged chain, a message.

Rendered by the app itself (`App.export_screenshot`) and compared with the SVG files committed in
`snapshots/`. Timestamps come from the recorded capture (pinned) and are shown in UTC, so the files
are the same on every machine. After an intended change to the look, regenerate them with
`MCP_PROXY_UPDATE_SNAPSHOTS=1 pytest tests/ui/test_snapshots.py` and review the new SVGs.
(pytest-textual-snapshot needs syrupy 4, which pins pytest below 9, so these are compared by hand.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui.helpers import TOUR, wait_for
from ui.app import ProxyTui
from ui.feeds import CaptureFeed
from ui.screens.message import MessageScreen

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("MCP_PROXY_UPDATE_SNAPSHOTS") == "1"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Clock times in UTC while a snapshot renders (restored afterwards)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def check(name: str, svg: str, tmp_path: Path) -> None:
    """Compare with the committed snapshot, or write it when regenerating."""
    path = SNAPSHOTS / f"{name}.svg"
    if UPDATE or not path.exists():
        path.write_text(svg, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"snapshot {path.name} did not exist and was written; review it and commit it")
        return
    if svg != path.read_text(encoding="utf-8"):
        actual = tmp_path / f"{name}.svg"
        actual.write_text(svg, encoding="utf-8")
        pytest.fail(
            f"{name} differs from {path}; the new rendering is {actual} "
            "(regenerate with MCP_PROXY_UPDATE_SNAPSHOTS=1 if the change is intended)"
        )


async def loaded(app: ProxyTui) -> None:
    await wait_for(
        lambda: app.feed_status is not None and app.feed_status.state == "ended", what="the tour to load"
    )


async def test_main_screen_80x24(tmp_path: Path) -> None:
    app = ProxyTui(CaptureFeed(TOUR), batch_delay=0.01)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app)
        await pilot.pause()

        check("main_80x24", app.export_screenshot(), tmp_path)


async def test_bridged_chain_120x36(tmp_path: Path) -> None:
    app = ProxyTui(CaptureFeed(TOUR), batch_delay=0.01)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(app)
        await pilot.press("slash", *"bridged tool:survey", "enter", "escape", "enter")
        await pilot.pause()

        check("bridged_chain_120x36", app.export_screenshot(), tmp_path)


async def test_message_view_120x36(tmp_path: Path) -> None:
    app = ProxyTui(CaptureFeed(TOUR), batch_delay=0.01)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(app)
        await pilot.press("slash", *"bridged tool:greet", "enter", "escape", "enter", "enter")
        await pilot.pause()
        assert isinstance(app.screen, MessageScreen)

        check("message_view_120x36", app.export_screenshot(), tmp_path)
