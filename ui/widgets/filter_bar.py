"""The filter bar: an input for the query language (see `proxy.flows.query`), debounced while typing.

Enter applies the filter at once and Esc leaves it as typed; either way the main screen gives the
focus back to the chain list, so the list's keys (and a second `/`) act as keys again.
"""

from __future__ import annotations

from textual.timer import Timer
from textual.widgets import Input

from ui.messages import FilterChanged

PLACEHOLDER = "/ filter: method:tools/call tool:NAME status:error era:legacy bridged duration:>500ms text"
DEBOUNCE = 0.25
"""Seconds of quiet typing before the filter applies (Enter applies at once)."""


class FilterBar(Input):
    """Posts `FilterChanged` a moment after typing stops, or at once on Enter."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(placeholder=PLACEHOLDER, id=id)
        self._timer: Timer | None = None
        self._sent: str | None = None

    def on_input_changed(self, event: Input.Changed) -> None:
        """Restart the debounce timer."""
        event.stop()
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(DEBOUNCE, self._send)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: apply now (the event goes on to the screen, which takes the focus back to the list)."""
        self._send()

    def _send(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.value != self._sent:
            self._sent = self.value
            self.post_message(FilterChanged(self.value))
