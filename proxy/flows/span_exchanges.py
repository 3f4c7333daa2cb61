"""How the span follower takes a client exchange as it goes: its opening (a GET with `Last-Event-ID`
resumes a request's stream), its response head, its SSE event ids, a body relayed unread or not
valid, and its close, which ends the spans of the requests and notifications it carried or holds them
for a resume or a cancel.

The messages it carries are `span_messages`. No I/O, no clock: each observation carries its time.
"""

from __future__ import annotations

from proxy.flows.observations import (
    CLIENT_CANCELLED,
    BodyNotInspected,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    ResponseHeadSeen,
    awaits_cancel,
    hung_up_after_unread,
    unusual_end,
)
from proxy.flows.resumes import awaits_resume, ends_session
from proxy.flows.span_records import SpanRecord, header_value
from proxy.flows.span_state import SPAN_SERVER, OpenExchange, Operation, network_attributes
from proxy.flows.span_waits import SpanWaits


class ExchangeSpans(SpanWaits):
    """The follower's handlers of a client exchange's opening, head, event ids, body and close."""

    def _opened(self, obs: ExchangeOpened) -> None:
        self._redactor.headers(obs.headers)  # learns the client's credentials, which a server may echo
        if self.endpoint.is_plain(obs.path, obs.client_transport, obs.upstream_transport):
            return  # plain HTTP beside the endpoint: none of its observations finds an exchange
        opened = OpenExchange(
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

    def _unread(self, obs: BodyNotInspected) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is not None:
            ex.unread = True

    def _invalid(self, obs: InvalidBody) -> None:
        ex = self._exchanges.get(obs.exchange)
        if ex is None:
            return
        op = self._new_op(None, {})
        span = self._span(op, "(invalid)", SPAN_SERVER, obs.t, {"mcp_proxy.mode": ex.mode})
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

    def _notes_ended(
        self, ex: OpenExchange, notes: list[tuple[SpanRecord, Operation]], cause: str | None, t: float
    ) -> None:
        """End the spans of the client notifications `ex` carried: a refused POST fails them, named by
        the fault when the proxy answered for the upstream (`upstream_unreachable`, as a request's
        span and the log line name it), else by the upstream's status."""
        failed = ex.status is not None and ex.status >= 400
        for span, op in notes:
            if failed:
                self._fail(span, cause or str(ex.status), ex.refusal or f"HTTP {ex.status}")
            if op.sampled:
                self._finish(span, t)
