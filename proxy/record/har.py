"""HAR 1.2: one entry per HTTP exchange, drafted as its messages arrive and written when it ends.

An exchange's draft collects what a capture or the chain store knows of it: the request head, the
messages either way (in order, each with the chain it joined), the response head, the SSE events,
its end. `render` turns a draft into a HAR entry: the request body and the response body are the
JSON text of the recorded messages (compact, already redacted and bounded; not the bytes on the wire),
an SSE response's text holds its events as `id:`/`data:` lines, and the custom `_mcp` field carries
what HAR has no word for: the chains, JSON-RPC ids, eras, mode, the side of the proxy the exchange
was on, and one element per message (an SSE event's included). `HarWriter` streams a HAR file: the
log's head, then entries one by one as they end, then the tail with the log's comment, so no export
holds more than the exchanges still open. `docs/export.md` describes every field.

Plain data and bytes: no I/O of its own (the writer is handed a binary stream), no clock.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import IO, Any, Final
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import orjson

from proxy import __version__
from proxy.flows.events import ChainSummary, Channel, Direction
from proxy.flows.observations import client_end, unusual_end
from proxy.flows.proxy_notes import proxy_changes
from proxy.flows.redact import unencodable
from proxy.wire.joined_headers import field_lines

_PHRASES: Final = {status.value: status.phrase for status in HTTPStatus}

HAR_VERSION: Final = "1.2"
CREATOR: Final = "mcp-debug-proxy"

SSE_CHANNELS: Final = frozenset({Channel.SSE, Channel.GET_SSE})
SSE_TYPE: Final = "text/event-stream"
JSON_TYPE: Final = "application/json"

_TO_SERVER: Final = Direction.TO_SERVER
_TO_CLIENT: Final = Direction.TO_CLIENT
"""Bound once: a member read through its enum class costs several times a module constant's, and
every message of an export is compared with them."""

DEFAULT_ENTRY_BYTES: Final = 8 * 1024 * 1024
"""Message bytes one draft keeps; past it, later messages are counted in `_mcp.dropped_messages`."""


@dataclass(slots=True)
class Carried:
    """One message an exchange carried (or, with `kind` None, an SSE event that carried none)."""

    t: float
    direction: Direction
    channel: Channel
    side: str
    kind: str | None
    raw: Any = None
    jsonrpc_id: int | str | None = None
    method: str | None = None
    size: int = 0
    sse_id: str | None = None
    note: str | None = None
    chain: str | None = None
    truncated: bool = False
    """The proxy cut its body at the capture limit, or could not encode it: `raw` is the
    `{"$truncated": ...}` or `{"$unencodable": ...}` stand-in."""


@dataclass(slots=True)
class EntryDraft:
    """What is known so far of one HTTP exchange: a client's with the proxy, or a bridge's upstream leg."""

    key: str
    side: str
    """`client` (an exchange between a client and the proxy) or `upstream` (a bridge's upstream leg)."""
    started: float
    http_method: str
    url: str
    request_headers: dict[str, str] = field(default_factory=dict)
    body_size: int | None = None
    session: str | None = None
    client_era: str = "unknown"
    upstream_era: str = "unknown"
    mode: str = "passthrough"
    client_transport: str = "http"
    """How the client reached the proxy: `http`, or `sse` / `stdio`, whose messages the proxy carries
    as Streamable HTTP exchanges of its own making."""
    status: int | None = None
    content_type: str | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    head_at: float | None = None
    messages: list[Carried] = field(default_factory=list)
    invalid_body: str | None = None
    plain: bool = False
    """A request to a path other than the MCP endpoint: its bodies are plain HTTP's (kind `http`),
    whatever they hold."""
    bytes_out: int = 0
    unread: str | None = None
    """Why its response body, or the rest of it, went to the client unread (`BodyNotInspected`)."""
    sent_bytes: int = 0
    """Bytes of the messages this exchange carried to the server, kept or not."""
    back_bytes: int = 0
    """Bytes of the messages this exchange carried back, kept or not."""
    ended: float | None = None
    outcome: str | None = None
    trailers: dict[str, str] | None = None
    """The trailer fields the upstream sent after its chunked body, redacted: the response's
    `_trailers` (HAR has no field for them, and the client never got them as headers)."""
    related: str | None = None
    head_missing: str | None = None
    """What a leg without a response head says of it when a head may have come all the same (a capture
    of a format before 1.5 records none; a store past its bounds); None: a head that came would be
    here, so none came."""
    run: str | None = None
    """The run tag of the proxy process it passed through (`proxy_info.run`): exchange and leg ids
    start again at each restart, so in a capture a restarted proxy appended to, they repeat."""
    chains: dict[str, ChainSummary] = field(default_factory=dict)
    """The chains its messages joined, by id, with their (live) headlines."""
    open_note: str | None = None
    """Why an exchange with no end is written so (a capture's end, its run's); None: it was still open
    when exported."""
    kept_bytes: int = 0
    dropped: int = 0
    limit: int = DEFAULT_ENTRY_BYTES

    def add(self, carried: Carried, summary: ChainSummary | None = None) -> None:
        """Take one message (kept while the draft is under its byte bound, else counted)."""
        if carried.chain is not None and summary is not None:
            self.chains.setdefault(carried.chain, summary)
        if (carried.side == "upstream") is (self.side == "upstream"):  # on this entry's wire
            if carried.direction is _TO_SERVER:
                self.sent_bytes += carried.size
            else:
                self.back_bytes += carried.size
        if self.kept_bytes + carried.size > self.limit:
            self.dropped += 1
            return
        self.kept_bytes += carried.size
        self.messages.append(carried)

    def sent_in_place(self, made: Carried) -> None:
        """`made` went upstream in place of the client's request (an intercept's edit): the client's
        own message travelled to the proxy only (as `proxy.flows.store.sent_in_place` files it)."""
        for m in reversed(self.messages):
            if (
                m.direction is _TO_SERVER
                and m.side == "both"
                and m.jsonrpc_id == made.jsonrpc_id
                and (m.kind == "request") is (made.kind == "request")
            ):
                m.side = "client"
                return

    def head(self, at: float, status: int, content_type: str | None, headers: dict[str, str]) -> None:
        """The response head went out."""
        self.head_at, self.status, self.content_type = at, status, content_type
        self.response_headers = headers


def render(draft: EntryDraft, *, note: str | None = None) -> dict[str, Any]:
    """The HAR 1.2 entry of a draft (an exchange still open when the reader stopped is marked so)."""
    ended = draft.ended if draft.ended is not None else _last_time(draft)
    total = max(0.0, (ended - draft.started) * 1000)
    first_back = draft.head_at if draft.head_at is not None else _first_back(draft)
    wait = total if first_back is None else min(total, max(0.0, (first_back - draft.started) * 1000))
    entry: dict[str, Any] = {
        "startedDateTime": iso_time(draft.started),
        "time": round(total, 3),
        "request": _request(draft),
        "response": _response(draft),
        "cache": {},
        "timings": {"send": 0, "wait": round(wait, 3), "receive": round(total - wait, 3)},
        "_mcp": _mcp(draft),
    }
    changed = [
        f"{chain}: {said}" for chain, s in draft.chains.items() if s.notes for said in proxy_changes(s.notes)
    ]
    if changed:  # a HAR reader sees the wait, not who made it: a delay fault reads as a slow server
        entry["_mcp"]["proxy_changes"] = changed
    comments = [c for c in (note, _side_comment(draft), _cut_comment(draft), _unread_comment(draft)) if c]
    if changed:
        comments.append("the proxy changed its chain's traffic: " + "; ".join(changed))
    if comments:
        entry["comment"] = "; ".join(comments)
    return entry


def iso_time(t: float) -> str:
    """An epoch time as HAR's ISO 8601 date-time, in UTC to the millisecond.

    Each message of an export has one, so the date and time of day are made once per second: the
    microseconds are rounded as `datetime.fromtimestamp` rounds them (half to even, carrying into the
    second), then cut to milliseconds as `isoformat` cuts them.
    """
    second = math.floor(t)
    micros = round((t - second) * 1e6)
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    return f"{_iso_second(second)}.{micros // 1000:03d}Z"


@functools.lru_cache(maxsize=1024)
def _iso_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def client_url(path: str, headers: dict[str, str], fallback_host: str) -> str:
    """The absolute URL a client asked for: its target on the host it named (`Host`), over HTTP."""
    if path.startswith(("http://", "https://")):
        return _uri_safe(path)
    host = next((v for k, v in headers.items() if k.lower() == "host"), None) or fallback_host
    return _uri_safe(f"http://{host}{path if path.startswith('/') else '/' + path}")


def _uri_safe(url: str) -> str:
    """`url` with what a URI may not hold percent-encoded: a redactor's stand-in (`<redacted len=N
    hmac:…>`) in a query value has a space and angle brackets, which HAR readers refuse in `url`."""
    return quote(url, safe="/:?#[]@!$&'()*+,;=%-._~")


def upstream_url(upstream: str) -> str:
    """The upstream's URL without userinfo or query (they may hold credentials), for its legs' entries."""
    parts = urlsplit(upstream)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return _uri_safe(urlunsplit((parts.scheme or "http", netloc, parts.path or "/", "", "")))


def _last_time(draft: EntryDraft) -> float:
    times = [draft.started, *(m.t for m in draft.messages[-1:])]
    if draft.head_at is not None:
        times.append(draft.head_at)
    return max(times)


def _first_back(draft: EntryDraft) -> float | None:
    return next((m.t for m in draft.messages if m.direction is _TO_CLIENT), None)


def _pairs(headers: dict[str, str]) -> list[dict[str, str]]:
    """One HAR header per field line: each cookie of a joined `Set-Cookie` an entry of its own."""
    return [{"name": name, "value": value} for name, value in field_lines(headers)]


def _text(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    return orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS).decode()


def _json_text(messages: list[Carried]) -> str:
    texts = [_text(m.raw) for m in messages if m.kind is not None]
    if len(texts) == 1:
        return texts[0]
    return "[" + ",".join(texts) + "]" if texts else ""


def _sse_text(messages: list[Carried]) -> str:
    parts = []
    for m in messages:
        event = f"id: {m.sse_id}\n" if m.sse_id is not None else ""
        data = _text(m.raw) if m.kind is not None else ""
        parts.append(f"{event}data: {data}\n\n")
    return "".join(parts)


def _query(url: str) -> list[dict[str, str]]:
    if "?" not in url:
        return []
    return [{"name": n, "value": v} for n, v in parse_qsl(urlsplit(url).query, True)]


def is_event_stream(content_type: str | None) -> bool:
    """Whether a response's `Content-Type` names an SSE stream (parameters and case aside)."""
    return (content_type or "").split(";")[0].strip().lower() == SSE_TYPE


def _on_wire(draft: EntryDraft) -> list[Carried]:
    """The messages this entry's HTTP exchange carried: on a relayed exchange the proxy changed, the
    other leg's record of a message (what the server sent or got instead) stays out of its bodies."""
    upstream = draft.side == "upstream"
    return [m for m in draft.messages if (m.side == "upstream") is upstream]


def _request(draft: EntryDraft) -> dict[str, Any]:
    sent = [m for m in _on_wire(draft) if m.direction is _TO_SERVER]
    request: dict[str, Any] = {
        "method": draft.http_method,
        "url": draft.url,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _pairs(draft.request_headers),
        "queryString": _query(draft.url),
        "headersSize": -1,
        "bodySize": draft.body_size if draft.body_size is not None else draft.sent_bytes,
    }
    text = draft.invalid_body if draft.invalid_body is not None else _json_text(sent)
    if text or draft.http_method in ("POST", "PUT", "PATCH"):
        mime = next((v for k, v in draft.request_headers.items() if k.lower() == "content-type"), JSON_TYPE)
        request["postData"] = {"mimeType": mime, "text": text, "params": []}
    return request


def _response(draft: EntryDraft) -> dict[str, Any]:
    back = [m for m in _on_wire(draft) if m.direction is _TO_CLIENT]
    sse = is_event_stream(draft.content_type) or (
        draft.content_type is None and any(m.channel in SSE_CHANNELS for m in back)
    )
    # What the server sent, none included (a client may refuse a body without it); guessed only for an
    # exchange whose head is not on record.
    mime = (
        (draft.content_type or "")
        if draft.head_at is not None
        else SSE_TYPE
        if sse
        else JSON_TYPE
        if back
        else ""
    )
    text = _sse_text(back) if sse else _json_text(back)
    status = draft.status or 0
    response: dict[str, Any] = {
        "status": status,
        "statusText": _PHRASES.get(status, ""),
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _pairs(draft.response_headers),
        "content": {"size": len(text.encode()), "mimeType": mime, "text": text},
        "redirectURL": next((v for k, v in draft.response_headers.items() if k.lower() == "location"), ""),
        "headersSize": -1,
        "bodySize": draft.back_bytes + draft.bytes_out,
    }
    if draft.trailers:
        response["_trailers"] = _pairs(draft.trailers)
    return response


def _unusual_end(draft: EntryDraft) -> str | None:
    """The exchange's outcome when it ended badly: as the round-trip log judges it, a client that hung
    up once each of its requests was answered ended normally, and a 2026-07-28 client that hung up
    before cancelled (unknowable once messages were dropped)."""
    if draft.outcome is None or draft.dropped:
        return draft.outcome
    asked: set[int | str] = set()
    answered = 0
    for m in draft.messages:
        if m.side == "upstream" or m.jsonrpc_id is None:
            continue
        if m.direction is _TO_SERVER and m.kind == "request":
            asked.add(m.jsonrpc_id)
        elif m.direction is not _TO_SERVER and m.kind in ("result", "error") and m.jsonrpc_id in asked:
            answered += 1
    ended = client_end(draft.outcome, draft.client_era, len(asked), answered)
    return unusual_end(ended, draft.http_method, len(asked), answered)


def _mcp(draft: EntryDraft) -> dict[str, Any]:
    ids: list[int | str] = []
    for m in draft.messages:
        if m.jsonrpc_id is not None and m.jsonrpc_id not in ids:
            ids.append(m.jsonrpc_id)
    out: dict[str, Any] = {
        "exchange": draft.key,
        "side": draft.side,
        **({"run": draft.run} if draft.run is not None else {}),
        "chains": list(draft.chains) or sorted({m.chain for m in draft.messages if m.chain}),
        "jsonrpc_ids": ids,
        "era": {"client": draft.client_era, "upstream": draft.upstream_era},
        "mode": draft.mode,
        "client_transport": draft.client_transport,
        "messages": [_message(m) for m in draft.messages if m.kind is not None],
    }
    if draft.session is not None:
        out["session"] = draft.session
    if (outcome := _unusual_end(draft)) is not None:
        out["outcome"] = outcome
    if draft.related is not None:
        out["related"] = draft.related
    if draft.dropped:
        out["dropped_messages"] = draft.dropped
    if draft.ended is None:
        out["open"] = True
    return out


def _message(m: Carried) -> dict[str, Any]:
    out: dict[str, Any] = {
        "time": iso_time(m.t),
        "direction": m.direction,
        "channel": m.channel,
        "side": m.side,
        "kind": m.kind,
        "chain": m.chain,
        "size": m.size,
    }
    if m.jsonrpc_id is not None:
        out["jsonrpc_id"] = m.jsonrpc_id
    if m.method is not None:
        out["method"] = m.method
    if m.sse_id is not None:
        out["sse_id"] = m.sse_id
    if m.note is not None:
        out["note"] = m.note
    if m.truncated:
        out["truncated"] = True
    return out


def _cut_comment(draft: EntryDraft) -> str | None:
    """What a HAR reader cannot tell from the text: a body in it is the proxy's stand-in for a message
    it cut at its capture limit, or for one it could not encode as JSON, not the message that travelled."""
    marked = [m for m in _on_wire(draft) if m.truncated]
    cut = [m for m in marked if not unencodable(m.raw)]
    odd = [m for m in marked if unencodable(m.raw)]
    said = []
    if cut:
        said.append(
            f"the proxy cut the {_bodies(cut)} at its capture limit (capture_body_limit): each cut "
            'message shows as {"$truncated":true,"size":N,"preview":...}, not as it was sent'
        )
    if odd:
        said.append(
            f"the proxy could not encode the {_bodies(odd)} as JSON to record it: each such message "
            'shows as {"$unencodable":true,"error":...}, not as it was sent'
        )
    return "; ".join(said) or None


def _unread_comment(draft: EntryDraft) -> str | None:
    """What a HAR reader cannot tell from an empty or short text: the proxy relayed the response body,
    or the rest of it, without reading it (`bodySize` counts it), so the text lacks what was not read."""
    if draft.unread is None:
        return None
    return (
        f"the proxy relayed the response body to the client without inspecting it ({draft.unread}): "
        "content.text holds only what it read, bodySize counts all of it"
    )


def _bodies(messages: list[Carried]) -> str:
    """Which bodies of an exchange `messages` are: the request's, the response's, or both."""
    sent = any(m.direction is _TO_SERVER for m in messages)
    back = any(m.direction is not _TO_SERVER for m in messages)
    return "request and response bodies" if sent and back else "request body" if sent else "response body"


_INTERNAL_FORM: Final = {
    "sse": "the client used the HTTP+SSE transport (2024-11-05: GET /sse, POST /messages)",
    "stdio": "the client used stdio (mcp-proxy stdio)",
}
"""How an entry's comment names a client transport that sends no Streamable HTTP requests of its own."""


def _side_comment(draft: EntryDraft) -> str | None:
    if draft.side == "upstream":
        ended = f"; it ended as {draft.outcome}" if draft.outcome is not None else ""
        if draft.status is None:
            return f"a bridge's upstream leg: {_no_head(draft)}{ended}"
        return f"a bridge's upstream leg: the proxy records its response head, not its request head{ended}"
    said = []
    if draft.client_transport != "http":
        how = _INTERNAL_FORM.get(draft.client_transport, f"the client used {draft.client_transport}")
        said.append(
            f"{how}: the request line and headers shown are the proxy's internal Streamable HTTP form"
        )
    if draft.ended is None:
        said.append(draft.open_note or "still open when it was exported")
    return "; ".join(said) or None


def _no_head(draft: EntryDraft) -> str:
    """What a leg without a response head says of it: none came, or why none is shown."""
    if draft.head_missing is not None:
        return draft.head_missing
    if draft.ended is None:
        return "no response head had come yet when it was exported"
    if draft.outcome is not None:  # the leg's cause is said beside: no guess at it
        return "no response head came"
    return (
        "no response head came: the upstream was out of reach or did not answer in time, or the leg "
        "ended before its answer (a cancel, an intercept answering in the upstream's place)"
    )


class HarWriter:
    """Streams one HAR 1.2 log: its head at once, each entry as it is given, the tail on `close`."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.entries = 0
        self._started = False

    def _start(self) -> None:
        if not self._started:  # written with the first entry, so a failed start leaves no half file
            self._started = True
            head = {"version": HAR_VERSION, "creator": {"name": CREATOR, "version": __version__}}
            self._out.write(b'{"log":' + orjson.dumps(head)[:-1] + b',"entries":[')

    def write(self, entry: dict[str, Any]) -> None:
        """Append one entry."""
        self._start()
        self._out.write(b"\n" if not self.entries else b",\n")
        self._out.write(orjson.dumps(entry, option=orjson.OPT_NON_STR_KEYS))
        self.entries += 1

    def close(self, comments: Iterable[str] = ()) -> None:
        """End the log, with `comments` (skipped lines, say) as the log's comment."""
        self._start()
        text = "\n".join(comments)
        tail = b',"comment":' + orjson.dumps(text) if text else b""
        self._out.write(b"\n]" + tail + b"}}\n")
