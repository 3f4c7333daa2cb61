"""A client that speaks over a message channel, presented as Streamable HTTP requests: the decisions.

The mirror of `proxy.engine.channel` (which serves a *server's* channel to HTTP clients): here the
client speaks over a channel (a stdio client's stdin and stdout lines, an HTTP+SSE client's POSTs and
GET stream) and the proxy's relay and bridges, which speak Streamable HTTP, serve it unchanged.
`ChannelClient` holds one client channel's session facts and turns each message into the HTTP
request a Streamable HTTP client would have sent:

- every message becomes one POST to the upstream's MCP endpoint path; its answer (a JSON body or the
  messages of an SSE stream) goes back on the channel, as does everything on the session's GET stream;
- a legacy client's POSTs after `initialize` carry the session the server minted (`Mcp-Session-Id`,
  read from the initialize answer's head) and the version it negotiated (`MCP-Protocol-Version`, read
  from its result); messages that arrive before that answer wait for it, since they need its session;
- messages keep their order where it matters: behind a notification or a response, the next message
  waits for that POST's head (its 202), so `notifications/initialized` reaches the server before the
  first call, and an answer to the server's question before what follows it; requests do not wait for
  one another, so a long call never holds up the next;
- once `notifications/initialized` goes out on a session, one GET stream is opened for the server's
  own messages (requests and notifications that belong to no call);
- a 2026-07-28 request carries its own version (`_meta`) and the routing headers (`Mcp-Method`,
  `Mcp-Name`, `Mcp-Param-*` for the arguments the tool lists relayed to this client mark);
- a 2026-07-28 client's `notifications/cancelled` (its stdio cancellation) closes that call's
  exchange, the cancellation 2026-07-28 HTTP defines; it is not sent on;
- a legacy client's `notifications/cancelled` is sent on, as legacy HTTP sends it, and once the
  upstream has taken it (its POST's head) the call's exchange is closed as cancelled: a legacy HTTP
  client stops reading the call's stream, but on a channel the exchange is the proxy's own, and
  the server need not answer a cancelled call, so nothing else would ever close it;
- a request whose exchange ended without its answer (an HTTP error without a JSON-RPC body, a cut
  stream) is answered on the channel with a JSON-RPC error naming what happened, so no client waits
  forever; a line that is no JSON, or too long, is answered with the error an HTTP server would give;
- the channel's end abandons every open exchange and ends a legacy session with DELETE.

Pure: no asyncio, no clock, no I/O. The shell (`proxy.transport.channel_client`) carries out the
orders and reports what came back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.engine.tool_headers import ToolHeaders
from proxy.flows.observations import CLIENT_CANCELLED
from proxy.framing.classify import peek_id
from proxy.framing.status import too_large
from proxy.wire import errors
from proxy.wire.headers import PROTOCOL_VERSION, SESSION_ID, HeaderRefused, mcp_headers
from proxy.wire.jsonrpc import Body, Kind, Message, RequestId, dumps, error_response, parse_body
from proxy.wire.mcp import META_PROTOCOL_VERSION, request_meta, target_name
from proxy.wire.relayed import relayed_client_headers
from proxy.wire.versions import MODERN_VERSIONS

Headers = tuple[tuple[str, str], ...]

ACCEPT: Final = "application/json, text/event-stream"
"""What a Streamable HTTP client accepts on every POST (both eras require both types)."""

CANCELLED: Final = "notifications/cancelled"

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): every message passes here.
_REQUEST = Kind.REQUEST
_INVALID = Kind.INVALID
_BASE = (("Content-Type", "application/json"), ("Accept", ACCEPT))

PREVIEW_BYTES: Final = 120
"""Bytes of a line that was no JSON that the error and the log line quote."""


@dataclass(frozen=True, slots=True)
class Post:
    """Send `body` (one message or a batch, as the client wrote it) as a POST with these headers.

    `calls` are the ids of the requests in it: each must get an answer on the channel. `parsed` is
    `body` decoded (whoever carries the POST out need not decode it again). `direct` says the POST
    may skip the HTTP shape (see `ChannelClient.direct`).
    """

    seq: int
    body: bytes
    headers: Headers
    calls: tuple[RequestId, ...]
    method: str | None
    parsed: Body | None = field(default=None, compare=False, repr=False)
    direct: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class Reply:
    """Write this message to the client's channel (the proxy's own answer); `problem` says why."""

    data: bytes
    problem: str


@dataclass(frozen=True, slots=True)
class OpenStream:
    """Open the session's GET stream with these headers; its messages go to the channel."""

    headers: Headers


@dataclass(frozen=True, slots=True)
class Cancel:
    """Close the exchange carrying the call `request_id`, recording `outcome`: a 2026-07-28
    cancellation closes it as HTTP does (the client leaves the call's stream), a legacy one once the
    upstream has taken the client's `notifications/cancelled` (`CLIENT_CANCELLED`)."""

    request_id: RequestId
    outcome: str = "client_disconnected"


@dataclass(frozen=True, slots=True)
class EndSession:
    """Send DELETE with these headers: the client's channel closed on a legacy session."""

    headers: Headers


Order = Post | Reply | OpenStream | Cancel | EndSession


@dataclass
class ChannelClient:
    """One client channel's session facts, and the HTTP request each of its messages becomes."""

    client_headers: Headers = ()
    """Headers of the client's own that go along with every request (an HTTP+SSE client's
    `Authorization`, say); a stdio client has none."""
    max_body_bytes: int = 8 * 1024 * 1024
    session: str | None = None
    """The legacy session the upstream minted for this client (from the initialize answer's head)."""
    version: str | None = None
    """The legacy version the initialize answer negotiated."""
    modern: bool = False
    """The client speaks 2026-07-28 (a message named that version in its `_meta`)."""
    tools: ToolHeaders = field(default_factory=ToolHeaders)
    blocking: int | None = None
    """The POST later messages wait for (an initialize's answer, a notification's head)."""
    held: deque[bytes] = field(default_factory=deque)
    initialize: int | None = None
    """The POST carrying `initialize`, until its answer arrives."""
    listing: set[RequestId] = field(default_factory=set)
    """Ids of `tools/list` calls in flight: their answers teach `tools`."""
    streaming: bool = False
    """The session's GET stream was opened."""
    cancelling: dict[int, RequestId] = field(default_factory=dict)
    """A legacy `notifications/cancelled` POST in flight, by its seq, and the call it cancels (at
    most one: a notification's POST holds back what follows until its head)."""
    closed: bool = False
    _seq: int = 0
    _relayed: Headers = ()
    _legacy: Headers | None = None
    """The headers of every legacy POST now (built once per session and version)."""

    def __post_init__(self) -> None:
        self._relayed = tuple(relayed_client_headers(self.client_headers))

    def received(self, data: bytes) -> list[Order]:
        """One line (or POST body) from the client: what to send, or how to answer it."""
        if self.closed:
            return []
        if self.blocking is not None:
            self.held.append(data)
            return []
        return self._order(data)

    def oversized(self, size: int, head: bytes) -> list[Order]:
        """A message over `max_body_bytes`: refused with the error an HTTP client gets (413's body)."""
        _, body = too_large(self.max_body_bytes, peek_id(head))
        problem = f"a message of {size} bytes exceeds max_body_bytes ({self.max_body_bytes})"
        return [Reply(dumps(body), problem)]

    def _order(self, data: bytes) -> list[Order]:
        body = parse_body(data)
        if body.parse_error is not None:
            preview = data[:PREVIEW_BYTES].decode("utf-8", "replace")
            text = f"Parse error: {body.parse_error}"
            reply = error_response(None, errors.PARSE_ERROR, text, {"received": preview})
            return [Reply(dumps(reply), f"{body.parse_error}: {preview!r}")]
        messages = body.messages
        first = messages[0]
        if len(messages) == 1 and first.kind is _INVALID:
            reply = error_response(first.id, errors.INVALID_REQUEST, f"Invalid Request: {first.problem}")
            return [Reply(dumps(reply), f"invalid message: {first.problem}")]
        modern = _modern_version(first) if not body.batch else None
        if modern is not None:
            self.modern = True
        if self.modern and first.method == CANCELLED and self.session is None:
            ident = first.params.get("requestId")
            return [Cancel(ident)] if isinstance(ident, str | int) else []
        if first.method == "initialize" and modern is None and not body.batch:
            self._new_session()
        try:
            headers = self._headers(first, modern)
        except HeaderRefused as exc:
            if first.kind is not _REQUEST or first.id is None:
                return []
            reply = error_response(first.id, errors.INVALID_PARAMS, str(exc), {"field": exc.field})
            return [Reply(dumps(reply), str(exc))]
        self._seq += 1
        seq = self._seq
        calls: tuple[RequestId, ...]
        if len(messages) == 1:
            calls = (first.id,) if first.kind is _REQUEST and first.id is not None else ()
        else:
            calls = tuple(m.id for m in messages if m.kind is _REQUEST and m.id is not None)
        direct = self._direct(body, first)
        orders: list[Order] = [Post(seq, data, headers, calls, first.method, body, direct)]
        if first.method == CANCELLED and not body.batch:
            ident = first.params.get("requestId")
            if isinstance(ident, str | int) and not isinstance(ident, bool):
                self.cancelling[seq] = ident
        if first.method == "initialize" and first.id is not None and not body.batch:
            self.initialize = self.blocking = seq
        elif not calls:
            self.blocking = seq  # a notification or an answer: what follows waits for its 202
        if first.method == "tools/list" and first.id is not None:
            self.listing.add(first.id)
        elif first.method == "notifications/initialized" and self.session and not self.streaming:
            self.streaming = True
            orders.append(OpenStream(self._session_headers(("Accept", "text/event-stream"))))
        return orders

    def _new_session(self) -> None:
        """The client initializes again (its server restarted, or its session was lost): what the
        old session taught goes, so the handshake carries no dead session id and the new answer
        names the session, the version and the GET stream afresh."""
        self.session = self.version = self._legacy = None
        self.streaming = False

    def _direct(self, body: Body, first: Message) -> bool:
        """Whether this message may go straight to a channel upstream of the same era, as one message
        written and its answer read back, without being made an HTTP request and response: one
        message (no batch), a session already made (or a sessionless 2026-07-28 client), and not the
        handshake (whose answer teaches the session and era, and may start a channel)."""
        return (
            not body.batch
            and first.method != "initialize"
            and (self.session is not None or self.modern)
            and self.initialize is None
        )

    def _headers(self, first: Message, modern: str | None) -> Headers:
        """The headers of the POST carrying `first` (and any batch behind it)."""
        if modern is None:
            legacy = self._legacy
            if legacy is None:
                legacy = self._legacy = self._session_headers(*_BASE)
            return legacy
        base = [*_BASE, (PROTOCOL_VERSION, modern)]
        if first.method is not None:
            values = self.tools.values_for(first.params) if first.method == "tools/call" else []
            base.extend(mcp_headers(first.method, target_name(first.method, first.params), values))
        return (*base, *self._relayed)

    def _session_headers(self, *base: tuple[str, str]) -> Headers:
        out = list(base)
        if self.session is not None:
            out.append((SESSION_ID, self.session))
        if self.version is not None:
            out.append((PROTOCOL_VERSION, self.version))
        return (*out, *self._relayed)

    def head(self, seq: int, headers: Headers) -> list[Order]:
        """A POST's response head arrived: the initialize answer's names the session; a notification's
        releases what waited behind it."""
        if seq == self.initialize:
            for name, value in headers:
                if name.lower() == "mcp-session-id":
                    self.session = value
                    self._legacy = None
            return []
        cancelled = self.cancelling.pop(seq, None)
        orders: list[Order] = [] if cancelled is None else [Cancel(cancelled, CLIENT_CANCELLED)]
        return orders + self._release() if seq == self.blocking else orders

    def delivered(self, seq: int, msg: Message) -> list[Order]:
        """A message of POST `seq`'s answer went to the client: the answer to `initialize` names the
        version and releases what waited for it; one to `tools/list` teaches the header arguments."""
        if not msg.is_response or msg.id is None:
            return []
        if seq == self.initialize:
            result = msg.result
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(version, str):
                self.version = version
                self._legacy = None
            self.initialize = None
            return self._release()
        if msg.id in self.listing:
            self.listing.discard(msg.id)
            self.tools.learn(msg.result)
        return []

    def ended(self, seq: int, unanswered: tuple[RequestId, ...], why: str) -> list[Order]:
        """A POST's exchange ended; `unanswered` are its calls the client never got an answer to."""
        orders: list[Order] = []
        self.cancelling.pop(seq, None)
        for ident in unanswered:
            self.listing.discard(ident)
            text = f"the proxy got no answer to this request: {why}"
            orders.append(Reply(dumps(error_response(ident, errors.INTERNAL_ERROR, text)), why))
        if seq == self.initialize:
            self.initialize = None
        if seq == self.blocking:
            orders.extend(self._release())
        return orders

    def _release(self) -> list[Order]:
        """What the blocking POST held back goes now, until another message blocks."""
        self.blocking = None
        orders: list[Order] = []
        while self.held and self.blocking is None:
            orders.extend(self._order(self.held.popleft()))
        return orders

    def close(self) -> list[Order]:
        """The client's channel ended: its legacy session is ended too."""
        if self.closed:
            return []
        self.closed = True
        self.held.clear()
        self.cancelling.clear()
        if self.session is None:
            return []
        return [EndSession(self._session_headers())]


def _modern_version(msg: Message) -> str | None:
    """The 2026-07-28 version a message names in its `_meta`, if it names one."""
    version: Any = request_meta(msg.params).get(META_PROTOCOL_VERSION)
    return version if isinstance(version, str) and version in MODERN_VERSIONS else None


def no_answer_reason(problem: str, status: int) -> str:
    """Why a POST's exchange ended without an answer, in the words its client's error gives."""
    if problem:
        return problem
    if status == 0:
        return "no response came"
    return f"HTTP {status} without an answer"
