"""A one-line prompt for a rule (a fault rule, an intercept rule) that stays open while the proxy refuses it.

The text goes to `submit`, which returns None when the proxy took the rule or the proxy's reason when
it did not; the reason is shown under the input and the text stays for the user to fix. Esc cancels.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

Submit = Callable[[str], Awaitable[str | None]]
"""Takes the rule text; None when it was accepted, else the reason it was refused."""


class RulePrompt(ModalScreen[bool]):
    """Title, input, a hint line and the last refusal; dismissed with True once a rule was accepted."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, value: str, hint: str, submit: Submit) -> None:
        super().__init__()
        self.title_text = title
        self.value = value
        self.hint = hint
        self.submit = submit

    def compose(self) -> ComposeResult:
        """The prompt box."""
        with Vertical(id="prompt-box"):
            yield Static(Text(self.title_text, style="bold"), id="prompt-title")
            yield Input(value=self.value, id="prompt-input")
            yield Static(Text(self.hint, style="dim"), id="prompt-hint")
            yield Static(id="prompt-error")

    def on_mount(self) -> None:
        """Focus the input with the cursor at its end."""
        self.query_one(Input).focus()

    @property
    def error(self) -> str:
        """The refusal shown now ('' when none)."""
        return str(self.query_one("#prompt-error", Static).content)

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: hand the rule over; stay with the reason if it was refused."""
        event.stop()
        text = event.value.strip()
        shown = self.query_one("#prompt-error", Static)
        if not text:
            shown.update(Text("type a rule, or Esc to cancel", style="bold red"))
            return
        reason = await self.submit(text)
        if reason is None:
            self.dismiss(True)
        else:
            shown.update(Text(reason, style="bold red"))

    def action_cancel(self) -> None:
        """Close without adding anything."""
        self.dismiss(False)
