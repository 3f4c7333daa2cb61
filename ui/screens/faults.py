"""The fault rules screen (`F`): the rules in force with how many faults each injected; add and delete.

Reads the rules through the app's rule desk when shown and every `REFRESH` seconds after (the
injected counts move with the traffic). A rule the proxy refuses keeps its prompt open with the
proxy's reason; a failed read or delete shows its reason on the screen's status line.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from ui.desk import DeskError, FaultRule, RuleDesk
from ui.render import cell
from ui.screens.rule_prompt import RulePrompt

REFRESH = 2.0
"""Seconds between reads of the rules while the screen is shown."""

HINT = (
    "MATCH => ACTION [p=P] [count=N]   e.g. tool:echo dir:client => error=-32050:staging says no\n"
    "actions: delay=800ms  error=CODE[:message]  drop  cut_after=N  duplicate  corrupt_state (docs/faults.md)"
)


class FaultScreen(Screen[None]):
    """Fault rules in force; `a` adds one, `d` deletes the highlighted one, Esc goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("a", "add", "Add rule"),
        Binding("d,delete", "delete", "Delete rule"),
    ]

    def __init__(self, desk: RuleDesk) -> None:
        super().__init__()
        self.desk = desk
        self.rules: list[FaultRule] = []

    def compose(self) -> ComposeResult:
        """Title, rules table, status line, footer."""
        yield Static(Text(f"fault rules — {self.desk.description}", style="bold"), id="faults-title")
        yield DataTable[Any](id="fault-rules", cursor_type="row")
        yield Static(id="faults-status")
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        """Columns, the first read, then a read every few seconds."""
        table = self.table
        table.add_column("Id", key="id", width=5)
        table.add_column("Rule", key="rule")
        table.add_column("Injected", key="injected", width=9)
        table.focus()
        await self.reload()
        self.set_interval(REFRESH, self.reload)

    @property
    def table(self) -> DataTable[Any]:
        """The rules table."""
        return self.query_one("#fault-rules", DataTable)

    @property
    def status(self) -> str:
        """The status line's text."""
        return str(self.query_one("#faults-status", Static).content)

    def say(self, text: str, *, error: bool = False) -> None:
        """Put a line in the status line."""
        self.query_one("#faults-status", Static).update(Text(text, style="bold red" if error else ""))

    async def reload(self) -> None:
        """Read the rules and redraw the table (the cursor keeps its row)."""
        try:
            rules = await self.desk.fault_rules()
        except DeskError as exc:
            self.say(f"cannot read the fault rules: {exc}", error=True)
            return
        self.rules = rules
        table = self.table
        row = table.cursor_row
        table.clear()
        for rule in rules:
            table.add_row(cell(rule.id), cell(rule.rule), str(rule.injected), key=rule.id)
        if rules:
            table.move_cursor(row=min(max(row, 0), len(rules) - 1), scroll=False)
        elif not self.status or self.status.startswith("cannot read"):
            self.say("no fault rule in force: a adds one")

    def action_add(self) -> None:
        """Prompt for a rule; the proxy's reason shows in the prompt when it refuses it."""

        async def submit(text: str) -> str | None:
            try:
                added = await self.desk.add_fault(text)
            except DeskError as exc:
                return str(exc)
            self.say(f"{added.id} in force: {added.rule}")
            await self.reload()
            return None

        self.app.push_screen(RulePrompt("add a fault rule (Enter adds, Esc cancels)", "", HINT, submit))

    async def action_delete(self) -> None:
        """Take the highlighted rule out of force."""
        if not self.rules or self.table.cursor_row < 0:
            self.say("no rule to delete")
            return
        rule = self.rules[min(self.table.cursor_row, len(self.rules) - 1)]
        try:
            await self.desk.delete_fault(rule.id)
        except DeskError as exc:
            self.say(f"cannot delete {rule.id}: {exc}", error=True)
            return
        self.say(f"{rule.id} deleted: {rule.rule}")
        await self.reload()
