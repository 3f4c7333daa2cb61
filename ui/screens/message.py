"""The message screen: one message in full, what the other side of the proxy saw, copy and save."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from proxy.flows.events import MessageRecord
from ui.messages import CopyRequested
from ui.model import ChainEntry, ViewModel
from ui.render import answered_here, message_label
from ui.timeline import counterparts
from ui.widgets.message_view import MessageView


class MessageScreen(Screen[None]):
    """Shows message `seq` of chain `key`; `[` and `]` step through the chain's messages."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("e", "expand", "Expand"),
        Binding("c", "copy(False)", "Copy"),
        Binding("C", "copy(True)", "Curl"),
        Binding("w", "save", "Save"),
        Binding("left_square_bracket", "step(-1)", "Prev"),
        Binding("right_square_bracket", "step(1)", "Next"),
    ]

    def __init__(self, model: ViewModel, key: str, seq: int, save_dir: Path) -> None:
        super().__init__()
        self.model = model
        self.key = key
        self.seq = seq
        self.save_dir = save_dir
        self.expanded = False

    def compose(self) -> ComposeResult:
        """A one-line title, the two panes, the footer."""
        yield Static(id="message-title")
        yield MessageView()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Draw the chosen message; arrow keys scroll it (Tab moves to the other side)."""
        self._draw()
        self.query_one("#this-side").focus()

    @property
    def entry(self) -> ChainEntry | None:
        """The chain (None once cleared or evicted)."""
        return self.model.get(self.key)

    @property
    def record(self) -> MessageRecord | None:
        """The message shown."""
        entry = self.entry
        return entry.message(self.seq) if entry is not None else None

    def _draw(self) -> None:
        entry, record = self.entry, self.record
        title = self.query_one("#message-title", Static)
        if entry is None or record is None:
            title.update("this message is no longer held (cleared or evicted)")
            return
        title.update(message_label(record, entry.summary.bridged, answered_here(entry.summary)))
        others = counterparts(entry.messages, record)
        self.query_one(MessageView).show(record, entry.summary, others, expanded=self.expanded)

    def action_expand(self) -> None:
        """Show whole bodies instead of their first lines (and back)."""
        self.expanded = not self.expanded
        self._draw()

    def action_step(self, delta: int) -> None:
        """Show the previous or next message of the same chain."""
        entry = self.entry
        if entry is None:
            return
        seqs = [m.seq for m in entry.messages]
        if self.seq not in seqs:
            return
        index = seqs.index(self.seq) + delta
        if 0 <= index < len(seqs):
            self.seq = seqs[index]
            self._draw()

    def action_copy(self, curl: bool) -> None:
        """Copy the message as JSON-RPC (its whole body, indented), or its request as curl."""
        if self.record is not None:
            self.post_message(CopyRequested(self.key, self.seq, curl=curl))

    def action_save(self) -> None:
        """Write the whole message (metadata and body) as JSON next to where the TUI was started."""
        record, entry = self.record, self.entry
        if record is None or entry is None:
            return
        path = self.save_dir / f"mcp-proxy-{entry.summary.id}-{record.seq}.json"
        try:
            path.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            self.notify(f"cannot save {path}: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"saved {path}")
