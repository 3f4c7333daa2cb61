"""Building the records observers see: redacted, bounded MessageRecords, and the http-only record.

Every message the chain builder files becomes a MessageRecord here: its body passed through the
redactor and cut at the body limit, stamped with the injected clock and its chain's next sequence
number, carrying the exchange's HTTP head where one applies (a bridge's leg: the upstream's response
head to it). An exchange or leg whose response head carried no message gets one `http` record, so its
status still shows in its chain; so does the request head of a request without a body (a GET stream, a
DELETE), so its request line and headers show too. No I/O,
no clock of its own, no logging; storing and announcing the records is the builder's job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import IntEnum

from proxy.flows.events import Channel, Direction, HttpInfo, MessageRecord, Mode, Side
from proxy.flows.exchanges import Exchange
from proxy.flows.redact import Redactor
from proxy.flows.store import Chain
from proxy.wire.jsonrpc import Kind, Message


class Head(IntEnum):
    """Which HTTP head a message's record carries, for a reader that builds records later (`Filed`)."""

    NONE = 0
    REQUEST = 1
    """The request head of the message's exchange (filed by the exchange's opening itself: the `http`
    record of a request without a body)."""
    RESPONSE = 2
    """The exchange's response head (the latest one seen when the message was filed)."""
    HTTP_RELAYED = 3
    """An `http` record of a response head no message carried, the upstream's answer relayed."""
    HTTP_BRIDGED = 4
    """An `http` record of a response head no message carried, a bridge's own answer."""
    LEG_RESPONSE = 5
    """The upstream's response head to a bridge's leg, carried by the leg's first message back."""
    HTTP_LEG = 6
    """An `http` record of the upstream's response head to a leg that no message on the leg carried."""
    PLAIN_BODY = 7
    """A body of a plain HTTP exchange (a path other than the MCP endpoint), filed as it is
    (`as_plain_body`), with no head of its own."""
    PLAIN_RESPONSE = 8
    """A plain HTTP exchange's response body, carrying the exchange's response head."""


Filed = Callable[[str, int, int, Head], None]
"""Hears of each message a builder counted without recording it: chain id, sequence number, round,
and the head its record would carry; with the observation itself that is all a record is made of."""


def http_only_head(mode: Mode) -> Head:
    """The head of an exchange's `http` record: a bridge answers the client's HTTP itself, pass-through
    relays the upstream's answer."""
    return Head.HTTP_BRIDGED if mode in (Mode.LEGACY_TO_MRTR, Mode.MRTR_TO_LEGACY) else Head.HTTP_RELAYED


def http_side(mode: Mode) -> Side:
    """The side of an exchange's `http` records: `client` where a bridge serves the client's HTTP itself
    (the upstream never sees that request or answer), `both` where pass-through relays them."""
    return Side.CLIENT if http_only_head(mode) is Head.HTTP_BRIDGED else Side.BOTH


def as_plain_body(record: MessageRecord) -> MessageRecord:
    """A body of a plain HTTP exchange as its record shows it: kind `http`, the body as it is (JSON or
    text, redacted like any), with none of a JSON-RPC message's meaning (method, id, a problem with
    its envelope), since none was meant."""
    record.kind, record.method, record.jsonrpc_id, record.note = "http", None, None, None
    return record


def carries_head(chain: Chain, ex: Exchange, msg: Message, direction: Direction) -> Direction | None:
    """Which HTTP head a message on a client exchange carries (the request's, the response's, or none).

    Every request, a chain's first message and an exchange's first message to the server carry the
    request head; the first message back carries the response head. The exchange is marked as having
    recorded that head, whether or not a record is built: a builder that counts messages without
    recording them still needs the marks (an exchange whose head no message carried gets an `http`
    record when it closes).
    """
    if direction is Direction.TO_SERVER and (
        msg.kind is Kind.REQUEST or chain.summary.messages == 0 or not ex.request_recorded
    ):
        ex.request_recorded = True
        return Direction.TO_SERVER
    if direction is Direction.TO_CLIENT and not ex.head_recorded and ex.head is not None:
        ex.head_recorded = True
        return Direction.TO_CLIENT
    return None


class RecordMaker:
    """Makes one builder's records, so no observer ever sees a raw secret or an unbounded body."""

    def __init__(self, redactor: Redactor, *, clock: Callable[[], float], body_limit: int) -> None:
        self._redactor = redactor
        self._clock = clock
        self._body_limit = body_limit

    def on_exchange(
        self,
        chain: Chain,
        ex: Exchange,
        msg: Message,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side,
        sse_id: str | None,
        note: str | None,
    ) -> MessageRecord:
        """The record of a message on a client exchange, carrying the HTTP head it travelled with
        (`carries_head`: a notification or an answer on an exchange of its own carries its own, not its
        chain's). The server's leg of a message the proxy changed (side `upstream`) carries none: the
        heads are the client's exchange's, and stay with what the client sent and got."""
        http: HttpInfo | None = None
        carries = carries_head(chain, ex, msg, direction) if side is not Side.UPSTREAM else None
        if carries is Direction.TO_SERVER:
            http = self.request_head(ex.http_method, ex.path, ex.request_headers)
        elif carries is Direction.TO_CLIENT:
            http = ex.head
        record = self.message(
            chain, msg, exchange=ex.id, side=side, direction=direction, channel=channel, size=size, note=note
        )
        record.http, record.sse_id = http, sse_id and self._redactor.scrub(sse_id)
        return record

    def message(
        self,
        chain: Chain,
        msg: Message,
        *,
        exchange: str,
        side: Side,
        direction: Direction,
        channel: Channel,
        size: int,
        note: str | None,
    ) -> MessageRecord:
        """A redacted, bounded record of one message, the next of its chain."""
        return self.build(
            msg,
            seq=chain.next_seq(),
            ts=self._clock(),
            round_=chain.summary.rounds,
            exchange=exchange,
            side=side,
            direction=direction,
            channel=channel,
            size=size,
            note=note,
        )

    def build(
        self,
        msg: Message,
        *,
        seq: int,
        ts: float,
        round_: int,
        exchange: str,
        side: Side,
        direction: Direction,
        channel: Channel,
        size: int,
        note: str | None,
    ) -> MessageRecord:
        """A redacted, bounded record of one message, numbered and timed as given.

        Built by the validating constructor: for these flat models pydantic-core's validation is about
        twice as fast as `model_construct`, which fills fields in Python.
        """
        body, truncated, _ = self._redactor.body_bounded(msg.raw, self._body_limit)
        return MessageRecord(
            seq=seq,
            ts=ts,
            side=side,
            direction=direction,
            channel=channel,
            exchange=exchange,
            kind=msg.kind.value,
            jsonrpc_id=msg.id,
            method=msg.method,
            size=size,
            body=body,
            truncated=truncated,
            http=None,
            sse_id=None,
            round=round_,
            note=note or msg.problem,
        )

    def request_head(self, http_method: str, path: str, headers: Mapping[str, str]) -> HttpInfo:
        """The request head a record carries, redacted."""
        return HttpInfo(
            method=http_method, path=self._redactor.target(path), headers=self._redactor.headers(headers)
        )

    def response_head(self, status: int, content_type: str | None, headers: Mapping[str, str]) -> HttpInfo:
        """A response head as records carry it, redacted."""
        return HttpInfo(status=status, content_type=content_type, headers=self._redactor.headers(headers))

    def http_only(
        self,
        chain: Chain,
        exchange: str,
        head: HttpInfo,
        *,
        side: Side,
        direction: Direction = Direction.TO_CLIENT,
        ts: float | None = None,
    ) -> MessageRecord:
        """The record of an HTTP head that carried no message, so a bare status still shows.

        A response head (`to_client`) or the request head of a request without a body (`to_server`: a
        GET stream, a DELETE), so the request line and its headers show too. `side` is `client` when
        the proxy served that exchange itself (a bridge acknowledging a POST), `both` when it was relayed.
        `ts` is when the head came, for a response head filed only once its exchange closed (else now).
        """
        return self.build_http_only(
            exchange,
            head,
            seq=chain.next_seq(),
            ts=self._clock() if ts is None else ts,
            round_=chain.summary.rounds,
            side=side,
            direction=direction,
        )

    @staticmethod
    def build_http_only(
        exchange: str,
        head: HttpInfo,
        *,
        seq: int,
        ts: float,
        round_: int,
        side: Side,
        direction: Direction = Direction.TO_CLIENT,
    ) -> MessageRecord:
        """The `http` record of an HTTP head, numbered and timed as given."""
        return MessageRecord.model_construct(
            seq=seq,
            ts=ts,
            side=side,
            direction=direction,
            channel=Channel.HTTP,
            exchange=exchange,
            kind="http",
            jsonrpc_id=None,
            method=None,
            size=0,
            body=None,
            truncated=False,
            http=head,
            sse_id=None,
            round=round_,
            note=None,
        )
