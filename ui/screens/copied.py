"""What was just put on the clipboard, shown in full: OSC 52 can be refused by a terminal, and a
command is worth reading before it is run."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from proxy.wire.visible import visible


class CopiedScreen(ModalScreen[None]):
    """The copied text under a title; Esc closes."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        """The title, then the text as it was copied (selectable where the terminal allows)."""
        with VerticalScroll(id="copied-box"):
            title = visible(self.title_text)
            yield Static(Text(f"{title}  (Esc closes)", style="bold"), id="copied-title")
            yield Static(Text(visible(self.text, lines=True)), id="copied-text")
