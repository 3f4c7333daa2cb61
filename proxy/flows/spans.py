"""Spans of client operations, followed straight from observations: what the OTLP exporter sends.

One trace per operation (what a chain is elsewhere: a client request with its legs, rounds and nested
requests). Its spans, named and attributed as the OpenTelemetry semantic conventions for MCP say:

- each client request, kind SERVER (the proxy serves it); the first is the operation's root, and an
  MRTR retry (a bridged round of a modern client) is a span of its own under that root;
- each request a bridge sends upstream on a leg, kind CLIENT, under the client request it serves
  (each upstream request of a legacy client's call is a bridged round of its own);
- each nested request: one the upstream sends on a leg (kind SERVER: the proxy answers it upstream)
  or one that reaches the client on its stream (kind CLIENT: asked by the proxy or relayed), from the
  request until its answer;
- each client notification, kind SERVER, in the trace of the request it refers to when there is one.

A request whose stream closed after an SSE event id, unanswered, waits for the client's resume (GET +
`Last-Event-ID`) by the chain builder's rules (`proxy.flows.resumes`): the resumed stream carries its
answer and its questions, so its span and the chain end alike.

A client request that carries W3C trace context in `params._meta` (`traceparent`, `tracestate`)
continues the client's trace: its span is the child of the client's. A client whose context says
"not sampled" gets no spans. Nothing here changes traffic: a bridge already carries the client's
`_meta` entries upstream and back, so the upstream continues the same trace.

Following, not building: like the metrics' operation counter, this keeps only what spans need, so
it costs the traffic little whether or not anyone watches chains. Session ids are shown as the
redactor's keyed stand-in; no header, body or argument goes into a span. Pure: no I/O, no clock (each
observation carries its time), ids from an injected source; tables bounded like the chain builder's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.flows.endpoint import Endpoint
from proxy.flows.events import Channel, Direction, Side
from proxy.flows.exchanges import BoundedMap
from proxy.flows.observations import (
    CLIENT_CANCELLED,
    LATE_CANCEL_S,
    BodyNotInspected,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegLinked,
    LegMessageSeen,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
    awaits_cancel,
    cancels_by_hanging_up,
    hung_up_after_unread,
    unusual_end,
)
from proxy.flows.redact import Redactor
from proxy.flows.resumes import ID_REUSED, SESSION_ENDED, ResumeWaits, Wait, awaits_resume, ends_session
from proxy.flows.retries import RetryBook, caller_of, request_signature
from proxy.flows.span_records import (
    TRACEPARENT,
    TRACESTATE,
    Attributes,
    SpanKind,
    SpanRecord,
    header_value,
    method_attributes,
    parse_traceparent,
    span_name,
)
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import META_PROTOCOL_VERSION, RESULT_INPUT_REQUIRED, request_meta, result_type

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_SPAN_CLIENT = SpanKind.CLIENT
_ERROR = Kind.ERROR
_NOTIFICATION = Kind.NOTIFICATION
_REQUEST = Kind.REQUEST
_RESULT = Kind.RESULT
_SPAN_SERVER = SpanKind.SERVER
_TO_SERVER = Direction.TO_SERVER
_UPSTREAM = Side.UPSTREAM

_HTTP_NETWORK: Attributes = {
    "network.protocol.name": "http",
    "network.protocol.version": "1.1",
    "network.transport": "tcp",
}
"""What a span's exchange ran on when it went over HTTP (Streamable HTTP or HTTP+SSE: HTTP/1.1 on TCP)."""

_PIPE_NETWORK: Attributes = {"network.transport": "pipe"}
"""What a span's exchange ran on over stdio: the semantic conventions' `pipe`, and no HTTP."""


def network_attributes(transport: str) -> Attributes:
    """The network attributes of a side spoken over `transport` (`http`, `sse` or `stdio`)."""
    return _PIPE_NETWORK if transport == "stdio" else _HTTP_NETWORK


UNANSWERED_QUESTION = "the client never answered"
"""The status description of a question the client got on its stream and never answered."""


_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})

_TARGET_KEYS = {
    "tools/call": "name",
    "prompts/get": "name",
    **dict.fromkeys(_RESOURCE_METHODS, "uri"),
}
"""The params member that names what a request is about (part of what its attributes depend on)."""

_SHARED_LIMIT = 1024


@dataclass(slots=True)
class _Op:
    """One client operation: its trace, root span and what a retry must match."""

    key: str
    trace_id: int
    root: int | None
    """The span the operation's later spans hang under (its first request's)."""
    remote: bool
    trace_state: str | None
    sampled: bool
    method: str | None = None
    params: dict[str, Any] | None = None
    rounds: int = 1
    upstream_rounds: int = 0


@dataclass(slots=True)
class _Ex:
    """One open client exchange."""

    mode: str
    era: str
    session: str | None
    headers: dict[str, str]
    connection: str | None = None
    http_method: str = "POST"
    network: Attributes = field(default_factory=lambda: _HTTP_NETWORK)
    """The client side's network attributes (how the client reached the proxy)."""
    upstream_network: Attributes = field(default_factory=lambda: _HTTP_NETWORK)
    """The upstream side's network attributes (the legs a bridge makes for it)."""
    requests: dict[RequestId, tuple[SpanRecord, _Op]] = field(default_factory=dict)
    notes: list[tuple[SpanRecord, _Op]] | None = None
    status: int | None = None
    response_headers: dict[str, str] | None = None
    last_sse_id: str | None = None
    """The last SSE event id its response stream carried: a client may resume the stream from it."""
    joined: tuple[SpanRecord, _Op] | None = None
    """The request whose stream a GET with `Last-Event-ID` resumes (what it carries belongs there)."""
    unread: bool = False
    """Its response body, or the rest of it, went by unread (`BodyNotInspected`)."""
    asked: list[tuple[str | None, RequestId]] | None = None
    """Keys (in `SpanFollower._nested`) of the questions its stream carried to the client."""
    errored: list[tuple[SpanRecord, _Op]] | None = None
    """Requests answered with a JSON-RPC error, emitted when the exchange ends: how it ended may name
    the cause (the proxy's own 502 answers an unreachable upstream; its outcome says so)."""
    refusal: str | None = None
    """The message of an error naming no request that answered its notifications (the proxy's own,
    for an upstream it could not reach)."""
    _version: str | None = None

    def main(self) -> tuple[SpanRecord, _Op] | None:
        return next(iter(self.requests.values()), self.joined)

    def version(self) -> str | None:
        """The `MCP-Protocol-Version` header (looked up once per exchange)."""
        if self._version is None:
            headers = self.headers
            found = headers.get("MCP-Protocol-Version") or headers.get("mcp-protocol-version")
            self._version = found or header_value(headers, "mcp-protocol-version") or ""
        return self._version or None


_Unanswered = tuple[SpanRecord, _Op, _Ex]
"""A request's span held for its client's cancel, its operation, and the exchange that left it unanswered."""


@dataclass(slots=True)
class _Leg:
    """One upstream leg: the operation and span it serves, its open requests, the nested ones it carries."""

    parent: SpanRecord
    op: _Op
    network: Attributes
    """How the leg reaches the upstream (HTTP on TCP, or a child's stdio)."""
    requests: dict[RequestId, SpanRecord] = field(default_factory=dict)
    nested: dict[RequestId, tuple[SpanRecord, _Op]] = field(default_factory=dict)
    """Requests the upstream sent on this leg (shared with the legs that answer them)."""
    status: int | None = None
    """The HTTP status the upstream answered the leg with."""


class SpanFollower:
    """Follows client operations through observations and emits each span as it ends."""

    def __init__(
        self,
        emit: Callable[[SpanRecord], None],
        redactor: Redactor,
        *,
        upstream_host: str | None = None,
        upstream_port: int | None = None,
        ids: Callable[[int], int] | None = None,
        endpoint: Endpoint | None = None,
    ) -> None:
        self._emit = emit
        self.endpoint = endpoint if endpoint is not None else Endpoint()
        """Which paths are the MCP endpoint: an exchange to any other path (OAuth's `/token`) is plain
        HTTP, no MCP operation, and gets no span (a capture's reader sets it from `proxy_info`)."""
        self._redactor = redactor
        self._ids = ids or random.Random().getrandbits  # seeded from the system's entropy
        self._upstream: Attributes = {}
        self.set_upstream(upstream_host, upstream_port)
        self._count = 0
        self._exchanges: dict[str, _Ex] = {}
        self._ops: BoundedMap = BoundedMap()
        self._shared: dict[tuple[Any, ...], tuple[str, Attributes]] = {}
        """Attributes requests of one exchange kind and target share (bounded: cleared when full)."""
        """Operations waiting for an MRTR retry, by key."""
        self._retries = RetryBook()
        self._nested: BoundedMap = BoundedMap()
        """(session, id) of a request that reached the client -> its span, until the client answers."""
        self._session_init: BoundedMap = BoundedMap()
        self._legs: BoundedMap = BoundedMap()
        self._cancel_waits: ResumeWaits[_Unanswered] = ResumeWaits(LATE_CANCEL_S)
        """Spans of legacy calls whose client hung up before the answer, held for its cancel
        (`awaits_cancel`): emitted at the verdict, cancelled or as their exchange closed, as their
        chains end."""
        self._resumes: ResumeWaits[_Unanswered] = ResumeWaits()
        """Spans of requests whose stream closed unanswered after an event id, held for the client's
        resume (GET + `Last-Event-ID`), whose stream carries their answer, as their chains wait."""
        self._event_requests: BoundedMap = BoundedMap()
        """(session, SSE event id) -> (id, span, operation) of the request whose stream carried it."""
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            ExchangeOpened: self._opened,
            MessageSeen: self._message,
            ResponseHeadSeen: self._head,
            ExchangeClosed: self._closed,
            BodyNotInspected: self._unread,
            EventIdSeen: self._event_id,
            InvalidBody: self._invalid,
            LegMessageSeen: self._leg_message,
            LegHeadSeen: self._leg_head,
            LegLinked: self._leg_linked,
            LegClosed: self._leg_closed,
        }

    def set_upstream(self, host: str | None, port: int | None) -> None:
        """Where the upstream legs go (`server.address`, `server.port`), when learnt later (a capture)."""
        self._upstream = {}
        if host:
            self._upstream["server.address"] = host
            if port:
                self._upstream["server.port"] = port

    def observe_all(self, batch: Sequence[Observation]) -> None:
        """Follow observations in order (a listener of the observation sink)."""
        handlers = self._handlers
        uncancelled = self._cancel_waits.waits
        unresumed = self._resumes.waits
        for obs in batch:
            if uncancelled or unresumed:
                self.sweep(obs.t)
            handler = handlers.get(type(obs))
            if handler is not None:
                handler(obs)

    def sweep(self, now: float) -> None:
        """Emit the held spans whose cancel did not come within `LATE_CANCEL_S` by `now`, as their
        exchange closed, and those whose stream was not resumed within `RESUME_WINDOW`, as of the cut
        (a sweeper of the observation sink, as the metrics are)."""
        if self._cancel_waits.waits:
            for wait, _ in self._cancel_waits.ran_out(now):
                self._judged(wait)
        if self._resumes.waits:
            for wait, note in self._resumes.ran_out(now):
                self._never_resumed(wait, note)

    def release_all(self) -> None:
        """Emit every held span as its exchange closed (no cancel comes any more: the proxy stops, or
        a capture's observations ran out)."""
        self.sweep(float("inf"))

    @property
    def open_spans(self) -> int:
        """Client exchanges and legs still followed, and spans held for a cancel (tests assert they
        drain)."""
        return (
            len(self._exchanges) + len(self._legs) + len(self._cancel_waits.waits) + len(self._resumes.waits)
        )

    # -- exchanges ------------------------------------------------------------------------------------

    def _opened(self, obs: ExchangeOpened) -> None:
        self._redactor.headers(obs.headers)  # learns the client's credentials, which a server may echo
        if self.endpoint.is_plain(obs.path, obs.client_transport, obs.upstream_transport):
            return  # plain HTTP beside the endpoint: none of its observations finds an exchange
        opened = _Ex(
            str(obs.mode),
            obs.client_era,
            obs.session,
            obs.headers,
            obs.connection,
            obs.http_method,
            network_attributes(obs.client_transport),
            network_attributes(obs.upstream_transport),
        )
        self._exchanges[obs.exchange] = opened
        if obs.http_method == "GET":
            last = header_value(obs.headers, "last-event-id")
            if last is not None:
                self._resumed(opened, last)

    def _head(self, obs: ResponseHeadSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            ex.status = obs.status
            ex.response_headers = obs.headers
            if ex.session is not None and ends_session(ex.http_method == "DELETE", obs.status):
                for wait, note in self._resumes.end_session(ex.session):
                    self._never_resumed(wait, note)

    def _event_id(self, obs: EventIdSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            self._note_event(ex, obs.sse_id)

    def _note_event(self, ex: _Ex, sse_id: str) -> None:
        """Remember which request an SSE event id's stream served, so a resume from it finds it."""
        ex.last_sse_id = sse_id
        if ex.requests:
            ident, found = next(iter(ex.requests.items()))
            self._event_requests[(ex.session, sse_id)] = (ident, *found)
        elif ex.joined is not None:
            self._event_requests[(ex.session, sse_id)] = (None, *ex.joined)

    def _resumed(self, ex: _Ex, last: str) -> None:
        """A GET with `Last-Event-ID` continues the stream of the request that event belonged to: the
        request's answer and the questions asked on its behalf come on it."""
        found = self._event_requests.get((ex.session, last))
        if found is None:
            return
        ident, span, op = found
        ex.joined = (span, op)
        if ident is None:
            return
        wait = self._resumes.take(ex.session, ident)
        if wait is not None:
            ex.requests[ident] = (span, op)
            ex.asked = wait.target[2].asked
            return
        for other in self._exchanges.values():  # its stream's close not yet seen
            if other is not ex and other.session == ex.session and other.requests.get(ident) == (span, op):
                ex.requests[ident] = other.requests.pop(ident)
                ex.asked, other.asked = other.asked, None
                return

    def _unread(self, obs: BodyNotInspected) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            ex.unread = True

    def _invalid(self, obs: InvalidBody) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is None:
            return
        op = self._new_op(None, {})
        span = self._span(op, "(invalid)", _SPAN_SERVER, obs.t, {"mcp_proxy.mode": ex.mode})
        self._fail(span, "invalid_request", obs.problem)
        if op.sampled:
            self._finish(span, obs.t)

    def _closed(self, obs: ExchangeClosed) -> None:
        ex = self._exchanges.pop(obs.exchange, None)
        if ex is None:
            return
        t = obs.t
        failed = ex.status is not None and ex.status >= 400
        holds = (
            not failed
            and awaits_cancel(obs.outcome, ex.era, ex.session)
            and not hung_up_after_unread(obs.outcome, ex.era, ex.unread)
        )
        resumable = (
            not failed
            and not ex.unread
            and awaits_resume(obs.outcome, ex.era, ex.mode == "passthrough", ex.last_sse_id)
        )
        for ident, (span, op) in ex.requests.items():
            if resumable and span.attributes.get("mcp_proxy.outcome") != CLIENT_CANCELLED:
                self._wait_for_resume(ex, ident, (span, op, ex), t, obs.outcome)
                continue
            if holds and span.attributes.get("mcp_proxy.outcome") != CLIENT_CANCELLED:
                replaced = self._cancel_waits.wait(ex.session, ident, (span, op, ex), t, obs.outcome)
                if replaced is not None:
                    self._judged(replaced)
                continue
            self._unanswered(ex, span, obs.outcome, None)
            if op.sampled:
                self._finish(span, t)
        if not (resumable and ex.requests):  # else its questions may yet be answered: they wait with it
            self._end_questions(ex, obs.outcome, t)
        cause = unusual_end(obs.outcome, ex.http_method, 1, 1) if ex.errored else None
        for span, op in ex.errored or ():
            if cause is not None and span.failed:  # the error answer is the proxy's word for how it ended
                span.attributes["error.type"] = cause
            if op.sampled:
                self._emit(span)
        if ex.notes:
            self._notes_ended(ex, ex.notes, unusual_end(obs.outcome, ex.http_method, 1, 1), t)

    def _notes_ended(self, ex: _Ex, notes: list[tuple[SpanRecord, _Op]], cause: str | None, t: float) -> None:
        """End the spans of the client notifications `ex` carried: a refused POST fails them, named by
        the fault when the proxy answered for the upstream (`upstream_unreachable`, as a request's
        span and the log line name it), else by the upstream's status."""
        failed = ex.status is not None and ex.status >= 400
        for span, op in notes:
            if failed:
                self._fail(span, cause or str(ex.status), ex.refusal or f"HTTP {ex.status}")
            if op.sampled:
                self._finish(span, t)

    def _end_questions(self, ex: _Ex, outcome: str | None, t: float) -> None:
        """End the questions `ex`'s stream carried to the client that it never answered, as the stream
        ended with `outcome`."""
        for key in ex.asked or ():
            found = self._nested.pop(key, None)
            if found is not None:
                self._unanswered(ex, found[0], outcome, UNANSWERED_QUESTION)
                if found[1].sampled:
                    self._finish(found[0], t)

    def _wait_for_resume(
        self, ex: _Ex, ident: RequestId, target: _Unanswered, t: float, outcome: str | None
    ) -> None:
        """Hold a request's span for the client's resume of its stream, as its chain waits; one whose
        session is already over fails at once."""
        wait = Wait(ex.session, ident, target, t, outcome)
        if self._resumes.session_over(ex.session):
            self._never_resumed(wait, SESSION_ENDED)
            return
        replaced = self._resumes.wait(ex.session, ident, target, t, outcome)
        if replaced is not None:
            self._never_resumed(replaced, ID_REUSED)

    def _never_resumed(self, wait: Wait[_Unanswered], note: str) -> None:
        """Emit a held span whose stream the client did not resume, failed as its stream ended (its
        chain's error), as of the cut, with the questions asked on its behalf."""
        span, op, ex = wait.target
        self._fail(span, wait.outcome or "no_response", note)
        if op.sampled:
            self._finish(span, wait.since)
        self._end_questions(ex, wait.outcome or "no_response", wait.since)

    def _judged(self, wait: Wait[_Unanswered]) -> None:
        """Emit a held span whose cancel did not come, as its exchange closed, as of the close."""
        span, op, ex = wait.target
        self._unanswered(ex, span, wait.outcome, None)
        if op.sampled:
            self._finish(span, wait.since)

    def _unanswered(self, ex: _Ex, span: SpanRecord, outcome: str | None, text: str | None) -> None:
        """Mark a span whose answer never came on its exchange by how the exchange ended: a request
        its client cancelled (by `notifications/cancelled`, or a 2026-07-28 client closing its stream)
        did not fail, as its chain and the error counters say."""
        if span.attributes.get("mcp_proxy.outcome") == CLIENT_CANCELLED:
            return
        if cancels_by_hanging_up(outcome, ex.era):
            span.attributes["mcp_proxy.outcome"] = CLIENT_CANCELLED
            return
        if ex.status is not None and ex.status >= 400:
            self._fail(span, str(ex.status), f"HTTP {ex.status}")
        elif outcome is not None and not hung_up_after_unread(outcome, ex.era, ex.unread):
            self._fail(span, outcome, text)
        elif ex.unread:  # its answer may have been in what went by unread: no failure seen
            span.attributes["mcp_proxy.outcome"] = "not_inspected"
        else:
            self._fail(span, "no_response", text)

    # -- messages on a client exchange ------------------------------------------------------------------

    def _message(self, obs: MessageSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is None:
            return
        if obs.sse_id is not None:
            self._note_event(ex, obs.sse_id)
        if obs.side is _UPSTREAM:  # the server's leg of a message the proxy changed: the client's counts
            return
        msg = obs.msg
        if obs.direction is _TO_SERVER:
            if msg.kind is _REQUEST and msg.id is not None:  # the common case, without a call more
                self._request(ex, msg, msg.id, obs.t)
            else:
                self._client(ex, msg, obs.t)
        else:
            self._server(ex, msg, obs.t)

    def _client(self, ex: _Ex, msg: Message, t: float) -> None:
        kind = msg.kind
        if msg.is_response:
            found = self._nested.pop((ex.session, msg.id), None)
            if found is not None:
                self._answered(found, msg, t)
        elif kind is _NOTIFICATION:
            self._notification(ex, msg, t)

    def _request(self, ex: _Ex, msg: Message, ident: RequestId, t: float) -> None:
        params = msg.params
        op = self._retried(ex, msg) if "requestState" in params or "inputResponses" in params else None
        name, shared = self._request_attributes(ex, msg)
        own: Attributes = {"jsonrpc.request.id": str(ident)}
        if op is None:
            op = self._new_op(msg.method, params)
            span = self._root_span(op, name, t, own)
        else:
            op.rounds += 1
            own["mcp_proxy.round"] = op.rounds
            span = self._span(op, name, _SPAN_SERVER, t, own)
        span.shared = shared
        ex.requests[ident] = (span, op)

    def _notification(self, ex: _Ex, msg: Message, t: float) -> None:
        target: _Op | None = None
        if msg.method == "notifications/cancelled":
            ident = msg.params.get("requestId")
            cancelled = self._cancelled(ex.session, ident)
            if cancelled is not None:
                cancelled[0].attributes["mcp_proxy.outcome"] = CLIENT_CANCELLED
                target = cancelled[1]
            elif (self._cancel_waits.waits or self._resumes.waits) and isinstance(ident, (str, int)):
                target = self._cancel_held(ex.session, ident, t)
        elif msg.method == "notifications/initialized" and ex.session:
            target = self._session_init.get(ex.session)
        name, shared = self._request_attributes(ex, msg)
        if target is None:
            op = self._new_op(msg.method, msg.params)
            span = self._root_span(op, name, t, {})
        else:
            op = target
            span = self._span(op, name, _SPAN_SERVER, t, {})
        span.shared = shared
        if ex.notes is None:
            ex.notes = []
        ex.notes.append((span, op))

    def _cancelled(self, session: str | None, ident: Any) -> tuple[SpanRecord, _Op] | None:
        """The span and operation of the open request a `notifications/cancelled` names (cancels are
        rare: the open exchanges are searched rather than every request indexed)."""
        for ex in self._exchanges.values():
            if ex.session == session and ident in ex.requests:
                return ex.requests[ident]
        return None

    def _cancel_held(self, session: str | None, ident: RequestId, t: float) -> _Op | None:
        """The operation of a held span the client's cancel names: the span ends cancelled, now."""
        wait = self._cancel_waits.take(session, ident) or self._resumes.take(session, ident)
        if wait is None:
            return None
        span, op, ex = wait.target
        span.attributes["mcp_proxy.outcome"] = CLIENT_CANCELLED
        if op.sampled:
            self._finish(span, t)
        self._end_questions(ex, CLIENT_CANCELLED, t)
        return op

    def _server(self, ex: _Ex, msg: Message, t: float) -> None:
        if msg.is_response:
            found = ex.requests.pop(msg.id, None) if msg.id is not None else None
            if found is not None:
                self._responded(ex, found, msg, t)
            elif msg.id is None and msg.kind is _ERROR and ex.notes:
                text = msg.error.get("message")
                ex.refusal = text if isinstance(text, str) else None
            return
        if msg.kind is _REQUEST and msg.id is not None:
            main = ex.main()
            op = main[1] if main is not None else self._new_op(msg.method, msg.params)
            parent = main[0] if main is not None else None
            attributes = {
                **ex.network,
                "mcp.method.name": msg.method or "",
                "jsonrpc.request.id": str(msg.id),
            }
            attributes["mcp_proxy.nested"] = "asked" if ex.mode == "legacy_to_mrtr" else "relayed"
            name = self._span_name(msg.method, msg.params)
            span = self._span(op, name, _SPAN_CLIENT, t, attributes, parent)
            key = (ex.session, msg.id)
            self._nested[key] = (span, op)
            if ex.asked is None:
                ex.asked = []
            ex.asked.append(key)

    def _responded(self, ex: _Ex, found: tuple[SpanRecord, _Op], msg: Message, t: float) -> None:
        span, op = found
        retried = False
        if msg.kind is _ERROR:
            self._outcome(span, msg)
            span.end = t if t > span.start else span.start
            if ex.errored is None:
                ex.errored = []
            ex.errored.append(found)  # emitted when the exchange ends, which may name the cause
            op.params = None
            return
        if msg.kind is not _RESULT:
            self._outcome(span, msg)
        else:
            result = msg.raw.get("result")
            if op.method == "initialize" and ex.session is None:
                minted = header_value(ex.response_headers or {}, "mcp-session-id")
                if minted:
                    self._session_init[minted] = op
            if isinstance(result, dict):
                if result.get("resultType") == RESULT_INPUT_REQUIRED:
                    self._expect_retry(ex, span, op, result)
                    retried = True
                elif result.get("isError") is True:
                    self._fail(span, "tool_error", None)
        if not retried:
            op.params = None  # only a retry's match reads them
        if op.sampled:
            span.end = t if t > span.start else span.start
            self._emit(span)

    def _expect_retry(self, ex: _Ex, span: SpanRecord, op: _Op, result: dict[str, Any]) -> None:
        """An `input_required` answer: the client's retry continues the operation (an MRTR round)."""
        span.attributes["mcp_proxy.result_type"] = RESULT_INPUT_REQUIRED
        if not op.key:
            self._count += 1
            op.key = f"s{self._count}"
        signature = request_signature(op.method, op.params or {})
        self._retries.expect(op.key, signature, result, caller_of(ex.headers, ex.connection), None)
        self._ops[op.key] = op

    def _retried(self, ex: _Ex, msg: Message) -> _Op | None:
        found = self._retries.match(msg.method, msg.params, caller_of(ex.headers, ex.connection))
        if found is None or found.chain_id is None:
            return None
        op: _Op | None = self._ops.get(found.chain_id)
        return op

    # -- a bridge's upstream legs ---------------------------------------------------------------------------

    def _leg_message(self, obs: LegMessageSeen) -> None:
        joins = obs.joins
        leg = self._legs.get(obs.leg if joins is None else joins)
        if leg is None:
            if joins is None and obs.channel is Channel.GET_SSE:
                return  # a session's GET stream serves no one call: only what joins a call is its
            ex = self._exchanges.get(obs.exchange)
            main = ex.main() if ex is not None else None
            if main is None:
                return
            leg = _Leg(main[0], main[1], ex.upstream_network if ex is not None else _HTTP_NETWORK)
            if joins is None:
                self._legs[obs.leg] = leg
        msg, t, op = obs.msg, obs.t, leg.op
        if obs.direction is _TO_SERVER:
            if msg.kind is _REQUEST and msg.id is not None:
                attributes = {**leg.network, **self._upstream, **self._method_attributes(msg)}
                if msg.method == op.method:
                    op.upstream_rounds += 1
                    attributes["mcp_proxy.round"] = op.upstream_rounds
                span = self._span(
                    op, self._span_name(msg.method, msg.params), _SPAN_CLIENT, t, attributes, leg.parent
                )
                leg.requests[msg.id] = span
            elif msg.is_response and msg.id is not None:
                found = leg.nested.pop(msg.id, None)
                if found is not None:
                    self._answered(found, msg, t)
            elif msg.kind is _NOTIFICATION:
                attributes = {**leg.network, **self._upstream, "mcp.method.name": msg.method or ""}
                span = self._span(op, msg.method or "(none)", _SPAN_CLIENT, t, attributes, leg.parent)
                if op.sampled:
                    self._finish(span, t)
            return
        if msg.is_response and msg.id is not None:
            done = leg.requests.pop(msg.id, None)
            if done is not None:
                self._outcome(done, msg)
                if msg.kind is _RESULT and result_type(msg.result) == RESULT_INPUT_REQUIRED:
                    done.attributes["mcp_proxy.result_type"] = RESULT_INPUT_REQUIRED
                if op.sampled:
                    self._finish(done, t)
        elif msg.kind is _REQUEST and msg.id is not None:
            parent = next(iter(leg.requests.values()), leg.parent)
            attributes = {
                **leg.network,
                "mcp.method.name": msg.method or "",
                "jsonrpc.request.id": str(msg.id),
            }
            attributes["mcp_proxy.nested"] = "relayed"
            leg.nested[msg.id] = (
                self._span(op, self._span_name(msg.method, msg.params), _SPAN_SERVER, t, attributes, parent),
                op,
            )

    def _leg_linked(self, obs: LegLinked) -> None:
        related = self._legs.get(obs.related)
        if related is not None and obs.leg not in self._legs:
            self._legs[obs.leg] = _Leg(related.parent, related.op, related.network, nested=related.nested)

    def _leg_head(self, obs: LegHeadSeen) -> None:
        leg = self._legs.get(obs.leg)
        if leg is not None:
            leg.status = obs.status

    def _leg_closed(self, obs: LegClosed) -> None:
        leg = self._legs.pop(obs.leg, None)
        if leg is None:
            return
        # A failed status names the cause as it does for a relayed exchange; else the bridge's word
        # for how the leg ended when it knew it (a refused connection).
        failed = leg.status is not None and leg.status >= 400
        why = str(leg.status) if failed else obs.outcome or "no_response"
        text = f"HTTP {leg.status}" if failed else "the upstream leg closed before its answer"
        for span in leg.requests.values():
            self._fail(span, why, text)
            if leg.op.sampled:
                self._finish(span, obs.t)
        if leg.nested and not any(other.nested is leg.nested for other in self._legs.values()):
            for span, op in leg.nested.values():
                self._fail(span, why, "nobody answered the upstream's request")
                if op.sampled:
                    self._finish(span, obs.t)
            leg.nested.clear()

    # -- spans ------------------------------------------------------------------------------------

    def _new_op(self, method: str | None, params: dict[str, Any]) -> _Op:
        meta = params.get("_meta") if params else None
        context = parse_traceparent(meta.get(TRACEPARENT)) if isinstance(meta, dict) and meta else None
        key = ""  # named only when a retry may need to find it
        if context is None:
            op = _Op(key, self._ids(128) or 1, None, False, None, True, method, params)
        else:
            trace_id, parent, sampled = context
            state = request_meta(params).get(TRACESTATE)
            op = _Op(
                key,
                trace_id,
                parent,
                True,
                state if isinstance(state, str) else None,
                sampled,
                method,
                params,
            )
        return op

    def _root_span(self, op: _Op, name: str, t: float, attributes: Attributes) -> SpanRecord:
        """The operation's first span: the child of the client's span, or the root of a new trace."""
        span = SpanRecord(
            name,
            _SPAN_SERVER,
            op.trace_id,
            self._ids(64) or 1,
            op.root,
            t,
            attributes,
            remote_parent=op.remote,
            trace_state=op.trace_state,
        )
        op.root, op.remote = span.span_id, False
        return span

    def _span(
        self,
        op: _Op,
        name: str,
        kind: SpanKind,
        t: float,
        attributes: Attributes,
        parent: SpanRecord | None = None,
    ) -> SpanRecord:
        parent_id = parent.span_id if parent is not None else op.root
        remote = parent is None and op.remote
        return SpanRecord(
            name,
            kind,
            op.trace_id,
            self._ids(64) or 1,
            parent_id,
            t,
            attributes,
            remote_parent=remote,
            trace_state=op.trace_state,
        )

    def _request_attributes(self, ex: _Ex, msg: Message) -> tuple[str, Attributes]:
        """A client message's span name and the attributes it shares with others of its exchange kind,
        method and target, made once (a client repeats the same call with new ids)."""
        params = msg.params
        method = msg.method
        meta = params.get("_meta") if params else None
        version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
        if version is None:
            version = ex.version()
        target = params.get(_TARGET_KEYS.get(method or "", "")) if params else None
        target = target if isinstance(target, str) else None
        key = (ex.mode, ex.era, ex.session, method, target, version, ex.network is _PIPE_NETWORK)
        shared = self._shared.get(key)
        if shared is None:
            if len(self._shared) >= _SHARED_LIMIT:
                self._shared.clear()
            shared = self._shared[key] = (
                self._span_name(method, params),
                self._shared_attributes(ex, msg, version),
            )
        return shared

    def _span_name(self, method: str | None, params: dict[str, Any]) -> str:
        """`span_name`, with any known secret in the tool or prompt name masked (as the chains show it)."""
        return self._redactor.scrub(span_name(method, params))

    def _method_attributes(self, msg: Message) -> Attributes:
        """`method_attributes`, with any known secret in a tool or prompt name masked."""
        attributes = method_attributes(msg)
        for name in ("gen_ai.tool.name", "gen_ai.prompt.name"):
            shown = attributes.get(name)
            if isinstance(shown, str):
                attributes[name] = self._redactor.scrub(shown)
        return attributes

    def _shared_attributes(self, ex: _Ex, msg: Message, version: Any) -> Attributes:
        attributes: Attributes = {**ex.network, **self._method_attributes(msg), "mcp_proxy.mode": ex.mode}
        attributes.pop("jsonrpc.request.id", None)
        if ex.session:
            attributes["mcp.session.id"] = self._redactor.token(ex.session)
        if isinstance(version, str):
            attributes["mcp.protocol.version"] = version
        if msg.method in _RESOURCE_METHODS:
            uri = msg.params.get("uri")
            if isinstance(uri, str):
                attributes["mcp.resource.uri"] = self._redactor.path(uri)
        attributes["mcp_proxy.client_era"] = ex.era
        return attributes

    def _answered(self, found: tuple[SpanRecord, _Op], msg: Message, t: float) -> None:
        span, op = found
        self._outcome(span, msg)
        if op.sampled:
            self._finish(span, t)

    def _outcome(self, span: SpanRecord, msg: Message) -> None:
        """Mark a span failed by its response: a JSON-RPC error, or a tool result with `isError`."""
        if msg.kind is _ERROR:
            error = msg.error
            code = error.get("code")
            text = error.get("message")
            if code is not None:
                span.attributes["rpc.response.status_code"] = str(code)
            self._fail(
                span, str(code) if code is not None else "_OTHER", text if isinstance(text, str) else None
            )
        elif msg.kind is _RESULT:
            result = msg.result
            if isinstance(result, dict) and result.get("isError") is True:
                self._fail(span, "tool_error", None)

    def _fail(self, span: SpanRecord, error_type: str, text: str | None) -> None:
        """Mark a span failed, once; a request its client cancelled never fails (an error answer or a
        timeout after the cancel included), as its chain ends `cancelled`."""
        if span.failed or span.attributes.get("mcp_proxy.outcome") == CLIENT_CANCELLED:
            return
        span.failed = True
        span.error = text and self._redactor.scrub(text)
        span.attributes["error.type"] = error_type

    def _finish(self, span: SpanRecord, t: float) -> None:
        span.end = t if t > span.start else span.start
        self._emit(span)
