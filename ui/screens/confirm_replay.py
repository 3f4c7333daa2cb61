"""The question `r` asks before a replay: a replay sends real requests to a live server.

A `tools/call` replayed runs the tool again, with whatever it does (writes, mails, payments), so the
screen names what would be sent and where, and nothing goes out until the user says yes.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from proxy.wire.visible import visible


def question(chain: str, what: str, target: str, handshake: bool) -> Text:
    """What the replay would send, and where, as the screen asks it."""
    text = Text("replay ", style="bold")
    text.append(visible(what), style="bold cyan")
    text.append(f" (chain {visible(chain)})\nagainst ", style="bold")
    text.append(visible(target), style="bold yellow")
    text.append("?\n\n")
    first = "its session's initialize, then " if handshake else ""
    text.append(
        f"This sends {first}the recorded request to the server again: whatever it does happens again.\n"
    )
    text.append("Enter or y replays, Esc or n cancels.", style="dim")
    return text


class ConfirmReplay(ModalScreen[bool]):
    """Yes (Enter, y) or no (Esc, n) to one replay; dismissed with the answer."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,y", "answer(True)", "Replay"),
        Binding("escape,n", "answer(False)", "Cancel"),
    ]

    def __init__(self, chain: str, what: str, target: str, *, handshake: bool = False) -> None:
        super().__init__()
        self.text = question(chain, what, target, handshake)

    def compose(self) -> ComposeResult:
        """The question in a box."""
        with Vertical(id="confirm-box"):
            yield Static(self.text, id="confirm-text")

    def action_answer(self, replay: bool) -> None:
        """Close with the answer."""
        self.dismiss(replay)
