"""A capture's message records by reference: where each record's parts are, built only when shown.

A record is the observation that filed it (a message, a leg's message, an invalid body, the opening
of a GET or DELETE, whose request head no message carries, or the close of an exchange or leg whose
response head no message carried) plus what the chain builder knew then: its sequence number in its
chain, its MRTR round, and which HTTP head it carries (the exchange's request head or its latest
response head, or the upstream's head to a leg, each an observation line of its own). An index pass
builds chains without records (`ChainBuilder(records=False, on_filed=...)`) and keeps for each
message a `Ref`: the positions of those lines and the builder's numbers. `RecordBuilder` reads the
lines back and makes the record with the builder's own `RecordMaker`, so it is the record an eager
build would have made.

Positions name a file and an offset in one integer (`position`), so a capture and its rotated parts
read as one. Everything read back was redacted when it was written. No aiohttp, structlog or textual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Final

import orjson

from proxy.flows.events import Channel, Direction, FlowEvent, MessageRecord, Side
from proxy.flows.observations import (
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegMessageSeen,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.flows.records import Head, RecordMaker, as_plain_body, http_side
from proxy.flows.redact import AlreadyRedacted
from proxy.record.capture import file_minor
from proxy.record.observations import decode
from proxy.record.old_header_text import headers_as_text, stores_latin1
from proxy.wire.jsonrpc import Kind, Message

OFFSET_BITS: Final = 40
"""Bits of a position that hold the offset in its file (files up to 1 TiB); the rest name the file."""

NO_LINE: Final = -1
"""The head position of a record that carries no head."""

Ref = tuple[int, int, int, int, int]
"""(position of the line that filed it, sequence number, round, `Head`, position of the head's line)."""


_PLAIN_HEADS: Final = {Head.PLAIN_BODY: Head.NONE, Head.PLAIN_RESPONSE: Head.RESPONSE}
"""The head a plain HTTP body's record carries, by the code its ref holds."""


def position(file_no: int, offset: int) -> int:
    """One integer for a line's place: which file of the capture (0 the oldest) and the offset in it."""
    return (file_no << OFFSET_BITS) | offset


class RefTaker:
    """Keeps the `Ref` of each message a builder files without recording it.

    The builder's `on_filed` hears of a message while its observation is built; `applied` (the
    replayer's `on_applied`) comes after, with the observation, and hands the finished ref to `keep`.
    `where` gives the position of the observation line being built. Only the exchanges open at one
    time are remembered.
    """

    def __init__(self, keep: Callable[[str, Ref], None], where: Callable[[], int]) -> None:
        self._keep = keep
        self._where = where
        self._pending: list[tuple[str, int, int, Head]] = []
        self._opened: dict[str, int] = {}
        """Exchange -> position of its `exchange_opened` line."""
        self._heads: dict[str, int] = {}
        """Exchange -> position of its latest `response_head` line."""
        self._leg_heads: dict[str, int] = {}
        """Leg -> position of its `leg_head` line."""

    def filed(self, chain_id: str, seq: int, round_: int, head: Head) -> None:
        """The builder counted a message (its observation is being built)."""
        self._pending.append((chain_id, seq, round_, head))

    def applied(self, obs: Observation, _events: list[FlowEvent], _chain: str | None) -> None:
        """The observation was built: its messages' refs are complete; its exchange's lines noted.

        An exchange's opening line is noted first: a GET's or DELETE's opening files the `http`
        record of its own request head, whose head line it is.
        """
        if isinstance(obs, ExchangeOpened):
            self._opened[obs.exchange] = self._where()
            self._heads.pop(obs.exchange, None)
        elif isinstance(obs, ResponseHeadSeen):
            self._heads[obs.exchange] = self._where()
        elif isinstance(obs, LegHeadSeen):
            self._leg_heads[obs.leg] = self._where()
        if self._pending:
            at = self._where()
            for chain_id, seq, round_, head in self._pending:
                self._keep(chain_id, (at, seq, round_, int(head), self._head_line(obs, head)))
            self._pending.clear()
        if isinstance(obs, ExchangeClosed):
            self._opened.pop(obs.exchange, None)
            self._heads.pop(obs.exchange, None)
        elif isinstance(obs, LegClosed):
            self._leg_heads.pop(obs.leg, None)

    def _head_line(self, obs: Observation, head: Head) -> int:
        if head is Head.NONE or head is Head.PLAIN_BODY:
            return NO_LINE
        if head in (Head.LEG_RESPONSE, Head.HTTP_LEG):
            return self._leg_heads.get(getattr(obs, "leg", ""), NO_LINE)
        exchange = getattr(obs, "exchange", None)
        if exchange is None:
            return NO_LINE
        table = self._opened if head is Head.REQUEST else self._heads
        return table.get(exchange, NO_LINE)


class RecordBuilder:
    """Builds the records of refs from the capture's lines (the files in the order they were indexed).

    The files are opened at once, so a capture renamed later (rotated) is still the one read; raises
    OSError when one cannot be opened.
    """

    def __init__(self, paths: Sequence[Path], *, body_limit: int = 65536) -> None:
        self._files: dict[int, IO[bytes]] = {}
        self._latin1_headers: set[int] = set()
        """The files that store header values as latin-1 readings (before 1.10): read as text."""
        try:
            for file_no, path in enumerate(paths):
                f = self._files[file_no] = Path(path).open("rb")  # noqa: SIM115 - held until close()
                if stores_latin1(file_minor(f)):
                    self._latin1_headers.add(file_no)
        except OSError:
            self.close()
            raise
        self._body_limit = body_limit
        self._maker = RecordMaker(AlreadyRedacted(), clock=lambda: 0.0, body_limit=body_limit)

    def build(self, ref: Sequence[int]) -> MessageRecord:
        """The record a ref stands for.

        Raises ValueError (orjson's decode error included), KeyError or TypeError when its lines are
        not what it names (the capture changed since it was indexed).
        """
        at, seq, round_, head_code, head_at = ref
        head = Head(head_code)
        plain = head in _PLAIN_HEADS
        if plain:
            head = _PLAIN_HEADS[head]
        obs = self._line(at)
        maker = self._maker
        http = None
        head_obs: Observation | None = None
        if head is not Head.NONE:
            if head_at < 0:
                raise ValueError(f"the record at {at} names no line for its HTTP head")
            head_obs = self._line(head_at)
            if isinstance(head_obs, ExchangeOpened):
                http = maker.request_head(head_obs.http_method, head_obs.path, head_obs.headers)
            elif isinstance(head_obs, ResponseHeadSeen | LegHeadSeen):
                http = maker.response_head(head_obs.status, head_obs.content_type, head_obs.headers)
            else:
                raise ValueError(f"line {head_at} is not an HTTP head")
        match obs:
            case MessageSeen():
                record = maker.build(
                    obs.msg,
                    seq=seq,
                    ts=obs.t,
                    round_=round_,
                    exchange=obs.exchange,
                    side=obs.side,
                    direction=obs.direction,
                    channel=obs.channel,
                    size=obs.size,
                    note=obs.note,
                )
                record.http, record.sse_id = http, obs.sse_id
                return as_plain_body(record) if plain else record
            case LegMessageSeen():
                record = maker.build(
                    obs.msg,
                    seq=seq,
                    ts=obs.t,
                    round_=round_,
                    exchange=obs.leg,
                    side=Side.UPSTREAM,
                    direction=obs.direction,
                    channel=obs.channel,
                    size=obs.size,
                    note=None,
                )
                record.http = http
                return record
            case InvalidBody():
                preview = obs.body[: self._body_limit].decode("utf-8", "replace")
                record = maker.build(
                    Message(Kind.INVALID, preview, problem=obs.problem),
                    seq=seq,
                    ts=obs.t,
                    round_=round_,
                    exchange=obs.exchange,
                    side=Side.BOTH,
                    direction=Direction.TO_SERVER,
                    channel=Channel.POST,
                    size=obs.size,
                    note=obs.problem,
                )
                record.http, record.sse_id = http, None
                return as_plain_body(record) if plain else record
            case ExchangeClosed() if http is not None and head_obs is not None:  # timed when the head came
                side = Side.CLIENT if head is Head.HTTP_BRIDGED else Side.BOTH
                return maker.build_http_only(
                    obs.exchange, http, seq=seq, ts=head_obs.t, round_=round_, side=side
                )
            case LegClosed() if http is not None and head_obs is not None:  # a head no leg message carried
                return maker.build_http_only(
                    obs.leg, http, seq=seq, ts=head_obs.t, round_=round_, side=Side.UPSTREAM
                )
            case ExchangeOpened() if http is not None:  # a GET's or DELETE's own request head
                return maker.build_http_only(
                    obs.exchange,
                    http,
                    seq=seq,
                    ts=obs.t,
                    round_=round_,
                    side=http_side(obs.mode),
                    direction=Direction.TO_SERVER,
                )
            case _:
                raise ValueError(f"line {at} files no record")

    def _line(self, at: int) -> Observation:
        file_no, offset = at >> OFFSET_BITS, at & ((1 << OFFSET_BITS) - 1)
        f = self._files.get(file_no)
        if f is None:
            raise ValueError(f"no capture file {file_no} for line {at}")
        f.seek(offset)
        line = orjson.loads(f.readline())
        return decode(headers_as_text(line) if file_no in self._latin1_headers else line)

    def close(self) -> None:
        """Close the capture files."""
        for f in self._files.values():
            f.close()
        self._files.clear()

    def __enter__(self) -> RecordBuilder:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
