"""Counting client operations for the metrics straight from observations, without building chains.

A chain costs redacted records, pydantic headlines and bus events; the counters need far less: which
operation a client request starts (or continues, for an MRTR retry), when it ends and how, how long it
waited on the client, how many rounds a bridge made of it. `OpCounter` follows the same rules as the
chain builder's correlation (`proxy.flows.correlate`) for exactly that much, and moves the counters of
`ProxyMetrics` as observations arrive, whether or not anyone watches chains. An *operation* here is
what a chain is there: one client request with its nested requests, rounds and final answer, a GET
stream, a DELETE, an invalid body, or a notification or response that joins no earlier request.

Bounded like the builder: every correlation table forgets its oldest entries past `CORRELATION_BOUND`,
and an exchange's state goes when it closes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.flows.events import Direction, Mode, Side
from proxy.flows.exchanges import BoundedMap
from proxy.flows.observations import (
    STREAM_NORMAL_ENDS,
    ContinuationMoved,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegLinked,
    LegMessageSeen,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
    UpstreamSessionMoved,
)
from proxy.flows.retries import RetryBook, request_signature
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import RESULT_INPUT_REQUIRED, result_type

_BRIDGED = (Mode.LEGACY_TO_MRTR.value, Mode.MRTR_TO_LEGACY.value)


class Counters(Protocol):
    """What the counting moves (`ProxyMetrics` is one)."""

    def opened(self, method: str | None, era: str, mode: str) -> None:
        """An operation began."""
        ...

    def requested(self, method: str | None, era: str, mode: str) -> None:
        """A client sent a JSON-RPC request."""
        ...

    def rounds_taken(self, mode: str, added: int) -> None:
        """A bridged operation took `added` more rounds."""
        ...

    def ended(self, method: str | None, mode: str, *, error: bool, upstream_s: float | None) -> None:
        """An operation ended; `upstream_s` is its time upstream when it was a request."""
        ...

    def session(self, state: str) -> None:
        """A session opened, ended, expired or was re-initialized."""
        ...


@dataclass(slots=True)
class _Op:
    """One client operation, as far as the counters need it."""

    id: str
    method: str | None
    mode: str
    request: bool
    started: float
    rounds: int = 1
    waited: float = 0.0
    wait_from: float | None = None
    waiting_on: int = 0
    upstream_requests: int = 0
    finished: bool = False
    params: dict[str, Any] | None = None
    """Its first request's params, as sent: what a retry without `requestState` must repeat."""
    ident: RequestId | None = None
    """The JSON-RPC id of its latest request (a resumed stream may still carry its answer)."""
    retry_awaited: bool = False
    """An `input_required` answer made it wait for a retry (so `_ops` and the RetryBook know it)."""


class _Ex:
    """One open client exchange (a plain class: one is made per exchange, on the hot path)."""

    __slots__ = (
        "answered",
        "era",
        "http_method",
        "last_sse_id",
        "mode",
        "ops",
        "requests",
        "response_headers",
        "session",
        "status",
    )

    def __init__(self, era: str, mode: str, http_method: str, session: str | None) -> None:
        self.era = era
        self.mode = mode
        self.http_method = http_method
        self.session = session
        self.ops: list[_Op] = []
        self.requests: dict[RequestId, _Op] = {}
        self.answered: set[RequestId] = set()
        self.status: int | None = None
        self.response_headers: dict[str, str] | None = None
        """The response head's headers (read only for an `initialize` answer's minted session)."""
        self.last_sse_id: str | None = None

    def minted_session(self) -> str | None:
        """The session id the response head carried, if any."""
        headers = self.response_headers or {}
        return next((v for k, v in headers.items() if k.lower() == "mcp-session-id"), None)

    def main(self) -> _Op | None:
        return next(iter(self.requests.values()), None) or (self.ops[0] if self.ops else None)

    def failed(self) -> bool:
        return self.status is not None and self.status >= 400


class OpCounter:
    """Follows client operations through observations and tells `Counters` what happened to them."""

    def __init__(self, counters: Counters) -> None:
        self._counters = counters
        self._ids = itertools.count(1)
        self._exchanges: dict[str, _Ex] = {}
        self._ops: BoundedMap = BoundedMap()
        """Operation id -> operation, for the retries the RetryBook names by id."""
        self._retries = RetryBook()
        self._nested: BoundedMap = BoundedMap()
        self._pending: BoundedMap = BoundedMap()
        self._session_init: BoundedMap = BoundedMap()
        self._event_ops: BoundedMap = BoundedMap()
        self._legs: BoundedMap = BoundedMap()
        self._continuations: BoundedMap = BoundedMap()
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            MessageSeen: self._message,
            ExchangeOpened: self._opened,
            ResponseHeadSeen: self._head,
            ExchangeClosed: self._closed,
            EventIdSeen: self._event_id,
            InvalidBody: self._invalid,
            LegMessageSeen: self._leg_message,
            LegLinked: self._leg_linked,
            LegClosed: self._leg_closed,
            ContinuationMoved: self._continuation,
            UpstreamSessionMoved: self._upstream_session,
        }

    def observe_all(self, batch: Sequence[Observation]) -> None:
        """Count observations in order (a listener of the observation sink)."""
        handlers = self._handlers
        for obs in batch:
            handler = handlers.get(type(obs))
            if handler is not None:
                handler(obs)

    # -- exchanges ----------------------------------------------------------------------------------

    def _opened(self, obs: ExchangeOpened) -> None:
        ex = _Ex(obs.client_era, obs.mode.value, obs.http_method, obs.session)
        self._exchanges[obs.exchange] = ex
        if obs.http_method == "GET":
            last = next((v for k, v in obs.headers.items() if k.lower() == "last-event-id"), None)
            op = self._event_ops.get((obs.session, last)) if last else None
            if op is not None:
                ex.ops.append(op)
                if op.ident is not None and not op.finished:
                    ex.requests[op.ident] = op
                return
            self._open(ex, "GET stream", obs.t, request=False)
        elif obs.http_method == "DELETE":
            self._open(ex, "DELETE session", obs.t, request=False)

    def _head(self, obs: ResponseHeadSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            ex.status = obs.status
            ex.response_headers = obs.headers

    def _event_id(self, obs: EventIdSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            self._note_event(ex, obs.sse_id)

    def _note_event(self, ex: _Ex, sse_id: str) -> None:
        ex.last_sse_id = sse_id
        op = ex.main()
        if op is not None:
            self._event_ops[(ex.session, sse_id)] = op

    def _invalid(self, obs: InvalidBody) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            self._finish(self._open(ex, None, obs.t, request=False), obs.t, error=True)

    def _closed(self, obs: ExchangeClosed) -> None:
        ex = self._exchanges.pop(obs.exchange, None)
        if ex is None:
            return
        t, outcome = obs.t, obs.outcome
        for ident, op in ex.requests.items():
            if ident in ex.answered:
                continue
            if outcome is None and ex.last_sse_id is not None and not ex.failed():
                continue  # the server may drop a stream after an event id; the client resumes it
            if self._pending.get((ex.session, ident)) is op:
                del self._pending[(ex.session, ident)]
            self._finish(op, t, error=True)
        for op in ex.ops:
            if op.method not in ("GET stream", "DELETE session"):
                continue
            if op.method == "DELETE session" and ex.session and not op.finished:
                self._counters.session("ended")
            error = outcome not in STREAM_NORMAL_ENDS or ex.failed()
            self._finish(op, t, error=error)

    # -- messages -------------------------------------------------------------------------------------

    def _message(self, obs: MessageSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is None:
            return
        if obs.direction is Direction.TO_SERVER:
            if obs.side is not Side.UPSTREAM:
                self._client(ex, obs.msg, obs.t)
        else:
            self._server(ex, obs.msg, obs.t)
        if obs.sse_id is not None:
            self._note_event(ex, obs.sse_id)

    def _client(self, ex: _Ex, msg: Message, t: float) -> None:
        if msg.kind is Kind.REQUEST and msg.id is not None:
            self._counters.requested(msg.method, ex.era, ex.mode)
            op = self._retried(msg)
            if op is None:
                op = self._open(ex, msg.method, t, request=True)
                op.params = msg.params
            else:
                ex.ops.append(op)
                self._round(op, op.rounds + 1)
                self._stop_waiting(op, t)
            op.ident = msg.id
            ex.requests[msg.id] = op
            self._pending[(ex.session, msg.id)] = op
        elif msg.is_response:
            op = self._nested.pop((ex.session, msg.id), None)
            if op is None:
                self._finish(self._open(ex, "(response)", t, request=True), t, error=False)
            else:
                ex.ops.append(op)
                op.waiting_on = max(0, op.waiting_on - 1)
                if op.waiting_on == 0:
                    self._stop_waiting(op, t)
        elif msg.kind is Kind.NOTIFICATION:
            target = None
            if msg.method == "notifications/cancelled":
                target = self._pending.get((ex.session, msg.params.get("requestId")))
            elif msg.method == "notifications/initialized" and ex.session:
                target = self._session_init.get(ex.session)
            if target is None:
                self._finish(self._open(ex, msg.method, t, request=False), t, error=False)
        else:
            self._finish(self._open(ex, msg.method, t, request=msg.id is not None), t, error=True)

    def _server(self, ex: _Ex, msg: Message, t: float) -> None:
        if msg.is_response and msg.id is not None and msg.id in ex.requests:
            op = ex.requests[msg.id]
            ex.answered.add(msg.id)
            self._pending.pop((ex.session, msg.id), None)
            self._answered(ex, op, msg, t)
            return
        if msg.kind is Kind.REQUEST and msg.id is not None:
            nests = next(iter(ex.requests.values())) if len(ex.requests) == 1 else None
            nests = nests or (ex.ops[-1] if ex.ops else None)
            if nests is not None:
                self._nested[(ex.session, msg.id)] = nests
                nests.waiting_on += 1
                if nests.wait_from is None:
                    nests.wait_from = t

    def _answered(self, ex: _Ex, op: _Op, msg: Message, t: float) -> None:
        if op.method == "initialize" and msg.kind is Kind.RESULT and ex.session is None:
            minted = ex.minted_session()
            if minted:
                self._session_init[minted] = op
                self._counters.session("opened")
        if msg.kind is Kind.ERROR:
            self._finish(op, t, error=True)
            return
        result = msg.result
        waits = isinstance(result, dict) and "resultType" in result
        if waits and result_type(result) == RESULT_INPUT_REQUIRED:
            signature = request_signature(op.method, op.params or {})  # only when a retry is expected
            self._retries.expect(op.id, signature, result)
            self._ops[op.id] = op  # the retry names it by id
            op.retry_awaited = True
            if op.wait_from is None:
                op.wait_from = t
            return
        self._finish(op, t, error=isinstance(result, dict) and result.get("isError") is True)

    def _retried(self, msg: Message) -> _Op | None:
        params = msg.params
        if "requestState" not in params and "inputResponses" not in params:
            return None  # no retry (the RetryBook would say so too, a few calls later)
        found = self._retries.match(msg.method, params)
        if found is None or found.chain_id is None:
            return None
        op: _Op | None = self._ops.get(found.chain_id)
        return op

    # -- a bridge's legs, parked calls and sessions -----------------------------------------------------

    def _leg_message(self, obs: LegMessageSeen) -> None:
        op = self._legs.get(obs.leg)
        if op is None:
            ex = self._exchanges.get(obs.exchange)
            op = ex.main() if ex is not None else None
            if op is None:
                return
            self._legs[obs.leg] = op
        msg = obs.msg
        if obs.direction is Direction.TO_SERVER and msg.kind is Kind.REQUEST:
            op.upstream_requests += 1
            if op.mode == Mode.LEGACY_TO_MRTR.value and msg.method == op.method:
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
        if obs.state in ("ended", "expired"):
            self._continuations.pop(obs.continuation, None)
        if obs.state in ("expired", "cancelled"):
            self._finish(op, obs.t, error=True)

    def _upstream_session(self, obs: UpstreamSessionMoved) -> None:
        self._counters.session(obs.state)

    # -- operations ---------------------------------------------------------------------------------------

    def _open(self, ex: _Ex, method: str | None, t: float, *, request: bool) -> _Op:
        op = _Op(f"o{next(self._ids)}", method, ex.mode, request, t)
        ex.ops.append(op)
        self._counters.opened(method, ex.era, ex.mode)
        if ex.mode in _BRIDGED:
            self._counters.rounds_taken(ex.mode, 1)
        return op

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
        if op.retry_awaited:
            self._ops.pop(op.id, None)
            self._retries.forget(op.id)
        upstream = max(0.0, (t - op.started) - op.waited) if op.request else None
        self._counters.ended(op.method, op.mode, error=error, upstream_s=upstream)
