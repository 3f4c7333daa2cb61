"""The message view: headers and highlighted JSON of one message, and what the other side saw.

A message a bridge rewrote has counterparts on the other side of the proxy (`ui.timeline.counterparts`);
they are shown beside it on a wide terminal and below it on a narrow one. Long bodies stop at a line
limit with a marker saying how much is hidden; the screen's expand key lifts the limit.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Container, VerticalScroll
from textual.widgets import Static

from proxy.flows.events import ChainSummary, MessageRecord, Side
from proxy.wire.visible import visible
from ui.render import DEFAULT_BODY_LINES, message_header, message_label, pretty_json, route

OTHER_SIDE_LINES = 60
"""Lines of each counterpart's body shown before expanding."""


def _title(record: MessageRecord, bridged: bool) -> Text:
    sender, _ = route(record, bridged)
    made = "  — made by the proxy" if sender == "proxy" else ""
    if record.side is Side.BOTH and not made:
        return Text("client and server saw the same bytes (pass-through)", style="bold")
    if record.side is not Side.UPSTREAM:
        return Text(f"what the client saw (client ⇄ proxy){made}", style="bold cyan")
    return Text(f"what the server saw (proxy ⇄ server){made}", style="bold yellow")


def _body(record: MessageRecord, max_lines: int | None) -> list[RenderableType]:
    body = pretty_json(record.body, max_lines)
    parts: list[RenderableType] = []
    if body.text:
        shown = visible(body.text, lines=True)
        parts.append(Syntax(shown, "json", theme="monokai", word_wrap=True, background_color="default"))
    else:
        parts.append(Text("(no body)", style="dim"))
    if body.hidden_lines:
        more = "1 more line" if body.hidden_lines == 1 else f"{body.hidden_lines} more lines"
        marker = f"… {more} of {body.total_lines} — press e to expand"
        parts.append(Text(marker, style="bold yellow"))
    if record.truncated:
        parts.append(Text("… the proxy truncated this body at its capture limit", style="bold yellow"))
    return parts


def _headers(record: MessageRecord, summary: ChainSummary) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for name, value in message_header(record, summary):
        table.add_row(name, value)
    return table


def render_message(record: MessageRecord, summary: ChainSummary, *, expanded: bool) -> Group:
    """The main pane: title, header lines, body (cut unless expanded)."""
    limit = None if expanded else DEFAULT_BODY_LINES
    return Group(_title(record, summary.bridged), _headers(record, summary), Text(""), *_body(record, limit))


def render_others(others: list[MessageRecord], *, expanded: bool, bridged: bool = True) -> Group:
    """The other pane: each counterpart's one-line label and body."""
    if not others:
        return Group(Text("(nothing on the other side)", style="dim"))
    limit = None if expanded else OTHER_SIDE_LINES
    parts: list[RenderableType] = [_title(others[0], bridged)]
    for other in others:
        parts.append(message_label(other, bridged))
        parts.extend(_body(other, limit))
        parts.append(Text(""))
    return Group(*parts)


class MessageView(Container):
    """Two scrollable panes: the chosen message and its counterparts on the other side."""

    def compose(self) -> ComposeResult:
        """The two panes (the second hidden when nothing was rewritten)."""
        with VerticalScroll(id="this-side"):
            yield Static(id="this-body")
        with VerticalScroll(id="other-side"):
            yield Static(id="other-body")

    def show(
        self, record: MessageRecord, summary: ChainSummary, others: list[MessageRecord], *, expanded: bool
    ) -> None:
        """Render one message and its counterparts."""
        self.query_one("#this-body", Static).update(render_message(record, summary, expanded=expanded))
        other = self.query_one("#other-side", VerticalScroll)
        other.display = bool(others)
        self.query_one("#other-body", Static).update(
            render_others(others, expanded=expanded, bridged=summary.bridged)
        )
