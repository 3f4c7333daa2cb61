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

This module holds the builder the transport talks to and the exchange and leg bookkeeping; the rest
is in small rooms beside it:

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

import re
from collections.abc import Callable, Iterable, KeysView
from typing import Any, Final

from proxy.flows.answer_faults import (
    STRAY_NOTES,
    UNANSWERED,
    batch_note,
    content_type_problem,
    declared_version,
    is_stray,
    no_answer,
    stray_note,
    unmatched,
)
from proxy.flows.correlate import Correlator
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import (
    BRIDGE_ERAS,
    DECIDED,
    UNFINISHED,
    ChainStatus,
    Channel,
    Direction,
    FlowEvent,
    HttpInfo,
    MessageRecord,
    Mode,
    Side,
    end_unfinished,
)
from proxy.flows.exchanges import BoundedMap, Exchange, ExchangeFacts
from proxy.flows.ledger import ChainLedger
from proxy.flows.observations import (
    LATE_CANCEL_S,
    PROXY_STOPPING,
    STREAM_NORMAL_ENDS,
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
    awaits_cancel,
    cancels_by_hanging_up,
)
from proxy.flows.records import (
    Filed,
    Head,
    RecordMaker,
    as_plain_body,
    carries_head,
    http_only_head,
    http_side,
)
from proxy.flows.redact import Redactor
from proxy.flows.resumes import (
    ID_REUSED,
    SESSION_GONE_STATUS,
    ResumeWaits,
    Wait,
    awaiting_resume,
    awaits_resume,
)
from proxy.flows.retries import NEVER_RETRIED, RETRY_WINDOW, RetryBook, digest
from proxy.flows.store import Chain, ChainStore
from proxy.flows.stream_legs import STREAM_METHOD, StreamLegs
from proxy.wire.jsonrpc import Kind, Message, RequestId, classify_value
from proxy.wire.mcp import INPUT_METHODS, LISTEN, LISTEN_ACKNOWLEDGED

__all__ = ["UNANSWERED", "ChainBuilder", "digest"]

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): every message to a client passes `_answer_seen`.
_INVALID = Kind.INVALID
_JSON = Channel.JSON
_RESULT = Kind.RESULT
_TO_CLIENT = Direction.TO_CLIENT
_UPSTREAM = Side.UPSTREAM
_PASSTHROUGH = Mode.PASSTHROUGH
_BODILESS = (202, 204)
"""Statuses of an answer that carries no body, so no Content-Type."""
_HTTP_BOTH = ("http", "http")


MODERN_CANCEL = "the client closed its stream before the answer: a 2026-07-28 client's cancel"
"""The note on a chain a 2026-07-28 client cancelled the only way that era has."""

NOT_INSPECTED = "response not inspected: "
"""How the note on a chain whose response body the proxy relayed unread begins (the reason follows)."""
LEGACY_LEFT_BRIDGE = (
    "the legacy client disconnected before the answer: the bridge ended the call and closed its "
    "upstream 2026-07-28 request if one was open (a closed stream is that era's cancel)"
)
"""The note on a legacy client's call through `legacy_to_mrtr` that ended with the client's hang-up:
the engine closes the call's open upstream leg, which tells a 2026-07-28 server to stop."""

CLIENT_NEVER_RETRIED = (
    "parked upstream call expired: the client did not retry within continuation_ttl (a 2026-07-28 "
    "client may stop asking; the proxy cancelled the call upstream)"
)
"""The note on a bridged call whose client never came back with the answers."""

STOPPED_WHILE_PARKED = (
    "parked upstream call let go as the proxy stopped: the client had not retried yet (a 2026-07-28 "
    "client may stop asking; the proxy closed the call's upstream session)"
)
"""The note on a bridged call still waiting for its client's retry when the proxy stopped: nothing
failed, the call just has no end to show."""


class ObservedClock:
    """The builder's clock: the time of the observation being built, else the injected source."""

    def __init__(self, source: Callable[[], float]) -> None:
        self._source = source
        self.at: float | None = None

    def __call__(self) -> float:
        at = self.at
        return at if at is not None else self._source()


class ChainBuilder:
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
        self._correlator = Correlator(self._ledger, retries, self._redactor, clock=self._clock)
        self._exchanges: dict[str, Exchange] = {}
        self._legs: BoundedMap = BoundedMap()
        self._leg_heads: BoundedMap = BoundedMap()
        """Leg -> the upstream's response head to it and when it came, until a message on the leg or its
        close carries it."""
        self._leg_facts: BoundedMap = BoundedMap()
        """Leg -> what its chain's records do not hold of it (`ExchangeFacts`), until it closes; only
        when records are kept."""
        self._streams = StreamLegs()
        self._event_chains: BoundedMap = BoundedMap()
        self._continuations: BoundedMap = BoundedMap()
        self._resumes: ResumeWaits[str] = ResumeWaits()
        """Chains of requests whose stream closed unanswered after an event id, until resumed."""
        self._cancel_waits: ResumeWaits[str] = ResumeWaits(LATE_CANCEL_S)
        """Legacy calls whose client hung up before the answer, waiting for its cancel (`awaits_cancel`):
        the chain stays as it was meanwhile and ends cancelled, or as its exchange closed, at the verdict."""
        self._sessions_gone: BoundedMap = BoundedMap()
        """Relayed sessions the server said it no longer has (HTTP 404), announced `expired` once each."""

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
                return self.close_exchange(obs.exchange, obs.outcome)
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

    # -- exchanges -------------------------------------------------------------------------------

    def open_exchange(
        self,
        exchange_id: str,
        *,
        http_method: str,
        path: str,
        headers: dict[str, str],
        session: str | None,
        client_era: str = "unknown",
        upstream_era: str = "unknown",
        mode: Mode = Mode.PASSTHROUGH,
        body_size: int = 0,
        transports: tuple[str, str] = ("http", "http"),
        connection: str | None = None,
    ) -> str | None:
        """Start tracking one HTTP exchange from the client (before any message is seen).

        `transports`: how the client reached the proxy, and how the proxy reached the upstream. A GET
        stream or a DELETE carries no message to hold its request head, so its chain gets an `http`
        record of it now; so does a plain HTTP request (to a path other than the MCP endpoint), whose
        chain is named by its method and path. Returns that chain (else None).
        """
        ex = self._exchanges[exchange_id] = Exchange(
            id=exchange_id,
            http_method=http_method,
            path=path,
            started=self._clock(),
            session=session,
            client_era=client_era,
            upstream_era=upstream_era,
            mode=mode,
            request_headers=headers,
            client_transport=transports[0],
            upstream_transport=transports[1],
            connection=connection,
        )
        if self._keeps_records:
            token = self._redactor.token(session) if session else None
            ex.facts = ExchangeFacts(started=ex.started, body_size=body_size, session=token)
        if self.endpoint.is_plain(path, *transports):
            ex.plain = True
            self._ledger.open(
                ex, method=http_method, name=self._redactor.target(path.split("?", 1)[0]), ident=None
            )
        elif http_method == "GET":
            if not self._resume(ex):
                self._ledger.open(ex, method="GET stream", name=None, ident=None)
        elif http_method == "DELETE":
            self._ledger.open(ex, method="DELETE session", name=None, ident=None)
        else:
            return None
        return self._record_request_head(ex)

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

    def bytes_out(self, exchange_id: str, size: int) -> None:
        """Count response bytes that carried no message in the exchange's facts; its chain counts them
        only once the body is known to have gone by unread (`not_inspected`): otherwise they are an
        SSE stream's comments and priming events, and a chain counts message bytes."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        if ex.facts is not None:
            ex.facts.bytes_out += size
        if ex.not_inspected is not None:
            self._relayed_unread(ex, size)
        else:
            ex.unmessaged += size

    def not_inspected(self, exchange_id: str, reason: str) -> None:
        """Note on the exchange's chain that its response went by unread: a request it carried that
        no message answered then ends `incomplete` (the answer may be in what was not read), and the
        bytes relayed without a message count in its `bytes_to_client`."""
        ex = self._exchanges.get(exchange_id)
        if ex is not None and ex.not_inspected is None:
            ex.not_inspected = reason
            if ex.facts is not None:
                ex.facts.unread = reason
            unread, ex.unmessaged = ex.unmessaged, 0
            self._relayed_unread(ex, unread)
            self._note(exchange_id, None, f"{NOT_INSPECTED}{reason}")

    def _relayed_unread(self, ex: Exchange, size: int) -> None:
        """Count bytes of a body that went to the client unread in the exchange's main chain: no
        message's size holds them, and the chain must say what was relayed."""
        chain = self.store.peek(ex.main_chain() or "") if size else None
        if chain is not None:
            chain.summary.bytes_to_client += size
            self._ledger.changed(chain)

    def answered_by_proxy(self, exchange_id: str) -> None:
        """The proxy answers the exchange's requests itself: the chains they began, and any it begins
        from now, took no time upstream (a retry that continues an earlier chain keeps its rounds')."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        ex.answered_by_proxy = True
        for ident, chain_id in ex.requests.items():
            chain = self.store.get(chain_id)
            if chain is not None and ident not in ex.claims:
                chain.answered_by_proxy = True

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

    def _resume(self, ex: Exchange) -> bool:
        """A GET with Last-Event-ID continues the stream of the chain that event belonged to."""
        last = next((v for k, v in ex.request_headers.items() if k.lower() == "last-event-id"), None)
        chain_id = self._event_chains.get((ex.session, last)) if last else None
        chain = self.store.peek(chain_id) if chain_id else None
        if chain is None:
            return False
        ex.chains.append(chain.summary.id)
        ident = chain.summary.jsonrpc_id
        if ident is not None and chain.summary.status not in DECIDED:
            ex.requests[ident] = chain.summary.id
            self._resumes.take(ex.session, ident)
        ex.resumed_with = last
        return True

    def response_head(
        self, exchange_id: str, *, status: int, content_type: str | None, headers: dict[str, str]
    ) -> None:
        """Remember the HTTP head of the response; it is attached to the first message back.

        A second head before any message went back replaces the first, in the chain's status too: the
        first was the server's, taken and held for its body, and the proxy answered instead (a 502 for
        a server that closed before its body).
        """
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        replaced = ex.head.status if ex.head is not None and not ex.head_recorded else None
        ex.head = self._records.response_head(status, content_type, headers)
        ex.head_at = self._clock()
        if ex.facts is not None:
            ex.facts.head_at = ex.head_at
        ex.minted_session = next((v for k, v in headers.items() if k.lower() == "mcp-session-id"), None)
        if status == SESSION_GONE_STATUS and ex.session:
            self._session_gone(ex)
        for chain_id in ex.chains:
            chain = self.store.peek(chain_id)
            if chain is not None and chain.summary.http_status in (None, replaced):
                chain.summary.http_status = status
        if ex.resumed_with is not None:
            self._resumed(ex, ex.resumed_with, status)
        if ex.requests and 200 <= status < 300 and status not in _BODILESS and ex.mode is _PASSTHROUGH:
            self._check_content_type(ex, content_type, headers)

    def _check_content_type(self, ex: Exchange, content_type: str | None, headers: dict[str, str]) -> None:
        """Note an answer to requests whose Content-Type no Streamable HTTP client takes (the relayed
        head of the server's own answer: a bridge writes its own)."""
        if ex.http_method != "POST" or ex.plain or (ex.client_transport, ex.upstream_transport) != _HTTP_BOTH:
            return
        problem = content_type_problem(content_type, headers)
        if problem is not None:
            self._note(ex.id, None, self._redactor.scrub(problem))

    def _session_gone(self, ex: Exchange) -> None:
        """A 404 to a request of a relayed session: the server forgot it (it restarted, or let it
        expire), announced once however many requests it refuses; a 404 to the client's DELETE is the
        session's end, announced when that exchange closes."""
        session = ex.session
        if session is None or ex.mode is not Mode.PASSTHROUGH or ex.http_method == "DELETE" or ex.plain:
            return
        if session in self._sessions_gone:
            return
        self._sessions_gone[session] = None
        self._ledger.session_event(session, "expired")

    def _resumed(self, ex: Exchange, last: str, status: int) -> None:
        """Tell the chain a GET resumed how its resume went: the stream goes on, or the server refused."""
        if status < 400:
            note = f"stream resumed with Last-Event-ID {last}"
        else:
            note = f"stream not resumed with Last-Event-ID {last}: the resume was answered HTTP {status}"
        for chain_id in ex.chains:
            chain = self.store.peek(chain_id)
            if chain is not None:
                note_counted(chain.summary.notes, note)
                self._ledger.changed(chain)

    def message(
        self,
        exchange_id: str,
        msg: Message,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side = Side.BOTH,
        sse_id: str | None = None,
        note: str | None = None,
        answered_by: str | None = None,
    ) -> str | None:
        """Record one message seen on an exchange; returns the chain it joined.

        Headline changes the message causes are announced after the message itself, so the last
        ChainChanged of a chain already counts its final message.
        """
        if not self._headlines:
            return self._message(exchange_id, msg, size, direction, channel, side, sse_id, note, answered_by)
        with self._ledger.changes_held():
            return self._message(exchange_id, msg, size, direction, channel, side, sse_id, note, answered_by)

    def _message(
        self,
        exchange_id: str,
        msg: Message,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side,
        sse_id: str | None,
        note: str | None,
        answered_by: str | None,
    ) -> str | None:
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return None
        if ex.plain:
            return self._plain_body(ex, msg, size, direction, channel)
        if side is Side.UPSTREAM:
            # One leg of a message the proxy changed on a relayed exchange (what the server sent or got,
            # beside what the client got or sent): it joins its request's chain and decides nothing.
            ex_chain = (ex.requests.get(msg.id) if msg.id is not None else None) or ex.main_chain()
        elif direction is Direction.TO_SERVER:
            ex_chain = self._correlator.client_message(ex, msg)
        else:
            ex_chain = self._correlator.server_message(ex, msg)
        chain = self.store.peek(ex_chain) if ex_chain else None
        if chain is None:
            return None
        if direction is _TO_CLIENT and side is not _UPSTREAM:
            self._answer_seen(ex, chain, msg, channel)
        if sse_id is not None:
            self.note_event_id(exchange_id, sse_id)
        if msg.method == LISTEN_ACKNOWLEDGED and direction is Direction.TO_CLIENT:
            acknowledged(chain, side, self._clock())
        if not self._keeps_records:
            head = _HEADS[carries_head(chain, ex, msg, direction) if side is not Side.UPSTREAM else None]
            filed = self._count(chain, direction, size, msg.kind is Kind.INVALID, head)
        else:
            record = self._records.on_exchange(
                chain,
                ex,
                msg,
                size=size,
                direction=direction,
                channel=channel,
                side=side,
                sse_id=sse_id,
                note=note,
            )
            record.answered_by = answered_by
            self._file(chain, record, invalid=msg.kind is Kind.INVALID)
            filed = chain.summary.id
        if chain.rounds_after is not None:  # a refused retry's answer is filed in its round, then undone
            chain.summary.rounds, chain.rounds_after = chain.rounds_after, None
        if (
            (self._resumes.waits or self._cancel_waits.waits)
            and chain.cancelled
            and msg.method == "notifications/cancelled"
        ):
            self._cancel_wait(ex.session, msg.params.get("requestId"))
        return filed

    def _answer_seen(self, ex: Exchange, chain: Chain, msg: Message, channel: Channel) -> None:
        """Count what the server sent the client on a request's exchange, and note what no client can
        take: a response that answers none of its requests, a batch its declared version lacks."""
        ex.back += 1
        if channel is _JSON:
            ex.json_back += 1
            if ex.json_back == 2 and ex.requests:  # a second message in one JSON body: a batch
                self._batch_answered(ex, chain)
        if msg.kind is _RESULT and msg.id in ex.requests:
            return  # the usual answer: nothing more to look at
        if ex.requests and (msg.is_response or msg.kind is _INVALID) and is_stray(msg, ex.requests):
            ex.strays += 1
            if ex.stray is None:
                ex.stray = msg
            if ex.strays <= STRAY_NOTES:
                note_counted(chain.summary.notes, self._redactor.scrub(stray_note(msg)))
                self._ledger.changed(chain)
        elif msg.kind is _INVALID and ex.invalid_back is None:
            ex.invalid_back = msg.problem or "not JSON-RPC"

    def _batch_answered(self, ex: Exchange, chain: Chain) -> None:
        """Note a batch answer to a request whose declared version has no batches."""
        note = batch_note(declared_version(ex.request_headers))
        if note is not None and note not in chain.summary.notes:
            chain.summary.notes.append(note)
            self._ledger.changed(chain)

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

    def leg_message(
        self,
        leg: str,
        exchange_id: str,
        message: Any,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        note: str | None = None,
        joins: str | None = None,
    ) -> str | None:
        """Record a message on an upstream leg a bridge made; it joins the chain of the request it serves.

        A leg keeps its chain after the client exchange that caused it has closed (a parked call).
        A message that `joins` another leg goes to that leg's chain, and its own leg stays unbound:
        a session's GET stream carries questions for one call after another. A message on a leg the
        capture calls a GET stream that joins no call is the stream's own, even while the exchange
        the stream was opened for is open (`StreamLegs`).
        Upstream-side messages never change the chain's status: the client side decides that.
        """
        chain_id = self._legs.get(leg if joins is None else joins)
        if chain_id is None:
            own = joins is None and self._streams.declared(leg, channel)
            ex = None if own else self._exchanges.get(exchange_id)
            chain_id = ex.main_chain() if ex is not None else None
            if chain_id is None:
                chain_id = self._stream_chain(leg, direction, channel)
                if chain_id is None:
                    return None
            elif joins is None:
                self._legs[leg] = chain_id
        chain = self.store.peek(chain_id)
        if chain is None:
            return None
        if self._keeps_records:
            self._leg_fact(leg)
        msg = message if isinstance(message, Message) else classify_value(message)
        if msg.kind is Kind.REQUEST:
            if direction is Direction.TO_SERVER:
                chain.upstream_requests += 1
                if chain.summary.mode is Mode.LEGACY_TO_MRTR and msg.method == chain.summary.method:
                    chain.summary.rounds = chain.upstream_requests
            else:  # the legacy server asks in flight: the client is asked it as `input_required`
                chain.summary.nested += 1
        seen = (
            self._leg_heads.pop(leg, None) if direction is Direction.TO_CLIENT and self._leg_heads else None
        )
        head = seen[0] if seen is not None else None
        if not self._keeps_records:
            return self._count(
                chain, direction, size, False, Head.NONE if head is None else Head.LEG_RESPONSE
            )
        record = self._records.message(
            chain,
            msg,
            exchange=leg,
            side=Side.UPSTREAM,
            direction=direction,
            channel=channel,
            size=size,
            note=note,
        )
        record.http = head
        self._file(chain, record, invalid=False)
        return chain.summary.id

    def _stream_chain(self, leg: str, direction: Direction, channel: Channel) -> str | None:
        """The chain of a GET stream's own, opened for a message on it that joins no other (as of when
        the stream was opened, when the capture says); None when `leg` is no stream."""
        if not self._streams.is_stream(leg, direction, channel):
            return None
        mode, opened_at, transports = self._streams.origin(leg)
        eras = BRIDGE_ERAS.get(mode, ("unknown", "unknown"))
        clock = self._clock
        now = clock()
        stream = Exchange(leg, "GET", "", now, None, eras[0], eras[1], mode, {}, *transports)
        seen, clock.at = clock.at, opened_at if opened_at is not None else now
        try:
            chain = self._ledger.open(stream, method=STREAM_METHOD, name=None, ident=None)
        finally:
            clock.at = seen
        chain_id = chain.summary.id
        self._legs[leg] = chain_id
        self._streams.own(leg, chain_id)
        return chain_id

    def continuation_changed(
        self,
        exchange_id: str,
        *,
        continuation: str,
        state: str,
        principal: str | None,
        pending_keys: list[str],
        age_ms: float,
        outcome: str | None = None,
    ) -> None:
        """Announce a parked upstream call's change, and end a chain that still waits when it goes.

        The call is named by the exchange that parked it first (its chain is looked up then and
        remembered). `ended` becomes `completed`, or `cancelled` when the chain failed. A call whose
        client never came back (`expired`, its wait run out or, `outcome` `proxy_stopping`, the proxy
        stopped first) ends its chain incomplete: a 2026-07-28 client may stop asking, so nothing
        failed; one whose upstream went first (`lost`) fails it.
        """
        chain_id = self._continuations.get(continuation)
        if chain_id is None:
            ex = self._exchanges.get(exchange_id)
            chain_id = ex.main_chain() if ex is not None else None
            if chain_id is None:
                return
            self._continuations[continuation] = chain_id
        chain = self.store.peek(chain_id)
        if state in ("ended", "expired", "lost"):
            self._continuations.pop(continuation, None)
        if state == "ended":
            failed = chain is not None and chain.summary.status in (ChainStatus.ERROR, ChainStatus.CANCELLED)
            state = "cancelled" if failed else "completed"
        if chain is not None and chain.summary.ended is None:
            if state == "expired":
                stopped = outcome == PROXY_STOPPING
                chain.summary.notes.append(STOPPED_WHILE_PARKED if stopped else CLIENT_NEVER_RETRIED)
                self._ledger.finish(chain, ChainStatus.INCOMPLETE, None, self._clock())
            elif state in ("lost", "cancelled"):
                chain.summary.notes.append(f"parked upstream call {state}")
                self._ledger.finish(chain, ChainStatus.ERROR, f"parked upstream call {state}", self._clock())
        self._ledger.continuation_event(
            chain_id, state, principal=principal, pending_keys=pending_keys, age_ms=age_ms, outcome=outcome
        )

    def upstream_session(
        self, name: str, *, state: str, principal: str, capabilities: str, version: str | None = None
    ) -> None:
        """Announce a change of an upstream session a bridge holds (the sessions view shows it)."""
        self._ledger.upstream_session_event(
            name, state, principal=principal, capabilities=capabilities, version=version
        )

    def fault_injected(self, obs: FaultInjected) -> None:
        """Note an injected fault on the chain of the message it acted on, so it is never taken for
        the server's own behaviour (held for the exchange's first chain if none is open yet)."""
        self._note(obs.exchange, obs.message_id, fault_note(obs), obs.delay_ms if obs.applied else 0.0)

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

    def link_leg(self, leg: str, related: str) -> None:
        """File a new leg in the chain of an earlier one (an answer to, or cancel of, a parked call)."""
        chain_id = self._legs.get(related)
        if chain_id is not None:
            self._legs[leg] = chain_id
        if self._keeps_records:
            self._leg_fact(leg).related = related

    def _leg_fact(self, leg: str) -> ExchangeFacts:
        """The facts of a leg, begun when it is opened, first linked or carries a message (or, in a
        capture before 1.7, when the head of a request that carried none arrived)."""
        facts: ExchangeFacts | None = self._leg_facts.get(leg)
        if facts is None:
            facts = self._leg_facts[leg] = ExchangeFacts()
        if facts.started is None:
            facts.started = self._clock()
        return facts

    def leg_head(self, leg: str, *, status: int, content_type: str | None, headers: dict[str, str]) -> None:
        """Remember the upstream's response head to a leg; the leg's first message back carries it."""
        now = self._clock()
        self._leg_heads[leg] = (self._records.response_head(status, content_type, headers), now)
        if self._keeps_records:  # a head before any message or opening: a bodiless request's, begun then
            self._leg_fact(leg).head_at = now

    def leg_closed(self, leg: str, outcome: str | None = None) -> str | None:
        """Forget a finished leg's chain; a response head no message carried gets an `http` record.
        The leg's facts keep how it ended (`outcome`), as an exchange's do.

        Returns the chain that got that record, else None.
        """
        head = self._leg_heads.pop(leg, None) if self._leg_heads else None
        facts = self._leg_facts.pop(leg, None) if self._leg_facts else None
        if facts is not None:
            facts.ended, facts.outcome = self._clock(), outcome
        chain_id = self._legs.pop(leg, None)
        own = self._streams.closed(leg)
        if chain_id is None:
            return None
        filed = self._record_leg_head(chain_id, leg, *head) if head is not None else None
        if own is not None:
            self._stream_ended(own, facts.head_at if facts is not None else None)
        self._release((chain_id,))
        return filed

    def _stream_ended(self, chain_id: str, answered: float | None) -> None:
        """A GET stream with a chain of its own closed: so does its chain (the upstream's time ends at
        its response head, when known)."""
        chain = self.store.peek(chain_id)
        if chain is not None and chain.summary.ended is None:
            self._ledger.finish(chain, ChainStatus.OK, None, self._clock(), answered=answered)

    def _record_leg_head(self, chain_id: str, leg: str, head: HttpInfo, at: float) -> str | None:
        """File the `http` record of a leg's response head no message carried, timed when it came."""
        chain = self.store.peek(chain_id)
        if chain is None:
            return None
        if not self._keeps_records:
            return self._count(chain, Direction.TO_CLIENT, 0, False, Head.HTTP_LEG)
        record = self._records.http_only(chain, leg, head, side=Side.UPSTREAM, ts=at)
        self._file(chain, record, invalid=False)
        return chain.summary.id

    def close_exchange(self, exchange_id: str, outcome: str | None = None) -> str | None:
        """Finish an exchange: unanswered requests fail with `outcome`.

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
                replaced = self._resumes.wait(ex.session, ident, chain_id, now, outcome)
                if replaced is not None:
                    self._end_wait(replaced, replaced.since, ID_REUSED)
                chain.summary.notes.append(awaiting_resume(outcome, ex.last_sse_id))
                self._ledger.changed(chain)
                continue
            self._correlator.forget_request(ex.session, ident, chain_id)
            if chain is None or chain.summary.status in DECIDED:
                continue
            if cancels_by_hanging_up(outcome, ex.client_era):
                chain.summary.notes.append(MODERN_CANCEL)
                chain.cancelled = True
            elif outcome == "client_disconnected" and ex.mode is Mode.LEGACY_TO_MRTR:
                chain.summary.notes.append(LEGACY_LEFT_BRIDGE)
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

    def _end_waits(self, obs: Observation) -> None:
        """End the chains `obs` shows will not be resumed (their wait ran out, their session ended),
        as of their cut: the client stopped there."""
        for wait, note in self._resumes.ended_by(obs, self._session_of):
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

    def _session_of(self, exchange_id: str) -> str | None:
        ex = self._exchanges.get(exchange_id)
        return ex.session if ex is not None else None

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

    def mark_invalid(self, exchange_id: str, problem: str, *, size: int, body: bytes) -> str | None:
        """Record a client body that is not JSON-RPC (still forwarded in pass-through) as an invalid chain."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return None
        if ex.plain:  # a form or any other body of a plain HTTP request: no JSON-RPC was meant
            text = body[: self._body_limit].decode("utf-8", "replace")
            return self._plain_body(ex, Message(Kind.INVALID, text), size, Direction.TO_SERVER, Channel.POST)
        chain = self._ledger.open(ex, method=None, name=None, ident=None)
        chain.summary.invalid = True
        chain.summary.notes.append(f"invalid request: {problem}")
        preview = body[: self._body_limit].decode("utf-8", "replace")
        msg = Message(Kind.INVALID, preview, problem=problem)
        if self._keeps_records:
            record = self._records.on_exchange(
                chain,
                ex,
                msg,
                size=size,
                direction=Direction.TO_SERVER,
                channel=Channel.POST,
                side=Side.BOTH,
                sse_id=None,
                note=problem,
            )
            self._file(chain, record, invalid=True)
        else:
            head = _HEADS[carries_head(chain, ex, msg, Direction.TO_SERVER)]
            self._count(chain, Direction.TO_SERVER, size, True, head)
        # Nothing can answer it into success; without this it would stay pending for ever.
        self._ledger.finish(chain, ChainStatus.ERROR, f"invalid request: {problem}", self._clock())
        return chain.summary.id

    def _plain_body(
        self, ex: Exchange, msg: Message, size: int, direction: Direction, channel: Channel
    ) -> str | None:
        """File a body of a plain HTTP exchange in its chain as the body it is: no JSON-RPC meaning, no
        problem with it; the first one back carries the response head."""
        chain = self.store.peek(ex.chains[0]) if ex.chains else None
        if chain is None:
            return None
        http = None
        if direction is Direction.TO_CLIENT and not ex.head_recorded and ex.head is not None:
            ex.head_recorded, http = True, ex.head
        if not self._keeps_records:
            return self._count(
                chain, direction, size, False, Head.PLAIN_BODY if http is None else Head.PLAIN_RESPONSE
            )
        record = self._records.message(
            chain,
            msg,
            exchange=ex.id,
            side=Side.BOTH,
            direction=direction,
            channel=channel,
            size=size,
            note=None,
        )
        record = as_plain_body(record)
        record.http = http
        self._file(chain, record, invalid=False)
        return chain.summary.id

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

    def _record_request_head(self, ex: Exchange) -> str | None:
        """File the request head of a bodiless request (a GET stream, a DELETE) in the chain it opened
        or resumed, as every request's head is: no message of its own carries it."""
        chain = self.store.peek(ex.chains[-1]) if ex.chains else None
        if chain is None:
            return None
        ex.request_recorded = True
        if not self._keeps_records:
            return self._count(chain, Direction.TO_SERVER, 0, False, Head.REQUEST)
        head = self._records.request_head(ex.http_method, ex.path, ex.request_headers)
        record = self._records.http_only(
            chain, ex.id, head, side=http_side(ex.mode), direction=Direction.TO_SERVER
        )
        self._file(chain, record, invalid=False)
        return chain.summary.id

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

    def _count(self, chain: Chain, direction: Direction, size: int, invalid: bool, head: Head) -> str:
        """Count a message without recording it; `on_filed` hears what its record would be."""
        self._ledger.count(chain, direction, size, invalid=invalid)
        if self._on_filed is not None:
            self._on_filed(chain.summary.id, chain.next_seq(), chain.summary.rounds, head)
        return chain.summary.id


_HEADS: dict[Direction | None, Head] = {
    Direction.TO_SERVER: Head.REQUEST,
    Direction.TO_CLIENT: Head.RESPONSE,
    None: Head.NONE,
}


_TIMES = re.compile(r"(.*) \((\d+) times\)", re.S)


def acknowledged(chain: Chain, side: Side, now: float) -> None:
    """A listen's acknowledgement reached its client (not only the proxy, on a rewritten message's
    upstream side): the listen is answered, its stream stays open."""
    if side is not Side.UPSTREAM and chain.summary.method == LISTEN and chain.acknowledged is None:
        chain.acknowledged = now


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


def sent_by(sender: str, method: str | None) -> str:
    """How a note names a message: `the client's tools/call`, `the server's answer to tools/call`.

    Observations carry, for an answer, the method of the request it answers, so who sent it tells the
    two apart: a server answers the client's requests, a client answers the server's
    (`elicitation/create`, sampling, roots). Notifications and `ping`, which either side sends, are
    named by their method alone.
    """
    who = "client's" if sender == "client" else "server's"
    if method is None:
        return f"the {who} message"
    two_way = method.startswith("notifications/") or method == "ping"
    if not two_way and (method in INPUT_METHODS) == (sender == "client"):
        return f"the {who} answer to {method}"
    return f"the {who} {method}"


def intercept_note(obs: InterceptHeld | InterceptReleased) -> str | None:
    """The chain's note for an intercept: a message released (how, by whom, after how long), or one a
    rule picked that was not held and why; None for a message now held (its release notes it)."""
    what = sent_by(obs.sender, obs.method)
    if isinstance(obs, InterceptHeld):
        if obs.applied:
            return None
        return f"not held by intercept ({obs.rule}): {what}: {obs.detail or 'it could not be held'}"
    rule = obs.rule.partition(":")[0]
    done = _INTERCEPT_DONE.get(obs.decision, obs.decision)
    return f"{what} held by intercept {rule} for {obs.held_ms / 1000:.1f} s, {done} by {obs.by}"


IN_CLIENTS_PLACE: Final = ", sent in the client's place"
"""How the note of an answer the proxy sent a server in the client's place ends (`answered_for_client`)."""

INTERCEPT_BY: Final = "intercept:"
"""How the name of a message's maker starts when an intercept rule made it (`by_intercept`)."""


def by_intercept(rule: str) -> str:
    """The typed name of the intercept rule `rule` as the maker of a message in the client's place
    (`intercept:i2`): what code compares, where a note's words are for people."""
    return f"{INTERCEPT_BY}{rule}"


def answerer(by: str | None) -> str:
    """Who `by` (`by_intercept`) names, in words: `the proxy's intercept (i2)`, else `the proxy`."""
    rule = by.removeprefix(INTERCEPT_BY) if by is not None and by.startswith(INTERCEPT_BY) else ""
    return f"the proxy's intercept ({rule})" if rule else "the proxy"


def answered_for_client(by: str, dropped: bool) -> str:
    """The note on the answer an intercept (`by`) sent a server to its request, which no client saw:
    the one typed at the desk, or the error a drop makes (`dropped`). For people: code reads the
    message's `answered_by`."""
    whose = "a drop error from" if dropped else "typed at"
    return f"{whose} {answerer(by)}{IN_CLIENTS_PLACE}"


_INTERCEPT_DONE: Final = {
    "forward": "forwarded unchanged",
    "forward_edited": "forwarded edited",
    "drop": "dropped",
    "answer": "answered in its place",
}
"""How an intercept note words each decision."""
_FAULT_INJECTED: Final = "fault injected by the proxy: "
_CHANGED_BY_INTERCEPT: Final = re.compile(
    r" held by intercept \S+ for [\d.]+ s, (?:"
    + "|".join(re.escape(_INTERCEPT_DONE[d]) for d in ("forward_edited", "drop", "answer"))
    + ") by "
)


def proxy_changes(notes: Iterable[str]) -> list[str]:
    """The notes of a chain that say the proxy changed its traffic: a fault injected, or a held
    message forwarded edited, dropped or answered by an intercept (its recording is then not what the
    peers alone would have exchanged)."""
    return [n for n in notes if n.startswith(_FAULT_INJECTED) or _CHANGED_BY_INTERCEPT.search(n)]


def fault_note(obs: FaultInjected) -> str:
    """The chain's note for an injected fault: what the proxy did (or why it could not), and the rule."""
    what = f"{obs.fault} on {sent_by(obs.sender, obs.method)}"
    if not obs.applied:
        return f"fault not injected ({obs.rule}): {what}: {obs.detail or 'it cannot act on this message'}"
    detail = f" ({obs.detail})" if obs.detail else ""
    return f"{_FAULT_INJECTED}{what}{detail} [{obs.rule}]"


def origin_note(obs: OriginRewritten) -> str:
    """The chain's note for URLs the proxy moved between the upstream's origin and the client's (or a
    discovery document it left as it was, and why)."""
    if obs.problem is not None:
        return f"origin not rewritten for the client: {obs.problem}"
    side = "client" if obs.direction is Direction.TO_CLIENT else "server"
    return f"origin rewritten for the {side} by the proxy: {obs.changed}: {obs.was} -> {obs.now}"
