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
from typing import Any, Final

from orjson import dumps

from proxy.flows.answer_faults import is_stray, no_answer, unmatched
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
    client_end,
    declines_stream,
    hung_up_after_unread,
    unusual_end,
)
from proxy.flows.redact import Redactor
from proxy.flows.resumes import SESSION_GONE_STATUS, EndedSessions, awaits_resume
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import RESULT_INPUT_REQUIRED, target_name
from proxy.wire.shown import SHOWN_TEXT_BOUND, shown_id, shown_text

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_ERROR = Kind.ERROR
_INVALID = Kind.INVALID
_REQUEST = Kind.REQUEST
_RESULT = Kind.RESULT
_PASSTHROUGH = Mode.PASSTHROUGH

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

BATCH_TOLD = 100
"""Messages of one JSON-RPC batch its line names in JSON (`batch`); the count in `carried` is whole."""

BATCH_BYTES = 2048
"""Bytes the message names in one batch's `batch` take in JSON at most: names past them (or past
`BATCH_TOLD`) are one last entry, `+N more`, so a line stays far below the 16 KiB at which Docker's
json-file driver cuts lines, however the batch is built (each name is bounded, not their number)."""

BATCH_SHOWN = 3
"""Messages of one batch `carried` names (what a terminal shows), the rest said as a count."""

CARRIED_BYTES = 640
"""Bytes the message names in a batch's `carried` take in JSON at most, past its first (always
named, as the only message of an exchange would be)."""

IDS_BYTES = 1024
"""Bytes the request ids one line lists take in JSON at most (the first is always listed): the ids
of a batch past them are said as a count (`ids_more`)."""

EVENT_IDS_KEPT = 64
"""The latest event ids one exchange carrying requests keeps: where its client may resume from."""

RESUMABLE: Final = "resumable"
"""The `end` of an exchange whose stream was cut after an event id before its answers: the client may
resume it with GET + `Last-Event-ID`, so its line is no trouble (its chain gives the verdict)."""


class _Open:
    """What the line needs of an exchange still open (a plain class: one is made per exchange, and a
    dataclass called with keywords costs a dict of them)."""

    __slots__ = (
        "answered",
        "answered_ids",
        "batch",
        "batch_bytes",
        "batched",
        "bytes_in",
        "bytes_out",
        "cancelled",
        "carried",
        "content_type",
        "event_ids",
        "failed",
        "faults",
        "http_method",
        "ids",
        "intercepts",
        "last_sse_id",
        "messages_out",
        "method",
        "mode",
        "name",
        "not_inspected",
        "opened",
        "path",
        "plain",
        "problem",
        "resumes_from",
        "session",
        "started",
        "status",
        "stray",
        "transports",
    )

    def __init__(
        self,
        http_method: str,
        started: float,
        session: str | None,
        bytes_in: int,
        method: str | None,
        path: str,
        transports: tuple[str, str],
        mode: Mode,
        opened: ExchangeOpened,
        plain: bool,
    ) -> None:
        self.http_method = http_method
        self.started = started
        self.session = session
        self.bytes_in = bytes_in
        self.method = method
        self.name: str | None = None
        self.ids: list[RequestId] = []
        self.carried: str | None = None
        self.batch: list[str] | None = None
        """Each client message it carried named, when it carried more than one (a JSON-RPC batch),
        the first `BATCH_TOLD`; None for the usual single message."""
        self.batched = 0
        """How many messages that batch held."""
        self.batch_bytes = 0
        """The bytes the names in `batch` take in JSON (`BATCH_BYTES`)."""
        self.answered = 0
        """Responses to its requests that went to the client."""
        self.answered_ids: list[RequestId] | None = None
        """The ids those responses named (None while there are none)."""
        self.failed: str | None = None
        """The first answer to one of its requests that reports a failure (`error -32601`, `tool error`)."""
        self.cancelled = False
        """A request it carried was answered with a failure after its client cancelled it (the mcp 1.x
        SDK answers a cancelled call with error 0): the answer to the cancel, no trouble."""
        self.path = path
        self.status: int | None = None
        self.content_type: str | None = None
        self.bytes_out = 0
        self.messages_out = 0
        self.faults: list[str] | None = None
        """Faults injected into its messages, in order (None while there are none)."""
        self.transports = transports
        """How the client reached the proxy, and how the proxy reached the upstream."""
        self.intercepts: list[str] | None = None
        """What intercepts did to its messages, in order (None while nothing was picked)."""
        self.not_inspected: str | None = None
        """Why its response body went by unread, if it did."""
        self.mode = mode
        self.opened = opened
        """Its request head as received (a reference, never copied): what a held message of it is
        shown beside (`RoundTripTally.opened`)."""
        self.plain = plain
        """A request to a path other than the MCP endpoint: plain HTTP, told by its method, path and
        status, whatever its body holds."""
        self.stray: Message | None = None
        """The first response the server sent that answers none of its requests (`answer_faults`)."""
        self.last_sse_id: str | None = None
        """The latest SSE event id sent on it (as sent: a key, never shown): where a resume begins."""
        self.event_ids: list[str] | None = None
        """Its latest event ids (`EVENT_IDS_KEPT`) once it carries requests: any may begin a resume."""
        self.problem: str | None = None
        """Why the first value its response carried that is no JSON-RPC message is not one."""
        self.resumes_from: str | None = None
        """The `Last-Event-ID` of a GET that resumes a stream (None: none)."""


class RoundTripTally:
    """Counts each open exchange's observations; hands back its line when it closes."""

    def __init__(self, redactor: Redactor, endpoint: Endpoint | None = None) -> None:
        """`endpoint`: the MCP endpoint's paths (an exchange to any other path is plain HTTP)."""
        self._redactor = redactor
        self._endpoint = endpoint if endpoint is not None else Endpoint()
        self._open: dict[str, _Open] = {}
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
                _event_id(tally, obs.sse_id)
        elif isinstance(obs, BodyNotInspected):
            tally = self._open.get(obs.exchange)
            if tally is not None:
                tally.not_inspected = tally.not_inspected or obs.reason
        elif isinstance(obs, ExchangeClosed):
            tally = self._open.pop(obs.exchange, None)
            if tally is not None:
                if tally.answered >= len(tally.ids):  # every request answered (the usual): none held
                    return _line(obs.exchange, tally, obs, self._redactor)
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
                _event_id(tally, obs.sse_id)
            if msg.kind is _REQUEST and msg.id is not None and msg.method:
                self._asked[(tally.session, msg.id)] = msg.method
                self._ask(obs.exchange, tally, msg.method, msg.id, "in flight")
            elif msg.is_response and msg.id in tally.ids:
                tally.answered += 1
                if len(tally.ids) > 1:  # one request answered needs no list (`_unanswered`)
                    if tally.answered_ids is None:
                        tally.answered_ids = []
                    tally.answered_ids.append(msg.id)
                if tally.failed is None:
                    tally.failed = _failure(msg)
                    if tally.failed is not None and self._cancels:
                        self._answered_cancel(tally, msg.id)
                if msg.kind is _RESULT and tally.mode is _PASSTHROUGH:
                    self._input_required(obs.exchange, tally, msg)
            elif msg.is_response or msg.kind is _INVALID:
                _unmatched(tally, msg)
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
                elif _batched(tally):  # a batch whose first message was no request
                    _tell(tally, named or "?")
            elif _batched(tally):  # another request of a batch, named while its line has room
                _tell(tally, self._request_name(msg))
            if msg.id is not None:
                tally.ids.append(msg.id)
                if self.cuts.waiting:
                    self.cuts.id_reused(tally.session, msg.id)
            return
        if msg.method == "notifications/cancelled":
            self._client_cancelled(tally.session, msg.params.get("requestId"), obs.t)
        if tally.carried is None:
            tally.carried = self._name(msg, tally.session)
        elif _batched(tally):  # another message of a batch, named while its line has room
            _tell(tally, self._name(msg, tally.session))
        elif msg.is_response:  # not named, but what it answers is forgotten as naming it would
            self._asked.pop((tally.session, msg.id), None)

    def _session_answered(self, exchange: str, tally: _Open, status: int) -> None:
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

    def _closed(self, obs: ExchangeClosed, tally: _Open) -> ExchangeSummary | None:
        """The line of an exchange that closed with requests unanswered; None while it is held for its
        client's cancel, or, resumable, for the answer to a DELETE of its session on its way."""
        unanswered = _unanswered(tally)
        session = tally.session
        over = session in self._ended
        resumable = bool(unanswered) and not over and _resumable(tally, obs)
        if resumable and tally.event_ids:
            self.cuts.cut(obs.exchange, session, tally.event_ids, tuple(unanswered), obs.t)
        cancels = self._cancels
        if cancels and unanswered and session is not None:  # each id checked, then its cancel used
            uncancelled = [ident for ident in unanswered if (session, ident) not in cancels]
            for ident in unanswered:
                cancels.pop((session, ident), None)
            if not uncancelled:
                return _line(obs.exchange, tally, obs, self._redactor, CLIENT_CANCELLED)
            unanswered = uncancelled  # the line waits for the cancels still to come
        delete = self._deleting(session) if resumable else None
        if not unanswered or (
            delete is None and not awaits_cancel(obs.outcome, tally.opened.client_era, session)
        ):
            return self._followed(_line(obs.exchange, tally, obs, self._redactor, None, over), tally)
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

    def _answered_cancel(self, tally: _Open, ident: RequestId) -> None:
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
        elif any(open_.session == session and ident in _unanswered(open_) for open_ in self._open.values()):
            self._cancels[(session, ident)] = True

    def _release(self, held: _Held, ended: str | None) -> None:
        """Let a held line go: as cancelled (`ended`), or as it stands (None)."""
        session = held.tally.session
        assert session is not None  # only a session's call is held
        for ident in held.unanswered:
            self._held.pop((session, ident), None)
        over = session in self._ended
        line = _line(held.closed.exchange, held.tally, held.closed, self._redactor, ended, over)
        self.released.append((self._followed(line, held.tally), str(held.tally.mode.value)))

    def _followed(self, line: ExchangeSummary, tally: _Open) -> ExchangeSummary:
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

    def _ask(self, exchange: str, tally: _Open, method: str, asked: RequestId, how: str) -> None:
        carried = tally.carried or tally.method or tally.http_method
        ids, more = _shown_ids(tally.ids)
        self.asking.append(
            ServerAsked(exchange, tally.session, carried, ids, method, asked, tally.mode, how, more)
        )

    def _input_required(self, exchange: str, tally: _Open, msg: Message) -> None:
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
        self._open[obs.exchange] = _Open(
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

    def _resumes(self, obs: ExchangeOpened, tally: _Open) -> None:
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
            ids = _unanswered(cut) if cut is not None else None
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


def _failure(msg: Message) -> str | None:
    """What an answer says went wrong: a JSON-RPC error (with its code), or a tool's `isError` result."""
    if msg.kind is _ERROR:
        code = msg.error.get("code")
        return f"error {code}" if code is not None else "error"
    result = msg.result
    if isinstance(result, dict) and result.get("isError") is True:
        return "tool error"
    return None


def _unmatched(tally: _Open, msg: Message) -> None:
    """Keep what tells why a request of the exchange may go unanswered: the first response that
    answers none of them, or the first value that is no JSON-RPC message."""
    if tally.stray is None and tally.ids and is_stray(msg, tally.ids):
        tally.stray = msg
    elif msg.kind is _INVALID and tally.problem is None:
        tally.problem = msg.problem or "not JSON-RPC"


def _why_unanswered(tally: _Open, redactor: Redactor) -> str:
    """What the server sent instead of a response to the requests left unanswered, in the chain's words."""
    ids = _unanswered(tally)
    if tally.stray is not None:
        return redactor.scrub(unmatched(ids, tally.stray))
    return redactor.scrub(no_answer(ids, tally.status, tally.content_type, tally.messages_out, tally.problem))


def _trouble(tally: _Open, outcome: str | None, redactor: Redactor) -> str | None:
    """What went wrong, if anything: how the exchange ended (`outcome`, already judged by
    `unusual_end`), else what its answer or status says, or that a request it carried got none (in
    a body the proxy read: one relayed unread may have held the answer)."""
    unread = tally.not_inspected is not None
    if outcome is not None and not hung_up_after_unread(outcome, tally.opened.client_era, unread):
        return outcome
    if tally.failed is not None:
        return tally.failed
    status = tally.status
    if status is not None and status >= 400 and not declines_stream(tally.http_method, status):
        return f"HTTP {status}"
    if tally.answered < len(tally.ids) and tally.not_inspected is None:
        return _why_unanswered(tally, redactor)  # a stray answer, an empty body, a stream ended first
    return None


def _carried(tally: _Open, redactor: Redactor) -> str:
    """What the exchange carried; a plain HTTP exchange, or a GET that got no event stream, is named
    by its method and path (not a stream); a batch by how many messages it held and the first few."""
    kind = (tally.content_type or "").split(";", 1)[0].strip().lower()
    if tally.plain or (tally.http_method == "GET" and kind != "text/event-stream"):
        return f"{tally.http_method} {redactor.target(tally.path)}"
    if tally.batch is not None:
        shown, size = tally.batch[:1], 0
        for name in tally.batch[1:BATCH_SHOWN]:
            size += len(dumps(name))
            if size > CARRIED_BYTES:
                break
            shown.append(name)
        rest = tally.batched - len(shown)
        return f"batch of {tally.batched}: {', '.join(shown)}" + (f", +{rest} more" if rest > 0 else "")
    return tally.carried or tally.method or tally.http_method


def _batched(tally: _Open) -> bool:
    """Count another message of the exchange's batch (the first is what it `carried`); whether its
    line still names messages (`BATCH_TOLD`, `BATCH_BYTES`): only then is its name worth making."""
    batch = tally.batch
    if batch is None:
        first = tally.carried or "?"
        batch, tally.batched, tally.batch_bytes = [first], 1, len(dumps(first))
        tally.batch = batch
    tally.batched += 1
    return len(batch) < BATCH_TOLD and tally.batch_bytes < BATCH_BYTES


def _tell(tally: _Open, name: str) -> None:
    """Name the batch's latest message in its line, when the name fits in `BATCH_BYTES`."""
    size = tally.batch_bytes + len(dumps(name))
    if size <= BATCH_BYTES:
        assert tally.batch is not None
        tally.batch.append(name)
        tally.batch_bytes = size
    else:
        tally.batch_bytes = BATCH_BYTES  # full: no later name is made or told, so the order holds


def _told_batch(tally: _Open, batch: list[str]) -> tuple[str, ...]:
    """A batch's `batch` field: the messages named, then how many more it held."""
    rest = tally.batched - len(batch)
    return (*batch, f"+{rest} more") if rest > 0 else tuple(batch)


class _Held:
    """The line of a closed exchange waiting (`LATE_CANCEL_S`) for its client's `notifications/cancelled`,
    or for the answer to the DELETE of its session on its way (`delete`)."""

    __slots__ = ("closed", "delete", "tally", "unanswered")

    def __init__(
        self, closed: ExchangeClosed, tally: _Open, unanswered: list[RequestId], delete: str | None
    ) -> None:
        self.closed = closed
        self.tally = tally
        self.unanswered = unanswered
        self.delete = delete
        """The DELETE exchange whose answer says whether the session is over, if any."""


def _unanswered(tally: _Open) -> list[RequestId]:
    """The requests the exchange carried that got no answer on it."""
    if tally.answered >= len(tally.ids):
        return []
    if tally.answered == 0:
        return list(tally.ids)
    done = tally.answered_ids or ()
    return [ident for ident in tally.ids if ident not in done]


def _event_id(tally: _Open, sse_id: str) -> None:
    """An SSE event id went out on the exchange: kept while it carries requests (a resume names one)."""
    tally.last_sse_id = sse_id
    if not tally.ids:
        return
    kept = tally.event_ids
    if kept is None:
        tally.event_ids = [sse_id]
        return
    kept.append(sse_id)
    if len(kept) > EVENT_IDS_KEPT:
        del kept[0]


def _resumable(tally: _Open, closed: ExchangeClosed) -> bool:
    """Whether requests the exchange left unanswered may be answered on a stream the client resumes
    (as the chain judges: `awaits_resume`)."""
    if (tally.status or 0) >= 400 or tally.not_inspected is not None:
        return False
    passthrough = tally.mode is _PASSTHROUGH
    return awaits_resume(closed.outcome, tally.opened.client_era, passthrough, tally.last_sse_id)


def _line(
    exchange: str,
    tally: _Open,
    closed: ExchangeClosed,
    redactor: Redactor,
    cancelled: str | None = None,
    session_over: bool = False,
) -> ExchangeSummary:
    # How an exchange ends normally is no trouble: a GET stream ends when its client leaves or its
    # session is deleted, a client may close a response stream once each of its requests is answered,
    # a 2026-07-28 client closing it before then cancels them (`client_end`), and so does a legacy
    # client whose `notifications/cancelled` named each request left unanswered (`cancelled`). A stream
    # cut resumable is no trouble while its session lives (`session_over`: nothing can resume it then).
    asked = len(tally.ids)
    if tally.cancelled and cancelled is None:
        cancelled = CLIENT_CANCELLED
    ended = cancelled or (
        client_end(closed.outcome, tally.opened.client_era, asked, tally.answered)
        if tally.answered < asked
        else closed.outcome
    )
    outcome = unusual_end(ended, tally.http_method, len(tally.ids), tally.answered)
    resumable = not session_over and ended != CLIENT_CANCELLED and tally.answered < asked
    resumable = resumable and _resumable(tally, closed)
    ids, ids_more = _shown_ids(tally.ids)
    # Positional, in the fields' order: a class called with keywords costs a dict of them on 3.11.
    return ExchangeSummary(
        exchange,
        tally.http_method,
        tally.session,
        tally.method,
        tally.name,
        ids,
        tally.status,
        tally.content_type,
        tally.bytes_in,
        tally.bytes_out,
        tally.messages_out,
        round((closed.t - tally.started) * 1000, 3),  # duration_ms
        outcome,
        _carried(tally, redactor),
        None if ended == CLIENT_CANCELLED or resumable else _trouble(tally, outcome, redactor),
        "; ".join(tally.faults) if tally.faults else None,  # fault
        tally.transports[0],
        tally.transports[1],
        "; ".join(tally.intercepts) if tally.intercepts else None,  # intercept
        RESUMABLE if resumable else ended if outcome is None else None,  # end
        tally.not_inspected,
        redactor.target(tally.path) if tally.plain else None,
        None if tally.batch is None else _told_batch(tally, tally.batch),
        ids_more,
    )


def _shown_ids(ids: list[RequestId]) -> tuple[tuple[RequestId, ...], int]:
    """The request ids as the line shows them, and how many more there are: a client's string id
    past `SHOWN_TEXT_BOUND` bounded (the tally keeps the ids whole, to match their answers), and a
    batch's ids within `IDS_BYTES`."""
    if len(ids) > 1:
        return _shown_batch_ids(ids)
    if ids and type(ids[0]) is str and len(ids[0]) > SHOWN_TEXT_BOUND:
        return (shown_text(ids[0]),), 0
    return tuple(ids), 0


def _shown_batch_ids(ids: list[RequestId]) -> tuple[tuple[RequestId, ...], int]:
    """A batch's ids within `IDS_BYTES` (the first always), each bounded; how many more there are."""
    shown: list[RequestId] = []
    size = 0
    for ident in ids:
        one = shown_text(ident) if type(ident) is str else ident
        size += len(dumps(one))
        if shown and size > IDS_BYTES:
            break
        shown.append(one)
    return tuple(shown), len(ids) - len(shown)


def _intercept_text(obs: InterceptHeld | InterceptReleased) -> str | None:
    """`held 3.2 s, forward_edited by api` for a release, `not held: ...` for a message let go at once."""
    if isinstance(obs, InterceptReleased):
        return f"held {obs.held_ms / 1000:.1f} s, {obs.decision} by {obs.by}"
    return None if obs.applied else f"not held: {obs.detail}"
