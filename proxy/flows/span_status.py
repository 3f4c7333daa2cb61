"""How the span follower names the way a span ended: its status (failed or not, with a description)
and `error.type`, from the answer that ended it or from how the exchange that owed it one ended.

The names are those the chains and the error counters use: a JSON-RPC error by its code, a tool
result with `isError` as `tool_error`, an HTTP failure by its status, an exchange that ended without
the answer by its outcome, and a request its client cancelled never failed. No I/O, no clock.
"""

from __future__ import annotations

from proxy.flows.observations import CLIENT_CANCELLED, cancels_by_hanging_up, hung_up_after_unread
from proxy.flows.span_records import SpanRecord
from proxy.flows.span_state import ERROR, RESULT, OpenExchange, Operation, SpanState
from proxy.wire.jsonrpc import Message

UNANSWERED_QUESTION = "the client never answered"
"""The status description of a question the client got on its stream and never answered."""


class SpanStatus(SpanState):
    """The moves that mark a span failed or not and emit it as it ends."""

    def _answered(self, found: tuple[SpanRecord, Operation], msg: Message, t: float) -> None:
        span, op = found
        self._outcome(span, msg)
        if op.sampled:
            self._finish(span, t)

    def _outcome(self, span: SpanRecord, msg: Message) -> None:
        """Mark a span failed by its response: a JSON-RPC error, or a tool result with `isError`."""
        if msg.kind is ERROR:
            error = msg.error
            code = error.get("code")
            text = error.get("message")
            if code is not None:
                span.attributes["rpc.response.status_code"] = str(code)
            self._fail(
                span, str(code) if code is not None else "_OTHER", text if isinstance(text, str) else None
            )
        elif msg.kind is RESULT:
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

    def _unanswered(self, ex: OpenExchange, span: SpanRecord, outcome: str | None, text: str | None) -> None:
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

    def _end_questions(self, ex: OpenExchange, outcome: str | None, t: float) -> None:
        """End the questions `ex`'s stream carried to the client that it never answered, as the stream
        ended with `outcome`."""
        for key in ex.asked or ():
            found = self._nested.pop(key, None)
            if found is not None:
                self._unanswered(ex, found[0], outcome, UNANSWERED_QUESTION)
                if found[1].sampled:
                    self._finish(found[0], t)
