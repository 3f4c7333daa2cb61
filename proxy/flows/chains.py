"""The chain builder: groups every observed message into the chain of the client operation it serves.

Theory of operation. The transport reports each HTTP exchange (`open_exchange` ... `close_exchange`)
and each JSON-RPC message seen on it (`message`); a bridge also reports the upstream legs it makes
(`leg_message`) and the upstream's response head to each (`leg_head`). A client request opens a
chain, unless it is the retry of an MRTR round, which joins the chain that got the `input_required`
result (matched by the `requestState` digest, or, when the server sent none, by method + name/uri +
arguments + answered keys, look-alike calls told apart by their caller: `retries`); a pass-through
call whose retry does not come within the retry window ends `incomplete`. Anything that rides the POST's
response stream joins the chain of that POST's request; a server request registers its id so the
client's answering POST joins the same chain; `notifications/cancelled` joins the chain of the
request it cancels; GET-stream traffic joins the chain of that stream, and a GET resumed with
`Last-Event-ID` rejoins the chain of that event. Time spent waiting on the client (a nested request
outstanding, or an `input_required` result not yet retried) is split from time spent upstream.

This module holds the builder the transport talks to: it dispatches each observation to the
handler of its kind and keeps the tables of one proxy run. The rest is in small rooms beside it:

- `exchange_handlers`: an exchange's opening, response head and unread bytes;
- `message_handlers`: the messages of client exchanges (the path every relayed message takes);
- `exchange_closing`: what an exchange's close makes of the chains it carried;
- `leg_handlers`: a bridge's upstream legs, parked calls and upstream sessions;
- `builder_state`: the tables those handlers share, filing and counting, and the waits' ends;
- `proxy_notes`: the words of notes on what the proxy itself did (faults, intercepts, origins);
- `exchanges`: the per-exchange record and the bounded map;
- `correlate`: which chain each client or server message joins;
- `retries`: MRTR retry expectations and matching (and `digest`);
- `ledger`: opening chains, filing records, timing and status, announcing changes;
- `records`: building the redacted, bounded message records.

A reader that replays a whole capture may ask for less than a live watcher gets: without `headlines`
the builder announces no `ChainOpened`/`ChainChanged` (a copy of the headline each; the store keeps
the headlines current all the same), and without `records` it builds no message records: it counts
each message in its chain's headline, returns the chain it joined, and tells `on_filed` what its
record would be numbered and carry, so a reader can build that record later from the observation
alone (`proxy.record.record_refs`). Which chain each message joins is decided by the same code
either way.

No I/O, no clock of its own (an observation's time, else an injected one), no logging (the round-trip
log line comes from `tally`, which needs no chain).
"""

from __future__ import annotations

from collections.abc import Callable, KeysView, Sequence

from proxy.flows.answer_faults import UNANSWERED
from proxy.flows.builder_state import ObservedClock
from proxy.flows.correlate import Correlator
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import UNFINISHED, FlowEvent, end_unfinished
from proxy.flows.exchange_closing import ExchangeClosing
from proxy.flows.exchange_handlers import ExchangeHandlers
from proxy.flows.exchanges import BoundedMap
from proxy.flows.ledger import ChainLedger
from proxy.flows.leg_handlers import LegHandlers
from proxy.flows.lost import DroppedRun, LostHistory, dropped_span
from proxy.flows.message_handlers import MessageHandlers
from proxy.flows.observations import (
    LATE_CANCEL_S,
    AnsweredByProxy,
    BodyNotInspected,
    BytesOut,
    ContinuationMoved,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    FaultInjected,
    InterceptHeld,
    InterceptReleased,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegLinked,
    LegMessageSeen,
    LegOpened,
    MessageSeen,
    Observation,
    OriginRewritten,
    ResponseHeadSeen,
    UpstreamSessionMoved,
)
from proxy.flows.proxy_notes import fault_note, intercept_note, origin_note
from proxy.flows.records import Filed, RecordMaker
from proxy.flows.redact import Redactor
from proxy.flows.resumes import ResumeWaits
from proxy.flows.retries import RETRY_WINDOW, RetryBook, digest
from proxy.flows.store import ChainStore
from proxy.flows.stream_legs import StreamLegs

__all__ = ["UNANSWERED", "ChainBuilder", "digest"]


class ChainBuilder(ExchangeHandlers, ExchangeClosing, MessageHandlers, LegHandlers):
    """Turns the transport's observations into chains in the store and flow events on the sink."""

    def __init__(
        self,
        store: ChainStore,
        sink: Callable[[FlowEvent], None],
        redactor: Redactor,
        *,
        clock: Callable[[], float],
        body_limit: int = 65536,
        id_prefix: str = "c",
        headlines: bool = True,
        records: bool = True,
        on_filed: Filed | None = None,
        retry_window: float = RETRY_WINDOW,
        endpoint: Endpoint | None = None,
    ) -> None:
        """`retry_window`: seconds a pass-through call answered `input_required` waits for its retry
        (`continuation_ttl`) before its chain ends `incomplete`; `endpoint`: the MCP endpoint's paths
        (a request to any other path is plain HTTP), unknown until given."""
        self.store = store
        self.endpoint = endpoint if endpoint is not None else Endpoint()
        """Which paths are the MCP endpoint (a capture's reader sets it from the capture's `proxy_info`)."""
        self._headlines = headlines
        self._keeps_records = records
        self._on_filed = on_filed
        self._redactor = redactor
        self._clock = ObservedClock(clock)
        clock = self._clock
        self._body_limit = body_limit
        self._retry_window = retry_window
        self._ledger = ChainLedger(
            store,
            sink,
            redactor,
            clock=clock,
            on_finished=self._retry_ended,
            id_prefix=id_prefix,
            headlines=headlines,
        )
        self._records = RecordMaker(redactor, clock=clock, body_limit=body_limit)
        self._start_run()

    def _start_run(self) -> None:
        """The tables of one proxy run's open exchanges, legs and waits (a capture's next run starts
        them afresh: it numbers its exchanges and legs from the first again)."""
        retries = self._retries = RetryBook(self._retry_window)
        self._lost = LostHistory()
        self._correlator = Correlator(
            self._ledger, retries, self._redactor, clock=self._clock, lost=self._lost
        )
        self._exchanges = {}
        self._legs = BoundedMap()
        self._leg_heads = BoundedMap()
        self._leg_facts = BoundedMap()
        self._streams = StreamLegs()
        self._event_chains = BoundedMap()
        self._continuations = BoundedMap()
        self._resumes = ResumeWaits()
        self._cancel_waits = ResumeWaits(LATE_CANCEL_S)
        self._sessions_gone = BoundedMap()

    def _retry_ended(self, chain_id: str) -> None:
        self._retries.forget(chain_id)

    def run_ended(self, note: str) -> list[str]:
        """The proxy run built so far is gone and another begins (a restarted proxy appending to its
        capture): each chain it left unfinished ends `incomplete` with `note` (no answer can come for
        it any more), and nothing of that run stays open to catch the next run's traffic, which
        reuses its exchange and leg ids. Returns the chains it ended."""
        ended = []
        for chain in self.store.unended():
            if chain.summary.status in UNFINISHED:
                chain.wait_started = None
                end_unfinished(chain.summary, note)
                self._ledger.finished += 1
                self._ledger.changed(chain)
                ended.append(chain.summary.id)
        self._start_run()
        return ended

    def apply(self, obs: Observation) -> str | None:
        """Build one observation into chains, at the time it was made (so a later build is the same).

        Returns the chain the observation filed a message in (a message, an invalid body, the `http`
        record of a GET's or DELETE's request head, or of an exchange or a bridge's leg that closed
        with no message carrying its response head), else None.
        """
        clock = self._clock
        clock.at = obs.t
        try:
            if self._resumes.waits:
                self._end_waits(obs)
            if self._cancel_waits.waits:
                self._end_uncancelled(obs.t)
            if self._retries.waiting:
                self._end_unretried(obs.t)
            return self._apply(obs)
        finally:
            clock.at = None

    def sweep(self, now: float) -> None:
        """End the waits that ran out by `now` though no observation came since (a quiet proxy): calls
        never retried and streams never resumed, as the next observation would have ended them."""
        if not (self._resumes.waits or self._cancel_waits.waits or self._retries.waiting):
            return
        clock = self._clock
        clock.at = now
        try:
            for wait, note in self._resumes.ran_out(now):
                self._end_wait(wait, wait.since, note)
            self._end_uncancelled(now)
            self._end_unretried(now)
        finally:
            clock.at = None

    @property
    def finished(self) -> int:
        """Chains finished so far (how a reader without headlines learns that a chain ended)."""
        return self._ledger.finished

    def _apply(self, obs: Observation) -> str | None:
        match obs:
            case MessageSeen():
                return self.message(
                    obs.exchange,
                    obs.msg,
                    size=obs.size,
                    direction=obs.direction,
                    channel=obs.channel,
                    side=obs.side,
                    sse_id=obs.sse_id,
                    note=obs.note,
                    answered_by=obs.answered_by,
                )
            case ExchangeOpened():
                return self.open_exchange(
                    obs.exchange,
                    http_method=obs.http_method,
                    path=obs.path,
                    headers=obs.headers,
                    session=obs.session,
                    client_era=obs.client_era,
                    upstream_era=obs.upstream_era,
                    mode=obs.mode,
                    body_size=obs.body_size,
                    transports=(obs.client_transport, obs.upstream_transport),
                    connection=obs.connection,
                )
            case ResponseHeadSeen():
                self.response_head(
                    obs.exchange, status=obs.status, content_type=obs.content_type, headers=obs.headers
                )
            case ExchangeClosed():
                return self.close_exchange(obs.exchange, obs.outcome, obs.trailers)
            case BytesOut():
                self.bytes_out(obs.exchange, obs.size)
            case BodyNotInspected():
                self.not_inspected(obs.exchange, obs.reason)
            case AnsweredByProxy():
                self.answered_by_proxy(obs.exchange)
            case EventIdSeen():
                self.note_event_id(obs.exchange, obs.sse_id, bare=True)
            case InvalidBody():
                return self.mark_invalid(obs.exchange, obs.problem, size=obs.size, body=obs.body)
            case LegMessageSeen():
                return self.leg_message(
                    obs.leg,
                    obs.exchange,
                    obs.msg,
                    size=obs.size,
                    direction=obs.direction,
                    channel=obs.channel,
                    note=obs.note,
                    joins=obs.joins,
                )
            case LegOpened():
                self._streams.opened(obs)
                if self._keeps_records:  # its facts begin when its request went out, not at its head
                    self._leg_fact(obs.leg)
            case LegHeadSeen():
                self.leg_head(obs.leg, status=obs.status, content_type=obs.content_type, headers=obs.headers)
            case LegLinked():
                self.link_leg(obs.leg, obs.related)
            case LegClosed():
                return self.leg_closed(obs.leg, obs.outcome)
            case ContinuationMoved():
                self.continuation_changed(
                    obs.exchange,
                    continuation=obs.continuation,
                    state=obs.state,
                    principal=obs.principal,
                    pending_keys=list(obs.pending_keys),
                    age_ms=obs.age_ms,
                    outcome=obs.outcome,
                )
            case FaultInjected():
                self.fault_injected(obs)
            case OriginRewritten():
                self._note(obs.exchange, None, origin_note(obs))
            case InterceptHeld() | InterceptReleased():
                note = intercept_note(obs)
                if note is not None:
                    held = obs.held_ms if isinstance(obs, InterceptReleased) else 0.0
                    self._note(obs.exchange, obs.message_id, note, held)
            case UpstreamSessionMoved():
                self.upstream_session(
                    obs.name,
                    state=obs.state,
                    principal=obs.principal,
                    capabilities=obs.capabilities,
                    version=obs.version,
                )
        return None

    def fault_injected(self, obs: FaultInjected) -> None:
        """Note an injected fault on the chain of the message it acted on, so it is never taken for
        the server's own behaviour (held for the exchange's first chain if none is open yet)."""
        self._note(obs.exchange, obs.message_id, fault_note(obs), obs.delay_ms if obs.applied else 0.0)

    def dropped(self, batches: Sequence[Sequence[Observation]], why: str) -> None:
        """Observations queued for this builder were dropped unbuilt (`why` names the bound): what is
        left of what they belonged to is left out when it comes (`LostHistory`), a chain stands where
        they were, and the upstream sessions they opened or ended are still told (they are no chain's)."""
        lost = self._lost
        exchanges = lost.exchanges
        count = 0
        for batch in batches:
            lost.lose(batch)
            count += len(batch)
            for obs in batch:
                if type(obs) is UpstreamSessionMoved:
                    self.apply(obs)
        began, ended = dropped_span(batches)
        self._ledger.dropped(began, ended, count, lost.exchanges - exchanges, why)

    def left_out(self, run: DroppedRun, why: str) -> None:
        """Calls the sink left out unbuilt (`why` names the setting), told only by their counts and
        times: nothing of them was held and nothing refers to them, so a chain standing where they were
        is all there is to do."""
        self._ledger.dropped(run.began, run.ended, run.observations, run.exchanges, why)

    def chain_lost(self) -> None:
        """A chain the capture lost the opening of (its request line skipped as unreadable) keeps its
        number: the chains after it keep theirs (`ChainLedger.pass_number`)."""
        self._ledger.pass_number()

    def began_earlier(self, exchange_id: str) -> None:
        """Note that an open exchange began before the capture file being read (it was repeated there)."""
        ex = self._exchanges.get(exchange_id)
        if ex is not None:
            ex.began_earlier = True

    def chain_of(self, exchange_id: str, message_id: str | int | None) -> str | None:
        """The chain a message of an open exchange belongs to (its request's, else the exchange's)."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return None
        found = ex.requests.get(message_id) if message_id is not None else None
        return found or ex.main_chain()

    def chain_of_continuation(self, continuation: str) -> str | None:
        """The chain a parked (or resumed) upstream call is filed in, by its continuation's name."""
        found = self._continuations.get(continuation)
        return found if isinstance(found, str) else None

    @property
    def exchange_ids(self) -> KeysView[str]:
        """The ids of the exchanges open in the builder: a live view, for a caller that asks of many."""
        return self._exchanges.keys()

    @property
    def leg_ids(self) -> KeysView[str]:
        """The upstream legs the builder knows (seen and not yet closed): a live view."""
        return self._legs.keys()

    def has_exchange(self, exchange_id: str) -> bool:
        """Whether this exchange is open in the builder."""
        return exchange_id in self._exchanges

    def has_leg(self, leg: str) -> bool:
        """Whether this upstream leg is known to the builder (seen and not yet closed)."""
        return leg in self._legs

    @property
    def open_exchanges(self) -> int:
        """Exchanges currently in flight (for metrics and draining)."""
        return len(self._exchanges)

    def correlation_sizes(self) -> dict[str, int]:
        """Sizes of the builder's correlation tables (tests assert they drain)."""
        return {"exchanges": len(self._exchanges), **self._correlator.sizes()}
