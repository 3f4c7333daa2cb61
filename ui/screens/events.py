"""The proxy's event log (`E`): what the proxy itself said while the TUI owned the terminal.

A proxy run with `--tui` writes its log to `--log-file` or nowhere, so its warnings (an upstream out of
reach, a rule put in force, a forced era refused) would otherwise be seen by nobody. The lines are
kept redacted by the proxy's log processor (`proxy.logs.LogKeeper`), newest last, bounded; the
traffic's own lines are the chains, and are not repeated here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from proxy.wire.visible import visible
from ui.render import cell

LEVEL_STYLE = {"warning": "yellow", "error": "bold red", "critical": "bold red", "info": "dim"}


class ProxyLog(Protocol):
    """The proxy's own log lines, as `proxy.logs.LogKeeper` keeps them."""

    @property
    def events(self) -> Sequence[tuple[str, str, str, str]]:
        """Kept lines, oldest first: clock time, level, event, the other fields as `key=value`."""
        ...

    @property
    def total(self) -> int:
        """Lines kept so far (more than `events` holds once its bound is passed)."""
        ...

    @property
    def warnings(self) -> int:
        """Lines at warning or above so far."""
        ...


class EventsScreen(ModalScreen[None]):
    """The kept lines in a table, the newest at the bottom (and under the cursor)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Close"),
        Binding("E", "app.pop_screen", "Close", show=False),
    ]

    def __init__(self, log: ProxyLog) -> None:
        super().__init__()
        self.log_lines = log
        self.shown: list[tuple[str, str, str, str]] = list(log.events)
        """The lines as the screen opened on them (the log goes on meanwhile)."""

    def compose(self) -> ComposeResult:
        """A heading with the counts, then the table."""
        log = self.log_lines
        kept = len(self.shown)
        older = f", the {log.total - kept} oldest no longer kept" if log.total > kept else ""
        with Vertical(id="events-box"):
            yield Static(
                f"The proxy's own log: {log.total} line(s), {log.warnings} warning(s){older}. "
                "Enter shows a whole line, Esc closes.",
                id="events-title",
            )
            yield DataTable(id="events-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        """Fill the table and put the cursor on the newest line."""
        table = self.query_one(DataTable)
        table.add_columns("time", "level", "event", "details")
        for clock, level, event, fields in self.shown:
            shown = Text(level, style=LEVEL_STYLE.get(level, ""))
            table.add_row(clock, shown, Text(visible(event), style="bold"), cell(fields))
        if table.row_count:
            table.move_cursor(row=table.row_count - 1)
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter: the whole line (its details are cut at the table's width)."""
        clock, level, name, fields = self.shown[event.cursor_row]
        line = f"{clock} {level} {visible(name)}\n{visible(fields)}"
        self.notify(line, title="log line", timeout=20, markup=False)
