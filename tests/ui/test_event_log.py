"""The proxy's own log in a TUI that owns the terminal: kept redacted, announced, shown with `E`, and
summed up on stderr once the terminal is given back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable

from proxy import logs
from proxy.cli_tui import warnings_said
from proxy.flows.redact import Redactor
from tests.ui.helpers import ScriptedFeed, wait_for
from ui.app import NO_LOG, ProxyTui
from ui.screens.events import EventsScreen

SECRET = "s3cret-token-value"


@pytest.fixture
def keeper() -> Iterator[logs.LogKeeper]:
    """A keeper installed the way `--tui` installs it (quiet, JSON), with a redactor knowing SECRET."""
    kept = logs.LogKeeper(bound=3)
    logs.configure(fmt="json", quiet=True, keeper=kept)
    logs.use_redactor(Redactor(key=b"k", secret_texts=[SECRET]))
    yield kept
    logs.use_redactor(None)
    logs.configure(quiet=True)


def test_the_keeper_keeps_the_proxys_own_lines_redacted_and_leaves_the_traffic_to_the_chains(
    keeper: logs.LogKeeper,
) -> None:
    log = logs.get_logger()
    log.info("proxy_started", listen="127.0.0.1:1")
    log.info("exchange", carried="tools/call echo", status=200)
    log.warning("upstream_unreachable", upstream=f"http://u/mcp?key={SECRET}", attempt=1)

    assert [(level, event) for _, level, event, _ in keeper.events] == [
        ("info", "proxy_started"),
        ("warning", "upstream_unreachable"),
    ]
    fields = keeper.events[-1][3]
    assert "attempt=1" in fields
    assert SECRET not in fields
    assert (keeper.total, keeper.warnings) == (2, 1)


def test_the_keeper_is_bounded_and_counts_what_it_let_go(keeper: logs.LogKeeper) -> None:
    log = logs.get_logger()
    for n in range(5):
        log.warning("rule_added", n=n)

    assert [fields for *_, fields in keeper.events] == ["n=2", "n=3", "n=4"]
    assert (keeper.total, keeper.warnings) == (5, 5)


def test_the_warnings_are_summed_up_once_the_terminal_is_back(keeper: logs.LogKeeper, tmp_path: Path) -> None:
    logs.get_logger().warning("upstream_unreachable", attempt=3)

    told = warnings_said(keeper, None)
    assert told.startswith("mcp-proxy: 1 warning while the TUI ran (--log-file FILE keeps the whole log)")
    assert told.endswith("the last: warning upstream_unreachable attempt=3")
    assert f"the whole log is in {tmp_path / 'p.log'}" in warnings_said(keeper, tmp_path / "p.log")


async def test_a_new_warning_is_announced_and_e_shows_the_log(keeper: logs.LogKeeper) -> None:
    app = ProxyTui(ScriptedFeed(), batch_delay=0.01, log=keeper)
    app.LOG_CHECK = 0.05
    async with app.run_test(size=(120, 30)) as pilot:
        logs.get_logger().warning("upstream_unreachable", upstream="http://127.0.0.1:9/mcp")
        await wait_for(
            lambda: any("upstream_unreachable (E shows its log)" in n.message for n in app._notifications),
            what="the warning announced",
        )
        await pilot.press("E")
        await wait_for(lambda: isinstance(app.screen, EventsScreen), what="the event log")
        table = app.screen.query_one(DataTable)
        assert table.row_count == 1
        assert [str(cell) for cell in table.get_row_at(0)][1:3] == ["warning", "upstream_unreachable"]
        await pilot.press("enter")  # the whole line, however wide
        await wait_for(
            lambda: any("upstream=http://127.0.0.1:9/mcp" in n.message for n in app._notifications),
            what="the whole line",
        )
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, EventsScreen), what="the log to close")


async def test_an_attached_tui_says_where_the_log_is() -> None:
    app = ProxyTui(ScriptedFeed(), batch_delay=0.01)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("E")
        await wait_for(lambda: any(n.message == NO_LOG for n in app._notifications), what="the notice")
        assert not isinstance(app.screen, EventsScreen)
