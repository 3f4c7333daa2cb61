"""The chain list: one row per chain, updated in place so the list never jumps under the cursor.

Columns have fixed widths (a growing cell never shifts the others); a wide terminal gets more of
them. New chains append at the bottom (a chain of an earlier proxy run, kept after an
attached proxy was replaced, is dimmed); with follow on, the cursor rides the newest row, otherwise it
stays on the chain it is on, even when rows are removed above it. The table never holds state of its
own beyond its rows: the app hands it the model, the change set and the filter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist, RowKey

from ui.body_search import ListFilter
from ui.messages import ChainChosen, ChainHighlighted, FollowChanged
from ui.model import ChainEntry, Changes, ViewModel
from ui.render import cell, chain_cells, tail_cell

COMPACT: tuple[tuple[str, str, int], ...] = (
    ("time", "Time", 8),
    ("client", "Client", 8),
    ("method", "Method", 13),
    ("name", "Name", 12),
    ("eras", "Eras", 5),
    ("rounds", "Rd", 2),
    ("status", "Status", 7),
    ("duration", "Took", 6),
)
"""Key, title and width of each column below 120 terminal columns (fits 80)."""

WIDE: tuple[tuple[str, str, int], ...] = (
    ("time", "Time", 8),
    ("id", "Chain", 5),
    ("client", "Client", 14),
    ("method", "Method", 16),
    ("name", "Name", 18),
    ("eras", "Eras", 5),
    ("rounds", "Rd", 3),
    ("status", "Status", 7),
    ("duration", "Took", 7),
    ("msgs", "Msgs", 4),
    ("bytes", "Bytes", 6),
)
"""Columns from 120 terminal columns up."""

WIDEST: tuple[tuple[str, str, int], ...] = (
    ("time", "Time", 8),
    ("id", "Chain", 13),
    ("client", "Client", 18),
    ("method", "Method", 20),
    ("name", "Name", 24),
    ("eras", "Eras", 5),
    ("rounds", "Rd", 3),
    ("status", "Status", 12),
    ("duration", "Took", 7),
    ("msgs", "Msgs", 5),
    ("bytes", "Bytes", 7),
)
"""Columns from 160 terminal columns up: whole chain ids (`cc13470-21` of one run and `c793c00-21`
of the next differ in their run tag) and whole status words (`incomplete ✎`)."""

COLUMN_SETS: tuple[tuple[int, tuple[tuple[str, str, int], ...]], ...] = (
    (0, COMPACT),
    (120, WIDE),
    (160, WIDEST),
)
"""The column set for a terminal width: the last whose minimum width the terminal reaches."""


def columns_for(width: int) -> tuple[tuple[str, str, int], ...]:
    """The column set a terminal `width` columns wide shows."""
    return [spec for least, spec in COLUMN_SETS if width >= least][-1]


MAX_ROWS = 5000
"""Rows the list shows at most: the newest chains that match the filter. The model may hold many more
(an opened capture holds every chain of the file); the filter searches them all, so any chain is a
filter away, while the table (a row of rendered cells each) stays quick to rebuild and small."""


def _fit(value: Text | str, width: int) -> Text | str:
    """Cut a cell to its column with an ellipsis, so fixed widths hold."""
    if isinstance(value, Text):
        if value.cell_len > width:
            value = value.copy()
            value.truncate(width, overflow="ellipsis")
        return value
    return value if len(value) <= width else value[: max(0, width - 1)] + "…"


def _dim(cell: Text | str) -> Text:
    text = cell.copy() if isinstance(cell, Text) else Text(cell)
    text.stylize("dim")
    return text


class ChainTable(DataTable[Any]):
    """The live chain list (rows keyed by the view model's chain key)."""

    follow: bool
    """Keep the cursor on the newest chain as chains arrive."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open", show=True),
        Binding("home", "scroll_top", "First", show=False),
        Binding("end", "scroll_bottom", "Last", show=False),
    ]

    # Moving back through history means the user is reading: stop following the tail.
    def action_cursor_up(self) -> None:
        """Up one row (and stop following)."""
        self._stop_following()
        super().action_cursor_up()

    def action_page_up(self) -> None:
        """Up one page (and stop following)."""
        self._stop_following()
        super().action_page_up()

    def action_scroll_top(self) -> None:
        """To the first row (and stop following)."""
        self._stop_following()
        super().action_scroll_top()

    def _stop_following(self) -> None:
        if self.follow:
            self.follow = False
            self.post_message(FollowChanged(False))

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.follow = True
        self._columns_spec = COMPACT
        self.unshown = 0
        """Matching chains older than the rows shown, which `MAX_ROWS` left out at the last rebuild
        (only an opened capture holds more chains than that; its rows are rebuilt, not synced)."""

    def on_mount(self) -> None:
        """Start with the compact columns."""
        self._set_columns(COMPACT)

    def _update_dimensions(self, _new_rows: Iterable[RowKey]) -> None:
        """Size the table without measuring each new cell: every column has a fixed width, every row one line.

        DataTable measures each cell of each new row to widen auto-width columns (a fraction of a
        millisecond a row); an opened capture adds tens of thousands of rows at once, and here the
        measured widths would not be used.
        """
        width = sum(column.get_render_width(self) for column in self.columns.values())
        header = self.header_height if self.show_header else 0
        self.virtual_size = Size(width + self._row_label_column_width, self._total_row_height + header)

    def _set_columns(self, spec: tuple[tuple[str, str, int], ...]) -> None:
        self.clear(columns=True)
        self._columns_spec = spec
        for key, title, width in spec:
            self.add_column(title, key=key, width=width)

    @property
    def wide(self) -> bool:
        """Whether a wide column set (120 terminal columns and up) is shown."""
        return self._columns_spec is not COMPACT

    @property
    def selected_key(self) -> str | None:
        """The key of the chain under the cursor, if any."""
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except RowDoesNotExist:
            return None

    def set_width(self, width: int, model: ViewModel, list_filter: ListFilter) -> None:
        """Show the column set for a terminal `width` columns wide (rebuilds the rows when it changes)."""
        spec = columns_for(width)
        if spec is self._columns_spec:
            return
        self._set_columns(spec)
        self.rebuild(model, list_filter)

    def _cells(self, entry: ChainEntry) -> list[Text | str]:
        cells = chain_cells(entry)
        row = [
            cell(tail_cell(entry.summary.id, width)) if key == "id" else _fit(cells[key], width)
            for key, _, width in self._columns_spec
        ]
        if entry.earlier_run is not None:  # an earlier proxy run's chain: shown, set apart
            return [_dim(value) for value in row]
        return row

    def rebuild(self, model: ViewModel, list_filter: ListFilter, now: float | None = None) -> None:
        """Show exactly the chains that `list_filter` shows, keeping the cursor on the same chain."""
        keep = self.selected_key
        self.clear()
        matching = [entry for entry in model.chains.values() if list_filter.wants(entry, now)]
        for entry in matching[-MAX_ROWS:]:
            self.add_row(*self._cells(entry), key=entry.key)
        self.unshown = max(0, len(matching) - MAX_ROWS)
        self._restore(keep)

    @property
    def matched(self) -> int:
        """Chains that match the filter: the rows, and those past `MAX_ROWS` the last rebuild left out."""
        return self.row_count + self.unshown

    def sync(
        self, model: ViewModel, changes: Changes, list_filter: ListFilter, now: float | None = None
    ) -> None:
        """Apply one change set: update rows in place, append new ones, drop removed ones."""
        if changes.cleared:
            self.rebuild(model, list_filter, now)
            return
        keep = self.selected_key
        moved = False
        for key in changes.removed:
            if self._has(key):
                self.remove_row(key)
                moved = True
        last = next(reversed(model.chains), None)
        for key in changes.updated:
            entry = model.get(key)
            if entry is None:
                continue
            shown, wanted = self._has(key), list_filter.wants(entry, now)
            if shown and wanted:
                self._update(entry)
            elif shown:
                self.remove_row(key)
                moved = True
            elif wanted:
                if key != last:  # an older chain now matches: only a rebuild keeps the order
                    self.rebuild(model, list_filter, now)
                    return
                self.add_row(*self._cells(entry), key=key)
        for key in changes.added:
            entry = model.get(key)
            if entry is None or self._has(key):
                continue
            if list_filter.wants(entry, now):
                self.add_row(*self._cells(entry), key=key)
        if self.follow and self.row_count:
            self.move_cursor(row=self.row_count - 1)
        elif moved:
            self._restore(keep)

    def _has(self, key: str) -> bool:
        return key in self.rows

    def _update(self, entry: ChainEntry) -> None:
        for (column, _, _), value in zip(self._columns_spec, self._cells(entry), strict=True):
            self.update_cell(entry.key, column, value)

    def _restore(self, key: str | None) -> None:
        if self.follow and self.row_count:
            self.move_cursor(row=self.row_count - 1)
        elif key is not None and self._has(key):
            self.move_cursor(row=self.get_row_index(key), scroll=False)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Tell the app which chain is under the cursor."""
        event.stop()
        if event.row_key.value is not None:
            self.post_message(ChainHighlighted(event.row_key.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row: open that chain's tree."""
        event.stop()
        if event.row_key.value is not None:
            self.post_message(ChainChosen(event.row_key.value))
