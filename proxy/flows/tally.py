"""The round-trip tally: the log line of each client exchange, counted from its observations.

Every exchange gets one line when it closes, whether or not anyone watches and whether or not its
chain is built yet: the line describes the exchange by what it carried (its first request's method
and target, the request ids, the response head, bytes and messages out), never by the chain it joins,
so it is the same line either way. The exchange id in it is the one every message record of the
exchange carries, which links a line to its chain. No I/O, no clock (times are the observations').
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.flows.events import Direction
from proxy.flows.observations import (
    BytesOut,
    ExchangeClosed,
    ExchangeOpened,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.flows.redact import Redactor
from proxy.wire.jsonrpc import Kind, RequestId
from proxy.wire.mcp import target_name
from proxy.wire.values import value

STREAM_METHODS = {"GET": "GET stream", "DELETE": "DELETE session"}
"""What the line (and the chain) calls a GET or DELETE exchange."""


@value
class ExchangeSummary:
    """The round-trip log line of one HTTP exchange, as plain data for the transport to log."""

    exchange: str
    http_method: str
    session: str | None
    method: str | None
    name: str | None
    jsonrpc_ids: tuple[RequestId, ...]
    status: int | None
    content_type: str | None
    bytes_in: int
    bytes_out: int
    messages_out: int
    duration_ms: float
    outcome: str | None

    def log_fields(self, mode: str) -> dict[str, Any]:
        """The fields of the round-trip log line (already redacted), for an exchange served in `mode`."""
        return {
            "mode": mode,
            "exchange": self.exchange,
            "session": self.session,
            "http_method": self.http_method,
            "method": self.method,
            "name": self.name,
            "ids": list(self.jsonrpc_ids),
            "status": self.status,
            "content_type": self.content_type,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "messages_out": self.messages_out,
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
        }


@dataclass(slots=True)
class _Open:
    """What the line needs of an exchange still open."""

    http_method: str
    started: float
    session: str | None
    bytes_in: int
    method: str | None = None
    name: str | None = None
    ids: list[RequestId] = field(default_factory=list)
    status: int | None = None
    content_type: str | None = None
    bytes_out: int = 0
    messages_out: int = 0


class RoundTripTally:
    """Counts each open exchange's observations; hands back its line when it closes."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._open: dict[str, _Open] = {}

    @property
    def open_exchanges(self) -> int:
        """Exchanges opened and not yet closed (draining waits for them)."""
        return len(self._open)

    @property
    def open_streams(self) -> int:
        """Open GET exchanges (standalone streams: they end only when closed, so draining skips them)."""
        return sum(1 for tally in self._open.values() if tally.http_method == "GET")

    def is_open(self, exchange: str) -> bool:
        """Whether this exchange is open."""
        return exchange in self._open

    def observe_all(self, batch: Sequence[Observation]) -> ExchangeSummary | None:
        """Count observations in order; the line of an exchange one of them closes, if any."""
        line = None
        for obs in batch:
            line = self.observe(obs) or line
        return line

    def observe(self, obs: Observation) -> ExchangeSummary | None:
        """Count one observation; an `ExchangeClosed` of an open exchange returns its line."""
        if isinstance(obs, MessageSeen):
            self._message(obs)
        elif isinstance(obs, ExchangeOpened):
            self._opened(obs)
        elif isinstance(obs, ResponseHeadSeen):
            tally = self._open.get(obs.exchange)
            if tally is not None:
                tally.status, tally.content_type = obs.status, obs.content_type
        elif isinstance(obs, BytesOut):
            tally = self._open.get(obs.exchange)
            if tally is not None:
                tally.bytes_out += obs.size
        elif isinstance(obs, ExchangeClosed):
            tally = self._open.pop(obs.exchange, None)
            if tally is not None:
                return _line(obs.exchange, tally, obs)
        return None

    def _message(self, obs: MessageSeen) -> None:
        tally = self._open.get(obs.exchange)
        if tally is None:
            return
        msg = obs.msg
        if obs.direction is Direction.TO_CLIENT:
            tally.messages_out += 1
            tally.bytes_out += obs.size
        elif msg.kind is Kind.REQUEST:
            if tally.method is None:
                tally.method, tally.name = msg.method, target_name(msg.method, msg.params)
            if msg.id is not None:
                tally.ids.append(msg.id)

    def _opened(self, obs: ExchangeOpened) -> None:
        session = obs.session
        self._open[obs.exchange] = _Open(
            http_method=obs.http_method,
            method=STREAM_METHODS.get(obs.http_method),
            started=obs.t,
            session=session and self._redactor.token(session),
            bytes_in=obs.body_size,
        )


def _line(exchange: str, tally: _Open, closed: ExchangeClosed) -> ExchangeSummary:
    return ExchangeSummary(
        exchange=exchange,
        http_method=tally.http_method,
        session=tally.session,
        method=tally.method,
        name=tally.name,
        jsonrpc_ids=tuple(tally.ids),
        status=tally.status,
        content_type=tally.content_type,
        bytes_in=tally.bytes_in,
        bytes_out=tally.bytes_out,
        messages_out=tally.messages_out,
        duration_ms=round((closed.t - tally.started) * 1000, 3),
        outcome=closed.outcome,
    )
