"""The round-trip tally: the log line of each client exchange, counted from its observations.

Every exchange gets one line when it closes, whether or not anyone watches and whether or not its
chain is built yet: the line describes the exchange by what it carried (its first request's method
and target, the request ids, the response head, bytes and messages out), never by the chain it joins,
so it is the same line either way. The exchange id in it is the one every message record of the
exchange carries, which links a line to its chain. A request the server sends the client on an open
exchange (`elicitation/create`, `sampling/createMessage`, `roots/list`, ...) is told at once as a
`ServerAsked`: the exchange it rides waits on the client's answer, and a person watching the log sees
what it waits for instead of silence until it closes. A request whose stream was cut after an event
id, unanswered, may still be answered on a stream the client resumes (`proxy.flows.resumes`): its line
says `end: resumable`, no trouble, and the line of the GET that resumes it names its ids; unless its
session is over (`EndedSessions`, the rule the chain and the metrics judge by), or its stream closed
while a DELETE of its session was on its way, whose answer the line waits for. No I/O, no clock (times
are the observations').
"""

from __future__ import annotations

from collections.abc import KeysView, Sequence
from typing import Any

from proxy.flows.cut_streams import CutStreams
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import Direction, Mode, Side
from proxy.flows.exchanges import BoundedMap
from proxy.flows.log_lines import ExchangeSummary, ServerAsked
from proxy.flows.observations import (
    CLIENT_CANCELLED,
    LATE_CANCEL_S,
    BodyNotInspected,
    BytesOut,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    FaultInjected,
    InterceptHeld,
    InterceptReleased,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
    awaits_cancel,
)
from proxy.flows.open_exchange import (
    RESUMABLE,
    OpenExchange,
    count_batched,
    exchange_line,
    failure,
    keep_event_id,
    keep_unmatched,
    may_resume,
    shown_ids,
    tell_batched,
    unanswered_ids,
)
from proxy.flows.redact import Redactor
from proxy.flows.resumes import SESSION_GONE_STATUS, EndedSessions
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import RESULT_INPUT_REQUIRED, target_name
from proxy.wire.shown import SHOWN_TEXT_BOUND, shown_id, shown_text
from proxy.wire.versions import Era

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_INVALID = Kind.INVALID
_REQUEST = Kind.REQUEST
_RESULT = Kind.RESULT
_PASSTHROUGH = Mode.PASSTHROUGH
_MODERN_ERA = Era.MODERN.value

_TO_CLIENT = Direction.TO_CLIENT
_UPSTREAM = Side.UPSTREAM

STREAM_METHODS = {"GET": "GET stream", "DELETE": "DELETE session"}
"""What the line (and the chain) calls a GET or DELETE exchange."""

ASKS_TOLD = 20
"""Inputs of one `input_required` answer told as asked (a server asking more is cut short)."""

ASKED_BOUND = 10_000
"""Server-to-client requests remembered until their answer names them (oldest forgotten first)."""

CANCELS_BOUND = 10_000
"""A client's `notifications/cancelled` of a request on an open exchange remembered (session, id)
until that exchange closes (oldest forgotten first): a cancelled call the server then ends unanswered
is no trouble."""

HOLD_BOUND = 1_000
"""Requests whose lines are held at once; past it the oldest line is logged as it stands."""


class RoundTripTally:
    """Counts each open exchange's observations; hands back its line when it closes."""

    def __init__(self, redactor: Redactor, endpoint: Endpoint | None = None) -> None:
        """`endpoint`: the MCP endpoint's paths (an exchange to any other path is plain HTTP)."""
        self._redactor = redactor
        self._endpoint = endpoint if endpoint is not None else Endpoint()
        self._open: dict[str, OpenExchange] = {}
        self._asked: BoundedMap = BoundedMap(ASKED_BOUND)
        """(session, id) of each request a server sent a client -> its method: names the answer."""
        self.asking: list[ServerAsked] = []
        """Requests sent to a client by the batch just counted: whoever takes the batch reads them
        and empties the list."""
        self._cancels: BoundedMap = BoundedMap(CANCELS_BOUND)
        """(session, id) of each request a client cancelled while its exchange was open."""
        self._held: dict[tuple[str, RequestId], _Held] = {}
        """The lines held for a cancel (`LATE_CANCEL_S`), by the (session, id) of a request each left
        unanswered, oldest first."""
        self.released: list[tuple[ExchangeSummary, str]] = []
        """Held lines let go (each with its mode) by the batch just counted or the last `expire`:
        whoever takes them logs them and empties the list."""
        self.cuts = CutStreams()
        """The streams cut resumable: where a resume begins, and the follow-up of a wait that ended
        unresumed (`cuts.not_resumed`, taken and emptied like `released`)."""
        self._ended = EndedSessions()
        """The sessions a DELETE's answer or a 404 ended: a stream of theirs cut is no longer resumable."""
        self.modern_passthrough = False
        """A 2026-07-28 client's exchange has opened in pass-through: what only such calls concern
        (`ObservationSink.modern_listeners`) has something to follow from then on."""

    @property
    def open_exchanges(self) -> int:
        """Exchanges opened and not yet closed (draining waits for them)."""
        return len(self._open)

    @property
    def open_streams(self) -> int:
        """Open GET exchanges (standalone streams: they end only when closed, so draining skips them)."""
        return sum(1 for tally in self._open.values() if tally.http_method == "GET")

    def asked(self, session: str | None, ident: RequestId) -> str | None:
        """The method of the request a server sent a client under `session` (as sent, not redacted)
        and `ident`, while remembered: what the client's answer with that id answers."""
        if not self._asked:
            return None
        token = session and self._redactor.token(session)
        method: str | None = self._asked.get((token, ident))
        return method

    @property
    def open_ids(self) -> KeysView[str]:
        """The open exchanges' ids: a live view, for a caller that asks of many in a row."""
        return self._open.keys()

    def opened(self, exchange: str) -> ExchangeOpened | None:
        """The request head of an open exchange as received, unmasked (None once it closed)."""
        tally = self._open.get(exchange)
        return None if tally is None else tally.opened

    def observe_all(self, batch: Sequence[Observation]) -> ExchangeSummary | None:
        """Count observations in order; the line of an exchange one of them closes, if any.

        The kinds every exchange has are handled in the loop itself (this runs for each observation
        the proxy makes); observation kinds are never subclassed, so their type is compared exactly.
        """
        line = None
        opened = self._open
        for obs in batch:
            if type(obs) is MessageSeen:
                self._message(obs)
            elif type(obs) is ExchangeOpened:
                self._opened(obs)
            elif type(obs) is ResponseHeadSeen:
                tally = opened.get(obs.exchange)
                if tally is not None:
                    tally.status, tally.content_type = obs.status, obs.content_type
                    if obs.status == SESSION_GONE_STATUS or tally.http_method == "DELETE":
                        self._session_answered(obs.exchange, tally, obs.status)
                    elif tally.resumes_from is not None and obs.status < 400:
                        self.cuts.resumed(tally.session, tally.resumes_from)
            else:
                line = self._other(obs) or line
        return line

    def observe(self, obs: Observation) -> ExchangeSummary | None:
        """Count one observation; an `ExchangeClosed` of an open exchange returns its line."""
        return self.observe_all((obs,))

    def _other(self, obs: Observation) -> ExchangeSummary | None:
        """The kinds `observe_all` does not handle in its loop: an exchange's close and rarer ones."""
        if isinstance(obs, BytesOut):
            tally = self._open.get(obs.exchange)
            if tally is not None:
                tally.bytes_out += obs.size
        elif isinstance(obs, EventIdSeen):
            tally = self._open.get(obs.exchange)
            if tally is not None:
                keep_event_id(tally, obs.sse_id)
        elif isinstance(obs, BodyNotInspected):
            tally = self._open.get(obs.exchange)
            if tally is not None:
                tally.not_inspected = tally.not_inspected or obs.reason
        elif isinstance(obs, ExchangeClosed):
            tally = self._open.pop(obs.exchange, None)
            if tally is not None:
                if tally.answered >= len(tally.ids):  # every request answered (the usual): none held
                    return exchange_line(obs.exchange, tally, obs, self._redactor)
                return self._closed(obs, tally)
        elif isinstance(obs, FaultInjected):
            tally = self._open.get(obs.exchange)
            if tally is not None:
                text = obs.fault if obs.applied else f"{obs.fault} not injected"
                tally.faults = [*(tally.faults or ()), text]
        elif isinstance(obs, InterceptHeld | InterceptReleased):
            tally = self._open.get(obs.exchange)
            said = _intercept_text(obs)
            if tally is not None and said is not None:
                tally.intercepts = [*(tally.intercepts or ()), said]
        return None

    def _message(self, obs: MessageSeen) -> None:
        tally = self._open.get(obs.exchange)
        if tally is None or obs.side is _UPSTREAM or tally.plain:  # the client's exchange as it went;
            return  # a plain HTTP body means no JSON-RPC
        msg = obs.msg
        if obs.direction is _TO_CLIENT:
            tally.messages_out += 1
            tally.bytes_out += obs.size
            if obs.sse_id is not None:
                keep_event_id(tally, obs.sse_id)
            if msg.kind is _REQUEST and msg.id is not None and msg.method:
                self._asked[(tally.session, msg.id)] = msg.method
                self._ask(obs.exchange, tally, msg.method, msg.id, "in flight")
            elif msg.is_response and msg.id in tally.ids:
                tally.answered += 1
                if len(tally.ids) > 1:  # one request answered needs no list (`unanswered_ids`)
                    if tally.answered_ids is None:
                        tally.answered_ids = []
                    tally.answered_ids.append(msg.id)
                if tally.failed is None:
                    tally.failed = failure(msg)
                    if tally.failed is not None and self._cancels:
                        self._answered_cancel(tally, msg.id)
                if msg.kind is _RESULT and tally.mode is _PASSTHROUGH:
                    self._input_required(obs.exchange, tally, msg)
            elif msg.is_response or msg.kind is _INVALID:
                keep_unmatched(tally, msg)
            return
        if msg.kind is _REQUEST:
            if tally.method is None:
                method = msg.method
                if method is not None and len(method) > SHOWN_TEXT_BOUND:  # a client's text, bounded
                    method = shown_text(method)
                tally.method, tally.name = method, self._shown_name(msg.method, msg.params)
                named = f"{method} {tally.name}" if tally.name else method
                if tally.carried is None:
                    tally.carried = named
                elif count_batched(tally):  # a batch whose first message was no request
                    tell_batched(tally, named or "?")
            elif count_batched(tally):  # another request of a batch, named while its line has room
                tell_batched(tally, self._request_name(msg))
            if msg.id is not None:
                tally.ids.append(msg.id)
                if self.cuts.waiting:
                    self.cuts.id_reused(tally.session, msg.id)
            return
        if msg.method == "notifications/cancelled":
            self._client_cancelled(tally.session, msg.params.get("requestId"), obs.t)
        if tally.carried is None:
            tally.carried = self._name(msg, tally.session)
        elif count_batched(tally):  # another message of a batch, named while its line has room
            tell_batched(tally, self._name(msg, tally.session))
        elif msg.is_response:  # not named, but what it answers is forgotten as naming it would
            self._asked.pop((tally.session, msg.id), None)

    def _session_answered(self, exchange: str, tally: OpenExchange, status: int) -> None:
        """The head of a DELETE, or a 404: when it ends the session (as the chain and the metrics judge),
        a stream of it cut is not resumed, so its event ids are forgotten; the lines held for this
        DELETE's answer go, judged by it."""
        session = tally.session
        deletes = tally.http_method == "DELETE"
        if not tally.plain and self._ended.answered(session, deletes, status):
            self.cuts.session_ended(session)
        if deletes and self._held:
            waiting: list[_Held] = []
            for held in self._held.values():
                if held.delete == exchange and held not in waiting:
                    waiting.append(held)
            for held in waiting:
                self._release(held, None)

    def _deleting(self, session: str | None) -> str | None:
        """The open DELETE of `session` not answered yet, if any: a stream the server closes because of
        it is over with the session when the DELETE is answered below 400."""
        if session is None:
            return None
        for exchange, open_ in self._open.items():
            if open_.session == session and open_.http_method == "DELETE" and open_.status is None:
                return exchange
        return None

    def _closed(self, obs: ExchangeClosed, tally: OpenExchange) -> ExchangeSummary | None:
        """The line of an exchange that closed with requests unanswered; None while it is held for its
        client's cancel, or, resumable, for the answer to a DELETE of its session on its way."""
        unanswered = unanswered_ids(tally)
        session = tally.session
        over = session in self._ended
        resumable = bool(unanswered) and not over and may_resume(tally, obs)
        if resumable and tally.event_ids:
            self.cuts.cut(obs.exchange, session, tally.event_ids, tuple(unanswered), obs.t)
        cancels = self._cancels
        if cancels and unanswered and session is not None:  # each id checked, then its cancel used
            uncancelled = [ident for ident in unanswered if (session, ident) not in cancels]
            for ident in unanswered:
                cancels.pop((session, ident), None)
            if not uncancelled:
                return exchange_line(obs.exchange, tally, obs, self._redactor, CLIENT_CANCELLED)
            unanswered = uncancelled  # the line waits for the cancels still to come
        delete = self._deleting(session) if resumable else None
        if not unanswered or (
            delete is None and not awaits_cancel(obs.outcome, tally.opened.client_era, session)
        ):
            return self._followed(exchange_line(obs.exchange, tally, obs, self._redactor, None, over), tally)
        assert session is not None
        held = _Held(obs, tally, unanswered, delete)
        for ident in unanswered:
            earlier = self._held.get((session, ident))
            if earlier is not None:  # a later call of the session took the id: the earlier line goes
                self._release(earlier, None)
            self._held[(session, ident)] = held
        while len(self._held) > HOLD_BOUND:
            self._release(next(iter(self._held.values())), None)
        return None

    def _answered_cancel(self, tally: OpenExchange, ident: RequestId) -> None:
        """A failure answered request `ident` of an open exchange: when its client had cancelled it,
        the failure is the server's answer to that cancel, as its chain says (`cancelled`)."""
        if tally.session is not None and self._cancels.pop((tally.session, ident), None) is not None:
            tally.failed, tally.cancelled = None, True

    def _client_cancelled(self, session: str | None, ident: object, t: float) -> None:
        """A client cancelled request `ident` at `t`: its held line is let go as cancelled (as it
        stands, the cancel past `LATE_CANCEL_S`), or, an open exchange of the session carrying it
        unanswered, the cancel is remembered for when that exchange closes. Any other cancel names
        nothing the line can show, and is not kept."""
        if session is None or not isinstance(ident, (str, int)) or isinstance(ident, bool):
            return
        if self.cuts.waiting:
            self.cuts.cancelled(session, ident)
        held = self._held.get((session, ident))
        if held is not None:
            self._release(held, CLIENT_CANCELLED if t - held.closed.t <= LATE_CANCEL_S else None)
        elif any(
            open_.session == session and ident in unanswered_ids(open_) for open_ in self._open.values()
        ):
            self._cancels[(session, ident)] = True

    def _release(self, held: _Held, ended: str | None) -> None:
        """Let a held line go: as cancelled (`ended`), or as it stands (None)."""
        session = held.tally.session
        assert session is not None  # only a session's call is held
        for ident in held.unanswered:
            self._held.pop((session, ident), None)
        over = session in self._ended
        line = exchange_line(held.closed.exchange, held.tally, held.closed, self._redactor, ended, over)
        self.released.append((self._followed(line, held.tally), str(held.tally.mode.value)))

    def _followed(self, line: ExchangeSummary, tally: OpenExchange) -> ExchangeSummary:
        """The line as given; one that says `resumable` has its wait followed (`CutStreams`)."""
        if line.end == RESUMABLE:
            self.cuts.logged_resumable(line.exchange, line.carried, str(tally.mode.value))
        return line

    def expire(self, now: float) -> None:
        """Let go, as they stand, the held lines whose cancel did not come within `LATE_CANCEL_S` by
        `now`."""
        while self._held:
            held = next(iter(self._held.values()))
            if now - held.closed.t <= LATE_CANCEL_S:
                break
            self._release(held, None)
        self.cuts.ran_out(now)

    def release_all(self) -> None:
        """Let every held line go as it stands (the proxy stops)."""
        while self._held:
            self._release(next(iter(self._held.values())), None)

    def _shown_name(self, method: str | None, params: dict[str, Any]) -> str | None:
        """A request's target as the line shows it: a resource URI with its query credentials masked
        (and learned, so an echo of one is masked too), any other name with known secrets masked."""
        name = target_name(method, params)
        if name is None:
            return None
        # Masked whole, then bounded: a secret cut in two would no longer be found.
        if method is not None and method.startswith("resources/"):
            return shown_text(self._redactor.path(name))
        return shown_text(self._redactor.scrub(name))

    def _request_name(self, msg: Message) -> str:
        """A request named as a batch's line lists it: its method and target, bounded."""
        method = shown_text(str(msg.method))
        name = self._shown_name(msg.method, msg.params)
        return f"{method} {name}" if name else method

    def _ask(self, exchange: str, tally: OpenExchange, method: str, asked: RequestId, how: str) -> None:
        carried = tally.carried or tally.method or tally.http_method
        ids, more = shown_ids(tally.ids)
        self.asking.append(
            ServerAsked(exchange, tally.session, carried, ids, method, asked, tally.mode, how, more)
        )

    def _input_required(self, exchange: str, tally: OpenExchange, msg: Message) -> None:
        """A 2026-07-28 server's `input_required` answer: each input it asks for waits on the client."""
        result = msg.raw.get("result")
        if type(result) is not dict or result.get("resultType") != RESULT_INPUT_REQUIRED:
            return
        asks = result.get("inputRequests")
        if isinstance(asks, dict):
            for key, ask in list(asks.items())[:ASKS_TOLD]:
                method = ask.get("method") if isinstance(ask, dict) else None
                self._ask(exchange, tally, method if isinstance(method, str) else "?", key, "input_required")

    def _name(self, msg: Message, session: str | None) -> str:
        """The client message an exchange carried first, named for a person reading the log."""
        if msg.is_response:
            asked = self._asked.pop((session, msg.id), None)
            word = "result" if msg.kind is _RESULT else "error"
            if not asked:
                return f"{word} for id {shown_id(msg.id)}"
            return f"{word} of {asked}{_answer_detail(asked, msg)}"
        if msg.kind is _INVALID:
            return "invalid message"
        if msg.method == "notifications/cancelled":
            cancelled = msg.params.get("requestId")
            if isinstance(cancelled, (str, int)) and not isinstance(cancelled, bool):
                return f"notifications/cancelled of #{shown_id(cancelled)}"
        return shown_text(str(msg.method))  # a notification

    def _opened(self, obs: ExchangeOpened) -> None:
        session = obs.session
        endpoint = self._endpoint
        plain = (
            obs.path not in endpoint.paths
            and endpoint.known
            and endpoint.is_plain(obs.path, obs.client_transport, obs.upstream_transport)
        )
        self._open[obs.exchange] = OpenExchange(
            obs.http_method,
            obs.t,
            session and self._redactor.token(session),
            obs.body_size,
            None if plain else STREAM_METHODS.get(obs.http_method),  # a stream's or a DELETE's name
            obs.path if obs.http_method == "GET" or plain else "",
            (obs.client_transport, obs.upstream_transport),
            obs.mode,
            obs,
            plain,
        )
        if obs.http_method == "GET":
            self._resumes(obs, self._open[obs.exchange])
        elif obs.client_era == _MODERN_ERA and obs.mode is _PASSTHROUGH:
            self.modern_passthrough = True

    def _resumes(self, obs: ExchangeOpened, tally: OpenExchange) -> None:
        """A GET with `Last-Event-ID` that resumes a cut stream carries on the requests that stream left
        unanswered: one seen cut resumable, or one still open (the proxy learns of a client's hang-up
        only when it next writes to it)."""
        last = next((v for k, v in obs.headers.items() if k.lower() == "last-event-id"), None)
        if not last:
            return
        session = tally.session
        tally.resumes_from = last
        ids: Sequence[RequestId] | None = self.cuts.resumed_ids(session, last)
        if ids is None:
            cut = next(
                (o for o in self._open.values() if o.session == session and last in (o.event_ids or ())), None
            )
            ids = unanswered_ids(cut) if cut is not None else None
        if ids:
            tally.ids = list(ids)


def _answer_detail(asked: str, msg: Message) -> str:
    """What a person needs to tell one answer from another: an elicitation's action (accept, decline
    or cancel look alike otherwise)."""
    if asked != "elicitation/create" or msg.kind is not _RESULT:
        return ""
    result = msg.raw.get("result")
    action = result.get("action") if isinstance(result, dict) else None
    return f" ({action})" if isinstance(action, str) and action.isidentifier() and len(action) <= 20 else ""


class _Held:
    """The line of a closed exchange waiting (`LATE_CANCEL_S`) for its client's `notifications/cancelled`,
    or for the answer to the DELETE of its session on its way (`delete`)."""

    __slots__ = ("closed", "delete", "tally", "unanswered")

    def __init__(
        self, closed: ExchangeClosed, tally: OpenExchange, unanswered: list[RequestId], delete: str | None
    ) -> None:
        self.closed = closed
        self.tally = tally
        self.unanswered = unanswered
        self.delete = delete
        """The DELETE exchange whose answer says whether the session is over, if any."""


def _intercept_text(obs: InterceptHeld | InterceptReleased) -> str | None:
    """`held 3.2 s, forward_edited by api` for a release, `not held: ...` for a message let go at once."""
    if isinstance(obs, InterceptReleased):
        return f"held {obs.held_ms / 1000:.1f} s, {obs.decision} by {obs.by}"
    return None if obs.applied else f"not held: {obs.detail}"
