"""How the span follower takes the messages on a client exchange: a client request opens an
operation's root span or, as an MRTR retry, a round of the operation that got `input_required`; a
client notification gets a span in the trace of the request it refers to; a request that reaches the
client on its stream is a nested span until the client answers; the answer ends a request's span.

No I/O, no clock: each observation carries its time.
"""

from __future__ import annotations

from typing import Any

from proxy.flows.observations import CLIENT_CANCELLED, MessageSeen
from proxy.flows.retries import caller_of, request_signature
from proxy.flows.span_records import Attributes, SpanRecord, header_value
from proxy.flows.span_state import (
    ERROR,
    NOTIFICATION,
    REQUEST,
    RESULT,
    SPAN_CLIENT,
    SPAN_SERVER,
    TO_SERVER,
    UPSTREAM,
    OpenExchange,
    Operation,
)
from proxy.flows.span_waits import SpanWaits
from proxy.wire.jsonrpc import Message, RequestId
from proxy.wire.mcp import RESULT_INPUT_REQUIRED


class MessageSpans(SpanWaits):
    """The follower's handlers of the messages on a client exchange, both ways."""

    def _message(self, obs: MessageSeen) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is None:
            return
        if obs.sse_id is not None:
            self._note_event(ex, obs.sse_id)
        if obs.side is UPSTREAM:  # the server's leg of a message the proxy changed: the client's counts
            return
        msg = obs.msg
        if obs.direction is TO_SERVER:
            if msg.kind is REQUEST and msg.id is not None:  # the common case, without a call more
                self._request(ex, msg, msg.id, obs.t)
            else:
                self._client(ex, msg, obs.t)
        else:
            self._server(ex, msg, obs.t)

    def _client(self, ex: OpenExchange, msg: Message, t: float) -> None:
        kind = msg.kind
        if msg.is_response:
            found = self._nested.pop((ex.session, msg.id), None)
            if found is not None:
                self._answered(found, msg, t)
        elif kind is NOTIFICATION:
            self._notification(ex, msg, t)

    def _request(self, ex: OpenExchange, msg: Message, ident: RequestId, t: float) -> None:
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
            span = self._span(op, name, SPAN_SERVER, t, own)
        span.shared = shared
        ex.requests[ident] = (span, op)

    def _notification(self, ex: OpenExchange, msg: Message, t: float) -> None:
        target: Operation | None = None
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
            span = self._span(op, name, SPAN_SERVER, t, {})
        span.shared = shared
        if ex.notes is None:
            ex.notes = []
        ex.notes.append((span, op))

    def _cancelled(self, session: str | None, ident: Any) -> tuple[SpanRecord, Operation] | None:
        """The span and operation of the open request a `notifications/cancelled` names (cancels are
        rare: the open exchanges are searched rather than every request indexed)."""
        for ex in self._exchanges.values():
            if ex.session == session and ident in ex.requests:
                return ex.requests[ident]
        return None

    def _server(self, ex: OpenExchange, msg: Message, t: float) -> None:
        if msg.is_response:
            found = ex.requests.pop(msg.id, None) if msg.id is not None else None
            if found is not None:
                self._responded(ex, found, msg, t)
            elif msg.id is None and msg.kind is ERROR and ex.notes:
                text = msg.error.get("message")
                ex.refusal = text if isinstance(text, str) else None
            return
        if msg.kind is REQUEST and msg.id is not None:
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
            span = self._span(op, name, SPAN_CLIENT, t, attributes, parent)
            key = (ex.session, msg.id)
            self._nested[key] = (span, op)
            if ex.asked is None:
                ex.asked = []
            ex.asked.append(key)

    def _responded(
        self, ex: OpenExchange, found: tuple[SpanRecord, Operation], msg: Message, t: float
    ) -> None:
        span, op = found
        retried = False
        if msg.kind is ERROR:
            self._outcome(span, msg)
            span.end = t if t > span.start else span.start
            if ex.errored is None:
                ex.errored = []
            ex.errored.append(found)  # emitted when the exchange ends, which may name the cause
            op.params = None
            return
        if msg.kind is not RESULT:
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

    def _expect_retry(
        self, ex: OpenExchange, span: SpanRecord, op: Operation, result: dict[str, Any]
    ) -> None:
        """An `input_required` answer: the client's retry continues the operation (an MRTR round)."""
        span.attributes["mcp_proxy.result_type"] = RESULT_INPUT_REQUIRED
        if not op.key:
            self._count += 1
            op.key = f"s{self._count}"
        signature = request_signature(op.method, op.params or {})
        self._retries.expect(op.key, signature, result, caller_of(ex.headers, ex.connection), None)
        self._ops[op.key] = op

    def _retried(self, ex: OpenExchange, msg: Message) -> Operation | None:
        found = self._retries.match(msg.method, msg.params, caller_of(ex.headers, ex.connection))
        if found is None or found.chain_id is None:
            return None
        op: Operation | None = self._ops.get(found.chain_id)
        return op
