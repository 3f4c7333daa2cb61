"""The sessions view: which client holds which legacy session, the upstream sessions the MRTR-client
bridge holds (per principal and declared capability set), and each session's history."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from ui.model import ViewModel
from ui.render import SESSION_WIDTH, session_cells

COLUMNS = (
    ("session", "Session", SESSION_WIDTH),
    ("client", "Client", 12),
    ("side", "Side", 8),
    ("state", "State", 19),
    ("principal", "Principal", 16),
    ("caps", "Capabilities", 24),
    ("version", "Version", 10),
    ("opened", "Opened", 8),
    ("changed", "Changed", 8),
    ("history", "History", 40),
)
"""Whose session it is and its state first, so an 80-column terminal shows them; the rest scrolls."""


class SessionsTable(DataTable[Any]):
    """One row per session seen (opened, reinitialized, ended, expired)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row")

    def on_mount(self) -> None:
        """Add the columns."""
        for key, title, width in COLUMNS:
            self.add_column(title, key=key, width=width)

    def sync(self, model: ViewModel) -> None:
        """Redraw every row (sessions are few; the cursor stays on its row index)."""
        row = self.cursor_row
        self.clear()
        for row_key, entry in model.sessions.items():  # one name may be several runs' sessions
            cells = session_cells(entry)
            self.add_row(*(cells[key] for key, _, _ in COLUMNS), key=row_key)
        if self.row_count:
            self.move_cursor(row=min(row, self.row_count - 1), scroll=False)
