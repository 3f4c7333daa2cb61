"""The chain builder's tables, and the moves every kind of observation shares.

`ChainBuilder` (in `chains`) is composed of one handler class per kind of thing the transport reports
(`exchange_handlers`, `exchange_closing`, `message_handlers`, `leg_handlers`); each derives from
`BuilderState`, which declares the tables they all read and holds what more than one of them does:
filing or counting a message in its chain, noting on a chain, letting the store release chains,
remembering SSE event ids, and ending the chains that waited for a resume, a cancel or a retry.
The tables are made by `ChainBuilder`, afresh for each proxy run a capture holds.

No I/O, no clock of its own (`ObservedClock`), no logging.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from proxy.flows.answer_faults import UNANSWERED
from proxy.flows.correlate import Correlator
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import DECIDED, ChainStatus, Direction, MessageRecord
from proxy.flows.exchanges import BoundedMap, Exchange
from proxy.flows.ledger import ChainLedger
from proxy.flows.lost import LostHistory
from proxy.flows.observations import Observation
from proxy.flows.records import Filed, Head, RecordMaker
from proxy.flows.redact import Redactor
from proxy.flows.resumes import ResumeWaits, Wait
from proxy.flows.retries import NEVER_RETRIED, RetryBook
from proxy.flows.store import Chain, ChainStore
from proxy.flows.stream_legs import StreamLegs


class ObservedClock:
    """The builder's clock: the time of the observation being built, else the injected source."""

    def __init__(self, source: Callable[[], float]) -> None:
        self._source = source
        self.at: float | None = None

    def __call__(self) -> float:
        at = self.at
        return at if at is not None else self._source()


class BuilderState:
    """The tables of the chain builder and the moves its handlers share (`ChainBuilder` makes them)."""

    store: ChainStore
    endpoint: Endpoint
    _headlines: bool
    _keeps_records: bool
    _on_filed: Filed | None
    _redactor: Redactor
    _clock: ObservedClock
    _body_limit: int
    _retry_window: float
    _ledger: ChainLedger
    _records: RecordMaker
    _retries: RetryBook
    _correlator: Correlator
    _lost: LostHistory
    _exchanges: dict[str, Exchange]
    _legs: BoundedMap
    _leg_heads: BoundedMap
    """Leg -> the upstream's response head to it and when it came, until a message on the leg or its
    close carries it."""
    _leg_facts: BoundedMap
    """Leg -> what its chain's records do not hold of it (`ExchangeFacts`), until it closes; only
    when records are kept."""
    _streams: StreamLegs
    _event_chains: BoundedMap
    _continuations: BoundedMap
    _resumes: ResumeWaits[str]
    """Chains of requests whose stream closed unanswered after an event id, until resumed."""
    _cancel_waits: ResumeWaits[str]
    """Legacy calls whose client hung up before the answer, waiting for its cancel (`awaits_cancel`):
    the chain stays as it was meanwhile and ends cancelled, or as its exchange closed, at the verdict."""
    _sessions_gone: BoundedMap
    """Relayed sessions the server said it no longer has (HTTP 404), announced `expired` once each."""

    def note_event_id(self, exchange_id: str, sse_id: str, *, bare: bool = False) -> None:
        """Remember which chain an SSE event id belongs to, so a resumed stream rejoins that chain;
        `bare`: the event carried no message (its exchange's facts keep it for the exports)."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        if bare and ex.facts is not None:
            ex.facts.bare_event(self._clock(), self._redactor.scrub(sse_id))
        ex.last_sse_id = sse_id
        chain_id = ex.main_chain()
        if chain_id is not None:
            self._event_chains[(ex.session, sse_id)] = chain_id

    def _file(self, chain: Chain, record: MessageRecord, *, invalid: bool) -> None:
        """File a record in its chain, with the facts of the exchange or leg it travelled on."""
        self._ledger.file(chain, record, invalid=invalid)
        key = record.exchange
        ex = self._exchanges.get(key)
        facts = ex.facts if ex is not None else self._leg_facts.get(key)
        if facts is not None:
            if record.kind != "http":
                facts.carried += 1
            chain.note_exchange(key, facts)

    def _count(self, chain: Chain, direction: Direction, size: int, invalid: bool, head: Head) -> str:
        """Count a message without recording it; `on_filed` hears what its record would be."""
        self._ledger.count(chain, direction, size, invalid=invalid)
        if self._on_filed is not None:
            self._on_filed(chain.summary.id, chain.next_seq(), chain.summary.rounds, head)
        return chain.summary.id

    def _note(self, exchange: str, message_id: str | int | None, note: str, held_ms: float = 0.0) -> None:
        """Add a note to the chain of a message of an exchange (its first chain's, or held for it),
        with the time the proxy held that message, if it did."""
        ex = self._exchanges.get(exchange)
        if ex is None:
            return
        chain_id = ex.requests.get(message_id) if message_id is not None else None
        chain = self.store.peek(chain_id or ex.main_chain() or "")
        if chain is None:
            ex.pending_note = note
            return
        chain.summary.notes.append(note)
        if held_ms:
            chain.summary.held_ms = round(chain.summary.held_ms + held_ms, 3)
        self._ledger.changed(chain)

    def _release(self, chain_ids: Iterable[str]) -> None:
        """Let the store stop holding chains the ring let go once they ended and nothing of theirs is
        open any more: a later exchange of a chain (the 202 to an answer the client POSTed) may close
        after the call's own, and its record still belongs in the chain."""
        if not self.store.held:
            return
        open_chains = {c for ex in self._exchanges.values() for c in ex.chains}
        open_chains.update(self._legs.values())
        for chain_id in chain_ids:
            if chain_id not in open_chains:
                self.store.release(chain_id)

    def _cancel_wait(self, session: str | None, ident: object) -> None:
        """The client cancelled a request that waited for a resume or for this cancel: nothing will
        answer it now."""
        if not isinstance(ident, (str, int)):
            return
        wait = self._resumes.take(session, ident)
        if wait is not None:
            self._end_wait(wait, self._clock(), None)
        wait = self._cancel_waits.take(session, ident) if self._cancel_waits.waits else None
        if wait is not None:
            self._end_wait(wait, self._clock(), None, forgotten=True)

    def _end_uncancelled(self, now: float) -> None:
        """End, as their exchange closed and as of the close, the calls whose cancel did not come
        within `LATE_CANCEL_S` by `now`."""
        for wait, _ in self._cancel_waits.ran_out(now):
            self._end_wait(wait, wait.since, None, forgotten=True)

    def _end_waits(self, obs: Observation) -> None:
        """End the chains whose wait for a resume ran out by `obs`, as of their cut: the client stopped
        there."""
        for wait, note in self._resumes.ran_out(obs.t):
            self._end_wait(wait, wait.since, note)

    def _end_session(self, session: str) -> None:
        """The session is over (`ends_session`): its chains that wait for a resume end, as of their
        cut, and a stream of it cut from now on waits for none."""
        for wait, note in self._resumes.end_session(session):
            self._end_wait(wait, wait.since, note)

    def _end_unretried(self, now: float) -> None:
        """End `incomplete` the pass-through calls whose client has not retried within the window, as
        of when it ran out: nothing failed, the client may have stopped asking."""
        for chain_id, at in self._retries.overdue(now):
            chain = self.store.peek(chain_id)
            if chain is None or chain.summary.ended is not None:
                continue
            chain.summary.notes.append(NEVER_RETRIED.format(window=self._retries.window))
            clock = self._clock
            seen, clock.at = clock.at, at
            try:
                self._ledger.finish(chain, ChainStatus.INCOMPLETE, None, at)
            finally:
                clock.at = seen

    def _end_wait(self, wait: Wait[str], at: float, note: str | None, *, forgotten: bool = False) -> None:
        """End a chain that waited for a resume or a cancel, failed as its stream ended (or cancelled,
        if it was). A request waiting for a resume is still the correlator's until then; one waiting for
        a cancel was `forgotten` when its exchange closed (so a late cancel's window runs from there)."""
        if not forgotten:
            self._correlator.forget_request(wait.session, wait.ident, wait.target)
        chain = self.store.peek(wait.target)
        if chain is None or chain.summary.status in DECIDED:
            return
        if note is not None:
            chain.summary.notes.append(note)
        clock = self._clock
        now, clock.at = clock.at, at
        try:
            self._ledger.finish(chain, ChainStatus.ERROR, wait.outcome or UNANSWERED, at)
        finally:
            clock.at = now


_TIMES = re.compile(r"(.*) \((\d+) times\)", re.S)


def note_counted(notes: list[str], note: str) -> None:
    """Add `note`, or, when the chain says it already, count it there (`... (3 times)`): a client
    that resumes again and again is told apart by how many times, not by a wall of one line."""
    for i, old in enumerate(notes):
        said = _TIMES.fullmatch(old)
        text, times = (said.group(1), int(said.group(2))) if said else (old, 1)
        if text == note:
            notes[i] = f"{note} ({times + 1} times)"
            return
    notes.append(note)
