"""The intercept screen (`I`): the rules in force and the messages they hold, with a decision on each.

Held messages come from the app (its watcher reads them through the rule desk and hands each new
state to `take`); ages and the time left before the proxy forwards a message unchanged tick every
second. On the highlighted held message: `f` forward, `e` edit here, `E` edit in `$EDITOR`, `d`
drop, `a` answer; `i` adds a rule (the app's key), `D` deletes the highlighted rule.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from ui.desk import Decision, DeskError, Held, InterceptRule, Intercepts, RuleDesk
from ui.held_edit import answer_skeleton, editable_text
from ui.messages import HeldDecided
from ui.render import cell, tail_cell
from ui.screens.held_editor import HeldEditor, edit_externally

CHAIN_WIDTH = 8
"""The held table's chain column: enough for a live id's end (`…287-11`)."""

HELD_COLUMNS = (
    ("id", "Id", 4),
    ("left", "Left", 5),
    ("method", "Method", 16),
    ("dir", "Direction", 13),
    ("chain", "Chain", CHAIN_WIDTH),
    ("age", "Age", 5),
    ("kind", "Kind", 7),
    ("rule", "Rule", 4),
)
"""Ordered and sized so an 80-column terminal shows them all (with cell padding, 78 cells): what the
decision needs first (the time left before the message goes on unchanged, what it is, its chain); a
long method or `notification` is cut."""

DECIDED = ("forwarded", "dropped", "answered")
"""How the status line starts after a decision (kept while the list empties)."""


def direction_label(held: Held) -> str:
    """Who sent the held message and where it goes (`client→server`, `server→client`)."""
    to = {"upstream": "server", "client": "client"}.get(held.side)
    if to is None:
        to = "server" if held.direction == "client" else "client"
    return f"{held.direction or '?'}→{to}"


def seconds(value: float) -> str:
    """A short duration: `850ms`, `3.2s`, `75s`."""
    if value < 1:
        return f"{max(value, 0) * 1000:.0f}ms"
    return f"{value:.1f}s" if value < 10 else f"{value:.0f}s"


def held_cells(held: Held, now: float) -> dict[str, Text | str]:
    """One held message's row."""
    return {
        "id": cell(held.label),
        "dir": cell(direction_label(held)),
        "kind": cell(held.kind),
        "method": cell(held.method or "(answer)"),
        "rule": cell(held.rule),
        "age": seconds(now - held.held_at),
        "left": seconds(held.deadline - now),
        "chain": cell(tail_cell(held.chain or "", CHAIN_WIDTH)),
    }


NOTHING_HELD = "nothing held"
NO_RULE = "no intercept rule in force: i adds one"


class InterceptScreen(Screen[None]):
    """Intercept rules above, held messages below; decisions apply to the highlighted held message."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("f", "forward", "Forward"),
        Binding("e", "edit", "Edit"),
        Binding("E", "edit_external", "$EDITOR"),
        Binding("d", "drop", "Drop"),
        Binding("a", "answer", "Answer"),
        Binding("D", "delete_rule", "Delete rule"),
    ]

    def __init__(self, desk: RuleDesk, state: Intercepts) -> None:
        super().__init__()
        self.desk = desk
        self.state = state

    def compose(self) -> ComposeResult:
        """Title, rules, held messages, status line, footer."""
        yield Static(Text(f"intercept — {self.desk.description}", style="bold"), id="intercept-title")
        yield DataTable[Any](id="intercept-rules", cursor_type="row")
        yield DataTable[Any](id="held", cursor_type="row")
        yield Static(id="intercept-status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Columns, what the app knows now, a tick for ages and times left."""
        rules = self.rules_table
        rules.border_title = "rules"
        rules.add_column("Id", key="id", width=5)
        rules.add_column("Match", key="match")
        rules.add_column("Timeout", key="timeout", width=8)
        rules.add_column("Held", key="held", width=5)
        held = self.held_table
        held.border_title = "held messages"
        for key, title, width in HELD_COLUMNS:
            held.add_column(title, key=key, width=width)
        held.focus()
        self.take(self.state)
        self.set_interval(1.0, self._tick)

    @property
    def rules_table(self) -> DataTable[Any]:
        """The intercept rules."""
        return self.query_one("#intercept-rules", DataTable)

    @property
    def held_table(self) -> DataTable[Any]:
        """The held messages."""
        return self.query_one("#held", DataTable)

    @property
    def status(self) -> str:
        """The status line's text."""
        return str(self.query_one("#intercept-status", Static).content)

    def say(self, text: str, *, error: bool = False) -> None:
        """Put a line in the status line."""
        self.query_one("#intercept-status", Static).update(Text(text, style="bold red" if error else ""))

    # -- fed by the app -----------------------------------------------------------------------

    def take(self, state: Intercepts) -> None:
        """Redraw from a new state of the rules and held messages (cursors keep their message)."""
        self.state = state
        if not self.query("#held"):  # not composed yet: on_mount draws it
            return
        self._draw_rules(state.rules)
        self._draw_held(state.held)

    def _draw_rules(self, rules: tuple[InterceptRule, ...]) -> None:
        table = self.rules_table
        row = table.cursor_row
        table.clear()
        for rule in rules:
            table.add_row(
                cell(rule.id), cell(rule.match), seconds(rule.timeout_s), str(rule.held), key=rule.id
            )
        if rules:
            table.move_cursor(row=min(max(row, 0), len(rules) - 1), scroll=False)

    def _draw_held(self, held: tuple[Held, ...]) -> None:
        table = self.held_table
        chosen = self.selected
        table.clear()
        now = time.time()
        for item in held:
            cells = held_cells(item, now)
            table.add_row(*(cells[key] for key, _, _ in HELD_COLUMNS), key=item.id)
        ids = [item.id for item in held]
        if chosen is not None and chosen.id in ids:
            table.move_cursor(row=ids.index(chosen.id), scroll=False)
        if not held and not self.status.startswith(DECIDED):  # the last decision's line stays
            self.say(NOTHING_HELD if self.state.rules else NO_RULE)
        elif held and self.status in (NOTHING_HELD, NO_RULE):  # never "nothing held" under a held row
            self.say(f"{len(held)} held: f forwards, e edits, d drops, a answers")

    def _tick(self) -> None:
        now = time.time()
        table = self.held_table
        for item in self.state.held:
            cells = held_cells(item, now)
            for key in ("age", "left"):
                try:
                    table.update_cell(item.id, key, cells[key])
                except LookupError:  # redrawn meanwhile
                    break

    # -- decisions ----------------------------------------------------------------------------

    @property
    def selected(self) -> Held | None:
        """The highlighted held message."""
        held = self.state.held
        if not held or not self.query("#held"):
            return None
        row = self.held_table.cursor_row
        return held[row] if 0 <= row < len(held) else None

    def _chosen(self) -> Held | None:
        held = self.selected
        if held is None:
            self.say("no held message: a rule holds what it matches (i adds one)")
        return held

    async def decide(self, held: Held, decision: Decision) -> bool:
        """Send a decision; the reason shows when the proxy refuses it."""
        try:
            await self.desk.decide(held.id, decision)
        except DeskError as exc:
            self.say(f"{held.label} not released: {exc}", error=True)
            return False
        self.say(f"{decision.describe()} {held.label} ({held.method or held.kind})")
        self.app.post_message(HeldDecided(held.id))
        return True

    async def action_forward(self) -> None:
        """Forward the held message unchanged."""
        if (held := self._chosen()) is not None:
            await self.decide(held, Decision("forward"))

    async def action_drop(self) -> None:
        """Drop it (the proxy tells the sender as the protocol expects)."""
        if (held := self._chosen()) is not None:
            await self.decide(held, Decision("drop"))

    def action_edit(self) -> None:
        """Edit the held message here, then forward the edit."""
        if (held := self._chosen()) is not None:
            self.app.push_screen(HeldEditor(self.desk, held, editable_text(held.message)))

    def action_answer(self) -> None:
        """Answer it directly: a result (or an error) typed in, sent instead of forwarding."""
        if (held := self._chosen()) is None:
            return
        if not held.answerable:
            self.say(f"{held.label}: a {held.kind} from the {held.direction} has no answer", error=True)
            return
        self.app.push_screen(HeldEditor(self.desk, held, answer_skeleton(held), answer=True))

    async def action_edit_external(self) -> None:
        """Edit the held message in `$EDITOR`; an invalid edit opens here with the reason."""
        if (held := self._chosen()) is not None:
            await edit_externally(self, self.desk, held)

    async def action_delete_rule(self) -> None:
        """Take the highlighted rule out of force (what it held goes on unchanged)."""
        rules = self.state.rules
        row = self.rules_table.cursor_row
        if not rules or not 0 <= row < len(rules):
            self.say("no intercept rule to delete")
            return
        rule = rules[row]
        try:
            await self.desk.delete_intercept(rule.id)
        except DeskError as exc:
            self.say(f"cannot delete {rule.id}: {exc}", error=True)
            return
        self.say(f"{rule.id} deleted: {rule.match} (what it held is forwarded unchanged)")
        self.app.post_message(HeldDecided(None))
