"""What an exchange's close makes of the chains it carried: a request left unanswered waits for a
resume or a cancel, fails, ends cancelled or incomplete (saying what the server sent instead); a GET
stream, a DELETE or a plain HTTP request ends as its exchange did; a refused notification fails.
"""

from __future__ import annotations

from proxy.flows.answer_faults import no_answer, unmatched
from proxy.flows.builder_state import BuilderState, note_counted
from proxy.flows.events import DECIDED, ChainStatus, Direction, Mode
from proxy.flows.exchanges import Exchange
from proxy.flows.observations import (
    STREAM_NORMAL_ENDS,
    awaits_cancel,
    cancels_by_hanging_up,
    declines_stream,
    hung_up_after_unread,
)
from proxy.flows.records import http_only_head, http_side
from proxy.flows.resumes import (
    ID_REUSED,
    SESSION_ENDED,
    Wait,
    awaiting_resume,
    awaits_resume,
    resume_unanswered,
)
from proxy.flows.store import Chain
from proxy.wire.jsonrpc import RequestId

MODERN_CANCEL = "the client closed its stream before the answer: a 2026-07-28 client's cancel"
"""The note on a chain a 2026-07-28 client cancelled the only way that era has."""

LEGACY_LEFT_BRIDGE = (
    "the legacy client disconnected before the answer: the bridge ended the call and closed its "
    "upstream 2026-07-28 request if one was open (a closed stream is that era's cancel)"
)
"""The note on a legacy client's call through `legacy_to_mrtr` that ended with the client's hang-up:
the engine closes the call's open upstream leg, which tells a 2026-07-28 server to stop."""

NO_STREAM_NOTE = "the server offers no GET stream here (HTTP 405): not a failure"
"""The note on a GET stream the server declined, as the transport lets it."""


class ExchangeClosing(BuilderState):
    """The builder's handling of an exchange that closed."""

    def close_exchange(
        self, exchange_id: str, outcome: str | None = None, trailers: dict[str, str] | None = None
    ) -> str | None:
        """Finish an exchange: unanswered requests fail with `outcome`; `trailers` (the upstream's,
        after its chunked body) join the exchange's facts, redacted.

        Returns the chain that got the exchange's `http` record (its response head carried no
        message), else None.
        """
        ex = self._exchanges.pop(exchange_id, None)
        if ex is None:
            return None
        now = self._clock()
        filed = None
        if ex.head is not None and not ex.head_recorded and ex.chains:
            filed = self._record_http_only(ex)
        for ident, chain_id in ex.requests.items():
            if ident in ex.answered:
                continue
            chain = self.store.peek(chain_id)
            if chain is not None and self._awaits_resume(chain, ex, outcome):
                self._wait_for_resume(chain, ex, ident, outcome, now)
                continue
            self._correlator.forget_request(ex.session, ident, chain_id)
            if chain is None or chain.summary.status in DECIDED:
                continue
            if ex.resumed_with is not None and not (chain.cancelled or ex.http_failed()):
                note_counted(chain.summary.notes, resume_unanswered(ex.resumed_with, outcome))
            if cancels_by_hanging_up(outcome, ex.client_era):
                chain.summary.notes.append(MODERN_CANCEL)
                chain.cancelled = True
            elif outcome == "client_disconnected" and ex.mode is Mode.LEGACY_TO_MRTR:
                chain.summary.notes.append(LEGACY_LEFT_BRIDGE)
            unread = ex.not_inspected is not None
            if not ex.http_failed() and hung_up_after_unread(outcome, ex.client_era, unread):
                self._unanswered(chain, ex, ident, now)
                continue
            if (
                not chain.cancelled
                and not ex.http_failed()
                and awaits_cancel(outcome, ex.client_era, ex.session)
            ):
                replaced = self._cancel_waits.wait(ex.session, ident, chain_id, now, outcome)
                if replaced is not None:
                    self._end_wait(replaced, replaced.since, None, forgotten=True)
                continue
            if outcome is not None or ex.http_failed():
                reason = outcome or f"HTTP {ex.head.status if ex.head else '?'}"
                self._ledger.finish(chain, ChainStatus.ERROR, reason, now)
            elif chain.summary.status in (ChainStatus.PENDING, ChainStatus.WAITING_CLIENT):
                self._unanswered(chain, ex, ident, now)
        if ex.http_failed():
            self._refused_notifications(ex)
        if ex.facts is not None:
            ex.facts.ended, ex.facts.outcome = now, outcome
            if trailers:
                ex.facts.trailers = self._redactor.headers(trailers)
        for chain_id in ex.chains:
            chain = self.store.peek(chain_id)
            if chain is not None and ex.facts is not None:
                chain.note_exchange(exchange_id, ex.facts)
            if chain is not None and ex.plain:
                self._plain_ended(chain, ex, outcome, now)
                continue
            if chain is None or chain.summary.method not in ("GET stream", "DELETE session"):
                continue
            if chain.summary.method == "DELETE session" and ex.session:
                self._ledger.session_event(ex.session, "ended")
            failed = outcome not in STREAM_NORMAL_ENDS or ex.http_failed()
            if outcome == "session_deleted" and not failed:
                chain.summary.notes.append("ended with its session (deleted)")
            elif ex.head is not None and declines_stream(ex.http_method, ex.head.status):
                chain.summary.notes.append(NO_STREAM_NOTE)
            status = ChainStatus.ERROR if failed else ChainStatus.OK
            self._ledger.finish(chain, status, outcome if failed else None, now, answered=ex.head_at)
        self._release(ex.chains)
        return filed

    def _refused_notifications(self, ex: Exchange) -> None:
        """A client notification the upstream refused (HTTP 4xx or 5xx: a session it no longer knows)
        was not delivered: the chain it opened fails with that status, as a refused request's does,
        so the chain, the metrics and the round-trip log line give it one verdict."""
        reason = f"HTTP {ex.head.status if ex.head else '?'}"
        for chain_id in ex.chains:
            chain = self.store.peek(chain_id)
            if chain is None:
                continue
            summary = chain.summary
            own = summary.jsonrpc_id is None and (summary.method or "").startswith("notifications/")
            if own and summary.status is ChainStatus.OK and summary.error is None:
                summary.status, summary.error = ChainStatus.ERROR, reason
                self._ledger.changed(chain)

    @staticmethod
    def _awaits_resume(chain: Chain, ex: Exchange, outcome: str | None) -> bool:
        """Whether a request its exchange left unanswered may still be answered on a resumed stream
        (not when the stream went by unread: its answer may have been there)."""
        if chain.cancelled or chain.summary.status in DECIDED or ex.http_failed() or ex.not_inspected:
            return False
        passthrough = ex.mode is Mode.PASSTHROUGH
        return awaits_resume(outcome, ex.client_era, passthrough, ex.last_sse_id)

    def _wait_for_resume(
        self, chain: Chain, ex: Exchange, ident: RequestId, outcome: str | None, now: float
    ) -> None:
        """Have a request its cut stream left unanswered wait for the client's resume; one whose session
        is already over (the server closed its stream because of the DELETE) fails at once."""
        chain_id = chain.summary.id
        if self._resumes.session_over(ex.session):
            self._end_wait(Wait(ex.session, ident, chain_id, now, outcome), now, SESSION_ENDED)
            return
        replaced = self._resumes.wait(ex.session, ident, chain_id, now, outcome)
        if replaced is not None:
            self._end_wait(replaced, replaced.since, ID_REUSED)
        chain.summary.notes.append(awaiting_resume(outcome, ex.last_sse_id))
        self._ledger.changed(chain)

    def _unanswered(self, chain: Chain, ex: Exchange, ident: RequestId, now: float) -> None:
        """End a chain whose exchange closed cleanly without its response, saying what the server sent
        instead (`answer_faults`).

        When the exchange began in an earlier capture file (a rotated part read alone), its response
        may well be there, as it may be in a body the proxy relayed unread (its note says why): the
        chain ends incomplete, not failed.
        """
        if ex.not_inspected is not None or ex.began_earlier:
            self._ledger.finish(chain, ChainStatus.INCOMPLETE, None, now)
            return
        if ex.stray is not None:
            why = unmatched([ident], ex.stray)
        else:
            head = ex.head
            status, kind = (head.status, head.content_type) if head is not None else (None, None)
            why = no_answer([ident], status, kind, ex.back, ex.invalid_back)
        self._ledger.finish(chain, ChainStatus.ERROR, self._redactor.scrub(why), now)

    def _plain_ended(self, chain: Chain, ex: Exchange, outcome: str | None, now: float) -> None:
        """End a plain HTTP exchange's chain as its HTTP status says (4xx and 5xx fail it), or as the
        exchange ended when it ended badly (no answer, the upstream's timeout)."""
        if chain.summary.status in DECIDED:
            return
        status = ex.head.status if ex.head is not None else None
        if status is not None and status >= 400:
            self._ledger.finish(chain, ChainStatus.ERROR, f"HTTP {status}", now)
        elif outcome is not None and (status is None or outcome not in STREAM_NORMAL_ENDS):
            self._ledger.finish(chain, ChainStatus.ERROR, outcome, now)
        else:
            self._ledger.finish(chain, ChainStatus.OK, None, now)

    def _record_http_only(self, ex: Exchange) -> str | None:
        """File the `http` record of a response head no message carried (filed as the exchange closes,
        timed when the head came: a GET stream's answer is not its end)."""
        chain = self.store.peek(ex.chains[0])
        if chain is None or ex.head is None:
            return None
        ex.head_recorded = True
        if not self._keeps_records:
            return self._count(chain, Direction.TO_CLIENT, 0, False, http_only_head(ex.mode))
        side = http_side(ex.mode)
        record = self._records.http_only(chain, ex.id, ex.head, side=side, ts=ex.head_at)
        self._file(chain, record, invalid=False)
        return chain.summary.id
