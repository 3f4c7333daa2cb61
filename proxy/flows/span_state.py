"""The span follower's tables, and how it makes spans.

`SpanFollower` (in `spans`) is composed of one handler class per kind of thing the transport reports
(`span_exchanges`, `span_messages`, `span_legs`); each derives, through `span_status` (and the
first two through `span_waits`), from `SpanState`, which declares the tables they all read and holds
what every one of them does: starting an operation, making its spans, and the attributes a span gets
from its exchange and message. The tables are made by `SpanFollower`.

The plain records the tables hold are here too: an operation, an open client exchange, an upstream
leg. Pure: no I/O, no clock, ids from the injected source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.flows.endpoint import Endpoint
from proxy.flows.events import Direction, Side
from proxy.flows.exchanges import BoundedMap
from proxy.flows.redact import Redactor
from proxy.flows.resumes import ResumeWaits
from proxy.flows.retries import RetryBook
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
from proxy.wire.mcp import META_PROTOCOL_VERSION, request_meta

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the handlers read these on the traffic path.
SPAN_CLIENT = SpanKind.CLIENT
SPAN_SERVER = SpanKind.SERVER
ERROR = Kind.ERROR
NOTIFICATION = Kind.NOTIFICATION
REQUEST = Kind.REQUEST
RESULT = Kind.RESULT
TO_SERVER = Direction.TO_SERVER
UPSTREAM = Side.UPSTREAM

HTTP_NETWORK: Attributes = {
    "network.protocol.name": "http",
    "network.protocol.version": "1.1",
    "network.transport": "tcp",
}
"""What a span's exchange ran on when it went over HTTP (Streamable HTTP or HTTP+SSE: HTTP/1.1 on TCP)."""

_PIPE_NETWORK: Attributes = {"network.transport": "pipe"}
"""What a span's exchange ran on over stdio: the semantic conventions' `pipe`, and no HTTP."""


def network_attributes(transport: str) -> Attributes:
    """The network attributes of a side spoken over `transport` (`http`, `sse` or `stdio`)."""
    return _PIPE_NETWORK if transport == "stdio" else HTTP_NETWORK


_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})

_TARGET_KEYS = {
    "tools/call": "name",
    "prompts/get": "name",
    **dict.fromkeys(_RESOURCE_METHODS, "uri"),
}
"""The params member that names what a request is about (part of what its attributes depend on)."""

_SHARED_LIMIT = 1024


@dataclass(slots=True)
class Operation:
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
class OpenExchange:
    """One open client exchange."""

    mode: str
    era: str
    session: str | None
    headers: dict[str, str]
    connection: str | None = None
    http_method: str = "POST"
    network: Attributes = field(default_factory=lambda: HTTP_NETWORK)
    """The client side's network attributes (how the client reached the proxy)."""
    upstream_network: Attributes = field(default_factory=lambda: HTTP_NETWORK)
    """The upstream side's network attributes (the legs a bridge makes for it)."""
    requests: dict[RequestId, tuple[SpanRecord, Operation]] = field(default_factory=dict)
    notes: list[tuple[SpanRecord, Operation]] | None = None
    status: int | None = None
    response_headers: dict[str, str] | None = None
    last_sse_id: str | None = None
    """The last SSE event id its response stream carried: a client may resume the stream from it."""
    joined: tuple[SpanRecord, Operation] | None = None
    """The request whose stream a GET with `Last-Event-ID` resumes (what it carries belongs there)."""
    unread: bool = False
    """Its response body, or the rest of it, went by unread (`BodyNotInspected`)."""
    asked: list[tuple[str | None, RequestId]] | None = None
    """Keys (in `SpanFollower._nested`) of the questions its stream carried to the client."""
    errored: list[tuple[SpanRecord, Operation]] | None = None
    """Requests answered with a JSON-RPC error, emitted when the exchange ends: how it ended may name
    the cause (the proxy's own 502 answers an unreachable upstream; its outcome says so)."""
    refusal: str | None = None
    """The message of an error naming no request that answered its notifications (the proxy's own,
    for an upstream it could not reach)."""
    _version: str | None = None

    def main(self) -> tuple[SpanRecord, Operation] | None:
        return next(iter(self.requests.values()), self.joined)

    def version(self) -> str | None:
        """The `MCP-Protocol-Version` header (looked up once per exchange)."""
        if self._version is None:
            headers = self.headers
            found = headers.get("MCP-Protocol-Version") or headers.get("mcp-protocol-version")
            self._version = found or header_value(headers, "mcp-protocol-version") or ""
        return self._version or None


HeldSpan = tuple[SpanRecord, Operation, OpenExchange]
"""A request's span held for its client's cancel, its operation, and the exchange that left it unanswered."""


@dataclass(slots=True)
class OpenLeg:
    """One upstream leg: the operation and span it serves, its open requests, the nested ones it carries."""

    parent: SpanRecord
    op: Operation
    network: Attributes
    """How the leg reaches the upstream (HTTP on TCP, or a child's stdio)."""
    requests: dict[RequestId, SpanRecord] = field(default_factory=dict)
    nested: dict[RequestId, tuple[SpanRecord, Operation]] = field(default_factory=dict)
    """Requests the upstream sent on this leg (shared with the legs that answer them)."""
    status: int | None = None
    """The HTTP status the upstream answered the leg with."""


class SpanState:
    """The tables of the span follower and how its handlers make spans (`SpanFollower` makes them)."""

    endpoint: Endpoint
    _emit: Callable[[SpanRecord], None]
    _redactor: Redactor
    _ids: Callable[[int], int]
    _upstream: Attributes
    """`server.address` and `server.port` of the upstream the legs go to."""
    _count: int
    """How many operations got a key (a retry may need to find them)."""
    _exchanges: dict[str, OpenExchange]
    _ops: BoundedMap
    """Operations waiting for an MRTR retry, by key."""
    _shared: dict[tuple[Any, ...], tuple[str, Attributes]]
    """Attributes requests of one exchange kind and target share (bounded: cleared when full)."""
    _retries: RetryBook
    _nested: BoundedMap
    """(session, id) of a request that reached the client -> its span, until the client answers."""
    _session_init: BoundedMap
    """A session an `initialize` minted -> its operation, which the client's `initialized` joins."""
    _legs: BoundedMap
    _cancel_waits: ResumeWaits[HeldSpan]
    """Spans of legacy calls whose client hung up before the answer, held for its cancel
    (`awaits_cancel`): emitted at the verdict, cancelled or as their exchange closed, as their
    chains end."""
    _resumes: ResumeWaits[HeldSpan]
    """Spans of requests whose stream closed unanswered after an event id, held for the client's
    resume (GET + `Last-Event-ID`), whose stream carries their answer, as their chains wait."""
    _event_requests: BoundedMap
    """(session, SSE event id) -> (id, span, operation) of the request whose stream carried it."""

    def _new_op(self, method: str | None, params: dict[str, Any]) -> Operation:
        meta = params.get("_meta") if params else None
        context = parse_traceparent(meta.get(TRACEPARENT)) if isinstance(meta, dict) and meta else None
        key = ""  # named only when a retry may need to find it
        if context is None:
            op = Operation(key, self._ids(128) or 1, None, False, None, True, method, params)
        else:
            trace_id, parent, sampled = context
            state = request_meta(params).get(TRACESTATE)
            op = Operation(
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

    def _root_span(self, op: Operation, name: str, t: float, attributes: Attributes) -> SpanRecord:
        """The operation's first span: the child of the client's span, or the root of a new trace."""
        span = SpanRecord(
            name,
            SPAN_SERVER,
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
        op: Operation,
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

    def _request_attributes(self, ex: OpenExchange, msg: Message) -> tuple[str, Attributes]:
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

    def _shared_attributes(self, ex: OpenExchange, msg: Message, version: Any) -> Attributes:
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
