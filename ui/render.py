"""Pure render functions: flow data in, Rich `Text` (or plain strings) out.

Every word the TUI shows about a chain or a message is decided here, so widgets stay thin and the
wording is tested without an app. No clock: times are formatted from the events' own timestamps.
Whatever a client, the upstream or a capture chose (names, ids, methods, error messages, notes,
headers) is shown through `visible`: Rich passes ESC, C1 and bidi controls to the terminal as they are.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from proxy.flows.endpoint import is_plain_chain
from proxy.flows.events import DECIDED, ChainStatus, ChainSummary, Direction, MessageRecord, Side
from proxy.flows.proxy_notes import proxy_changes
from proxy.wire.joined_headers import field_lines
from proxy.wire.visible import visible
from ui.model import ChainEntry, SessionEntry
from ui.timeline import Node, Pair

ERA_LETTER = {"legacy": "L", "modern": "M", "dual": "D", "unknown": "?"}
ERA_STYLE = {"legacy": "bold yellow", "modern": "bold cyan", "dual": "bold green", "unknown": "dim"}
STATUS_WORD = {
    ChainStatus.OK: "ok",
    ChainStatus.ERROR: "error",
    ChainStatus.CANCELLED: "cancelled",
    ChainStatus.PENDING: "pending",
    ChainStatus.WAITING_CLIENT: "waiting",
    ChainStatus.PARKED: "parked",
    ChainStatus.INCOMPLETE: "incomplete",
}
STATUS_STYLE = {
    ChainStatus.OK: "green",
    ChainStatus.ERROR: "bold red",
    ChainStatus.CANCELLED: "dark_orange",
    ChainStatus.PENDING: "yellow",
    ChainStatus.WAITING_CLIENT: "magenta",
    ChainStatus.PARKED: "bold blue",
    ChainStatus.INCOMPLETE: "dim",
}
DEFAULT_BODY_LINES = 300
"""Lines of pretty JSON the message view shows before its 'expand' marker."""


def cell(value: str) -> Text:
    """A table cell shown as written: a DataTable reads a `str` cell as Rich markup, where a name such
    as `[/x]` stops the app and `[link=...]` makes a terminal hyperlink."""
    return Text(visible(value))


def tail_cell(ident: str, width: int) -> str:
    """An id cut to `width` from the left: a running proxy's chain ids share their start (the run
    tag, `cb00287-`) and differ in their number, and session ids in their end, so the end is what
    tells rows apart."""
    ident = visible(ident)
    return ident if len(ident) <= width else "…" + ident[-(width - 1) :]


def clock(ts: float) -> str:
    """Local wall-clock time of an event, to the second."""
    return time.strftime("%H:%M:%S", time.localtime(ts))


def duration(ms: float | None) -> str:
    """A short human duration: 850µs, 12ms, 1.25s, 2m03s; an em dash when unknown."""
    if ms is None:
        return "—"
    if ms < 1:
        return f"{ms * 1000:.0f}µs"
    if ms < 1000:
        return f"{ms:.0f}ms"
    if ms < 60000:
        return f"{ms / 1000:.2f}s"
    minutes, seconds = divmod(int(ms / 1000), 60)
    return f"{minutes}m{seconds:02d}s"


def size(n: int) -> str:
    """Bytes as 512B, 1.2K, 3.4M."""
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}K"
    return f"{n / 1024 / 1024:.1f}M"


def era_badge(era: str) -> Text:
    """One coloured letter per era: L legacy, M modern (2026-07-28), D dual, ? unknown."""
    return Text(ERA_LETTER.get(era, "?"), style=ERA_STYLE.get(era, "dim"))


def eras_cell(summary: ChainSummary) -> Text:
    """Client era -> upstream era, plus a bridge badge when the proxy converted between them; `http`
    for a plain HTTP request (a path other than the MCP endpoint), which speaks no era."""
    if is_plain_chain(summary.method, summary.name):
        return Text("http", style="dim")
    text = Text.assemble(era_badge(summary.client_era), ("→", "dim"), era_badge(summary.upstream_era))
    if summary.bridged:
        text.append(" ⇄", style="bold magenta")
    return text


def transports(summary: ChainSummary) -> str:
    """How each side was reached (`stdio → http`), or "" when both are Streamable HTTP (the usual)."""
    client, upstream = summary.client_transport, summary.upstream_transport
    if client == "http" and upstream == "http":
        return ""
    return visible(f"{client} → {upstream}")


CHANGED_MARK = "✎"
"""Beside a chain's status when the proxy changed its traffic (a fault, an intercept's edit, drop or
answer): what the peers exchanged there is not what they alone would have."""


def status_cell(summary: ChainSummary, continuation: str | None = None) -> Text:
    """The chain's status word in its colour (a parked continuation shows as parked), marked when the
    proxy changed the chain's traffic."""
    status = summary.status
    if continuation == "parked" and status not in DECIDED:
        status = ChainStatus.PARKED
    text = Text(STATUS_WORD[status], style=STATUS_STYLE[status])
    if summary.notes and proxy_changes(summary.notes):
        text.append(f" {CHANGED_MARK}", style=ROUTE_STYLE["proxy"])
    return text


def note_label(note: str, changed: bool) -> Text:
    """A chain note in the tree, above its messages: one that says the proxy changed the traffic
    stands out in the proxy's colour; any other (a resumed stream, a cancel) reads as an aside."""
    if changed:
        return Text.assemble(
            (f"{CHANGED_MARK} ", ROUTE_STYLE["proxy"]), (visible(note), ROUTE_STYLE["proxy"])
        )
    return Text(f"• {visible(note)}", style="italic dim")


def note_labels(summary: ChainSummary) -> list[Text]:
    """Every note of a chain as a tree line, in the order they were made."""
    changed = set(proxy_changes(summary.notes))
    return [note_label(note, note in changed) for note in summary.notes]


def target(summary: ChainSummary) -> str:
    """What the chain was about: tool, prompt or resource name, else empty."""
    return visible(summary.name or "")


def chain_cells(entry: ChainEntry) -> dict[str, Text | str]:
    """The chain table's cells for one chain, by column key."""
    s = entry.summary
    rounds = str(s.rounds) if s.rounds > 1 else ""
    return {
        "time": clock(s.started),
        "id": cell(s.id),
        "client": cell(s.client_name or ""),
        "method": cell(s.method or "(none)"),
        "name": cell(target(s)),
        "eras": eras_cell(s),
        "rounds": rounds,
        "status": status_cell(s, entry.continuation),
        "duration": Text(duration(s.duration_ms), justify="right"),
        "msgs": Text(str(s.messages), justify="right"),
        "bytes": Text(size(s.bytes_to_server + s.bytes_to_client), justify="right"),
    }


def chain_headline(summary: ChainSummary) -> Text:
    """The chain tree's root: what was called, through which mode, how it ended, and the time split."""
    text = Text.assemble(
        (visible(summary.method or "(none)"), "bold"),
        (f" {target(summary)}" if summary.name else "", "bold"),
        "  ",
        eras_cell(summary),
        f"  {summary.mode.value}  ",
        (f"{transports(summary)}  " if transports(summary) else "", "cyan"),
        status_cell(summary),
        f"  {duration(summary.duration_ms)}",
    )
    if summary.duration_ms is not None:
        held = f", held by the proxy {duration(summary.held_ms)}" if summary.held_ms else ""
        client = f", client {duration(summary.client_wait_ms)}" if summary.client_wait_ms else ""
        stream = f", stream open {duration(summary.stream_ms)}" if summary.stream_ms else ""
        spent = summary.upstream_ms
        upstream = "answered by the proxy" if spent is None else f"upstream {duration(spent)}"
        text.append(f"  ({upstream}{held}{client}{stream})", style="dim")
    if summary.error:
        text.append(f"  {visible(summary.error)}", style="red")
    return text


def outcome(record: MessageRecord | None) -> str:
    """A response in a few words: ok, input_required [keys], error -32602, an elicitation's action."""
    return visible(_outcome(record))


def _outcome(record: MessageRecord | None) -> str:
    if record is None:
        return "…"
    body = record.body if isinstance(record.body, dict) else {}
    if record.kind == "error":
        error = body.get("error")
        if not isinstance(error, dict):
            return "error"
        return f"error {error.get('code', '')} {error.get('message', '')}".strip()
    result = body.get("result")
    if not isinstance(result, dict):
        return record.kind
    if result.get("resultType") == "input_required":
        keys = result.get("inputRequests")
        names = ", ".join(keys) if isinstance(keys, dict) else "state only"
        return f"input_required [{names}]"
    if result.get("isError") is True:
        return "tool error (isError)"
    if isinstance(result.get("action"), str):
        return str(result["action"])
    return "ok"


ROUTE_STYLE = {"client": "cyan", "server": "yellow", "proxy": "bold magenta"}
"""Each route tag is coloured by who sent the message: what the proxy made itself stands out."""

PROXY_ANSWER_NOTE = "answered by the proxy"
"""The note on a pass-through answer the proxy gave itself (a refusal, a gateway error)."""


def answered_here(summary: ChainSummary) -> bool:
    """The proxy answered the chain's request itself and the upstream never saw it (a refusal, a 502
    for a server it cannot reach, a fault's answer): its request went no further than the proxy."""
    return summary.upstream_ms is None


def route(record: MessageRecord, bridged: bool = False, unrelayed: bool = False) -> tuple[str, str]:
    """Who sent the message, and to whom: `client`, `proxy` or `server` each.

    A bridge plays the server toward the client and the client toward the server, so everything it
    sends either way is its own making (a bridged `elicitation/create`, the `initialize` result with
    the session it minted, the answer built from `server/discover`, the bare HTTP acknowledgements);
    pass-through relays the peers' messages unchanged, except answers the proxy gave itself; a client's
    message in a chain the proxy answered itself (`unrelayed`, see `answered_here`) never reached the
    server.
    """
    if record.side is Side.UPSTREAM:
        return ("proxy", "server") if record.direction is Direction.TO_SERVER else ("server", "proxy")
    if record.direction is Direction.TO_SERVER:
        relayed = record.side is Side.BOTH and not unrelayed
        return ("client", "server") if relayed else ("client", "proxy")
    made = record.side is Side.CLIENT or bridged or record.note == PROXY_ANSWER_NOTE
    return ("proxy", "client") if made else ("server", "client")


def route_tag(record: MessageRecord, bridged: bool = False, unrelayed: bool = False) -> Text:
    """`[client→proxy]`, `[proxy→client]`, `[proxy→server]`, `[server→proxy]`, or for a message
    relayed unchanged `[client→server]` / `[server→client]`, coloured by its sender."""
    sender, receiver = route(record, bridged, unrelayed)
    return Text(f"[{sender}→{receiver}]", style=ROUTE_STYLE[sender])


def _arrow(record: MessageRecord) -> str:
    return "▶" if record.direction is Direction.TO_SERVER else "◀"


def message_label(record: MessageRecord, bridged: bool = False, unrelayed: bool = False) -> Text:
    """One message in the tree: arrow, who sent it to whom, kind, method or outcome, id, channel, size
    (`bridged`, `unrelayed`: the chain's, see `route`)."""
    what = record.method or (outcome(record) if record.kind in ("result", "error") else record.kind)
    http = record.http
    if record.kind == "http" and http is not None:
        # a response head (`HTTP 200`), or a bodiless request's own head (`GET /mcp`)
        request_line = " ".join(p for p in (http.method, http.path) if p)
        what = f"HTTP {http.status}" if http.status is not None or not request_line else request_line
    ident = visible(f" #{record.jsonrpc_id}") if record.jsonrpc_id is not None else ""
    kind = "" if what.startswith(f"{record.kind} ") else f"{record.kind} "  # not `error error -32050`
    shown = (visible(what), "bold")
    text = Text.assemble(
        f"{_arrow(record)} ", route_tag(record, bridged, unrelayed), visible(f" {kind}"), shown, ident
    )
    refused = refusal(record) if record.kind != "http" else None
    if refused is not None:
        text.append(f"  {refused}", style="red")
    text.append(f"  {record.channel.value} {size(record.size)}", style="dim")
    if record.truncated:
        text.append("  [truncated]", style="yellow")
    if record.note:
        text.append(f"  {visible(record.note)}", style="italic dim")
    return text


def refusal(record: MessageRecord) -> str | None:
    """`HTTP 404` when the upstream refused a bridge's leg at the HTTP level and this message came
    with that head: its JSON-RPC error alone does not say the request never reached a handler."""
    http = record.http
    if record.side is not Side.UPSTREAM or http is None or http.status is None or http.status < 400:
        return None
    return f"HTTP {http.status}"


_ASKER = {Side.UPSTREAM: "server asks", Side.CLIENT: "proxy asks client"}
"""Who asked a nested request: the server (of the proxy, on a bridge's upstream leg, or of the client
through pass-through) or the proxy (a bridge turning an `input_required` result into a request)."""


def unanswered(ended: ChainStatus | None, whole: bool = True) -> str:
    """What a request without an answer shows: `…` while its chain runs (one may still come), else
    that none came, with how the chain ended (a cancelled or lost call's upstream leg is over too).
    When the view did not keep all of the chain's messages (`whole` false) the answer may be among
    those let go, so an ended chain's request says its answer is not kept, not that none came."""
    if ended is None:
        return "…"
    if not whole:
        return f"answer not kept (chain {STATUS_WORD[ended]})"
    return f"no answer (chain {STATUS_WORD[ended]})"


def ended_status(summary: ChainSummary) -> ChainStatus | None:
    """The chain's status once it ended (no answer can come after), else None."""
    return summary.status if summary.status in DECIDED or summary.status is ChainStatus.INCOMPLETE else None


def pair_label(pair: Pair, ended: ChainStatus | None = None, whole: bool = True) -> Text:
    """A request/response pair: who asked what, how it ended, and who waited how long.

    A pair whose answer came in a later round (an MRTR->legacy bridge's upstream call, answered once
    the client's retry brought what the server asked) says so: its time holds the client's part. A
    question the server asked the bridge is answered by the proxy, from the client's retry, so its
    time is how long the answer took, not how long the client waited (the headline has that). A
    request its `ended` chain left unanswered says so, not `…` (`whole`: the view kept every message
    of the chain, so a missing answer is one that never came).
    """
    req = pair.request
    assert req is not None
    elapsed = pair.elapsed_ms
    method = visible(req.method or "?")
    if pair.role == "leg":
        head = Text.assemble(("upstream ", "yellow"), (method, "bold"))
        who = "upstream"
    elif pair.role == "nested":
        asker = _ASKER.get(req.side, "server asks client")
        head = Text.assemble((f"{asker} ", "magenta"), (method, "bold"))
        who = "answered after" if req.side is Side.UPSTREAM else "client waited"
    else:
        head = Text.assemble(("call ", "cyan"), (method, "bold"))
        who = "took"
    response = pair.response
    answer = outcome(response) if response is not None else unanswered(ended, whole)
    head.append(visible(f" #{req.jsonrpc_id}") + f" → {answer}")
    refused = refusal(response) if response is not None else None
    if refused is not None:
        head.append(f" ({refused})", style="red")
    if elapsed is not None and response is not None and response.round > req.round:
        head.append(f"  answered in round {response.round}, {duration(elapsed)} after", style="dim")
    elif elapsed is not None:
        head.append(f"  {who} {duration(elapsed)}", style="dim")
    return head


def node_label(
    node: Node,
    bridged: bool = False,
    start: float | None = None,
    ended: ChainStatus | None = None,
    whole: bool = True,
    unrelayed: bool = False,
) -> Text:
    """The label of any timeline node (`bridged`, `unrelayed`: the chain's, so the proxy's own
    messages, and those it did not relay, say so);
    given the chain's `start`, a message or pair begins with when it came (`+203ms`), so a call's
    progress, questions and answers read as a timeline; `ended`: how the chain ended, if it did;
    `whole`: whether the view kept all of the chain's messages."""
    if node.kind == "round":
        return Text(f"round {node.round}", style="bold")
    if node.kind == "pair" and node.pair is not None:
        label, first = pair_label(node.pair, ended, whole), node.pair.first
    else:
        assert node.message is not None
        label, first = message_label(node.message, bridged, unrelayed), node.message
    if start is None:
        return label
    return Text.assemble((f"{offset(first.ts - start):>7} ", "dim"), label)


def offset(seconds: float) -> str:
    """When something happened after the chain began, in one unit below a second: `+0ms`, `+0.3ms`,
    `+4.2ms`, `+203ms`, then `+1.25s`."""
    ms = max(0.0, seconds) * 1000
    if ms < 0.05:
        return "+0ms"
    return f"+{ms:.1f}ms" if ms < 10 else "+" + duration(ms)


@dataclass(frozen=True, slots=True)
class PrettyBody:
    """A message body as indented JSON, cut to a number of lines with a count of what was cut."""

    text: str
    total_lines: int
    hidden_lines: int


def pretty_json(body: Any, max_lines: int | None = DEFAULT_BODY_LINES) -> PrettyBody:
    """Indented JSON of a body (strings as they are), keeping at most `max_lines` lines."""
    if body is None:
        return PrettyBody("", 0, 0)
    full = body if isinstance(body, str) else json.dumps(body, indent=2, ensure_ascii=False, default=str)
    lines = full.splitlines()
    if max_lines is None or len(lines) <= max_lines:
        return PrettyBody(full, len(lines), 0)
    return PrettyBody("\n".join(lines[:max_lines]), len(lines), len(lines) - max_lines)


def full_json(body: Any) -> str:
    """The whole body as indented JSON (copy and save use this)."""
    return pretty_json(body, None).text


_LEG = {Side.CLIENT: "client ⇄ proxy", Side.UPSTREAM: "proxy ⇄ server", Side.BOTH: "relayed unchanged"}


def _leg(record: MessageRecord, unrelayed: bool) -> str:
    if unrelayed and record.side is Side.BOTH and record.direction is Direction.TO_SERVER:
        return "not relayed: the proxy answered it"
    return _LEG[record.side]


def message_header(record: MessageRecord, summary: ChainSummary) -> list[tuple[str, str]]:
    """Name/value lines above a message body: where it travelled, what it is, its HTTP head."""
    rows = [
        ("chain", f"{summary.id}  {summary.method or ''} {summary.name or ''}".rstrip()),
        ("side", f"{record.side.value} ({_leg(record, answered_here(summary))})"),
        ("from", "{} → {}".format(*route(record, summary.bridged, answered_here(summary)))),
        ("transport", transports(summary)),
        ("direction", record.direction.value.replace("_", " ")),
        ("channel", record.channel.value + (f"  sse id {record.sse_id}" if record.sse_id else "")),
        ("kind", record.kind + (f"  {record.method}" if record.method else "")),
        ("id", "" if record.jsonrpc_id is None else str(record.jsonrpc_id)),
        ("time", f"{clock(record.ts)}.{int(record.ts * 1000) % 1000:03d}"),
        ("round", str(record.round)),
        ("size", f"{record.size} bytes" + ("  (body truncated by the proxy)" if record.truncated else "")),
        ("exchange", record.exchange),
    ]
    if record.note:
        rows.append(("note", record.note))
    http = record.http
    if http is not None:
        line = " ".join(str(p) for p in (http.method, http.path, http.status, http.content_type) if p)
        rows.append(("http", line))
        rows.extend((f"  {name}", value) for name, value in field_lines(http.headers))
    return [(visible(name), visible(value)) for name, value in rows if value]


SESSION_WIDTH = 20
"""The sessions table's session column: a session id is cut from the left, since its end tells rows
apart (`upstream-2`, a redacted id's `hmac:12636f4d>`)."""


def session_cells(entry: SessionEntry) -> dict[str, Text]:
    """The sessions table's cells: whose session it is, what it declared, and its history."""
    history = " → ".join(state for _, state in entry.history)
    cells = {
        "session": tail_cell(entry.session, SESSION_WIDTH),
        "client": entry.client_name or "",
        "side": {"upstream": "upstream", "client": "proxy"}.get(entry.side, "client"),
        "principal": entry.principal or "",
        "caps": entry.capabilities or "",
        "version": entry.protocol_version or "",
        "state": f"{entry.state}, earlier run" if entry.earlier_run else entry.state,
        "opened": clock(entry.opened),
        "changed": clock(entry.changed),
        "history": history,
    }
    return {key: cell(value) for key, value in cells.items()}
