"""The help screen: every key and the filter language, reachable with ? from anywhere."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# mcp-proxy — keys

| key | where | what |
|---|---|---|
| ↑ ↓ PgUp PgDn | chain list | move (moving up stops following) |
| Enter | chain list | open the chain's tree |
| Enter | tree | open the message (a request/response pair opens its request) |
| Space | tree | fold or unfold a branch |
| Tab / Shift+Tab | anywhere | next / previous pane |
| / | main | filter (Enter applies, Esc back to the list) |
| f | main | follow the newest chain |
| p | main | pause: freeze the view; resume applies what arrived |
| x | main | clear the view (the proxy keeps its own history) |
| s | main | sessions view: who holds which session, init → expiry → re-init |
| r | main | replay the chain against the upstream (asks first), shown beside its recording |
| e | message | expand long bodies |
| c | tree, message | copy the message as JSON-RPC (its whole body) to the clipboard |
| C | tree, message | copy its request as a curl command (secrets as `$MCP_…` placeholders) |
| w | message | save the message as JSON in the current directory |
| [ ] | message | previous / next message of the chain |
| Esc | message, replay, help | back |
| F | anywhere | fault rules: `a` add, `d` delete, Esc back |
| i | anywhere | intercept: hold messages matching a rule (starts from the filter when it picks messages) |
| I | anywhere | intercept rules and held messages (the status bar says "N held") |
| E | not held | the proxy's own log (`--tui`): warnings, rules put in force, what it said at start |
| f | held | forward the held message unchanged |
| e / E | held | edit it here / in `$EDITOR`, then forward the edit (Ctrl+S sends, Esc cancels) |
| d | held | drop it (the sender gets a JSON-RPC error, or nothing for a notification) |
| a | held | answer it: a result (or an error) typed in, sent instead of forwarding |
| D | held | delete the highlighted intercept rule (what it holds goes on unchanged) |
| ? F1 | anywhere | this help |
| q | anywhere | quit (with messages held, the first q says what becomes of them; q again quits) |

# Filter language

Terms are ANDed; `-` before a term negates it; values match exactly or as a glob (`*`, `?`).

- `method:tools/call` `tool:ask_*` `name:res://ask` — method, tool name, any name/uri
- `status:cancelled` (pending, waiting_client, parked, ok, error, cancelled, incomplete; `waiting` for short)
- `era:legacy` (legacy, modern, unknown — either side) `mode:legacy_to_mrtr`
- `bridged` `-bridged` `invalid`
- `duration:>500ms` (`>`, `>=`, `<`, `<=`, `=`; ms, s, m)
- `method:"GET stream"` — quote a value with a space, as the Method column shows it
- `client:NAME` `session:PREFIX`
- `id:c6276a3-12` (a live chain's whole id), `id:*-12` (by its number), `id:r12` (in a capture)
- `body:octocat` `body:"two words"` `body:ask_*` — a substring (or glob) of any message body, as JSON
- free text: id, method, name, client, error, notes, and every message body

# Fault and intercept rules

A rule's MATCH is the filter language applied to one message, plus `dir:client` / `dir:server`
(who sent it) and `round:>1` (an MRTR retry); `status:`, `duration:`, `client:`, `id:` and free text
describe chains and are not part of it. A fault rule is `MATCH => ACTION [p=P] [count=N]`
(docs/faults.md); an intercept rule is `MATCH [timeout=30s]`: without `dir:` it holds a request and
its answer. A held message goes on unchanged when its time runs out. Edits are checked as JSON-RPC
(same kind and id) before they are sent, and refused with the reason otherwise. Messages are shown
redacted: a `<redacted …>` stand-in left in place is sent as the original value. A capture
(`--open`) is read-only.

# Badges

Eras: **L** legacy (initialize handshake), **M** 2026-07-28 (MRTR), **D** dual, **?** unknown,
client → server; **⇄** the proxy bridged between eras. In the tree each message says who sent it to
whom: `[client→server]` and `[server→client]` were relayed unchanged (pass-through);
`[client→proxy]` and `[server→proxy]` were received by the proxy; `[proxy→client]` and
`[proxy→server]` (magenta) the proxy made itself: a bridge's requests, answers and
acknowledgements, the session it minted, or a refusal. **✎** beside a chain's status: the proxy
changed its traffic (a fault, an intercept's edit, drop or answer); the tree's first lines say how,
and a changed message shows on both legs, as its sender sent it and as its receiver got it. A
headline's `held by the proxy` is the time a delay or an intercept held its messages.
"""


class HelpScreen(ModalScreen[None]):
    """Keys, the filter language and what the badges mean."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Close"),
        Binding("question_mark", "app.pop_screen", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        """The help text in a scrollable box."""
        with VerticalScroll(id="help-box"):
            yield Markdown(HELP)
