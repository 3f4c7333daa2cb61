"""Building the records observers see: redacted, bounded MessageRecords, and the http-only record.

Every message the chain builder files becomes a MessageRecord here: its body passed through the
redactor and cut at the body limit, stamped with the injected clock and its chain's next sequence
number, carrying the exchange's HTTP head where one applies. An exchange whose response head carried
no message gets one `http` record, so its status still shows in its chain. No I/O, no clock of its own,
no logging; storing and announcing the records is the builder's job.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.flows.events import Channel, Direction, HttpInfo, MessageRecord, Side
from proxy.flows.exchanges import Exchange
from proxy.flows.redact import Redactor
from proxy.flows.store import Chain
from proxy.wire.jsonrpc import Kind, Message


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
        chain's)."""
        http: HttpInfo | None = None
        carries = carries_head(chain, ex, msg, direction)
        if carries is Direction.TO_SERVER:
            http = HttpInfo(
                method=ex.http_method,
                path=self._redactor.path(ex.path),
                headers=self._redactor.headers(ex.request_headers),
            )
        elif carries is Direction.TO_CLIENT:
            http = ex.head
        record = self.message(
            chain, msg, exchange=ex.id, side=side, direction=direction, channel=channel, size=size, note=note
        )
        record.http, record.sse_id = http, sse_id
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
        """A redacted, bounded record of one message.

        Built by the validating constructor: for these flat models pydantic-core's validation is about
        twice as fast as `model_construct`, which fills fields in Python.
        """
        body, truncated, _ = self._redactor.body_bounded(msg.raw, self._body_limit)
        return MessageRecord(
            seq=chain.next_seq(),
            ts=self._clock(),
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
            round=chain.summary.rounds,
            note=note or msg.problem,
        )

    def http_only(self, chain: Chain, exchange: str, head: HttpInfo, *, side: Side) -> MessageRecord:
        """The record of a response head that carried no message, so a bare status still shows.

        `side` is `client` when the proxy gave that answer itself (a bridge acknowledging a POST),
        `both` when the upstream's answer was relayed.
        """
        return MessageRecord.model_construct(
            seq=chain.next_seq(),
            ts=self._clock(),
            side=side,
            direction=Direction.TO_CLIENT,
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
            round=chain.summary.rounds,
            note=None,
        )
