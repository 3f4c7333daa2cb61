"""How the span follower holds the spans of requests whose answer may yet come another way: a stream
the client may resume (GET + `Last-Event-ID`, by the chain builder's rules in `proxy.flows.resumes`)
and a legacy call whose client hung up, held for its cancel (`awaits_cancel`).

It remembers which request each SSE event id's stream served, moves a request onto the stream that
resumes it, and ends a held span as its chain ends: resumed, cancelled, or failed as its stream ended
when the wait runs out. No I/O, no clock: each wait is judged at an observation's time.
"""

from __future__ import annotations

from proxy.flows.observations import CLIENT_CANCELLED
from proxy.flows.resumes import ID_REUSED, SESSION_ENDED, Wait
from proxy.flows.span_state import HeldSpan, OpenExchange, Operation
from proxy.flows.span_status import SpanStatus
from proxy.wire.jsonrpc import RequestId


class SpanWaits(SpanStatus):
    """The moves that hold a span for a resume or a cancel, and end it when its wait is over."""

    def _note_event(self, ex: OpenExchange, sse_id: str) -> None:
        """Remember which request an SSE event id's stream served, so a resume from it finds it."""
        ex.last_sse_id = sse_id
        if ex.requests:
            ident, found = next(iter(ex.requests.items()))
            self._event_requests[(ex.session, sse_id)] = (ident, *found)
        elif ex.joined is not None:
            self._event_requests[(ex.session, sse_id)] = (None, *ex.joined)

    def _resumed(self, ex: OpenExchange, last: str) -> None:
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

    def _wait_for_resume(
        self, ex: OpenExchange, ident: RequestId, target: HeldSpan, t: float, outcome: str | None
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

    def _never_resumed(self, wait: Wait[HeldSpan], note: str) -> None:
        """Emit a held span whose stream the client did not resume, failed as its stream ended (its
        chain's error), as of the cut, with the questions asked on its behalf."""
        span, op, ex = wait.target
        self._fail(span, wait.outcome or "no_response", note)
        if op.sampled:
            self._finish(span, wait.since)
        self._end_questions(ex, wait.outcome or "no_response", wait.since)

    def _judged(self, wait: Wait[HeldSpan]) -> None:
        """Emit a held span whose cancel did not come, as its exchange closed, as of the close."""
        span, op, ex = wait.target
        self._unanswered(ex, span, wait.outcome, None)
        if op.sampled:
            self._finish(span, wait.since)

    def _cancel_held(self, session: str | None, ident: RequestId, t: float) -> Operation | None:
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
