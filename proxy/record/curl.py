"""Copy as curl: a recorded request as a shell command that sends it again, secrets as placeholders.

Pure: a chain's message records in, text out (the TUI's `C` key and `mcp-proxy export --curl` share
it). A message sent toward the server is copied as it is; anything else is copied as the request
whose HTTP exchange carried it (a result on a call's stream, an `elicitation/create` on it), so every
message of a chain has a command. Client-side requests go to the proxy's address by default (the
proxy records the replay as a new chain); `target="upstream"` sends them to the upstream URL instead,
past the proxy. A bridge's own upstream requests (`side` upstream) always go to the upstream (its
endpoint, with the query of the client request they serve), with the routing headers their body
implies, since the proxy does not record a leg's head.

Nothing redacted is ever restored: each `<redacted ...>` stand-in in a header, the query or the body
becomes an environment reference `"${MCP_TOKEN:?...}"`, which bash refuses to expand while unset with
a message saying what to set, and the comment above the command lists each one. Every other byte is
quoted for the shell, so any header value or body survives `bash -c` unchanged: single-quoted, except
the characters a terminal acts on (ESC, C1, bidi controls), which go as bash `$'\\xHH'` byte escapes so
that printing the command shows them rather than obeys them. The comment lines show every recorded
value through `visible`, so a value holding a newline stays inside its comment instead of becoming a
command of its own.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from proxy.flows.endpoint import Endpoint
from proxy.flows.events import LIVE_ID, Direction, HttpInfo, MessageRecord, Side
from proxy.flows.redact import unencodable
from proxy.record.batches import Batch
from proxy.record.body_secrets import HASHED, STAND_IN, BodySecret, body_secrets, ordinal
from proxy.wire.headers import HOP_BY_HOP, METHOD, NAME, PROTOCOL_VERSION, SESSION_ID, forwarded_fields
from proxy.wire.joined_headers import field_lines
from proxy.wire.relayed import relayed_client_headers
from proxy.wire.visible import UNSAFE, visible

Target = Literal["proxy", "upstream"]

DROPPED: Final = frozenset({"host", "content-length", "accept-encoding", *HOP_BY_HOP})
"""Headers curl sets itself (or that would ask for a compressed answer curl does not decode), and the
hop-by-hop ones, with what a `Connection` field names (`forwarded_fields`): the proxy never forwarded
those, so neither command sends them (toward the proxy, one would reach the upstream without the
`Connection` field that kept it to the client's connection)."""

_WELL_KNOWN: Final = {"authorization": "MCP_TOKEN", "mcp-session-id": "MCP_SESSION_ID"}
_MODERN_VERSION: Final = "io.modelcontextprotocol/protocolVersion"


class NoRequest(ValueError):
    """The message has no HTTP request to copy (a GET stream's event, a record with no exchange)."""


NO_URL_INSTEAD: Final = (
    "copy the message's JSON-RPC instead (mcp-proxy export --json; c in the TUI) and send it as one "
    "line on the server's stdin"
)
"""What to do with a request that reached no URL: a stdio client's, toward a stdio server too."""


def _is_url(address: str | None) -> bool:
    """Whether a recorded address is an HTTP URL (a stdio client's proxy address is `stdio`)."""
    return address is not None and urlsplit(address).scheme in ("http", "https")


@dataclass(slots=True)
class _Secrets:
    """The placeholders one command uses: variable name -> what it stands for."""

    names: dict[str, str] = field(default_factory=dict)
    session_from: str = ""
    """Where the session id comes from, said where the session's placeholder is explained."""
    by_stand_in: dict[str, str] = field(default_factory=dict)
    """The variable each hashed stand-in got: one secret is one variable wherever it recurs (a token
    the body echoes takes the `Authorization` header's), since equal hashes are equal values."""

    def var(self, preferred: str, what: str, stand_in: str | None = None) -> str:
        known = self.by_stand_in.get(stand_in) if stand_in is not None else None
        if known is not None:
            return known
        if preferred == _SESSION_VAR and self.session_from:
            what = self.session_from
        name, n = preferred, 1
        while name in self.names and self.names[name] != what:
            n += 1
            name = f"{preferred}_{n}"
        self.names[name] = what
        if stand_in is not None and HASHED.search(stand_in):
            self.by_stand_in[stand_in] = name
        return name


_SESSION_VAR: Final = _WELL_KNOWN["mcp-session-id"]


def _session_source(opener: str | None) -> str:
    where = "the Mcp-Session-Id header of the answer to the session's initialize"
    if opener is None:
        return f"the session id, from {where} (its command prints it, with -i)"
    if LIVE_ID.fullmatch(opener):  # a running proxy's chain: its command is copied where it is shown
        return f"the session id, from {where}, chain {opener} (C on its initialize copies that command)"
    return f"the session id, from {where}, chain {opener} (`mcp-proxy export --curl {opener}` prints it)"


def _env(name: str) -> str:
    if name == _SESSION_VAR:  # a recorded session has likely ended: a live one's id is wanted
        return f'"${{{name}:?set {name} to the id of a live session (see the comment above)}}"'
    return f'"${{{name}:?set {name} to the value the proxy redacted}}"'


_REQUEST_STATE_VAR: Final = "MCP_REQUEST_STATE"
_REQUEST_STATE_WHAT: Final = (
    "the requestState of the input_required answer this retry follows (run the chain's earlier "
    "command and take it from that answer)"
)


def _spliced(
    pattern: re.Pattern[str], text: str, plain: Callable[[str], str], found: Callable[[re.Match[str]], str]
) -> str:
    """`text` as shell text: each match of `pattern` rendered by `found`, the runs between by `plain`."""
    parts: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        if match.start() > last:
            parts.append(plain(text[last : match.start()]))
        parts.append(found(match))
        last = match.end()
    if last < len(text) or not parts:
        parts.append(plain(text[last:]))
    return "".join(parts)


def _byte_escapes(match: re.Match[str]) -> str:
    return "$'" + "".join(f"\\x{byte:02x}" for byte in match.group().encode()) + "'"


def _quoted(literal: str) -> str:
    """A literal as shell text: single-quoted runs, and each character a terminal acts on as a bash
    `$'...'` escape of its UTF-8 bytes (exact in any locale, and harmless to print)."""
    if UNSAFE.search(literal) is None:
        return shlex.quote(literal)
    return _spliced(UNSAFE, literal, shlex.quote, _byte_escapes)


def _word(text: str, secrets: _Secrets, preferred: str, what: str | Mapping[str, BodySecret]) -> str:
    """One shell word: literal runs quoted, each stand-in an environment reference (a
    `requestState` one named for what it is, since it comes from the previous answer, not a secret).
    `what` says what every stand-in is, or (a body's) the variable and description of each one."""

    def reference(found: re.Match[str]) -> str:
        if found.group().startswith("<requestState "):
            return _env(secrets.var(_REQUEST_STATE_VAR, _REQUEST_STATE_WHAT))
        if isinstance(what, str):
            return _env(secrets.var(preferred, what, found.group()))
        known = what.get(found.group(), BodySecret(preferred, "a redacted value in the body"))
        return _env(secrets.var(known.var, known.what, found.group()))

    return _spliced(STAND_IN, text, _quoted, reference)


def _repeated_secrets(value: str) -> list[str]:
    """The stand-ins of a header the client sent more than once with secret values (recorded joined
    with `, `), one per value; empty for any other header value."""
    parts = value.split(", ")
    if len(parts) < 2 or not all(STAND_IN.fullmatch(part) for part in parts):
        return []
    return parts


def _url_word(url: str, secrets: _Secrets) -> str:
    """The URL as one shell word, each redacted query value a placeholder of its own, named for its
    parameter in the comment (the upstream's own query and the client's may each hold one)."""
    base, mark, query = url.partition("?")
    keys = list(dict.fromkeys(found.group() for found in STAND_IN.finditer(base)))

    def path_key(found: re.Match[str]) -> str:
        what = "a redacted segment of the URL's path (a key in it)"
        if len(keys) > 1:  # different keys: a placeholder each, the same key always the same one
            which = ordinal(keys.index(found.group()) + 1)
            what = f"the {which} of {len(keys)} redacted segments of the URL's path"
        return _env(secrets.var("MCP_URL_SECRET", what, found.group()))

    parts = [_spliced(STAND_IN, base + mark, _quoted, path_key)]
    for i, pair in enumerate(query.split("&") if query else []):
        name = pair.split("=", 1)[0]
        what = f"the redacted value of query parameter {name!r} (parameter {i + 1} of the query)"
        parts.append(_word(("&" if i else "") + pair, secrets, "MCP_QUERY_SECRET", what))
    return "".join(parts)


def _var_for_header(name: str) -> str:
    return _WELL_KNOWN.get(name.lower()) or "MCP_" + re.sub(r"[^A-Za-z0-9]+", "_", name).upper().strip("_")


def request_for(messages: list[MessageRecord], record: MessageRecord) -> MessageRecord:
    """The request to copy for `record`: itself when sent toward the server, else the request of the
    HTTP exchange that carried it: its message, or for a request without a body (a GET stream, a
    DELETE) the record of its head (raises NoRequest when there is neither)."""
    if record.direction is Direction.TO_SERVER:
        return record
    sent = [m for m in messages if m.exchange == record.exchange and m.direction is Direction.TO_SERVER]
    found = next((m for m in sent if m.kind != "http"), None) or next(
        (m for m in sent if bodiless_request(m)), None
    )
    if found is None:
        raise NoRequest(f"message {record.seq} came on a stream whose request was not recorded")
    return found


def bodiless_request(record: MessageRecord) -> bool:
    """Whether `record` is the head of a request without a body (a GET stream, a DELETE)."""
    return record.kind == "http" and record.http is not None and bool(record.http.method)


def _plain_body_of(messages: list[MessageRecord], request: MessageRecord) -> MessageRecord | None:
    """The body of a plain HTTP request (to a path beside the MCP endpoint: OAuth's `/token`), whose
    head's record carries none: its body is filed as it is, in a record of its own without a head."""
    if not bodiless_request(request):
        return None
    return next(
        (
            m
            for m in messages
            if m is not request
            and m.exchange == request.exchange
            and m.direction is Direction.TO_SERVER
            and m.kind == "http"
            and m.body is not None
            and not (m.http is not None and m.http.method)
        ),
        None,
    )


def _beside_endpoint(request: MessageRecord, upstream_url: str | None) -> bool:
    """Whether `request` went to a path beside the MCP endpoint the recorded upstream names (plain
    HTTP: a GET there is a document or a redirect, not an event stream)."""
    http = request.http
    if http is None or not http.path or upstream_url is None:
        return False
    return Endpoint.of_upstream(upstream_url).is_plain(http.path)


def _head_of(messages: list[MessageRecord], record: MessageRecord) -> MessageRecord | None:
    """The record carrying the HTTP head of `record`'s request: its own, one of its exchange's, else the
    nearest earlier one of the chain on its side (a later POST of a session borrows the session's)."""
    if record.http is not None and record.http.method:
        return record
    heads = [m for m in messages if m.http is not None and m.http.method and m.side is record.side]
    same = next((m for m in heads if m.exchange == record.exchange), None)
    if same is not None:
        return same
    earlier = [m for m in heads if m.seq < record.seq]
    return earlier[-1] if earlier else (heads[0] if heads else None)


def _client_head(messages: list[MessageRecord], request: MessageRecord) -> MessageRecord | None:
    """For what the proxy sent upstream in place of a relayed request (an intercept's edit), the
    client's record of that exchange carrying its head: the edit went with the client's headers."""
    return next(
        (
            m
            for m in messages
            if m.exchange == request.exchange
            and m.side is not Side.UPSTREAM
            and m.http is not None
            and m.http.method
        ),
        None,
    )


def _edited(messages: list[MessageRecord], request: MessageRecord) -> MessageRecord | None:
    """The edit the server got in place of this client's request, if an intercept made one."""
    if request.side is Side.UPSTREAM or request.jsonrpc_id is None:
        return None
    return next(
        (
            m
            for m in messages
            if m.side is Side.UPSTREAM
            and m.direction is Direction.TO_SERVER
            and m.exchange == request.exchange
            and m.jsonrpc_id == request.jsonrpc_id
        ),
        None,
    )


def _body_text(record: MessageRecord) -> str:
    body: Any = record.body
    if body is None:
        return ""
    return body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _leg_headers(messages: list[MessageRecord], record: MessageRecord) -> list[tuple[str, str]]:
    """The headers a bridge's upstream request carried: the routing headers its body implies (for a
    2026-07-28 server), or for a legacy one the session and the version its handshake agreed (when the
    chain holds that handshake; its own `initialize` carries neither), then the client headers a bridge
    relays (`Authorization`, custom ones), from the latest client head of the chain before it."""
    body = record.body if isinstance(record.body, dict) else {}
    params = body.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    version = meta.get(_MODERN_VERSION) if isinstance(meta, dict) else None
    if isinstance(version, str) and record.method:
        out = [(PROTOCOL_VERSION, version), (METHOD, record.method)]
        name = params.get("name") or params.get("uri")
        if isinstance(name, str) and name.isascii():
            out.append((NAME, name))
    elif record.method == "initialize":  # the proxy's own handshake: it opens the session
        out = []
    else:
        out = [(SESSION_ID, "<redacted: the upstream session the proxy held>")]
        agreed = _agreed_version(messages)
        if agreed is not None:
            out.insert(0, (PROTOCOL_VERSION, agreed))
    latest = _client_head_before(messages, record)
    return out + relayed_client_headers(latest.headers.items()) if latest is not None else out


def _client_head_before(messages: list[MessageRecord], record: MessageRecord) -> HttpInfo | None:
    """The head of the client's latest request before a bridge's upstream request: the record of a
    leg names no client exchange, and a bridge sends the headers and query of the client request it
    serves, which is this one or, for a retry of a call, one with the same URL and headers."""
    heads = [
        m.http
        for m in messages
        if m.side is not Side.UPSTREAM and m.http is not None and m.http.method and m.seq < record.seq
    ]
    return heads[-1] if heads else None


def _leg_url(upstream: str, client: HttpInfo | None) -> str:
    """The URL of a bridge's own upstream request: the upstream's endpoint whatever path the client
    named (a bridge only serves the endpoint), the upstream URL's query, then the client's."""
    query = (client.path or "").partition("?")[2] if client is not None else ""
    return _upstream_url(upstream, f"/?{query}" if query else "/")


def _agreed_version(messages: list[MessageRecord]) -> str | None:
    """The protocol version the upstream's answer to the proxy's own `initialize` agreed, if the chain
    holds it (a legacy server's requests carry it as `MCP-Protocol-Version` from then on)."""
    for m in messages:
        body = m.body if isinstance(m.body, dict) else {}
        result = body.get("result")
        if m.side is Side.UPSTREAM and m.kind == "result" and isinstance(result, dict):
            version = result.get("protocolVersion")
            if isinstance(version, str) and version.isascii() and "serverInfo" in result:
                return version
    return None


def _url(base: str, path: str | None) -> str:
    """The proxy's listen address plus the path the client used (with its recorded query)."""
    return base.rstrip("/") + (path if path and path.startswith("/") else "/" + (path or ""))


def _upstream_url(upstream: str, path: str | None) -> str:
    """The upstream URL the proxy sent the client's request to: its path and query mapped as the proxy
    maps them (`/` stands for the upstream's endpoint; the upstream URL's query, then the client's).

    The same mapping as the upstream pool's request target (`proxy.framing.http.Upstream`), on the
    shown upstream URL, so a redacted query value stays a stand-in.
    """
    parts = urlsplit(upstream)
    client_path, _, client_query = (path or "").partition("?")
    base = parts.path or "/"
    mapped = base if client_path in ("", "/") else client_path
    queries = [q for q in (parts.query, client_query) if q]
    if len(queries) == 2 and queries[0] == queries[1]:
        del queries[1]
    return urlunsplit((parts.scheme, parts.netloc, mapped, "&".join(queries), ""))


def _waits(messages: list[MessageRecord], request: MessageRecord) -> list[str]:
    """Comments for a request that takes part in the server asking the client mid-call.

    A call whose stream carried the server's own requests waits, when sent again, for answers that
    only the chain's later commands give, so run as printed it never ends; and the server picks its
    request ids afresh on every run, so a recorded answer carries the old id.
    """
    if request.kind == "request":
        asked = [
            m
            for m in messages
            if m.exchange == request.exchange and m.direction is Direction.TO_CLIENT and m.kind == "request"
        ]
        if not asked:
            return []
        first = asked[0]
        return [
            f"# the server asked the client on this call's stream ({first.method} #{first.jsonrpc_id}): "
            "the call waits for the answer,",
            "# so run it in the background (append &) and send the answer with the next command",
        ]
    if request.kind in ("result", "error") and request.jsonrpc_id is not None:
        return [
            f"# answers the server's request #{request.jsonrpc_id}: a server numbers its requests afresh "
            "on each run, so give the body the id its request has now"
        ]
    return []


def _batched(batch: Batch) -> list[str]:
    """Comments for a request the client sent inside a JSON-RPC batch, which the command sends alone."""
    return [
        f"# the client sent this in a JSON-RPC batch of {batch.size} in one message body "
        f"({batch.members()}):",
        "# this command sends it alone, which the proxy and the server may answer otherwise "
        "(a server that takes no batches refuses the batch)",
    ]


def curl_command(
    messages: list[MessageRecord],
    record: MessageRecord,
    *,
    chain_id: str,
    proxy_url: str | None,
    upstream_url: str | None,
    target: Target = "proxy",
    session_opener: str | None = None,
    batches: Mapping[str, Batch] | None = None,
) -> str:
    """A bash command that sends `record`'s request again with its headers (see the module doc).

    `session_opener` is the id of the chain whose `initialize` opened the request's session, when the
    caller knows it: the comment then says which command's answer holds the session id to set.
    `batches` gives the JSON-RPC batch a client exchange carried (`proxy.record.batches`): a request
    sent in one is sent alone, and the comment says so.
    """
    request = request_for(messages, record)
    in_place = _client_head(messages, request) if request.side is Side.UPSTREAM else None
    leg = request.side is Side.UPSTREAM and in_place is None
    secrets = _Secrets(session_from="" if leg else _session_source(session_opener))
    headers: list[tuple[str, str]] = [("Content-Type", "application/json")]
    accept = "application/json, text/event-stream"
    if in_place is not None and in_place.http is not None:  # the edit a relayed request became
        client_http = in_place.http
        http_method = client_http.method or "POST"
        where = "upstream (what the proxy's intercept sent in place of the client's request)"
        url = _upstream_url(upstream_url, client_http.path) if upstream_url else None
        headers = forwarded_fields(field_lines(client_http.headers), DROPPED)
    elif leg:
        where = "upstream (the proxy's own request to it)"
        url = _leg_url(upstream_url, _client_head_before(messages, request)) if upstream_url else None
        headers += [("Accept", accept), *_leg_headers(messages, request)]
        http_method = "POST"
    else:
        head = _head_of(messages, request)
        http = head.http if head is not None else None
        http_method = (http.method if http is not None else None) or "POST"
        if target == "upstream":
            path = http.path if http else None
            where, url = (
                "upstream, past the proxy",
                _upstream_url(upstream_url, path) if upstream_url else None,
            )
        else:
            where, url = "proxy", _url(proxy_url, http.path if http else None) if proxy_url else None
        if http is not None:
            headers = forwarded_fields(field_lines(http.headers), DROPPED)
    if not url:
        raise NoRequest(f"the {target} address is not known (no proxy_info was recorded)")
    if url.startswith("stdio:"):
        instead = (
            NO_URL_INSTEAD
            if not _is_url(proxy_url)
            else "copy the client's request instead"
            if leg
            else "copy it toward the proxy instead (--to proxy)"
        )
        raise NoRequest(
            f"the upstream is a command the proxy ran (stdio): there is no URL to send this to; {instead}"
        )
    if not _is_url(url):
        raise NoRequest(
            "the client spoke to the proxy over stdio (mcp-proxy stdio): there is no URL to send this "
            f"to; {NO_URL_INSTEAD}"
        )
    opening = request.method == "initialize"  # -i: its answer's head holds the session id
    heads = opening or http_method == "DELETE"  # a DELETE's answer is its status line alone
    lines = [f"curl -sS -N{' -i' if heads else ''} -X {_quoted(http_method)} {_url_word(url, secrets)}"]
    for name, value in headers:
        masked = _repeated_secrets(value)
        if not masked:
            lines.append(f"-H {_word(f'{name}: {value}', secrets, _var_for_header(name), name)}")
            continue
        for i, one in enumerate(masked, 1):  # each value sent again as its own header, as recorded
            what = f"{name} (the {ordinal(i)} of the {len(masked)} sent)"
            lines.append(f"-H {_word(f'{name}: {one}', secrets, _var_for_header(name), what)}")
    sent = _plain_body_of(messages, request) or request
    body = _body_text(sent)
    if body:
        named = body_secrets(sent.body, body, known=secrets.by_stand_in.keys())
        data = _word(body, secrets, "MCP_BODY_SECRET", named)
        lines.append(f"--data-binary {data}")
    what = request.method or request.kind
    if bodiless_request(request) and request.http is not None:
        what = f"{http_method} {request.http.path or '/'}"
    ident = f" #{request.jsonrpc_id}" if request.jsonrpc_id is not None else ""
    comment = [f"# mcp-proxy: chain {chain_id}, message {request.seq} ({what}{ident}), sent to the {where}"]
    if http_method == "GET" and not _beside_endpoint(request, upstream_url):
        comment.append("# a GET stream: curl prints the server's events as they come, until it ends (Ctrl-C)")
    if sent.truncated and unencodable(sent.body):
        comment.append("# the proxy could not encode this body as JSON to record it: this is not the request")
    elif sent.truncated:
        comment.append("# the proxy cut this body at its capture limit: this is not the whole request")
    comment += _waits(messages, request)
    batch = (batches or {}).get(request.exchange) if request.side is not Side.UPSTREAM else None
    if batch is not None:
        comment += _batched(batch)
    edit = _edited(messages, request)
    if edit is not None:
        comment.append(
            f"# the server got an edit of it instead (message {edit.seq}, the proxy's intercept): "
            "C on that message copies what the server got"
        )
    if opening:
        comment.append(
            "# -i shows the answer's headers: its Mcp-Session-Id is what later commands take as "
            "MCP_SESSION_ID"
        )
    for name, what_for in secrets.names.items():
        comment.append(f"# set {name} first: {what_for} (redacted in the capture), e.g. export {name}=...")
    return "\n".join(visible(line) for line in comment) + "\n" + " \\\n  ".join(lines) + "\n"
