"""The replay screen: a recorded chain and its replay side by side, the first difference marked.

Each side lists the chain's client-side messages in order (what the comparison compared), numbered
as the difference names them; the differing message is marked on both sides and the first line says
how the replay went (`same`, `differs: message 3 (tools/call result) result.content[0].text: ...`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar, Final

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from proxy.flows.events import MessageRecord
from proxy.record.replay_compare import MISSING, ChainNormaliser, client_side
from proxy.record.replay_outcome import ChainOutcome
from proxy.wire.visible import visible

BODY_CHARS: Final = 4000
"""Characters of one message's JSON shown before it is cut (the message screen shows it whole)."""

STATUS_STYLE: Final = {"same": "green", "differs": "bold red", "failed": "bold red", "skipped": "yellow"}


def side_text(title: str, records: Sequence[MessageRecord], marked: int | None) -> Text:
    """One side: its title, then each client-side message numbered, the `marked` one (from 1) in red."""
    out = Text(title + "\n", style="bold")
    labels = ChainNormaliser()
    shown = client_side(records)
    if not shown:
        out.append("(no message)\n", style="dim")
    for number, record in enumerate(shown, start=1):
        label = visible(labels.label(record))
        style = "bold red" if number == marked else ""
        out.append(f"{number}. {label}  ", style=style or "bold")
        out.append(f"[{record.direction.value.replace('_', ' ')}]\n", style="dim")
        body = json.dumps(record.body, indent=2, ensure_ascii=False, default=str)
        if len(body) > BODY_CHARS:
            body = body[: BODY_CHARS - 3] + "..."
        out.append(visible(body, lines=True) + "\n\n", style="red" if number == marked else "")
    return out


def headline(outcome: ChainOutcome) -> Text:
    """The screen's first line: the chain and how its replay went."""
    style = STATUS_STYLE.get(outcome.status, "")
    if outcome.setup and outcome.status == "differs":
        style = "yellow"
    text = Text(f"replay of {visible(outcome.chain)} ", style="bold")
    text.append(visible(outcome.line().partition(": ")[2] or outcome.status), style=style)
    if outcome.replayed_chain:
        text.append(f"   (replayed as {visible(outcome.replayed_chain)})", style="dim")
    return text


class ReplayScreen(Screen[None]):
    """A recorded chain (left) and its replay (right); escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]
    DEFAULT_CSS = """
    #replay-title { height: auto; padding: 0 1; }
    #replay-sides { height: 1fr; }
    #replay-recorded, #replay-replayed { width: 1fr; padding: 0 1; border-right: vkey $panel; }
    """

    def __init__(self, outcome: ChainOutcome) -> None:
        super().__init__()
        self.outcome = outcome

    def compose(self) -> ComposeResult:
        """The headline, both sides, the footer."""
        outcome = self.outcome
        found = outcome.difference
        old = found.index if found is not None and found.recorded is not MISSING else None
        new = found.replayed_index if found is not None else None
        yield Static(headline(outcome), id="replay-title")
        with Horizontal(id="replay-sides"):
            with VerticalScroll(id="replay-recorded"):
                yield Static(side_text(f"recorded {outcome.chain}", outcome.recorded, old))
            with VerticalScroll(id="replay-replayed"):
                title = f"replayed {outcome.replayed_chain or '(no chain)'}"
                yield Static(side_text(title, outcome.replayed, new))
        yield Footer(compact=True)
