"""Editing a held message before it goes out: in the TUI (a TextArea) or in `$EDITOR`.

Both check the edit with the proxy's own JSON-RPC validation (`ui.held_edit`) before anything is sent:
an invalid edit stays in the editor with the reason and is never sent, and a refusal from the proxy
(its own checks, a message already released) is shown the same way. The message is shown redacted, as
the proxy gives it; the editor says that a stand-in left in place goes out as the original value.

A held message waits only until its deadline, when the proxy forwards it unchanged; the editor
counts down to it every second and, once the message left the held list while the editor was open,
says how, as the proxy lists it: its timeout forwarded it, its client left (nothing was sent),
another TUI or a script decided, its rule was deleted, or the proxy drained.

`$EDITOR` gets a temporary file only this user can read (0600), removed as soon as the editor
returns. The editor runs in a thread while the app is suspended and repaints are held, so a proxy
running in this process keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static, TextArea

from ui.desk import Decision, DeskError, Held, Intercepts, Released, RuleDesk
from ui.held_edit import STAND_IN_NOTE, EditRefused, editable_text, parse_edit
from ui.messages import HeldDecided
from ui.render import clock

EDITOR_SECONDS = 3600.0
"""Longest an external editor may stay open before the edit is abandoned (the held message's own
deadline has usually passed long before)."""


def countdown(held: Held, now: float, *, gone: bool = False, release: Released | None = None) -> Text:
    """How long the held message still waits, or how it left the held list: `release` as the proxy
    lists it, else a guess from the deadline (`gone`: it left the list; a proxy that lists no
    releases)."""
    timeout = max(held.deadline - held.held_at, 0.0)
    left = held.deadline - now
    if release is not None:
        return Text(_released_text(release, timeout), style="bold red")
    if left > 0 and not gone:
        style = "bold yellow" if left <= 10 else ""
        return Text(
            f"the proxy forwards it unchanged in {left:.0f}s (intercept timeout {timeout:g}s)", style=style
        )
    if gone and left > 1:  # left well before its deadline: someone else decided
        return Text(
            "already released (by another TUI or a script): Ctrl+S can no longer send this",
            style="bold red",
        )
    return Text(
        f"released by the intercept timeout ({timeout:g}s) at {clock(held.deadline)}: the proxy forwarded "
        "it unchanged, without this edit",
        style="bold red",
    )


_DONE = {
    "forward": "forwarded",
    "forward_edited": "forwarded edited",
    "drop": "dropped",
    "answer": "answered",
}


def _released_text(release: Released, timeout: float) -> str:
    at = clock(release.at)
    if release.decision == "abandoned":
        return (
            f"abandoned at {at}: its exchange ended (the client left) while it was held, so the proxy "
            "sent it nowhere"
        )
    if release.by == "timeout":
        return (
            f"released by the intercept timeout ({timeout:g}s) at {at}: the proxy forwarded it unchanged, "
            "without this edit"
        )
    if release.by == "rule_deleted":
        return (
            f"released at {at} when its rule was deleted: the proxy forwarded it unchanged, without this edit"
        )
    if release.by == "drain":
        return f"released at {at} as the proxy drained: it forwarded it unchanged, without this edit"
    who = "another TUI" if release.by == "tui" else "a script (the admin API)"
    done = _DONE.get(release.decision, release.decision)
    return f"already {done} at {at} by {who}: Ctrl+S can no longer send this"


class HeldEditor(ModalScreen[bool]):
    """The held message (or an answer to it) as JSON; Ctrl+S checks and sends, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "send", "Send", priority=True),
        Binding("escape", "cancel", "Cancel", priority=True),
    ]

    def __init__(
        self, desk: RuleDesk, held: Held, text: str, *, answer: bool = False, reason: str | None = None
    ) -> None:
        super().__init__()
        self.desk = desk
        self.held = held
        self.text = text
        self.answer = answer
        self.reason = reason
        self.gone = False
        """The proxy no longer holds the message (its timeout, or another decision)."""
        self.release: Released | None = None
        """How it left the held list, as the proxy lists it (None: not known, or still held)."""

    def compose(self) -> ComposeResult:
        """Title, the note on redacted values, the editor, the reason line, the footer."""
        what = "answer" if self.answer else "edit"
        held = self.held
        title = f"{what} {held.label}: {held.kind} {held.method or ''} from the {held.direction}".rstrip()
        with Vertical(id="editor-box"):
            yield Static(Text(f"{title} — Ctrl+S sends, Esc cancels", style="bold"), id="editor-title")
            yield Static(Text(f"shown redacted: {STAND_IN_NOTE}", style="dim"), id="editor-note")
            yield Static(
                countdown(held, time.time(), gone=self.gone, release=self.release), id="editor-countdown"
            )
            yield TextArea(self.text, id="editor-text", soft_wrap=True, show_line_numbers=True)
            yield Static(id="editor-error")
            yield Footer(compact=True)

    def on_mount(self) -> None:
        """Focus the text; show why an edit from `$EDITOR` came back here, if it did."""
        self.query_one(TextArea).focus()
        if self.reason:
            self.refuse(self.reason)
        self.set_interval(1.0, self._tick)

    @property
    def deadline_text(self) -> str:
        """The countdown line as shown now."""
        return str(self.query_one("#editor-countdown", Static).content)

    def take(self, state: Intercepts) -> None:
        """A new state of the held messages: this one gone from it means it was released meanwhile."""
        if not any(held.id == self.held.id for held in state.held):
            self.gone = True
            self.release = next((r for r in state.released if r.id == self.held.id), self.release)
            self._tick()

    def _tick(self) -> None:
        # A state may come while the countdown is not there: before the screen is drawn (compose
        # shows `gone` then) or while it is being taken down.
        for line in self.query("#editor-countdown").results(Static):
            line.update(countdown(self.held, time.time(), gone=self.gone, release=self.release))

    @property
    def error(self) -> str:
        """The reason shown now ('' when none)."""
        return str(self.query_one("#editor-error", Static).content)

    def refuse(self, reason: str) -> None:
        """Show why the edit was not sent."""
        self.query_one("#editor-error", Static).update(Text(f"not sent: {reason}", style="bold red"))

    async def action_send(self) -> None:
        """Check the edit; send it when it is valid JSON-RPC, else stay with the reason."""
        text = self.query_one(TextArea).text
        try:
            message = parse_edit(text, self.held, answer=self.answer)
        except EditRefused as exc:
            self.refuse(str(exc))
            return
        decision = Decision("answer", answer=message) if self.answer else Decision("forward", message=message)
        try:
            await self.desk.decide(self.held.id, decision)
        except DeskError as exc:
            self.refuse(str(exc))
            return
        self.notify(f"{decision.describe()} {self.held.label}")
        self.app.post_message(HeldDecided(self.held.id))
        self.dismiss(True)

    def action_cancel(self) -> None:
        """Close without sending (the message stays held until its deadline)."""
        self.dismiss(False)


def editor_command() -> list[str]:
    """`$VISUAL`, else `$EDITOR`, else `vi`, split as a shell would."""
    return shlex.split(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")


def run_editor(text: str, command: list[str]) -> str | None:
    """Edit `text` in `command` on a 0600 temporary file, removed after; None when the editor failed.

    Raises OSError when the editor cannot be started.
    """
    fd, name = tempfile.mkstemp(prefix="mcp-proxy-held-", suffix=".json")  # mkstemp creates it 0600
    path = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        done = subprocess.run([*command, name], check=False, timeout=EDITOR_SECONDS)
        if done.returncode != 0:
            return None
        return path.read_text(encoding="utf-8")
    finally:
        path.unlink(missing_ok=True)


async def edit_externally(screen: Screen[None], desk: RuleDesk, held: Held) -> None:
    """`E`: the held message in `$EDITOR`; a valid edit is sent, an invalid one opens in `HeldEditor`."""
    app = screen.app
    command = editor_command()
    # A headless app (tests) has no terminal to hand over: the editor runs without suspending.
    suspended = contextlib.nullcontext() if app.is_headless else app.suspend()
    try:
        with app.batch_update(), suspended:
            edited = await asyncio.to_thread(run_editor, editable_text(held.message), command)
    except (OSError, subprocess.TimeoutExpired) as exc:
        screen.notify(f"cannot run {shlex.join(command)}: {exc}", severity="error")
        return
    if edited is None:
        screen.notify(f"{shlex.join(command)} failed or was quit without saving: nothing sent")
        return
    try:
        message = parse_edit(edited, held)
    except EditRefused as exc:
        app.push_screen(HeldEditor(desk, held, edited, reason=str(exc)))
        return
    try:
        await desk.decide(held.id, Decision("forward", message=message))
    except DeskError as exc:
        app.push_screen(HeldEditor(desk, held, edited, reason=str(exc)))
        return
    screen.notify(f"forwarded edited {held.label}")
    app.post_message(HeldDecided(held.id))
