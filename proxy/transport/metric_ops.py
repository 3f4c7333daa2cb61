"""Counting client operations for the metrics straight from observations, without building chains.

A chain costs redacted records, pydantic headlines and bus events; the counters need far less: which
operation a client request starts (or continues, for an MRTR retry), when it ends and how, how long it
waited on the client, how many rounds a bridge made of it. `OpCounter` follows the same rules as the
chain builder's correlation (`proxy.flows.correlate`) for exactly that much, and adds to the rows of
counts `ProxyMetrics` reads on a scrape as observations arrive, whether or not anyone watches chains.
An *operation* here is what a chain is there: one client request with its nested requests, rounds
and final answer, a GET stream, a DELETE, an invalid body, or a notification or response that joins
no earlier request.

Bounded like the builder: every correlation table forgets its oldest entries past `CORRELATION_BOUND`,
and an exchange's state goes when it closes.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from proxy.flows.endpoint import Endpoint
from proxy.flows.events import Direction, Mode, Side
from proxy.flows.exchanges import BoundedMap
from proxy.flows.observations import (
    LATE_CANCEL_S,
    REFUSED,
    STREAM_NORMAL_ENDS,
    AnsweredByProxy,
    BodyNotInspected,
    ContinuationMoved,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    FaultInjected,
    InterceptReleased,
    InvalidBody,
    LegClosed,
    LegLinked,
    LegMessageSeen,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
    UpstreamSessionMoved,
    awaits_cancel,
    cancels_by_hanging_up,
    declines_stream,
    hung_up_after_unread,
)
from proxy.flows.resumes import SESSION_GONE_STATUS, ResumeWaits, Wait, awaits_resume, ends_session
from proxy.flows.retries import (
    RETRY_WINDOW,
    Caller,
    RetryBook,
    RetryMatch,
    caller_of,
    refused,
    request_signature,
)
from proxy.framing.classify import IMPLAUSIBLE_METHOD
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import LISTEN, LISTEN_ACKNOWLEDGED, RESULT_INPUT_REQUIRED, result_type

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_ERROR = Kind.ERROR
_LEGACY_TO_MRTR_VALUE = Mode.LEGACY_TO_MRTR.value
_MRTR_TO_LEGACY_VALUE = Mode.MRTR_TO_LEGACY.value
_NOTIFICATION = Kind.NOTIFICATION
_PASSTHROUGH = Mode.PASSTHROUGH
_PASSTHROUGH_VALUE = Mode.PASSTHROUGH.value
_REQUEST = Kind.REQUEST
_RESULT = Kind.RESULT
_TO_SERVER = Direction.TO_SERVER
_UPSTREAM = Side.UPSTREAM

_LABELS_KEPT = 1000
"""Label sets whose rows `OpCounter` remembers (a client inventing names cannot grow it)."""

_BRIDGED = (_LEGACY_TO_MRTR_VALUE, _MRTR_TO_LEGACY_VALUE)

PLAIN_HTTP: Final = "(http)"
"""The method label of a plain HTTP request (to a path other than the MCP endpoint: OAuth's `/token`,
say): counted as a chain and timed, never as a JSON-RPC request or an error."""
RESPONSE: Final = "(response)"
"""The method label of a client's response that answers no request the server asked."""
GET_STREAM: Final = "GET stream"
DELETE_SESSION: Final = "DELETE session"
"""The method labels of a GET stream and of a session's DELETE."""
NO_METHOD: Final = "none"
"""The method label of a body with no method the proxy read: not JSON-RPC, or refused whole (too
large, too deep, too many messages)."""
OTHER: Final = "other"
"""The method label of names not kept apart: past the bound, not plain label text, or one of the
proxy's own labels (`PROXY_LABELS`), and of a request refused for its method."""

PROXY_LABELS: Final = frozenset({PLAIN_HTTP, RESPONSE, GET_STREAM, DELETE_SESSION, NO_METHOD, OTHER})
"""Method labels the proxy gives operations itself: a client's method of the same text is counted as
`other`, so no client can write into them (`(http)` is never an error, whatever a client sends)."""

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))
"""Histogram buckets (seconds) for upstream time per operation: MCP calls range from ms to a minute."""

_FIRST_BOUND = LATENCY_BUCKETS[0]
"""Most operations end within the first bucket: counted there without a search."""

CHAINS, REQUESTS = 0, 1
"""Places in a row of operations begun (by method, client era and mode)."""
SUM = len(LATENCY_BUCKETS)
OBSERVED, ERRORS = SUM + 1, SUM + 2
ENDED_ROW = SUM + 3
"""Places in a row of operations ended (by method and mode), after the count in each latency bucket
(not cumulative), and its length."""

BeganRow = list[int]
EndedRow = list[float]


class Counters(Protocol):
    """Where the counting goes (`ProxyMetrics` is one).

    The counts every operation moves are plain rows (lists laid out as `CHAINS`... `ERRORS` say)
    that `OpCounter` adds to itself, once `rows` has named them for a label set: the traffic path
    counts every request, so no label is looked up twice and no call is made per count.
    """

    def label(self, method: str) -> str:
        """The bounded label value counted for a client's method name (never one of `PROXY_LABELS`)."""
        ...

    def rows(self, label: str, era: str, mode: str) -> tuple[BeganRow, EndedRow]:
        """The rows of operations begun (by label, era, mode) and ended (by label, mode)."""
        ...

    def rounds_taken(self, mode: str, added: int) -> None:
        """A bridged operation took `added` more rounds."""
        ...

    def session(self, state: str) -> None:
        """A session opened, ended, expired or was re-initialized."""
        ...


class _Op:
    """One client operation, as far as the counters need it (one per request: its constructor sets
    what every operation has, and the class holds what most never change)."""

    id: str | None = None
    """Named only when a retry must find it (`OpCounter._await_retry`)."""
    rounds = 1
    waited = 0.0
    wait_from: float | None = None
    waiting_on = 0
    upstream_requests = 0
    finished = False
    params: dict[str, Any] | None = None
    """Its first request's params, as sent: what a retry without `requestState` must repeat."""
    ident: RequestId | None = None
    """The JSON-RPC id of its latest request (a resumed stream may still carry its answer)."""
    retry_awaited = False
    """An `input_required` answer made it wait for a retry (so `_ops` and the RetryBook know it)."""
    cancelled = False
    """The client cancelled it: its end is counted, not as an error (as its chain says)."""
    notification = False
    """A client notification began it (it ends as it is seen, unless the upstream refuses it)."""
    acknowledged: float | None = None
    """When a `subscriptions/listen`'s acknowledgement reached the client: its upstream time ends
    there (the rest is its stream staying open, as its chain's `stream_ms` says)."""

    def __init__(
        self, method: str | None, mode: str, request: bool, started: float, rows: tuple[BeganRow, EndedRow]
    ) -> None:
        self.method = method
        self.began, self.ended = rows
        self.mode = mode
        self.request = request
        self.started = started


class _Claim:
    """A retry's match and what its operation was before it: the server's refusal of the retry puts
    the operation back (as `proxy.flows.correlate` does with a chain); any other answer counts the
    round it took."""

    __slots__ = ("found", "wait_from", "waited")

    def __init__(self, found: RetryMatch, op: _Op) -> None:
        self.found = found
        self.wait_from = op.wait_from
        self.waited = op.waited


class _Ex:
    """One open client exchange (a plain class: one is made per exchange, on the hot path)."""

    __slots__ = (
        "answered",
        "claims",
        "connection",
        "era",
        "headers",
        "last_sse_id",
        "mode",
        "not_post",
        "ops",
        "plain",
        "refused",
        "requests",
        "response_headers",
        "session",
        "status",
        "unread",
    )

    def __init__(
        self, era: str, mode: str, session: str | None, headers: dict[str, str], connection: str | None
    ) -> None:
        self.era = era
        self.mode = mode
        self.session = session
        self.headers = headers
        self.connection = connection
        """The request head's headers and the client connection: who a retry's caller is (`caller`)."""
        self.ops: list[_Op] = []
        self.requests: dict[RequestId, _Op] = {}
        self.answered: set[RequestId] = set()
        self.status: int | None = None
        self.response_headers: dict[str, str] | None = None
        """The response head's headers (read only for an `initialize` answer's minted session)."""
        self.last_sse_id: str | None = None
        self.not_post = False
        """A GET or DELETE: its own operation (a stream, a session's end) ends when it closes."""
        self.claims: dict[RequestId, _Claim] | None = None
        """Its MRTR retries still unanswered: the round each takes once the server does not refuse it."""
        self.unread = False
        """Its response body, or the rest of it, went by unread: an answer may have been there."""
        self.plain = False
        """A request to a path other than the MCP endpoint: one plain HTTP operation, whatever its
        body holds."""
        self.refused: _Op | None = None
        """The operation of a body the proxy refused itself, until its answer says whether it was a
        request (an error naming an id: counted then, as any request the proxy answers itself)."""

    def caller(self) -> Caller:
        """Who sent the exchange's requests, as MRTR retry matching tells clients apart."""
        return caller_of(self.headers, self.connection)

    def minted_session(self) -> str | None:
        """The session id the response head carried, if any."""
        headers = self.response_headers or {}
        return next((v for k, v in headers.items() if k.lower() == "mcp-session-id"), None)

    def main(self) -> _Op | None:
        return next(iter(self.requests.values()), None) or (self.ops[0] if self.ops else None)

    def failed(self) -> bool:
        return self.status is not None and self.status >= 400

    def deletes(self) -> bool:
        """Whether it is the client's DELETE of its session."""
        return bool(self.ops) and self.ops[0].method == DELETE_SESSION


_Quick = list[Any]
"""A pass-through POST exchange that so far carries nothing but one plain request and its answer:
what nearly all traffic is. It is counted without the operation tables (no `_Ex`, no `_Op`, no
calls), and becomes an `_Ex` (`OpCounter._promote`) the moment an observation needs those tables:
anything else on it, or anything elsewhere that could reach it (a cancellation, a resumed stream,
a bridge), so whatever the slow path reads is always there.

A list laid out as `Q_OPENED`... `Q_DONE` say (`_quick`): one is made per exchange, and a list costs
a third of an instance of a class with an `__init__`."""

Q_OPENED, Q_REQUEST, Q_ROWS, Q_STARTED, Q_STATUS, Q_HEADERS, Q_DONE = range(7)
"""Places in a `_Quick`: its `ExchangeOpened`; its one request (None until seen) with the rows it
counts into and when it was seen; the response head's status and headers (None until seen); whether
its request was answered (and counted)."""


def _quick(opened: ExchangeOpened) -> _Quick:
    """A quick exchange that has seen nothing but its opening."""
    return [opened, None, None, 0.0, None, None, False]


class OpCounter:
    """Follows client operations through observations and tells `Counters` what happened to them."""

    def __init__(
        self, counters: Counters, retry_window: float = RETRY_WINDOW, endpoint: Endpoint | None = None
    ) -> None:
        """`retry_window`: seconds a pass-through call answered `input_required` waits for its retry
        (`continuation_ttl`), as the chain builder's; `endpoint`: the MCP endpoint's paths."""
        self._counters = counters
        self._plain = endpoint.is_plain if endpoint is not None and endpoint.known else None
        """Whether an exchange's path is not the MCP endpoint's (None: every path is)."""
        self._endpoint_paths = endpoint.paths if endpoint is not None else frozenset()
        """The endpoint's own paths, checked before `_plain` (every MCP request's path is one)."""
        self._ids = itertools.count(1)
        self._exchanges: dict[str, _Ex] = {}
        self._quick: dict[str, _Quick] = {}
        """Open exchanges counted the quick way (see `_Quick`); never in `_exchanges` at the same time."""
        self._ops: BoundedMap = BoundedMap()
        """Operation id -> operation, for the retries the RetryBook names by id."""
        self._retries = RetryBook(retry_window)
        self._nested: BoundedMap = BoundedMap()
        self._resumes: ResumeWaits[_Op] = ResumeWaits()
        """Operations of requests whose stream closed after an event id, unanswered: the client may
        resume it, and may cancel it meanwhile. Requests unanswered on open exchanges are found there
        (`_unanswered`), so the traffic path keeps no table of them."""
        self._cancel_waits: ResumeWaits[_Op] = ResumeWaits(LATE_CANCEL_S)
        """Legacy calls whose client hung up before the answer, waiting for its cancel (`awaits_cancel`):
        counted at the verdict, as their chains end, since a counter cannot take an error back."""
        self._mode, self._mode_text = Mode.PASSTHROUGH, str(Mode.PASSTHROUGH)
        """The mode of the latest exchange, and its value."""
        self._rows: dict[tuple[str, str, str], tuple[BeganRow, EndedRow]] = {}
        """(client's method, era, mode) -> the rows it counts into, as the counters gave them (bounded:
        `_LABELS_KEPT`)."""
        self._own_rows: dict[tuple[str, str, str], tuple[BeganRow, EndedRow]] = {}
        """(one of `PROXY_LABELS`, era, mode) -> its rows: kept apart from a client's method of the
        same text (bounded by those labels, eras and modes)."""
        self._session_init: BoundedMap = BoundedMap()
        self._sessions_gone: BoundedMap = BoundedMap()
        """Sessions the server said it no longer has (HTTP 404), counted `expired` once each."""
        self._event_ops: BoundedMap = BoundedMap()
        self._legs: BoundedMap = BoundedMap()
        self._continuations: BoundedMap = BoundedMap()
        self._waits = self._resumes.waits
        self._uncancelled = self._cancel_waits.waits
        self._unretried = self._retries.waiting
        """The tables of what waits (the same objects): while all are empty, nothing an observation
        brings can end a wait."""
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            EventIdSeen: self._event_id,
            BodyNotInspected: self._unread,
            AnsweredByProxy: self._answered_here,
            InvalidBody: self._invalid,
            LegMessageSeen: self._leg_message,
            LegLinked: self._leg_linked,
            LegClosed: self._leg_closed,
            ContinuationMoved: self._continuation,
            UpstreamSessionMoved: self._upstream_session,
            FaultInjected: self._held,
            InterceptReleased: self._held,
        }

    def observe_all(self, batch: Sequence[Observation]) -> None:
        """Count observations in order (a listener of the observation sink).

        The two batches a plain pass-through exchange makes (its opening with its request; its response
        head, answer and close) are counted whole here while nothing waits, with no loop and no call
        per observation: this runs for each batch the proxy makes. Any other batch, or one of those
        shapes that carries anything else, is counted observation by observation (`_observe_each`),
        nothing having changed here first.
        """
        if self._waits or self._uncancelled or self._unretried:
            self._observe_each(batch)
            return
        size = len(batch)
        if size == 2:
            opened, seen = batch
            if (
                type(opened) is ExchangeOpened
                and type(seen) is MessageSeen
                and opened.mode is _PASSTHROUGH
                and opened.http_method == "POST"
                and seen.exchange == opened.exchange
                and (
                    self._plain is None
                    or opened.path in self._endpoint_paths
                    or not self._plain(opened.path, opened.client_transport, opened.upstream_transport)
                )
            ):
                q = [opened, None, None, 0.0, None, None, False]  # `_quick`, without the call
                if self._quick_request(q, seen):
                    self._quick[opened.exchange] = q
                    return
        elif size == 3:
            head, seen, closed = batch
            if (
                type(head) is ResponseHeadSeen
                and type(seen) is MessageSeen
                and type(closed) is ExchangeClosed
            ):
                exchange = head.exchange
                entry = self._quick.get(exchange)
                if (
                    entry is not None
                    and seen.exchange == exchange
                    and closed.exchange == exchange
                    and (head.status != SESSION_GONE_STATUS or entry[Q_OPENED].session is None)
                    and self._quick_answer(entry, seen)
                ):
                    del self._quick[exchange]  # answered and closed: nothing of it is read again
                    return
        self._observe_each(batch)

    def _observe_each(self, batch: Sequence[Observation]) -> None:
        """Count observations one by one: the kinds every exchange has (its messages and its response
        head) in the loop itself, a plain pass-through exchange entirely (`_Quick`)."""
        exchanges = self._exchanges
        quick = self._quick
        waits = self._resumes.waits
        unretried = self._retries.waiting
        uncancelled = self._cancel_waits.waits
        for obs in batch:
            if waits:  # the one check the traffic path pays for resumable streams
                if quick:
                    self._promote_all()
                self._end_waits(obs)
            if uncancelled:  # and the one for calls waiting on their client's cancel
                self._end_uncancelled(obs.t)
            if unretried:  # and the one for calls waiting on a retry
                self._end_unretried(obs.t)
            if type(obs) is MessageSeen:
                if quick:
                    q = quick.get(obs.exchange)
                    if q is not None:
                        if not waits and self._quick_message(q, obs):
                            continue
                        self._promote_all()
                ex = exchanges.get(obs.exchange)
                if ex is None or ex.plain:  # a plain HTTP body means no JSON-RPC
                    continue
                if obs.side is _UPSTREAM:  # the server's leg of a message the proxy changed
                    pass
                elif obs.direction is _TO_SERVER:
                    self._client(ex, obs.msg, obs.t)
                else:
                    self._server(ex, obs.msg, obs.t)
                if obs.sse_id is not None:
                    self._note_event(ex, obs.sse_id)
            elif type(obs) is ResponseHeadSeen:
                q = quick.get(obs.exchange) if quick else None
                if q is not None:
                    q[Q_STATUS], q[Q_HEADERS] = obs.status, obs.headers
                    session = q[Q_OPENED].session
                    if obs.status == SESSION_GONE_STATUS and session is not None:
                        self._session_gone(session)
                        self._session_answered(session, obs.status, deletes=False)
                    continue
                ex = exchanges.get(obs.exchange)
                if ex is not None:
                    ex.status = obs.status
                    ex.response_headers = obs.headers
                    gone = obs.status == SESSION_GONE_STATUS
                    if ex.session is not None and not ex.plain and (gone or ex.not_post):
                        if gone:
                            self._refused_session(ex)
                        self._session_answered(ex.session, obs.status, ex.deletes())
            elif type(obs) is ExchangeOpened:
                if (
                    self._plain is not None
                    and obs.path not in self._endpoint_paths
                    and self._plain(obs.path, obs.client_transport, obs.upstream_transport)
                ):
                    self._plain_opened(obs)
                    continue
                mode = obs.mode
                if mode is _PASSTHROUGH and obs.http_method == "POST" and not waits:
                    quick[obs.exchange] = _quick(obs)
                    continue
                if mode is not self._mode:  # its text, worked out once per mode met
                    self._mode, self._mode_text = mode, str(mode)
                ex = exchanges[obs.exchange] = _Ex(
                    obs.client_era, self._mode_text, obs.session, obs.headers, obs.connection
                )
                if obs.http_method != "POST":
                    ex.not_post = True
                    self._stream_opened(ex, obs)
            elif type(obs) is ExchangeClosed:
                if quick:
                    q = quick.get(obs.exchange)
                    if q is not None:
                        if q[Q_DONE] or q[Q_REQUEST] is None:  # answered, or it carried no message
                            del quick[obs.exchange]
                            continue
                        self._promote_all()
                ex = exchanges.pop(obs.exchange, None)
                if ex is None:
                    continue
                if ex.plain:  # a plain HTTP request beside the endpoint: timed, never an error
                    self._finish(ex.ops[0], obs.t, error=False)
                    continue
                if ex.not_post or len(ex.answered) < len(ex.requests):
                    self._closed(ex, obs)  # else every request it carried was answered: nothing ends
                if ex.failed():
                    self._refused_notifications(ex)
            else:
                handler = self._handlers.get(type(obs))
                if handler is not None:
                    if quick:
                        self._promote_all()
                    handler(obs)

    def _quick_message(self, q: _Quick, obs: MessageSeen) -> bool:
        """Count a message on a quick exchange if it is its one plain request or that request's plain
        answer; False if it is anything else (the exchange must be promoted and counted the slow way)."""
        if obs.side is _UPSTREAM and obs.sse_id is None:
            return True  # the server's leg of a message the proxy changed: not counted
        if obs.direction is _TO_SERVER:
            return self._quick_request(q, obs)
        return self._quick_answer(q, obs)

    def _quick_request(self, q: _Quick, obs: MessageSeen) -> bool:
        """Count the client's message on a quick exchange that has seen no request yet if it is a plain
        request (the client's, as it went); False, having changed nothing, if it is anything else."""
        msg = obs.msg
        method = msg.method
        if (
            obs.sse_id is not None
            or obs.side is _UPSTREAM
            or obs.direction is not _TO_SERVER
            or q[Q_REQUEST] is not None
            or msg.kind is not _REQUEST
            or msg.id is None
            or method is None
            or method == "initialize"  # it may mint a session: the slow path counts that
        ):
            return False
        params = msg.params
        if "requestState" in params or "inputResponses" in params:
            return False  # a retry: what it continues is the slow path's to find
        era = q[Q_OPENED].client_era
        rows = self._rows.get((method, era, _PASSTHROUGH_VALUE))
        if rows is None:
            rows = self._rows_of(method, era, _PASSTHROUGH_VALUE)
        began = rows[0]
        began[CHAINS] += 1
        began[REQUESTS] += 1
        q[Q_REQUEST], q[Q_ROWS], q[Q_STARTED] = msg, rows, obs.t
        return True

    def _quick_answer(self, q: _Quick, obs: MessageSeen) -> bool:
        """Count the server's message on a quick exchange if it is the plain answer to its request
        (as the client got it); False, having changed nothing, if it is anything else."""
        msg = obs.msg
        request = q[Q_REQUEST]
        if (
            obs.sse_id is not None
            or obs.side is _UPSTREAM
            or obs.direction is _TO_SERVER
            or request is None
            or q[Q_DONE]
            or not msg.is_response
            or msg.id != request.id
        ):
            return False
        if msg.kind is _ERROR:
            error = True
        else:
            result = msg.raw.get("result")
            if type(result) is not dict or "resultType" in result:
                return False
            error = result.get("isError") is True
        q[Q_DONE] = True
        row = q[Q_ROWS][1]
        if error:
            row[ERRORS] += 1
        upstream = obs.t - q[Q_STARTED]
        if upstream < 0.0:
            upstream = 0.0
        row[0 if upstream <= _FIRST_BOUND else bisect_left(LATENCY_BUCKETS, upstream)] += 1
        row[SUM] += upstream
        row[OBSERVED] += 1
        return True

    def _promote_all(self) -> None:
        """Give every quick exchange the tables the slow path reads (it is about to read them)."""
        for key, q in self._quick.items():
            self._exchanges[key] = self._promote(q)
        self._quick.clear()

    @staticmethod
    def _promote(q: _Quick) -> _Ex:
        """The `_Ex` (and `_Op`) the slow path would have made of what the quick exchange has seen."""
        opened, msg, rows, started, status, headers, done = q
        ex = _Ex(opened.client_era, _PASSTHROUGH_VALUE, opened.session, opened.headers, opened.connection)
        ex.status, ex.response_headers = status, headers
        ident = msg.id if msg is not None else None
        if msg is not None and ident is not None and rows is not None:
            op = _Op(msg.method, _PASSTHROUGH_VALUE, True, started, rows)
            op.params = msg.params
            op.ident = ident
            ex.ops.append(op)
            ex.requests[ident] = op
            if done:
                ex.answered.add(ident)
                op.finished = True
        return ex

    def waiting_on_client(self, now: float | None = None) -> int:
        """Operations waiting on the client `now`: a question the server asked in flight and not yet
        answered, or an `input_required` answer whose retry has not come and may still (read on a
        scrape: the tables are bounded, and the traffic path keeps no count of its own). A wait that
        ran out by `now` ends here, as of when it ran out, as the next observation would end it."""
        if now is not None:
            self.sweep(now)
        self._promote_all()  # a quick exchange never waits, but the tables below are read whole
        waiting = {
            id(op)
            for ops in (
                (op for ex in self._exchanges.values() for op in ex.ops),
                self._nested.values(),
                self._ops.values(),
            )
            for op in ops
            if op.wait_from is not None and not op.finished
        }
        return len(waiting)

    # -- exchanges ----------------------------------------------------------------------------------

    def _stream_opened(self, ex: _Ex, obs: ExchangeOpened) -> None:
        """A GET or DELETE exchange opened: an operation of its own, or a resumed stream's."""
        if obs.http_method == "GET":
            last = next((v for k, v in obs.headers.items() if k.lower() == "last-event-id"), None)
            op = self._event_ops.get((obs.session, last)) if last else None
            if op is not None:
                ex.ops.append(op)
                if op.ident is not None and not op.finished:
                    ex.requests[op.ident] = op
                    self._resumes.take(ex.session, op.ident)
                return
            self._open(ex, GET_STREAM, obs.t, request=False, own=True)
        elif obs.http_method == "DELETE":
            self._open(ex, DELETE_SESSION, obs.t, request=False, own=True)

    def _plain_opened(self, obs: ExchangeOpened) -> None:
        """A plain HTTP request opened: an operation of its own, timed like any, never an error."""
        mode = str(obs.mode)
        ex = self._exchanges[obs.exchange] = _Ex(obs.client_era, mode, None, obs.headers, obs.connection)
        ex.plain = True
        self._open(ex, PLAIN_HTTP, obs.t, request=True, own=True)

    def _event_id(self, obs: EventIdSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            self._note_event(ex, obs.sse_id)

    def _note_event(self, ex: _Ex, sse_id: str) -> None:
        ex.last_sse_id = sse_id
        op = ex.main()
        if op is not None:
            self._event_ops[(ex.session, sse_id)] = op

    def _unread(self, obs: BodyNotInspected) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            ex.unread = True

    def _answered_here(self, obs: AnsweredByProxy) -> None:
        """The proxy answers the exchange's requests itself: the operations they began took no time
        upstream, so none is measured (a retry that continues an earlier operation keeps its rounds')."""
        ex = self._exchanges.get(obs.exchange)
        if ex is None:
            return
        claims = ex.claims or {}
        for ident, op in ex.requests.items():
            if ident not in claims:
                op.request = False

    def _invalid(self, obs: InvalidBody) -> None:
        """A body with no method read: counted as `none`, or as `other` when the proxy refused it for
        its method (a name that is not plain method text, as the label docs promise)."""
        ex = self._exchanges.get(obs.exchange)
        if ex is None or ex.plain:
            return
        label = OTHER if obs.problem == REFUSED + IMPLAUSIBLE_METHOD else NO_METHOD
        op = self._open(ex, None, obs.t, request=False, label=label)
        if obs.problem.startswith(REFUSED):
            ex.refused = op
        self._finish(op, obs.t, error=True)

    def _closed(self, ex: _Ex, obs: ExchangeClosed) -> None:
        t, outcome = obs.t, obs.outcome
        if ex.claims:  # retries no answer refused here: each took its round
            for ident in ex.claims:
                self._claim_settled(ex.claims[ident], ex.requests[ident], refusal=False)
        for ident, op in ex.requests.items():
            if ident in ex.answered:
                continue
            if op.finished:
                continue
            read_past = outcome is None or hung_up_after_unread(outcome, ex.era, ex.unread)
            if ex.unread and read_past and not ex.failed():
                self._finish(op, t, error=False)  # its answer may have been in what went by unread
                continue
            if not op.cancelled and not ex.failed():
                passthrough = ex.mode == _PASSTHROUGH_VALUE
                if awaits_resume(outcome, ex.era, passthrough, ex.last_sse_id):
                    if self._resumes.session_over(ex.session):  # cut because of its session's end
                        self._finish(op, t, error=True)
                        continue
                    replaced = self._resumes.wait(ex.session, ident, op, t, outcome)
                    if replaced is not None:
                        self._finish(replaced.target, replaced.since, error=True)
                    continue
                if awaits_cancel(outcome, ex.era, ex.session):
                    replaced = self._cancel_waits.wait(ex.session, ident, op, t, outcome)
                    if replaced is not None:
                        self._finish(replaced.target, replaced.since, error=True)
                    continue
            if cancels_by_hanging_up(outcome, ex.era):
                op.cancelled = True  # a 2026-07-28 client cancels by closing its stream
            self._finish(op, t, error=True)
        for op in ex.ops:
            if op.method not in (GET_STREAM, DELETE_SESSION):
                continue
            if op.method == DELETE_SESSION and ex.session and not op.finished:
                self._counters.session("ended")
            declined = op.method == GET_STREAM and declines_stream("GET", ex.status)
            error = outcome not in STREAM_NORMAL_ENDS or (ex.failed() and not declined)
            self._finish(op, t, error=error)

    @staticmethod
    def _refused_notifications(ex: _Ex) -> None:
        """The client notifications the upstream refused (HTTP 4xx or 5xx) were not delivered: each
        counts as an error, as its chain ends (`error`, the status)."""
        for op in ex.ops:
            if op.notification:
                op.ended[ERRORS] += 1

    # -- messages -------------------------------------------------------------------------------------

    def _client(self, ex: _Ex, msg: Message, t: float) -> None:
        if msg.kind is _REQUEST and msg.id is not None:
            params = msg.params
            found = (
                self._retries.match(msg.method, params, ex.caller())
                if "requestState" in params or "inputResponses" in params
                else None
            )
            op = self._ops.get(found.chain_id) if found is not None and found.chain_id is not None else None
            if op is None:
                op = self._open(ex, msg.method, t, request=True, requested=True)
                op.params = params
            else:
                assert found is not None
                self._rows_of(msg.method or "", ex.era, ex.mode)[0][REQUESTS] += 1
                ex.ops.append(op)
                if ex.claims is None:
                    ex.claims = {}
                ex.claims[msg.id] = _Claim(found, op)
                self._stop_waiting(op, t)
            op.ident = msg.id
            ex.requests[msg.id] = op
        elif msg.is_response:
            op = self._nested.pop((ex.session, msg.id), None)
            if op is None:
                self._finish(self._open(ex, RESPONSE, t, request=True, own=True), t, error=False)
            else:
                ex.ops.append(op)
                op.waiting_on = max(0, op.waiting_on - 1)
                if op.waiting_on == 0:
                    self._stop_waiting(op, t)
        elif msg.kind is _NOTIFICATION:
            target = None
            if msg.method == "notifications/cancelled":
                cancelled = msg.params.get("requestId")
                if isinstance(cancelled, (str, int)):
                    target = self._unanswered(ex.session, cancelled)
                    if target is not None:
                        target.cancelled = True
                        self._cancel_wait(ex.session, cancelled, t)
            elif msg.method == "notifications/initialized" and ex.session:
                target = self._session_init.get(ex.session)
            if target is None:
                op = self._open(ex, msg.method, t, request=False)
                op.notification = True
                self._finish(op, t, error=False)
        else:
            self._finish(self._open(ex, msg.method, t, request=msg.id is not None), t, error=True)

    def _server(self, ex: _Ex, msg: Message, t: float) -> None:
        ident = msg.id
        if ex.refused is not None and msg.kind is _ERROR and ident is not None:
            ex.refused.began[REQUESTS] += 1  # the proxy's refusal answers a request
            ex.refused = None
        if msg.is_response and ident is not None:
            op = ex.requests.get(ident)
            if op is not None:
                self._answered(ex, op, ident, msg, t)
                return
        if msg.kind is _NOTIFICATION:
            if msg.method == LISTEN_ACKNOWLEDGED:
                self._acknowledged(ex, t)
            return
        if msg.kind is _REQUEST and ident is not None:
            nests = next(iter(ex.requests.values())) if len(ex.requests) == 1 else None
            nests = nests or (ex.ops[-1] if ex.ops else None)
            if nests is not None:
                self._nested[(ex.session, ident)] = nests
                nests.waiting_on += 1
                if nests.wait_from is None:
                    nests.wait_from = t

    @staticmethod
    def _acknowledged(ex: _Ex, t: float) -> None:
        """A listen's acknowledgement: the listen is answered, its stream stays open."""
        op = ex.main()
        if op is not None and op.method == LISTEN and op.acknowledged is None:
            op.acknowledged = t

    def _held(self, obs: FaultInjected | InterceptReleased) -> None:
        """The proxy held one of an exchange's messages (a delay fault, an intercept): that time is the
        proxy's, not the upstream's, as the chain's `held_ms` says."""
        held = obs.delay_ms if isinstance(obs, FaultInjected) and obs.applied else 0.0
        if isinstance(obs, InterceptReleased):
            held = obs.held_ms
        ex = self._exchanges.get(obs.exchange)
        if not held or ex is None:
            return
        op = ex.requests.get(obs.message_id) if obs.message_id is not None else None
        op = op or ex.main()
        if op is not None and not op.finished:
            op.waited += held / 1000

    def _answered(self, ex: _Ex, op: _Op, ident: RequestId, msg: Message, t: float) -> None:
        """The answer to one of the exchange's requests: its operation ends, or waits for a retry."""
        ex.answered.add(ident)
        claim = ex.claims.pop(ident, None) if ex.claims else None
        if claim is not None and self._claim_settled(claim, op, refusal=refused(msg)):
            return
        if op.method == "initialize" and msg.kind is _RESULT and ex.session is None:
            minted = ex.minted_session()
            if minted:
                self._session_init[minted] = op
                self._counters.session("opened")
        if msg.kind is _ERROR:
            self._finish(op, t, error=True)
            return
        result = msg.raw.get("result")
        if type(result) is not dict:
            self._finish(op, t, error=False)
            return
        if "resultType" in result and result_type(result) == RESULT_INPUT_REQUIRED:
            self._await_retry(ex, op, result, t)
            return
        self._finish(op, t, error=result.get("isError") is True)

    def _await_retry(self, ex: _Ex, op: _Op, result: dict[str, Any], t: float) -> None:
        """An `input_required` answer: the operation waits for the client's retry (in pass-through, for
        the retry window; a bridge's continuation says when its call stops waiting)."""
        if op.id is None:
            op.id = f"o{next(self._ids)}"
        signature = request_signature(op.method, op.params or {})
        since = t if op.mode == _PASSTHROUGH_VALUE else None
        self._retries.expect(op.id, signature, result, ex.caller(), since)
        self._ops[op.id] = op  # the retry names it by id
        op.retry_awaited = True
        if op.wait_from is None:
            op.wait_from = t

    def _claim_settled(self, claim: _Claim, op: _Op, *, refusal: bool) -> bool:
        """Count the round a retry took, unless the server refused the retry (`refusal`): then the
        operation is put back as the retry found it, and the answer settles nothing else."""
        if not refusal or op.finished:
            self._round(op, op.rounds + 1)
            return False
        op.wait_from, op.waited = claim.wait_from, claim.waited
        self._retries.restore(claim.found)
        return True

    def sweep(self, now: float) -> None:
        """End the waits that ran out by `now` though no observation came since, as the chain builder's
        sweep does (the observation sink runs both at once, so the counters and the chains agree)."""
        if self._resumes.waits:
            for wait, _ in self._resumes.ran_out(now):
                self._finish(wait.target, wait.since, error=True)
        if self._cancel_waits.waits:
            self._end_uncancelled(now)
        if self._retries.waiting:
            self._end_unretried(now)

    def _end_unretried(self, now: float) -> None:
        """End the pass-through operations whose client has not retried within the window, as of when
        it ran out: no error, and no upstream time measured (their chains end `incomplete`)."""
        for op_id, at in self._retries.overdue(now):
            op = self._ops.get(op_id)
            if op is not None and not op.finished:
                op.request = False
                self._finish(op, at, error=False)

    def _unanswered(self, session: str | None, ident: RequestId) -> _Op | None:
        """The operation of the session's latest request `ident` still unanswered (what a
        `notifications/cancelled` names): on an open exchange, else on a stream the client may resume."""
        for ex in reversed(self._exchanges.values()):
            if ex.session == session and ident in ex.requests and ident not in ex.answered:
                return ex.requests[ident]
        wait: Wait[_Op] | None = self._resumes.waits.get((session, ident)) or self._cancel_waits.waits.get(
            (session, ident)
        )
        return wait.target if wait is not None else None

    # -- streams the client may resume ------------------------------------------------------------------

    def _end_waits(self, obs: Observation) -> None:
        """End the operations whose wait for a resume ran out by `obs` (as the chain builder does), as of
        their cut."""
        for wait, _ in self._resumes.ran_out(obs.t):
            self._finish(wait.target, wait.since, error=True)

    def _session_answered(self, session: str, status: int, deletes: bool) -> None:
        """A response head of a request of `session`: when it says the session is over (`ends_session`),
        its operations waiting for a resume end, as of their cut, and a stream of it cut later waits for
        none (as the chain builder does)."""
        if ends_session(deletes, status):
            for wait, _ in self._resumes.end_session(session):
                self._finish(wait.target, wait.since, error=True)

    def _cancel_wait(self, session: str | None, ident: RequestId, t: float) -> None:
        """The client cancelled a request that waited for a resume or for this cancel: it ends now, not
        as an error."""
        wait = self._resumes.take(session, ident) or self._cancel_waits.take(session, ident)
        if wait is not None:
            self._finish(wait.target, t, error=True)

    def _end_uncancelled(self, now: float) -> None:
        """End, as errors of how their exchange closed and as of the close, the calls whose cancel did
        not come within `LATE_CANCEL_S` by `now` (as the chain builder ends them)."""
        for wait, _ in self._cancel_waits.ran_out(now):
            self._finish(wait.target, wait.since, error=True)

    # -- a bridge's legs, parked calls and sessions -----------------------------------------------------

    def _leg_message(self, obs: LegMessageSeen) -> None:
        joins = obs.joins
        op = self._legs.get(obs.leg if joins is None else joins)
        if op is None:
            ex = self._exchanges.get(obs.exchange)
            op = ex.main() if ex is not None else None
            if op is None:
                return
            if joins is None:
                self._legs[obs.leg] = op
        msg = obs.msg
        if obs.direction is _TO_SERVER and msg.kind is _REQUEST:
            op.upstream_requests += 1
            if op.mode == _LEGACY_TO_MRTR_VALUE and msg.method == op.method:
                self._round(op, op.upstream_requests)

    def _leg_linked(self, obs: LegLinked) -> None:
        op = self._legs.get(obs.related)
        if op is not None:
            self._legs[obs.leg] = op

    def _leg_closed(self, obs: LegClosed) -> None:
        self._legs.pop(obs.leg, None)

    def _continuation(self, obs: ContinuationMoved) -> None:
        op = self._continuations.get(obs.continuation)
        if op is None:
            ex = self._exchanges.get(obs.exchange)
            op = ex.main() if ex is not None else None
            if op is None:
                return
            self._continuations[obs.continuation] = op
        if obs.state in ("ended", "expired", "lost"):
            self._continuations.pop(obs.continuation, None)
        if obs.state == "expired":  # the client never came back (or the proxy stopped first): nothing failed
            op.request = False  # and no upstream time is measured: its chain ends `incomplete`
            self._finish(op, obs.t, error=False)
        elif obs.state in ("lost", "cancelled"):
            self._finish(op, obs.t, error=True)

    def _refused_session(self, ex: _Ex) -> None:
        """A 404 to a request of a relayed session: the server forgot it, unless the request was the
        client's DELETE of it (counted `ended` when it closes)."""
        if ex.mode == _PASSTHROUGH_VALUE and not ex.deletes():
            assert ex.session is not None
            self._session_gone(ex.session)

    def _session_gone(self, session: str) -> None:
        """The server no longer has a relayed session (it restarted, or let it expire): counted once,
        however many of the client's requests it refuses."""
        if session not in self._sessions_gone:
            self._sessions_gone[session] = None
            self._counters.session("expired")

    def _upstream_session(self, obs: UpstreamSessionMoved) -> None:
        self._counters.session(obs.state)

    # -- operations ---------------------------------------------------------------------------------------

    def _open(
        self,
        ex: _Ex,
        method: str | None,
        t: float,
        *,
        request: bool,
        requested: bool = False,
        own: bool = False,
        label: str | None = None,
    ) -> _Op:
        """A new operation (`request`: its upstream time is measured; `requested`: a client's
        JSON-RPC request began it). `method` is the client's, unless `own` says the proxy named the
        operation itself; `label` is the label of an operation without a method."""
        mode = ex.mode
        if own or label is not None or method is None:
            rows = self._own_rows_of(label or method or NO_METHOD, ex.era, mode)
        else:
            rows = self._rows.get((method, ex.era, mode)) or self._rows_of(method, ex.era, mode)
        op = _Op(method, mode, request, t, rows)
        ex.ops.append(op)
        began = rows[0]
        began[CHAINS] += 1
        if requested:
            began[REQUESTS] += 1
        if mode in _BRIDGED:
            self._counters.rounds_taken(mode, 1)
        return op

    def _own_rows_of(self, label: str, era: str, mode: str) -> tuple[BeganRow, EndedRow]:
        """The rows of an operation the proxy labels itself (one of `PROXY_LABELS`)."""
        key = (label, era, mode)
        rows = self._own_rows.get(key)
        if rows is None:
            rows = self._own_rows[key] = self._counters.rows(label, era, mode)
        return rows

    def _rows_of(self, method: str, era: str, mode: str) -> tuple[BeganRow, EndedRow]:
        """The rows an operation of `method` counts into (remembered for the first `_LABELS_KEPT`)."""
        key = (method, era, mode)
        rows = self._rows.get(key)
        if rows is None:
            rows = self._counters.rows(self._counters.label(method), era, mode)
            if len(self._rows) < _LABELS_KEPT:
                self._rows[key] = rows
        return rows

    def _round(self, op: _Op, rounds: int) -> None:
        if rounds > op.rounds:
            if op.mode in _BRIDGED:
                self._counters.rounds_taken(op.mode, rounds - op.rounds)
            op.rounds = rounds

    @staticmethod
    def _stop_waiting(op: _Op, t: float) -> None:
        if op.wait_from is not None:
            op.waited += t - op.wait_from
            op.wait_from = None

    def _finish(self, op: _Op, t: float, *, error: bool) -> None:
        if op.finished:
            return
        op.finished = True
        if op.wait_from is not None:
            self._stop_waiting(op, t)
        if op.retry_awaited and op.id is not None:
            self._ops.pop(op.id, None)
            self._retries.forget(op.id)
        row = op.ended
        if error and not op.cancelled:
            row[ERRORS] += 1
        if op.request:
            answered = t if op.acknowledged is None else min(t, op.acknowledged)
            upstream = (answered - op.started) - op.waited
            if upstream < 0.0:
                upstream = 0.0
            row[0 if upstream <= _FIRST_BOUND else bisect_left(LATENCY_BUCKETS, upstream)] += 1
            row[SUM] += upstream
            row[OBSERVED] += 1
